//! The exit walk with user code in it: a thread's exit path releases its
//! main records one at a time, and between releases it runs the exit hooks
//! of domains dropped while the thread lived (orphaned records), which may
//! use any domain, the ones whose records the walk has yet to release
//! among them.
//!
//! The shape (found by a red-team review, 2026-12-06): thread T uses three
//! domains in this order: D (an exit hook), C (a read), A (an exit hook).
//! The last handles of A and D are dropped while T lives, so their hooks
//! run inline in T's exit walk, newest record first: A's, C's, D's. A's
//! hook reads C on T's record there, still listed; the walk then releases
//! that record; D's hook reads C again. Before the fix the first read left
//! the record in T's one-entry cache and the second got it from there,
//! after its release: the main thread's first use of C claimed it, zeroed
//! its reader word, and D's hook was inside a section no grace period
//! waited for (its value freed under it: a use after free in safe code).
//! Now the cache stays empty once the exit path starts, and the second
//! read takes a temporary record, which grace periods wait for.
//!
//! Also run under miri (scripts/test.d/30-miri.sh), which reports the
//! freed `Box` read of the old code.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use exitq::{Domain, RcuCell};

/// How long the main thread lets a `barrier` try to return while D's hook
/// holds its section. Correct code never returns then, so the wait only
/// bounds how long the test looks for the bug; it never decides a pass.
const LOOK: Duration = Duration::from_millis(500);

/// A domain that reports no stall while the test holds a section on
/// purpose.
fn quiet() -> Domain {
    Domain::builder()
        .stall_timeout(Duration::from_secs(3600))
        .build()
}

/// Runs the shape above on domain `c`. `prime` says whether A's hook
/// reads C (the step that filled the cache). `hold` is D's hook: it
/// enters a section of C, calls `entered` once the section is open, and
/// ends it when `release` is signalled. `meanwhile` runs on the calling
/// thread while that section is open. Returns once T has exited.
fn exit_walk(
    c: &Domain,
    prime: bool,
    hold: impl FnOnce(&Domain, &dyn Fn()) + Send + 'static,
    meanwhile: impl FnOnce(),
) {
    let (a, d) = (quiet(), quiet());
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (in_tx, in_rx) = mpsc::channel::<()>();
    let t = {
        let (a, c, d) = (a.clone(), c.clone(), d.clone());
        thread::spawn(move || {
            let c_d = c.clone();
            d.register_exit(move || hold(&c_d, &|| in_tx.send(()).unwrap()));
            drop(c.read()); // T's record in C
            let c_a = c.clone();
            a.register_exit(move || {
                if prime {
                    drop(c_a.read());
                }
            });
            drop((a, c, d));
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap(); // then exit
        })
    };
    ready_rx.recv().unwrap();
    drop(a); // the last handles: T's records in A and D are orphaned
    drop(d);
    go_tx.send(()).unwrap();
    in_rx.recv().unwrap(); // D's hook is inside its section of C
    meanwhile();
    t.join().unwrap();
}

/// Starts `c.barrier()` on another thread and says whether it returned
/// within [`LOOK`]; join the thread once the section has ended.
fn barrier_returns(c: &Domain) -> (bool, thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel::<()>();
    let c = c.clone();
    let h = thread::spawn(move || {
        c.barrier();
        let _ = tx.send(());
    });
    (rx.recv_timeout(LOOK).is_ok(), h)
}

