//! Running work: the callbacks of batches and exit hooks.
//!
//! Whoever runs work (a thread its own ready batches, a reclaim pass, the
//! reclaimer, shutdown) goes through [`run_chain`]: every callback and hook
//! runs exactly once, each under `catch_unwind` (a panic is counted, its
//! payload dropped without letting a second panic escape, and the rest
//! still run), with cancellation disabled ([`cancel`](crate::cancel)) and
//! the thread marked as running this domain's callbacks (so `barrier`
//! called from a callback panics instead of waiting for itself, and a
//! callback that defers does not start running batches recursively).
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::batch::{drop_payload, Work};
use crate::cancel::NoCancel;
use crate::llist::{Chain, Node};

std::thread_local! {
    /// Id of the domain whose callbacks this thread is running (0: none).
    /// No destructor: readable during thread-local teardown.
    static IN_CALLBACK: Cell<u64> = const { Cell::new(0) };
}

/// Marks the calling thread as running callbacks of one domain while alive
/// (restores the previous mark: runs of different domains nest).
pub(crate) struct InCallback {
    previous: u64,
}

impl InCallback {
    #[inline]
    pub(crate) fn enter(domain_id: u64) -> InCallback {
        InCallback {
            previous: IN_CALLBACK.replace(domain_id),
        }
    }
}

impl Drop for InCallback {
    #[inline]
    fn drop(&mut self) {
        IN_CALLBACK.set(self.previous);
    }
}

/// Whether the calling thread is running callbacks of domain `id`.
#[inline]
pub(crate) fn in_callback(id: u64) -> bool {
    IN_CALLBACK.get() == id
}

/// What a run did, for the domain's counters.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Ran {
    /// Callbacks and hooks run (panicked ones included).
    pub(crate) callbacks: u64,
    pub(crate) panicked: u64,
    pub(crate) exits: u64,
    /// Batches run.
    pub(crate) batches: u64,
    /// Callbacks of batches counted in `pending` (to subtract).
    pub(crate) pending: usize,
    /// Batches still counted as held by a thread (pushed at thread exit).
    pub(crate) held: usize,
}

/// Runs every callback and hook of `chain` (the grace period is the
/// caller's business) and hands each emptied batch node to `recycle`.
pub(crate) fn run_chain(
    domain_id: u64,
    mut chain: Chain<Work>,
    mut recycle: impl FnMut(Box<Node<Work>>),
) -> Ran {
    let _no_cancel = NoCancel::new();
    let _in = InCallback::enter(domain_id);
    let mut ran = Ran::default();
    while let Some(mut node) = chain.pop_front() {
        match &mut node.value {
            Work::Batch(b) => {
                if b.in_pending {
                    ran.pending += b.sealed_len;
                    b.in_pending = false;
                }
                if b.in_held {
                    ran.held += 1;
                    b.in_held = false;
                }
                let (n, p) = b.run();
                ran.callbacks += n;
                ran.panicked += p;
                ran.batches += 1;
                recycle(node);
            }
            Work::Exit(_) => {
                let Work::Exit(hook) = node.value else {
                    unreachable!("matched above")
                };
                if let Err(payload) = catch_unwind(AssertUnwindSafe(hook)) {
                    ran.panicked += 1;
                    drop_payload(payload);
                }
                ran.callbacks += 1;
                ran.exits += 1;
            }
        }
    }
    ran
}
