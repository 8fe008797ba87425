//! The reclaimer's looks at who drives the grace periods asked for
//! ([`GracePeriods::stalled`](crate::grace::GracePeriods::stalled)).
//!
//! Threads that seal batches drive their own grace periods: each seal
//! polls (`GracePeriods::poll`), and a poll starts or completes one when it
//! can. The reclaimer leads one itself only when nobody does. It cannot
//! see a thread's intent, only the count of polls, so it looks at that
//! count now and then and takes over when it stopped moving:
//!
//! * **Nobody polls** (the count did not move since the look before, or
//!   the previous movement was seen too long ago to tell a cadence): it
//!   takes over once neither a poll nor a completion was seen for `lag`
//!   (eight first-check delays, at least 1 ms).
//! * **Threads poll** (the count moved between two looks at most
//!   [`CADENCE`] apart): they make the progress that can be made (a reader
//!   preempted in its section holds every grace period alike), so it
//!   waits [`DRIVEN`] (10 ms) without a poll before it takes over. A
//!   writer that seals a batch every few milliseconds (a read-mostly
//!   pointer replaced at a steady pace) polls less often than `lag`:
//!   judged by `lag` alone, the reclaimer found it "stopped" between two
//!   of its seals over and over, led a grace period each time (148
//!   membarrier(2) calls a second, each an IPI to every CPU running the
//!   process) and woke every `lag` to look (1,100 wake-ups a second;
//!   `docs/results-exitq.md`, "The reclaimer's looks").
//! * **A grace period that polls started and nobody leads** is led once
//!   it was seen in progress for [`UNLED`] (at least `lag`), polls or
//!   not: polls only check the readers, and the leader's other duties
//!   (ending the sections that exited threads leaked, reporting stalls)
//!   fall to whoever leads (`tests/red2.rs`).
//!
//! The cost of waiting longer while threads poll: when they all stop at
//! once, the grace period they left is run up to [`DRIVEN`] after their
//! last poll instead of `lag`. Nothing waits on it but memory: callers of
//! `synchronize`, `barrier` and `exit_barrier` run grace periods
//! themselves, and an idle thread's batches are taken after a flush
//! latency (10 ms by default) anyway.
//!
//! A look is a pure function of what it is shown and the time it is given
//! (the unit tests below replay cadences without a clock).
use std::time::{Duration, Instant};

/// How long the reclaimer lets a grace period that polls started, and
/// nobody leads, go without completing before it leads it. Longer than a
/// time slice of a preempted reader on a busy machine, so that in steady
/// state the polls complete every grace period; short enough that the
/// section of a guard leaked by an exited thread ends within milliseconds,
/// as the crate docs promise.
pub(crate) const UNLED: Duration = Duration::from_millis(10);

/// How long the reclaimer waits without a poll while threads poll before
/// it takes a grace period over (module docs).
pub(crate) const DRIVEN: Duration = Duration::from_millis(10);

/// Polls seen moving between two looks at most this far apart set a
/// cadence (the threads drive); further apart, the movement may be old.
pub(crate) const CADENCE: Duration = Duration::from_millis(20);

/// What a look is shown (read under the grace-period lock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// Polls that got the lock, ever.
    pub(crate) polls: u64,
    /// When the last grace period completed.
    pub(crate) completed_at: Instant,
    /// The grace period in progress that a poll started and nobody leads
    /// (published, not led), if any.
    pub(crate) unled: Option<u64>,
}

/// What the reclaimer saw at its looks.
#[derive(Debug)]
pub(crate) struct Look {
    /// The poll count last seen moving, and when.
    polls: u64,
    since: Instant,
    /// Whether that movement set a cadence (the threads drive).
    driven: bool,
    /// The last completion seen.
    completed_at: Instant,
    /// The unled grace period seen in progress (0: none yet), and since
    /// when.
    unled: u64,
    unled_since: Instant,
}

impl Look {
    pub(crate) fn new(now: Instant) -> Look {
        Look {
            polls: 0,
            since: now,
            driven: false,
            completed_at: now,
            unled: 0,
            unled_since: now,
        }
    }

