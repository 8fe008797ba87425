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
//! which `Tracked`'s drop calls too), `domains.rs` (the domains and their
//! configurations), `roles.rs` (spawning the roles, stopping them),
//! `opts.rs` (the command line), `workers.rs` (readers, writers, barrier
//! checkers), `qsbr.rs` (QSBR workers), `streams.rs` (the polled
//! domain's streamers), `caches.rs` (cache readers), `exits.rs` (exiting,
//! cancelled and churned threads), `handoffs.rs` (exits raced with
//! steals) and `handoff_drops.rs` (with a domain's drop), `handoff_kit.rs`
//! (what those two share), `leaks.rs` (what they leak), `nested.rs`
//! (nested barriers), `forker.rs` (fork with held guards), `checks.rs`
//! (watchdog, final checks, report); this file sets up the world and
//! runs the roles for the time asked.

mod caches;
mod checks;
mod domains;
mod exits;
mod forker;
mod handoff_drops;
mod handoff_kit;
mod handoffs;
mod leaks;
mod nested;
mod opts;
mod qsbr;
mod roles;
#[path = "../../tests/watch_util/shared_counter.rs"]
mod shared_counter;
mod streams;
mod workers;
mod world;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use checks::{final_checks, report, watchdog};
use opts::parse;
use shared_counter::shared_counter;
use workers::Bomb;
use world::{world, Ops, Violations, World, IN_FORK_CHILD, WORLD};

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
            if IN_FORK_CHILD.load(Ordering::Relaxed) {
                if let Some(w) = WORLD.get() {
                    w.child_panics.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        // Kept for `role`, should the panic end the role after all (not in
        // a fork child, whose copy of a role ends quietly; not while the
        // thread's locals are torn down).
        if !IN_FORK_CHILD.load(Ordering::Relaxed) {
            roles::note_panic(info.to_string());
        }
    }));
    // Before any domain: its destructor runs before exitq's exit path.
    exits::create_elder_key();
    WORLD
        .set(World {
            slots: domains::slots(),
            stop: AtomicBool::new(false),
            v: Violations::default(),
            ops: Ops::default(),
            hooks: Mutex::new(Vec::new()),
            in_child: shared_counter(),
            child_panics: shared_counter(),
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
    let roles = roles::spawn_all(&opts);
    let (handoffs, qsbr) = (opts.handoffs > 0, opts.qsbr > 0);
    let dog = thread::spawn(move || watchdog(start, Duration::from_secs(60), handoffs, qsbr));
    thread::sleep(Duration::from_secs(opts.seconds));
    w.stop.store(true, Ordering::Relaxed);
    roles::stopped_within(&roles, Duration::from_secs(120));
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
