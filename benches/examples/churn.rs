//! Thread churn, the workload exitq exists for, as a whole process: waves
//! of short-lived threads, each entering a read section, retiring 16
//! freshly allocated 32-byte objects with a callback that frees and counts
//! them, then exiting. Wave `i - LAG` is joined after wave `i` has been
//! started, so exits of one wave overlap the starts of the next (the herd).
//! Every callback is counted before the process exits 0.
//!
//!     cargo run --release -p benches --example churn -- IMPL [WAVES] [PER_WAVE] [LAG] [--stacks std|recycled]
//!
//! Defaults: 200 waves of 100 threads, lag 2, `std::thread`s (2 MiB
//! stacks from glibc); `--stacks recycled` starts the same threads on
//! 2 MiB stacks of an exitq `StackPool` instead (`benches::spawn`), for
//! every IMPL alike. IMPL is one of:
//! * `exitq`: one `Domain`; each thread `Domain::read`s, `defer`s its 16
//!   callbacks inside the section and exits (its thread-exit destructor
//!   hands the open batch over); `barrier` at the end;
//! * `crossbeam`: crossbeam-epoch with a registered `LocalHandle` per
//!   thread, `pin` + `Guard::defer`; the main thread pins and flushes until
//!   every callback ran;
//! * `seize`: a `Collector` with the batch size that suits this host
//!   (`SEIZE_BATCH`, default 256, as `defer_free`), `enter` +
//!   `defer_retire`; `reclaim_all` once every thread was joined;
//! * `sdd`: sdd's `Guard` + `Owned` (dropping it retires the object; its
//!   `Drop` counts); the main thread creates guards until every object
//!   was dropped;
//! * `none`: no reclamation: the same threads free their objects at once.
//!   The floor for the others.
//! * `held`: no reclamation either, but each thread holds its 16 objects
//!   until it has made them all, then frees them itself: the allocations
//!   every retiring scheme makes (16 live objects on a fresh thread, whose
//!   thread cache is empty), without handing them to anyone. `none` to
//!   `held` is what retiring costs before any reclaimer runs; `held` to a
//!   scheme is that scheme's deferral (the handover, the grace period, the
//!   free on another thread).
//!
//! WAVES is at most 10^6, PER_WAVE and LAG 20000 and PER_WAVE x (LAG + 1)
//! too (as `benches/c/urcu_churn.c`); a bad value is exit 2, naming it. A
//! thread that cannot be created is exit 3, with the limit that stopped it.
//! Prints `IMPL THREADS WALL_NS NS_PER_THREAD`; `EXITQ_STATS=1` also
//! prints the domain's counters. `scripts/bench-churn.sh` runs every IMPL
//! (and liburcu's, `benches/c/urcu_churn.c`) as whole processes under
//! `perf stat`, interleaved.
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::spawn::{Handle, Spawner, Stacks};

/// Objects each thread retires.
const PER_THREAD: u64 = 16;

/// Callbacks that have run (objects freed).
static FREED: AtomicU64 = AtomicU64::new(0);

/// The retired object: 32 bytes, a typical list or tree node. Dropping it
/// is the callback's work: check it, free it, count it.
struct Node {
    key: u64,
    value: u64,
    #[allow(dead_code)] // gives the node its size
    next: usize,
    #[allow(dead_code)]
    seq: u64,
}

impl Node {
    #[inline(always)]
    fn new(i: u64) -> Node {
        Node {
            key: i,
            value: i ^ 0x5555,
            next: 0,
            seq: i,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        assert_eq!(self.key ^ 0x5555, self.value, "a corrupted node");
        // Relaxed: a count, read after the threads were joined and the
        // reclaimer's own synchronization (barrier, reclaim_all, ...).
        FREED.fetch_add(1, Ordering::Relaxed);
    }
}

/// seize's reclaimer for a boxed `Node`.
///
/// # Safety
///
/// `p` came from `Box::into_raw` and is reclaimed once.
unsafe fn reclaim_node(p: *mut Node, _: &seize::Collector) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p) });
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Exitq,
    Crossbeam,
    Seize,
    Sdd,
    None,
    Held,
}

