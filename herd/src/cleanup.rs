//! Exit-cleanup strategies: the per-thread bookkeeping a runtime does when a
//! thread ends, done five ways of herd's own and through four reclamation
//! libraries (`herd storm --cleanup ...`, `herd agent --mode thread
//! --cleanup ...`).
//!
//! # The work (same for every strategy but `none`)
//! At thread start ([`Hooks::thread_start`]) a thread
//! * links an entry into a shared **registry of live threads** (a doubly
//!   linked list; writers serialise on a lock, readers walk the `next`
//!   pointers without it, the way the kernel's `list_del_rcu` lists work);
//! * takes a **buffer** of `--cleanup-work` words from a shared pool (or
//!   allocates one) and writes it;
//! * fills **per-thread statistics**: `--cleanup-work` counters.
//!
//! At thread exit (from the thread's exit destructor, which glibc runs on
//! `pthread_cancel` too) the *cleanup* undoes it: clear the buffer (the
//! thread's own memory: outside any lock, in every strategy), then unlink
//! the entry, return the buffer to the pool and add the statistics into the
//! global counters (shared: under the lock), and, once no reader can still
//! hold it, free the entry. A
//! **monitor** thread walks the registry the whole time (like a JVM
//! safepoint walking its thread list, or a reader of /proc), once every
//! `--cleanup-monitor-us`.
//!
//! # The strategies
//! * `none`: no registry, no cleanup (the kernel's own cost alone).
//! * `locked`: one `std::sync::Mutex` protects everything; the exiting
//!   thread does the whole cleanup under it, and the monitor walks under it
//!   too. The usual design, and the baseline: a burst of exits convoys on
//!   the lock (futex wait/wake).
//! * `exitq`: at start the thread registers the cleanup with
//!   [`exitq::Domain::register_exit`] (node preallocated). Its exit path is
//!   one compare-and-swap push, done by exitq's exit destructor (a pthread
//!   key's, which runs before the storm's exit destructor: that one defers
//!   itself to glibc's last round, `spawn::exit_destructor`; so storm's
//!   `exit_hook_*` figures do not include it; its exit latency does). The reclaimer runs the hooks of a pass one after another after
//!   one grace period: each does its thread-private part, then the shared
//!   part under the writer lock (which no exiting thread ever takes), and
//!   `defer`s the entry's free (one more grace period for the whole pass).
//!   The monitor
//!   reads under an exitq guard.
//! * `sync`: the exiting thread unlinks under the writer lock, then calls
//!   [`exitq::Domain::synchronize`] and frees its entry: one full grace
//!   period per exit, the shape that regressed in the kernel.
//! * `expedited`: the same with [`exitq::Domain::synchronize_expedited`]
//!   (membarrier: an IPI to every CPU running the process).
//! * `crossbeam-epoch`, `sdd`, `seize`, `urcu`: the exiting thread does
//!   what `sync` does under the writer lock, then hands the entry's free
//!   to the library (`defer_destroy`, dropping an `sdd::Owned`,
//!   `retire(.., reclaim::boxed)`, `call_rcu`), each library used the way
//!   its documentation recommends (`reclaimers.rs` and `with_*.rs`); the
//!   monitor reads in the library's read section. This exit work runs
//!   from a thread-local destructor of herd's (`exit_tls.rs`: the
//!   libraries' own thread-locals must still be alive). At the end of
//!   the run herd drives the library until every entry is freed (a
//!   library need not ever run a deferred free by itself) and reports
//!   how (`Report::drive`).
//!
//! # What is checked (reported as metrics of the run)
//! * `cleanup_violations`: every walk checks each entry it reaches; an
//!   entry already freed (state `FREE`) means a reader could have used
//!   freed memory. Entries are never given back to the allocator while the
//!   run lives (they are kept until the [`Cleanup`] is dropped), so a bug
//!   shows as a count, never as undefined behaviour. A walk longer than
//!   the number of entries ever registered (a cycle) counts too. Must be 0.
//! * `cleanups_missing` and `cleanups_repeated`: every registered thread's
//!   cleanup ran exactly once (per-entry counter); `cleanup_merge_errors`:
//!   the global counters equal the sum of every thread's contribution.
//!   All must be 0; so must `cleanup_frees_missing` (unlinked entries
//!   never freed, even after driving the reclaimer at the end).
//! * The timeline of each thread's cleanup (exit began, buffer and
//!   counters given back, entry freed) gives the cleanup-to-free latency
//!   and the memory exited threads still hold (`report.rs`).
//!
//! # Files
//! This file holds the strategies' entry points ([`Cleanup`] for the run,
//! [`Hooks`] for each thread); `args.rs` the flags; `registry.rs` the
//! list, its locking and the walk; `monitor.rs` the monitor thread;
//! `report.rs` the checks and their metrics, `timeline.rs` latency and
//! memory held; `reclaimers.rs` the libraries (`with_*.rs`, `liburcu.rs`,
//! `retired.rs`); `exit_tls.rs` where their exit work runs.

