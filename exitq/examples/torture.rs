//! exitq's torture test, in the spirit of the kernel's rcutorture: many
//! threads mix every API at random for a while, every guarantee is checked
//! as it is exercised, every violation is counted, and the run ends with
//! `SUCCESS` (exit 0) or `FAILURE` (exit 1).
//!
//!     cargo run --release -p exitq --example torture -- --seconds 60
//!
//! Options: `--seconds N` (default 10), `--threads N` (workers, default 12),
//! `--seed N` (default: from the clock; printed, so a failure can be
//! rerun). Exit 2 on bad usage.
//!
//! What runs, on several domains at once (default; offloaded callbacks with
//! batches of 2; the inline reclaimer with batches of 3; batches of 1 with
//! a backlog limit of 8 and no first-check delay; fence mode with batches
//! of 7), all with flush latencies of 100-200 µs except the default:
//!
//! * readers, through `Domain::read` (nested at random) and `Reader`s,
//!   load a domain's current object and check, inside the section and
//!   again before leaving it after a random delay, that no callback has
//!   poisoned it (a use after free, had it been freed);
//! * writers replace the object and retire the old one: `defer` (the
//!   callback poisons it, checks it was not already poisoned, and defers
//!   its free: a second grace period), or `synchronize` /
//!   `synchronize_expedited` and then poison and free; sometimes from
//!   inside a read guard (the callbacks must wait for the guard's end);
//!   `flush` at random;
//! * counted defers (some of which panic with a payload whose `Drop`
//!   panics too) and `barrier` checkers: every callback whose `defer`
//!   returned before a `barrier` started must have run when it returns;
//! * short-lived threads that register exit hooks and defer, then return;
//!   raw pthreads that do the same and are cancelled in `nanosleep`, or
//!   while they loop over `synchronize` (cancellation is deferred there);
//!   a hook must run exactly once, and never before its thread finished
//!   (was cancelled);
//! * a churner builds short-lived domains (random settings, both
//!   reclaimer kinds), lets threads use them, and drops the last handle
//!   while those threads still live: their hooks must wait for their exit
//!   and then run exactly once;
//! * at the end, per domain: every counted callback ran exactly once, the
//!   panics were all counted, nothing is pending.
//!
//! A watchdog fails the run if any role stops making progress for 60 s.
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use exitq::{Callbacks, Domain, Expedite, Reclaimer};

const ALIVE: u64 = 0xA11E;
const POISONED: u64 = 0xDEAD;

/// The object readers validate and writers retire.
struct Obj {
    state: AtomicU64,
    generation: u64,
}

/// A long-lived domain under test and what the checks need of it.
struct Slot {
    name: &'static str,
    domain: Domain,
    current: AtomicPtr<Obj>,
    /// Counted defers whose `defer` returned (Release after it returns).
    issued: AtomicU64,
    /// Counted callbacks that ran.
    ran: AtomicU64,
    /// Counted callbacks made to panic.
    panics: AtomicU64,
}

/// Violations, one counter per guarantee.
#[derive(Default)]
struct Violations {
    read_after_poison: AtomicU64,
    callback_twice: AtomicU64,
    barrier_early: AtomicU64,
    hook_early: AtomicU64,
    hook_twice: AtomicU64,
    hook_missing: AtomicU64,
    callback_missing: AtomicU64,
    panics_miscounted: AtomicU64,
    pending_left: AtomicU64,
}

impl Violations {
    fn all(&self) -> [(&'static str, u64); 9] {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            (
                "read after poison (use after free)",
                g(&self.read_after_poison),
            ),
            ("callback ran twice", g(&self.callback_twice)),
            (
                "barrier returned before an earlier callback ran",
                g(&self.barrier_early),
            ),
            (
                "exit hook ran before its thread finished",
                g(&self.hook_early),
            ),
            ("exit hook ran twice", g(&self.hook_twice)),
            ("exit hook never ran", g(&self.hook_missing)),
            ("counted callback never ran", g(&self.callback_missing)),
            ("panics not counted as panics", g(&self.panics_miscounted)),
            ("callbacks still pending at the end", g(&self.pending_left)),
        ]
    }
}

/// Operation counts, for the report and the watchdog.
#[derive(Default)]
struct Ops {
    reads: AtomicU64,
    replaces_deferred: AtomicU64,
    replaces_synchronized: AtomicU64,
    counted_defers: AtomicU64,
    barriers: AtomicU64,
    exit_threads: AtomicU64,
    cancelled_threads: AtomicU64,
    hooks_registered: AtomicU64,
    hooks_ran: AtomicU64,
    churned_domains: AtomicU64,
}

