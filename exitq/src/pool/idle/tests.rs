//! Unit tests of the slot table alone: the idle stack's order and
//! concurrency, and who frees a retired slot. Orderings here are test code:
//! SeqCst where a test reads what another thread wrote, Relaxed for plain
//! counts; they pair with nothing in the pool.

use super::*;
use std::sync::Arc;

#[test]
fn idle_stack_is_lifo_and_skips_nothing() {
    let s = Slots::new(4);
    for i in 0..4 {
        assert_eq!(s.claim_free(), Some(i));
        assert!(s.enter_idle(i));
        // A second idle period with the entry still in: no push.
        assert!(!s.enter_idle(i));
    }
    let popped: Vec<u32> = std::iter::from_fn(|| s.pop_idle()).collect();
    assert_eq!(popped, vec![3, 2, 1, 0]);
    assert!(s.idle_is_empty());
    assert!((0..4).all(|i| !s.in_stack(i)));
}

#[test]
fn idle_stack_concurrent_push_pop_loses_nothing() {
    const ROUNDS: usize = if cfg!(miri) { 50 } else { 20_000 };
    let s = Arc::new(Slots::new(8));
    for i in 0..8 {
        assert_eq!(s.claim_free(), Some(i));
    }
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                // Each thread owns slots 2t and 2t+1 and cycles them.
                let mine = [2 * t, 2 * t + 1];
                let (mut pushes, mut pops) = (0usize, 0usize);
                for r in 0..ROUNDS {
                    if s.enter_idle(mine[r % 2]) {
                        pushes += 1;
                    }
                    if s.pop_idle().is_some() {
                        pops += 1;
                    }
                }
                (pushes, pops)
            })
        })
        .collect();
    let (pushes, pops) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |(a, b), (p, q)| (a + p, b + q));
    let rest: Vec<u32> = std::iter::from_fn(|| s.pop_idle()).collect();
    // Every push was popped exactly once, by a thread or the drain, and
    // the stack never held a slot twice.
    assert_eq!(pushes, pops + rest.len());
    let mut sorted = rest.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), rest.len(), "duplicate entry: {rest:?}");
    assert!(pushes >= ROUNDS);
    assert!((0..8).all(|i| !s.in_stack(i)));
}

#[test]
fn a_worker_without_an_entry_frees_its_slot_when_it_leaves() {
    let s = Slots::new(2);
    let a = s.claim_free().unwrap();
    let b = s.claim_free().unwrap();
    assert_ne!(a, b);
    assert!(s.claim_free().is_none());
    s.retire(a);
    assert_eq!(s.get(a).state.load(Ordering::SeqCst), FREE);
    assert_eq!(s.claim_free(), Some(a));
    s.unclaim(b);
    assert_eq!(s.claim_free(), Some(b));
}

#[test]
fn a_worker_leaving_with_its_entry_in_the_stack_is_freed_by_the_popper() {
    let s = Slots::new(1);
    assert_eq!(s.claim_free(), Some(0));
    s.enter_idle(0);
    assert!(s.begin_retire(0));
    s.retire(0);
    // Not free while the entry is in the stack.
    assert_eq!(s.get(0).state.load(Ordering::SeqCst), RETIRED);
    assert!(s.claim_free().is_none());
    // Its popper frees it (and does not notify).
    assert_eq!(s.pop_idle(), Some(0));
    assert_eq!(s.notify(0), Err(FREE));
    assert_eq!(s.claim_free(), Some(0));
}

/// The interleaving of `pool::tests::a_stale_pop_does_not_free_a_reused_slot`
/// on the slot table alone, step by step.
#[test]
fn a_stale_popper_acts_on_no_later_worker_of_the_slot() {
    let s = Slots::new(1);
    // Worker 1 idle; a popper takes its entry and stalls.
    assert_eq!(s.claim_free(), Some(0));
    assert!(s.enter_idle(0));
    assert_eq!(s.pop_idle(), Some(0));
    // Worker 1 leaves: no entry in the stack, so it frees the slot.
    assert!(s.begin_retire(0));
    s.retire(0);
    assert_eq!(s.get(0).state.load(Ordering::SeqCst), FREE);
    // Worker 2 takes the slot, parks (new entry) and leaves.
    assert_eq!(s.claim_free(), Some(0));
    assert!(s.enter_idle(0), "a new entry for worker 2");
    assert!(s.begin_retire(0));
    s.retire(0);
    // The stale popper resumes: it sees worker 2's RETIRED and may not
    // free the slot; its `notify` fails and it is done.
    assert_eq!(s.notify(0), Err(RETIRED));
    assert_eq!(s.get(0).state.load(Ordering::SeqCst), RETIRED);
    assert!(s.in_stack(0) && !s.idle_is_empty());
    // Worker 2's entry's popper frees it.
    assert_eq!(s.pop_idle(), Some(0));
    assert_eq!(s.get(0).state.load(Ordering::SeqCst), FREE);
    assert!(s.idle_is_empty() && !s.in_stack(0));
    assert_eq!(s.claim_free(), Some(0));
}

