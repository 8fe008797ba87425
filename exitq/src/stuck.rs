//! A poll that keeps finding one grace period held gives its CPU away
//! (`GracePeriods::poll`).
//!
//! Each operation of a producer runs mostly inside a read section, so
//! wherever producers outnumber the CPUs they get, one is preempted inside
//! its section and every grace period waits a time slice for it: the
//! running producers poll at each seal, find the same reader still
//! holding the grace period, and go on filling batches that wait too. The
//! kernel's RCU meets the same shape by boosting preempted readers; a user
//! space library cannot boost, but the polling thread can yield: after
//! [`STUCK_POLLS`] polls of this thread that found the same grace period
//! held, `sched_yield(2)` lets the scheduler run a preempted thread, which
//! ends its section, and the grace period completes at the next poll.
//!
//! Measured (`docs/results-exitq.md`, "What was tried"): `defer_free exitq 4`
//! (4 producers on 2 CPUs) 1.15x faster than without (1.26x in a first
//! one-binary comparison), 1.06x at 2 producers, neutral at 1 and on
//! reads and churn, where nothing runnable waits and `sched_yield`
//! returns at once. The
//! cost is one syscall per [`STUCK_POLLS`] seals while a grace period is
//! held, and only on a thread that seals batches: never on the exit path,
//! never inside a reader's section other than the polling thread's own
//! (yielding inside it holds nothing more than being preempted there).
//! `sched_yield` is not a cancellation point (POSIX), so cancellation
//! stays as the caller has it. Counted in
//! [`DomainStats::poll_yields`](crate::DomainStats::poll_yields).

/// Polls of one thread that find one grace period held before it yields
/// (and again every as many more): 4 and 16 measured alike at 4
/// producers on 2 CPUs (1.265x and 1.260x); 16 keeps the syscall rare
/// where a reader legitimately holds a grace period for long.
#[cfg_attr(exitq_loom, allow(dead_code))] // a no-op under loom
pub(crate) const STUCK_POLLS: u32 = 16;

#[cfg(not(exitq_loom))]
std::thread_local! {
    /// The grace period this thread's polls last found held, and how many
    /// times in a row.
    static HELD: std::cell::Cell<(u64, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// Notes that this thread's poll found grace period `g` held; yields the
/// CPU at every [`STUCK_POLLS`]th such poll in a row. Returns whether it
/// yielded.
#[inline]
pub(crate) fn held(g: u64) -> bool {
    #[cfg(not(exitq_loom))]
    {
        let k = HELD
            .try_with(|h| {
                let (last, k) = h.get();
                let k = if last == g { k.wrapping_add(1) } else { 1 };
                h.set((g, k));
                k
            })
            .unwrap_or(0); // thread-locals being destroyed: no yield
        if k != 0 && k % STUCK_POLLS == 0 {
            std::thread::yield_now();
            return true;
        }
    }
    #[cfg(exitq_loom)]
    let _ = g; // a scheduling hint only: nothing for loom to model
    false
}

#[cfg(all(test, not(exitq_loom)))]
mod tests {
    use super::*;

    #[test]
    fn yields_at_every_stuck_polls_th_poll_of_one_grace_period() {
        std::thread::spawn(|| {
            let yields: Vec<u32> = (1..=3 * STUCK_POLLS).filter(|_| held(5)).collect();
            assert_eq!(yields.len(), 3);
            // A new grace period held starts the count again.
            assert!((1..STUCK_POLLS).all(|_| !held(6)));
            assert!((1..STUCK_POLLS).all(|_| !held(7)));
            assert!(held(7));
        })
        .join()
        .unwrap();
    }
}
