//! Thread-exit hooks: std threads, returning and cancelled raw pthreads.
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use exitq::{Domain, Reclaimer};

mod pthread_util;

#[test]
fn exit_hooks_run_after_the_thread_exits_in_reverse_order() {
    for reclaimer in [Reclaimer::Thread, Reclaimer::Inline] {
        // A flush latency far beyond the test's length: the unflushed batch
        // must leave with the exit chain, not be stolen by the reclaimer's
        // idle-batch sweep first (which `exit_barrier` does not wait for)
        // when a loaded machine delays the thread by more than the default.
        let d = Domain::builder()
            .reclaimer(reclaimer)
            .flush_latency(Duration::from_secs(3600))
            .build();
        let order = Arc::new(Mutex::new(Vec::new()));
        let t = {
            let (d, order) = (d.clone(), order.clone());
            thread::spawn(move || {
                for i in 0..3 {
                    let order = order.clone();
                    d.register_exit(move || order.lock().unwrap().push(i));
                }
                // Also a deferred callback left unflushed at exit.
                let order = order.clone();
                d.defer(move || order.lock().unwrap().push(100));
                assert_eq!(d.stats().exits_armed, 3);
            })
        };
        t.join().unwrap();
        d.exit_barrier();
        let order = order.lock().unwrap().clone();
        let hooks: Vec<i32> = order.iter().copied().filter(|&x| x < 100).collect();
        assert_eq!(
            hooks,
            [2, 1, 0],
            "{reclaimer:?}: hooks in reverse registration order"
        );
        assert!(
            order.contains(&100),
            "{reclaimer:?}: the unflushed batch ran too"
        );
        let s = d.stats();
        assert_eq!(s.exits_run, 3, "{s:?}");
        assert_eq!(s.exits_armed, 0, "{s:?}");
    }
}

#[test]
fn the_reclaimer_picks_up_exit_hooks_without_any_call() {
    // Nobody calls exit_barrier: the idle reclaimer polls (exit_poll).
    let d = Domain::builder()
        .exit_poll(Some(Duration::from_millis(1)))
        .build();
    let ran = Arc::new(AtomicUsize::new(0));
    let t = {
        let (d, ran) = (d.clone(), ran.clone());
        thread::spawn(move || {
            d.register_exit(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            });
        })
    };
    t.join().unwrap();
    // Up to 60 s: a loaded machine may starve the reclaimer for a while.
    for _ in 0..60_000 {
        if ran.load(Ordering::Relaxed) == 1 {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(ran.load(Ordering::Relaxed), 1, "{:?}", d.stats());
}

#[test]
fn records_are_reused_by_later_threads() {
    let d = Domain::new();
    for _ in 0..50 {
        let d2 = d.clone();
        thread::spawn(move || {
            let _g = d2.read();
            d2.register_exit(|| ());
        })
        .join()
        .unwrap();
    }
    d.exit_barrier();
    let s = d.stats();
    assert_eq!(s.exits_run, 50);
    assert!(s.participants <= 3, "records not reused: {s:?}");
}

#[test]
fn hooks_of_a_live_thread_run_when_it_exits_after_the_domain_is_dropped() {
    let d = Domain::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let t = {
        let (d, ran) = (d.clone(), ran.clone());
        thread::spawn(move || {
            let r = ran.clone();
            d.register_exit(move || {
                r.fetch_add(1, Ordering::Relaxed);
            });
            drop(d);
            ready_tx.send(()).unwrap();
            rx.recv().unwrap();
        })
    };
    ready_rx.recv().unwrap();
    drop(d); // last handle: the thread still holds its record
    assert_eq!(
        ran.load(Ordering::Relaxed),
        0,
        "an exit hook ran before its thread exited"
    );
    tx.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 1);
}

#[test]
fn retire_thread_hands_over_now() {
    let d = Domain::builder().reclaimer(Reclaimer::Inline).build();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    d.register_exit(move || {
        r.fetch_add(1, Ordering::Relaxed);
    });
    d.retire_thread();
    d.exit_barrier();
    assert_eq!(ran.load(Ordering::Relaxed), 1);
    // The thread keeps working with a fresh record.
    let _g = d.read();
}

// ---- raw pthreads, cancelled ----

extern "C-unwind" {
    /// glibc's sleep(3): a cancellation point. Declared "C-unwind" because
    /// pthread_cancel unwinds through it (forced unwind, RFC 2945).
    #[link_name = "sleep"]
    fn sleep_cancellable(seconds: libc::c_uint) -> libc::c_uint;
}

struct Start {
    domain: Domain,
    ran: Arc<AtomicUsize>,
    hooks: usize,
    registered: Arc<AtomicUsize>,
}

/// Everything with a destructor lives here, in a frame that has returned
/// before the cancellation point.
fn register_hooks(arg: *mut c_void) {
    // SAFETY: `arg` is the `Box<Start>` leaked by the spawner for us.
    let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
    for _ in 0..start.hooks {
        let ran = start.ran.clone();
        start.domain.register_exit(move || {
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    start.domain.defer(|| ());
    start.registered.fetch_add(1, Ordering::Release);
}

/// Start routine: no live destructors at the cancellation point (`sleep`),
/// so the forced unwind passes only plain frames.
extern "C-unwind" fn cancellable_thread(arg: *mut c_void) -> *mut c_void {
    register_hooks(arg);
    loop {
        // SAFETY: plain libc call; cancellation unwinds out of it.
        unsafe { sleep_cancellable(1) };
    }
}

#[test]
fn exit_hooks_run_for_cancelled_pthreads() {
    let d = Domain::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let registered = Arc::new(AtomicUsize::new(0));
    const THREADS: usize = 16;
    let mut tids = Vec::new();
    for _ in 0..THREADS {
        let start = Box::new(Start {
            domain: d.clone(),
            ran: ran.clone(),
            hooks: 2,
            registered: registered.clone(),
        });
        let tid = pthread_util::spawn(cancellable_thread, start);
        tids.push(tid);
    }
    while registered.load(Ordering::Acquire) < THREADS {
        thread::sleep(Duration::from_millis(1));
    }
    for &tid in &tids {
        // SAFETY: a live, joinable thread we created.
        assert_eq!(unsafe { libc::pthread_cancel(tid) }, 0);
    }
    for tid in tids {
        assert!(
            pthread_util::join_was_cancelled(tid),
            "the thread was not cancelled"
        );
    }
    d.exit_barrier();
    assert_eq!(ran.load(Ordering::Relaxed), THREADS * 2);
    let s = d.stats();
    assert_eq!(s.exits_run, (THREADS * 2) as u64, "{s:?}");
    assert_eq!(s.callbacks_run, (THREADS * 3) as u64, "{s:?}");
}