struct World {
    slots: Vec<Slot>,
    stop: AtomicBool,
    v: Violations,
    ops: Ops,
    /// Per-hook run counts, to find hooks that never ran.
    hooks: Mutex<Vec<Arc<AtomicU32>>>,
}

static WORLD: OnceLock<World> = OnceLock::new();

fn world() -> &'static World {
    WORLD.get().expect("initialised in main")
}

/// xorshift64*: a per-thread generator, seeded from the run's seed.
struct Rng(Cell<u64>);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(Cell::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1))
    }
    fn next(&self) -> u64 {
        let mut x = self.0.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn inc(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

fn new_obj(generation: u64) -> *mut Obj {
    Box::into_raw(Box::new(Obj {
        state: AtomicU64::new(ALIVE),
        generation,
    }))
}

/// Inside a read section of `slot`: the current object is alive, now and
/// after a random delay.
fn check_current(slot: &Slot, rng: &Rng) {
    let p = slot.current.load(Ordering::Acquire);
    // SAFETY: objects are freed only two grace periods after they were
    // unpublished, and we are in a read section (the property under test:
    // a violation shows as a poisoned object long before a free).
    let obj = unsafe { &*p };
    if obj.state.load(Ordering::Acquire) != ALIVE {
        inc(&world().v.read_after_poison);
    }
    match rng.below(100) {
        0 => thread::sleep(Duration::from_micros(200 + rng.below(800))),
        1..=30 => {
            for _ in 0..rng.below(300) {
                std::hint::spin_loop();
            }
        }
        _ => {}
    }
    if obj.state.load(Ordering::Acquire) != ALIVE
        || std::hint::black_box(obj.generation) == u64::MAX
    {
        inc(&world().v.read_after_poison);
    }
    inc(&world().ops.reads);
}

/// The callback that retires `old`: poison it (it must not have been
/// poisoned already), and free it one more grace period later.
fn retire(slot_index: usize, old: usize) {
    let obj = old as *mut Obj;
    // SAFETY: `old` is an object unpublished before the `defer` that runs
    // us, freed only by the callback we defer below.
    let prev = unsafe { (*obj).state.swap(POISONED, Ordering::AcqRel) };
    if prev != ALIVE {
        inc(&world().v.callback_twice);
        return; // freeing twice would be worse
    }
    world().slots[slot_index].domain.defer(move || {
        // SAFETY: poisoned above, after a grace period; freed once here,
        // another grace period later.
        drop(unsafe { Box::from_raw(old as *mut Obj) });
    });
}

/// Replaces `slot`'s object and retires the old one, by `defer` or by
/// `synchronize`.
fn replace(slot_index: usize, rng: &Rng, generation: u64) {
    let slot = &world().slots[slot_index];
    let old = slot.current.swap(new_obj(generation), Ordering::AcqRel) as usize;
    match rng.below(10) {
        0 => {
            if rng.chance(50) {
                slot.domain.synchronize();
            } else {
                slot.domain.synchronize_expedited();
            }
            let obj = old as *mut Obj;
            // SAFETY: a grace period passed since `old` was unpublished.
            unsafe { (*obj).state.store(POISONED, Ordering::Release) };
            // SAFETY: no reader can hold it; nothing else frees it.
            drop(unsafe { Box::from_raw(obj) });
            inc(&world().ops.replaces_synchronized);
        }
        _ => {
            slot.domain.defer(move || retire(slot_index, old));
            inc(&world().ops.replaces_deferred);
        }
    }
}

/// A panic payload whose own `Drop` panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        if !thread::panicking() {
            panic!("torture: a panic payload whose drop panics (expected)");
        }
    }
}

/// A counted defer (for the barrier checks); a few of them panic.
fn counted_defer(slot: &'static Slot, rng: &Rng) {
    let panics = rng.chance(1);
    if panics {
        inc(&slot.panics);
    }
    slot.domain.defer(move || {
        slot.ran.fetch_add(1, Ordering::Relaxed);
        if panics {
            std::panic::panic_any(Bomb);
        }
    });
    // Release: the defer happens-before a checker that reads this count.
    slot.issued.fetch_add(1, Ordering::Release);
    inc(&world().ops.counted_defers);
}

