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

/// How long a wait for something that takes milliseconds may last before
/// it is taken for a hang: long enough that a loaded machine never trips it.
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
    let started = started_rx.recv_timeout(LIMIT).is_ok();
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

/// The fork-child test below: its statics (the child's domain and cell,
/// and what its late thread-local destructor and writer report).
mod late_guard {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    use exitq::{Domain, RcuCell};

    pub static DOMAIN: OnceLock<Domain> = OnceLock::new();
    pub static CELL: OnceLock<RcuCell<Value>> = OnceLock::new();
    /// Set in the child only: the destructor below does nothing elsewhere.
    pub static ARMED: AtomicBool = AtomicBool::new(false);
    pub static HOLDING: AtomicBool = AtomicBool::new(false);
    pub static WRITER_DONE: AtomicBool = AtomicBool::new(false);
    pub static DROPPED: AtomicBool = AtomicBool::new(false);

    /// A value that says when it is dropped (checked without reading it).
    pub struct Value(pub u64);

    impl Drop for Value {
        fn drop(&mut self) {
            DROPPED.store(true, Ordering::SeqCst);
        }
    }

    /// Its destructor runs after exitq's (registered before it): it holds
    /// a guard of `DOMAIN`, loads the cell's value, and gives the writer
    /// 2 s to free it; `_exit(3)` if the value was dropped under the guard.
    pub struct Late;

    impl Drop for Late {
        fn drop(&mut self) {
            if !ARMED.load(Ordering::SeqCst) {
                return;
            }
            let d = DOMAIN.get().expect("armed after init");
            let guard = d.read();
            let v = CELL.get().expect("armed after init").load(&guard);
            assert_eq!(v.0, 1);
            HOLDING.store(true, Ordering::SeqCst);
            let start = Instant::now();
            while !WRITER_DONE.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if DROPPED.load(Ordering::SeqCst) {
                // SAFETY: ends the child at once with the verdict.
                unsafe { libc::_exit(3) };
            }
            drop(guard);
        }
    }

    std::thread_local! {
        pub static LATE: Late = const { Late };
    }
}

/// exitq caches a thread's tid (for stall reports and the "is the owner
/// gone" check that ends sections leaked by exited threads). The cache
/// survived `fork()`: in the child, the forking thread still carried its
/// parent's tid, which names no thread of the child, so a grace period of
/// a domain built in the child took the thread for gone while it ran its
/// late thread-local destructors, ended a live guard's section and let a
/// writer free a value under it (a use after free through safe code).
#[test]
fn a_fork_child_s_late_guard_is_not_taken_for_a_dead_thread_s() {
    use late_guard::*;
    let code = thread::spawn(|| {
        // `LATE`'s destructor is registered first, so it runs after
        // exitq's; then this thread uses exitq (its tid is cached).
        LATE.with(|_| ());
        let parent_domain = Domain::new();
        drop(parent_domain.read());
        // The child's panics print nothing, without a `set_hook` in the
        // child (watch_util's docs: it can block there).
        watch_util::quiet_panics_in_forked_children();
        // SAFETY: the child builds its own domain and threads, and ends
        // through `exit`, which runs this thread's thread-local destructors.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let d = DOMAIN.get_or_init(|| {
                Domain::builder()
                    .stall_timeout(Duration::from_secs(3600))
                    .build()
            });
            CELL.get_or_init(|| exitq::RcuCell::new(d, Value(1)));
            ARMED.store(true, Ordering::SeqCst);
            thread::spawn(|| {
                while !HOLDING.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
                let (d, cell) = (DOMAIN.get().unwrap(), CELL.get().unwrap());
                cell.store(Value(2));
                d.synchronize();
                d.barrier();
                WRITER_DONE.store(true, Ordering::SeqCst);
            });
            // SAFETY: runs this thread's thread-local destructors (exitq's,
            // then `LATE`'s), then ends the child.
            unsafe { libc::exit(0) };
        }
        watch_util::wait_child(pid, LIMIT)
    })
    .join()
    .unwrap();
    assert_ne!(code, 3, "a value was dropped under a live guard");
    assert_eq!(code, 0);
}