/// A callback deferred after D's hook entered its section must not run
/// before the section ends, and `barrier` must wait for it.
fn callback_waits_for_the_hooks_section(prime: bool) {
    let c = quiet();
    let ran = Arc::new(AtomicBool::new(false));
    let ran_inside = Arc::new(AtomicBool::new(false));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let mut returned = false;
    let mut barrier = None;
    let (r, inside) = (ran.clone(), ran_inside.clone());
    exit_walk(
        &c,
        prime,
        move |c, entered| {
            let g = c.read();
            entered();
            release_rx.recv().unwrap();
            inside.store(r.load(Ordering::SeqCst), Ordering::SeqCst);
            drop(g);
        },
        || {
            let r = ran.clone();
            // The main thread's first use of C.
            c.defer(move || r.store(true, Ordering::SeqCst));
            let h;
            (returned, h) = barrier_returns(&c);
            release_tx.send(()).unwrap();
            barrier = Some(h);
        },
    );
    barrier.unwrap().join().unwrap();
    assert!(
        !returned,
        "barrier returned while an exit hook's read section was open"
    );
    assert!(
        !ran_inside.load(Ordering::SeqCst),
        "a callback deferred after the hook's section began ran inside it"
    );
    c.barrier();
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn a_hook_that_used_a_domain_earlier_in_the_walk_still_holds_grace_periods() {
    callback_waits_for_the_hooks_section(true);
}

/// The same without the earlier use (the shape that always worked).
#[test]
fn a_hooks_section_holds_grace_periods_during_the_walk() {
    callback_waits_for_the_hooks_section(false);
}

/// A value loaded from an `RcuCell` in D's hook stays alive while the hook
/// holds its guard, though the main thread replaces it meanwhile.
#[test]
fn a_cell_value_loaded_in_a_hook_is_not_freed_under_its_guard() {
    struct Tracked {
        value: Box<u64>,
        dropped: Arc<AtomicBool>,
    }
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }
    let c = quiet();
    let dropped = Arc::new(AtomicBool::new(false));
    let cell = Arc::new(RcuCell::new(
        &c,
        Tracked {
            value: Box::new(7),
            dropped: dropped.clone(),
        },
    ));
    let freed_under_guard = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (cell2, freed, seen2) = (cell.clone(), freed_under_guard.clone(), seen.clone());
    let mut barrier = None;
    exit_walk(
        &c,
        true,
        move |c, entered| {
            let g = c.read();
            let v = cell2.load(&g);
            entered();
            release_rx.recv().unwrap();
            freed.store(dropped.load(Ordering::SeqCst), Ordering::SeqCst);
            // Where the old code read a freed `Box`.
            seen2.store(*v.value, Ordering::SeqCst);
            drop(g);
        },
        || {
            // The main thread's first use of C, then a barrier that must
            // wait for the hook's section before it drops the old value.
            cell.store(Tracked {
                value: Box::new(8),
                dropped: Arc::new(AtomicBool::new(false)),
            });
            let (_, h) = barrier_returns(&c);
            release_tx.send(()).unwrap();
            barrier = Some(h);
        },
    );
    barrier.unwrap().join().unwrap();
    assert!(
        !freed_under_guard.load(Ordering::SeqCst),
        "the value an exit hook loaded was dropped under its guard"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 7);
}

/// The exit walk read a record it had just released: after handing a main
/// record back (`exit::retire`), it looked at the record's flags to see
/// whether the record was kept for a live guard. Released, the record may
/// already be another thread's: a new thread's first use of the domain
/// claims it and resets those flags (a data race on a plain `Cell`), and
/// flags that said "kept" would have linked the other thread's record into
/// the exiting thread's list. Found by miri (a race between the exiting
/// thread's read and the claimant's write) under `exitq::pool`, whose
/// retiring workers are replaced by new ones; here threads A and B do the
/// same: B's first read starts while A is still exiting (A is not joined
/// first, which would order everything). Under miri it reports the race of
/// the old code; natively it only runs the shape.
#[test]
fn the_exit_walk_does_not_read_a_record_it_released() {
    let d = Domain::builder()
        .reclaimer(exitq::Reclaimer::Inline)
        .build();
    for _ in 0..if cfg!(miri) { 6 } else { 200 } {
        let (tx, rx) = mpsc::channel();
        let da = d.clone();
        let a = thread::spawn(move || {
            drop(da.read());
            tx.send(()).unwrap();
            // Exits: the walk releases A's record.
        });
        rx.recv().unwrap();
        let db = d.clone();
        let b = thread::spawn(move || {
            thread::yield_now();
            drop(db.read()); // may claim A's released record
        });
        b.join().unwrap();
        a.join().unwrap();
    }
}
