//! The reclaimer thread ([`Reclaimer::Thread`](crate::Reclaimer::Thread)).
//!
//! It drives grace periods and runs what no live thread will:
//!
//! * grace periods that threads wait for and nobody drives
//!   ([`GracePeriods::stalled`](crate::grace::GracePeriods::stalled),
//!   judged by `look.rs`: none completed and no thread polled for a
//!   millisecond, or for 10 ms while threads poll at a cadence, since
//!   each seal polls and drives its own; or one that polls started has
//!   gone unled for 10 ms: polls do not end leaked sections nor report
//!   stalls), one at a time: the next takeover waits for the same
//!   judgement, which the one just completed starts again. The threads
//!   then run their own ready batches. Each is counted in
//!   [`DomainStats::takeovers`](crate::DomainStats::takeovers);
//! * reclaim passes over the domain's queue (batches and hooks of exited
//!   threads, stolen and offloaded batches), **batched in time**: at most
//!   one pass per [`exit_poll`](crate::DomainBuilder::exit_poll) (10 ms by
//!   default), so the threads of a herd that exit within that time share
//!   one grace period, one membarrier and one run. Urgent work (a backlog
//!   of sealed callbacks on the queue; every batch with
//!   [`Callbacks::Offload`]) is taken at once;
//! * every flush latency, the idle steal: batches that a thread opened, or
//!   sealed and left unrun, at least one flush latency ago;
//! * its own batches (callbacks that defer).
//!
//! # Sleeping: liburcu's call_rcu thread, the kernel's RCU kthreads
//!
//! Between rounds it sleeps on its doorbell (`doorbell.rs`: an eventfd,
//! so neither its sleeps nor its wake-ups are futex calls):
//!
//! * **with a timeout** (`POLLING`) while it has something to watch:
//!   threads hold batches (the next idle steal, and at most 10 ms
//!   whatever the flush latency: their grace-period requests do not wake
//!   a polling reclaimer, and one asked for just before it slept must be
//!   looked at within that), work is queued (the next
//!   pass), exit hooks are armed (their threads' exits cannot wake it:
//!   at most `exit_poll`, whatever the flush latency), or
//!   it was busy within the last two polls. The timeout is the time to the
//!   next thing due, the next look that could find a grace period asked
//!   for abandoned (`look.rs`: 10 ms on while threads drive them, so a
//!   writer that seals every few milliseconds does not wake it every
//!   millisecond), and one first-check delay while it ran grace periods
//!   itself in the last millisecond (a steady producer's next request is
//!   then served without any wake-up);
//! * **without one** (`PARKED`) once nothing is left to watch and it was
//!   idle for two polls: so a herd of threads that come and go, or a
//!   producer that pauses, does not make it park and be woken over and
//!   over (one wake-up per burst, as liburcu's call_rcu thread, which
//!   sleeps 10 ms after each batch and waits on its futex only when its
//!   queue is empty).
//!
//! Publishing its state and re-checking for work is a store-buffering
//! pair with the publishers' "change the state (SeqCst), then check
//! `sleeping`" (`wake.rs`, `Inner::wake_reclaimer`,
//! `GracePeriods::request`): either
//! it sees their change or they see it asleep and ring. A `POLLING`
//! reclaimer is woken only for a backlog and for the first batch held or
//! hook armed: its timeout covers what it watched when it fell asleep, not
//! what it did not (after a busy spell with nothing held it may poll once
//! in two flush latencies; with a flush latency of an hour, a batch opened
//! then waited that long for its grace period to be taken over, and a hook
//! armed then for its pass: `tests/domain.rs`). A `PARKED` one is woken
//! for any work. For the same reason, a re-check after publishing looks
//! for anything to watch that was not there when the state was chosen,
//! whichever state it is.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Callbacks;
use crate::inner::Inner;
use crate::local;
use crate::look::{self, Look};
use crate::past;
use crate::reclaim::{self, Steal};
use crate::stats::Counters;
use crate::sync::Ordering;
use crate::thread as this_thread;
use crate::wake::{self, Asleep, Watch};