    /// How long without a poll and without a completion makes a stall.
    fn patience(&self, lag: Duration) -> Duration {
        if self.driven {
            DRIVEN.max(lag)
        } else {
            lag
        }
    }

    /// One look, at `now`: whether the grace period asked for is stalled
    /// (module docs), so that the reclaimer should lead one.
    pub(crate) fn stalled(&mut self, now: Instant, seen: Seen, lag: Duration) -> bool {
        self.completed_at = seen.completed_at;
        match seen.unled {
            Some(g) if g != self.unled => {
                self.unled = g;
                self.unled_since = now;
            }
            Some(_) if now.saturating_duration_since(self.unled_since) >= UNLED.max(lag) => {
                return true;
            }
            Some(_) => {}
            None => self.unled = 0,
        }
        if seen.polls != self.polls {
            self.driven = now.saturating_duration_since(self.since) <= CADENCE;
            self.polls = seen.polls;
            self.since = now;
            return false;
        }
        let quiet = self.since.max(seen.completed_at);
        now.saturating_duration_since(quiet) >= self.patience(lag)
    }

    /// How long from `now` until a look can find a stall that this one
    /// did not (the reclaimer's sleep while a grace period is asked for).
    pub(crate) fn next(&self, now: Instant, lag: Duration) -> Duration {
        let quiet = self.since.max(self.completed_at);
        let mut t = until(now, quiet, self.patience(lag));
        if self.unled != 0 {
            t = t.min(until(now, self.unled_since, UNLED.max(lag)));
        }
        t
    }
}

