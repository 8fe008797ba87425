//! Thread stacks mapped once and recycled after their thread is gone.
//!
//! # Why
//!
//! With default attributes glibc gives every new thread a stack from its own
//! cache or a fresh `mmap` + `mprotect` (guard page), and when a thread dies
//! it `madvise(MADV_DONTNEED)`s most of the dead stack and, above its 40 MiB
//! cache limit, `munmap`s it. `mmap`/`mprotect`/`munmap` take the process's
//! `mmap_lock` for writing and `madvise` takes it for reading, so in a storm
//! of spawns and exits every spawn and every exit fight over one rwsem: on
//! this project's C micro it is the most contended kernel lock of all.
//!
//! A [`StackPool`] maps each stack (with its guard page) once, hands it to
//! `pthread_create` through `pthread_attr_setstack`, and takes it back when
//! the thread is gone. glibc neither caches, madvises nor unmaps a
//! user-provided stack (`allocatestack.c`: "It will not be queued in the
//! stack cache nor will the memory (except the TLS memory) be freed"), so a
//! spawn from the pool and an exit onto the pool make no memory-map system
//! call at all.
//!
//! # How
//!
//! * A stack is mapped once, with a guard page below it and the pool's own
//!   header above it (`stacks/mapping.rs`).
//! * It is lent to one thread at a time and recycled only after that
//!   thread has been joined: the join is the proof that nothing uses the
//!   stack any more (`stacks/reap.rs`, "When is a stack free?"). Either the
//!   owner joins ([`Reap::Owner`]) or the pool's reclaimer does
//!   ([`Reap::Reclaimer`]), told by the thread's exit path which thread to
//!   join (`stacks/thread.rs`).
//! * Lent stacks come back through a lock-free free queue, or are unmapped
//!   when the pool is full (`stacks/recycle.rs`); their pages may be
//!   released in batches (`stacks/release.rs`).
//! * Canary words at the far end of each stack catch a stack written while
//!   it should be idle (`stacks/canary.rs`).
//!
//! # Bounds
//!
//! Idle (pooled) stacks are capped by [`StackPoolBuilder::max_pooled`] and
//! [`StackPoolBuilder::max_pooled_bytes`] (the smaller wins, and at most
//! 2^20: the queue of idle stacks is allocated at build). A stack returned while
//! the pool is full is unmapped at once, by whoever recycles it (the
//! reclaimer, or the owner in [`PooledThread::join`]), never by the exiting
//! thread. Stacks in use are not capped: a thread that needs a stack when
//! none is pooled gets a freshly mapped one (the reclaimer is woken so the
//! retired ones come back). [`StackPool::drain`] waits until every stack is
//! back and unmaps all idle ones; dropping the last [`StackPool`] handle
//! does the same in the background once every thread has been reaped.
//!
//! # Limits
//!
//! * One stack size per pool (make one pool per size).
//! * A thread that never ends keeps its stack lent, and the pool's
//!   reclaimer (and the stack) alive after the last handle is dropped.
//! * `fork`: the child must not use the parent's pool (its threads, and the
//!   reclaimer, do not exist there).
//! * glibc on Linux only: the soundness argument relies on glibc's
//!   `CLONE_CHILD_CLEARTID` use and `pthread_tryjoin_np`.
//!
//! # Example
//!
//! ```
//! use exitq::stacks::{Reap, StackPool};
//! use std::ffi::c_void;
//!
//! unsafe extern "C-unwind" fn work(arg: *mut c_void) -> *mut c_void {
//!     arg
//! }
//!
//! let pool = StackPool::builder().stack_size(256 * 1024).build().unwrap();
//! for i in 0..4usize {
//!     // SAFETY: `work` is a plain function without destructors; the
//!     // thread is joined through the pool below and nowhere else.
//!     let t = unsafe { pool.spawn(work, i as *mut c_void, Reap::Owner) }.unwrap();
//!     assert_eq!(t.join().unwrap() as usize, i);
//! }
//! assert!(pool.stats().reused >= 3);
//! assert!(pool.drain(std::time::Duration::from_secs(5)));
//! assert_eq!(pool.stats().mapped, 0);
//! ```
//!
//! # Layout
//!
//! One mechanism per file; the protocol reasoning is in each file's docs.
//!
//! | file | what |
//! |---|---|
//! | `stacks.rs` | this facade: [`StackPool`] and [`StackPoolBuilder::build`] |
//! | `stacks/config.rs` | [`StackPoolBuilder`], [`Release`] |
//! | `stacks/shared.rs` | the pool's shared state and each stack's header; who owns a stack when |
//! | `stacks/mapping.rs` | mapping a stack with its guard page, and unmapping it |
//! | `stacks/canary.rs` | canary words: hand-out and recycle checks, quarantine |
//! | `stacks/recycle.rs` | lending a stack and taking it back: free queue, retired list |
//! | `stacks/release.rs` | releasing recycled stacks' pages in batches |
//! | `stacks/reap.rs` | when a stack is free (the proof), [`Reap`], the reclaimer |
//! | `stacks/thread.rs` | [`PooledThread`], the trampoline, the exit path |
//! | `stacks/sys.rs` | the C library's and the system's part |
//! | `stacks/error.rs`, `stacks/stats.rs` | [`SpawnError`], [`StackPoolStats`] |

