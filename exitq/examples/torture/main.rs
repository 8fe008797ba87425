//! exitq's torture test, in the spirit of the kernel's rcutorture: many
//! threads mix every API at random for a while, every guarantee is checked
//! as it is exercised, every violation is counted, and the run ends with
//! `SUCCESS` (exit 0) or `FAILURE` (exit 1).
//!
//!     cargo run --release -p exitq --example torture -- --seconds 60
//!
//! Options: `--seconds N` (default 10), `--threads N` (workers, default 12),
//! `--qsbr N` (QSBR workers, default 3), `--handoffs N` (hand-off wave
//! spawners, default 1; 0: none, nor their two barrier loopers), `--seed N`
//! (default: from the clock; printed, so a failure can be rerun). Exit 2
//! on bad usage.
//!
//! What runs, on several domains at once (default; offloaded callbacks with
//! batches of 2; the inline reclaimer with batches of 3; batches of 1 with
//! a backlog limit of 8 and no first-check delay; fence mode with batches
//! of 7; batches of 4 with an exit poll of 100 µs, the hand-off waves'),
//! all with flush latencies of 100-200 µs except the default:
//!
//! * readers, through `Domain::read` (nested at random) and `Reader`s,
//!   load a domain's current object (a raw pointer, or a typed `RcuCell`'s
//!   value) and check, inside the section and again before leaving it
//!   after a random delay, that no callback has poisoned it (a use after
//!   free, had it been freed);
//! * QSBR workers (`qsbr.rs`) hold a `QsbrReader` online on every domain
//!   and load through it (the cell, and the raw pointer), announce
//!   quiescent states at random (several loads may share one), go offline
//!   around sleeps and, with all their readers offline, around
//!   `synchronize`, `barrier` and the cell's `replace`; they write, defer,
//!   nest guards and `Reader` sections inside the online reader, and drop
//!   and rebuild readers;
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
//! * some of those threads keep a `QsbrReader` online until they end
//!   (dropped with the thread, or from a thread-local at its teardown);
//!   some leak (`mem::forget`) a guard, a `Reader` and its guard, or an
//!   online `QsbrReader`, before they end, or from a thread-local destructor
//!   that runs after exitq's own: the sections must stop holding grace
//!   periods once the threads are gone, and the freed records pass to
//!   their next owners clean (the readers' checks above catch a use after
//!   free);
//! * a nester defers into domain A a callback that defers into B and
//!   waits for B's barrier; B's callback, nested on the same thread, calls
//!   A's barrier: it must panic, never hang or return;
//! * a forker forks while it holds a guard or an online `QsbrReader`
//!   (with callbacks deferred inside): the child drops the guard (forgets
//!   the reader), checks that `barrier` and `qsbr_reader` refuse, and exits
//!   (`exit` or `_exit`); no callback or hook may run in a child (counted
//!   in shared memory), and the child must end within 30 s; or it defers a
//!   callback that forks (the child returns into whatever run it was in,
//!   which must run nothing more of the parent's) and kills that child;
//! * a churner builds short-lived domains (random settings, both
//!   reclaimer kinds), lets threads use them, and drops the last handle
//!   while those threads still live: their hooks must wait for their exit
//!   and then run exactly once;
//! * hand-off waves (`handoffs.rs`): threads that defer (counted, with
//!   heap payloads, retirements), register hooks, sometimes
//!   `retire_thread` or leak a section, and exit together about a flush
//!   latency after their last defer, so the reclaimer's idle steal, and
//!   the two barrier loopers' `barrier` and `exit_barrier`, hold their
//!   records as they exit (the exit hand-off); once a thread is joined,
//!   a later `exit_barrier` or `barrier` of a domain must find its hooks
//!   there run; one wave in five drops its own domain's last handle while
//!   its threads exit (`handoff_drops.rs`), and every callback and hook
//!   must then have run once; each domain's exit hand-offs are reported;
//! * streamers (`streams.rs`), the only users of one more domain
//!   (`polled`), read, nest, retire and write inside their `Reader`
//!   sections without pause, so its grace periods are started by their
//!   polls and most complete without the heavy barrier; now and then they
//!   sleep, or call `barrier` or `synchronize`, and one holds a
//!   `QsbrReader` online; the run fails if none completed without it;
//! * cache readers (`caches.rs`) keep `CellCache`s of the shared domains'
//!   cells and `OptionCache`s of their options and load through them,
//!   check the value's object as the other readers do, sleep with values
//!   kept (so that replaced values wait, parked, for them), drop and
//!   remake caches, write, empty and fill without waiting, and `replace`
//!   (which waits for the other threads' caches) with their own dropped;
//!   the run fails if they made no cache or read none through a cell or
//!   an option cache;
//! * at the end, per domain: every counted callback ran exactly once, the
//!   panics were all counted, nothing is pending.
//!
//! A watchdog fails the run if any role stops making progress for 60 s.
//!
//! Layout: `world.rs` (the shared state and counters, and `retire`, the
//! callback that poisons an object and frees it a grace period later,
//! which `Tracked`'s drop calls too), `workers.rs`
//! (readers, writers, barrier checkers), `qsbr.rs` (QSBR workers),
//! `streams.rs` (the polled domain's streamers), `caches.rs` (cache
//! readers), `exits.rs` (exiting, cancelled
//! and churned threads), `handoffs.rs` (exits raced with steals) and
//! `handoff_drops.rs` (with a domain's drop), `leaks.rs` (what they leak), `nested.rs` (nested
//! barriers), `forker.rs` (fork with held guards), `checks.rs` (watchdog,
//! final checks, report); this file parses the options, builds the
//! domains and runs the roles.