/// How long from `now` until `after` past `from` (zero if that is past),
/// without forming that `Instant`: `from + after` panics past what an
/// `Instant` holds, and `lag` comes from the builder's first-check delay,
/// which may be as long as it lets through. Saturates at `Duration::MAX`.
fn until(now: Instant, from: Instant, after: Duration) -> Duration {
    match from.checked_duration_since(now) {
        Some(ahead) => ahead.saturating_add(after),
        None => after.saturating_sub(now.saturating_duration_since(from)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: Duration = Duration::from_millis(1);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// What a look sees with `polls` polls, nothing completed since `t0`
    /// and no unled grace period.
    fn polls_only(t0: Instant, polls: u64) -> Seen {
        Seen {
            polls,
            completed_at: t0,
            unled: None,
        }
    }

    /// Replays a run without a clock (times in µs): polls at 0 and every
    /// `poll_every` until `polls_until` (none at all if `None`), looks every
    /// `look_every` until `end`; returns when the stalls were found.
    /// Nothing completes (the worst case: completions only delay a stall).
    fn replay(poll_every: u64, look_every: u64, polls_until: Option<u64>, end: u64) -> Vec<u64> {
        let t0 = Instant::now();
        let mut look = Look::new(t0);
        let mut stalls = Vec::new();
        let mut t = 0;
        while t < end {
            t += look_every;
            let polls = polls_until.map_or(0, |u| t.min(u) / poll_every + 1);
            if look.stalled(t0 + us(t), polls_only(t0, polls), LAG) {
                stalls.push(t);
            }
        }
        stalls
    }

    #[test]
    fn a_writer_polling_slower_than_lag_keeps_its_grace_periods() {
        // A seal every 2.5 ms; looks every lag, at extra wake-ups, or late.
        for look_every in [50, 300, 1_000, 4_000, 10_000, 19_000] {
            let stalls = replay(2_500, look_every, Some(u64::MAX), 2_000_000);
            assert!(stalls.is_empty(), "looks every {look_every} µs: {stalls:?}");
        }
        // The longest gap between polls that keeps a grace period.
        assert!(replay(9_900, 1_000, Some(u64::MAX), 2_000_000).is_empty());
        assert!(!replay(10_100, 1_000, Some(u64::MAX), 2_000_000).is_empty());
    }

    #[test]
    fn polls_that_stop_are_taken_over_after_driven() {
        let stalls = replay(2_500, 1_000, Some(100_000), 200_000);
        // The last poll (100 ms) was seen at once: led 10 ms later, and at
        // every look after.
        assert_eq!(stalls.first().copied(), Some(110_000));
    }

    #[test]
    fn nobody_polling_is_taken_over_after_lag() {
        assert_eq!(
            replay(2_500, 250, None, 5_000).first().copied(),
            Some(1_000)
        );
    }

    #[test]
    fn movement_after_a_long_silence_sets_no_cadence() {
        let t0 = Instant::now();
        let mut look = Look::new(t0);
        let seen = |polls| polls_only(t0, polls);
        // A poll long ago, seen only now: judged by lag.
        assert!(!look.stalled(t0 + us(500_000), seen(1), LAG));
        assert_eq!(look.next(t0 + us(500_000), LAG), LAG);
        assert!(!look.stalled(t0 + us(500_999), seen(1), LAG));
        assert!(look.stalled(t0 + us(501_000), seen(1), LAG));
    }

    #[test]
    fn a_completion_delays_a_stall() {
        let t0 = Instant::now();
        let mut look = Look::new(t0);
        let seen = Seen {
            polls: 0,
            completed_at: t0 + us(1_000),
            unled: None,
        };
        assert!(!look.stalled(t0 + us(1_500), seen, LAG));
        assert_eq!(look.next(t0 + us(1_500), LAG), us(500));
        assert!(look.stalled(t0 + us(2_000), seen, LAG));
    }

    #[test]
    fn an_unled_grace_period_is_led_after_unled_even_while_threads_poll() {
        let t0 = Instant::now();
        let mut look = Look::new(t0);
        let mut found = None;
        for i in 1..=40u64 {
            let seen = Seen {
                polls: i, // a poll between every two looks
                completed_at: t0,
                unled: Some(7),
            };
            if look.stalled(t0 + us(i * 1_000), seen, LAG) {
                found = Some(i);
                break;
            }
            assert!(look.next(t0 + us(i * 1_000), LAG) <= us(10_000));
        }
        // First seen at 1 ms, led at 11 ms.
        assert_eq!(found, Some(11));
        // Once it completed, the next look is due by the polls alone.
        let seen = Seen {
            polls: 12,
            completed_at: t0 + us(11_500),
            unled: None,
        };
        assert!(!look.stalled(t0 + us(12_000), seen, LAG));
        assert_eq!(look.next(t0 + us(12_000), LAG), us(10_000));
    }

    #[test]
    fn a_lag_past_what_an_instant_holds_means_never() {
        // `Instant + lag` would panic ("overflow when adding duration to
        // instant"): the next look is practically never, and no look finds
        // a stall.
        let t0 = Instant::now();
        let mut look = Look::new(t0);
        for lag in [Duration::MAX, Duration::from_secs(u64::MAX / 2 + 1)] {
            assert!(look.next(t0 + us(1_000), lag) >= lag - us(1_000));
            let seen = Seen {
                polls: 0,
                completed_at: t0,
                unled: Some(3),
            };
            assert!(!look.stalled(t0 + us(2_000), seen, lag));
            assert!(!look.stalled(t0 + us(3_000), seen, lag));
            assert!(look.next(t0 + us(3_000), lag) >= lag - us(3_000));
        }
        // And a `from` after `now`: the wait covers the gap too.
        assert_eq!(until(t0, t0 + us(500), us(1_000)), us(1_500));
        assert_eq!(until(t0 + us(2_000), t0, us(1_000)), Duration::ZERO);
        assert_eq!(until(t0, t0 + us(1), Duration::MAX), Duration::MAX);
    }

    #[test]
    fn the_next_look_is_due_when_a_stall_could_be_found() {
        let t0 = Instant::now();
        let mut look = Look::new(t0);
        let seen = |polls| polls_only(t0, polls);
        assert!(!look.stalled(t0 + us(1_000), seen(1), LAG));
        assert!(!look.stalled(t0 + us(3_000), seen(2), LAG));
        // Driven: the next judgement 10 ms after the last movement seen.
        assert_eq!(look.next(t0 + us(4_000), LAG), us(9_000));
        assert!(!look.stalled(t0 + us(12_999), seen(2), LAG));
        assert!(look.stalled(t0 + us(13_000), seen(2), LAG));
    }
}
