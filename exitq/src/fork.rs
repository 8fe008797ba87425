//! Detecting that the process is the child of a `fork()`. The fork model
//! (what refuses in a child, what runs where) is the crate docs' "fork()"
//! section; this is the check it rests on.
//!
//! A domain's reclaimer thread and the parent's other threads do not exist
//! in a child, while their records still look in use: a grace period would
//! wait for them forever, and running the parent's callbacks in the child
//! would run them twice. So every entry point that could hang or run
//! callbacks checks, once per call, that the process is the one that built
//! the domain; and a run of callbacks (`run.rs`, `Batch::run`) checks again
//! after each callback, for a callback that forks and returns in the child:
//! the child abandons the rest of the run (leaks it; the parent runs it)
//! and panics out of the exitq call that ran it, as every entry point
//! refuses in a child (the loop it is in, a barrier's, the reclaimer's,
//! would otherwise go on with more of the parent's work). A `defer` that
//! would refuse while the child already unwinds leaks its callback
//! instead (`local::leaks_in_child`): a panic there would abort it.
//!
//! The check is one load: a `pthread_atfork` child handler (registered
//! once, when the first domain is built) advances a process-wide fork
//! generation; a domain remembers the generation it was built in.
//! `getpid()` would be a system call on every check (glibc no longer
//! caches it). The same handler forgets the forking thread's cached tid
//! (`record`): the child's copy of that thread has a tid of its own.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Forks survived by this process image (advanced in each child).
static GENERATION: AtomicU64 = AtomicU64::new(0);

#[cfg_attr(any(miri, exitq_loom), allow(dead_code))]
extern "C" fn in_child() {
    // Relaxed: the child is single-threaded right after fork; later
    // threads it creates are ordered after this by thread creation.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    // The forking thread's cached tid is its parent's (`record`).
    crate::record::forget_owner();
    // It is the child's main thread.
    crate::record::note_main_thread();
}

/// The current fork generation, registering the child handler on first use.
///
/// Lock-free, and no thread waits for another: a `std::sync::Once` did,
/// and a `fork()` while another thread of the parent was inside it (the
/// process's first domain being built) left it "running" for ever in the
/// child, whose own first domain then never got built (a forked test
/// child hung in `Pool::new`: `tests/red_fork.rs`). Threads that find the
/// handler not yet registered each register it; a handler registered
/// twice advances the generation twice per fork, which changes nothing
/// (generations are only compared for equality), and its other steps are
/// idempotent. So does a child forked between a parent thread's
/// `pthread_atfork` and its store below: it registers again.
pub(crate) fn generation() -> u64 {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    // Acquire: pairs with the Release store below: the handler that
    // stored it is registered (in this process, or in the parent before
    // the fork that made it, whose registrations the child keeps).
    if !REGISTERED.load(Ordering::Acquire) {
        #[cfg(not(any(miri, exitq_loom)))]
        // SAFETY: `in_child` is an `extern "C"` function that only touches
        // atomics and a thread-local cell (async-signal-safe, as a fork
        // handler must be).
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
        // Release: see the load above.
        REGISTERED.store(true, Ordering::Release);
    }
    // Relaxed: see `in_child`.
    GENERATION.load(Ordering::Relaxed)
}

/// The current fork generation (the handler is registered: a domain was
/// built), for a later [`is_child`].
#[inline]
pub(crate) fn current() -> u64 {
    // Relaxed: see `in_child`.
    GENERATION.load(Ordering::Relaxed)
}

/// Whether this process forked since `built` was read (we are a child).
#[inline]
pub(crate) fn is_child(built: u64) -> bool {
    // Relaxed: see `in_child`.
    GENERATION.load(Ordering::Relaxed) != built
}
