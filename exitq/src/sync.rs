//! Atomics shim: std's atomics normally, loom's under `--cfg exitq_loom`.
//!
//! Only the lock-free core (the list and the grace-period protocol) goes
//! through this module, so loom can explore its interleavings. Under loom a
//! full fence (`fence(SeqCst)`, and the membarrier(2) that stands in for the
//! readers' fences) is modelled as an `AcqRel` read-modify-write of one
//! global word: loom treats `SeqCst` as `AcqRel`, which would report false
//! store-buffering races, while RMWs of a single location are totally
//! ordered and each synchronizes with the one before it — exactly the
//! property the protocol relies on from a full fence.

#[cfg(not(exitq_loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

#[cfg(exitq_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

pub(crate) use std::sync::atomic::Ordering;

/// A full memory barrier on this thread.
#[inline]
pub(crate) fn full_fence() {
    #[cfg(not(exitq_loom))]
    std::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(exitq_loom)]
    loom_fence();
}

/// A compiler-only barrier: the writer side supplies the hardware barrier
/// with membarrier(2). Under loom it must be a real fence (loom does not
/// model membarrier's "barrier injected into every running thread"),
/// except on a thread that a model runs as one no barrier comes to
/// (`no_barrier_comes`): there it orders nothing, as on the hardware.
#[inline]
pub(crate) fn compiler_fence() {
    #[cfg(not(exitq_loom))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(exitq_loom)]
    if !NO_BARRIER.with(|no| no.get()) {
        loom_fence();
    }
}

#[cfg(exitq_loom)]
loom::thread_local! {
    /// Whether this loom thread runs [`no_barrier_comes`]'s closure.
    static NO_BARRIER: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

/// Runs `f` on this loom thread as on a thread that no heavy barrier
/// reaches (a grace period completed without it, `past.rs`): its
/// membarrier-mode compiler fences ([`compiler_fence`]) order nothing.
#[cfg(exitq_loom)]
pub(crate) fn no_barrier_comes<R>(f: impl FnOnce() -> R) -> R {
    NO_BARRIER.with(|no| no.set(true));
    let r = f();
    NO_BARRIER.with(|no| no.set(false));
    r
}

/// Between the two accesses of each side of a store-buffering pair made
/// of SeqCst accesses (the reclaimer's sleep, `wake.rs`): nothing here, as
/// C++20's single total order of SeqCst operations orders them; under loom,
/// which treats SeqCst accesses as AcqRel, the modelled full fence.
#[inline(always)]
pub(crate) fn sc_pair() {
    #[cfg(exitq_loom)]
    loom_fence();
}

#[cfg(exitq_loom)]
fn loom_fence() {
    loom::lazy_static! {
        static ref FENCE: AtomicUsize = AtomicUsize::new(0);
    }
    // AcqRel RMW on one global word: all "fences" are totally ordered and
    // each happens-after the previous one (see the module docs).
    FENCE.fetch_add(0, Ordering::AcqRel);
}

/// Yields to the scheduler (loom: lets the model switch threads).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(exitq_loom))]
    std::thread::yield_now();
    #[cfg(exitq_loom)]
    loom::thread::yield_now();
}
