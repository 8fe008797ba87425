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
//! # Layout of one stack mapping
//!
//! ```text
//!  low addresses                                               high addresses
//!  +-----------+------------+-------------------------------+--------------+
//!  | guard     | canary     |  stack given to pthread        | Header       |
//!  | PROT_NONE | 4 words    |  (grows down from the right;   | (pool's own, |
//!  | (1 page+) | (far end)  |  glibc puts struct pthread +   | 128 bytes)   |
//!  |           |            |  static TLS at its top)        |              |
//!  +-----------+------------+-------------------------------+--------------+
//!  base        stackaddr                          stackaddr+size       end
//! ```
//!
//! * One `mmap(PROT_NONE)` reserves the whole mapping without committing
//!   memory, one `mprotect` opens everything above the guard (the same two
//!   calls glibc makes for a fresh stack): two VMAs per stack, counted
//!   against `vm.max_map_count`.
//! * The `Header` lives *above* the region handed to pthread, so neither
//!   the thread nor glibc ever writes it; it carries the intrusive list link
//!   used by the exit path, so returning a stack allocates nothing.
//! * The canary words sit at the far end of the stack (its lowest addresses,
//!   the last bytes a thread would ever reach), see [Canaries](#canaries).
//!
//! # When is a stack free? (the proof)
//!
//! With a user-provided stack, glibc keeps the thread descriptor
//! (`struct pthread`, the TCB: tid word, TSD, cancellation state, rseq area,
//! the `__stack_user` list link) *inside* that stack, at its top
//! (`allocatestack.c`: `pd = stackaddr - TLS_TCB_SIZE - adj`). So the stack is
//! in use not only while the start routine runs, but through every
//! thread-exit destructor and the rest of glibc's `start_thread` after them,
//! up to the `exit` system call, and glibc itself still reads the descriptor
//! when the thread is joined. Returning the stack from an exit destructor is
//! therefore **not** safe on its own: glibc is still running on it.
//!
//! The event that proves the thread is completely gone is the kernel's
//! `CLONE_CHILD_CLEARTID`: glibc's `pthread_create` passes `&pd->tid` as the
//! clear-child-tid address. When the thread exits, the kernel's `do_exit` →
//! `exit_mm` → `exit_mm_release` → `mm_release` writes 0 to that word and
//! futex-wakes it, and right after that `exit_mm` detaches the task from the
//! address space (`current->mm = NULL`): from then on the task cannot execute
//! a user instruction or touch user memory (robust-futex and PI cleanup,
//! the last kernel accesses to user memory, happen before the clear, in
//! `futex_exit_release`). `pthread_join` and `pthread_tryjoin_np` wait for
//! exactly that word to become 0, and then, before returning, run glibc's
//! `__nptl_free_tcb` → `__nptl_deallocate_stack`, which unlinks the
//! descriptor from `__stack_user` and frees the DTV. So:
//!
//! > **After `pthread_join`/`pthread_tryjoin_np` on a thread has returned 0,
//! > no thread, no glibc structure and no kernel path reads or writes that
//! > thread's stack any more.** This is the stack's "grace period".
//!
//! The pool therefore recycles a stack *only* after a successful join of the
//! thread that used it, done either by the owner ([`Reap::Owner`],
//! [`PooledThread::join`]) or by the pool's reclaimer ([`Reap::Reclaimer`],
//! `pthread_tryjoin_np`, never blocking on one slow thread). Nothing else
//! (not the exit destructor, not a timer) ever makes a stack reusable.
//!
//! Consequences for a caller's "reap" policy:
//! * *join* (the owner joins): sound, [`Reap::Owner`].
//! * *detach* (nobody waits): a detached thread with a user stack gives no
//!   public notice of its end (glibc frees its descriptor from the thread
//!   itself, then keeps running on the stack). So a pooled thread is never
//!   `pthread_detach`ed; [`Reap::Reclaimer`] gives the same "fire and
//!   forget" behaviour: the exit path pushes the stack onto the pool's
//!   retired list and the reclaimer joins it.
//! * *leak* (never joined, never detached): unsound to recycle, ever: the
//!   descriptor stays linked in glibc's `__stack_user` list (walked by
//!   `fork`, `setxid`), so the stack can be neither reused nor unmapped.
//!   Callers must refuse it (herd does, with exit code 2).
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
//!
//! # Reclaimer thread (why not an exitq `Domain`)
//!
//! A stack's grace period is the kernel's tid clear, not an RCU reader grace
//! period, and waiting for it may take a few retries; inside a `Domain`'s
//! reclaimer that would delay unrelated callbacks, and `register_exit`
//! preallocates a heap node per thread, while here the node lives in the
//! stack. So the pool has its own small reclaimer thread. It sleeps with a
//! backoff (1 ms while there is work, up to 64 ms when idle); the exit path
//! never wakes it (that would be a system call), a spawner that finds no free
//! stack does.
//!
//! # Bounds
//!
//! Idle (pooled) stacks are capped by [`Builder::max_pooled`] and
//! [`Builder::max_pooled_bytes`] (the smaller wins). A stack returned while
//! the pool is full is unmapped at once, by whoever recycles it (the
//! reclaimer, or the owner in [`PooledThread::join`]), never by the exiting
//! thread. Stacks in use are not capped: a thread that needs a stack when
//! none is pooled gets a freshly mapped one (the reclaimer is woken so the
//! retired ones come back). [`StackPool::drain`] waits until every stack is
//! back and unmaps all idle ones; dropping the last [`StackPool`] handle
//! does the same in the background once every thread has been reaped.
//!
//! # Releasing memory
//!
//! Pooled stacks keep their pages by default ([`Release::Keep`]): reuse
//! costs no page fault, and nothing touches `mmap_lock`. With
//! [`Release::DontNeed`] or [`Release::Free`] the reclaimer releases each
//! recycled stack's pages (all but the first and last page, which hold the
//! canary and the header) in batches, with one `process_madvise(2)` call for
//! up to 1024 stacks (one `mmap_lock` acquisition for the whole vector on
//! Linux 6.x; `MADV_DONTNEED` through `process_madvise` needs Linux 6.13+),
//! falling back to one `madvise(2)` per stack where the kernel refuses.
//! [`StackPool::trim`] does the same on demand for every idle stack.
//!
//! # Canaries
//!
//! With [`Builder::canary`] (the default), the four lowest words of each
//! stack hold a state word and three pattern words:
//! * hand-out: the spawner swaps the state from `FREE(gen)` to
//!   `IN_USE(gen+1)`; anything else (or a damaged pattern) means someone
//!   wrote the far end of a stack that should be idle;
//! * recycle: after the join, the recycler swaps `IN_USE(gen)` to
//!   `FREE(gen)` with a CAS; anything else means the far end was written
//!   while the stack was lent (a thread that nearly overflowed, or one that
//!   still runs on it).
//!
//! A stack failing either check is counted in [`Stats::canary_violations`]
//! and quarantined: never handed out again, unmapped only when the pool is
//! drained. The test suite uses this to show that an unsound recycling rule
//! (returning the stack from the exit destructor) is caught, and that the
//! join rule is never.
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

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

