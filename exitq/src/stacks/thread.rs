//! A thread on a pooled stack: starting it ([`spawn_on`]), its handle
//! ([`PooledThread`]), its first frame (`trampoline`) and its exit path
//! (`exit_hook`).
//!
//! # The exit path
//!
//! In [`Reap::Reclaimer`] mode a pthread key destructor (run by glibc on
//! return, `pthread_exit` and cancellation alike) does one `fetch_sub` on the
//! stack's reference count (the thread's and its handle's) and, if it was
//! the last, one CAS push of the stack's `Header` onto the pool's retired
//! list. No lock, no system call, no allocation: the list node *is* the
//! header inside the stack mapping. The reclaimer takes the whole list with
//! one swap, joins each thread with `pthread_tryjoin_np` (threads still in
//! their exit tail wait in its private pending list and are retried), and
//! recycles the stacks. The exit push only tells the reclaimer *which*
//! threads to join, so it does O(exits) work instead of polling every live
//! thread; soundness rests on the join alone.
//!
//! In [`Reap::Owner`] mode there is no exit hook at all: the owner's
//! [`PooledThread::join`] is the proof, and the stack goes straight back to
//! the free queue (one lock-free push) on the joiner's thread.

use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::config::Release;
use super::error::SpawnError;
use super::reap::Reap;
use super::shared::{Header, Shared, FLAG_JOINED, FLAG_RECLAIMER};
use super::sys::{pthread_create_unwind, StartRoutine};

/// A thread running on a pooled stack.
///
/// [`Reap::Owner`]: call [`join`](Self::join); dropping it unjoined hands
/// the thread to the reclaimer (joined when it ends). [`Reap::Reclaimer`]:
/// keep it while you may still cancel the thread (the thread ID stays valid
/// until the handle is dropped: the reclaimer joins only after both the
/// thread's exit and the drop), then drop it.
#[must_use = "an Owner thread must be joined, or its stack returns only when the reclaimer joins it"]
pub struct PooledThread {
    thread: libc::pthread_t,
    hdr: NonNull<Header>,
    reap: Reap,
    shared: Arc<Shared>,
    done: bool,
}

// SAFETY: the handle only carries a pthread_t and the header pointer,
// whose ownership protocol is atomic (see `Header`).
unsafe impl Send for PooledThread {}

impl fmt::Debug for PooledThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledThread")
            .field("thread", &self.thread)
            .field("reap", &self.reap)
            .finish()
    }
}

impl PooledThread {
    /// The pthread ID (valid while this handle lives; never join or detach
    /// it yourself).
    pub fn pthread(&self) -> libc::pthread_t {
        self.thread
    }

    /// How this thread is reaped.
    pub fn reap(&self) -> Reap {
        self.reap
    }

    /// `pthread_cancel`s the thread. Returns the `pthread_cancel` result
    /// (0, or an errno). Sound at any time while this handle lives: the
    /// thread is not joined before the handle is gone, and glibc's
    /// `pthread_cancel` of a thread that already exited does nothing.
    pub fn cancel(&self) -> i32 {
        // SAFETY: the thread has not been joined (the pool joins only after
        // this handle is consumed or dropped), so its ID is valid.
        unsafe { libc::pthread_cancel(self.thread) }
    }

    /// Joins an [`Reap::Owner`] thread and recycles its stack: after
    /// `pthread_join` returns the kernel has cleared the thread's tid and
    /// glibc has released its descriptor, so nothing uses the stack any
    /// more (`stacks/reap.rs`). Returns the thread's result
    /// (`PTHREAD_CANCELED` if it was cancelled), or the errno of
    /// `pthread_join`. For a [`Reap::Reclaimer`] thread it returns `EINVAL`
    /// and leaves the join to the reclaimer.
    pub fn join(mut self) -> Result<*mut c_void, i32> {
        if self.reap != Reap::Owner {
            return Err(libc::EINVAL);
        }
        let mut ret: *mut c_void = ptr::null_mut();
        // SAFETY: the thread is joinable and joined only here (the handle
        // is consumed; `done` stops Drop from handing it to the reclaimer).
        let rc = unsafe { libc::pthread_join(self.thread, &mut ret) };
        if rc != 0 {
            return Err(rc);
        }
        self.done = true;
        let sh = &*self.shared;
        // SAFETY: joined: we own the stack again.
        let h = unsafe { self.hdr.as_ref() };
        if sh.release == Release::Keep && !sh.unsound_recycle_at_exit {
            sh.give_back(self.hdr);
        } else {
            // Let the reclaimer batch the madvise: mark joined, push.
            h.flags.fetch_or(FLAG_JOINED, Ordering::Relaxed);
            sh.push_retired(self.hdr);
            sh.wake_reclaimer();
        }
        Ok(ret)
    }
}

impl Drop for PooledThread {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // SAFETY: the header stays valid until the stack is recycled, which
        // needs this drop (Reclaimer: refs; Owner: the push below).
        let h = unsafe { self.hdr.as_ref() };
        match self.reap {
            Reap::Owner => {
                // Orphaned: the reclaimer joins it whenever it ends.
                h.thread.store(self.thread, Ordering::Relaxed);
                self.shared.push_retired(self.hdr);
            }
            Reap::Reclaimer => {
                h.thread.store(self.thread, Ordering::Relaxed);
                // AcqRel: pairs with the exit hook's decrement; the last one
                // pushes, after the other's writes.
                if h.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
                    self.shared.push_retired(self.hdr);
                }
            }
        }
    }
}

