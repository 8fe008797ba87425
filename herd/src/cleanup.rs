//! Exit-cleanup strategies: the per-thread bookkeeping a runtime does when a
//! thread ends, done five ways (`herd storm --cleanup ...`).
//!
//! # The work (same for every strategy but `none`)
//! At thread start ([`Cleanup::thread_start`]) a thread
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
//!   one compare-and-swap push, done by exitq's thread-local destructor
//!   (which glibc runs just before the pthread-key exit destructor, so
//!   storm's `exit_hook_*` figures do not include it; its exit latency
//!   does). The reclaimer runs the hooks of a pass one after another after
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
//!
//! # What is checked (reported as metrics of the run)
//! * `cleanup_violations`: every walk checks each entry it reaches; an
//!   entry already freed (state [`FREE`]) means a reader could have used
//!   freed memory. Entries are never given back to the allocator while the
//!   run lives (they are kept until the [`Cleanup`] is dropped), so a bug
//!   shows as a count, never as undefined behaviour. A walk longer than
//!   the number of entries ever registered (a cycle) counts too. Must be 0.
//! * `cleanups_missing` and `cleanups_repeated`: every registered thread's
//!   cleanup ran exactly once (per-entry counter); `cleanup_merge_errors`:
//!   the global counters equal the sum of every thread's contribution.
//!   All must be 0.

use std::cell::Cell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::result::Metric;

/// How the per-thread exit work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// No exit work at all.
    #[default]
    None,
    /// Everything under one std Mutex (the baseline).
    Locked,
    /// One lock-free push at exit; batched cleanup after a grace period.
    Exitq,
    /// Unlink, then a full grace period (synchronize) on every exit.
    Sync,
    /// Unlink, then an expedited grace period (membarrier) on every exit.
    Expedited,
}

impl Strategy {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Locked => "locked",
            Strategy::Exitq => "exitq",
            Strategy::Sync => "sync",
            Strategy::Expedited => "expedited",
        }
    }
}

/// `--cleanup` flags (flattened into `herd storm`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct CleanupArgs {
    /// Exit-cleanup strategy: none, locked, exitq, sync, expedited.
    #[arg(long, value_enum, default_value_t = Strategy::None)]
    pub cleanup: Strategy,
    /// Size of each thread's cleanup: words in its buffer and number of
    /// statistics counters merged at exit (1..=1048576).
    #[arg(long, default_value_t = DEFAULT_WORK, value_name = "WORDS")]
    pub cleanup_work: usize,
    /// Pause of the registry monitor between two walks, microseconds
    /// (0: walk back to back).
    #[arg(long, default_value_t = 100, value_name = "US")]
    pub cleanup_monitor_us: u64,
    /// exitq strategy: how often the idle reclaimer looks for exited
    /// threads' cleanups, milliseconds (1..=1000). Longer: bigger batches,
    /// fewer grace periods (each costs the reclaimer a timed futex wait),
    /// but dead threads stay registered longer.
    #[arg(long, default_value_t = DEFAULT_POLL_MS, value_name = "MS")]
    pub cleanup_poll_ms: u64,
}

/// Default `--cleanup-poll-ms` (exitq's own default is 10 ms; 50 ms
/// cuts the grace periods of a storm about fivefold, see docs/results-cleanup.md).
pub const DEFAULT_POLL_MS: u64 = 50;

/// Default `--cleanup-work`.
pub const DEFAULT_WORK: usize = 256;
/// Largest `--cleanup-work`.
pub const MAX_WORK: usize = 1 << 20;

impl Default for CleanupArgs {
    fn default() -> Self {
        CleanupArgs {
            cleanup: Strategy::None,
            cleanup_work: DEFAULT_WORK,
            cleanup_monitor_us: 100,
            cleanup_poll_ms: DEFAULT_POLL_MS,
        }
    }
}