struct Args {
    which: Impl,
    waves: usize,
    per_wave: usize,
    lag: usize,
    stacks: Stacks,
    /// IMPL as given.
    name: String,
}

const USAGE: &str = "usage: churn IMPL [WAVES] [PER_WAVE] [LAG] [--stacks std|recycled]";

fn parse(all: &[String]) -> Result<Args, String> {
    let mut stacks = Stacks::Std;
    let mut args = Vec::with_capacity(all.len());
    let mut it = all.iter();
    while let Some(s) = it.next() {
        if s == "--stacks" {
            stacks = Stacks::parse(it.next().ok_or("--stacks needs 'std' or 'recycled'")?)?;
        } else {
            args.push(s.clone());
        }
    }
    let which = match args.get(1).map(String::as_str) {
        Some("exitq") => Impl::Exitq,
        Some("crossbeam") => Impl::Crossbeam,
        Some("seize") => Impl::Seize,
        Some("sdd") => Impl::Sdd,
        Some("none") => Impl::None,
        Some("held") => Impl::Held,
        Some(other) => {
            return Err(format!(
                "unknown IMPL '{other}' (exitq, crossbeam, seize, sdd, none, held)"
            ))
        }
        None => return Err(USAGE.into()),
    };
    // Bounds as urcu_churn.c's: no product below wraps (LAG = 2^64 - 1
    // made `lag + 1` overflow, WAVES x PER_WAVE x 16 could too).
    let num = |i: usize, default: usize, what: &str, max: usize| -> Result<usize, String> {
        match args.get(i) {
            None => Ok(default),
            Some(s) => match s.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(format!("{what} must be a count in 1..={max}, got '{s}'")),
            },
        }
    };
    let a = Args {
        which,
        waves: num(2, 200, "WAVES", 1_000_000)?,
        per_wave: num(3, 100, "PER_WAVE", 20_000)?,
        lag: num(4, 2, "LAG", 20_000)?,
        stacks,
        name: args[1].clone(),
    };
    if a.per_wave * (a.lag + 1) > 20_000 {
        return Err("PER_WAVE x (LAG + 1) threads alive at once is more than 20000".into());
    }
    if args.len() > 5 {
        return Err(USAGE.into());
    }
    Ok(a)
}

/// Runs the waves: `body(seq)` on each thread. Returns `None` if a thread
/// could not be created (the error, with the limit that most likely
/// explains it, is printed).
fn waves(a: &Args, body: Arc<dyn Fn(u64) + Send + Sync>) -> Option<()> {
    let spawner = match Spawner::new(a.stacks) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("churn: cannot build the stack pool: {e}");
            return None;
        }
    };
    let join = |wave: Vec<Handle>| {
        for h in wave {
            if let Err(e) = h.join() {
                panic!("churn: {e}");
            }
        }
    };
    let mut alive: std::collections::VecDeque<Vec<Handle>> = Default::default();
    let mut seq = 0u64;
    for _ in 0..a.waves {
        let mut wave = Vec::with_capacity(a.per_wave);
        for _ in 0..a.per_wave {
            let (body, s) = (body.clone(), seq);
            seq += 1;
            match spawner.spawn(Box::new(move || body(s))) {
                Ok(h) => wave.push(h),
                Err(e) => {
                    eprintln!("churn: cannot create thread {seq}: {e}");
                    return None;
                }
            }
        }
        alive.push_back(wave);
        if alive.len() > a.lag {
            join(alive.pop_front().expect("a wave"));
        }
    }
    alive.into_iter().for_each(join);
    // The pool lives as long as the process, as a runtime's would. Dropped
    // here, its reaper thread would unmap every stack in the background
    // while the process goes on: for as long as the IMPL's wait for its
    // callbacks lasts (exitq's `barrier` waits a grace period, others
    // return at once and the kernel unmaps at exit), so each IMPL would
    // pay a different share of the pool's shutdown, which is not churn.
    std::mem::forget(spawner);
    Some(())
}

