//! Running work: the callbacks of batches and exit hooks.
//!
//! Whoever runs work (a thread its own ready batches, a reclaim pass, the
//! reclaimer, shutdown) goes through [`run_chain`] (a drain tick through
//! [`run_items_and_chain`], which `run_chain` calls): every callback and hook
//! runs exactly once, each under `catch_unwind` (a panic is counted, its
//! payload dropped without letting a second panic escape, and the rest
//! still run), with cancellation disabled ([`cancel`](crate::cancel)) and
//! the thread marked as running this domain's callbacks (so `barrier`
//! called from a callback panics instead of waiting for itself, also when
//! callbacks of other domains run nested in between, and a callback that
//! defers does not start running batches recursively).
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::batch::{drop_payload, Item, Work};
use crate::cancel::NoCancel;
use crate::fork;
use crate::llist::{Chain, Node};

/// One run of a domain's callbacks in progress on this thread, on
/// `run_chain`'s stack; runs of different domains nest (a callback of A
/// runs B's barrier, whose pass runs B's callbacks), each frame linking to
/// the one it runs inside.
struct Frame {
    domain_id: u64,
    /// This run's number on this thread ([`current_run`]).
    run: u64,
    outer: *const Frame,
}

std::thread_local! {
    /// The innermost run in progress on this thread (null: none). No
    /// destructor: readable during thread-local teardown.
    static RUNNING: Cell<*const Frame> = const { Cell::new(ptr::null()) };
    /// The runs this thread started: the last one's number.
    static RUNS: Cell<u64> = const { Cell::new(0) };
}

/// The number of the innermost run in progress on this thread, unique
/// among this thread's runs; 0 outside any run. What a callback sees
/// here is the run that calls it (a nested run is over when the callback
/// that started it goes on). Every callback of a run was deferred before
/// the run started (its grace period had passed, or at shutdown no
/// reader was left): a run's callbacks are fixed before its frame is
/// linked (`keep.rs` relies on this: one look at a cell's caches, after
/// a fence in the run, serves every value the run retires).
#[inline]
pub(crate) fn current_run() -> u64 {
    let p = RUNNING.get();
    // SAFETY: as in `in_callback`: a linked frame is alive.
    unsafe { p.as_ref() }.map_or(0, |f| f.run)
}

/// Links a frame as the innermost run while alive; unlinks it when
/// dropped (also when unwinding).
struct Linked<'f>(&'f Frame);

impl<'f> Linked<'f> {
    fn new(frame: &'f Frame) -> Linked<'f> {
        RUNNING.set(frame);
        Linked(frame)
    }
}

impl Drop for Linked<'_> {
    fn drop(&mut self) {
        RUNNING.set(self.0.outer);
    }
}

/// Whether the calling thread is running callbacks of domain `id`, at any
/// depth of nesting: a barrier of A reached through a callback of B that
/// runs inside a callback of A would wait for the run of A it is part of.
#[inline]
pub(crate) fn in_callback(id: u64) -> bool {
    let mut p = RUNNING.get();
    while !p.is_null() {
        // SAFETY: a linked frame lives on this thread's stack, in a
        // `run_chain` call that has not returned (it unlinks the frame
        // before its stack is freed, `Linked`).
        let f = unsafe { &*p };
        if f.domain_id == id {
            return true;
        }
        p = f.outer;
    }
    false
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
    chain: Chain<Work>,
    recycle: impl FnMut(Box<Node<Work>>),
) -> Ran {
    // SAFETY: no items.
    unsafe { run_items_and_chain(domain_id, &mut [], chain, recycle) }
}

/// Runs `items` (callbacks a drain tick took out of batches, `drain.rs`),
/// each where it lies, then `chain` as [`run_chain`] does, under one
/// cancellation disable and one frame. A batch of `chain` whose callbacks
/// were all taken out runs nothing and only settles its counts.
///
/// # Safety
///
/// Every slot of `items` holds an [`Item`] not run yet; all are consumed
/// here (run, or leaked in a fork child): the caller never reads them as
/// `Item`s again.
pub(crate) unsafe fn run_items_and_chain(
    domain_id: u64,
    items: &mut [MaybeUninit<Item>],
    mut chain: Chain<Work>,
    mut recycle: impl FnMut(Box<Node<Work>>),
) -> Ran {
    let _no_cancel = NoCancel::new();
    let run = RUNS.get() + 1;
    RUNS.set(run);
    let frame = Frame {
        domain_id,
        run,
        outer: RUNNING.get(),
    };
    let _in = Linked::new(&frame);
    // A callback that forks and returns in the child: the child stops
    // after it, leaks the rest (the parent runs it) and panics (`abandon`).
    let fork_gen = fork::current();
    let mut ran = Ran::default();
    let mut next = 0;
    loop {
        // Several items per `catch_unwind`; after a panic, go on with the
        // item after the one that panicked (it was consumed: the cursor
        // moves past an item before it runs).
        let done = catch_unwind(AssertUnwindSafe(|| {
            while let Some(slot) = items.get_mut(next) {
                next += 1;
                // SAFETY: the caller's contract; `next` moved past the
                // slot, so it runs once, also if it panics.
                unsafe { Item::run_in(slot) };
                if fork::is_child(fork_gen) {
                    break;
                }
            }
        }));
        let finished = done.is_ok();
        if let Err(payload) = done {
            ran.panicked += 1;
            drop_payload(payload);
        }
        if fork::is_child(fork_gen) {
            // The items left are words without a destructor: leaving
            // them in their slots runs none of them.
            abandon(chain);
        }
        if finished {
            break;
        }
    }
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
                let (n, p) = b.run(|| fork::is_child(fork_gen));
                if fork::is_child(fork_gen) {
                    std::mem::forget(node);
                    abandon(chain);
                }
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
                if fork::is_child(fork_gen) {
                    abandon(chain);
                }
                ran.callbacks += 1;
                ran.exits += 1;
            }
        }
    }
    ran
}

/// In the child of a fork made by a callback: leaks the rest of the run
/// (the parent's, which the parent runs; `fork.rs`) and panics out of the
/// exitq call that ran it, as every entry point does in a child: the
/// thread it returns into (a `barrier`'s passes, the reclaimer's loop, a
/// `defer`) would go on with more of the parent's work. Where nothing on
/// the stack can catch a panic (a run inside a thread's exit destructor,
/// which glibc calls after the thread's function returned), the panic
/// cannot start, and Rust aborts the child with "fatal runtime error:
/// failed to initiate panic, error 5": the child stops there too, which
/// is all this asks.
#[cold]
fn abandon(chain: Chain<Work>) -> ! {
    std::mem::forget(chain);
    panic!(
        "exitq: a callback called fork() and returned in the child of fork(); \
         the rest of the run is the parent's, this call stops here"
    )
}