/// Readers and writers: every API at random.
fn worker(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ (id as u64) << 32);
    let mut readers: Vec<_> = w.slots.iter().map(|s| s.domain.reader()).collect();
    let mut generation = 0u64;
    while !w.stop.load(Ordering::Relaxed) {
        let i = rng.below(w.slots.len() as u64) as usize;
        let slot = &w.slots[i];
        generation += 1;
        match rng.below(100) {
            0..=39 => {
                let _g = slot.domain.read();
                if rng.chance(20) {
                    let _nested = slot.domain.read();
                    check_current(slot, &rng);
                } else {
                    check_current(slot, &rng);
                }
            }
            40..=59 => {
                let _g = readers[i].read();
                check_current(slot, &rng);
                if rng.chance(10) {
                    // Defer inside a Reader's section: must not wait for it.
                    counted_defer(slot, &rng);
                }
            }
            60..=84 => replace(i, &rng, generation),
            85..=89 => {
                // Retire from inside a guard: the callback must wait.
                let _g = slot.domain.read();
                let old = slot.current.swap(new_obj(generation), Ordering::AcqRel) as usize;
                slot.domain.defer(move || retire(i, old));
                inc(&w.ops.replaces_deferred);
            }
            90..=97 => counted_defer(slot, &rng),
            _ => slot.domain.flush(),
        }
    }
    drop(readers.drain(..));
}

/// Barrier checkers.
fn checker(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xBA44 ^ (id as u64) << 40);
    while !w.stop.load(Ordering::Relaxed) {
        let slot = &w.slots[rng.below(w.slots.len() as u64) as usize];
        // Acquire: pairs with the Release after each counted defer.
        let before = slot.issued.load(Ordering::Acquire);
        slot.domain.barrier();
        if slot.ran.load(Ordering::Relaxed) < before {
            inc(&w.v.barrier_early);
        }
        inc(&w.ops.barriers);
        if rng.chance(30) {
            thread::sleep(Duration::from_micros(rng.below(2000)));
        }
    }
}

/// Registers a hook of the calling thread on `domain`: it must run once,
/// after `finished` is set.
fn register_hook(domain: &Domain, finished: &Arc<AtomicBool>) {
    let w = world();
    let count = Arc::new(AtomicU32::new(0));
    w.hooks.lock().unwrap().push(count.clone());
    let finished = finished.clone();
    domain.register_exit(move || {
        // Acquire: pairs with the thread's (or canceller's) Release.
        if !finished.load(Ordering::Acquire) {
            inc(&world().v.hook_early);
        }
        if count.fetch_add(1, Ordering::Relaxed) != 0 {
            inc(&world().v.hook_twice);
        }
        inc(&world().ops.hooks_ran);
    });
    inc(&w.ops.hooks_registered);
}

/// Spawns short-lived threads that register exit hooks and return.
fn exiter(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xE417);
    while !w.stop.load(Ordering::Relaxed) {
        let n = 1 + rng.below(8);
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let seed = rng.next() ^ k;
                thread::spawn(move || {
                    let rng = Rng::new(seed);
                    let finished = Arc::new(AtomicBool::new(false));
                    for _ in 0..1 + rng.below(3) {
                        let slot = &world().slots[rng.below(world().slots.len() as u64) as usize];
                        register_hook(&slot.domain, &finished);
                        for _ in 0..rng.below(20) {
                            counted_defer(slot, &rng);
                        }
                        let _g = slot.domain.read();
                        check_current(slot, &rng);
                    }
                    // Release: pairs with the hooks' Acquire.
                    finished.store(true, Ordering::Release);
                })
            })
            .collect();
        for h in handles {
            h.join().expect("exit thread panicked");
        }
        w.ops.exit_threads.fetch_add(n, Ordering::Relaxed);
    }
}

extern "C-unwind" {
    /// Declared "C-unwind": a cancellation acting here unwinds through it.
    fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> libc::c_int;
}

/// What a cancellable pthread is told.
struct CancelArg {
    slot: usize,
    /// Loop over `synchronize` (cancelled between two) instead of sleeping.
    synchronizer: bool,
    started: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
    seed: u64,
}

