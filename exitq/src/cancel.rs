//! Thread cancellation and exitq's own waits.
//!
//! # The supported cancellation model
//!
//! exitq is meant for runtimes whose threads may be ended with
//! `pthread_cancel` (deferred cancellation, acting at cancellation points
//! such as `nanosleep`, `read` or `pthread_testcancel`). A cancellation
//! that acted *inside* exitq would unwind (a forced unwind) through frames
//! that hold exitq's state half-updated: a grace period started and never
//! completed, a reclaim pass registered and never ended, a batch taken and
//! never pushed. Forced unwinding through Rust frames with destructors is
//! also undefined behaviour (the "C-unwind" RFC, rust-lang/rfcs#2945).
//!
//! So exitq disables cancellation (`pthread_setcancelstate(DISABLE)`)
//! around every place where it may block or run user code:
//!
//! * grace periods (`synchronize`, the reclaimer's and the passes'
//!   waits: its backoff sleeps in `nanosleep`, a cancellation point), and
//!   the stall report (a `write` to stderr);
//! * `barrier`, `exit_barrier` and the backlog waits;
//! * running callbacks and exit hooks (on any thread: the owner's own
//!   `defer`/`flush`, a reclaim pass, the reclaimer).
//!
//! Elsewhere exitq calls no cancellation point: the one system call the
//! fast paths may make, waking the reclaimer (`doorbell.rs`, from a
//! `defer` that opens or seals a batch, or from `register_exit`), is made
//! with `syscall(2)`, not glibc's `write` (`tests/red2.rs`).
//!
//! A cancellation request that arrives meanwhile stays pending and acts at
//! the thread's next cancellation point after exitq returns (the previous
//! state is restored, never forced to "enabled"). Callbacks therefore run
//! with cancellation disabled: a callback that blocks is not cancellable.
//! The exit path itself (the exit key's destructor) runs after glibc has
//! disabled cancellation for the exiting thread.
//!
//! Asynchronous cancellation (`PTHREAD_CANCEL_ASYNCHRONOUS`) is not
//! supported: it can act between any two instructions, which no Rust code
//! survives.
//!
//! `pthread_setcancelstate` is not a system call (glibc updates a word in
//! the thread descriptor), so disabling costs a few nanoseconds, paid once
//! per wait or per run (a batch, a pass, a drain tick's 7 callbacks),
//! never per callback.

/// glibc's values (`<pthread.h>`); the libc crate does not bind
/// `pthread_setcancelstate`.
#[cfg(not(any(miri, exitq_loom)))]
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

#[cfg(not(any(miri, exitq_loom)))]
extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
}

/// While alive, the calling thread's cancellation is disabled; dropping it
/// restores the state it found.
pub(crate) struct NoCancel {
    #[cfg(not(any(miri, exitq_loom)))]
    old: libc::c_int,
}

impl NoCancel {
    #[inline]
    pub(crate) fn new() -> NoCancel {
        #[cfg(not(any(miri, exitq_loom)))]
        {
            let mut old: libc::c_int = 0;
            // SAFETY: `old` is a valid out-pointer; the call only changes
            // the calling thread's cancel state and cannot fail with a
            // valid state argument.
            unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
            NoCancel { old }
        }
        #[cfg(any(miri, exitq_loom))]
        NoCancel {}
    }
}

impl Drop for NoCancel {
    #[inline]
    fn drop(&mut self) {
        #[cfg(not(any(miri, exitq_loom)))]
        {
            let mut ignored: libc::c_int = 0;
            // SAFETY: as in `new`; `self.old` is a state the call returned.
            unsafe { pthread_setcancelstate(self.old, &mut ignored) };
        }
    }
}
