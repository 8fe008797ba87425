//! Shared by the pool integration tests (`tokio_pool.rs`, `rayon_pool.rs`):
//! per-worker state registered with exitq at worker start and handed over
//! at worker exit, counters that prove each cleanup ran exactly once, and
//! a per-thread syscall counter for the exit path.
#![allow(dead_code)] // each test file uses its own subset

use std::cell::RefCell;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use exitq::{Domain, RcuCell};
use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};

#[path = "../skip_util/mod.rs"]
mod skip_util;

/// Most worker threads a test may start (slots of `Pools::cleaned`).
pub const MAX_WORKERS: usize = 4096;

/// Prints straight to the process's stderr (libtest captures `eprintln!`
/// of passing tests; a skip must be seen in CI logs).
pub fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// One worker's state: what it did, merged into the totals by its cleanup.
#[derive(Debug)]
pub struct Shard {
    pub id: usize,
    pub jobs: AtomicU64,
}

thread_local! {
    /// The calling worker's shard (set by `Pools::worker_start`).
    static SHARD: RefCell<Option<Arc<Shard>>> = const { RefCell::new(None) };
}

/// Counts a job on the calling worker's shard.
pub fn count_job() {
    SHARD.with_borrow(|s| {
        let shard = s.as_ref().expect("jobs run on the pool's threads");
        shard.jobs.fetch_add(1, Ordering::Relaxed);
    });
}

/// What the pool's hooks share: the domain, the live shards (an RCU
/// registry readers can walk), the totals of retired workers, and the
/// counts that prove each cleanup ran once.
pub struct Pools {
    pub domain: Domain,
    pub live: RcuCell<Vec<Arc<Shard>>>,
    pub retired_jobs: AtomicU64,
    pub started: AtomicUsize,
    pub stopped: AtomicUsize,
    /// Cleanups run, per worker id (each must end at exactly 1).
    pub cleaned: Vec<AtomicU32>,
    /// Exit paths whose exitq part made a syscall beyond the baseline.
    pub exit_syscalls: AtomicU64,
    /// Exit paths measured (0 when the counter is unavailable).
    pub exits_measured: AtomicUsize,
}

impl Pools {
    pub fn new() -> Arc<Pools> {
        // The default flush latency (10 ms): the reclaimer's idle steal
        // may meet a worker's exit, which must make no syscall then too
        // (until 2026-12-06 the exit waited for the stealer, spinning and
        // then yielding, and `check_exit_syscalls` failed once in a dozen
        // loaded rayon runs; these tests ran with an hour's flush latency
        // meanwhile; now the exit hands itself off: `handshake`).
        let domain = Domain::builder()
            .exit_poll(Some(Duration::from_millis(1)))
            .build();
        Arc::new(Pools {
            live: RcuCell::new(&domain, Vec::new()),
            domain,
            retired_jobs: AtomicU64::new(0),
            started: AtomicUsize::new(0),
            stopped: AtomicUsize::new(0),
            cleaned: (0..MAX_WORKERS).map(|_| AtomicU32::new(0)).collect(),
            exit_syscalls: AtomicU64::new(0),
            exits_measured: AtomicUsize::new(0),
        })
    }

    /// A worker's start: its shard joins the registry and the worker's
    /// thread-local, and its cleanup is registered (allocated now, so the
    /// exit path does not).
    pub fn worker_start(self: &Arc<Pools>) {
        let id = self.started.fetch_add(1, Ordering::Relaxed);
        assert!(id < MAX_WORKERS, "more workers than the test expects");
        let shard = Arc::new(Shard {
            id,
            jobs: AtomicU64::new(0),
        });
        self.live.update(|v| {
            let mut v = v.clone();
            v.push(shard.clone());
            v
        });
        let (pools, mine) = (self.clone(), shard.clone());
        self.domain.register_exit(move || {
            pools
                .live
                .update(|v| v.iter().filter(|s| s.id != mine.id).cloned().collect());
            pools
                .retired_jobs
                .fetch_add(mine.jobs.load(Ordering::Relaxed), Ordering::Relaxed);
            pools.cleaned[mine.id].fetch_add(1, Ordering::Relaxed);
        });
        SHARD.set(Some(shard));
    }

    /// A worker's stop: hands its hooks (and deferred work) to exitq now,
    /// and counts the syscalls that takes when the counter is available.
    /// Release: the test's Acquire load of `stopped` then happens-after
    /// the hand-over (so `exit_barrier` covers it).
    pub fn worker_stop(&self, counter: Option<&mut SyscallCounter>) {
        match counter {
            Some(c) => {
                let extra = c.extra(|| self.domain.retire_thread());
                self.exit_syscalls.fetch_add(extra, Ordering::Relaxed);
                self.exits_measured.fetch_add(1, Ordering::Relaxed);
            }
            None => self.domain.retire_thread(),
        }
        self.stopped.fetch_add(1, Ordering::Release);
    }

