//! Loom models of exitq's lock-free core (run by scripts/test.d/20-loom.sh):
//!
//! ```text
//! RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p exitq --release --test loom --target-dir target/loom
//! ```
//!
//! Reduced size, as loom needs: two or three threads, one or two grace
//! periods, a few nodes. What is modelled: the lock-free list (push,
//! push_chain, take_all), the read-side / grace-period protocol (the steps
//! `Domain` runs, from `exitq::model`), including a reader that enters with
//! a stale epoch across two grace periods and nested sections, and the
//! batch steal handshake. The mutex-protected sharing of grace periods
//! between callers is plain locked code and is covered by the unit and
//! stress tests instead.
#![cfg(exitq_loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use exitq::llist::{Chain, List, Node};
use exitq::model::{self, AtomicBool, AtomicU64};

#[test]
fn list_concurrent_pushes_and_take_all_lose_nothing() {
    loom::model(|| {
        let list = Arc::new(List::new());
        let pushers: Vec<_> = (0..2)
            .map(|t| {
                let list = list.clone();
                thread::spawn(move || {
                    list.push(Node::new(t * 10));
                    list.push(Node::new(t * 10 + 1));
                })
            })
            .collect();
        let taker = {
            let list = list.clone();
            thread::spawn(move || list.take_all().collect::<Vec<_>>())
        };
        for p in pushers {
            p.join().unwrap();
        }
        let mut all = taker.join().unwrap();
        all.extend(list.take_all());
        all.sort_unstable();
        assert_eq!(all, [0, 1, 10, 11]);
    });
}

#[test]
fn list_chain_push_stays_contiguous() {
    loom::model(|| {
        let list = Arc::new(List::new());
        let t = {
            let list = list.clone();
            thread::spawn(move || {
                let mut chain = Chain::new();
                chain.push_back(Node::new(1));
                chain.push_back(Node::new(2));
                list.push_chain(chain);
            })
        };
        list.push(Node::new(9));
        let first = list.take_all().collect::<Vec<_>>();
        t.join().unwrap();
        let mut all = first.clone();
        all.extend(list.take_all());
        // 1 and 2 always arrive together and in order.
        let pos1 = all.iter().position(|&x| x == 1).unwrap();
        assert_eq!(all[pos1 + 1], 2, "{all:?}");
        assert_eq!(all.len(), 3);
    });
}

const ALIVE: usize = 1;
const POISONED: usize = 2;

/// A reader reads through `current` inside a section; the writer unpublishes
/// object 0, runs grace period 1 and poisons it. The reader must never see
/// the poison.
#[test]
fn grace_period_waits_for_prior_readers() {
    loom::model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let ctr = Arc::new(AtomicU64::new(0));
        let current = Arc::new(AtomicUsize::new(0));
        let objects = Arc::new([AtomicUsize::new(ALIVE), AtomicUsize::new(ALIVE)]);

        let reader = {
            let (gp_ctr, ctr, current, objects) = (
                gp_ctr.clone(),
                ctr.clone(),
                current.clone(),
                objects.clone(),
            );
            thread::spawn(move || {
                model::reader_enter(&gp_ctr, &ctr);
                let i = current.load(Ordering::Acquire);
                let seen = objects[i].load(Ordering::Relaxed);
                model::reader_exit(&ctr);
                assert_eq!(seen, ALIVE, "reader saw object {i} poisoned");
            })
        };

        current.store(1, Ordering::Release);
        model::start_grace_period(&gp_ctr, 1);
        while model::holds_grace_period(&ctr, 1) {
            thread::yield_now();
        }
        objects[0].store(POISONED, Ordering::Relaxed);
        reader.join().unwrap();
    });
}

/// Nested sections, and a reader that may load the epoch before grace
/// period 1 and store it after (stale epoch): grace period 2 must still wait
/// for a section that could have seen object 1.
#[test]
fn stale_epoch_reader_across_two_grace_periods() {
    loom::model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let ctr = Arc::new(AtomicU64::new(0));
        let current = Arc::new(AtomicUsize::new(0));
        let objects = Arc::new([
            AtomicUsize::new(ALIVE),
            AtomicUsize::new(ALIVE),
            AtomicUsize::new(ALIVE),
        ]);

        let reader = {
            let (gp_ctr, ctr, current, objects) = (
                gp_ctr.clone(),
                ctr.clone(),
                current.clone(),
                objects.clone(),
            );
            thread::spawn(move || {
                model::reader_enter(&gp_ctr, &ctr);
                model::reader_enter(&gp_ctr, &ctr); // nested
                let i = current.load(Ordering::Acquire);
                assert!(!model::reader_exit(&ctr));
                let seen = objects[i].load(Ordering::Relaxed);
                assert!(model::reader_exit(&ctr));
                assert_eq!(seen, ALIVE, "reader saw object {i} poisoned");
            })
        };

        for (g, (old, new)) in [(1u64, (0usize, 1usize)), (2, (1, 2))] {
            current.store(new, Ordering::Release);
            model::start_grace_period(&gp_ctr, g);
            while model::holds_grace_period(&ctr, g) {
                thread::yield_now();
            }
            objects[old].store(POISONED, Ordering::Relaxed);
        }
        reader.join().unwrap();
    });
}

/// The batch steal handshake: the owner appends to its batch while a
/// stealer takes it; every item ends up exactly once on one side, and loom
/// checks the batch cell is never accessed by both at once.
#[test]
fn steal_handshake_is_exclusive() {
    loom::model(|| {
        let busy = Arc::new(AtomicBool::new(false));
        let steal = Arc::new(AtomicBool::new(false));
        let batch = Arc::new(UnsafeCell::new(Vec::<u32>::new()));

        let owner = {
            let (busy, steal, batch) = (busy.clone(), steal.clone(), batch.clone());
            thread::spawn(move || {
                for item in 0..2u32 {
                    loop {
                        if model::owner_begin(&busy, &steal) {
                            // SAFETY: the handshake admitted us (loom's
                            // UnsafeCell checks it really is exclusive).
                            batch.with_mut(|b| unsafe { (*b).push(item) });
                            model::owner_end(&busy);
                            break;
                        }
                        model::wait_for_stealer(&steal);
                    }
                }
            })
        };

        model::stealer_mark(&steal);
        model::heavy_barrier();
        model::stealer_wait(&busy);
        // SAFETY: the handshake admitted us (checked by loom's UnsafeCell).
        let mut stolen = batch.with_mut(|b| unsafe { std::mem::take(&mut *b) });
        model::stealer_done(&steal);

        owner.join().unwrap();
        // SAFETY: the owner thread has been joined.
        stolen.extend(batch.with_mut(|b| unsafe { std::mem::take(&mut *b) }));
        stolen.sort_unstable();
        assert_eq!(stolen, [0, 1]);
    });
}