impl CleanupArgs {
    /// Checks the values (usage errors name the flag).
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_WORK).contains(&self.cleanup_work) {
            return Err(usage(
                "--cleanup-work",
                format!("{} is not in 1..={MAX_WORK}", self.cleanup_work),
            ));
        }
        if !(1..=1000).contains(&self.cleanup_poll_ms) {
            return Err(usage(
                "--cleanup-poll-ms",
                format!("{} is not in 1..=1000", self.cleanup_poll_ms),
            ));
        }
        if self.cleanup_monitor_us > 1_000_000 {
            return Err(usage(
                "--cleanup-monitor-us",
                format!("{} is more than one second", self.cleanup_monitor_us),
            ));
        }
        Ok(())
    }
}

/// Entry state: linked in the registry.
pub const LIVE: u32 = 1;
/// Entry state: unlinked, readers that found it earlier may still hold it.
pub const UNLINKED: u32 = 2;
/// Entry state: freed; a reader reaching it is a violation.
pub const FREE: u32 = 3;

/// One registry entry (one live thread).
#[derive(Debug)]
struct Entry {
    /// Next entry; readers follow it without the lock.
    next: AtomicPtr<Entry>,
    /// Previous entry (writers only, under the writer lock).
    prev: AtomicPtr<Entry>,
    /// [`LIVE`], [`UNLINKED`] or [`FREE`].
    state: AtomicU32,
    /// Thread serial number.
    id: u64,
    /// Times this entry's cleanup ran (must end at 1).
    cleaned: AtomicU32,
}

/// A pointer to an entry owned by [`Writer::entries`].
#[derive(Debug, Clone, Copy)]
struct EntryRef(NonNull<Entry>);

// SAFETY: an EntryRef points into a Box owned by `Writer::entries`, which
// is never shrunk while the `Shared` lives; every field of `Entry` is
// either immutable after creation or atomic, so it may be used from any
// thread.
unsafe impl Send for EntryRef {}
// SAFETY: as above; shared access goes through atomics only.
unsafe impl Sync for EntryRef {}

impl EntryRef {
    fn get(&self) -> &Entry {
        // SAFETY: see the `Send` impl: the entry lives as long as `Shared`,
        // and every holder of an EntryRef holds an `Arc<Shared>`.
        unsafe { self.0.as_ref() }
    }
}

/// What the writer lock (or, for `locked`, the one lock) protects.
#[derive(Debug)]
struct Writer {
    /// First entry (readers load it with Acquire, see `walk`).
    head: *mut Entry,
    /// Every entry ever created: owns them until the run is dropped. Boxed
    /// so an entry's address stays put when the Vec grows (readers hold
    /// raw pointers to entries).
    #[allow(clippy::vec_box)]
    entries: Vec<Box<Entry>>,
    /// Returned buffers.
    pool: Vec<Box<[u64]>>,
    /// Global statistics: the sum of every cleaned thread's counters.
    stats: Vec<u64>,
}

// SAFETY: `head` points into `entries` (or is null) and is only used under
// the mutex that owns this struct.
unsafe impl Send for Writer {}

/// State shared by the hooks, the monitor and the reclaimer.
#[derive(Debug)]
struct Shared {
    strategy: Strategy,
    work: usize,
    monitor_pause: Duration,
    /// Lock-free read side: the published head (mirrors `Writer::head`).
    head: AtomicPtr<Entry>,
    writer: Mutex<Writer>,
    domain: Option<exitq::Domain>,
    next_id: AtomicU64,
    registered: AtomicU64,
    cleaned: AtomicU64,
    repeated: AtomicU64,
    /// Sum of every registered thread's statistics (what the global
    /// counters must add up to once all are cleaned).
    expected_sum: AtomicU64,
    violations: AtomicU64,
    walks: AtomicU64,
    walked_entries: AtomicU64,
    stop: AtomicBool,
}

/// A thread's own cleanup state, from start to cleanup.
#[derive(Debug)]
struct ThreadState {
    entry: EntryRef,
    buffer: Box<[u64]>,
    stats: Vec<u64>,
}

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
    monitor: Option<JoinHandle<()>>,
}

