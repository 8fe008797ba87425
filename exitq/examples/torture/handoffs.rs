//! Thread exits raced with steals (the exit hand-off), rcutorture-style.
//!
//! Waves of short-lived threads (`handoff_spawner`) defer, mostly into the
//! hand-offs slot's domain (flush latency and exit poll of 100 µs: the
//! reclaimer's idle steal takes batches one flush latency old, so it often
//! holds a record as its thread exits) and into the other shared ones:
//! counted callbacks, callbacks that own a heap payload, retired objects.
//! They register exit hooks, sometimes defer inside a guard, sometimes
//! `retire_thread` (and go on with a fresh record), sometimes leak a
//! section (`leaks.rs`, as the exiters do), and all exit together, from at
//! once to a millisecond after their last defer, while a thread of the
//! wave's calls `barrier` (a steal of every record) up to three times.
//! Meanwhile the barrier loopers (`barrier_looper`) call `barrier` and
//! `exit_barrier` on the same domains almost without pause. One wave in
//! five uses a short-lived domain of its own, dropped while its threads
//! exit (`handoff_drops.rs`).
//!
//! Checked, beyond the exactly-once accounting every callback and hook
//! has (`Slot::issued` and `ran`, `exits::register_hook_then`): once a
//! thread is joined, an `exit_barrier` or `barrier` of a domain started
//! afterwards returns only after the thread's hooks on that domain ran
//! (the spawner checks half the threads itself, the loopers the other
//! half, the final checks what is left); a `barrier` returns after every
//! counted callback deferred before it; payloads arrive intact.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::handoff_drops::dropped_wave;
use crate::handoff_kit::{exit_delay, hook, payload_defer, tally, verify, Tally};
use crate::leaks;
use crate::workers::{check_current, counted_defer};
use crate::world::{inc, new_obj, retire, world, Rng};

/// The name of the slot built for this file (`main::slots`).
pub(crate) const SLOT_NAME: &str = "hand-offs, flush 100 µs";

fn own_slot() -> usize {
    let slots = &world().slots;
    slots
        .iter()
        .position(|s| s.name == SLOT_NAME)
        .expect("built")
}

/// Tallies of joined threads, checked by the loopers after their next
/// barrier of the tally's slot (or by `final_check`).
static JOINED: Mutex<Vec<Tally>> = Mutex::new(Vec::new());

/// One callback into shared slot `i`: counted, with a payload (counted
/// too), or the retirement of the slot's object.
fn defer_one(i: usize, rng: &Rng) {
    let w = world();
    let slot = &w.slots[i];
    match rng.below(10) {
        0..=3 => counted_defer(slot, rng),
        4..=7 => {
            payload_defer(&slot.domain, rng, move || {
                slot.ran.fetch_add(1, Ordering::Relaxed);
            });
            // Release: the defer happens-before a barrier that reads it.
            slot.issued.fetch_add(1, Ordering::Release);
            inc(&w.ops.counted_defers);
        }
        _ => {
            let old = slot.current.swap(new_obj(rng.next()), Ordering::AcqRel) as usize;
            slot.domain.defer(move || retire(i, old));
            inc(&w.ops.replaces_deferred);
        }
    }
}

/// Waits (at most 50 ms) until every thread of the wave arrived.
fn arrive_and_wait(left: &AtomicUsize) {
    left.fetch_sub(1, Ordering::AcqRel);
    released(left);
}

/// Waits (at most 50 ms) until the wave is released (`left` is 0).
fn released(left: &AtomicUsize) {
    let since = Instant::now();
    while left.load(Ordering::Acquire) > 0 && since.elapsed() < Duration::from_millis(50) {
        thread::sleep(Duration::from_micros(20));
    }
}