mod canary;
mod config;
mod error;
mod mapping;
mod reap;
mod recycle;
mod release;
mod shared;
mod stats;
mod sys;
mod thread;

pub use config::{Release, StackPoolBuilder};
pub use error::SpawnError;
pub use reap::Reap;
pub use stats::StackPoolStats;
pub use sys::{default_stack_size, StartRoutine};

pub use thread::PooledThread;

use std::ffi::c_void;
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

use shared::Shared;
use stats::Counters;
use sys::{page_size, round_up};

/// The smallest stack size a [`StackPool`] accepts
/// (`StackPoolBuilder::stack_size`): `PTHREAD_STACK_MIN`, the pool's
/// header and a page, rounded up to pages as every size is.
pub fn min_stack_size() -> usize {
    let page = page_size();
    round_up(
        libc::PTHREAD_STACK_MIN + shared::HEADER_RESERVE + page,
        page,
    )
    .expect("a few pages fit a usize")
}

impl StackPoolBuilder {
    /// Builds the pool: creates its pthread key and starts its reclaimer.
    ///
    /// # Errors
    /// `InvalidInput` for sizes out of range; the OS error when the key,
    /// a prefilled stack or the reclaimer thread cannot be created (for
    /// the thread, with the limit that stopped it and its numbers:
    /// [`crate::limits`]).
    pub fn build(self) -> std::io::Result<StackPool> {
        use std::io::Error;
        let Geometry {
            stack_size,
            guard,
            mapping,
            cap,
        } = self.geometry()?;
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid out-pointer; `exit_hook` is an
        // `extern "C"` function that never unwinds.
        let rc = unsafe { libc::pthread_key_create(&mut key, Some(thread::exit_hook)) };
        if rc != 0 {
            return Err(Error::from_raw_os_error(rc));
        }
        let shared = Arc::new(Shared {
            key,
            stack_size,
            guard,
            mapping,
            cap,
            release: self.release,
            canary: self.canary,
            interval: self.reclaim_interval,
            unsound_recycle_at_exit: self.unsound_recycle_at_exit,
            free: (cap > 0).then(|| ArrayQueue::new(cap)),
            retired: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            users: AtomicUsize::new(1),
            shutdown: AtomicBool::new(false),
            reclaimer: OnceLock::new(),
            reclaimer_pending: AtomicUsize::new(0),
            quarantine: Mutex::new(Vec::new()),
            pidfd: OnceLock::new(),
            create_diagnosis: Default::default(),
            map_diagnosis: Default::default(),
            c: Counters::default(),
        });
        for _ in 0..self.prefill.min(cap) {
            let hdr = shared.map_stack().map_err(|e| {
                let kind = Error::from_raw_os_error(e.errno()).kind();
                Error::new(kind, format!("cannot prefill the stack pool: {e}"))
            })?;
            if let Some(Err(hdr)) = shared.free.as_ref().map(|q| q.push(hdr)) {
                shared.unmap(hdr);
            }
        }
        let for_thread = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("exitq-stacks".into())
            .spawn(move || reap::run(for_thread))
            .map_err(|e| {
                // With the limit that stopped it, as a pooled thread's
                // creation failure is.
                Error::new(
                    e.kind(),
                    format!(
                        "cannot start the stack pool's reclaimer thread exitq-stacks: {}",
                        crate::limits::explain_thread_error(&e, None)
                    ),
                )
            })?;
        let _ = shared.reclaimer.set(handle.thread().clone());
        Ok(StackPool { shared })
    }
}

