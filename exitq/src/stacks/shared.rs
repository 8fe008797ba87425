//! The pool's shared state ([`Shared`]) and the bookkeeping inside each
//! stack mapping ([`Header`]): who owns a stack when.
//!
//! A stack has one owner at a time, and ownership moves only along these
//! edges, each an atomic hand-over:
//!
//! * free queue → spawner (`take_stack`), or a fresh mapping;
//! * spawner → its thread and its handle, through `pthread_create` (which
//!   orders the spawner's header writes before the thread's first
//!   instruction);
//! * thread and handle → retired list: the last of the two to let go
//!   pushes the header (`refs`, see `Header`), with a Release CAS;
//! * retired list → reclaimer (Acquire swap), which joins the thread;
//! * joiner (reclaimer, or the owner in `PooledThread::join`) → free queue,
//!   or unmap; or → quarantine (a failed canary check), under its mutex.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

use super::config::Release;
use super::stats::Counters;
use super::sys::StartRoutine;

/// Bytes reserved above the pthread stack for the pool's `Header`.
pub(super) const HEADER_RESERVE: usize = 128;

/// The pool's bookkeeping inside each stack mapping (above the stack).
///
/// Written by the spawner before `pthread_create` (which orders those
/// writes before anything the new thread does), by the new thread in the
/// trampoline, and by whoever owns the stack at that moment; ownership
/// passes along the retired list (Release push, Acquire take) and the free
/// queue (crossbeam's own ordering).
#[repr(C, align(64))]
pub(super) struct Header {
    /// Retired-list link (and the reclaimer's private pending list).
    pub(super) next: AtomicPtr<Header>,
    /// References to a lent stack; whoever drops the last one pushes the
    /// stack onto the retired list. Set at each spawn (`spawn_on`):
    ///
    /// | reap        | at spawn | decremented by (AcqRel)                          |
    /// |-------------|----------|--------------------------------------------------|
    /// | `Owner`     | 1        | nobody: `PooledThread::join` recycles, or its drop pushes |
    /// | `Reclaimer` | 2        | the thread's `exit_hook` (or its trampoline, if the key cannot be set), and the handle's drop |
    pub(super) refs: AtomicU32,
    /// Named bits `FLAG_RECLAIMER`, `FLAG_JOINED`. State table (one loan):
    ///
    /// | value            | meaning                                           | written by |
    /// |------------------|---------------------------------------------------|------------|
    /// | `0`              | an `Owner` thread, not joined                     | the spawner (`spawn_on`), Relaxed |
    /// | `FLAG_RECLAIMER` | a `Reclaimer` thread: the trampoline arms the exit hook, the reclaimer joins it | the spawner, Relaxed |
    /// | `FLAG_JOINED`    | an `Owner` thread its owner joined: on the retired list only so the reclaimer batches the page release | `PooledThread::join`, Relaxed, then a Release push |
    ///
    /// Read by the trampoline (`pthread_create` orders the spawner's store
    /// before it) and by the reclaimer (after the Acquire swap of the
    /// retired list).
    pub(super) flags: AtomicU32,
    /// The thread on this stack, written by the thread itself in the
    /// trampoline (so it is set before any push).
    pub(super) thread: AtomicU64,
    /// Hand-out generation (canary values are tagged with it).
    pub(super) gen: AtomicU64,
    /// The pool (kept alive until every lent stack is back).
    pub(super) shared: *const Shared,
    /// Start of the mapping (guard included).
    pub(super) base: *mut u8,
    /// The caller's start routine and argument, for the trampoline.
    pub(super) start: UnsafeCell<Option<StartRoutine>>,
    pub(super) arg: UnsafeCell<*mut c_void>,
}

/// `Header::flags`: the owner already joined the thread: recycle without
/// `tryjoin`.
pub(super) const FLAG_JOINED: u32 = 1;
/// `Header::flags`: a [`Reap::Reclaimer`](crate::stacks::Reap::Reclaimer)
/// thread: the trampoline arms the exit hook.
pub(super) const FLAG_RECLAIMER: u32 = 2;

impl Header {
    pub(super) fn shared(&self) -> &Shared {
        // SAFETY: `shared` is set at mapping time to the `Arc<Shared>`
        // allocation of the owning pool, which stays alive while any of its
        // stacks is mapped (the reclaimer holds an `Arc` and only exits
        // after every stack is back and unmapped).
        unsafe { &*self.shared }
    }
}

pub(super) struct Shared {
    pub(super) key: libc::pthread_key_t,
    /// Usable bytes (pthread stack + header), page multiple.
    pub(super) stack_size: usize,
    pub(super) guard: usize,
    /// `guard + stack_size`.
    pub(super) mapping: usize,
    pub(super) cap: usize,
    pub(super) release: Release,
    pub(super) canary: bool,
    pub(super) interval: Duration,
    pub(super) unsound_recycle_at_exit: bool,
    /// Idle stacks (bounded MPMC queue; `None` when the cap is 0).
    pub(super) free: Option<ArrayQueue<NonNull<Header>>>,
    /// Retired list: pushed by exit paths and handle drops, taken whole by
    /// the reclaimer.
    pub(super) retired: CachePadded<AtomicPtr<Header>>,
    /// Live `StackPool` handles.
    pub(super) users: AtomicUsize,
    pub(super) shutdown: AtomicBool,
    pub(super) reclaimer: OnceLock<Thread>,
    /// Threads the reclaimer is still waiting to join.
    pub(super) reclaimer_pending: AtomicUsize,
    pub(super) quarantine: Mutex<Vec<NonNull<Header>>>,
    pub(super) pidfd: OnceLock<Option<libc::c_int>>,
    /// The last diagnosis of a `pthread_create` failure (`crate::limits`).
    pub(super) create_diagnosis: crate::limits::Recent,
    /// The last diagnosis of a failure to map a stack.
    pub(super) map_diagnosis: crate::limits::Recent,
    pub(super) c: Counters,
}

// SAFETY: the raw pointers inside (headers in the queues) point into stack
// mappings owned by the pool; ownership of each header is transferred
// through atomics (the retired list, the free queue) or the quarantine
// mutex, never shared mutably.
unsafe impl Send for Shared {}
// SAFETY: see `Send`; every field touched concurrently is atomic or locked.
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the key was created in `build`; no thread can still run
        // our destructor (every lent stack is back before the reclaimer,
        // the last owner, lets go).
        unsafe { libc::pthread_key_delete(self.key) };
        // Last owner gone: nothing can use an idle or quarantined stack.
        self.unmap_idle();
        self.unmap_quarantine();
        if let Some(Some(fd)) = self.pidfd.get() {
            // SAFETY: our own pidfd, closed once.
            unsafe { libc::close(*fd) };
        }
    }
}

impl Shared {
    pub(super) fn pthread_stack_size(&self) -> usize {
        self.stack_size - HEADER_RESERVE
    }

    pub(super) fn wake_reclaimer(&self) {
        if let Some(t) = self.reclaimer.get() {
            t.unpark();
        }
    }
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_RESERVE);
const _: () = assert!(HEADER_RESERVE % 64 == 0);