/// A thread start routine that may be unwound by a forced unwind
/// (`pthread_cancel`, `pthread_exit`): it must be a "plain old frame" at
/// every cancellation point it reaches (no live destructors, no
/// `catch_unwind`), see RFC 2945 ("C-unwind" ABI).
pub type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

/// Number of 64-bit canary words at the far (lowest) end of every stack.
pub const CANARY_WORDS: usize = 4;

/// Bytes reserved above the pthread stack for the pool's `Header`.
const HEADER_RESERVE: usize = 128;

/// Most `iovec`s one `process_madvise(2)` call accepts (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// Canary state word of a stack that is idle in the pool (generation `gen`).
#[inline]
pub fn canary_free(gen: u64) -> u64 {
    0x4652_4545_5354_4b00 ^ gen.rotate_left(8)
}

/// Canary state word of a stack lent to a thread (generation `gen`).
#[inline]
pub fn canary_in_use(gen: u64) -> u64 {
    0x494e_5553_4553_5400 ^ gen.rotate_left(8)
}

/// Canary state word the pool writes into a quarantined stack.
pub const CANARY_QUARANTINED: u64 = 0x5155_4152_414e_5449;

/// Pattern word `i` (1..CANARY_WORDS) of the stack whose canary is at `at`.
#[inline]
fn canary_pattern(at: usize, i: usize) -> u64 {
    (0x5041_5454_4552_4e00 | i as u64) ^ (at as u64)
}

/// Who joins a pooled thread, which is what makes its stack reusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reap {
    /// The owner joins the thread with [`PooledThread::join`]; the stack is
    /// recycled as soon as `pthread_join` returns. No exit hook.
    Owner,
    /// Nobody outside the pool joins ("detached" behaviour): the exit path
    /// pushes the stack onto the pool's retired list (one CAS) and the
    /// reclaimer joins the thread with `pthread_tryjoin_np`, then recycles
    /// the stack. The thread must never be joined or detached by anyone
    /// else.
    Reclaimer,
}

/// What happens to the pages of a stack that goes back into the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Release {
    /// Keep the pages: no system call, no page fault on reuse (default).
    Keep,
    /// `MADV_FREE`: the kernel may reclaim the pages lazily.
    Free,
    /// `MADV_DONTNEED`: the pages are dropped now (RSS falls at once).
    DontNeed,
}

impl Release {
    fn advice(self) -> Option<libc::c_int> {
        match self {
            Release::Keep => None,
            Release::Free => Some(libc::MADV_FREE),
            Release::DontNeed => Some(libc::MADV_DONTNEED),
        }
    }
}

/// Why [`StackPool::spawn`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// `mmap` of a new stack failed (`errno`): address space, overcommit or
    /// `vm.max_map_count`.
    Map(i32),
    /// `mprotect` of a new stack failed (`errno`): usually
    /// `vm.max_map_count` (each stack is two mappings).
    Protect(i32),
    /// `pthread_create` failed (`errno`; `EAGAIN`: `RLIMIT_NPROC`,
    /// `kernel.threads-max` or `kernel.pid_max`).
    Create(i32),
}

