//! Thread-exit hooks with a preallocated node.
//!
//! [`Domain::register_exit`] allocates the hook's node (and boxes the
//! closure) at registration and keeps it in the thread's participant record.
//! When the thread exits, the record's thread-local destructor hands the
//! thread's work to the domain:
//!
//! 1. take the thread's open batch (owner side of the steal handshake: two
//!    plain stores and a load, plus a compiler fence);
//! 2. link it in front of the preallocated exit-hook chain (pointer writes);
//! 3. clear the reader state (a thread cannot be inside a section any more;
//!    this also ends a leaked guard's section);
//! 4. push the whole chain onto the domain's list: **one successful
//!    compare-and-swap**;
//! 5. release the record for reuse: one uncontended compare-and-swap on the
//!    record's own cache line.
//!
//! No lock, no syscall, no allocation, no free. The hooks then run on the
//! reclaimer after a grace period (reverse registration order within a
//! thread). Because the exit path cannot wake the reclaimer (that would be a
//! futex syscall), an idle reclaimer polls every
//! [`exit_poll`](crate::Builder::exit_poll) while hooks are armed; any
//! publish, `barrier` or `exit_barrier` also picks the hooks up.
//!
//! # When the destructor runs
//!
//! Rust thread-locals with destructors are registered with glibc's
//! `__cxa_thread_atexit_impl`; glibc runs them (`__call_tls_dtors`) when the
//! thread function returns, on `pthread_exit`, and on `pthread_cancel` (after
//! the forced unwind reaches the start routine), before pthread-key
//! destructors. Code that runs later (a pthread-key destructor, or another
//! TLS destructor registered earlier) can still use the domain: `read`
//! borrows a record for the guard's lifetime, `defer` publishes the
//! callback alone, `register_exit` pushes the hook at once. Callers who
//! control thread exit themselves can call [`Domain::retire_thread`] at the
//! point of their choice.
//!
//! # After the domain is dropped
//!
//! A thread that still holds a record when the last [`Domain`] handle is
//! dropped keeps the domain's memory alive; when it exits it runs its own
//! hooks inline (no reader can exist any more, so no grace period is needed).
use std::mem;
use std::sync::Arc;

use crate::defer::{take_own_batch, Work};
use crate::domain::{Domain, Inner, Participant, FREE, IN_USE};
use crate::llist::Node;
use crate::sync::Ordering;

impl Domain {
    /// Registers `f` to run after the calling thread exits (also when it is
    /// cancelled with `pthread_cancel`), on the reclaimer, after a grace
    /// period.
    ///
    /// Allocates now, so the exit path does not: it pushes the
    /// preallocated node with one compare-and-swap (see the
    /// [module docs](crate::exit)). Hooks of one thread run in reverse
    /// registration order.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let domain = exitq::Domain::new();
    /// let cleaned = Arc::new(AtomicBool::new(false));
    /// let (d, c) = (domain.clone(), cleaned.clone());
    /// std::thread::spawn(move || {
    ///     d.register_exit(move || c.store(true, Ordering::Release));
    /// })
    /// .join()
    /// .unwrap();
    /// domain.exit_barrier();
    /// assert!(cleaned.load(Ordering::Acquire));
    /// ```
    pub fn register_exit<F: FnOnce() + Send + 'static>(&self, f: F) {
        let node = Node::new(Work::Exit(Box::new(f)));
        // SeqCst: store-buffering pair with the reclaimer's "sleeping =
        // true; read armed_exits" so it does not park without a timeout.
        if self.inner.armed_exits.fetch_add(1, Ordering::SeqCst) == 0 {
            // A parked reclaimer must start polling for exited threads.
            self.inner.wake_reclaimer(false);
        }
        match self.participant() {
            // SAFETY: `exits` is touched only by the owner thread (us).
            Some(r) => unsafe { (*r.exits.get()).push_front(node) },
            // The thread's TLS is already being destroyed: it is exiting now.
            None => self.inner.queue.push(node),
        }
    }

    /// Returns once every thread that exited before the call (its exit
    /// destructor happened-before this call, e.g. it was joined) has had its
    /// exit hooks and left-over callbacks run.
    ///
    /// # Panics
    ///
    /// As [`barrier`](Domain::barrier).
    pub fn exit_barrier(&self) {
        self.drain("exit_barrier", false);
    }

    /// Runs the thread-exit procedure for this domain now instead of at
    /// thread exit: publishes the calling thread's open batch and its exit
    /// hooks (which then run after a grace period, as if the thread had
    /// exited) and releases its participant record. For threads that end
    /// through a path of their own (e.g. a pthread-key destructor, or
    /// before `pthread_exit` in foreign code). The thread may keep using the
    /// domain afterwards; it gets a fresh record.
    ///
    /// # Panics
    ///
    /// Inside a read guard of this domain.
    pub fn retire_thread(&self) {
        self.assert_not_reading("retire_thread");
        if let Some(r) = self.unlink_participant() {
            // SAFETY: the record is owned by the calling thread and was just
            // unlinked from its list, so it is retired once.
            unsafe { retire(r) };
        }
    }
}

/// The thread-exit procedure for one record (see the module docs).
///
/// # Safety
///
/// Called by the thread that owns `r` (IN_USE or ORPHANED), once, after
/// removing it from the thread's list and cache.
pub(crate) unsafe fn retire(r: &Participant) {
    // SAFETY: a record in use keeps its domain alive (IN_USE: the domain has
    // not shut down, and shutdown waits for nothing we hold; ORPHANED: the
    // record holds a strong count).
    let inner: &Inner = unsafe { &*r.inner };
    let batch = take_own_batch(r, inner.hot.fences);
    // SAFETY: `exits` is owner-only and we are the owner.
    let mut chain = mem::take(unsafe { &mut *r.exits.get() });
    if let Some(batch) = batch {
        // Stays `accounted: false`: the reclaimer accounts for it.
        chain.push_front(batch);
    }
    // Release: like a guard's exit (a leaked guard's section ends here).
    r.ctr.store(0, Ordering::Release);
    // The one CAS of the exit path.
    inner.queue.push_chain(chain);
    // AcqRel: Release hands the record (and our pushes) over to the next
    // claimant and to shutdown's orphan scan; Acquire (on failure) pairs
    // with shutdown's orphan marking.
    match r
        .state
        .compare_exchange(IN_USE, FREE, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => {}
        Err(_) => release_orphan(inner),
    }
}

/// The domain shut down while we held a record: run what is queued (no
/// reader can exist, see `Inner::shutdown`) and give back the strong count
/// the record held.
#[cold]
fn release_orphan(inner: &Inner) {
    loop {
        let chain = inner.queue.take_all();
        if chain.is_empty() {
            break;
        }
        inner.run_chain(chain);
    }
    // SAFETY: shutdown incremented the strong count once for this record
    // (`Inner::shutdown`), and `inner` lives in an `Arc`. Nothing touches
    // the record or `inner` after this.
    unsafe { Arc::decrement_strong_count(inner as *const Inner) };
}
