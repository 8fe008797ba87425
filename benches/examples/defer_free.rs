//! The realistic deferred callback, timed as a whole process: each
//! operation enters a read section, allocates a node, and defers a
//! callback that frees the node and drops a clone of a shared `Arc` (the
//! job RCU exists for: freeing memory the deferring thread allocated).
//! After the producers finish, the process waits until every callback has
//! run (the shared `Arc`'s count is back to one) and exits.
//!
//!     cargo run --release -p benches --example defer_free -- IMPL THREADS OPS
//!
//! IMPL is one of:
//! * `exitq`: a `Reader` per thread (`Domain::reader`), `Domain::defer`,
//!   `Domain::barrier` at the end (callbacks run where they were queued);
//! * `exitq-offload`: the same with `Callbacks::Offload` (every callback on
//!   the reclaimer thread, the kernel's NOCB mode);
//! * `crossbeam`: crossbeam-epoch's best configuration, a registered
//!   `LocalHandle` per thread, `pin` + `Guard::defer`, then the main
//!   thread pins and flushes until every callback ran;
//! * `sdd`: sdd's best API, `Owned` (the object and its header in one
//!   allocation; dropping the `Owned` retires it, its `Drop` is the
//!   callback), a `Guard` per operation; the main thread then creates
//!   guards until every object was dropped;
//! * `sdd-closure`: sdd's `Guard::defer_execute` with the same closure as
//!   exitq's (one allocation more per operation, for the closure);
//! * `seize`: seize's `LocalGuard::defer_retire` of a boxed object with
//!   the `Arc` inside (one allocation per operation), in a `Collector`
//!   with the batch size that suits this host (`SEIZE_BATCH`, default 256:
//!   seize's default of 32, one membarrier per batch, is 2-8x slower on
//!   this VM, see docs/results-exitq.md); `reclaim_all` once the producers have
//!   exited;
//! * `floor`: the same loop freeing at once (a read section, no
//!   reclamation at all): what no deferred scheme can beat.
//!
//! THREADS is 1..=4096, OPS 1..=10^12 (as `benches/c/urcu_defer_free.c`).
//! Prints one line: `IMPL THREADS OPS WALL_NS NS_PER_OP` (inner timer, from
//! the start of the producers to the last callback). Exit 2 on bad usage
//! or a bad `EXITQ_*`/`SEIZE_BATCH` value (named), 3 if a thread cannot be
//! created (with the limit that stopped it, `exitq::limits`), 1 if a
//! callback did not run. The script `scripts/bench-defer-free.sh` times
//! whole processes, interleaved with liburcu's `call_rcu` and `defer_rcu`
//! under urcu-memb and urcu-qsbr (`benches/c/urcu_defer_free.c`).
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// The object a producer allocates and a callback frees: 32 bytes, a
/// typical list or tree node.
#[allow(dead_code)] // `next` and `seq` only give the node its size
struct Node {
    key: u64,
    value: u64,
    next: usize,
    seq: u64,
}

/// The node with the shared `Arc` inside, for the peers whose best API
/// retires one object whose drop is the callback (sdd's `Owned`, seize's
/// `defer_retire`): one allocation per operation.
struct Payload {
    node: Node,
    shared: Arc<u64>,
}

impl Drop for Payload {
    fn drop(&mut self) {
        debug_assert_eq!(self.node.key ^ 0x5555, self.node.value);
        black_box(&self.node);
        black_box(&self.shared);
    }
}

#[inline(always)]
fn payload(i: u64, shared: Arc<u64>) -> Payload {
    Payload {
        node: Node {
            key: i,
            value: i ^ 0x5555,
            next: 0,
            seq: i,
        },
        shared,
    }
}

/// seize's reclaimer for a boxed `Payload`.
///
/// # Safety
///
/// `p` came from `Box::into_raw` and is reclaimed once.
unsafe fn reclaim_payload(p: *mut Payload, _: &seize::Collector) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p) });
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Exitq,
    ExitqOffload,
    Crossbeam,
    Sdd,
    SddClosure,
    Seize,
    Floor,
}

const USAGE: &str = "usage: defer_free IMPL THREADS OPS";