impl SpawnError {
    /// The `errno` value behind the failure.
    pub fn errno(&self) -> i32 {
        match *self {
            SpawnError::Map(e) | SpawnError::Protect(e) | SpawnError::Create(e) => e,
        }
    }

    /// The system limit that most likely explains the failure.
    pub fn limit(&self) -> &'static str {
        match *self {
            SpawnError::Map(libc::ENOMEM) | SpawnError::Protect(libc::ENOMEM) => {
                "vm.max_map_count or memory overcommit (each pooled stack is 2 mappings)"
            }
            SpawnError::Map(_) | SpawnError::Protect(_) => "address space (RLIMIT_AS)",
            SpawnError::Create(libc::EAGAIN) => {
                "RLIMIT_NPROC, kernel.threads-max or kernel.pid_max"
            }
            SpawnError::Create(_) => "pthread_create",
        }
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            SpawnError::Map(_) => "mmap of a thread stack",
            SpawnError::Protect(_) => "mprotect of a thread stack",
            SpawnError::Create(_) => "pthread_create on a pooled stack",
        };
        write!(
            f,
            "{what} failed: {} (likely limit: {})",
            std::io::Error::from_raw_os_error(self.errno()),
            self.limit()
        )
    }
}

impl std::error::Error for SpawnError {}

/// Counters of a [`StackPool`] (a snapshot; each field is read separately).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Stacks mapped now (pooled + lent + quarantined + in the reclaimer).
    pub mapped: u64,
    /// Most stacks mapped at once.
    pub peak_mapped: u64,
    /// Bytes of address space mapped now (guards included).
    pub mapped_bytes: u64,
    /// Stacks idle in the pool now.
    pub pooled: u64,
    /// Stacks lent to threads and not yet recycled.
    pub lent: u64,
    /// Threads created on pooled stacks.
    pub spawned: u64,
    /// Spawns that failed (mapping or `pthread_create`).
    pub spawn_failed: u64,
    /// Stacks mapped fresh (`mmap` + `mprotect`).
    pub maps: u64,
    /// Hand-outs of a stack that was used before.
    pub reused: u64,
    /// Stacks recycled after their thread was joined.
    pub recycled: u64,
    /// Stacks unmapped (pool full, drain, or shutdown).
    pub unmaps: u64,
    /// Stacks the exit path pushed onto the retired list.
    pub exit_pushes: u64,
    /// `pthread_tryjoin_np` answers "still exiting" (retried later).
    pub tryjoin_busy: u64,
    /// Reclaimer rounds that found work.
    pub reclaim_rounds: u64,
    /// Canary checks that failed (see the module docs).
    pub canary_violations: u64,
    /// Stacks set aside after a failed canary check.
    pub quarantined: u64,
    /// `process_madvise(2)` calls made.
    pub process_madvise_calls: u64,
    /// `madvise(2)` calls made (fallback, or `process_madvise` missing).
    pub madvise_calls: u64,
    /// Stack ranges released (by either call).
    pub released_ranges: u64,
}

/// Configures a [`StackPool`].
#[derive(Clone, Debug)]
pub struct Builder {
    stack_size: usize,
    guard_size: usize,
    max_pooled: usize,
    max_pooled_bytes: usize,
    release: Release,
    canary: bool,
    prefill: usize,
    reclaim_interval: Duration,
    unsound_recycle_at_exit: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            stack_size: 0,
            guard_size: page_size(),
            max_pooled: 1024,
            max_pooled_bytes: 8 << 30,
            release: Release::Keep,
            canary: true,
            prefill: 0,
            reclaim_interval: Duration::from_millis(1),
            unsound_recycle_at_exit: false,
        }
    }
}

impl Builder {
    /// Usable stack bytes per thread (rounded up to pages; the guard and
    /// the pool's 128-byte header come on top). 0 (the default) means
    /// glibc's default thread stack size (`pthread_getattr_default_np`,
    /// i.e. `RLIMIT_STACK` unless unlimited).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// Guard bytes below each stack (rounded up to pages; default one page;
    /// 0 disables the guard).
    pub fn guard_size(mut self, bytes: usize) -> Self {
        self.guard_size = bytes;
        self
    }

    /// Most idle stacks kept (default 1024). 0: never keep one (every stack
    /// is unmapped once its thread is joined).
    pub fn max_pooled(mut self, stacks: usize) -> Self {
        self.max_pooled = stacks;
        self
    }

    /// Most bytes of address space kept in idle stacks (default 8 GiB).
    pub fn max_pooled_bytes(mut self, bytes: usize) -> Self {
        self.max_pooled_bytes = bytes;
        self
    }

    /// What to do with a recycled stack's pages (default [`Release::Keep`]).
    pub fn release(mut self, release: Release) -> Self {
        self.release = release;
        self
    }

    /// Check canary words at hand-out and recycle (default on).
    pub fn canary(mut self, on: bool) -> Self {
        self.canary = on;
        self
    }

    /// Stacks to map at build time (capped by the pool bound).
    pub fn prefill(mut self, stacks: usize) -> Self {
        self.prefill = stacks;
        self
    }