/// A handle for the per-thread hooks (cheap to clone, `Send + Sync`).
#[derive(Debug, Clone)]
pub struct Hooks {
    shared: Arc<Shared>,
}

/// What a run's cleanup did, checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The strategy.
    pub strategy: String,
    /// `--cleanup-work`.
    pub work: usize,
    /// Threads that registered.
    pub registered: u64,
    /// Cleanups that ran.
    pub cleaned: u64,
    /// Registered threads whose cleanup did not run.
    pub missing: u64,
    /// Cleanups that ran more than once for the same thread.
    pub repeated: u64,
    /// Global counters that differ from the sum of the contributions
    /// (0 or 1: one comparison of the totals).
    pub merge_errors: u64,
    /// Entries reached by a reader after they were freed (or cycles).
    pub violations: u64,
    /// Monitor walks.
    pub walks: u64,
    /// Entries visited per walk, on average.
    pub entries_per_walk: f64,
    /// exitq's counters (exitq, sync, expedited).
    pub exitq: Option<ExitqStats>,
}

/// The subset of [`exitq::Stats`] a comparison shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitqStats {
    /// Grace periods completed.
    pub grace_periods: u64,
    /// synchronize / synchronize_expedited calls.
    pub synchronize_calls: u64,
    /// Exit hooks that ran.
    pub exits_run: u64,
    /// Callbacks and hooks that ran.
    pub callbacks_run: u64,
    /// Reclaim passes that found work.
    pub passes: u64,
    /// Largest batch run after one grace period.
    pub max_batch: u64,
    /// Callbacks that panicked.
    pub callbacks_panicked: u64,
    /// Readers reported for stalling a grace period.
    pub stalls: u64,
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
            walks: AtomicU64::new(0),
            walked_entries: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let monitor = std::thread::Builder::new()
            .name("herd-monitor".into())
            .spawn(move || monitor(&s))
            .context("cannot start the registry monitor thread")?;
        Ok(Some(Cleanup {
            shared,
            monitor: Some(monitor),
        }))
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.shared.strategy
    }

    /// The handle the per-thread hooks use.
    pub fn hooks(&self) -> Hooks {
        Hooks {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The storm's per-thread hooks: `thread_start` at start, and (all
    /// strategies but exitq, whose push happens in exitq's own thread-local
    /// destructor) `thread_exit` in the exit destructor.
    pub fn spawn_hooks(&self) -> crate::spawn::Hooks {
        let start = self.hooks();
        let exit = self.hooks();
        crate::spawn::Hooks {
            on_start: Some(Box::new(move |_| start.thread_start())),
            on_exit: match self.shared.strategy {
                Strategy::Exitq | Strategy::None => None,
                _ => Some(Box::new(move |_| exit.thread_exit())),
            },
        }
    }

    /// Ends the run: waits until every exited thread's cleanup has run
    /// (exitq: `exit_barrier` then `barrier`), stops the monitor, and
    /// checks that every cleanup ran exactly once. Call after every thread
    /// that registered has exited.
    pub fn finish(mut self) -> Report {
        let s = &self.shared;
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
        // Relaxed loads: the exit hooks, the reclaimer and the monitor
        // happen-before this point (exit_barrier/barrier, join, and the
        // caller's wait for every exit destructor).
        let registered = s.registered.load(Ordering::Relaxed);
        let cleaned = s.cleaned.load(Ordering::Relaxed);
        let repeated = s.repeated.load(Ordering::Relaxed);
        let (missing, sum) = {
            let w = lock(&s.writer);
            let missing = w
                .entries
                .iter()
                .filter(|e| e.cleaned.load(Ordering::Relaxed) == 0)
                .count() as u64;
            (
                missing,
                w.stats.iter().fold(0u64, |a, &v| a.wrapping_add(v)),
            )
        };
        let expected = s.expected_sum.load(Ordering::Relaxed);
        let walks = s.walks.load(Ordering::Relaxed);
        let walked = s.walked_entries.load(Ordering::Relaxed);
        Report {
            strategy: s.strategy.name().into(),
            work: s.work,
            registered,
            cleaned,
            missing,
            repeated,
            merge_errors: u64::from(sum != expected),
            violations: s.violations.load(Ordering::Relaxed),
            walks,
            entries_per_walk: if walks == 0 {
                0.0
            } else {
                walked as f64 / walks as f64
            },
            exitq: s.domain.as_ref().map(|d| {
                let st = d.stats();
                ExitqStats {
                    grace_periods: st.grace_periods,
                    synchronize_calls: st.synchronize_calls,
                    exits_run: st.exits_run,
                    callbacks_run: st.callbacks_run,
                    passes: st.passes,
                    max_batch: st.max_batch,
                    callbacks_panicked: st.callbacks_panicked,
                    stalls: st.stalls,
                }
            }),
        }
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

impl Report {
    /// Flat metrics for the run's result. `exits`: threads that exited
    /// (for per-exit figures).
    pub fn metrics(&self, exits: u64) -> Vec<Metric> {
        let mut m = vec![
            Metric::lower("cleanup_violations", "count", self.violations as f64),
            Metric::lower("cleanups_missing", "count", self.missing as f64),
            Metric::lower("cleanups_repeated", "count", self.repeated as f64),
            Metric::lower("cleanup_merge_errors", "count", self.merge_errors as f64),
            Metric::info("cleanups_run", "count", self.cleaned as f64),
            Metric::info("monitor_walks", "count", self.walks as f64),
            Metric::info("monitor_entries_per_walk", "entries", self.entries_per_walk),
        ];
        if let Some(x) = &self.exitq {
            m.push(Metric::info(
                "grace_periods",
                "count",
                x.grace_periods as f64,
            ));
            m.push(Metric::info(
                "synchronize_calls",
                "count",
                x.synchronize_calls as f64,
            ));
            m.push(Metric::info(
                "reclaim_max_batch",
                "callbacks",
                x.max_batch as f64,
            ));
            if exits > 0 {
                m.push(Metric::lower(
                    "grace_periods_per_exit",
                    "count",
                    x.grace_periods as f64 / exits as f64,
                ));
            }
        }
        m
    }

    /// Problems to report loudly (each must be zero).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.violations > 0 {
            p.push(format!(
                "cleanup: {} registry reads reached a freed entry",
                self.violations
            ));
        }
        if self.missing > 0 {
            p.push(format!(
                "cleanup: {} threads were never cleaned up",
                self.missing
            ));
        }
        if self.repeated > 0 {
            p.push(format!("cleanup: {} cleanups ran twice", self.repeated));
        }
        if self.merge_errors > 0 {
            p.push("cleanup: the global statistics do not add up".into());
        }
        if let Some(x) = &self.exitq {
            if x.callbacks_panicked > 0 {
                p.push(format!(
                    "cleanup: {} exitq callbacks panicked",
                    x.callbacks_panicked
                ));
            }
        }
        p
    }
}

fn lock(m: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    // A panic while holding the lock is a bug that aborts herd (hooks must
    // not panic); poisoning carries no extra information here.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The per-thread contribution to statistics counter `i` of thread `id`.
fn contribution(id: u64, i: usize) -> u64 {
    1 + (id.wrapping_add(i as u64) % 7)
}

impl Hooks {
    /// Thread start: register in the registry, take a buffer, fill the
    /// statistics and arm the cleanup (exitq: `register_exit`; the others:
    /// a thread-local for [`Hooks::thread_exit`]).
    pub fn thread_start(&self) {
        let s = &self.shared;
        // Relaxed: a unique number is all that is needed.
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let stats: Vec<u64> = (0..s.work).map(|i| contribution(id, i)).collect();
        let sum = stats.iter().fold(0u64, |a, &v| a.wrapping_add(v));
        let entry = Box::new(Entry {
            next: AtomicPtr::new(ptr::null_mut()),
            prev: AtomicPtr::new(ptr::null_mut()),
            state: AtomicU32::new(LIVE),
            id,
            cleaned: AtomicU32::new(0),
        });
        let eref = EntryRef(NonNull::from(&*entry));
        let mut buffer = {
            let mut w = lock(&s.writer);
            let p = eref.0.as_ptr();
            let old = w.head;
            entry.next.store(old, Ordering::Relaxed);
            if let Some(old) = NonNull::new(old) {
                // SAFETY: `old` is an entry owned by `w.entries`, alive.
                unsafe { old.as_ref() }.prev.store(p, Ordering::Relaxed);
            }
            w.head = p;
            w.entries.push(entry);
            // Counted before the entry is published (the Release store
            // below), so a reader that reaches it also sees the count: a
            // walk is never longer than `registered` (see `walk`).
            // Relaxed: ordered by that Release store.
            s.registered.fetch_add(1, Ordering::Relaxed);
            // Release: publishes the entry's fields (and `next`) to readers
            // that load the head with Acquire in `walk`.
            s.head.store(p, Ordering::Release);
            w.pool.pop()
        }
        .unwrap_or_else(|| vec![0u64; s.work].into_boxed_slice());
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
        match s.strategy {
            Strategy::Exitq => {
                let domain = s.domain.as_ref().expect("exitq strategy has a domain");
                let shared = Arc::clone(s);
                domain.register_exit(move || cleanup_deferred(&shared, state));
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
    /// strategy's way. Nothing to do for exitq (its own thread-local
    /// destructor already pushed the hook) or on a thread that did not
    /// start.
    pub fn thread_exit(&self) {
        let p = STATE.with(|c| c.replace(ptr::null_mut()));
        if p.is_null() {
            return;
        }
        // SAFETY: `p` came from Box::into_raw in thread_start on this
        // thread and was taken out of the thread-local just now, so it is
        // reclaimed exactly once.
        let mut state = unsafe { Box::from_raw(p) };
        prepare(&mut state);
        let s = &self.shared;
        match s.strategy {
            Strategy::Locked => {
                let mut w = lock(&s.writer);
                let entry = state.entry;
                do_cleanup(s, &mut w, *state);
                // Readers walk under this same lock: none can hold the entry.
                entry.get().state.store(FREE, Ordering::Relaxed);
            }
            Strategy::Sync | Strategy::Expedited => {
                let entry = state.entry;
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
                // entry. Relaxed: the grace period orders it after every
                // read section that could have seen the entry.
                entry.get().state.store(FREE, Ordering::Relaxed);
            }
            Strategy::Exitq | Strategy::None => {}
        }
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
        d.defer(move || {
            let _keep = keep;
            entry.get().state.store(FREE, Ordering::Relaxed);
        });
    }
}

/// The part of a cleanup that touches only the thread's own memory: done
/// before taking any shared lock, in every strategy.
fn prepare(state: &mut ThreadState) {
    for word in state.buffer.iter_mut() {
        *word = 0;
    }
}

/// Adds one thread's (or one batch's) statistics into the global counters.
fn merge(w: &mut Writer, stats: &[u64]) {
    for (g, v) in w.stats.iter_mut().zip(stats) {
        *g = g.wrapping_add(*v);
    }
}

/// Under the writer lock: unlink the entry, return the buffer, count.
fn unlink_and_return(s: &Shared, w: &mut Writer, mut state: ThreadState) {
    let e = state.entry.get();
    let p = state.entry.0.as_ptr();
    let next = e.next.load(Ordering::Relaxed);
    let prev = e.prev.load(Ordering::Relaxed);
    if let Some(n) = NonNull::new(next) {
        // SAFETY: entries are owned by `w.entries` and never freed.
        unsafe { n.as_ref() }.prev.store(prev, Ordering::Relaxed);
    }
    match NonNull::new(prev) {
        // Release: a reader that reaches `prev` and then loads its `next`
        // with Acquire sees `next`'s fields (it was linked already).
        // SAFETY: as above.
        Some(pv) => unsafe { pv.as_ref() }.next.store(next, Ordering::Release),
        None => {
            debug_assert_eq!(w.head, p);
            w.head = next;
            // Release: pairs with the Acquire head load in `walk`.
            s.head.store(next, Ordering::Release);
        }
    }
    // The unlinked entry keeps its `next` so readers standing on it can
    // continue the walk (list_del_rcu does the same).
    e.state.store(UNLINKED, Ordering::Relaxed);
    w.pool.push(std::mem::take(&mut state.buffer));
    // Relaxed: counts read in `finish` after every cleanup happened-before.
    if e.cleaned.fetch_add(1, Ordering::Relaxed) == 0 {
        s.cleaned.fetch_add(1, Ordering::Relaxed);
    } else {
        s.repeated.fetch_add(1, Ordering::Relaxed);
    }
}

/// One thread's whole cleanup under the writer lock (locked, sync,
/// expedited): unlink, return the buffer, merge the statistics.
fn do_cleanup(s: &Shared, w: &mut Writer, state: ThreadState) {
    merge(w, &state.stats);
    unlink_and_return(s, w, state);
}

/// One walk of the registry: counts entries and violations.
fn walk(s: &Shared) -> (u64, u64) {
    // A walk can never be longer than the number of entries ever
    // registered; more means a cycle. Every entry reached was counted
    // before it was published (thread_start), and we reached it through
    // Acquire loads, so a fresh load of the count includes it.
    let mut bound = s.registered.load(Ordering::Relaxed);
    let (mut seen, mut bad) = (0u64, 0u64);
    // Acquire: pairs with the Release stores of head/next in thread_start
    // and do_cleanup, so an entry's fields are visible once reached.
    let mut p = s.head.load(Ordering::Acquire);
    while let Some(e) = NonNull::new(p) {
        // SAFETY: every pointer in the registry points into an entry owned
        // by `Writer::entries`, never deallocated while `s` lives; reading
        // a freed (recycled) entry is detected through its state, not UB.
        let e = unsafe { e.as_ref() };
        seen += 1;
        if e.state.load(Ordering::Relaxed) == FREE || e.id == 0 {
            bad += 1;
        }
        if seen > bound {
            bound = s.registered.load(Ordering::Relaxed);
            if seen > bound {
                bad += 1;
                break;
            }
        }
        p = e.next.load(Ordering::Acquire);
    }
    (seen, bad)
}

fn monitor(s: &Shared) {
    loop {
        if s.stop.load(Ordering::Relaxed) {
            break;
        }
        let (seen, bad) = match s.strategy {
            Strategy::Locked => {
                let _w = lock(&s.writer);
                walk(s)
            }
            _ => {
                let d = s.domain.as_ref().expect("RCU strategies have a domain");
                let _g = d.read();
                walk(s)
            }
        };
        // Relaxed: statistics, read after the monitor is joined.
        s.walks.fetch_add(1, Ordering::Relaxed);
        s.walked_entries.fetch_add(seen, Ordering::Relaxed);
        if bad > 0 {
            s.violations.fetch_add(bad, Ordering::Relaxed);
        }
        if s.monitor_pause.is_zero() {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(s.monitor_pause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(strategy: Strategy) -> CleanupArgs {
        CleanupArgs {
            cleanup: strategy,
            cleanup_work: 16,
            cleanup_monitor_us: 0,
            cleanup_poll_ms: 10,
        }
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
        for s in [
            Strategy::Locked,
            Strategy::Exitq,
            Strategy::Sync,
            Strategy::Expedited,
        ] {
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
        for s in [
            Strategy::Locked,
            Strategy::Exitq,
            Strategy::Sync,
            Strategy::Expedited,
        ] {
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
            cleanup_work: MAX_WORK + 1,
            ..CleanupArgs::default()
        };
        assert!(bad.validate().is_err());
        assert!(CleanupArgs::default().validate().is_ok());
    }
}
