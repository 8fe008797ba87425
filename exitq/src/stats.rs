//! The domain's counters ([`DomainStats`], a snapshot) and their atomic store.
use crate::sync::{AtomicU64, Ordering};

/// Counters of a domain since it was built (a snapshot; see
/// [`Domain::stats`](crate::Domain::stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DomainStats {
    /// Grace periods completed.
    pub grace_periods: u64,
    /// Calls to [`Domain::synchronize_expedited`](crate::Domain::synchronize_expedited).
    pub expedited: u64,
    /// Calls to `synchronize` and `synchronize_expedited`.
    pub synchronize_calls: u64,
    /// Deferred callbacks and exit hooks that have run (panicked ones included).
    pub callbacks_run: u64,
    /// Callbacks and exit hooks that panicked (caught; the rest still ran).
    pub callbacks_panicked: u64,
    /// Batches sealed (full, flushed, taken from an idle thread, or one
    /// callback published alone by an exiting thread). A batch handed over
    /// by a thread's exit path is not counted (the exit path pushes its
    /// work with one compare-and-swap and touches no counter).
    pub batches: u64,
    /// Batches run by the thread that deferred their callbacks
    /// ([`Callbacks::Local`](crate::Callbacks::Local)); the rest ran on the
    /// reclaimer or in a reclaim pass.
    pub batches_run_locally: u64,
    /// Most callbacks run after a single grace period in one reclaim pass.
    pub max_batch: u64,
    /// Sealed deferred callbacks not yet run.
    pub pending: u64,
    /// Exit hooks that have run.
    pub exits_run: u64,
    /// Exit hooks registered and not yet run.
    pub exits_armed: u64,
    /// Readers reported for stalling a grace period, and caches for
    /// stalling a `replace` ([`HeldBy::Cache`](crate::HeldBy::Cache)).
    pub stalls: u64,
    /// Grace periods the reclaimer thread led because the threads waiting
    /// for them had stopped driving them (no poll for a millisecond, or
    /// for 10 ms while they polled at a cadence; or one a poll started
    /// went unled for 10 ms). A steady producer drives its own; a count
    /// that grows with its seals means the reclaimer takes the grace
    /// periods, and their membarrier(2) calls, over.
    pub takeovers: u64,
    /// Times a thread's poll gave its CPU away (`sched_yield`) after
    /// finding the same grace period held at 16 of its seals in a row: a
    /// reader preempted inside its section, most likely, where threads
    /// outnumber CPUs.
    pub poll_yields: u64,
    /// Heavy barriers (membarrier(2) calls, or full fences in fallback
    /// mode) made by grace periods. A grace period started by a thread's
    /// poll needs none when every registered record shows its owner past
    /// its start (threads that keep entering read sections); idle
    /// registered threads make most grace periods need one.
    pub heavy_barriers: u64,
    /// Reclaim passes (take the domain's queue, one grace period, run) that
    /// found work.
    pub passes: u64,
    /// Batches taken from another thread (idle for a flush latency, or by
    /// `barrier` and shutdown).
    pub stolen_batches: u64,
    /// Thread exits handed to a stealer: the exiting thread found a
    /// stealer (the reclaimer's idle steal, `barrier`, shutdown) holding
    /// its record, left its work and exit hooks to it and went on without
    /// waiting (`handshake`, "An owner's exit is handed off").
    pub exit_handoffs: u64,
    /// Times a thread over the backlog limit waited or helped.
    pub backlog_waits: u64,
    /// Times the backlog limit was exceeded where waiting would deadlock
    /// (inside a read guard or a callback).
    pub backlog_overruns: u64,
    /// Participant records (threads and readers that used the domain,
    /// reused after they are done).
    pub participants: u64,
    /// membarrier(2) calls that failed after a successful registration
    /// (each retried; see [`expedite`](crate::expedite)).
    pub membarrier_failures: u64,
}

/// The name `inner.rs` still uses (to be renamed there).
pub(crate) use DomainStats as Stats;

/// The live counters behind [`DomainStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) grace_periods: AtomicU64,
    pub(crate) expedited: AtomicU64,
    pub(crate) synchronize_calls: AtomicU64,
    pub(crate) callbacks_run: AtomicU64,
    pub(crate) callbacks_panicked: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) batches_run_locally: AtomicU64,
    pub(crate) max_batch: AtomicU64,
    pub(crate) exits_run: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) takeovers: AtomicU64,
    pub(crate) poll_yields: AtomicU64,
    pub(crate) heavy_barriers: AtomicU64,
    pub(crate) passes: AtomicU64,
    pub(crate) stolen_batches: AtomicU64,
    pub(crate) exit_handoffs: AtomicU64,
    pub(crate) backlog_waits: AtomicU64,
    pub(crate) backlog_overruns: AtomicU64,
    pub(crate) participants: AtomicU64,
}

impl Counters {
    /// Adds `n` to a counter.
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: statistics only; no other memory is published through them.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    #[inline]
    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        // Relaxed: as `add`.
        counter.load(Ordering::Relaxed)
    }
}