/// While nobody has been notified yet, an idle worker (slot `i`) waits
/// for a notify to anyone; a waker notifies it as soon as it runs. A notify
/// that never comes in a minute is a defect (the waker pops and notifies
/// an idle slot without fail), not a slow machine.
fn wait_for_a_notify(s: &Slots, i: u32, woke: &std::sync::atomic::AtomicUsize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while woke.load(Ordering::Relaxed) == 0 && s.get(i).state.load(Ordering::SeqCst) == IDLE {
        assert!(
            std::time::Instant::now() < deadline,
            "no waker notified an idle worker in 60 s"
        );
        std::thread::yield_now();
    }
}

/// Workers cycle through incarnations of two slots (claim, park, get
/// notified or leave) while a waker pops and notifies. A slot is never
/// held by two workers at once; a claimed slot has `flags == 0` (no
/// entry of an earlier worker was left in the stack); and at the end
/// every slot is free (a double free trips the assertion in `release`,
/// a missed one leaves a slot `RETIRED`).
#[test]
fn retire_and_pop_races_free_each_slot_once() {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    const ROUNDS: usize = if cfg!(miri) { 30 } else { 20_000 };
    let s = Arc::new(Slots::new(2));
    let holders: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let stop = Arc::new(AtomicBool::new(false));
    let woke = Arc::new(AtomicUsize::new(0));
    let pop_and_notify = |s: &Slots, woke: &AtomicUsize| {
        if let Some(i) = s.pop_idle() {
            if s.notify(i).is_ok() {
                woke.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let waker = {
        let (s, stop, woke) = (s.clone(), stop.clone(), woke.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                pop_and_notify(&s, &woke);
            }
        })
    };
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (s, holders, woke) = (s.clone(), holders.clone(), woke.clone());
            std::thread::spawn(move || {
                // Each worker leaves ROUNDS times; a failed claim
                // (both slots held, or retired with an entry still in
                // the stack) pops and retries.
                let (mut left, mut round) = (0, 0);
                while left < ROUNDS {
                    round += 1;
                    let Some(i) = s.claim_free() else {
                        // Both slots held, or retired with an entry in
                        // the stack: a pop frees such a slot.
                        pop_and_notify(&s, &woke);
                        continue;
                    };
                    assert_eq!(holders[i as usize].fetch_add(1, Ordering::SeqCst), 0);
                    assert_eq!(s.get(i).flags.load(Ordering::SeqCst), 0, "stale flags");
                    loop {
                        s.enter_idle(i);
                        // Stay idle a moment now and then: a waker
                        // gets to notify us. Until a waker has notified
                        // anyone, stay idle until one does: on a loaded
                        // machine the waker may not run at all while the
                        // workers make their rounds (a clean-clone CI
                        // ended with none notified), and the races with a
                        // notify are what this test is for.
                        if round % 4 == 0 {
                            std::thread::yield_now();
                            wait_for_a_notify(&s, i, &woke);
                        }
                        if s.begin_retire(i) {
                            break;
                        }
                        // Notified: take it, "run", park again.
                        assert_eq!(s.get(i).state.load(Ordering::SeqCst), NOTIFIED);
                        s.get(i).state.store(RUNNING, Ordering::Relaxed);
                    }
                    assert_eq!(holders[i as usize].fetch_sub(1, Ordering::SeqCst), 1);
                    s.retire(i);
                    left += 1;
                }
                left
            })
        })
        .collect();
    let left: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    waker.join().unwrap();
    assert_eq!(left, 2 * ROUNDS, "workers left {left} times");
    let woke = woke.load(Ordering::Relaxed);
    assert!(woke > 0, "no waker ever found an idle worker");
    // Drain the stack: the popper of each remaining entry frees it.
    while s.pop_idle().is_some() {}
    for i in 0..2 {
        assert_eq!(s.get(i).state.load(Ordering::SeqCst), FREE, "slot {i}");
        assert_eq!(s.get(i).flags.load(Ordering::SeqCst), 0, "slot {i}");
    }
}