    /// Jobs counted by live workers and retired ones, read under one guard.
    pub fn total_jobs(&self) -> u64 {
        let live: u64 = self
            .live
            .with(|v| v.iter().map(|s| s.jobs.load(Ordering::Relaxed)).sum());
        live + self.retired_jobs.load(Ordering::Relaxed)
    }

    /// Waits until `n` workers have stopped (the pool retires them on its
    /// own schedule), failing after a minute.
    pub fn wait_stopped(&self, n: usize, what: &str) {
        let start = Instant::now();
        while self.stopped.load(Ordering::Acquire) < n {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}: {} of {n} workers stopped after a minute",
                self.stopped.load(Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every started worker's cleanup ran exactly once (after
    /// `exit_barrier`, once they all stopped).
    pub fn check_cleanups(&self, what: &str) {
        self.domain.exit_barrier();
        let started = self.started.load(Ordering::Relaxed);
        for (id, c) in self.cleaned.iter().enumerate() {
            let runs = c.load(Ordering::Relaxed);
            let want = u32::from(id < started);
            assert_eq!(runs, want, "{what}: worker {id}'s cleanup ran {runs} times");
        }
        assert_eq!(
            self.live.with(|v| v.len()),
            0,
            "{what}: every shard unregistered"
        );
    }

    /// The exit paths made no syscall (when they could be measured).
    pub fn check_exit_syscalls(&self, what: &str) {
        let measured = self.exits_measured.load(Ordering::Relaxed);
        if measured == 0 {
            return; // the counter said why it is unavailable
        }
        assert_eq!(
            self.exit_syscalls.load(Ordering::Relaxed),
            0,
            "{what}: retire_thread made syscalls on {measured} measured exit paths"
        );
        say(&format!(
            "{what}: {measured} exit paths measured, no syscall in exitq's part"
        ));
    }
}

/// Counts the calling thread's syscalls (`raw_syscalls:sys_enter`) around
/// a closure, against the baseline of an empty one (the counter's own
/// disable ioctl is counted once).
pub struct SyscallCounter {
    counter: Counter,
    baseline: u64,
}

impl SyscallCounter {
    /// The counter, or `None` after saying (once) why it is unavailable.
    pub fn open() -> Option<SyscallCounter> {
        match Self::try_open() {
            Ok(c) => Some(c),
            Err(e) => {
                static SAID: AtomicUsize = AtomicUsize::new(0);
                if SAID.fetch_add(1, Ordering::Relaxed) == 0 {
                    skip_util::skip(&format!(
                        "syscall count of the exit path: {e}; needs root or \
                         kernel.perf_event_paranoid <= 1 and a mounted tracefs \
                         (scripts/test.sh mounts it as root)"
                    ));
                }
                None
            }
        }
    }

    fn try_open() -> io::Result<SyscallCounter> {
        let id = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .find_map(|root| {
                let p = Path::new(root).join("events/raw_syscalls/sys_enter/id");
                std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok()
            })
            .ok_or_else(|| io::Error::other("no raw_syscalls:sys_enter tracepoint in tracefs"))?;
        let mut b = Builder::new(Tracepoint::with_id(id));
        b.include_kernel()
            .exclude_user(false)
            .observe_self()
            .any_cpu()
            .enabled(false);
        let mut c = SyscallCounter {
            counter: b.build()?,
            baseline: 0,
        };
        c.baseline = c.count(|| ())?;
        // The counter must see a syscall, or a zero proves nothing.
        let seen = c.count(|| {
            // SAFETY: getpid has no preconditions.
            let _ = unsafe { libc::getpid() };
        })?;
        if seen != c.baseline + 1 {
            return Err(io::Error::other(format!(
                "the counter saw {seen} syscalls around getpid() (baseline {})",
                c.baseline
            )));
        }
        Ok(c)
    }

    fn count(&mut self, f: impl FnOnce()) -> io::Result<u64> {
        self.counter.reset()?;
        self.counter.enable()?;
        f();
        self.counter.disable()?;
        self.counter.read()
    }

    /// Syscalls `f` made beyond the baseline (a failed read counts as one).
    pub fn extra(&mut self, f: impl FnOnce()) -> u64 {
        match self.count(f) {
            Ok(n) => n.saturating_sub(self.baseline),
            Err(_) => 1,
        }
    }
}