/// The most idle stacks a pool keeps, whatever `max_pooled` and
/// `max_pooled_bytes` say: 2^20 (a million stacks of at least 28 KiB, two
/// mappings each, far past the default `vm.max_map_count`). The free queue
/// holding them is allocated when the pool is built, 16 bytes an entry
/// (16 MiB at this bound).
const MAX_POOLED: usize = 1 << 20;

/// The checked sizes of one stack mapping, and how many may be pooled.
struct Geometry {
    /// Usable bytes (pthread stack + header), page multiple.
    stack_size: usize,
    /// Guard bytes, page multiple.
    guard: usize,
    /// `guard + stack_size`.
    mapping: usize,
    /// Most idle stacks kept.
    cap: usize,
}

impl StackPoolBuilder {
    /// The mapping's sizes: page-rounded, at least the minimum a pthread
    /// needs, and without overflow.
    fn geometry(&self) -> std::io::Result<Geometry> {
        use std::io::{Error, ErrorKind};
        let page = page_size();
        let stack_size = match self.stack_size {
            0 => default_stack_size(),
            n => n,
        };
        let stack_size = round_up(stack_size, page)
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "stack size overflows"))?;
        if stack_size < min_stack_size() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "stack size {stack_size} is below the minimum {} (PTHREAD_STACK_MIN, the \
                     pool's header and a page, rounded up to pages)",
                    min_stack_size()
                ),
            ));
        }
        let guard = round_up(self.guard_size, page)
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "guard size overflows"))?;
        let mapping = stack_size
            .checked_add(guard)
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "stack + guard overflows"))?;
        if mapping > isize::MAX as usize / 2 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("stack mapping of {mapping} bytes is absurd"),
            ));
        }
        // The free queue is allocated (and initialised) at build time, 16
        // bytes an entry: a cap meant as "unbounded" must not ask for more
        // than any process can use (it aborted the process).
        let cap = self
            .max_pooled
            .min(self.max_pooled_bytes / mapping)
            .min(MAX_POOLED);
        Ok(Geometry {
            stack_size,
            guard,
            mapping,
            cap,
        })
    }
}

/// A pool of thread stacks mapped once and recycled after their thread is
/// joined. Cheap to clone (an `Arc` inside). See the [module docs](self).
pub struct StackPool {
    shared: Arc<Shared>,
}