/// Registers hooks and defers, then waits in `nanosleep` (or loops over
/// `synchronize`) until cancelled. No value with a destructor is live at a
/// cancellation point: everything is set up in `cancel_setup`, which
/// returns before the loop.
extern "C-unwind" fn cancellable(arg: *mut c_void) -> *mut c_void {
    let (slot, synchronizer) = cancel_setup(arg);
    let domain: &'static Domain = &world().slots[slot].domain;
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000,
    };
    loop {
        if synchronizer {
            // Cancellation is disabled inside: it acts at the sleep below.
            domain.synchronize();
        }
        // SAFETY: a valid timespec; a cancellation point.
        unsafe { nanosleep(&ts, std::ptr::null_mut()) };
    }
}

fn cancel_setup(arg: *mut c_void) -> (usize, bool) {
    // SAFETY: `arg` is the `Box<CancelArg>` leaked by `canceller`.
    let arg = unsafe { Box::from_raw(arg.cast::<CancelArg>()) };
    let rng = Rng::new(arg.seed);
    let slot = &world().slots[arg.slot];
    register_hook(&slot.domain, &arg.finished);
    for _ in 0..rng.below(10) {
        counted_defer(slot, &rng);
    }
    // Release: the canceller waits for this before cancelling.
    arg.started.store(true, Ordering::Release);
    (arg.slot, arg.synchronizer)
}

/// Spawns raw pthreads and cancels them.
fn canceller(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xCA4C);
    while !w.stop.load(Ordering::Relaxed) {
        let started = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let arg = Box::new(CancelArg {
            slot: rng.below(w.slots.len() as u64) as usize,
            synchronizer: rng.chance(30),
            started: started.clone(),
            finished: finished.clone(),
            seed: rng.next(),
        });
        let mut tid: libc::pthread_t = 0;
        // SAFETY: valid out-pointer, default attributes; the routine takes
        // the leaked box. The transmute only changes the ABI name: glibc
        // unwinds through the routine on cancellation, which C-unwind
        // permits.
        let rc = unsafe {
            libc::pthread_create(
                &mut tid,
                std::ptr::null(),
                std::mem::transmute::<
                    extern "C-unwind" fn(*mut c_void) -> *mut c_void,
                    extern "C" fn(*mut c_void) -> *mut c_void,
                >(cancellable),
                Box::into_raw(arg).cast(),
            )
        };
        if rc != 0 {
            // A resource limit on a loaded machine: wait and try again.
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        // Acquire: pairs with the thread's Release.
        while !started.load(Ordering::Acquire) {
            thread::yield_now();
        }
        thread::sleep(Duration::from_micros(rng.below(3000)));
        // Release: the hooks may run from now on.
        finished.store(true, Ordering::Release);
        // SAFETY: a live, joinable thread we created.
        unsafe { libc::pthread_cancel(tid) };
        let mut ret: *mut c_void = std::ptr::null_mut();
        // SAFETY: joinable, joined once.
        unsafe { libc::pthread_join(tid, &mut ret) };
        inc(&w.ops.cancelled_threads);
    }
}

/// Builds short-lived domains, lets threads use them and drops the last
/// handle while the threads still live.
fn churner(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xC4A7);
    while !w.stop.load(Ordering::Relaxed) {
        let mut b = Domain::builder()
            .batch_size(1 + rng.below(16) as usize)
            .flush_latency(Duration::from_micros(100 + rng.below(2000)));
        if rng.chance(40) {
            b = b.reclaimer(Reclaimer::Inline);
        }
        if rng.chance(30) {
            b = b.callbacks(Callbacks::Offload);
        }
        let domain = b.build();
        let ran = Arc::new(AtomicU64::new(0));
        let (go, hold) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(true)),
        );
        let n = 1 + rng.below(4);
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let (d, ran, go, hold) = (domain.clone(), ran.clone(), go.clone(), hold.clone());
                let finished = Arc::new(AtomicBool::new(false));
                thread::spawn(move || {
                    register_hook(&d, &finished);
                    for _ in 0..10 {
                        let ran = ran.clone();
                        d.defer(move || {
                            ran.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                    drop(d.read());
                    drop(d); // our handle; the record stays ours
                    go.store(true, Ordering::Release);
                    while hold.load(Ordering::Acquire) {
                        thread::sleep(Duration::from_micros(200));
                    }
                    finished.store(true, Ordering::Release);
                })
            })
            .collect();
        while !go.load(Ordering::Acquire) {
            thread::yield_now();
        }
        drop(domain); // the last handle, while the threads live
        hold.store(false, Ordering::Release);
        for h in handles {
            h.join().expect("churn thread panicked");
        }
        // The last handle's drop ran every callback; the threads' exits
        // ran their hooks.
        let ran = ran.load(Ordering::Relaxed);
        if ran != n * 10 {
            w.v.callback_missing
                .fetch_add((n * 10).abs_diff(ran), Ordering::Relaxed);
        }
        inc(&w.ops.churned_domains);
        thread::sleep(Duration::from_micros(rng.below(1000)));
    }
}

