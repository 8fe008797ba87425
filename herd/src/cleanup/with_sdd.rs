//! `--cleanup sdd`: sdd (the reclaimer under scc) the way its README
//! recommends: the value in an `sdd::Owned`, readers under `sdd::Guard`,
//! and dropping the `Owned` retires it ("automatically retire the
//! contained value when the last reference is dropped").
//!
//! sdd keeps one collector per thread in a thread-local. At thread start
//! herd makes a guard once, so sdd's thread-local exists (and its
//! destructor is registered) before herd's own exit destructor is: the
//! exit work then runs while sdd's collector is still alive (see
//! `exit_tls.rs` for the order). At exit: a guard, unlink, drop the
//! `Owned`, drop the guard. When the thread's collector is destroyed its
//! garbage stays in it, marked invalid, and other threads' epoch scans
//! (one every 128 guards that carry garbage) reclaim it; at the end
//! [`drive`] makes accelerated guards on the finishing thread until every
//! entry is freed, with a deadline.

use std::time::Instant;

use super::retired::Retired;

/// What a thread keeps from its start to its exit.
#[derive(Debug)]
pub(super) struct SddThread {
    retired: sdd::Owned<Retired>,
}

/// Thread start: sdd's thread-local collector, and the object to retire.
pub(super) fn register(retired: Retired) -> SddThread {
    drop(sdd::Guard::new());
    SddThread {
        retired: sdd::Owned::new(retired),
    }
}

/// Runs `f` under a guard.
pub(super) fn read<R>(f: impl FnOnce() -> R) -> R {
    let _guard = sdd::Guard::new();
    f()
}

/// The exit work: `unlink` under a guard, then the `Owned` dropped (retired).
pub(super) fn exit(thread: SddThread, unlink: impl FnOnce()) {
    let guard = sdd::Guard::new();
    unlink();
    drop(thread.retired);
    drop(guard);
}

/// Accelerated guards until `done()` or `deadline`; returns how many.
pub(super) fn drive(done: impl Fn() -> bool, deadline: Instant) -> u64 {
    let mut rounds = 0;
    while !done() && Instant::now() < deadline {
        let guard = sdd::Guard::new();
        guard.accelerate();
        drop(guard);
        rounds += 1;
    }
    rounds
}