    /// The reclaimer's sleep while it has work (default 1 ms; idle it backs
    /// off to 64 times that).
    pub fn reclaim_interval(mut self, interval: Duration) -> Self {
        self.reclaim_interval = interval.max(Duration::from_micros(10));
        self
    }

    /// UNSOUND, for tests only: recycle a [`Reap::Reclaimer`] stack as soon
    /// as the exit destructor pushes it, without waiting for the join (the
    /// thread is joined later). This is the mistake the canary check must
    /// catch; never use it outside a test.
    #[doc(hidden)]
    pub fn unsound_recycle_at_exit_for_tests(mut self, on: bool) -> Self {
        self.unsound_recycle_at_exit = on;
        self
    }

    /// Builds the pool: creates its pthread key and starts its reclaimer.
    pub fn build(self) -> std::io::Result<StackPool> {
        use std::io::{Error, ErrorKind};
        let page = page_size();
        let stack_size = match self.stack_size {
            0 => default_stack_size(),
            n => n,
        };
        let stack_size = round_up(stack_size, page)
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "stack size overflows"))?;
        if stack_size < libc::PTHREAD_STACK_MIN + HEADER_RESERVE + page {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "stack size {stack_size} is below the minimum {} (PTHREAD_STACK_MIN + a page)",
                    libc::PTHREAD_STACK_MIN + HEADER_RESERVE + page
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
        let cap = self.max_pooled.min(self.max_pooled_bytes / mapping);
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid out-pointer; `exit_hook` is an
        // `extern "C"` function that never unwinds.
        let rc = unsafe { libc::pthread_key_create(&mut key, Some(exit_hook)) };
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
            c: Counters::default(),
        });
        for _ in 0..self.prefill.min(cap) {
            let hdr = shared
                .map_stack()
                .map_err(|e| Error::from_raw_os_error(e.errno()))?;
            if let Some(Err(hdr)) = shared.free.as_ref().map(|q| q.push(hdr)) {
                shared.unmap(hdr);
            }
        }
        let for_thread = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("exitq-stacks".into())
            .spawn(move || reclaimer_main(for_thread))?;
        let _ = shared.reclaimer.set(handle.thread().clone());
        Ok(StackPool { shared })
    }
}

/// The pool's bookkeeping inside each stack mapping (above the stack).
///
/// Written by the spawner before `pthread_create` (which orders those
/// writes before anything the new thread does), by the new thread in the
/// trampoline, and by whoever owns the stack at that moment; ownership
/// passes along the retired list (Release push, Acquire take) and the free
/// queue (crossbeam's own ordering).
#[repr(C, align(64))]
struct Header {
    /// Retired-list link (and the reclaimer's private pending list).
    next: AtomicPtr<Header>,
    /// [`Reap::Reclaimer`]: 2 at spawn (the thread's exit and its handle);
    /// whoever drops it to 0 pushes the stack onto the retired list.
    refs: AtomicU32,
    /// `FLAG_*` bits, see there.
    flags: AtomicU32,
    /// The thread on this stack, written by the thread itself in the
    /// trampoline (so it is set before any push).
    thread: AtomicU64,
    /// Hand-out generation (canary values are tagged with it).
    gen: AtomicU64,
    /// The pool (kept alive until every lent stack is back).
    shared: *const Shared,
    /// Start of the mapping (guard included).
    base: *mut u8,
    /// The caller's start routine and argument, for the trampoline.
    start: UnsafeCell<Option<StartRoutine>>,
    arg: UnsafeCell<*mut c_void>,
}

/// The owner already joined the thread: recycle without `tryjoin`.
const FLAG_JOINED: u32 = 1;
/// [`Reap::Reclaimer`] thread: the trampoline arms the exit hook.
const FLAG_RECLAIMER: u32 = 2;

impl Header {
    fn shared(&self) -> &Shared {
        // SAFETY: `shared` is set at mapping time to the `Arc<Shared>`
        // allocation of the owning pool, which stays alive while any of its
        // stacks is mapped (the reclaimer holds an `Arc` and only exits
        // after every stack is back and unmapped).
        unsafe { &*self.shared }
    }
}

#[derive(Default)]
struct Counters {
    // Written by spawners.
    spawned: CachePadded<AtomicU64>,
    spawn_failed: AtomicU64,
    maps: AtomicU64,
    reused: AtomicU64,
    lent: AtomicU64,
    // Written by recyclers (reclaimer, or owners in join()).
    recycled: CachePadded<AtomicU64>,
    unmaps: AtomicU64,
    exit_pushes: AtomicU64,
    tryjoin_busy: AtomicU64,
    reclaim_rounds: AtomicU64,
    canary_violations: AtomicU64,
    quarantined: AtomicU64,
    process_madvise_calls: AtomicU64,
    madvise_calls: AtomicU64,
    released_ranges: AtomicU64,
    // Both.
    mapped: CachePadded<AtomicU64>,
    peak_mapped: AtomicU64,
}