/// A stall handler that waits for a grace period of its own domain (here
/// `synchronize`; `barrier`, `exit_barrier` and `RcuCell::replace` wait
/// the same way). It runs on the thread that leads the stalled grace
/// period, inside its wait: waiting there for a grace period waited for
/// that very leader, and `synchronize` never returned, even after the
/// stalled reader had left. It must refuse with a message, as inside a
/// read section.
#[test]
fn waiting_for_a_grace_period_inside_the_stall_handler_panics() {
    static DOMAIN: std::sync::OnceLock<Domain> = std::sync::OnceLock::new();
    static REFUSED: AtomicBool = AtomicBool::new(false);
    let d = DOMAIN.get_or_init(|| {
        Domain::builder()
            .stall_timeout(Duration::from_millis(20))
            .stall_handler(|_| {
                let d = DOMAIN.get().expect("set before any grace period");
                if catch_unwind(AssertUnwindSafe(|| d.synchronize())).is_err() {
                    REFUSED.store(true, Ordering::SeqCst);
                }
            })
            .build()
    });
    synchronize_past_a_stalling_reader(
        d,
        "synchronize with a stall handler that synchronizes",
        &REFUSED,
    );
    assert!(REFUSED.load(Ordering::SeqCst), "the nested wait refused");
}

/// A thread registers an exit hook, leaks a guard, and drops the last
/// handle of the domain; then it exits. The domain's records were
/// orphaned (the hook waits for the thread's exit, then runs inline, as
/// documented), but the exit path kept the record for the leaked section
/// and pushed the hook onto the queue of a domain that no one will ever
/// run again: the hook never ran. No handle is left, so no reader can
/// rely on that section: the hook must run at the thread's exit.
#[test]
fn an_orphaned_threads_exit_hook_runs_despite_a_leaked_guard() {
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = ran.clone();
    thread::spawn(move || {
        let d = Domain::new();
        d.register_exit(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        std::mem::forget(d.read());
        drop(d); // the last handle
    })
    .join()
    .unwrap();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the hook ran once, at the thread's exit"
    );
}

/// The same with `defer` in the stall handler of a domain without a
/// reclaimer thread ([`Reclaimer::Inline`]), where a thread whose batch
/// is sealed waits for its grace period itself: inside the handler it
/// waited for the leader running the handler. (`flush` the same.) A
/// stall handler must be able to defer; what it defers waits.
#[test]
fn defer_inside_the_stall_handler_of_an_inline_domain_does_not_wait() {
    static DOMAIN: std::sync::OnceLock<Domain> = std::sync::OnceLock::new();
    static DEFERRED: AtomicBool = AtomicBool::new(false);
    let d = DOMAIN.get_or_init(|| {
        Domain::builder()
            .reclaimer(exitq::Reclaimer::Inline)
            .batch_size(1)
            .stall_timeout(Duration::from_millis(20))
            .stall_handler(|_| {
                let d = DOMAIN.get().expect("set before any grace period");
                d.defer(|| ());
                d.flush();
                DEFERRED.store(true, Ordering::SeqCst);
            })
            .build()
    });
    synchronize_past_a_stalling_reader(
        d,
        "synchronize with a stall handler that defers",
        &DEFERRED,
    );
    assert!(DEFERRED.load(Ordering::SeqCst), "the handler ran");
    watch_util::within("barrier after", LIMIT, || d.barrier());
    assert_eq!(d.stats().callbacks_run, 1, "the deferred callback ran");
}

/// How long [`synchronize_past_a_stalling_reader`]'s reader holds its
/// guard at most, waiting for the stall handler.
const HOLD: Duration = Duration::from_secs(60);

/// `synchronize` on `d` while another thread holds a guard (a stall: the
/// domain's stall handler runs) until the handler says so in `handled`,
/// or [`HOLD`] passed (a handler that never ran: the caller's check of
/// `handled` fails); within `HOLD + LIMIT` (`what` names the wait if it
/// hangs). The reader used to hold its guard for 200 ms: when this thread
/// was descheduled that long before its `synchronize`, no grace period
/// stalled, the handler never ran and the test failed.
fn synchronize_past_a_stalling_reader(
    d: &'static Domain,
    what: &'static str,
    handled: &'static AtomicBool,
) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let _guard = d.read();
        entered_tx.send(()).unwrap();
        let start = std::time::Instant::now();
        while !handled.load(Ordering::SeqCst) && start.elapsed() < HOLD {
            thread::sleep(Duration::from_millis(1));
        }
    });
    entered_rx.recv().unwrap();
    watch_util::within(what, HOLD + LIMIT, || d.synchronize());
    reader.join().unwrap();
}
