//! Defects found by the red-team review after issue 25: each test failed
//! (a panic, a broken guarantee, or a hang caught by a watchdog) before
//! its fix, through the public API only.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use exitq::Domain;

mod watch_util;

const LIMIT: Duration = Duration::from_secs(60);

/// A domain whose reclaimer never takes an idle thread's batches (so a
/// thread runs its own) and never reports a stall.
fn own_runs_domain() -> Domain {
    Domain::builder()
        .flush_latency(Duration::from_secs(3600))
        .stall_timeout(Duration::from_secs(3600))
        .build()
}

/// Defers `f` on the calling thread and runs it there: sealed, its grace
/// period waited for, then run by the thread's own `flush`.
fn run_on_this_thread(d: &Domain, f: impl FnOnce() + Send + 'static) {
    d.defer(f);
    d.flush();
    d.synchronize();
    d.flush();
}

/// `retire_thread` called by a callback that its own thread is running
/// (a run of the thread's own batches) released the thread's record in
/// the middle of that run. The next thread to claim a record took it
/// over with the run still marked in progress: `take_over`'s debug check
/// fired ("a run left"), and in release builds the new owner's own run
/// flipped the record's run counter to even, so a `barrier` that found it
/// did not wait for it and returned before a callback deferred earlier
/// had run (and the two threads raced on the record's owner-only fields).
#[test]
fn retire_thread_inside_the_threads_own_run_keeps_its_record() {
    let d = own_runs_domain();

    // Thread T runs a callback of its own that retires T, then waits.
    let (retired_tx, retired_rx) = mpsc::channel();
    let (t_go_tx, t_go_rx) = mpsc::channel::<()>();
    let dt = d.clone();
    let t = thread::spawn(move || {
        let inner = dt.clone();
        run_on_this_thread(&dt, move || {
            let r = catch_unwind(AssertUnwindSafe(|| inner.retire_thread()));
            retired_tx.send(r.is_ok()).unwrap();
            t_go_rx.recv().unwrap();
        });
    });
    let retired_returned = retired_rx.recv_timeout(LIMIT).expect("T's callback ran");

    // Thread U, a newcomer (it claims a record now), runs a callback of
    // its own that blocks until released.
    let (started_tx, started_rx) = mpsc::channel();
    let (u_go_tx, u_go_rx) = mpsc::channel::<()>();
    let ran = Arc::new(AtomicBool::new(false));
    let (du, ran2) = (d.clone(), ran.clone());
    let u = thread::spawn(move || {
        run_on_this_thread(&du, move || {
            started_tx.send(()).unwrap();
            u_go_rx.recv().unwrap();
            ran2.store(true, Ordering::SeqCst);
        });
    });
    let started = started_rx.recv_timeout(Duration::from_secs(10)).is_ok();
    if !started {
        drop(t_go_tx);
        drop(u_go_tx);
        let u = u.join();
        let _ = t.join();
        panic!(
            "U's callback never started (U {})",
            match u {
                Ok(()) => "returned".to_string(),
                Err(p) => format!("panicked: {}", panic_text(&p)),
            }
        );
    }

    // U's callback was deferred before this barrier: it must not return
    // before that callback has finished.
    let (done_tx, done_rx) = mpsc::channel();
    let (db, ran3) = (d.clone(), ran.clone());
    thread::spawn(move || {
        db.barrier();
        let _ = done_tx.send(ran3.load(Ordering::SeqCst));
    });
    let early = done_rx.recv_timeout(Duration::from_millis(500));
    u_go_tx.send(()).unwrap();
    t_go_tx.send(()).unwrap();
    u.join().expect("U");
    t.join().expect("T");
    if let Ok(ran_before) = early {
        assert!(
            ran_before,
            "barrier returned while a callback deferred before it was still running"
        );
    }
    let result = early.or_else(|_| done_rx.recv_timeout(LIMIT));
    assert!(matches!(result, Ok(true)), "barrier did not return");
    assert!(
        !retired_returned,
        "retire_thread inside a callback of the domain panics with a message"
    );
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "?".into())
}