/// One thread of a wave: returns its tallies, one per domain it used.
fn exiting_thread(seed: u64, left: &AtomicUsize) -> Vec<Tally> {
    let w = world();
    let rng = Rng::new(seed);
    let own = own_slot();
    let mut tallies: Vec<Tally> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let i = if rng.chance(70) {
            own
        } else {
            rng.below(w.shared() as u64) as usize
        };
        let slot = &w.slots[i];
        let k = match tallies.iter().position(|t| t.slot == i) {
            Some(k) => k,
            None => {
                tallies.push(tally(i));
                tallies.len() - 1
            }
        };
        if rng.chance(70) {
            hook(&slot.domain, &mut tallies[k]);
        }
        {
            let guard = rng.chance(30).then(|| slot.domain.read());
            if guard.is_some() {
                check_current(slot, &rng);
            }
            for _ in 0..rng.below(12) {
                defer_one(i, &rng);
            }
        }
        if rng.chance(15) {
            // The exit procedure now: the hooks so far may run.
            tallies[k].finished.store(true, Ordering::Release);
            slot.domain.retire_thread();
            tallies[k].finished = Arc::new(AtomicBool::new(false));
            inc(&w.ops.handoff_retired);
            // And on with a fresh record.
            for _ in 0..rng.below(6) {
                defer_one(i, &rng);
            }
            if rng.chance(50) {
                hook(&slot.domain, &mut tallies[k]);
            }
        }
    }
    arrive_and_wait(left);
    exit_delay(&rng);
    // After every `retire_thread` (which panics inside a section).
    leaks::maybe_leak(&rng, None);
    for t in &tallies {
        // Release: pairs with the hooks' Acquire.
        t.finished.store(true, Ordering::Release);
    }
    tallies
}

/// Spawns waves of threads that exit together while the loopers steal.
pub(crate) fn handoff_spawner(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0x4A0D ^ (id as u64) << 36);
    let own = own_slot();
    while !w.stop.load(Ordering::Relaxed) {
        if rng.chance(20) {
            dropped_wave(&rng);
            continue;
        }
        let n = 2 + rng.below(11);
        let left = Arc::new(AtomicUsize::new(n as usize));
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let (seed, left) = (rng.next(), left.clone());
                thread::spawn(move || exiting_thread(seed, &left))
            })
            .collect();
        // Steals of every record while the wave exits, from a thread of
        // their own: under way while this one joins and checks.
        let rounds = rng.below(4);
        let stealer = thread::spawn(move || {
            released(&left);
            (0..rounds).for_each(|_| checked_barrier(own));
        });
        // Each checked as soon as it is joined, while the rest still exit.
        for h in handles {
            let tallies = h.join().expect("hand-off thread panicked");
            inc(&w.ops.handoff_threads);
            if rng.chance(50) {
                for i in tallies.iter().map(|t| t.slot) {
                    if rng.chance(70) {
                        w.slots[i].domain.exit_barrier();
                    } else {
                        w.slots[i].domain.barrier();
                    }
                }
                verify(tallies);
            } else {
                JOINED.lock().unwrap().extend(tallies);
            }
        }
        stealer.join().expect("hand-off stealer panicked");
    }
}

/// `barrier` of shared slot `i`, checked: every counted callback
/// deferred before it ran.
fn checked_barrier(i: usize) {
    let w = world();
    let slot = &w.slots[i];
    // Acquire: pairs with the Release after each counted defer.
    let before = slot.issued.load(Ordering::Acquire);
    slot.domain.barrier();
    if slot.ran.load(Ordering::Relaxed) < before {
        inc(&w.v.barrier_early);
    }
}

/// Loops over `barrier` and `exit_barrier`, mostly on the hand-offs slot's
/// domain; checks the barrier's callbacks and the joined threads' hooks.
pub(crate) fn barrier_looper(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xB00B ^ (id as u64) << 44);
    let own = own_slot();
    while !w.stop.load(Ordering::Relaxed) {
        let i = if rng.chance(70) {
            own
        } else {
            rng.below(w.shared() as u64) as usize
        };
        let slot = &w.slots[i];
        let joined: Vec<Tally> = {
            let mut all = JOINED.lock().unwrap();
            let (mine, rest) = all.drain(..).partition(|t| t.slot == i);
            *all = rest;
            mine
        };
        if rng.chance(50) {
            checked_barrier(i);
        } else {
            slot.domain.exit_barrier();
        }
        verify(joined);
        inc(&w.ops.handoff_barriers);
        if rng.chance(20) {
            thread::sleep(Duration::from_micros(rng.below(300)));
        }
    }
}

/// After the final exit barriers: the tallies no looper took; and, if the
/// waves ran (`enabled`), that each kind of them did.
pub(crate) fn final_check(enabled: bool) {
    let w = world();
    verify(JOINED.lock().unwrap().drain(..));
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (threads, o) = (g(&w.ops.handoff_threads), &w.ops);
    // Past 2,000 threads (at least 160 waves), a wave without a drop or a
    // `retire_thread` would happen once in about 1e15 runs.
    let some_missing = g(&o.handoff_retired) == 0 || g(&o.handoff_drops) == 0;
    if enabled && (threads == 0 || threads >= 2000 && some_missing) {
        inc(&w.v.handoffs_not_run);
    }
}