/// Parsed options.
struct Opts {
    seconds: u64,
    threads: usize,
    seed: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        seconds: 10,
        threads: 12,
        seed: Instant::now().elapsed().as_nanos() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = args.next().ok_or_else(|| format!("{name} needs a value"))?;
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: '{v}'"))
        };
        match a.as_str() {
            "--seconds" => o.seconds = value("--seconds")?,
            "--threads" => o.threads = value("--threads")? as usize,
            "--seed" => o.seed = value("--seed")?,
            "-h" | "--help" => {
                println!("usage: torture [--seconds N] [--threads N] [--seed N]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    if o.seconds == 0 || o.threads == 0 || o.threads > 1024 {
        return Err("--seconds must be positive and --threads in 1..=1024".into());
    }
    Ok(o)
}

fn slots() -> Vec<Slot> {
    let fast = Duration::from_micros(100);
    let configs: Vec<(&'static str, exitq::DomainBuilder)> = vec![
        ("default", Domain::builder()),
        (
            "offload, batch 2",
            Domain::builder()
                .callbacks(Callbacks::Offload)
                .batch_size(2)
                .flush_latency(fast),
        ),
        (
            "inline, batch 3",
            Domain::builder()
                .reclaimer(Reclaimer::Inline)
                .batch_size(3)
                .flush_latency(fast),
        ),
        (
            "batch 1, backlog 8",
            Domain::builder()
                .batch_size(1)
                .backlog_limit(8)
                .first_check_delay(Duration::ZERO)
                .flush_latency(Duration::from_micros(200)),
        ),
        (
            "fences, batch 7",
            Domain::builder()
                .expedite(Expedite::Fallback)
                .batch_size(7)
                .flush_latency(fast),
        ),
    ];
    configs
        .into_iter()
        .map(|(name, b)| Slot {
            name,
            domain: b.stall_timeout(Duration::from_secs(30)).build(),
            current: AtomicPtr::new(new_obj(0)),
            issued: AtomicU64::new(0),
            ran: AtomicU64::new(0),
            panics: AtomicU64::new(0),
        })
        .collect()
}

/// Fails the run if some role stops making progress.
fn watchdog(start: Instant, limit: Duration) {
    let w = world();
    let snapshot = || {
        let o = &w.ops;
        [
            o.reads.load(Ordering::Relaxed),
            o.barriers.load(Ordering::Relaxed),
            o.exit_threads.load(Ordering::Relaxed),
            o.cancelled_threads.load(Ordering::Relaxed),
            o.churned_domains.load(Ordering::Relaxed),
        ]
    };
    let names = [
        "readers",
        "barriers",
        "exit threads",
        "cancelled threads",
        "domain churn",
    ];
    let mut last = snapshot();
    let mut since = [Instant::now(); 5];
    while !w.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(200));
        let now = snapshot();
        for k in 0..5 {
            if now[k] != last[k] {
                since[k] = Instant::now();
            } else if since[k].elapsed() > limit {
                eprintln!(
                    "torture: FAILURE: no progress of {} for {:?} (at {:?} into the run): a hang",
                    names[k],
                    limit,
                    start.elapsed()
                );
                std::process::exit(1);
            }
        }
        last = now;
    }
}

fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("torture: {e}");
            return ExitCode::from(2);
        }
    };
    // Expected panics (with a payload whose drop panics) are counted, not
    // printed.
    std::panic::set_hook(Box::new(|info| {
        if info.payload().downcast_ref::<Bomb>().is_none()
            && !info.to_string().contains("(expected)")
        {
            eprintln!("torture: unexpected panic: {info}");
        }
    }));
    WORLD
        .set(World {
            slots: slots(),
            stop: AtomicBool::new(false),
            v: Violations::default(),
            ops: Ops::default(),
            hooks: Mutex::new(Vec::new()),
        })
        .unwrap_or_else(|_| unreachable!("set once"));
    let w = world();
    println!(
        "torture: {} s, {} workers, seed {} ({} domains: {})",
        opts.seconds,
        opts.threads,
        opts.seed,
        w.slots.len(),
        w.slots
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join("; ")
    );
    let start = Instant::now();
    let mut roles: Vec<(&str, thread::JoinHandle<()>)> = Vec::new();
    let seed = opts.seed;
    for id in 0..opts.threads {
        let h = thread::Builder::new()
            .name(format!("worker-{id}"))
            .spawn(move || worker(id, seed))
            .expect("spawn worker");
        roles.push(("worker", h));
    }
    for id in 0..2 {
        roles.push(("checker", thread::spawn(move || checker(id, seed))));
    }
    roles.push(("exiter", thread::spawn(move || exiter(seed))));
    roles.push(("canceller", thread::spawn(move || canceller(seed))));
    roles.push(("churner", thread::spawn(move || churner(seed))));
    let dog = thread::spawn(move || watchdog(start, Duration::from_secs(60)));
    thread::sleep(Duration::from_secs(opts.seconds));
    w.stop.store(true, Ordering::Relaxed);
    let mut role_panics = HashMap::new();
    for (name, h) in roles {
        if h.join().is_err() {
            *role_panics.entry(name).or_insert(0u32) += 1;
        }
    }
    dog.join().expect("watchdog");
    final_checks();
    report(&opts, start.elapsed(), &role_panics)
}

/// After every role stopped: each domain's counted callbacks all ran once,
/// the panics were counted, nothing is pending; every hook ran.
fn final_checks() {
    let w = world();
    for slot in &w.slots {
        slot.domain.barrier();
        let (issued, ran) = (
            slot.issued.load(Ordering::Relaxed),
            slot.ran.load(Ordering::Relaxed),
        );
        if ran < issued {
            w.v.callback_missing
                .fetch_add(issued - ran, Ordering::Relaxed);
        }
        if ran > issued {
            w.v.callback_twice
                .fetch_add(ran - issued, Ordering::Relaxed);
        }
        // Retire callbacks defer the final free: a second barrier runs it.
        slot.domain.barrier();
        let s = slot.domain.stats();
        if s.callbacks_panicked != slot.panics.load(Ordering::Relaxed) {
            inc(&w.v.panics_miscounted);
        }
        if s.pending != 0 {
            w.v.pending_left.fetch_add(s.pending, Ordering::Relaxed);
        }
    }
    // Hooks of exited threads: an exit barrier per domain, then count.
    for slot in &w.slots {
        slot.domain.exit_barrier();
    }
    let missing = w
        .hooks
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.load(Ordering::Relaxed) == 0)
        .count() as u64;
    w.v.hook_missing.fetch_add(missing, Ordering::Relaxed);
}

fn report(opts: &Opts, took: Duration, role_panics: &HashMap<&str, u32>) -> ExitCode {
    let w = world();
    let o = &w.ops;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "torture: {:.1} s: {} reads, {} replaces by defer, {} by synchronize, {} counted defers, \
         {} barriers, {} exited and {} cancelled threads, {} of {} exit hooks ran, {} domains dropped under live threads",
        took.as_secs_f64(),
        g(&o.reads),
        g(&o.replaces_deferred),
        g(&o.replaces_synchronized),
        g(&o.counted_defers),
        g(&o.barriers),
        g(&o.exit_threads),
        g(&o.cancelled_threads),
        g(&o.hooks_ran),
        g(&o.hooks_registered),
        g(&o.churned_domains),
    );
    for slot in &w.slots {
        let s = slot.domain.stats();
        println!(
            "torture: domain '{}': {} grace periods, {} callbacks run ({} batches, {} run by their thread), \
             {} stolen, {} passes, {} panics caught, {} backlog waits, {} overruns",
            slot.name,
            s.grace_periods,
            s.callbacks_run,
            s.batches,
            s.batches_run_locally,
            s.stolen_batches,
            s.passes,
            s.callbacks_panicked,
            s.backlog_waits,
            s.backlog_overruns
        );
    }
    let mut failed = false;
    for (what, n) in w.v.all() {
        println!("torture: {what}: {n}");
        failed |= n != 0;
    }
    for (role, n) in role_panics {
        println!("torture: {n} {role} thread(s) panicked");
        failed = true;
    }
    if failed {
        println!("torture: FAILURE (seed {})", opts.seed);
        ExitCode::from(1)
    } else {
        println!("torture: SUCCESS");
        ExitCode::SUCCESS
    }
}