mod caches;
mod checks;
mod exits;
mod forker;
mod handoff_drops;
mod handoff_kit;
mod handoffs;
mod leaks;
mod nested;
mod qsbr;
#[path = "../../tests/watch_util/shared_counter.rs"]
mod shared_counter;
mod streams;
mod workers;
mod world;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use exitq::{Callbacks, Domain, Expedite, RcuCell, RcuOption, Reclaimer};

use caches::{cache_reader, CACHE_READERS};
use checks::{final_checks, report, watchdog};
use exits::{canceller, churner, exiter};
use forker::forker;
use handoffs::{barrier_looper, handoff_spawner};
use nested::nester;
use qsbr::qsbr_worker;
use shared_counter::shared_counter;
use streams::{streamer, STREAMERS};
use workers::{checker, worker, Bomb};
use world::{new_obj, world, Ops, Slot, Tracked, Violations, World, IN_FORK_CHILD, WORLD};

/// Parsed options.
pub(crate) struct Opts {
    pub(crate) seconds: u64,
    pub(crate) threads: usize,
    pub(crate) qsbr: usize,
    pub(crate) handoffs: usize,
    pub(crate) seed: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        seconds: 10,
        threads: 12,
        qsbr: 3,
        handoffs: 1,
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
            "--qsbr" => o.qsbr = value("--qsbr")? as usize,
            "--handoffs" => o.handoffs = value("--handoffs")? as usize,
            "--seed" => o.seed = value("--seed")?,
            "-h" | "--help" => {
                println!(
                    "usage: torture [--seconds N] [--threads N] [--qsbr N] [--handoffs N] [--seed N]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    if o.seconds == 0 || o.threads == 0 || o.threads > 1024 || o.qsbr > 1024 || o.handoffs > 64 {
        return Err(
            "--seconds must be positive, --threads in 1..=1024, --qsbr in 0..=1024, \
             --handoffs in 0..=64"
                .into(),
        );
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
        (
            handoffs::SLOT_NAME,
            Domain::builder()
                .batch_size(4)
                .flush_latency(fast)
                .exit_poll(Some(fast)),
        ),
        // Last: used by the streamers only (`World::shared`).
        ("polled", Domain::builder().batch_size(16)),
    ];
    configs
        .into_iter()
        .enumerate()
        .map(|(i, (name, b))| {
            let domain = b.stall_timeout(Duration::from_secs(30)).build();
            Slot {
                name,
                cell: RcuCell::new(&domain, Tracked::new(i, 0)),
                option: RcuOption::new(&domain, Some(Tracked::new(i, 0))),
                domain,
                current: AtomicPtr::new(new_obj(0)),
                issued: AtomicU64::new(0),
                ran: AtomicU64::new(0),
                panics: AtomicU64::new(0),
            }
        })
        .collect()
}

fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("torture: {e}");
            return ExitCode::from(2);
        }
    };
    // Expected panics are counted, not printed: a payload whose drop
    // panics, the refusals of nested barriers and of a fork child's
    // barrier (which must not print: a lock another thread held at the
    // fork stays held in the child).
    std::panic::set_hook(Box::new(|info| {
        let expected = info.payload().downcast_ref::<Bomb>().is_some() || {
            let m = info.to_string();
            ["(expected)", "(deadlock)", "child of fork()"]
                .iter()
                .any(|e| m.contains(e))
        };
        if !expected {
            eprintln!("torture: unexpected panic: {info}");
        }
        // Kept for `role`, should the panic end the role after all (not in
        // a fork child, whose copy of a role ends quietly; not while the
        // thread's locals are torn down).
        if !IN_FORK_CHILD.load(Ordering::Relaxed) {
            let _ = LAST_PANIC.try_with(|l| *l.borrow_mut() = Some(info.to_string()));
        }
    }));
    // Before any domain: its destructor runs before exitq's exit path.
    exits::create_elder_key();
    WORLD
        .set(World {
            slots: slots(),
            stop: AtomicBool::new(false),
            v: Violations::default(),
            ops: Ops::default(),
            hooks: Mutex::new(Vec::new()),
            in_child: shared_counter(),
        })
        .unwrap_or_else(|_| unreachable!("set once"));
    // After the domains: its destructor runs after exitq's exit path.
    leaks::create_late_key();
    let w = world();
    println!(
        "torture: {} s, {} workers, {} QSBR workers, seed {} ({} domains: {})",
        opts.seconds,
        opts.threads,
        opts.qsbr,
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
        roles.push(role("worker", format!("worker-{id}"), move || {
            worker(id, seed)
        }));
    }
    for id in 0..opts.qsbr {
        roles.push(role("qsbr", format!("qsbr-{id}"), move || {
            qsbr_worker(id, seed)
        }));
    }
    for id in 0..2 {
        roles.push(role("checker", format!("checker-{id}"), move || {
            checker(id, seed)
        }));
    }
    roles.push(role("exiter", "exiter".into(), move || exiter(seed)));
    roles.push(role("canceller", "canceller".into(), move || {
        canceller(seed)
    }));
    roles.push(role("churner", "churner".into(), move || churner(seed)));
    roles.push(role("nester", "nester".into(), move || nester(seed)));
    roles.push(role("forker", "forker".into(), move || forker(seed)));
    for id in 0..opts.handoffs {
        roles.push(role(
            "hand-off spawner",
            format!("handoffs-{id}"),
            move || handoff_spawner(id, seed),
        ));
    }
    for id in 0..if opts.handoffs > 0 { 2 } else { 0 } {
        roles.push(role("barrier looper", format!("looper-{id}"), move || {
            barrier_looper(id, seed)
        }));
    }
    for id in 0..STREAMERS {
        roles.push(role("streamer", format!("streamer-{id}"), move || {
            streamer(id, seed)
        }));
    }
    for id in 0..CACHE_READERS {
        roles.push(role("cache reader", format!("cache-{id}"), move || {
            cache_reader(id, seed)
        }));
    }
    let (handoffs, qsbr) = (opts.handoffs > 0, opts.qsbr > 0);
    let dog = thread::spawn(move || watchdog(start, Duration::from_secs(60), handoffs, qsbr));
    thread::sleep(Duration::from_secs(opts.seconds));
    w.stop.store(true, Ordering::Relaxed);
    stopped_within(&roles, Duration::from_secs(120));
    let mut role_panics = HashMap::new();
    for (name, h) in roles {
        if h.join().is_err() {
            *role_panics.entry(name).or_insert(0u32) += 1;
        }
    }
    dog.join().expect("watchdog");
    final_checks();
    handoffs::final_check(handoffs);
    report(&opts, start.elapsed(), &role_panics)
}

