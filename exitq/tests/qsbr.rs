//! `QsbrReader` (quiescent-state-based reads) through the public API: an
//! online reader holds every grace period until it announces a quiescent
//! state or goes offline; values it loaded stay valid until then; waiting
//! while online panics, waiting offline works; a panic inside `offline`
//! leaves it online; a reader that never announces is reported as one;
//! records are reused. The leak cases (a reader leaked by a thread that
//! exits, or during its teardown) are in `tests/leak.rs`.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

use exitq::{Domain, HeldBy, RcuCell};

mod stall_util;
mod watch_util;
use watch_util::within;

const LIMIT: Duration = Duration::from_secs(60);

/// A value that poisons itself when dropped: a reader that still sees it
/// after its drop (a use after free, had it been freed) sees the poison.
struct Poisoned {
    seq: u64,
    check: AtomicU64,
}

impl Poisoned {
    fn new(seq: u64) -> Poisoned {
        Poisoned {
            seq,
            check: AtomicU64::new(!seq),
        }
    }

    fn valid(&self) -> bool {
        self.check.load(Ordering::SeqCst) == !self.seq
    }
}

impl Drop for Poisoned {
    fn drop(&mut self) {
        self.check.store(self.seq, Ordering::SeqCst);
    }
}

/// A quiet domain: the tests below hold grace periods on purpose.
fn quiet_domain() -> Domain {
    Domain::builder()
        .stall_timeout(Duration::from_secs(3600))
        .build()
}

/// A reader that loaded a value holds `synchronize` and the value's
/// deferred drop until its quiescent state, however long it takes.
#[test]
fn an_online_reader_holds_grace_periods_until_its_quiescent_state() {
    let d = quiet_domain();
    let cell = Arc::new(RcuCell::new(&d, Poisoned::new(1)));
    let (loaded_tx, loaded_rx) = mpsc::channel();
    let release = Arc::new(AtomicBool::new(false));
    let announced = Arc::new(AtomicBool::new(false));
    let reader = {
        let (d, cell, release, announced) =
            (d.clone(), cell.clone(), release.clone(), announced.clone());
        thread::spawn(move || {
            let mut r = d.qsbr_reader();
            let v = cell.load(&r);
            assert_eq!(v.seq, 1);
            loaded_tx.send(()).unwrap();
            while !release.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
            assert!(v.valid(), "the loaded value was dropped under the reader");
            announced.store(true, Ordering::SeqCst);
            r.quiescent();
            // Another load after the quiescent state sees the new value.
            assert_eq!(cell.load(&r).seq, 2);
        })
    };
    loaded_rx.recv().unwrap();
    cell.store(Poisoned::new(2)); // the old value's drop is deferred
    let releaser = stall_util::release_after(&release, Duration::from_millis(30));
    d.synchronize();
    assert!(
        announced.load(Ordering::SeqCst),
        "synchronize returned before the online reader's quiescent state"
    );
    d.barrier();
    reader.join().unwrap();
    releaser.join().unwrap();
}

/// Readers that announce a quiescent state every iteration (or every few)
/// let writers' grace periods pass while they keep reading; no reader ever
/// sees a dropped value.
#[test]
fn readers_that_announce_let_writers_progress_and_never_see_a_dropped_value() {
    for per in [1u64, 16] {
        let d = Domain::new();
        let cell = Arc::new(RcuCell::new(&d, Poisoned::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        // The writers start once both readers are online and have read:
        // a writer that finished before a reader started would test
        // nothing (and `reads > 0` below failed so once).
        let started = Arc::new(Barrier::new(3));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (d, cell, stop) = (d.clone(), cell.clone(), stop.clone());
                let started = started.clone();
                thread::spawn(move || {
                    let mut r = d.qsbr_reader();
                    let (mut reads, mut bad) = (0u64, 0u64);
                    let mut first = true;
                    while first || !stop.load(Ordering::Relaxed) {
                        let v = cell.load(&r);
                        bad += u64::from(!v.valid());
                        reads += 1;
                        if reads % per == 0 {
                            r.quiescent();
                        }
                        if std::mem::take(&mut first) {
                            r.offline(|| started.wait());
                        }
                    }
                    (reads, bad)
                })
            })
            .collect();
        started.wait();
        {
            let (d, cell) = (d.clone(), cell.clone());
            within("writers with QSBR readers", LIMIT, move || {
                for seq in 1..=2_000 {
                    cell.store(Poisoned::new(seq));
                    if seq % 200 == 0 {
                        d.synchronize();
                    }
                }
                d.barrier();
            });
        }
        stop.store(true, Ordering::Relaxed);
        for h in readers {
            let (reads, bad) = h.join().unwrap();
            assert_eq!(
                bad, 0,
                "per {per}: {bad} of {reads} reads saw a dropped value"
            );
            assert!(reads > 0);
        }
    }
}

