//! The reclaimer thread ([`Reclaimer::Thread`](crate::Reclaimer::Thread)).
//!
//! It drives grace periods and runs what no live thread will:
//!
//! * grace periods, back to back while any thread waits for one
//!   ([`GracePeriods::wanted`](crate::grace::GracePeriods::wanted)): the
//!   threads then run their own ready batches;
//! * reclaim passes over the domain's queue (batches and hooks of exited
//!   threads, stolen and offloaded batches);
//! * every flush latency, the idle steal: batches that a thread opened, or
//!   sealed and left unrun, at least one flush latency ago;
//! * its own batches (callbacks that defer).
//!
//! # Sleeping
//!
//! With nothing to do it parks: with a timeout while threads hold batches
//! (the next idle steal) or exit hooks are armed (the exit path cannot
//! wake it: `exit_poll`), without one otherwise. Publishing its state and
//! re-checking for work is a store-buffering pair with the producers'
//! "change the state (SeqCst), then check `sleeping`" (`Inner::wake_reclaimer`,
//! `GracePeriods::request`): either it sees their change or they see it
//! asleep and unpark it. A steady producer never wakes it: it is awake,
//! running the grace periods the producer asks for.
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::inner::{Inner, AWAKE, PARKED, POLLING};
use crate::local;
use crate::reclaim::{self, Steal};
use crate::sync::Ordering;
use crate::thread as this_thread;

/// The reclaimer thread's loop.
pub(crate) fn run(inner: Arc<Inner>) {
    let _ = inner.reclaimer_thread.set(thread::current());
    let flush = inner.config.flush_latency;
    let mut last_poll = Instant::now();
    loop {
        // Acquire: pairs with shutdown's store (its steals happen-before
        // our last round).
        if inner.shut_down.load(Ordering::Acquire) {
            break;
        }
        let mut did = reclaim::reclaim_pass(&inner);
        if inner.gp.wanted() {
            inner.gp.synchronize(&inner.registry, &inner.stats, false);
            did += 1;
        }
        // Callbacks run here may have deferred more: seal and run ours.
        if let Some(r) = this_thread::existing_main(&inner) {
            local::flush(&inner, r);
        }
        // Age held batches: take those from before the previous poll (so at
        // least one flush latency old).
        if last_poll.elapsed() >= flush {
            last_poll = Instant::now();
            // Relaxed: an aging clock; hints are compared against it.
            let epoch = inner.poll_epoch.fetch_add(1, Ordering::Relaxed) + 1;
            // Relaxed: a hint (the steal re-checks under the handshake).
            if inner.held.load(Ordering::Relaxed) > 0 {
                did += reclaim::steal(&inner, Steal::Idle(epoch - 1)).0;
            }
        }
        if did > 0 {
            continue;
        }
        let must_poll = || {
            // SeqCst: our side of the store-buffering pairs (module docs).
            inner.held.load(Ordering::SeqCst) > 0
                || (inner.config.exit_poll.is_some()
                    && inner.armed_exits.load(Ordering::SeqCst) > 0)
        };
        let state = if must_poll() { POLLING } else { PARKED };
        // SeqCst: store-buffering pair with publishers (module docs).
        inner.sleeping.store(state, Ordering::SeqCst);
        let changed = !inner.queue.is_empty()
            || inner.shut_down.load(Ordering::SeqCst)
            || inner.gp.wanted()
            || (state == PARKED && must_poll());
        if changed {
            inner.sleeping.store(AWAKE, Ordering::SeqCst);
            continue;
        }
        if state == PARKED {
            thread::park();
        } else {
            // Relaxed: a hint for the timeout.
            let timeout = if inner.held.load(Ordering::Relaxed) > 0 {
                flush.saturating_sub(last_poll.elapsed())
            } else {
                // Polling for exit hooks implies `exit_poll` is set.
                inner.config.exit_poll.unwrap_or(flush)
            };
            thread::park_timeout(timeout.max(Duration::from_micros(50)));
        }
        // SeqCst: back to `AWAKE` in the same total order as the pair
        // above, so a publisher that loads `AWAKE` does not wake us while
        // our loop is about to see its work anyway.
        inner.sleeping.store(AWAKE, Ordering::SeqCst);
    }
    // Shutdown (`domain::Handle::drop`) drains what is left after joining
    // us; hand it our own batches.
    if let Some(r) = this_thread::existing_main(&inner) {
        reclaim::push_own(&inner, r);
    }
}