/// Grace periods asked for this recently keep the reclaimer polling at
/// the first-check delay.
const GP_ACTIVE: Duration = Duration::from_millis(1);

/// When things fell due (the loop's clocks).
struct Clocks {
    /// The last idle steal (aging of held batches).
    steal: Instant,
    /// The last pass over the queue (`None`: the next one is due now).
    pass: Option<Instant>,
    /// The last round that did something.
    busy: Instant,
    /// The last grace period run because one was asked for.
    gp: Option<Instant>,
    /// The threads' polls and the unled grace period last seen, and
    /// since when (`GracePeriods::stalled`).
    polls: Look,
}

/// The reclaimer thread's loop.
pub(crate) fn run(inner: Arc<Inner>) {
    inner.doorbell.register();
    let flush = inner.config.flush_latency;
    // How long queued work may wait for a pass (exited threads' work).
    let gap = match inner.config.callbacks {
        Callbacks::Offload => Duration::ZERO,
        Callbacks::Local => inner.config.exit_poll.unwrap_or(flush),
    };
    // How long a grace period asked for may go without progress before the
    // reclaimer runs it.
    let lag = lag(&inner);
    let now = Instant::now();
    let mut at = Clocks {
        steal: now,
        pass: None,
        busy: now,
        gp: None,
        polls: Look::new(now),
    };
    loop {
        // Acquire: pairs with shutdown's store (its steals happen-before
        // our last round).
        if inner.shut_down.load(Ordering::Acquire) {
            break;
        }
        let mut did = 0;
        if !inner.queue.is_empty() && (urgent(&inner) || due(at.pass, gap)) {
            did += reclaim::reclaim_pass(&inner);
            at.pass = Some(Instant::now());
        }
        if inner.gp.stalled(lag, &mut at.polls) {
            // The threads that asked drive their grace periods themselves
            // (`GracePeriods::poll`, at each seal); this one went without
            // progress and without polls (they stopped sealing), or polls
            // left it unled for long (a leaked section to end, a stall to
            // report: a leader's duties).
            inner.gp.synchronize(&inner.registry, &inner.stats, false);
            Counters::add(&inner.stats.takeovers, 1);
            at.gp = Some(Instant::now());
            did += 1;
        }
        // Callbacks run here may have deferred more: seal and run ours.
        if let Some(r) = this_thread::existing_main(&inner) {
            local::flush(&inner, r);
            // Our record shows the epoch we have seen (`past.rs`).
            past::refresh_idle(&inner.gp.hot.gp_ctr, &r.ctr);
        }
        // Age held batches: take those from before the previous poll (so at
        // least one flush latency old).
        if at.steal.elapsed() >= flush {
            at.steal = Instant::now();
            // Relaxed: an aging clock; hints are compared against it.
            let epoch = inner.poll_epoch.fetch_add(1, Ordering::Relaxed) + 1;
            // Relaxed: a hint (the steal re-checks under the handshake).
            if inner.held.load(Ordering::Relaxed) > 0 {
                let stolen = reclaim::steal(&inner, Steal::Idle(epoch - 1)).0;
                if stolen > 0 {
                    at.pass = None; // run what was taken now
                    did += stolen;
                }
            }
        }
        if did > 0 {
            at.busy = Instant::now();
            continue;
        }
        sleep(&inner, &mut at, gap);
    }
    // Shutdown (`domain::Handle::drop`) drains what is left after joining
    // us; hand it our own batches.
    if let Some(r) = this_thread::existing_main(&inner) {
        reclaim::push_own(&inner, r);
    }
}

/// How long a grace period asked for may go without one completing before
/// the reclaimer runs it: long enough that a thread sealing batches drives
/// it first (eight first-check delays, at least 1 ms). Saturating: a
/// product past `Duration::MAX` would panic and end the reclaimer thread.
fn lag(inner: &Inner) -> Duration {
    inner
        .gp
        .first_check_delay()
        .saturating_mul(8)
        .max(Duration::from_millis(1))
}