struct Shared {
    key: libc::pthread_key_t,
    /// Usable bytes (pthread stack + header), page multiple.
    stack_size: usize,
    guard: usize,
    /// `guard + stack_size`.
    mapping: usize,
    cap: usize,
    release: Release,
    canary: bool,
    interval: Duration,
    unsound_recycle_at_exit: bool,
    /// Idle stacks (bounded MPMC queue; `None` when the cap is 0).
    free: Option<ArrayQueue<NonNull<Header>>>,
    /// Retired list: pushed by exit paths and handle drops, taken whole by
    /// the reclaimer.
    retired: CachePadded<AtomicPtr<Header>>,
    /// Live `StackPool` handles.
    users: AtomicUsize,
    shutdown: AtomicBool,
    reclaimer: OnceLock<Thread>,
    /// Threads the reclaimer is still waiting to join.
    reclaimer_pending: AtomicUsize,
    quarantine: Mutex<Vec<NonNull<Header>>>,
    pidfd: OnceLock<Option<libc::c_int>>,
    c: Counters,
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
        Builder::default().stack_size(stack_size).build()
    }

    /// A builder with the defaults.
    pub fn builder() -> Builder {
        Builder::default()
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
            return Err(SpawnError::Create(rc));
        }
        sh.c.spawned.fetch_add(1, Ordering::Relaxed);
        Ok(PooledThread {
            thread,
            hdr,
            reap,
            shared: Arc::clone(&self.shared),
            done: false,
        })
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
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

    /// Waits (up to `timeout`) until every stack lent to a thread has been
    /// recycled, then unmaps every idle and quarantined stack. Returns true
    /// if everything came back in time. The pool stays usable.
    pub fn drain(&self, timeout: Duration) -> bool {
        let sh = &*self.shared;
        let deadline = Instant::now() + timeout;
        loop {
            sh.wake_reclaimer();
            if sh.c.lent.load(Ordering::Acquire) == 0
                && sh.reclaimer_pending.load(Ordering::Acquire) == 0
            {
                break;
            }
            if Instant::now() >= deadline {
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
    /// more (module docs). Returns the thread's result
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

extern "C" {
    /// `pthread_create` with a start routine that may be force-unwound
    /// (glibc's `start_thread` catches the forced unwind of cancellation
    /// and `pthread_exit` at its own frame, so unwinding *out of* the start
    /// routine into glibc is how every cancelled thread ends).
    #[link_name = "pthread_create"]
    fn pthread_create_unwind(
        thread: *mut libc::pthread_t,
        attr: *const libc::pthread_attr_t,
        start: unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> libc::c_int;
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
extern "C" fn exit_hook(p: *mut c_void) {
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

impl Shared {
    fn pthread_stack_size(&self) -> usize {
        self.stack_size - HEADER_RESERVE
    }

    /// Lowest address of the stack handed to pthread (the canary lives here).
    fn stack_low(&self, hdr: NonNull<Header>) -> *mut u8 {
        // SAFETY: `base` was set when the stack was mapped and never changes.
        let base = unsafe { hdr.as_ref().base };
        base.wrapping_add(self.guard)
    }

    fn canary(&self, hdr: NonNull<Header>) -> &[AtomicU64; CANARY_WORDS] {
        // SAFETY: the lowest 32 bytes of the stack are mapped read-write for
        // as long as the stack is mapped (and we hold it); the address is
        // page aligned. They are accessed only atomically by the pool, so a
        // thread writing them by mistake is a detectable race, not UB here.
        unsafe { &*self.stack_low(hdr).cast::<[AtomicU64; CANARY_WORDS]>() }
    }

    fn stats(&self) -> Stats {
        let c = &self.c;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mapped = r(&c.mapped);
        Stats {
            mapped,
            peak_mapped: r(&c.peak_mapped),
            mapped_bytes: mapped * self.mapping as u64,
            pooled: self.free.as_ref().map_or(0, |q| q.len()) as u64,
            lent: r(&c.lent),
            spawned: r(&c.spawned),
            spawn_failed: r(&c.spawn_failed),
            maps: r(&c.maps),
            reused: r(&c.reused),
            recycled: r(&c.recycled),
            unmaps: r(&c.unmaps),
            exit_pushes: r(&c.exit_pushes),
            tryjoin_busy: r(&c.tryjoin_busy),
            reclaim_rounds: r(&c.reclaim_rounds),
            canary_violations: r(&c.canary_violations),
            quarantined: r(&c.quarantined),
            process_madvise_calls: r(&c.process_madvise_calls),
            madvise_calls: r(&c.madvise_calls),
            released_ranges: r(&c.released_ranges),
        }
    }

    fn wake_reclaimer(&self) {
        if let Some(t) = self.reclaimer.get() {
            t.unpark();
        }
    }

    /// A stack for a new thread: a pooled one whose canary checks out, or a
    /// freshly mapped one. Counts it as lent.
    fn take_stack(&self) -> Result<NonNull<Header>, SpawnError> {
        while let Some(hdr) = self.free.as_ref().and_then(|q| q.pop()) {
            // SAFETY: popped from the free queue: we own it.
            let h = unsafe { hdr.as_ref() };
            let gen = h.gen.load(Ordering::Relaxed);
            if self.canary && !self.canary_hand_out(hdr, gen) {
                self.quarantine(hdr);
                continue;
            }
            h.gen.store(gen + 1, Ordering::Relaxed);
            self.c.reused.fetch_add(1, Ordering::Relaxed);
            self.c.lent.fetch_add(1, Ordering::Relaxed);
            return Ok(hdr);
        }
        // Nothing pooled: the retired stacks may be waiting for a round.
        if !self.retired.load(Ordering::Relaxed).is_null()
            || self.reclaimer_pending.load(Ordering::Relaxed) > 0
        {
            self.wake_reclaimer();
        }
        let hdr = self.map_stack()?;
        // SAFETY: freshly mapped: we own it.
        let h = unsafe { hdr.as_ref() };
        let gen = h.gen.load(Ordering::Relaxed);
        if self.canary {
            // A fresh stack's canary was written FREE(0) by map_stack.
            let ok = self.canary_hand_out(hdr, gen);
            debug_assert!(ok);
        }
        h.gen.store(gen + 1, Ordering::Relaxed);
        self.c.lent.fetch_add(1, Ordering::Relaxed);
        Ok(hdr)
    }

    /// Hand-out check: FREE(gen) → IN_USE(gen+1); false if anything else
    /// was there (someone wrote the far end of an idle stack).
    fn canary_hand_out(&self, hdr: NonNull<Header>, gen: u64) -> bool {
        let c = self.canary(hdr);
        let at = c.as_ptr() as usize;
        let seen = c[0].swap(canary_in_use(gen + 1), Ordering::Relaxed);
        let pattern_ok =
            (1..CANARY_WORDS).all(|i| c[i].load(Ordering::Relaxed) == canary_pattern(at, i));
        if seen != canary_free(gen) || !pattern_ok {
            self.c.canary_violations.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Recycle check: IN_USE(gen) → FREE(gen); false if the far end was
    /// written while the stack was lent.
    fn canary_recycle(&self, hdr: NonNull<Header>) -> bool {
        // SAFETY: the caller owns the stack (joined, or unsound test mode).
        let gen = unsafe { hdr.as_ref() }.gen.load(Ordering::Relaxed);
        let c = self.canary(hdr);
        let at = c.as_ptr() as usize;
        let swapped = c[0]
            .compare_exchange(
                canary_in_use(gen),
                canary_free(gen),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok();
        let pattern_ok =
            (1..CANARY_WORDS).all(|i| c[i].load(Ordering::Relaxed) == canary_pattern(at, i));
        if !swapped || !pattern_ok {
            self.c.canary_violations.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn quarantine(&self, hdr: NonNull<Header>) {
        self.canary(hdr)[0].store(CANARY_QUARANTINED, Ordering::Relaxed);
        self.c.quarantined.fetch_add(1, Ordering::Relaxed);
        self.quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hdr);
    }

    /// [`recycle`](Self::recycle), then the stack stops counting as lent.
    /// In that order: `lent == 0` (Acquire) then proves the stack is in the
    /// queue or unmapped (the reclaimer's shutdown test relies on it).
    fn give_back(&self, hdr: NonNull<Header>) {
        self.recycle(hdr);
        // Release: pairs with the Acquire loads of `lent` in `drain` and the
        // reclaimer's shutdown test.
        self.c.lent.fetch_sub(1, Ordering::Release);
    }

    /// A stack whose thread is provably gone (or never started) goes back:
    /// canary check, then the free queue, or unmapped when the pool is full.
    /// The caller has already released its pages if the policy says so.
    fn recycle(&self, hdr: NonNull<Header>) {
        if self.canary && !self.canary_recycle(hdr) {
            self.quarantine(hdr);
            return;
        }
        self.c.recycled.fetch_add(1, Ordering::Relaxed);
        match self.free.as_ref().map(|q| q.push(hdr)) {
            Some(Ok(())) => {}
            Some(Err(hdr)) => self.unmap(hdr),
            None => self.unmap(hdr),
        }
    }

    /// One CAS push onto the retired list (Treiber push; the list is only
    /// ever taken whole, so there is no ABA).
    fn push_retired(&self, hdr: NonNull<Header>) {
        // SAFETY: the pusher owns the header until the push succeeds.
        let h = unsafe { hdr.as_ref() };
        let mut head = self.retired.load(Ordering::Relaxed);
        loop {
            h.next.store(head, Ordering::Relaxed);
            // Release: publishes the header's fields (thread, next) to the
            // reclaimer's Acquire swap in `take_retired`.
            match self.retired.compare_exchange_weak(
                head,
                hdr.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    fn take_retired(&self) -> *mut Header {
        // Acquire: pairs with the Release CAS in `push_retired`.
        self.retired.swap(ptr::null_mut(), Ordering::Acquire)
    }

    fn map_stack(&self) -> Result<NonNull<Header>, SpawnError> {
        // SAFETY: anonymous private mapping of a checked size; PROT_NONE
        // reserves address space without committing memory.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                self.mapping,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(SpawnError::Map(errno()));
        }
        let base = base.cast::<u8>();
        // SAFETY: the range [base+guard, base+mapping) lies in the mapping
        // just created.
        let rc = unsafe {
            libc::mprotect(
                base.add(self.guard).cast(),
                self.stack_size,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            let e = errno();
            // SAFETY: our own mapping, unused.
            unsafe { libc::munmap(base.cast(), self.mapping) };
            return Err(SpawnError::Protect(e));
        }
        let hdr = base
            .wrapping_add(self.mapping - HEADER_RESERVE)
            .cast::<Header>();
        // SAFETY: `hdr` is 64-byte aligned (mapping is page aligned,
        // HEADER_RESERVE a multiple of 64), inside the read-write part, and
        // HEADER_RESERVE >= size_of::<Header>() (checked below).
        unsafe {
            hdr.write(Header {
                next: AtomicPtr::new(ptr::null_mut()),
                refs: AtomicU32::new(0),
                flags: AtomicU32::new(0),
                thread: AtomicU64::new(0),
                gen: AtomicU64::new(0),
                shared: self as *const Shared,
                base,
                start: UnsafeCell::new(None),
                arg: UnsafeCell::new(ptr::null_mut()),
            })
        };
        // SAFETY: non-null (inside a successful mapping).
        let hdr = unsafe { NonNull::new_unchecked(hdr) };
        if self.canary {
            let c = self.canary(hdr);
            let at = c.as_ptr() as usize;
            c[0].store(canary_free(0), Ordering::Relaxed);
            for (i, w) in c.iter().enumerate().skip(1) {
                w.store(canary_pattern(at, i), Ordering::Relaxed);
            }
        }
        self.c.maps.fetch_add(1, Ordering::Relaxed);
        let now = self.c.mapped.fetch_add(1, Ordering::Relaxed) + 1;
        self.c.peak_mapped.fetch_max(now, Ordering::Relaxed);
        Ok(hdr)
    }

    fn unmap(&self, hdr: NonNull<Header>) {
        // SAFETY: the caller owns the stack and no thread uses it (joined,
        // or never started); the header is not touched after this.
        let base = unsafe { hdr.as_ref().base };
        // SAFETY: `base`/`mapping` describe exactly the mapping we created.
        unsafe { libc::munmap(base.cast(), self.mapping) };
        self.c.unmaps.fetch_add(1, Ordering::Relaxed);
        self.c.mapped.fetch_sub(1, Ordering::Relaxed);
    }

    fn unmap_idle(&self) {
        if let Some(q) = self.free.as_ref() {
            while let Some(h) = q.pop() {
                self.unmap(h);
            }
        }
    }

    fn unmap_quarantine(&self) {
        let q = std::mem::take(&mut *self.quarantine.lock().unwrap_or_else(|e| e.into_inner()));
        for h in q {
            self.unmap(h);
        }
    }

    fn pidfd(&self) -> Option<libc::c_int> {
        *self.pidfd.get_or_init(|| {
            // SAFETY: pidfd_open(getpid(), 0) has no memory arguments.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
            (fd >= 0).then_some(fd as libc::c_int)
        })
    }

    /// The pages of a stack that may be released: all but its first page
    /// (canary) and last page (header).
    fn releasable(&self, hdr: NonNull<Header>) -> Option<libc::iovec> {
        let page = page_size();
        let low = self.stack_low(hdr).wrapping_add(page);
        let len = self.stack_size.checked_sub(2 * page)?;
        (len > 0).then_some(libc::iovec {
            iov_base: low.cast(),
            iov_len: len,
        })
    }

    /// Releases the pages of `stacks` (owned by the caller, unused):
    /// `process_madvise` with up to IOV_MAX ranges per call, or one
    /// `madvise` per stack if the kernel refuses.
    fn release_pages(&self, stacks: &[NonNull<Header>], advice: libc::c_int) {
        let iovs: Vec<libc::iovec> = stacks.iter().filter_map(|&h| self.releasable(h)).collect();
        for chunk in iovs.chunks(IOV_MAX) {
            let mut done = 0;
            if let Some(fd) = self.pidfd() {
                // SAFETY: `chunk` is a valid iovec array of `len` entries,
                // each naming pages of a stack we own and nobody uses.
                let n = unsafe {
                    libc::syscall(
                        libc::SYS_process_madvise,
                        fd,
                        chunk.as_ptr(),
                        chunk.len(),
                        advice,
                        0u32,
                    )
                };
                if n >= 0 {
                    self.c.process_madvise_calls.fetch_add(1, Ordering::Relaxed);
                    // Ranges fully advised before a possible partial stop.
                    let mut left = n as usize;
                    for v in chunk {
                        if left < v.iov_len {
                            break;
                        }
                        left -= v.iov_len;
                        done += 1;
                    }
                }
            }
            for v in &chunk[done..] {
                // SAFETY: as above, one range of an owned, unused stack.
                unsafe { libc::madvise(v.iov_base, v.iov_len, advice) };
                self.c.madvise_calls.fetch_add(1, Ordering::Relaxed);
            }
            self.c
                .released_ranges
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    }
}

/// The reclaimer: takes the retired list, joins each thread without
/// blocking, releases pages in batches, recycles; at shutdown, waits for
/// every lent stack and unmaps everything.
fn reclaimer_main(sh: Arc<Shared>) {
    // Threads pushed but still in their exit tail (intrusive via `next`;
    // the reclaimer owns these headers).
    let mut pending: Vec<NonNull<Header>> = Vec::new();
    // Unsound test mode: stacks recycled early, threads still to be joined.
    let mut join_later: Vec<libc::pthread_t> = Vec::new();
    let mut ready: Vec<NonNull<Header>> = Vec::new();
    let mut idle_rounds = 0u32;
    loop {
        let mut p = sh.take_retired();
        let mut took = 0u64;
        while let Some(hdr) = NonNull::new(p) {
            // SAFETY: taken from the retired list: the reclaimer owns it.
            p = unsafe { hdr.as_ref() }.next.load(Ordering::Relaxed);
            took += 1;
            pending.push(hdr);
        }
        if took > 0 {
            sh.c.exit_pushes.fetch_add(took, Ordering::Relaxed);
        }
        let had_work = !pending.is_empty() || !join_later.is_empty();
        pending.retain(|&hdr| {
            // SAFETY: owned by the reclaimer (see above).
            let h = unsafe { hdr.as_ref() };
            if h.flags.load(Ordering::Relaxed) & FLAG_JOINED != 0 {
                ready.push(hdr);
                return false;
            }
            let t = h.thread.load(Ordering::Relaxed);
            if sh.unsound_recycle_at_exit {
                // THE MISTAKE (tests only): reuse before the join.
                join_later.push(t);
                ready.push(hdr);
                return false;
            }
            // SAFETY: `t` is a joinable thread that nobody else joins or
            // detaches (spawn's contract), not yet joined.
            match unsafe { libc::pthread_tryjoin_np(t, ptr::null_mut()) } {
                0 => {
                    // The kernel cleared the tid and glibc released the
                    // descriptor: the stack is free (module docs).
                    ready.push(hdr);
                    false
                }
                libc::EBUSY => {
                    sh.c.tryjoin_busy.fetch_add(1, Ordering::Relaxed);
                    true
                }
                rc => {
                    // Cannot happen for a valid joinable thread; keep the
                    // stack out of circulation rather than guess.
                    eprintln!("exitq::stacks: pthread_tryjoin_np failed ({rc}); stack kept aside");
                    sh.quarantine(hdr);
                    sh.c.lent.fetch_sub(1, Ordering::Release);
                    false
                }
            }
        });
        join_later.retain(|&t| {
            // SAFETY: as above; each of these is joined exactly once.
            let rc = unsafe { libc::pthread_tryjoin_np(t, ptr::null_mut()) };
            rc == libc::EBUSY
        });
        if !ready.is_empty() {
            if let Some(advice) = sh.release.advice() {
                sh.release_pages(&ready, advice);
            }
            for hdr in ready.drain(..) {
                sh.give_back(hdr);
            }
        }
        // Release: pairs with drain()'s Acquire load (lent + pending == 0
        // means everything is back in the queue or unmapped).
        sh.reclaimer_pending
            .store(pending.len() + join_later.len(), Ordering::Release);
        if had_work {
            sh.c.reclaim_rounds.fetch_add(1, Ordering::Relaxed);
            idle_rounds = 0;
        } else {
            idle_rounds = (idle_rounds + 1).min(6);
        }
        // Acquire: pairs with the last StackPool drop's Release store.
        if sh.shutdown.load(Ordering::Acquire)
            && sh.c.lent.load(Ordering::Acquire) == 0
            && pending.is_empty()
            && join_later.is_empty()
            && sh.retired.load(Ordering::Acquire).is_null()
        {
            sh.unmap_idle();
            sh.unmap_quarantine();
            return;
        }
        let sleep = if pending.is_empty() && join_later.is_empty() {
            sh.interval * (1 << idle_rounds)
        } else {
            sh.interval
        };
        std::thread::park_timeout(sleep);
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn round_up(n: usize, to: usize) -> Option<usize> {
    Some(n.checked_add(to - 1)? / to * to)
}

/// glibc's default thread stack size (what `pthread_create` with default
/// attributes uses): `RLIMIT_STACK`, or 2 MiB if that is unlimited.
pub fn default_stack_size() -> usize {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut size: usize = 0;
    // SAFETY: pthread_getattr_default_np initialises `attr`, which is
    // destroyed after reading its stack size.
    let rc = unsafe {
        let rc = pthread_getattr_default_np(attr.as_mut_ptr());
        if rc == 0 {
            libc::pthread_attr_getstacksize(attr.as_ptr(), &mut size);
            libc::pthread_attr_destroy(attr.as_mut_ptr());
        }
        rc
    };
    if rc == 0 && size > 0 {
        size
    } else {
        2 << 20
    }
}

extern "C" {
    fn pthread_getattr_default_np(attr: *mut libc::pthread_attr_t) -> libc::c_int;
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_RESERVE);
const _: () = assert!(HEADER_RESERVE % 64 == 0);
