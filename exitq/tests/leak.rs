//! The leak model (crate docs, "Leaks"): whatever a thread leaks
//! (`mem::forget` of a guard, of a [`Reader`](exitq::Reader) and its guard,
//! of an online [`QsbrReader`](exitq::QsbrReader),
//! of a guard taken during thread teardown), its read section ends when the
//! thread is gone, and the record it held is handed to its next owner
//! clean. Each test failed (use after free, or a hang caught by a
//! watchdog) before the record's life was made explicit (issue 25).
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use exitq::{Domain, RcuCell};

mod pthread_util;
mod watch_util;
use watch_util::within;

const LIMIT: Duration = Duration::from_secs(60);

/// A domain that never prints a stall report (a leaked section holds grace
/// periods for a few milliseconds on purpose).
fn quiet_domain() -> Domain {
    Domain::builder()
        .stall_timeout(Duration::from_secs(3600))
        .build()
}

/// A value that says when it is dropped (through a flag it does not own,
/// so checking it never reads the value itself).
struct Tracked {
    value: u64,
    dropped: Arc<AtomicBool>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// Issue 25, first case. Thread 1 leaks a guard and exits; a grace period
/// frees its record (the thread is gone). Thread 2 reuses the record
/// (`drop(d.read())`), then holds a guard and loads the cell's value;
/// thread 3 reads once; a writer replaces the value and waits for a grace
/// period and a barrier. The old value must live as long as thread 2's
/// guard. Before: the freed record kept its old owner's `RETIRED` flag,
/// thread 2's first guard drop released the record while it was still
/// thread 2's, thread 3 shared it, and the writer dropped the value under
/// thread 2's guard.
#[test]
fn a_record_freed_after_a_leaked_guard_is_clean_for_its_next_owner() {
    let d = quiet_domain();
    let dropped = Arc::new(AtomicBool::new(false));
    let cell = Arc::new(RcuCell::new(
        &d,
        Tracked {
            value: 1,
            dropped: dropped.clone(),
        },
    ));

    let d1 = d.clone();
    thread::spawn(move || std::mem::forget(d1.read()))
        .join()
        .unwrap();
    let d1 = d.clone();
    within("synchronize after the leak", LIMIT, move || {
        d1.synchronize()
    });

    let (loaded_tx, loaded_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (d2, cell2) = (d.clone(), cell.clone());
    let holder = thread::spawn(move || {
        drop(d2.read()); // takes the freed record
        let g = d2.read();
        loaded_tx.send(cell2.load(&g).value).unwrap();
        release_rx.recv().unwrap();
        drop(g);
    });
    assert_eq!(loaded_rx.recv().unwrap(), 1);

    let d3 = d.clone();
    thread::spawn(move || drop(d3.read())).join().unwrap();

    let writer_done = Arc::new(AtomicBool::new(false));
    let (d4, cell4, done) = (d.clone(), cell.clone(), writer_done.clone());
    let writer = thread::spawn(move || {
        cell4.store(Tracked {
            value: 2,
            dropped: Arc::new(AtomicBool::new(false)),
        });
        d4.synchronize();
        d4.barrier();
        done.store(true, Ordering::SeqCst);
    });
    // The writer must wait for the holder's guard. Watch for a second:
    // the broken version dropped the value within milliseconds.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(1) {
        assert!(
            !dropped.load(Ordering::SeqCst),
            "the old value was dropped while a guard that loaded it was alive (use after free)"
        );
        assert!(
            !writer_done.load(Ordering::SeqCst),
            "synchronize returned while a guard that started before it was alive"
        );
        thread::sleep(Duration::from_millis(5));
    }
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    within("the writer, once the guard dropped", LIMIT, move || {
        writer.join().unwrap()
    });
    assert!(dropped.load(Ordering::SeqCst), "the old value was dropped");
}

/// Issue 25, third case: a thread that leaks a `Reader` and a guard of it
/// (and never used the domain otherwise), then exits. Before: only main
/// records were handled at thread exit, and `synchronize` waited forever.
#[test]
fn a_leaked_reader_and_its_guard_stop_holding_grace_periods_at_thread_exit() {
    let d = quiet_domain();
    let d1 = d.clone();
    thread::spawn(move || {
        let mut r = d1.reader();
        std::mem::forget(r.read());
        std::mem::forget(r);
    })
    .join()
    .unwrap();
    within("synchronize after a leaked Reader", LIMIT, move || {
        d.synchronize();
        d.barrier();
    });
}

/// The same for an online `QsbrReader` leaked by a thread that exits
/// (it loaded a value and never announced a quiescent state): once the
/// thread is gone, grace periods stop waiting for it.
#[test]
fn a_leaked_online_qsbr_reader_stops_holding_grace_periods_at_thread_exit() {
    let d = quiet_domain();
    let cell = Arc::new(RcuCell::new(&d, 1u64));
    let (d1, c1) = (d.clone(), cell.clone());
    thread::spawn(move || {
        let r = d1.qsbr_reader();
        assert_eq!(*c1.load(&r), 1);
        std::mem::forget(r);
    })
    .join()
    .unwrap();
    within("synchronize after a leaked QsbrReader", LIMIT, move || {
        cell.store(2);
        d.synchronize();
        d.barrier();
    });
}

/// The same with a thread that also holds a main record and leaks a guard
/// of it: both sections end once the thread is gone, and the records are
/// reused cleanly by later threads.
#[test]
fn leaked_guards_of_both_kinds_end_and_their_records_are_reused() {
    let d = quiet_domain();
    let d1 = d.clone();
    thread::spawn(move || {
        d1.defer(|| ());
        std::mem::forget(d1.read());
        let mut r = d1.reader();
        std::mem::forget(r.read());
        std::mem::forget(r);
    })
    .join()
    .unwrap();
    let d2 = d.clone();
    within("synchronize after two leaks", LIMIT, move || {
        d2.synchronize();
    });
    let before = d.stats().participants;
    let d3 = d.clone();
    within("threads reusing the records", LIMIT, move || {
        for _ in 0..4 {
            let d = d3.clone();
            thread::spawn(move || {
                let mut r = d.reader();
                for _ in 0..3 {
                    drop(d.read());
                    drop(r.read());
                }
                d.synchronize();
            })
            .join()
            .unwrap();
        }
    });
    assert_eq!(
        d.stats().participants,
        before,
        "the freed records were reused, no new ones allocated"
    );
}

static CANCEL_DOMAIN: OnceLock<Domain> = OnceLock::new();
static CANCEL_READY: AtomicBool = AtomicBool::new(false);

extern "C-unwind" {
    /// Declared "C-unwind": a cancellation acting here unwinds through it.
    fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> libc::c_int;
}

/// Leaks a Reader and its guard, then sleeps until cancelled (no value
/// with a destructor is live at the cancellation point).
extern "C-unwind" fn leak_then_sleep(arg: *mut c_void) -> *mut c_void {
    leak_reader(arg);
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    loop {
        // SAFETY: a valid timespec; a cancellation point.
        unsafe { nanosleep(&ts, std::ptr::null_mut()) };
    }
}

fn leak_reader(arg: *mut c_void) {
    // SAFETY: the `Box<()>` leaked by `pthread_util::spawn`.
    drop(unsafe { Box::from_raw(arg.cast::<()>()) });
    let mut r = CANCEL_DOMAIN.get().unwrap().reader();
    std::mem::forget(r.read());
    std::mem::forget(r);
    CANCEL_READY.store(true, Ordering::SeqCst);
}

/// Issue 25, third case, with `pthread_cancel`: the thread that leaked the
/// Reader ends by cancellation in `nanosleep`.
#[test]
fn a_leaked_reader_of_a_cancelled_thread_stops_holding_grace_periods() {
    CANCEL_DOMAIN.get_or_init(quiet_domain);
    let tid = pthread_util::spawn(leak_then_sleep, Box::new(()));
    while !CANCEL_READY.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: a live, joinable thread we created.
    assert_eq!(unsafe { libc::pthread_cancel(tid) }, 0);
    assert!(
        pthread_util::join_was_cancelled(tid),
        "the thread was not cancelled"
    );
    within("synchronize after a cancelled thread's leak", LIMIT, || {
        let d = CANCEL_DOMAIN.get().unwrap();
        d.synchronize();
        d.barrier();
    });
}

/// What a late thread-local destructor leaks.
#[derive(Clone, Copy)]
enum LateLeak {
    Guard,
    Reader,
    Qsbr,
}

/// Runs a thread whose thread-local destructor, running after exitq's own,
/// leaks a guard (a temporary record) or a Reader and its guard; then a
/// grace period must still complete.
fn late_leak(domain: &'static OnceLock<Domain>, what: LateLeak) {
    struct Late(&'static OnceLock<Domain>, LateLeak);
    impl Drop for Late {
        fn drop(&mut self) {
            let d = self.0.get().unwrap();
            match self.1 {
                LateLeak::Guard => std::mem::forget(d.read()),
                LateLeak::Reader => {
                    let mut r = d.reader();
                    std::mem::forget(r.read());
                    std::mem::forget(r);
                }
                LateLeak::Qsbr => std::mem::forget(d.qsbr_reader()),
            }
        }
    }
    thread_local! {
        // Initialised first, destroyed after exitq's own thread-local.
        static LATE: std::cell::RefCell<Option<Late>> = const { std::cell::RefCell::new(None) };
    }
    let d = domain.get_or_init(quiet_domain);
    thread::spawn(move || {
        LATE.with(|l| *l.borrow_mut() = Some(Late(domain, what)));
        domain.get().unwrap().defer(|| ()); // exitq's thread-local now
    })
    .join()
    .unwrap();
    within("synchronize after a late leak", LIMIT, move || {
        d.synchronize();
        d.barrier();
    });
}

/// Issue 25, third case: a guard leaked by a thread-local destructor that
/// runs after exitq's (a temporary record) must not hold grace periods
/// once the thread is gone.
#[test]
fn a_guard_leaked_during_thread_teardown_stops_holding_grace_periods() {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    late_leak(&DOMAIN, LateLeak::Guard);
}

/// The same for a Reader created and leaked during thread teardown.
#[test]
fn a_reader_leaked_during_thread_teardown_stops_holding_grace_periods() {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    late_leak(&DOMAIN, LateLeak::Reader);
}

/// The same for a `QsbrReader` created (online) and leaked during thread
/// teardown.
#[test]
fn a_qsbr_reader_leaked_during_thread_teardown_stops_holding_grace_periods() {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    late_leak(&DOMAIN, LateLeak::Qsbr);
}

/// A Reader whose guard was leaked but which itself is dropped by a later
/// thread-local destructor (after exitq's): the Reader's drop ends the
/// section and frees the record once; a later thread reuses it.
#[test]
fn a_reader_dropped_after_exitqs_destructor_frees_its_record_once() {
    static DOMAIN: OnceLock<Domain> = OnceLock::new();
    thread_local! {
        // Initialised first, destroyed after exitq's own thread-local.
        static READER: std::cell::RefCell<Option<exitq::Reader>> =
            const { std::cell::RefCell::new(None) };
    }
    let d = DOMAIN.get_or_init(quiet_domain);
    thread::spawn(|| {
        READER.with(|_| ());
        let d = DOMAIN.get().unwrap();
        d.defer(|| ()); // exitq's thread-local now
        let mut r = d.reader();
        std::mem::forget(r.read());
        READER.with(|slot| *slot.borrow_mut() = Some(r));
    })
    .join()
    .unwrap();
    within("synchronize and reuse", LIMIT, move || {
        d.synchronize();
        let participants = d.stats().participants;
        for _ in 0..3 {
            thread::spawn(move || {
                let mut r = d.reader();
                drop(r.read());
                drop(d.read());
            })
            .join()
            .unwrap();
        }
        d.synchronize();
        assert_eq!(d.stats().participants, participants, "records reused");
    });
}