/// Fails the run if some role has not stopped within `limit` of being
/// told to (a hang the watchdog, which stops with the roles, would miss).
fn stopped_within(roles: &[(&str, thread::JoinHandle<()>)], limit: Duration) {
    let since = Instant::now();
    while let Some((name, _)) = roles.iter().find(|(_, h)| !h.is_finished()) {
        if since.elapsed() > limit {
            eprintln!("torture: FAILURE: a {name} thread did not stop within {limit:?}: a hang");
            checks::hang_exit();
        }
        thread::sleep(Duration::from_millis(50));
    }
}

thread_local! {
    /// The calling thread's last panic, as the hook saw it (with its
    /// location): the hook stays quiet for the kinds roles catch
    /// themselves, so a role that one of them ends says it here.
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Spawns a role's thread (named `thread_name`); a panic that ends it is
/// reported with its message and location, then counted by `main`.
fn role(
    kind: &'static str,
    thread_name: String,
    body: impl FnOnce() + Send + 'static,
) -> (&'static str, thread::JoinHandle<()>) {
    let h = thread::Builder::new()
        .name(thread_name.clone())
        .spawn(move || {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                if IN_FORK_CHILD.load(Ordering::Relaxed) {
                    // A fork child's copy of this role, stopped by exitq
                    // (`run::abandon`): it ends quietly, as it always did
                    // (printing could wait on a lock the parent held).
                    std::panic::resume_unwind(payload);
                }
                let what = LAST_PANIC
                    .with(|l| l.borrow_mut().take())
                    .unwrap_or_default();
                eprintln!("torture: the {kind} thread {thread_name} ended in a panic: {what}");
                if payload.downcast_ref::<Bomb>().is_some() {
                    // A `Bomb` panics when dropped outside a panic.
                    std::mem::forget(payload);
                    std::panic::resume_unwind(Box::new("a Bomb"));
                }
                std::panic::resume_unwind(payload);
            }
        })
        .unwrap_or_else(|e| panic!("torture: cannot spawn a {kind} thread: {e}"));
    (kind, h)
}
