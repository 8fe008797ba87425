//! Running a domain's stall handler, and knowing that this thread is
//! inside one.
//!
//! The stall handler ([`DomainBuilder::stall_handler`](crate::DomainBuilder::stall_handler))
//! runs on the thread that waits for the stalled grace period, in the
//! middle of that wait (as its leader, or inside a `barrier`'s pass, or a
//! backlog wait). Waiting there for a grace period of the same domain
//! would wait for that very wait: `synchronize`, `barrier`,
//! `exit_barrier`, `RcuCell::replace` (and `retire_thread`, which would
//! release the record the interrupted wait may belong to) panic instead
//! (`Domain::check_can_wait`), and `defer` and `flush` there neither run
//! callbacks nor, with `Reclaimer::Inline`, wait for a grace period
//! (`local::may_run`): what they queue waits. Handlers of different domains nest (a
//! handler of A calls B's `synchronize`, which stalls in turn), each frame
//! linking to the one it runs inside, as `run`'s frames do.
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::batch::drop_payload;

/// One stall handler running on this thread, on [`run_handler`]'s stack:
/// the domain it belongs to (the address of its grace-period state).
struct Frame {
    domain: *const (),
    outer: *const Frame,
}

std::thread_local! {
    /// The innermost stall handler running on this thread (null: none).
    /// No destructor: readable during thread-local teardown.
    static RUNNING: Cell<*const Frame> = const { Cell::new(ptr::null()) };
}

/// Unlinks a frame when dropped (also when unwinding).
struct Unlink(*const Frame);

impl Drop for Unlink {
    fn drop(&mut self) {
        RUNNING.set(self.0);
    }
}

/// Runs `handler` as the stall handler of `domain`: a panic is caught and
/// its payload dropped (also one whose `Drop` panics).
pub(crate) fn run_handler(domain: *const (), handler: impl FnOnce()) {
    let frame = Frame {
        domain,
        outer: RUNNING.get(),
    };
    RUNNING.set(&frame);
    let _unlink = Unlink(frame.outer);
    if let Err(p) = catch_unwind(AssertUnwindSafe(handler)) {
        drop_payload(p);
    }
}

/// Whether this thread is running a stall handler of `domain`, at any
/// depth of nesting.
pub(crate) fn in_handler(domain: *const ()) -> bool {
    let mut p = RUNNING.get();
    while !p.is_null() {
        // SAFETY: a linked frame lives on this thread's stack, in a
        // `run_handler` call that has not returned (it unlinks the frame
        // before returning or unwinding, `Unlink`).
        let f = unsafe { &*p };
        if f.domain == domain {
            return true;
        }
        p = f.outer;
    }
    false
}
