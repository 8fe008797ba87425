//! The pool's counters ([`Counters`], written by spawners and recyclers) and
//! their snapshot ([`StackPoolStats`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// Counters of a [`StackPool`](super::StackPool) (a snapshot; each field is read separately).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackPoolStats {
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
    /// Canary checks that failed (see [`StackPoolBuilder::canary`](super::StackPoolBuilder::canary)).
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

#[derive(Default)]
pub(super) struct Counters {
    // Written by spawners.
    pub(super) spawned: CachePadded<AtomicU64>,
    pub(super) spawn_failed: AtomicU64,
    pub(super) maps: AtomicU64,
    pub(super) reused: AtomicU64,
    pub(super) lent: AtomicU64,
    // Written by recyclers (reclaimer, or owners in join()).
    pub(super) recycled: CachePadded<AtomicU64>,
    pub(super) unmaps: AtomicU64,
    pub(super) exit_pushes: AtomicU64,
    pub(super) tryjoin_busy: AtomicU64,
    pub(super) reclaim_rounds: AtomicU64,
    pub(super) canary_violations: AtomicU64,
    pub(super) quarantined: AtomicU64,
    pub(super) process_madvise_calls: AtomicU64,
    pub(super) madvise_calls: AtomicU64,
    pub(super) released_ranges: AtomicU64,
    // Both.
    pub(super) mapped: CachePadded<AtomicU64>,
    pub(super) peak_mapped: AtomicU64,
}

impl Counters {
    /// A snapshot: each counter read separately. `mapping` is the bytes of
    /// one stack mapping, `pooled` the stacks idle in the free queue now.
    pub(super) fn snapshot(&self, mapping: usize, pooled: u64) -> StackPoolStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mapped = r(&self.mapped);
        StackPoolStats {
            mapped,
            peak_mapped: r(&self.peak_mapped),
            mapped_bytes: mapped * mapping as u64,
            pooled,
            lent: r(&self.lent),
            spawned: r(&self.spawned),
            spawn_failed: r(&self.spawn_failed),
            maps: r(&self.maps),
            reused: r(&self.reused),
            recycled: r(&self.recycled),
            unmaps: r(&self.unmaps),
            exit_pushes: r(&self.exit_pushes),
            tryjoin_busy: r(&self.tryjoin_busy),
            reclaim_rounds: r(&self.reclaim_rounds),
            canary_violations: r(&self.canary_violations),
            quarantined: r(&self.quarantined),
            process_madvise_calls: r(&self.process_madvise_calls),
            madvise_calls: r(&self.madvise_calls),
            released_ranges: r(&self.released_ranges),
        }
    }
}
