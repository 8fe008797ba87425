//! Configuring a [`StackPool`](super::StackPool): the [`StackPoolBuilder`] and what a
//! recycled stack's pages become ([`Release`]).

use std::time::Duration;

use super::sys::page_size;

/// What happens to the pages of a stack that goes back into the pool.
///
/// Pooled stacks keep their pages by default ([`Release::Keep`]): reuse costs
/// no page fault, and nothing touches `mmap_lock`. With [`Release::DontNeed`]
/// or [`Release::Free`] the reclaimer releases each recycled stack's pages
/// (all but the first and last page, which hold the canary and the header) in
/// batches, with one `process_madvise(2)` call for up to 1024 stacks (one
/// `mmap_lock` acquisition for the whole vector on Linux 6.x; `MADV_DONTNEED`
/// through `process_madvise` needs Linux 6.13+), falling back to one
/// `madvise(2)` per stack where the kernel refuses.
/// [`StackPool::trim`](super::StackPool::trim) does the same on demand for
/// every idle stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Release {
    /// Keep the pages: no system call, no page fault on reuse (default).
    Keep,
    /// `MADV_FREE`: the kernel may reclaim the pages lazily.
    Free,
    /// `MADV_DONTNEED`: the pages are dropped now (RSS falls at once).
    DontNeed,
}

impl Release {
    pub(super) fn advice(self) -> Option<libc::c_int> {
        match self {
            Release::Keep => None,
            Release::Free => Some(libc::MADV_FREE),
            Release::DontNeed => Some(libc::MADV_DONTNEED),
        }
    }
}

/// Configures a [`StackPool`](super::StackPool).
#[derive(Clone, Debug)]
pub struct StackPoolBuilder {
    pub(super) stack_size: usize,
    pub(super) guard_size: usize,
    pub(super) max_pooled: usize,
    pub(super) max_pooled_bytes: usize,
    pub(super) release: Release,
    pub(super) canary: bool,
    pub(super) prefill: usize,
    pub(super) reclaim_interval: Duration,
    pub(super) unsound_recycle_at_exit: bool,
}

impl Default for StackPoolBuilder {
    fn default() -> Self {
        StackPoolBuilder {
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

impl StackPoolBuilder {
    /// Usable stack bytes per thread (rounded up to pages; the guard and
    /// the pool's 128-byte header come on top). 0 (the default) means
    /// glibc's default thread stack size (`pthread_getattr_default_np`,
    /// i.e. `RLIMIT_STACK` unless unlimited). At least
    /// [`min_stack_size`](crate::stacks::min_stack_size) (24 KiB with 4 KiB
    /// pages), else `build` fails with `InvalidInput`.
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

    /// Most idle stacks kept (default 1024; at most 2^20, whatever is
    /// asked: the queue of idle stacks is allocated at build time, 16 bytes
    /// an entry). 0: never keep one (every stack is unmapped once its
    /// thread is joined).
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

    /// Check canary words at hand-out and recycle (default on). A stack
    /// failing either check is counted in
    /// [`StackPoolStats::canary_violations`](super::StackPoolStats::canary_violations) and
    /// quarantined: never handed out again, unmapped only when the pool is
    /// drained.
    pub fn canary(mut self, on: bool) -> Self {
        self.canary = on;
        self
    }

    /// Stacks to map at build time (capped by the pool bound).
    pub fn prefill(mut self, stacks: usize) -> Self {
        self.prefill = stacks;
        self
    }

    /// The reclaimer's sleep while it has work (default 1 ms, at least
    /// 10 µs; idle it backs off to 64 times that, saturating at
    /// `Duration::MAX`). `drain`, dropping the pool and a spawner that
    /// finds no idle stack while others wait to be reaped wake it early.
    pub fn reclaim_interval(mut self, interval: Duration) -> Self {
        self.reclaim_interval = interval.max(Duration::from_micros(10));
        self
    }

    /// UNSOUND, for tests only: recycle a [`Reap::Reclaimer`] stack as soon
    /// as the exit destructor pushes it, without waiting for the join (the
    /// thread is joined later). This is the mistake the canary check must
    /// catch; never use it outside a test.
    ///
    /// # Safety
    ///
    /// With `on`, the pool may hand a stack to a new thread while the
    /// thread it was lent to still runs on it (a use after free that no
    /// contract of [`StackPool::spawn`](super::StackPool::spawn) rules
    /// out): only a test that expects exactly that may turn it on. A safe
    /// call does not compile:
    ///
    /// ```compile_fail,E0133
    /// let _ = exitq::stacks::StackPool::builder().unsound_recycle_at_exit_for_tests(true);
    /// ```
    #[doc(hidden)]
    pub unsafe fn unsound_recycle_at_exit_for_tests(mut self, on: bool) -> Self {
        self.unsound_recycle_at_exit = on;
        self
    }
}
