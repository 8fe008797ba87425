//! `--cleanup crossbeam-epoch`: crossbeam-epoch the way its documentation
//! recommends for threads that retire: a `Collector` of the run's own,
//! a `LocalHandle` registered per thread at start, and at exit
//! `pin()` -> unlink -> `defer_destroy` -> `flush()`, then the handle is
//! dropped (which moves what is left of the thread's bag to the global
//! queue and unlinks the thread from the participant list).
//!
//! crossbeam-epoch does not promise that a deferred function ever runs
//! ("there is no guarantee when exactly `f` will be executed", and none at
//! all if no thread pins again); the reclaiming is done by whoever pins
//! (every 128th pin collects) or flushes. herd's monitor pins on every
//! walk, which drives it during the run; at the end [`Epoch::drive`] pins
//! and flushes from the finishing thread until every entry is freed, with
//! a deadline, and the run reports how many frees that took
//! (`cleanup_frees_at_finish`).

use std::time::Instant;

use crossbeam_epoch::{Collector, LocalHandle, Owned};

use super::retired::Retired;

/// The run's collector.
#[derive(Debug)]
pub(super) struct Epoch {
    collector: Collector,
}

/// What a thread keeps from its start to its exit.
#[derive(Debug)]
pub(super) struct EpochThread {
    handle: LocalHandle,
    retired: Owned<Retired>,
}

impl Epoch {
    pub(super) fn new() -> Epoch {
        Epoch {
            collector: Collector::new(),
        }
    }

    /// Thread start: a registered handle, and the object to retire at exit.
    pub(super) fn register(&self, retired: Retired) -> EpochThread {
        EpochThread {
            handle: self.collector.register(),
            retired: Owned::new(retired),
        }
    }

    /// A reader's handle (the monitor's), pinned for each walk.
    pub(super) fn reader(&self) -> LocalHandle {
        self.collector.register()
    }

    /// Runs `f` pinned.
    pub(super) fn read<R>(handle: &LocalHandle, f: impl FnOnce() -> R) -> R {
        let _guard = handle.pin();
        f()
    }

    /// The exit work: `unlink` (which takes the writer lock) while pinned,
    /// then the entry's free deferred and the thread's bag flushed.
    pub(super) fn exit(&self, thread: EpochThread, unlink: impl FnOnce()) {
        let EpochThread { handle, retired } = thread;
        let guard = handle.pin();
        unlink();
        let shared = retired.into_shared(&guard);
        // SAFETY: the entry was unlinked above, so a reader that pins from
        // now on cannot reach it; readers pinned before keep the epoch
        // from advancing past them. `shared` is owned by nobody else and
        // destroyed once, by crossbeam.
        unsafe { guard.defer_destroy(shared) };
        guard.flush();
        drop(guard);
        drop(handle);
    }

    /// Pins and flushes until `done()` or `deadline`; returns the number
    /// of pin-and-flush rounds it took.
    pub(super) fn drive(&self, done: impl Fn() -> bool, deadline: Instant) -> u64 {
        let handle = self.collector.register();
        let mut rounds = 0;
        while !done() && Instant::now() < deadline {
            handle.pin().flush();
            rounds += 1;
        }
        rounds
    }
}