mod args;
mod exit_tls;
mod knobs;
mod liburcu;
mod monitor;
mod reclaimers;
mod registry;
mod report;
mod retired;
mod timeline;
mod with_crossbeam;
mod with_sdd;
mod with_seize;
mod with_urcu;

use std::cell::Cell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::spawn::now_ns;
pub use args::{CleanupArgs, Strategy};
pub use knobs::ignored_by_every;
use reclaimers::{Lib, LibThread};
use registry::{
    contribution, do_cleanup, free_entry, link, lock, prepare, Entry, EntryRef, Shared,
    ThreadState, Writer,
};
pub use report::Report;
use retired::Retired;

thread_local! {
    /// The calling thread's state for the strategies whose cleanup runs on
    /// the thread itself (locked, sync, expedited). A raw pointer in a
    /// `Cell`: no destructor, so it stays usable from the pthread-key exit
    /// destructor, which glibc runs after Rust's thread-local destructors.
    static STATE: Cell<*mut ThreadState> = const { Cell::new(ptr::null_mut()) };
}

/// One run's exit-cleanup machinery.
#[derive(Debug)]
pub struct Cleanup {
    shared: Arc<Shared>,
    lib: Option<Arc<Lib>>,
    monitor: Option<JoinHandle<()>>,
}

/// A handle for the per-thread hooks (cheap to clone, `Send + Sync`).
#[derive(Debug, Clone)]
pub struct Hooks {
    shared: Arc<Shared>,
    lib: Option<Arc<Lib>>,
}

