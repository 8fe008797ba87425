//! Threads that end while the domains run: short-lived threads with exit
//! hooks (`exiter`), raw pthreads cancelled in `nanosleep` or between two
//! `synchronize` calls (`canceller`), both of which sometimes keep a
//! `QsbrReader` online until they end, or leak a guard, a `Reader` or an
//! online `QsbrReader` (`leaks.rs`), exiters whose first use of exitq is
//! an older pthread key's destructor (`arm_elder`), and domains
//! dropped under their live threads (`churner`), whose hooks, run inside
//! the thread's exit walk, read a shared domain that the walk releases in
//! between (the shape of a use after free fixed on 2026-12-06).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use exitq::{Callbacks, Domain, Reclaimer};

use crate::leaks;
use crate::workers::{check_cell, check_current, counted_defer};
use crate::world::{inc, not_in_child, world, Rng};

/// Created before any domain (`create_elder_key`): its destructor runs
/// before exitq's exit path.
static ELDER_KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();

/// Call before the first domain is built.
pub(crate) fn create_elder_key() {
    ELDER_KEY.get_or_init(|| leaks::new_key(elder_dtor));
}

/// What the elder key's destructor does on a thread: a hook and callbacks
/// on slot `slot`'s domain.
struct Elder {
    slot: usize,
    seed: u64,
}

extern "C" fn elder_dtor(p: *mut c_void) {
    // SAFETY: the value `leaks::put` stored (glibc cleared the slot).
    let e = unsafe { Box::from_raw(p.cast::<Elder>()) };
    elder_use(&e);
}

fn elder_use(e: &Elder) {
    let slot = &world().slots[e.slot];
    let rng = Rng::new(e.seed);
    // The thread's body is over: the hook may run from now on.
    register_hook(&slot.domain, &Arc::new(AtomicBool::new(true)));
    for _ in 0..rng.below(10) {
        counted_defer(slot, &rng);
    }
    inc(&world().ops.elder_key_uses);
}

/// Leaves to the elder key's destructor a hook and callbacks on a random
/// slot's domain: for a thread that does nothing else with exitq, its
/// first use, before exitq's exit path (a hook lost that way before v3.2).
fn arm_elder(rng: &Rng) {
    let key = *ELDER_KEY.get().expect("created in main");
    let e = Elder {
        slot: rng.below(world().shared() as u64) as usize,
        seed: rng.next(),
    };
    if let Err(e) = leaks::put(key, e) {
        // No second-level block for the key (ENOMEM): use it now.
        elder_use(&e);
    }
}

/// Registers a hook of the calling thread on `domain`: it must run once,
/// after `finished` is set.
pub(crate) fn register_hook(domain: &Domain, finished: &Arc<AtomicBool>) {
    register_hook_then(domain, finished, || {});
}

/// [`register_hook`], the hook also running `then`.
pub(crate) fn register_hook_then(
    domain: &Domain,
    finished: &Arc<AtomicBool>,
    then: impl FnOnce() + Send + 'static,
) {
    let w = world();
    let count = Arc::new(AtomicU32::new(0));
    w.hooks.lock().unwrap().push(count.clone());
    let finished = finished.clone();
    domain.register_exit(move || {
        not_in_child();
        // Acquire: pairs with the thread's (or canceller's) Release.
        if !finished.load(Ordering::Acquire) {
            inc(&world().v.hook_early);
        }
        if count.fetch_add(1, Ordering::Relaxed) != 0 {
            inc(&world().v.hook_twice);
        }
        inc(&world().ops.hooks_ran);
        then();
    });
    inc(&w.ops.hooks_registered);
}

/// The exit walk with reads in it. The thread registers a hook on `older`,
/// then reads a shared slot's domain (its record there comes after
/// `older`'s), then registers a hook on `newer`; both domains are then
/// dropped under it, so both hooks run inside its exit walk, newest record
/// first: `newer`'s hook reads the shared domain on the thread's record
/// there, the walk releases that record, and `older`'s hook reads it
/// again, on a temporary record. Each read checks the slot's object alive
/// across a random delay: before 2026-12-06 the second read could be on
/// the released record, which another thread may have claimed, so no
/// grace period waited for it.
fn walk_reads(older: Domain, newer: &Domain, finished: &Arc<AtomicBool>, seed: u64) {
    let rng = Rng::new(seed);
    let slot = &world().slots[rng.below(world().shared() as u64) as usize];
    let read = move |seed: u64| {
        move || {
            let rng = Rng::new(seed);
            let _g = slot.domain.read();
            check_current(slot, &rng);
            inc(&world().ops.walk_reads);
        }
    };
    register_hook_then(&older, finished, read(rng.next()));
    drop(older); // our handle; the record stays ours
    {
        let _g = slot.domain.read();
        check_current(slot, &rng);
    }
    register_hook_then(newer, finished, read(rng.next()));
}