/// First frame of every pooled thread.
///
/// A forced unwind (cancellation, `pthread_exit`) passes through this frame:
/// it holds no value with a destructor and no `catch_unwind` around the
/// call, so it is a "plain old frame" as RFC 2945 requires.
unsafe extern "C-unwind" fn trampoline(arg: *mut c_void) -> *mut c_void {
    let hdr = arg.cast::<Header>();
    // SAFETY: `arg` is the header passed by `spawn`, valid while the thread
    // runs (the stack is recycled only after it is joined).
    let h = unsafe { &*hdr };
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    h.thread.store(me, Ordering::Relaxed);
    // Relaxed: written by the spawner before pthread_create (which
    // synchronises with this thread's start). Not `refs`: the handle may
    // already have been dropped.
    if h.flags.load(Ordering::Relaxed) & FLAG_RECLAIMER != 0 {
        // Reclaimer mode: arm the exit hook. If the key cannot be set
        // (ENOMEM for a second-level TSD block), drop the thread's reference
        // now: the handle's drop then pushes the stack and the reclaimer's
        // tryjoin still waits for the real end, so this is only slower.
        // AcqRel on that decrement: pairs with the handle drop's AcqRel
        // decrement, as in `exit_hook`.
        // SAFETY: valid key; the value is a non-null pointer.
        if unsafe { libc::pthread_setspecific(h.shared().key, hdr.cast()) } != 0
            && h.refs.fetch_sub(1, Ordering::AcqRel) == 1
        {
            h.shared().push_retired(NonNull::from(h));
        }
    }
    // SAFETY: written by the spawner before pthread_create.
    let (start, arg) = unsafe {
        (
            (*h.start.get()).expect("start routine set by spawn"),
            *h.arg.get(),
        )
    };
    // SAFETY: the spawner's contract (`StackPool::spawn`).
    unsafe { start(arg) }
}

/// The exit path of a [`Reap::Reclaimer`] thread: a pthread key destructor,
/// run by glibc after the start routine returned, called `pthread_exit`, or
/// was cancelled. One `fetch_sub`, and if the handle is already gone one CAS
/// push; no lock, no system call, no allocation.
pub(super) extern "C" fn exit_hook(p: *mut c_void) {
    let hdr = p.cast::<Header>();
    // SAFETY: the key's value is the header of the stack we run on, valid
    // until we are joined, which cannot happen before we return.
    let h = unsafe { &*hdr };
    // AcqRel: pairs with the handle drop's decrement (whoever is last sees
    // the other's writes, e.g. the `thread` word, before pushing).
    if h.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        h.shared().push_retired(NonNull::from(h));
    }
}

/// Starts a thread running `start(arg)` on the stack of `hdr` (lent to the
/// caller by `take_stack`), or gives the stack back if it cannot.
///
/// # Safety
/// * The caller owns `hdr`, a stack lent by `take_stack`.
/// * `start` and `arg` satisfy [`StackPool::spawn`](super::StackPool::spawn)'s
///   contract.
pub(super) unsafe fn spawn_on(
    shared: &Arc<Shared>,
    hdr: NonNull<Header>,
    start: StartRoutine,
    arg: *mut c_void,
    reap: Reap,
) -> Result<PooledThread, SpawnError> {
    let sh = &**shared;
    // SAFETY: we own `hdr` (just taken from the free queue or mapped).
    let h = unsafe { hdr.as_ref() };
    h.refs.store(
        match reap {
            Reap::Owner => 1,
            Reap::Reclaimer => 2,
        },
        Ordering::Relaxed,
    );
    h.flags.store(
        match reap {
            Reap::Owner => 0,
            Reap::Reclaimer => FLAG_RECLAIMER,
        },
        Ordering::Relaxed,
    );
    h.thread.store(0, Ordering::Relaxed);
    h.next.store(ptr::null_mut(), Ordering::Relaxed);
    // SAFETY: we own the header; the new thread reads these after
    // pthread_create, which synchronises with its start.
    unsafe {
        *h.start.get() = Some(start);
        *h.arg.get() = arg;
    }
    let stackaddr = sh.stack_low(hdr);
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut thread: libc::pthread_t = 0;
    // SAFETY: `attr` is initialised by pthread_attr_init before use and
    // destroyed after; the stack range [stackaddr, stackaddr + size) is
    // mapped read-write, owned by us and not used by anyone else (it
    // was idle in the pool, or fresh); `trampoline` is a "C-unwind"
    // function and `hdr` stays valid until the thread is joined.
    let rc = unsafe {
        let attr = attr.as_mut_ptr();
        let mut rc = libc::pthread_attr_init(attr);
        if rc == 0 {
            rc = libc::pthread_attr_setstack(attr, stackaddr.cast(), sh.pthread_stack_size());
            if rc == 0 {
                rc = pthread_create_unwind(&mut thread, attr, trampoline, hdr.as_ptr().cast());
            }
            libc::pthread_attr_destroy(attr);
        }
        rc
    };
    if rc != 0 {
        // No thread ever ran on the stack: it is free right away.
        sh.c.spawn_failed.fetch_add(1, Ordering::Relaxed);
        sh.give_back(hdr);
        // The limit that stopped it, read now (the stack is mapped
        // already: the new thread maps nothing).
        let created = sh.c.spawned.load(Ordering::Relaxed);
        return Err(SpawnError::Create(sh.create_diagnosis.diagnose(
            rc,
            created,
            Some(0),
        )));
    }
    sh.c.spawned.fetch_add(1, Ordering::Relaxed);
    Ok(PooledThread {
        thread,
        hdr,
        reap,
        shared: Arc::clone(shared),
        done: false,
    })
}
