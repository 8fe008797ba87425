//! The hand-off waves' shutdown race (`handoffs.rs`): a wave on a
//! short-lived domain of its own, whose last handle is dropped, by the
//! spawner or by one of the threads, while the threads exit: the
//! shutdown's steal of every record races their exits (and, before it,
//! the reclaimer's idle steal, with a flush latency and exit poll of
//! 100 µs; a quarter of the domains have the inline reclaimer instead).
//! Once every handle is dropped and every thread joined, every callback
//! must have run exactly once, and every hook (which, as all hooks, must
//! run once and not before its thread finished: `exits.rs`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use exitq::{Domain, Reclaimer};

use crate::handoff_kit::{exit_delay, hook, payload_defer, tally, verify};
use crate::world::{count_unrun_or_twice, inc, world, Rng};

/// `Tally::slot` of a wave's own, dropped domain.
const DROPPED: usize = usize::MAX;

/// A wave on a domain of its own, whose last handle is dropped (by the
/// spawner or by one of the threads) while the threads exit.
pub(crate) fn dropped_wave(rng: &Rng) {
    let w = world();
    let mut b = Domain::builder()
        .batch_size(1 + rng.below(8) as usize)
        .flush_latency(Duration::from_micros(100))
        .exit_poll(Some(Duration::from_micros(100)));
    if rng.chance(25) {
        b = b.reclaimer(Reclaimer::Inline);
    }
    let domain = b.build();
    let (issued, ran) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let dropped = Arc::new(AtomicUsize::new(0));
    let n = 2 + rng.below(7);
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (d, issued, ran) = (domain.clone(), issued.clone(), ran.clone());
            let dropped = dropped.clone();
            let seed = rng.next();
            thread::spawn(move || {
                let rng = Rng::new(seed);
                let mut t = tally(DROPPED);
                for _ in 0..1 + rng.below(3) {
                    hook(&d, &mut t);
                }
                for _ in 0..rng.below(16) {
                    let ran = ran.clone();
                    payload_defer(&d, &rng, move || {
                        ran.fetch_add(1, Ordering::Relaxed);
                    });
                    issued.fetch_add(1, Ordering::Relaxed);
                }
                exit_delay(&rng);
                drop(d); // the last handle, sometimes
                dropped.fetch_add(1, Ordering::Release);
                t.finished.store(true, Ordering::Release);
                t
            })
        })
        .collect();
    // Ours, once some of the threads (none to all) dropped theirs.
    let wait_for = rng.below(n + 1) as usize;
    let since = Instant::now();
    while dropped.load(Ordering::Acquire) < wait_for && since.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_micros(20));
    }
    thread::sleep(Duration::from_micros(rng.below(300)));
    let seen = domain.stats().exit_handoffs;
    w.ops
        .dropped_domain_handoffs
        .fetch_add(seen, Ordering::Relaxed);
    drop(domain);
    let tallies: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("hand-off thread panicked"))
        .collect();
    // Every handle dropped, every thread joined: all ran, once.
    verify(tallies);
    count_unrun_or_twice(issued.load(Ordering::Relaxed), ran.load(Ordering::Relaxed));
    w.ops.handoff_threads.fetch_add(n, Ordering::Relaxed);
    inc(&w.ops.handoff_drops);
}