fn parse(args: &[String]) -> Result<(Impl, usize, u64), String> {
    let which = match args.get(1).map(String::as_str) {
        Some("exitq") => Impl::Exitq,
        Some("exitq-offload") => Impl::ExitqOffload,
        Some("crossbeam") => Impl::Crossbeam,
        Some("sdd") => Impl::Sdd,
        Some("sdd-closure") => Impl::SddClosure,
        Some("seize") => Impl::Seize,
        Some("floor") => Impl::Floor,
        Some(other) => {
            return Err(format!(
                "unknown IMPL '{other}' (exitq, exitq-offload, crossbeam, sdd, sdd-closure, seize, floor)"
            ))
        }
        None => return Err(USAGE.into()),
    };
    if args.len() > 4 {
        return Err(format!("unexpected argument '{}' ({USAGE})", args[4]));
    }
    // Bounds as urcu_defer_free.c's.
    let num = |i: usize, what: &str, max: u64| -> Result<u64, String> {
        let s = args
            .get(i)
            .ok_or_else(|| format!("missing {what} ({USAGE})"))?;
        match s.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(format!("{what} must be a count in 1..={max}, got '{s}'")),
        }
    };
    let threads = num(2, "THREADS", 4096)? as usize;
    let ops = num(3, "OPS", 1_000_000_000_000)?;
    Ok((which, threads, ops))
}

#[inline(always)]
fn node(i: u64) -> Box<Node> {
    black_box(Box::new(Node {
        key: i,
        value: i ^ 0x5555,
        next: 0,
        seq: i,
    }))
}

fn free(n: Box<Node>, a: Arc<u64>) {
    debug_assert_eq!(n.key ^ 0x5555, n.value);
    drop(black_box(n));
    drop(a);
}

/// Runs `producer(ops)` on `threads` threads released together; returns
/// the time from the release until `finish` returned, or why a producer
/// could not be created (with the limit that stopped it; the threads
/// already made wait at the start until the process exits).
fn run(
    threads: usize,
    ops: u64,
    producer: impl Fn(u64) + Send + Sync + 'static,
    finish: impl FnOnce(),
) -> Result<Duration, String> {
    let producer = Arc::new(producer);
    let start = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let (producer, start) = (producer.clone(), start.clone());
        let n = ops / threads as u64 + u64::from((t as u64) < ops % threads as u64);
        let h = thread::Builder::new()
            .spawn(move || {
                start.wait();
                producer(n);
            })
            .map_err(|e| {
                format!(
                    "cannot create producer thread {}: {}",
                    t + 1,
                    exitq::limits::explain_thread_error(&e, None)
                )
            })?;
        handles.push(h);
    }
    start.wait();
    let t0 = Instant::now();
    for h in handles {
        h.join().expect("producer panicked");
    }
    drop(producer); // its captures (a clone of the shared `Arc`) too
    finish();
    Ok(t0.elapsed())
}

