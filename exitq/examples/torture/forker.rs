//! fork() with held guards (the fork model): a thread inside a read
//! section (a guard, or an online `QsbrReader`), with callbacks deferred
//! in it (ready batches may wait for the section's end), forks. The child
//! drops the guard (forgets the reader), checks that `barrier` and
//! `qsbr_reader` refuse, and exits, through `exit` (its thread-local destructors run)
//! or `_exit`; nothing of the parent's may run there (every callback and
//! hook counts itself in shared memory if it runs in a child). The parent
//! checks its object again under the guard, drops it, and gives the child
//! 30 s.
//!
//! Or a callback forks: the forker defers a callback that calls `fork()`
//! and returns in the child, then counted callbacks behind it, and waits
//! for them with `barrier`. The child goes on inside whatever run the
//! callback ran in (any thread's: a worker's `defer`, the reclaimer, this
//! barrier): that run must stop after the forking callback and the exitq
//! call that ran it panic; nothing more of the parent's may run in the
//! child (counted in shared memory, as above). The child cannot be asked to exit (the callback does not know
//! what it returns into), so the parent kills it after 20 ms, the time
//! the rest of its run would have taken many times over. A child whose
//! forking callback ran inside a thread's exit destructor (a thread that
//! used exitq from another destructor) cannot unwind that panic: it
//! aborts, printing "fatal runtime error: failed to initiate panic, error
//! 5, aborting" to the run's stderr, which is its expected end (seen in a
//! CI run on 2026-12-06, whose torture passed). Any other panic in a
//! child is counted (the panic hook, in shared memory) as a violation: a
//! child whose destructors defer while it unwinds from the refusal (as a
//! cache letting go of the value it kept may) used to
//! abort on a second refusal ("panic in a destructor during cleanup",
//! 2026-12-07); such a `defer` now leaks its callback.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use exitq::{Guard, QsbrReader};

use crate::workers::{check_cell, check_current, counted_defer};
use crate::world::{inc, world, Rng, Slot, IN_FORK_CHILD};

/// The child's side: never returns.
fn child(slot: &Slot, section: Section<'_>, normal_exit: bool) -> ! {
    IN_FORK_CHILD.store(true, Ordering::Relaxed);
    match section {
        Section::Guard(g) => drop(g),
        // Its record is the parent's: nothing to release here.
        Section::Qsbr(q) => std::mem::forget(q),
        Section::None => {}
    }
    let refused = catch_unwind(AssertUnwindSafe(|| slot.domain.barrier())).is_err()
        && catch_unwind(AssertUnwindSafe(|| drop(slot.domain.qsbr_reader()))).is_err();
    let code = if refused { 0 } else { 3 };
    // SAFETY: ends the child; `exit` runs this thread's thread-local
    // destructors (exitq's among them) and the atexit handlers, `_exit`
    // nothing.
    unsafe {
        if normal_exit {
            libc::exit(code)
        } else {
            libc::_exit(code)
        }
    }
}

/// Waits for child `pid` at most `limit`: its exit code, or None (killed).
fn wait_child(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our child; WNOHANG polls.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if r < 0 || start.elapsed() > limit {
            // SAFETY: our child; then reap it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// What the forking thread holds across the fork.
enum Section<'a> {
    Guard(Guard<'a>),
    Qsbr(QsbrReader),
    None,
}

/// A callback of `slot`'s domain forks, with counted callbacks behind it;
/// the child is killed after 20 ms (module docs). False if `fork` failed.
fn fork_inside_a_callback(slot: &'static Slot, rng: &Rng) -> bool {
    // The child's pid, written by the callback in the parent (-1: failed).
    static CHILD: AtomicI32 = AtomicI32::new(0);
    CHILD.store(0, Ordering::SeqCst);
    slot.domain.defer(|| {
        // SAFETY: the child returns into the exitq run it is in, which
        // stops after this callback; it is killed by the parent, and
        // anything of the parent's it runs first counts itself.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            IN_FORK_CHILD.store(true, Ordering::Relaxed);
            return;
        }
        CHILD.store(pid.max(-1), Ordering::SeqCst);
    });
    for _ in 0..rng.below(12) {
        counted_defer(slot, rng);
    }
    slot.domain.barrier(); // the forking callback ran, in the parent
    let pid = CHILD.load(Ordering::SeqCst);
    if pid <= 0 {
        return false;
    }
    thread::sleep(Duration::from_millis(20));
    let mut status = 0;
    // SAFETY: our child; then reap it.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &mut status, 0);
    }
    true
}

pub(crate) fn forker(seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xF04C);
    while !w.stop.load(Ordering::Relaxed) {
        let slot = &w.slots[rng.below(w.shared() as u64) as usize];
        if rng.chance(30) {
            if fork_inside_a_callback(slot, &rng) {
                inc(&w.ops.forks_in_callbacks);
            } else {
                thread::sleep(Duration::from_millis(50)); // a resource limit
            }
            thread::sleep(Duration::from_millis(5 + rng.below(40)));
            continue;
        }
        let mut section = if rng.chance(50) {
            Section::Guard(slot.domain.read())
        } else {
            Section::Qsbr(slot.domain.qsbr_reader())
        };
        check_current(slot, &rng);
        for _ in 0..rng.below(12) {
            counted_defer(slot, &rng); // sealed inside the section
        }
        let normal_exit = rng.chance(50);
        // SAFETY: the child only drops the guard, calls one entry point
        // under `catch_unwind` (no printing: the panic hook stays quiet
        // for it) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child(
                slot,
                std::mem::replace(&mut section, Section::None),
                normal_exit,
            );
        }
        if pid > 0 {
            check_current(slot, &rng); // still protected here
            if let Section::Qsbr(q) = &section {
                check_cell(slot, q, &rng);
            }
        }
        drop(section);
        if pid < 0 {
            // A resource limit on a loaded machine: try again later.
            thread::sleep(Duration::from_millis(50));
            continue;
        }
        if wait_child(pid, Duration::from_secs(30)) != Some(0) {
            inc(&w.v.fork_child_failed);
        }
        inc(&w.ops.forks);
        thread::sleep(Duration::from_millis(5 + rng.below(40)));
    }
}