impl Cleanup {
    /// Sets up a run's registry, pool, domain and monitor. `None` for
    /// `--cleanup none` (nothing to set up, no hooks).
    pub fn start(args: &CleanupArgs) -> Result<Option<Cleanup>> {
        args.validate()?;
        if args.cleanup == Strategy::None {
            return Ok(None);
        }
        let domain = match args.cleanup {
            Strategy::Exitq | Strategy::Sync | Strategy::Expedited => Some(
                exitq::Domain::builder()
                    .thread_name("herd-exitq")
                    .exit_poll(Some(Duration::from_millis(args.cleanup_poll_ms)))
                    .try_build()
                    .context("cannot start the exitq reclaimer thread")?,
            ),
            _ => None,
        };
        let lib = Lib::start(args)?.map(Arc::new);
        let shared = Arc::new(Shared {
            strategy: args.cleanup,
            work: args.cleanup_work,
            monitor_pause: Duration::from_micros(args.cleanup_monitor_us),
            head: AtomicPtr::new(ptr::null_mut()),
            writer: Mutex::new(Writer {
                head: ptr::null_mut(),
                entries: Vec::new(),
                pool: Vec::new(),
                stats: vec![0; args.cleanup_work],
            }),
            domain,
            next_id: AtomicU64::new(1),
            registered: AtomicU64::new(0),
            cleaned: AtomicU64::new(0),
            repeated: AtomicU64::new(0),
            expected_sum: AtomicU64::new(0),
            violations: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            freed_at_finish: AtomicU64::new(0),
            lib_exits: AtomicU64::new(0),
            walks: AtomicU64::new(0),
            walked_entries: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let (s, l) = (Arc::clone(&shared), lib.clone());
        let monitor = std::thread::Builder::new()
            .name("herd-monitor".into())
            .spawn(move || monitor::run(&s, l.as_deref()))
            .context("cannot start the registry monitor thread")?;
        Ok(Some(Cleanup {
            shared,
            lib,
            monitor: Some(monitor),
        }))
    }

    /// The handle the per-thread hooks use.
    pub fn hooks(&self) -> Hooks {
        Hooks {
            shared: Arc::clone(&self.shared),
            lib: self.lib.clone(),
        }
    }

    /// The storm's per-thread hooks: `thread_start` at start, and (for
    /// locked, sync and expedited; exitq and the libraries do their exit
    /// work in thread-local destructors, see `exit_tls.rs`) `thread_exit`
    /// in the exit destructor.
    pub fn spawn_hooks(&self) -> crate::spawn::Hooks {
        let start = self.hooks();
        let exit = self.hooks();
        crate::spawn::Hooks {
            on_start: Some(Box::new(move |_| start.thread_start())),
            on_exit: match self.shared.strategy {
                Strategy::Locked | Strategy::Sync | Strategy::Expedited => {
                    Some(Box::new(move |_| exit.thread_exit()))
                }
                _ => None,
            },
        }
    }

    /// Ends the run: waits until every exited thread's cleanup has run
    /// (exitq: `exit_barrier` then `barrier`), stops the monitor, drives a
    /// library strategy's reclaimer until every entry is freed, and checks
    /// that every cleanup ran exactly once. Call after every thread that
    /// registered has exited.
    pub fn finish(mut self) -> Report {
        let s = &self.shared;
        let t_finish = now_ns();
        if let Some(d) = &s.domain {
            // Exit hooks, then the entry frees they deferred.
            d.exit_barrier();
            d.barrier();
        }
        s.stop.store(true, Ordering::Relaxed);
        if let Some(m) = self.monitor.take() {
            // A panic in the monitor would be a bug; the counts stay valid.
            let _ = m.join();
        }
        // Acquire: pairs with the Release increments of `free_entry`, so the
        // frees counted (and their time stamps) are visible. `cleaned` is
        // final: every cleanup happened-before this call (the caller waited
        // for every exit, exitq's barriers above), so Relaxed.
        let all_freed = || s.freed.load(Ordering::Acquire) >= s.cleaned.load(Ordering::Relaxed);
        let freed_before = s.freed.load(Ordering::Acquire);
        let drive = self.lib.as_ref().map(|lib| {
            // Every registered thread has left the library (Acquire: pairs
            // with the Release increment after its exit work) and the
            // monitor is joined.
            let quiescent =
                s.lib_exits.load(Ordering::Acquire) == s.registered.load(Ordering::Relaxed);
            lib.drive(all_freed, quiescent)
        });
        let at_finish = s.freed.load(Ordering::Acquire).saturating_sub(freed_before);
        s.freed_at_finish.store(at_finish, Ordering::Relaxed);
        report::of(s, drive, t_finish)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
    }
}

impl Hooks {
    /// Thread start: register in the registry, take a buffer, fill the
    /// statistics and arm the cleanup (exitq: `register_exit`; a library:
    /// register with it and arm herd's exit destructor; the others: a
    /// thread-local for [`Hooks::thread_exit`]).
    pub fn thread_start(&self) {
        let s = &self.shared;
        // Relaxed: a unique number is all that is needed.
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let stats: Vec<u64> = (0..s.work).map(|i| contribution(id, i)).collect();
        let sum = stats.iter().fold(0u64, |a, &v| a.wrapping_add(v));
        let entry = Box::new(Entry::new(id));
        let eref = EntryRef(NonNull::from(&*entry));
        let mut buffer = link(s, entry).unwrap_or_else(|| vec![0u64; s.work].into_boxed_slice());
        for (i, word) in buffer.iter_mut().enumerate() {
            *word = id ^ i as u64;
        }
        // Relaxed: read in `finish`, after every hook has happened-before.
        s.expected_sum.fetch_add(sum, Ordering::Relaxed);
        let state = ThreadState {
            entry: eref,
            buffer,
            stats,
        };
        match (s.strategy, &self.lib) {
            (Strategy::Exitq, _) => {
                let domain = s.domain.as_ref().expect("exitq strategy has a domain");
                let shared = Arc::clone(s);
                domain.register_exit(move || cleanup_deferred(&shared, state));
                // Armed after exitq's own thread-local: runs just before
                // exitq's destructor pushes the cleanup (exit_tls.rs). It
                // holds the run too, as every holder of an EntryRef must.
                let keep = Arc::clone(s);
                exit_tls::arm(Box::new(move || {
                    eref.get().exit_ns.store(now_ns(), Ordering::Relaxed);
                    drop(keep);
                }));
            }
            (_, Some(lib)) => {
                // The library's thread-locals first, then herd's exit
                // destructor, which therefore runs before theirs.
                let thread = lib.register(Retired::new(eref, Arc::clone(s)));
                let hooks = self.clone();
                exit_tls::arm(Box::new(move || hooks.library_exit(state, thread)));
            }
            _ => {
                let p = Box::into_raw(Box::new(state));
                STATE.with(|c| {
                    let old = c.replace(p);
                    debug_assert!(old.is_null(), "thread_start twice on one thread");
                });
            }
        }
    }

    /// Thread exit (from the exit destructor): runs the cleanup the
    /// strategy's way. Nothing to do for exitq and the library strategies
    /// (thread-local destructors do their exit work, see `exit_tls.rs`) or
    /// on a thread that did not start.
    pub fn thread_exit(&self) {
        let p = STATE.with(|c| c.replace(ptr::null_mut()));
        if p.is_null() {
            return;
        }
        let t0 = now_ns();
        // SAFETY: `p` came from Box::into_raw in thread_start on this
        // thread and was taken out of the thread-local just now, so it is
        // reclaimed exactly once.
        let mut state = unsafe { Box::from_raw(p) };
        let entry = state.entry;
        entry.get().exit_ns.store(t0, Ordering::Relaxed);
        prepare(&mut state);
        let s = &self.shared;
        match s.strategy {
            Strategy::Locked => {
                let mut w = lock(&s.writer);
                do_cleanup(s, &mut w, *state);
                // Readers walk under this same lock: none can hold the entry.
                free_entry(s, entry);
            }
            Strategy::Sync | Strategy::Expedited => {
                {
                    let mut w = lock(&s.writer);
                    do_cleanup(s, &mut w, *state);
                }
                let d = s.domain.as_ref().expect("sync strategies have a domain");
                if s.strategy == Strategy::Sync {
                    d.synchronize();
                } else {
                    d.synchronize_expedited();
                }
                // After the grace period no reader holds the unlinked
                // entry (the grace period orders the free after every read
                // section that could have seen it).
                free_entry(s, entry);
            }
            _ => {}
        }
        let e = entry.get();
        e.exit_work_ns.store(now_ns() - t0, Ordering::Relaxed);
    }

    /// A library strategy's exit work, from herd's thread-local destructor
    /// (`exit_tls.rs`): the thread-private part, then the unlink under the
    /// writer lock inside the library's protection, then the retire.
    fn library_exit(&self, mut state: ThreadState, thread: LibThread) {
        let t0 = now_ns();
        let entry = state.entry;
        entry.get().exit_ns.store(t0, Ordering::Relaxed);
        prepare(&mut state);
        let s = &self.shared;
        let lib = self
            .lib
            .as_ref()
            .expect("library strategies have a library");
        lib.exit(thread, || {
            let mut w = lock(&s.writer);
            do_cleanup(s, &mut w, state);
        });
        entry
            .get()
            .exit_work_ns
            .store(now_ns() - t0, Ordering::Relaxed);
        // Release: pairs with the Acquire load in `finish`.
        s.lib_exits.fetch_add(1, Ordering::Release);
    }
}

/// The exitq exit hook: runs on the reclaimer after a grace period, one
/// hook after another for a whole pass. Prepares the cleanup outside any
/// shared lock, does the shared part under the writer lock (contended only
/// by thread starts: no exiting thread ever takes it), and frees the entry
/// with `defer` (readers that found it before the unlink may still hold
/// it): the frees of a pass wait for one grace period together.
fn cleanup_deferred(s: &Arc<Shared>, mut state: ThreadState) {
    prepare(&mut state);
    let entry = state.entry;
    {
        let mut w = lock(&s.writer);
        do_cleanup(s, &mut w, state);
    }
    let keep = Arc::clone(s);
    if let Some(d) = &s.domain {
        d.defer(move || free_entry(&keep, entry));
    }
}

/// Tests: whether a missing liburcu fails rather than skips (as root,
/// where the test command installs it, or under `HERD_TEST_STRICT=1`).
#[cfg(test)]
fn must_have_liburcu() -> bool {
    nix::unistd::geteuid().is_root() || std::env::var("HERD_TEST_STRICT").as_deref() == Ok("1")
}

#[cfg(test)]
mod tests {
    use super::registry::{FREE, LIVE};
    use super::*;
    use registry::walk;

    fn args(strategy: Strategy) -> CleanupArgs {
        CleanupArgs {
            cleanup: strategy,
            cleanup_work: 16,
            cleanup_monitor_us: 0,
            cleanup_poll_ms: 10,
            seize_batch: Some(8),
        }
    }

    /// Every strategy but `none`; `urcu` only where liburcu loads (as
    /// root, which the test command is, a missing liburcu fails).
    fn strategies() -> Vec<Strategy> {
        let mut v: Vec<Strategy> = knobs::ALL_BUT_NONE
            .iter()
            .copied()
            .filter(|s| *s != Strategy::Urcu)
            .collect();
        match liburcu::load() {
            Ok(_) => v.push(Strategy::Urcu),
            Err(e) if must_have_liburcu() => panic!("{e}"),
            Err(e) => eprintln!("SKIPPED: urcu, liburcu is not installed (not root): {e}"),
        }
        v
    }

    /// `threads` threads each start, do a little, and exit (running the
    /// exit hook the way storm's exit destructor does).
    fn run(strategy: Strategy, threads: usize) -> Report {
        let c = Cleanup::start(&args(strategy)).unwrap().unwrap();
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let h = c.hooks();
                std::thread::spawn(move || {
                    h.thread_start();
                    std::thread::yield_now();
                    h.thread_exit();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        c.finish()
    }

    #[test]
    fn every_strategy_cleans_each_thread_once() {
        for s in strategies() {
            let r = run(s, 64);
            assert_eq!(r.registered, 64, "{s:?}: {r:?}");
            assert_eq!(r.cleaned, 64, "{s:?}: {r:?}");
            assert_eq!(
                (r.missing, r.repeated, r.merge_errors),
                (0, 0, 0),
                "{s:?}: {r:?}"
            );
            assert_eq!(r.violations, 0, "{s:?}: {r:?}");
            assert!(r.walks > 0, "{s:?}: the monitor never walked");
            assert!(r.problems().is_empty(), "{s:?}: {:?}", r.problems());
            assert_eq!(r.timeline.frees_missing, 0, "{s:?}: {r:?}");
            assert_eq!(r.timeline.exits, 64, "{s:?}: {r:?}");
            // Only the library strategies drive a reclamation library.
            let library = matches!(
                s,
                Strategy::CrossbeamEpoch | Strategy::Sdd | Strategy::Seize | Strategy::Urcu
            );
            assert_eq!(r.drive.is_some(), library, "{s:?}: {r:?}");
            if s == Strategy::Exitq {
                assert_eq!(r.exitq.unwrap().exits_run, 64, "{r:?}");
            }
            if s == Strategy::Sync {
                assert!(r.exitq.unwrap().synchronize_calls >= 64, "{r:?}");
            }
        }
    }

    #[test]
    fn overlapping_bursts_under_a_busy_monitor() {
        // Waves of threads that are all alive at once, then exit together
        // (the herd), while the monitor walks back to back.
        const WAVES: usize = if cfg!(debug_assertions) { 4 } else { 20 };
        const PER_WAVE: usize = 50;
        for s in strategies() {
            let c = Cleanup::start(&args(s)).unwrap().unwrap();
            for _ in 0..WAVES {
                let barrier = Arc::new(std::sync::Barrier::new(PER_WAVE));
                let handles: Vec<_> = (0..PER_WAVE)
                    .map(|_| {
                        let (h, b) = (c.hooks(), Arc::clone(&barrier));
                        std::thread::spawn(move || {
                            h.thread_start();
                            b.wait();
                            h.thread_exit();
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().unwrap();
                }
            }
            let r = c.finish();
            let n = (WAVES * PER_WAVE) as u64;
            assert_eq!((r.registered, r.cleaned), (n, n), "{s:?}: {r:?}");
            assert!(r.problems().is_empty(), "{s:?}: {:?}", r.problems());
        }
    }

    #[test]
    fn none_sets_up_nothing() {
        assert!(Cleanup::start(&args(Strategy::None)).unwrap().is_none());
    }

    #[test]
    fn missing_cleanups_are_counted() {
        // Threads that start but whose exit hook never runs (locked: the
        // hook is storm's to call) must show as missing, not vanish.
        let c = Cleanup::start(&args(Strategy::Locked)).unwrap().unwrap();
        let h = c.hooks();
        std::thread::spawn(move || h.thread_start()).join().unwrap();
        let r = c.finish();
        assert_eq!((r.registered, r.cleaned, r.missing), (1, 0, 1));
        assert_eq!(r.merge_errors, 1);
        assert_eq!(r.problems().len(), 2, "{:?}", r.problems());
    }

    #[test]
    fn a_freed_entry_in_the_registry_is_a_violation() {
        // Break the rule on purpose: free a still-linked entry and walk.
        let c = Cleanup::start(&CleanupArgs {
            cleanup_monitor_us: 1_000_000,
            ..args(Strategy::Locked)
        })
        .unwrap()
        .unwrap();
        let h = c.hooks();
        h.thread_start();
        let (seen, bad) = walk(&c.shared);
        assert_eq!((seen, bad), (1, 0));
        let head = c.shared.head.load(Ordering::Acquire);
        // SAFETY: the entry is owned by the writer and alive.
        unsafe { &*head }.state.store(FREE, Ordering::Relaxed);
        assert_eq!(walk(&c.shared), (1, 1));
        // SAFETY: as above.
        unsafe { &*head }.state.store(LIVE, Ordering::Relaxed);
        h.thread_exit();
        let r = c.finish();
        assert_eq!(r.cleaned, 1);
    }

    #[test]
    fn validation() {
        let bad = CleanupArgs {
            cleanup_work: 0,
            ..CleanupArgs::default()
        };
        assert!(bad.validate().is_err());
        let bad = CleanupArgs {
            cleanup_work: args::MAX_WORK + 1,
            ..CleanupArgs::default()
        };
        assert!(bad.validate().is_err());
        for seize_batch in [0, args::MAX_SEIZE_BATCH + 1] {
            let bad = CleanupArgs {
                seize_batch: Some(seize_batch),
                ..CleanupArgs::default()
            };
            assert!(bad.validate().is_err(), "{seize_batch}");
        }
        assert!(CleanupArgs::default().validate().is_ok());
    }
}