impl fmt::Debug for StackPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackPool")
            .field("stack_size", &self.shared.stack_size)
            .field("guard", &self.shared.guard)
            .field("cap", &self.shared.cap)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Clone for StackPool {
    fn clone(&self) -> Self {
        self.shared.users.fetch_add(1, Ordering::Relaxed);
        StackPool {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for StackPool {
    fn drop(&mut self) {
        // AcqRel: the last handle's decrement sees every other handle's
        // work (pairs with their decrements) before announcing shutdown.
        if self.shared.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Release: pairs with the reclaimer's Acquire load of
            // `shutdown`, which then drains and unmaps everything.
            self.shared.shutdown.store(true, Ordering::Release);
            self.shared.wake_reclaimer();
        }
    }
}

impl StackPool {
    /// A pool of stacks of `stack_size` usable bytes with the defaults.
    pub fn new(stack_size: usize) -> std::io::Result<StackPool> {
        StackPoolBuilder::default().stack_size(stack_size).build()
    }

    /// A builder with the defaults.
    pub fn builder() -> StackPoolBuilder {
        StackPoolBuilder::default()
    }

    /// Bytes of stack a pooled thread gets (what `pthread_attr_getstack`
    /// reports for it).
    pub fn stack_size(&self) -> usize {
        self.shared.pthread_stack_size()
    }

    /// Bytes of address space per stack mapping (guard and header included).
    pub fn mapping_size(&self) -> usize {
        self.shared.mapping
    }

    /// Most idle stacks this pool keeps.
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }

    /// Starts a thread running `start(arg)` on a pooled stack.
    ///
    /// # Safety
    ///
    /// * `start` must be sound to run on a new thread with `arg`, and sound
    ///   to unwind by `pthread_cancel`/`pthread_exit` if the caller uses
    ///   those (see [`StartRoutine`]).
    /// * Nobody may `pthread_join` or `pthread_detach` the thread except
    ///   through the returned [`PooledThread`] (its stack's reuse depends on
    ///   the pool doing the join).
    /// * `start` must not use more than [`StackPool::stack_size`] bytes of
    ///   stack (the guard page catches an overflow, as with any thread).
    pub unsafe fn spawn(
        &self,
        start: StartRoutine,
        arg: *mut c_void,
        reap: Reap,
    ) -> Result<PooledThread, SpawnError> {
        let sh = &*self.shared;
        let hdr = match sh.take_stack() {
            Ok(h) => h,
            Err(e) => {
                sh.c.spawn_failed.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        // SAFETY: we own `hdr` (just taken from the free queue or mapped);
        // `start` and `arg` come with the caller's guarantees above.
        unsafe { thread::spawn_on(&self.shared, hdr, start, arg, reap) }
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> StackPoolStats {
        let sh = &*self.shared;
        let pooled = sh.free.as_ref().map_or(0, |q| q.len()) as u64;
        sh.c.snapshot(sh.mapping, pooled)
    }

    /// Releases the pages of every idle stack (with the pool's
    /// [`Release`] advice, `MADV_DONTNEED` if it is `Keep`), in batches of
    /// one `process_madvise` call. Returns how many stacks were trimmed.
    pub fn trim(&self) -> usize {
        let sh = &*self.shared;
        let Some(q) = sh.free.as_ref() else { return 0 };
        let mut batch = Vec::with_capacity(q.len());
        while let Some(h) = q.pop() {
            batch.push(h);
        }
        let advice = sh.release.advice().unwrap_or(libc::MADV_DONTNEED);
        sh.release_pages(&batch, advice);
        let n = batch.len();
        for h in batch {
            if let Err(h) = q.push(h) {
                sh.unmap(h);
            }
        }
        n
    }

    /// Waits (up to `timeout`; one too long for an `Instant`, such as
    /// `Duration::MAX`, waits without a deadline) until every stack lent to a thread has been
    /// recycled, then unmaps every idle and quarantined stack. Returns true
    /// if everything came back in time. The pool stays usable. Called on
    /// a thread that runs on one of the pool's stacks, it waits for that
    /// thread too: it returns false at the deadline, and with no deadline
    /// it never returns.
    pub fn drain(&self, timeout: Duration) -> bool {
        let sh = &*self.shared;
        // A timeout past what an `Instant` holds waits for ever.
        let deadline = Instant::now().checked_add(timeout);
        loop {
            sh.wake_reclaimer();
            // Acquire (`lent`): pairs with the Release decrements in
            // `give_back` and the reclaimer's quarantine path: a stack stops
            // counting as lent only once it is in the free queue, unmapped
            // or quarantined, so `unmap_idle` below finds every idle one.
            // Acquire (`reclaimer_pending`): pairs with the reclaimer's
            // Release store after its joins: every thread it still had to
            // join has been joined before we unmap anything.
            if sh.c.lent.load(Ordering::Acquire) == 0
                && sh.reclaimer_pending.load(Ordering::Acquire) == 0
            {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                sh.unmap_idle();
                return false;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        sh.unmap_idle();
        sh.unmap_quarantine();
        true
    }
}