/// Whether the queue holds a backlog to take at once: at least four
/// batches' worth of sealed callbacks (offloaded or stolen ones; exited
/// threads' open batches and hooks are not counted, they wait for the
/// next pass).
fn urgent(inner: &Inner) -> bool {
    // Relaxed: a hint.
    inner.pending.load(Ordering::Relaxed) >= inner.config.batch_size.saturating_mul(4)
}

/// Whether something last done at `last` (`None`: never) is due again
/// after `every`.
fn due(last: Option<Instant>, every: Duration) -> bool {
    last.map_or(true, |t| t.elapsed() >= every)
}

/// One sleep of the reclaimer (module docs): publish the state, re-check,
/// sleep on the doorbell.
fn sleep(inner: &Inner, at: &mut Clocks, gap: Duration) {
    let flush = inner.config.flush_latency;
    let poll = gap.max(flush);
    // Two polls: the idle window before it may park. Saturating: the
    // builder takes any `Duration` (a huge one means practically never),
    // and an overflow would panic and end the reclaimer thread.
    let idle_window = poll.saturating_mul(2);
    let look = || Watch {
        // SeqCst: our side of the store-buffering pairs (`wake.rs`).
        held: inner.held.load(Ordering::SeqCst) > 0,
        queued: !inner.queue.is_empty(),
        armed: inner.config.exit_poll.is_some() && inner.armed_exits.load(Ordering::SeqCst) > 0,
    };
    let recent = at.busy.elapsed() < idle_window;
    let asleep = wake::fall_asleep(&inner.sleeping, recent, look);
    // What the timeout covers: what the second look saw (`wake.rs`).
    let seen = match asleep {
        Asleep::Polling(seen) => seen,
        _ => Watch::default(),
    };
    let wanted = inner.gp.wanted();
    let changed = asleep == Asleep::LookAgain
        || inner.shut_down.load(Ordering::SeqCst)
        || inner.gp.stalled(lag(inner), &mut at.polls)
        || (seen.queued && (urgent(inner) || due(at.pass, gap)));
    if !changed {
        let timeout = matches!(asleep, Asleep::Polling(_)).then(|| {
            // Until the next poll, or (busy lately) until it may park.
            let mut t = if recent {
                idle_window.saturating_sub(at.busy.elapsed())
            } else {
                poll
            };
            if seen.held {
                // The next idle steal; and at most `DRIVEN` in any case:
                // the threads holding batches ask for grace periods
                // without waking a polling reclaimer (`local.rs`), and one
                // that stopped sealing has its grace period taken over
                // within `DRIVEN` of this look, whatever the flush latency.
                t = t
                    .min(flush.saturating_sub(at.steal.elapsed()))
                    .min(look::DRIVEN);
            }
            if seen.queued {
                let since = at.pass.map_or(gap, |p| p.elapsed());
                t = t.min(gap.saturating_sub(since));
            }
            if let (Some(every), true) = (inner.config.exit_poll, seen.armed) {
                // Exits cannot wake us: look every `exit_poll` for the
                // hooks they queue, whatever the flush latency.
                t = t.min(every);
            }
            if wanted {
                // The next look that could find the threads stopped
                // driving it (`look.rs`).
                t = t.min(at.polls.next(Instant::now(), lag(inner)));
            }
            if at.gp.is_some_and(|g| g.elapsed() < GP_ACTIVE) {
                t = t.min(inner.gp.first_check_delay());
            }
            t.max(Duration::from_micros(20))
        });
        // Offline while asleep, if callbacks gave us a record: grace
        // periods then need no heavy barrier on our account (`past.rs`).
        let ours = this_thread::existing_main(inner);
        if let Some(r) = ours {
            past::offline(&r.ctr);
        }
        inner.doorbell.sleep(timeout);
        if let Some(r) = ours {
            past::online(&inner.gp.hot.gp_ctr, &r.ctr);
        }
    }
    wake::awake(&inner.sleeping);
}