/// sdd collects when guards are created: the main thread creates guards
/// (asking each to advance the epoch) until every object was dropped (the
/// shared `Arc` is back to the main thread's two handles).
fn wait_sdd(shared: &Arc<u64>) {
    while Arc::strong_count(shared) > 2 {
        let g = sdd::Guard::new();
        g.accelerate();
        drop(g);
        std::hint::spin_loop();
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (which, threads, ops) = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("defer_free: {e}");
            return ExitCode::from(2);
        }
    };
    let shared = Arc::new(7u64);
    let s = shared.clone();
    let elapsed = match which {
        Impl::Exitq | Impl::ExitqOffload => {
            let mut b = exitq::Domain::builder();
            // `EXITQ_FIRST_CHECK_DELAY_US`: the builder's knob, for
            // experiments (default 25 µs; the builder's ceiling is 1 s).
            // `EXITQ_BATCH=N`: the builder's batch size, for experiments
            // (default 256, at most 65536). A bad value is refused, not
            // ignored (the run would measure the default).
            let knobs = benches::env_num("EXITQ_FIRST_CHECK_DELAY_US", 0..=1_000_000)
                .and_then(|us| Ok((us, benches::env_num("EXITQ_BATCH", 1..=1 << 16)?)));
            let (delay_us, batch) = match knobs {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("defer_free: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Some(us) = delay_us {
                b = b.first_check_delay(Duration::from_micros(us));
            }
            if let Some(n) = batch {
                b = b.batch_size(n as usize);
            }
            // `EXITQ_FENCES=1`: fence mode (readers pay a full fence, grace
            // periods no membarrier), for experiments.
            if std::env::var_os("EXITQ_FENCES").is_some() {
                b = b.expedite(exitq::Expedite::Fallback);
            }
            if which == Impl::ExitqOffload {
                b = b.callbacks(exitq::Callbacks::Offload);
            }
            let domain = match b.try_build() {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("defer_free: cannot build the domain: {e}");
                    return ExitCode::from(3);
                }
            };
            let d = domain.clone();
            // `EXITQ_IDLE=1`: one more registered thread that stays idle
            // (one read section, then asleep), as a pool's parked worker:
            // its record never shows a new epoch (exitq/src/past.rs).
            // `EXITQ_IDLE=offline`: the same thread asleep offline
            // (`exitq::thread_offline`).
            if let Some(idle_mode) = std::env::var_os("EXITQ_IDLE") {
                let idle = domain.clone();
                thread::spawn(move || {
                    drop(idle.read());
                    if idle_mode == "offline" {
                        exitq::thread_offline();
                    }
                    loop {
                        thread::sleep(Duration::from_secs(3600));
                    }
                });
            }
            if std::env::var_os("EXITQ_MONITOR").is_some() {
                let m = domain.clone();
                thread::spawn(move || loop {
                    thread::sleep(Duration::from_millis(20));
                    let s = m.stats();
                    eprintln!(
                        "pending {} batches {} run {}",
                        s.pending, s.batches, s.callbacks_run
                    );
                });
            }
            run(
                threads,
                ops,
                move |n| {
                    let mut reader = d.reader();
                    for i in 0..n {
                        let _g = reader.read();
                        let (node, a) = (node(i), s.clone());
                        d.defer(move || free(node, a));
                    }
                },
                move || {
                    domain.barrier();
                    if std::env::var_os("EXITQ_STATS").is_some() {
                        eprintln!("{:#?}", domain.stats());
                    }
                },
            )
        }
        Impl::Crossbeam => {
            let sh = shared.clone();
            run(
                threads,
                ops,
                move |n| {
                    let handle = crossbeam_epoch::default_collector().register();
                    for i in 0..n {
                        let g = handle.pin();
                        let (node, a) = (node(i), s.clone());
                        g.defer(move || free(node, a));
                    }
                    handle.pin().flush();
                },
                move || {
                    let handle = crossbeam_epoch::default_collector().register();
                    while Arc::strong_count(&sh) > 2 {
                        handle.pin().flush();
                    }
                },
            )
        }
        Impl::Sdd => {
            let sh = shared.clone();
            run(
                threads,
                ops,
                move |n| {
                    for i in 0..n {
                        let _g = sdd::Guard::new();
                        drop(black_box(sdd::Owned::new(payload(i, s.clone()))));
                    }
                },
                move || wait_sdd(&sh),
            )
        }
        Impl::SddClosure => {
            let sh = shared.clone();
            run(
                threads,
                ops,
                move |n| {
                    for i in 0..n {
                        let g = sdd::Guard::new();
                        let (node, a) = (node(i), s.clone());
                        g.defer_execute(move || free(node, a));
                    }
                },
                move || wait_sdd(&sh),
            )
        }
        Impl::Seize => {
            let batch = match benches::seize_batch() {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("defer_free: {e}");
                    return ExitCode::from(2);
                }
            };
            let collector = Arc::new(seize::Collector::new().batch_size(batch));
            let c = collector.clone();
            run(
                threads,
                ops,
                move |n| {
                    use seize::Guard;
                    for i in 0..n {
                        let g = c.enter();
                        let p = Box::into_raw(Box::new(payload(i, s.clone())));
                        // SAFETY: `p` was never shared and is retired once;
                        // `reclaim_payload` frees a `Box<Payload>`.
                        unsafe { g.defer_retire(p, reclaim_payload) };
                    }
                },
                move || {
                    // SAFETY: every producer has exited; no guard of this
                    // collector exists (seize's documented condition).
                    unsafe { collector.reclaim_all() };
                },
            )
        }
        Impl::Floor => {
            let domain = match exitq::Domain::builder().try_build() {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("defer_free: cannot build the domain: {e}");
                    return ExitCode::from(3);
                }
            };
            let d = domain.clone();
            run(
                threads,
                ops,
                move |n| {
                    let mut reader = d.reader();
                    for i in 0..n {
                        let _g = reader.read();
                        let (node, a) = (node(i), s.clone());
                        free(node, a);
                    }
                },
                || {},
            )
        }
    };
    let elapsed = match elapsed {
        Ok(t) => t,
        Err(e) => {
            eprintln!("defer_free: {e}");
            return ExitCode::from(3);
        }
    };
    let left = Arc::strong_count(&shared) - 1;
    if left != 0 {
        eprintln!("defer_free: {left} callbacks did not run");
        return ExitCode::from(1);
    }
    let name = args[1].as_str();
    println!(
        "{name} {threads} {ops} {} {:.2}",
        elapsed.as_nanos(),
        elapsed.as_nanos() as f64 / ops as f64
    );
    ExitCode::SUCCESS
}
