//! Loom models of the reclaimer's sleep and the publishers that wake it
//! (`exitq/src/wake.rs`), run by scripts/test.d/20-loom.sh:
//!
//! ```text
//! RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p exitq --release --test loom_wake --target-dir target/loom
//! ```
//!
//! The reclaimer falls asleep through the domain's code
//! (`wake::fall_asleep`: a look at what it watches, the state published,
//! a second look) while publishers make their change (a SeqCst
//! read-modify-write, as the domain's: the batches held, the hooks armed)
//! and claim its wake-up through the domain's code (`wake::claim`, with
//! `wake::FIRST`, what the domain passes for them). Each model checks that every change is
//! covered: the reclaimer runs its loop again, or sleeps with a timeout
//! made from a look that saw the change, or some publisher rang.
//!
//! Each fails with one of these: `wake::FIRST` made `Wake::IfParked` (the
//! bug of 2026-12-06: a `POLLING` reclaimer that
//! fell asleep after a busy spell missed it for two flush latencies); the
//! timeout made from the first look instead of the second; a `PARKED`
//! reclaimer sleeping whatever its second look saw; an offloading seal
//! that leaves the batches held before its batch is queued (the last
//! model writes `local::seal`'s two steps itself, in the domain's order);
//! either side's
//! `sync::sc_pair` left out (loom treats SeqCst accesses as AcqRel, so the
//! pair's fence is modelled there: `wake.rs`).
#![cfg(exitq_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use exitq::model::{self, Asleep, AtomicU32, Wake, Watch};

/// What the publishers change.
struct World {
    sleeping: AtomicU32,
    held: AtomicUsize,
    armed: AtomicUsize,
    /// The domain's queue (`Inner::queue`): its length here.
    queued: AtomicUsize,
}

impl World {
    fn new() -> Arc<World> {
        Arc::new(World {
            sleeping: AtomicU32::new(model::awake_word()),
            held: AtomicUsize::new(0),
            armed: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
        })
    }

    /// The reclaimer's look (`reclaimer::sleep`'s).
    fn look(&self) -> Watch {
        Watch {
            held: self.held.load(Ordering::SeqCst) > 0,
            queued: self.queued.load(Ordering::SeqCst) > 0,
            armed: self.armed.load(Ordering::SeqCst) > 0,
        }
    }
}

/// A publisher of the first of something (`open_batch`'s `held`,
/// `exit::register`'s `armed_exits`): true if it rang.
fn first(counter: &AtomicUsize, sleeping: &AtomicU32) -> bool {
    counter.fetch_add(1, Ordering::SeqCst) == 0 && model::wake_claim(sleeping, model::FIRST)
}

/// Whether the reclaimer's sleep covers a change that `saw` tells apart.
fn covered(asleep: Asleep, rang: bool, saw: impl Fn(Watch) -> bool) -> bool {
    rang || match asleep {
        Asleep::LookAgain => true,
        Asleep::Polling(seen) => saw(seen),
        Asleep::Parked => false,
    }
}

/// The reclaimer (busy lately, or not) against the first batch held.
fn first_batch_held(recent: bool) {
    loom::model(move || {
        let w = World::new();
        let p = w.clone();
        let publisher = thread::spawn(move || first(&p.held, &p.sleeping));
        let asleep = model::fall_asleep(&w.sleeping, recent, || w.look());
        let rang = publisher.join().unwrap();
        assert!(
            covered(asleep, rang, |seen| seen.held),
            "a batch held that no look covers and no one rang for: {asleep:?}"
        );
    });
}

#[test]
fn a_reclaimer_busy_lately_sees_the_first_batch_held_or_is_rung() {
    first_batch_held(true);
}

#[test]
fn a_parking_reclaimer_sees_the_first_batch_held_or_is_rung() {
    first_batch_held(false);
}

/// Two publishers, the first batch held and the first hook armed, each
/// covered (a ring covers both: the reclaimer runs its loop again).
#[test]
fn a_batch_held_and_a_hook_armed_are_both_covered() {
    loom::model(|| {
        let w = World::new();
        let (p, q) = (w.clone(), w.clone());
        let holder = thread::spawn(move || first(&p.held, &p.sleeping));
        let armer = thread::spawn(move || first(&q.armed, &q.sleeping));
        let asleep = model::fall_asleep(&w.sleeping, true, || w.look());
        let rang = holder.join().unwrap() | armer.join().unwrap();
        assert!(
            covered(asleep, rang, |seen| seen.held),
            "the batch: {asleep:?}"
        );
        assert!(
            covered(asleep, rang, |seen| seen.armed),
            "the hook: {asleep:?}"
        );
    });
}

/// A batch already held when the reclaimer looks, a hook armed meanwhile:
/// the look that saw only the batch must not stand for the hook (its
/// timeout would be `look::DRIVEN`, not `exit_poll`).
#[test]
fn a_hook_armed_while_a_batch_is_held_is_covered() {
    loom::model(|| {
        let w = World::new();
        w.held.store(1, Ordering::SeqCst);
        let q = w.clone();
        let armer = thread::spawn(move || first(&q.armed, &q.sleeping));
        let asleep = model::fall_asleep(&w.sleeping, false, || w.look());
        let rang = armer.join().unwrap();
        assert!(
            covered(asleep, rang, |seen| seen.armed),
            "the hook: {asleep:?}"
        );
    });
}

/// An offloading thread seals its only batch (`local::seal`): the batch
/// goes on the queue, then leaves the batches held, then the publisher
/// claims with `Wake::IfParked` (below the backlog). A look that finds no
/// batch held must find it queued: with the two steps the other way
/// round, a polling reclaimer sleeps a timeout that covers neither.
#[test]
fn an_offloaded_batch_is_held_or_queued_at_every_look() {
    loom::model(|| {
        let w = World::new();
        w.held.store(1, Ordering::SeqCst);
        let p = w.clone();
        let sealer = thread::spawn(move || {
            p.queued.fetch_add(1, Ordering::SeqCst);
            p.held.fetch_sub(1, Ordering::SeqCst);
            model::wake_claim(&p.sleeping, Wake::IfParked)
        });
        let asleep = model::fall_asleep(&w.sleeping, true, || w.look());
        let rang = sealer.join().unwrap();
        assert!(
            covered(asleep, rang, |seen| seen.held || seen.queued),
            "the offloaded batch: {asleep:?}"
        );
    });
}
