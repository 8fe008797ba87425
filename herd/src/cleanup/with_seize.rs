//! `--cleanup seize`: seize (the reclaimer under papaya) the way its
//! guide recommends: one `Collector` for the structure, readers under
//! `collector.enter()`, and `collector.retire(ptr, reclaim::boxed)` once a
//! node is unreachable.
//!
//! The batch size is seize's own default (32, or the CPU count if larger)
//! unless `--seize-batch` gives one: seize collects retired objects in a
//! per-thread batch and, once it holds `batch` of them, issues one heavy
//! barrier (`membarrier(PRIVATE_EXPEDITED)`: an IPI to every CPU running
//! the process) and hands the batch to the threads active at that moment.
//! The batch is per thread *id*, and ids are reused by later threads: with
//! short-lived threads a batch fills only as fast as its id's successive
//! owners retire, so a large batch holds retired objects for long
//! (docs/results-reclaimers.md measures 1, 4 and 32).
//!
//! seize's per-thread state is keyed by a thread id from a global
//! allocator (a `Mutex`-protected free list), taken at a thread's first
//! `enter` and given back by a thread-local destructor at exit. herd
//! enters once at thread start, so that destructor is registered before
//! herd's own and runs after it (see `exit_tls.rs`). An exiting thread's
//! unfinished batch stays in its id's slot and is completed by the next
//! thread that gets the id; at the end of the run, with every storm
//! thread gone and the monitor stopped, [`Seize::drive`] reclaims what is
//! left with `reclaim_all` (what dropping the collector does).

use seize::{reclaim, Collector};

use super::retired::Retired;

/// The run's collector.
#[derive(Debug)]
pub(super) struct Seize {
    collector: Collector,
}

/// What a thread keeps from its start to its exit.
#[derive(Debug)]
pub(super) struct SeizeThread {
    retired: Box<Retired>,
}

impl Seize {
    pub(super) fn new(batch: Option<usize>) -> Seize {
        let collector = Collector::new();
        Seize {
            collector: match batch {
                Some(b) => collector.batch_size(b),
                None => collector,
            },
        }
    }

    /// Thread start: seize's thread id, and the object to retire.
    pub(super) fn register(&self, retired: Retired) -> SeizeThread {
        drop(self.collector.enter());
        SeizeThread {
            retired: Box::new(retired),
        }
    }

    /// Runs `f` inside a guard. (Loads in the walk are Acquire, not
    /// `Guard::protect`'s SeqCst: on x86-64 both are plain loads, and
    /// the entries themselves are never unmapped, see `registry.rs`.)
    pub(super) fn read<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.collector.enter();
        f()
    }

    /// The exit work: `unlink`, then retire the entry.
    pub(super) fn exit(&self, thread: SeizeThread, unlink: impl FnOnce()) {
        unlink();
        let p = Box::into_raw(thread.retired);
        // SAFETY: the entry was unlinked above (unreachable for readers
        // that enter from now on) and this thread does not touch `p`
        // again; `p` came from `Box::into_raw`, as `reclaim::boxed` needs.
        unsafe { self.collector.retire(p, reclaim::boxed::<Retired>) };
    }

    /// Reclaims every batch still pending.
    ///
    /// # Safety
    /// No thread may be inside a guard of this collector, nor enter one,
    /// until this returns (seize's `reclaim_all` contract): every thread
    /// that registered has finished its exit work and the monitor is
    /// stopped.
    pub(super) unsafe fn drive(&self) {
        // SAFETY: the caller's contract is reclaim_all's.
        unsafe { self.collector.reclaim_all() };
    }
}