/// Waiting for a grace period while online would wait for ourselves: it
/// panics; inside `offline` it works.
#[test]
fn waiting_while_online_panics_and_offline_it_works() {
    let d = Domain::new();
    let mut r = d.qsbr_reader();
    for (what, wait) in [
        (
            "synchronize",
            &(|d: &Domain| d.synchronize()) as &dyn Fn(&Domain),
        ),
        ("barrier", &|d: &Domain| d.barrier()),
    ] {
        let err = catch_unwind(AssertUnwindSafe(|| wait(&d))).unwrap_err();
        let msg = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(
            msg.contains("inside a read-side critical section"),
            "{what}: {msg}"
        );
        r.offline(|| wait(&d));
    }
    let cell = RcuCell::new(&d, 5u32);
    assert_eq!(r.offline(|| cell.replace(6)), 5);
    assert_eq!(*cell.load(&r), 6);
}

/// A panic inside `offline` unwinds through it with the reader back
/// online: used again after `catch_unwind`, it still holds grace periods.
#[test]
fn a_panic_inside_offline_leaves_the_reader_online() {
    let d = Domain::new();
    let mut r = d.qsbr_reader();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        r.offline(|| panic!("inside offline (expected)"));
    }));
    assert!(caught.is_err());
    let again = catch_unwind(AssertUnwindSafe(|| d.synchronize()));
    assert!(again.is_err(), "the reader was left offline after a panic");
    drop(r);
    d.synchronize(); // the dropped reader holds nothing
}

/// A reader blocked offline holds no grace period.
#[test]
fn an_offline_reader_holds_no_grace_period() {
    let d = quiet_domain();
    let (tx, rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let reader = {
        let d = d.clone();
        thread::spawn(move || {
            let mut r = d.qsbr_reader();
            r.offline(|| {
                ready_tx.send(()).unwrap();
                rx.recv().unwrap();
            });
            r.quiescent();
        })
    };
    ready_rx.recv().unwrap();
    let d2 = d.clone();
    within("synchronize with an offline reader", LIMIT, move || {
        d2.synchronize();
        d2.synchronize_expedited();
    });
    tx.send(()).unwrap();
    reader.join().unwrap();
}

/// A reader that stops announcing is reported, naming its thread and its
/// kind; the grace period completes once it announces.
#[test]
fn a_reader_that_never_announces_is_reported_as_one() {
    let (d, reports) = stall_util::reporting_domain();
    let release = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let reader = {
        let (d, release) = (d.clone(), release.clone());
        thread::Builder::new()
            .name("silent-qsbr".into())
            .spawn(move || {
                let mut r = d.qsbr_reader();
                ready_tx.send(()).unwrap();
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1)); // online, silent
                }
                r.quiescent();
                // Keep it online past its announcement: the grace period
                // must have completed on the announcement alone.
                while release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
            })
            .unwrap()
    };
    ready_rx.recv().unwrap();
    let releaser = stall_util::release_after_first_report(&release, &reports);
    d.synchronize();
    release.store(false, Ordering::SeqCst);
    releaser.join().unwrap();
    reader.join().unwrap();
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].held_by, HeldBy::QsbrReader);
    assert_eq!(reports[0].thread_name.as_deref(), Some("silent-qsbr"));
    assert!(
        reports[0].to_string().contains("QsbrReader"),
        "{}",
        reports[0]
    );
}

/// A dropped reader hands its record back (the next one reuses it) and
/// holds nothing: its thread may wait for grace periods again.
#[test]
fn a_dropped_reader_frees_its_record_and_holds_nothing() {
    let d = Domain::new();
    drop(d.qsbr_reader());
    let participants = d.stats().participants;
    for _ in 0..100 {
        let mut r = d.qsbr_reader();
        r.quiescent();
        drop(r);
        d.synchronize();
    }
    assert_eq!(d.stats().participants, participants, "records reused");
    // Two at once on one thread, with a `Reader` beside them.
    let (a, b, mut c) = (d.qsbr_reader(), d.qsbr_reader(), d.reader());
    drop(c.read());
    drop((a, b, c));
    d.synchronize();
}