/// Spawns short-lived threads that register exit hooks and return.
pub(crate) fn exiter(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xE417);
    while !w.stop.load(Ordering::Relaxed) {
        let n = 1 + rng.below(8);
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let seed = rng.next() ^ k;
                thread::spawn(move || {
                    let rng = Rng::new(seed);
                    if rng.chance(10) {
                        // exitq's first use on this thread: the elder
                        // key's destructor, before exitq's exit path.
                        arm_elder(&rng);
                        return;
                    }
                    // A use already made before the elder key's.
                    let elder = rng.chance(10);
                    if elder {
                        arm_elder(&rng);
                    }
                    let finished = Arc::new(AtomicBool::new(false));
                    let mut used = Vec::new();
                    for _ in 0..1 + rng.below(3) {
                        let slot = &world().slots[rng.below(world().shared() as u64) as usize];
                        register_hook(&slot.domain, &finished);
                        for _ in 0..rng.below(20) {
                            counted_defer(slot, &rng);
                        }
                        let _g = slot.domain.read();
                        check_current(slot, &rng);
                        used.push(slot);
                    }
                    // Online until the thread returns (dropped with it).
                    // After the defers: online on A, a defer into B may wait
                    // for B's grace period (B's inline reclaimer, its
                    // backlog limit), and a thread online on B deferring
                    // into A would wait for this one (the cross-domain
                    // cycle `QsbrReader`'s docs warn of).
                    let _held: Vec<_> = used
                        .iter()
                        .filter(|_| rng.chance(30))
                        .map(|slot| {
                            let q = slot.domain.qsbr_reader();
                            check_cell(slot, &q, &rng);
                            q
                        })
                        .collect();
                    // Not with the elder key armed: its destructor runs
                    // before exitq's exit path releases a leak, and its
                    // defers may wait for a grace period (an inline or
                    // backlogged domain), so the thread would wait while
                    // holding the leaked section, and a cancelled
                    // synchronizer holding a leak on the domain it waits
                    // for closes a cycle (the cross-domain cycle the
                    // docs warn of: a hang seen twice in 240 s runs).
                    if !elder {
                        leaks::maybe_leak(&rng, None);
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
pub(crate) struct CancelArg {
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
pub(crate) extern "C-unwind" fn cancellable(arg: *mut c_void) -> *mut c_void {
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

pub(crate) fn cancel_setup(arg: *mut c_void) -> (usize, bool) {
    // SAFETY: `arg` is the `Box<CancelArg>` leaked by `canceller`.
    let arg = unsafe { Box::from_raw(arg.cast::<CancelArg>()) };
    let rng = Rng::new(arg.seed);
    let slot = &world().slots[arg.slot];
    register_hook(&slot.domain, &arg.finished);
    for _ in 0..rng.below(10) {
        counted_defer(slot, &rng);
    }
    // Not on the domain a synchronizer waits for (inside a section of it,
    // `synchronize` panics).
    leaks::maybe_leak(&rng, arg.synchronizer.then_some(arg.slot));
    // Release: the canceller waits for this before cancelling.
    arg.started.store(true, Ordering::Release);
    (arg.slot, arg.synchronizer)
}

/// Spawns raw pthreads and cancels them.
pub(crate) fn canceller(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xCA4C);
    while !w.stop.load(Ordering::Relaxed) {
        let started = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let arg = Box::new(CancelArg {
            slot: rng.below(w.shared() as u64) as usize,
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
pub(crate) fn churner(seed: u64) {
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
        // Half the rounds: a second domain, older on each thread than its
        // use of a shared slot, dropped the same way (see `walk_reads`).
        let older = rng.chance(50).then(Domain::new);
        let ran = Arc::new(AtomicU64::new(0));
        let (go, hold) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(true)),
        );
        let n = 1 + rng.below(4);
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let (d, ran, go, hold) = (domain.clone(), ran.clone(), go.clone(), hold.clone());
                let older = older.clone();
                let finished = Arc::new(AtomicBool::new(false));
                let seed = rng.next();
                thread::spawn(move || {
                    if let Some(older) = older {
                        walk_reads(older, &d, &finished, seed);
                    }
                    register_hook(&d, &finished);
                    for _ in 0..10 {
                        let ran = ran.clone();
                        d.defer(move || {
                            not_in_child();
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
        drop(older);
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