/// Waits until every callback ran, calling `nudge` meanwhile; false after
/// 60 s.
fn wait_all(expected: u64, mut nudge: impl FnMut()) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    // Relaxed: see `FREED`.
    while FREED.load(Ordering::Relaxed) < expected {
        if Instant::now() > deadline {
            return false;
        }
        nudge();
    }
    true
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let a = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("churn: {e}");
            return ExitCode::from(2);
        }
    };
    let threads = (a.waves * a.per_wave) as u64;
    let expected = threads * PER_THREAD;
    let t0 = Instant::now();
    let done = match a.which {
        Impl::None => {
            let ok = waves(
                &a,
                Arc::new(|s| {
                    for i in 0..PER_THREAD {
                        drop(black_box(Box::new(Node::new(s * PER_THREAD + i))));
                    }
                }),
            );
            ok.map(|()| wait_all(expected, || ()))
        }
        Impl::Held => {
            let ok = waves(
                &a,
                Arc::new(|s| {
                    let held: [Box<Node>; PER_THREAD as usize] = std::array::from_fn(|i| {
                        black_box(Box::new(Node::new(s * PER_THREAD + i as u64)))
                    });
                    drop(black_box(held));
                }),
            );
            ok.map(|()| wait_all(expected, || ()))
        }
        Impl::Exitq => {
            let domain = match exitq::Domain::builder().try_build() {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("churn: cannot build the domain: {e}");
                    return ExitCode::from(3);
                }
            };
            let d = domain.clone();
            let ok = waves(
                &a,
                Arc::new(move |s| {
                    let _guard = d.read();
                    for i in 0..PER_THREAD {
                        let node = black_box(Box::new(Node::new(s * PER_THREAD + i)));
                        d.defer(move || drop(node));
                    }
                }),
            );
            let r = ok.map(|()| wait_all(expected, || domain.barrier()));
            if std::env::var_os("EXITQ_STATS").is_some() {
                eprintln!("{:#?}", domain.stats());
            }
            r
        }
        Impl::Crossbeam => {
            let collector = crossbeam_epoch::Collector::new();
            let c = collector.clone();
            let ok = waves(
                &a,
                Arc::new(move |s| {
                    let handle = c.register();
                    let guard = handle.pin();
                    for i in 0..PER_THREAD {
                        let node = black_box(Box::new(Node::new(s * PER_THREAD + i)));
                        guard.defer(move || drop(node));
                    }
                }),
            );
            let handle = collector.register();
            ok.map(|()| wait_all(expected, || handle.pin().flush()))
        }
        Impl::Seize => {
            let batch = match benches::seize_batch() {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("churn: {e}");
                    return ExitCode::from(2);
                }
            };
            let collector = Arc::new(seize::Collector::new().batch_size(batch));
            let c = collector.clone();
            let ok = waves(
                &a,
                Arc::new(move |s| {
                    use seize::Guard;
                    let guard = c.enter();
                    for i in 0..PER_THREAD {
                        let p = Box::into_raw(Box::new(Node::new(s * PER_THREAD + i)));
                        // SAFETY: `p` was never shared and is retired once;
                        // `reclaim_node` frees a `Box<Node>`.
                        unsafe { guard.defer_retire(p, reclaim_node) };
                    }
                }),
            );
            ok.map(|()| {
                // SAFETY: every thread was joined: no guard of this
                // collector exists (seize's documented condition).
                unsafe { collector.reclaim_all() };
                wait_all(expected, || ())
            })
        }
        Impl::Sdd => {
            let ok = waves(
                &a,
                Arc::new(|s| {
                    let _guard = sdd::Guard::new();
                    for i in 0..PER_THREAD {
                        drop(black_box(sdd::Owned::new(Node::new(s * PER_THREAD + i))));
                    }
                }),
            );
            ok.map(|()| {
                wait_all(expected, || {
                    let g = sdd::Guard::new();
                    g.accelerate();
                })
            })
        }
    };
    let elapsed = t0.elapsed();
    match done {
        None => return ExitCode::from(3),
        Some(false) => {
            eprintln!(
                "churn: {} of {expected} callbacks ran within 60 s",
                FREED.load(Ordering::Relaxed)
            );
            return ExitCode::from(1);
        }
        Some(true) => {}
    }
    println!(
        "{} {threads} {} {:.0}",
        a.name,
        elapsed.as_nanos(),
        elapsed.as_nanos() as f64 / threads as f64
    );
    ExitCode::SUCCESS
}
