//! Loom models of exitq::pool's slot protocol (run by
//! scripts/test.d/21-loom-pool.sh):
//!
//! ```text
//! RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p exitq --release --test loom_pool --target-dir target/loom
//! ```
//!
//! The steps are the pool's own (`exitq::pool::slot_model` forwards to the
//! slot table the pool runs): claiming a free slot, a worker going idle
//! (state + idle-stack entry), a waker popping an entry and notifying it,
//! a worker leaving after its keep-alive, and slot reuse by the next
//! worker. Each model checks, over every interleaving:
//!
//! * a slot is never held by two workers at once, and never freed twice
//!   (the slot table asserts that a freed slot was `RETIRED` and a claimed
//!   one has no flags left, also in release builds under this cfg);
//! * a slot whose entry is in the idle stack is never `FREE`;
//! * an idle worker is always in the stack or notified (no lost wake-up);
//! * once the stack is drained, a slot no worker holds is `FREE` (no leak).
//!
//! One slot: every worker reuses it, which is where the races were.
#![cfg(exitq_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use exitq::pool::slot_model::{SlotTable, FREE, IDLE, NOTIFIED, RETIRED, RUNNING};

/// How many workers hold each slot right now (at most one).
struct Holders(AtomicUsize);

impl Holders {
    fn take(&self) {
        assert_eq!(self.0.fetch_add(1, Ordering::SeqCst), 0, "slot held twice");
    }
    fn give_back(&self) {
        assert_eq!(self.0.fetch_sub(1, Ordering::SeqCst), 1);
    }
    fn held(&self) -> bool {
        self.0.load(Ordering::SeqCst) != 0
    }
}

/// One idle period of the worker on slot 0 ending in its keep-alive: it
/// leaves (true) or takes the notification that came first (false).
fn keep_alive_expires(t: &SlotTable, holders: &Holders) -> bool {
    if t.begin_retire(0) {
        holders.give_back();
        t.retire(0);
        true
    } else {
        t.take_notification(0);
        false
    }
}

/// A waker: pops one entry and notifies it if idle (the pool's
/// `wake_one` / `notify_slot`). True if it notified a worker.
fn wake_one(t: &SlotTable) -> bool {
    match t.pop_idle() {
        Some(i) => t.is_idle(i) && t.notify(i).is_ok(),
        None => false,
    }
}

/// The invariant checked at every quiescent point: a slot with an entry in
/// the stack is not free.
fn check_stacked_not_free(t: &SlotTable) {
    if t.in_stack(0) {
        assert_ne!(
            t.state(0),
            FREE,
            "slot 0 FREE with an entry in the idle stack"
        );
    }
}

/// Drains the stack (later wakers), then checks nothing leaked.
fn drain_and_check(t: &SlotTable, holders: &Holders) {
    check_stacked_not_free(t);
    while wake_one(t) || t.in_stack(0) {}
    assert!(!t.in_stack(0));
    let state = t.state(0);
    if holders.held() {
        assert!(
            state == RUNNING || state == NOTIFIED,
            "a held slot in state {state}"
        );
    } else {
        assert_eq!(state, FREE, "slot 0 leaked in state {state}");
    }
}

/// The race of the review note: a waker pops worker 1's entry; worker 1
/// leaves, worker 2 takes the slot, parks (a new entry) and leaves too;
/// the waker then looks at the slot. Before the fix the waker freed the
/// slot on seeing worker 2's `RETIRED`, with worker 2's entry stacked.
#[test]
fn stale_pop_and_slot_reuse() {
    loom::model(|| {
        let t = Arc::new(SlotTable::new(1));
        let holders = Arc::new(Holders(AtomicUsize::new(0)));
        assert_eq!(t.claim_free(), Some(0));
        holders.take();
        t.enter_idle(0);

        let waker = {
            let t = t.clone();
            thread::spawn(move || wake_one(&t))
        };
        let workers = {
            let (t, holders) = (t.clone(), holders.clone());
            thread::spawn(move || {
                if !keep_alive_expires(&t, &holders) {
                    return; // worker 1 was notified and keeps the slot
                }
                // Worker 2, if the slot is free already.
                if t.claim_free() == Some(0) {
                    holders.take();
                    t.enter_idle(0);
                    keep_alive_expires(&t, &holders);
                }
            })
        };
        let woke = waker.join().unwrap();
        workers.join().unwrap();
        if woke {
            assert!(holders.held(), "notified a slot nobody holds");
        }
        drain_and_check(&t, &holders);
    });
}

/// A worker that found work in its re-check (entry left stale) parks
/// again while a waker pops that stale entry: either the worker pushes a
/// new entry, or the waker sees it idle and notifies it.
#[test]
fn an_idle_worker_is_in_the_stack_or_notified() {
    loom::model(|| {
        let t = Arc::new(SlotTable::new(1));
        assert_eq!(t.claim_free(), Some(0));
        t.enter_idle(0);
        // Its re-check found work: IDLE -> RUNNING, entry stays stacked.
        assert!(t.leave_idle(0));

        let waker = {
            let t = t.clone();
            thread::spawn(move || wake_one(&t))
        };
        t.enter_idle(0);
        let woke = waker.join().unwrap();
        match t.state(0) {
            IDLE => {
                assert!(!woke);
                assert!(t.in_stack(0), "idle worker lost: not stacked, not notified");
            }
            NOTIFIED => assert!(woke),
            s => panic!("unexpected state {s}"),
        }
    });
}

/// Two wakers race for the entry of a worker whose keep-alive expires:
/// exactly one party frees the slot (a second free fails the slot
/// table's check), and a worker that was notified keeps it.
#[test]
fn two_wakers_and_a_leaving_worker_free_the_slot_once() {
    loom::model(|| {
        let t = Arc::new(SlotTable::new(1));
        let holders = Arc::new(Holders(AtomicUsize::new(0)));
        assert_eq!(t.claim_free(), Some(0));
        holders.take();
        t.enter_idle(0);

        let wakers: Vec<_> = (0..2)
            .map(|_| {
                let t = t.clone();
                thread::spawn(move || wake_one(&t))
            })
            .collect();
        let left = keep_alive_expires(&t, &holders);
        let woke = wakers
            .into_iter()
            .map(|w| w.join().unwrap())
            .filter(|&w| w)
            .count();
        assert!(woke <= 1, "one idle period notified twice");
        assert_eq!(left, woke == 0, "left iff nobody notified it first");
        if left {
            assert!(t.state(0) == FREE || t.state(0) == RETIRED);
        }
        drain_and_check(&t, &holders);
    });
}

/// A worker leaving at shutdown straight from `RUNNING`, its entry from an
/// earlier idle period still stacked, while a waker pops that entry: the
/// slot is freed exactly once, by whichever of the two comes second.
#[test]
fn a_worker_leaving_from_running_with_a_stale_entry_frees_its_slot_once() {
    loom::model(|| {
        let t = Arc::new(SlotTable::new(1));
        let holders = Arc::new(Holders(AtomicUsize::new(0)));
        assert_eq!(t.claim_free(), Some(0));
        holders.take();
        t.enter_idle(0);
        assert!(t.leave_idle(0)); // found work: entry left stale

        let waker = {
            let t = t.clone();
            thread::spawn(move || wake_one(&t))
        };
        holders.give_back();
        t.retire(0);
        assert!(!waker.join().unwrap(), "notified a worker that was running");
        let state = t.state(0);
        assert!(state == FREE || state == RETIRED, "state {state}");
        drain_and_check(&t, &holders);
    });
}
