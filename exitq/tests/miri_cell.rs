//! The typed RCU pointers ([`RcuCell`], [`RcuOption`]), the owned
//! [`Reader`], the [`QsbrReader`](exitq::QsbrReader) and the cell caches
//! ([`CellCache`](exitq::CellCache)) under miri
//! (scripts/test.d/30-miri.sh), and as plain tests with larger counts:
//! readers on other threads load and dereference (under a guard, a
//! `Reader`'s guard, and a QSBR reader between its quiescent states and
//! offline periods) while writers store, swap, compare-and-swap, update
//! and replace, so miri's
//! use-after-free, data-race, aliasing and leak checks see every path of
//! `cell/raw.rs`; every value is counted (made, dropped: each exactly
//! once), and each reader checks, inside its section, that the value it
//! holds was not dropped (rcutorture's check, which also catches it
//! outside miri).
use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use exitq::{Domain, RcuCell, RcuOption, Reader, Reclaimer};

mod miri_util;
use miri_util::domains;

const OPS: usize = if cfg!(miri) { 24 } else { 20_000 };
const READS: usize = if cfg!(miri) { 40 } else { 50_000 };

/// A value that knows whether it was dropped, and counts itself.
struct Value {
    n: u64,
    dropped: AtomicBool,
    live: Arc<AtomicUsize>,
}

impl Value {
    fn new(n: u64, live: &Arc<AtomicUsize>) -> Value {
        live.fetch_add(1, Ordering::Relaxed);
        Value {
            n,
            dropped: AtomicBool::new(false),
            live: live.clone(),
        }
    }

    /// A reader's check: the value it holds has not been dropped.
    fn check(&self) -> u64 {
        assert!(
            !self.dropped.load(Ordering::Relaxed),
            "a reader saw a value already dropped"
        );
        self.n
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        assert!(!self.dropped.swap(true, Ordering::Relaxed), "dropped twice");
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Writers replace the value through every write path while three readers
/// (a guard, a `Reader`, a `QsbrReader`) load it; at the end every value
/// made has been dropped exactly once.
#[test]
fn cell_readers_and_writers() {
    for (name, d) in domains() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = Arc::new(RcuCell::new(&d, Value::new(0, &live)));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|kind| {
                let (d, cell, stop) = (d.clone(), cell.clone(), stop.clone());
                thread::spawn(move || {
                    let mut reader = d.reader();
                    // Online all along, announcing after each read (and
                    // offline for a moment now and then).
                    let mut qsbr = (kind == 2).then(|| d.qsbr_reader());
                    let (mut last, mut reads) = (0, 0);
                    while reads < READS && !stop.load(Ordering::Relaxed) {
                        let n = match (kind, &mut qsbr) {
                            (0, _) => {
                                let guard = d.read();
                                cell.load(&guard).check()
                            }
                            (_, Some(q)) => {
                                let v = cell.load(q);
                                let n = v.check();
                                thread::yield_now();
                                v.check();
                                if reads % 8 == 7 {
                                    q.offline(thread::yield_now);
                                } else {
                                    q.quiescent();
                                }
                                n
                            }
                            _ => {
                                let guard = reader.read();
                                cell.load(&guard).check()
                            }
                        };
                        assert!(n >= last, "values go forward: {n} after {last}");
                        last = n;
                        reads += 1;
                    }
                })
            })
            .collect();
        for i in 1..=OPS as u64 {
            match i % 5 {
                0 => cell.store(Value::new(i, &live)),
                1 => {
                    let guard = d.read();
                    let old = cell.swap(Value::new(i, &live), &guard);
                    assert_eq!(old.check(), i - 1, "{name}");
                }
                2 => {
                    let guard = d.read();
                    let seen = cell.load(&guard);
                    let old = cell
                        .compare_exchange(seen, Value::new(i, &live), &guard)
                        .unwrap_or_else(|_| panic!("{name}: the only writer lost a CAS"));
                    assert_eq!(old.check(), i - 1);
                    let lost = cell
                        .compare_exchange(seen, Value::new(0, &live), &guard)
                        .err()
                        .expect("a stale CAS fails");
                    assert_eq!(lost.current.check(), i);
                }
                3 => cell.update(|v| Value::new(v.n + 1, &live)),
                _ => {
                    let old = cell.replace(Value::new(i, &live));
                    assert_eq!(old.check(), i - 1, "{name}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(cell.with(|v| v.check()), OPS as u64, "{name}");
        drop(cell);
        d.barrier();
        assert_eq!(
            live.load(Ordering::Relaxed),
            0,
            "{name}: every value dropped once"
        );
    }
}

/// Two cached readers until `stop` (or `READS` reads each): each makes a
/// cache with `make`, loads through it four times with `load` (`None`: an
/// empty cell), and makes a new one. Every value read is alive (checked
/// again after a yield by the second reader) and no older than the last.
fn spawn_cached_readers<'scope, C>(
    s: &'scope thread::Scope<'scope, '_>,
    stop: &'scope AtomicBool,
    make: impl Fn() -> C + Copy + Send + 'scope,
    load: impl for<'c> Fn(&'c mut C) -> Option<&'c Value> + Copy + Send + 'scope,
) {
    for kind in 0..2 {
        s.spawn(move || {
            let (mut last, mut reads) = (0, 0);
            while reads < READS && !stop.load(Ordering::Relaxed) {
                let mut cache = make();
                for _ in 0..4 {
                    if let Some(v) = load(&mut cache) {
                        let n = v.check();
                        if kind == 1 {
                            thread::yield_now();
                            v.check();
                        }
                        assert!(n >= last, "values go forward: {n} after {last}");
                        last = n;
                    }
                    reads += 1;
                }
            }
        });
    }
}

/// Caches on two threads (one making a new cache now and then, so slots
/// are given back and claimed again; one yielding between its loads, so
/// values are parked behind it) while the writer replaces the value
/// through every write path: every value read is alive (checked again
/// after a yield) and goes forward, and every value made is dropped once,
/// the kept ones after their cache moved on.
#[test]
fn cached_readers_and_writers() {
    for (name, d) in domains() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(&d, Value::new(0, &live));
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            let cell = &cell;
            spawn_cached_readers(s, &stop, || cell.cache(), |c| Some(c.load()));
            for i in 1..=OPS as u64 {
                match i % 5 {
                    0 => cell.store(Value::new(i, &live)),
                    1 => {
                        let guard = d.read();
                        assert_eq!(cell.swap(Value::new(i, &live), &guard).check(), i - 1);
                    }
                    2 => {
                        let guard = d.read();
                        let seen = cell.load(&guard);
                        assert!(cell
                            .compare_exchange(seen, Value::new(i, &live), &guard)
                            .is_ok());
                    }
                    3 => cell.update(|v| Value::new(v.n + 1, &live)),
                    _ => assert_eq!(cell.replace(Value::new(i, &live)).check(), i - 1, "{name}"),
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        drop(cell);
        d.barrier();
        assert_eq!(
            live.load(Ordering::Relaxed),
            0,
            "{name}: every value dropped once"
        );
    }
}

/// `OptionCache`s (`RcuOption::cache`) against a writer that empties and
/// refills the cell: a cache keeping `None` protects nothing, one keeping
/// a value reads it alive until its next load; every value made is
/// dropped once.
#[test]
fn option_cached_readers_and_writers() {
    for (name, d) in domains() {
        let live = Arc::new(AtomicUsize::new(0));
        let cell: RcuOption<Value> = RcuOption::empty(&d);
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            let cell = &cell;
            spawn_cached_readers(s, &stop, || cell.cache(), |c| c.load());
            for i in 1..=OPS as u64 {
                match i % 4 {
                    0 => cell.take(),
                    1 => cell.store(Some(Value::new(i, &live))),
                    2 => drop(cell.replace(None)),
                    _ => drop(cell.replace(Some(Value::new(i, &live)))),
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        drop(cell);
        d.barrier();
        assert_eq!(
            live.load(Ordering::Relaxed),
            0,
            "{name}: every value dropped once"
        );
    }
}

/// An `RcuOption` emptied and refilled under two readers: `None` costs no
/// allocation, and every value made is dropped once.
#[test]
fn option_readers_and_writers() {
    for (name, d) in domains() {
        let live = Arc::new(AtomicUsize::new(0));
        let slot = Arc::new(RcuOption::empty(&d));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|kind| {
                let (d, slot, stop, seen) = (d.clone(), slot.clone(), stop.clone(), seen.clone());
                thread::spawn(move || {
                    let mut reader = d.reader();
                    for _ in 0..READS {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let n = if kind == 0 {
                            let guard = d.read();
                            slot.load(&guard).map(Value::check)
                        } else {
                            let guard = reader.read();
                            slot.load(&guard).map(Value::check)
                        };
                        if n.is_some() {
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for i in 1..=OPS as u64 {
            let guard = d.read();
            match i % 4 {
                0 => {
                    drop(guard);
                    slot.take();
                }
                1 => {
                    let won = slot.compare_exchange(None, Some(Value::new(i, &live)), &guard);
                    assert!(won.is_ok(), "{name}: the slot was empty");
                    let lost = slot
                        .compare_exchange(None, Some(Value::new(i, &live)), &guard)
                        .err()
                        .expect("no longer empty");
                    assert_eq!(lost.current.map(Value::check), Some(i));
                    assert!(lost.new.is_some(), "given back");
                }
                2 => {
                    let old = slot.swap(None, &guard).map(Value::check);
                    assert_eq!(old, Some(i - 1), "{name}");
                    drop(guard);
                    slot.update(|v| {
                        assert!(v.is_none());
                        Some(Value::new(i, &live))
                    });
                }
                _ => {
                    drop(guard);
                    let old = slot.replace(Some(Value::new(i, &live)));
                    assert_eq!(old.as_ref().map(Value::check), Some(i - 1), "{name}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        let mut slot = Arc::into_inner(slot).expect("readers are gone");
        assert!(slot.get_mut().is_none(), "{name}: the last op emptied it");
        assert!(slot.into_inner().is_none());
        d.barrier();
        assert_eq!(
            live.load(Ordering::Relaxed),
            0,
            "{name}: every value dropped once"
        );
    }
}

/// `get_mut` and `into_inner` hand the value out without a grace period;
/// dropping a cell drops its value at once.
#[test]
fn owned_access() {
    let d = Domain::builder().reclaimer(Reclaimer::Inline).build();
    let live = Arc::new(AtomicUsize::new(0));
    let mut cell = RcuCell::new(&d, Value::new(1, &live));
    cell.get_mut().n = 2;
    let v = cell.into_inner();
    assert_eq!((v.check(), live.load(Ordering::Relaxed)), (2, 1));
    drop(v);
    let cell = RcuCell::new(&d, Value::new(3, &live));
    drop(cell);
    assert_eq!(live.load(Ordering::Relaxed), 0, "dropped with the cell");
    assert_eq!(d.stats().callbacks_run, 0, "nothing was deferred");
}

/// A guard of another domain does not protect a cell: every access with
/// one panics, and nothing is replaced.
#[test]
fn guard_of_another_domain_panics() {
    let (a, b) = (Domain::new(), Domain::new());
    let cell = RcuCell::new(&a, 1u32);
    let slot = RcuOption::new(&a, Some(1u32));
    let mut reader = b.reader();
    let calls: [(&str, &dyn Fn()); 4] = [
        ("load", &|| {
            let _ = cell.load(&b.read());
        }),
        ("swap", &|| {
            let _ = cell.swap(2, &b.read());
        }),
        ("compare_exchange", &|| {
            let g = a.read();
            let seen = cell.load(&g);
            let _ = cell.compare_exchange(seen, 2, &b.read());
        }),
        ("option load", &|| {
            let _ = slot.load(&b.read());
        }),
    ];
    for (what, call) in calls {
        let err = panic::catch_unwind(AssertUnwindSafe(call)).expect_err(what);
        let msg = err.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(msg.contains("guard of another domain"), "{what}: {msg}");
    }
    let err = panic::catch_unwind(AssertUnwindSafe(|| {
        let g = reader.read();
        let _ = cell.load(&g);
    }));
    assert!(err.is_err(), "a Reader's guard of another domain");
    let err = panic::catch_unwind(AssertUnwindSafe(|| {
        let _g = a.read();
        cell.replace(3)
    }));
    assert!(err.is_err(), "replace inside a read section of the domain");
    assert_eq!(cell.with(|v| *v), 1, "nothing was replaced");
}

thread_local! {
    static READER: RefCell<Option<Reader>> = const { RefCell::new(None) };
}

/// An owned `Reader` in a thread-local: its section holds off the drop of
/// a value it loaded and the grace periods started meanwhile, counts for
/// the deadlock checks, and the reader is released (its record reused)
/// when the thread exits, before or after the thread's own exitq state
/// (rounds 1 and 2: the destructors run in both orders), also when it
/// holds the thread's last handle of the domain (round 2).
#[test]
fn reader_in_a_thread_local() {
    let d = Domain::new();
    let live = Arc::new(AtomicUsize::new(0));
    let cell = Arc::new(RcuCell::new(&d, Value::new(0, &live)));
    for round in 0..3u64 {
        let (in_tx, in_rx) = mpsc::channel::<()>();
        let (out_tx, out_rx) = mpsc::channel::<()>();
        let (d2, cell2) = (d.clone(), cell.clone());
        let t = thread::spawn(move || {
            if round == 1 {
                d2.defer(|| ()); // main record (and its exit destructor) first
            }
            READER.with_borrow_mut(|r| *r = Some(d2.reader()));
            if round == 2 {
                d2.defer(|| ()); // main record after the reader
            }
            READER.with_borrow_mut(|r| {
                let reader = r.as_mut().unwrap();
                let guard = reader.read();
                let value = cell2.load(&guard);
                assert_eq!(value.check(), round);
                let waited = panic::catch_unwind(AssertUnwindSafe(|| d2.synchronize()));
                assert!(
                    waited.is_err(),
                    "synchronize inside an owned reader's section panics"
                );
                in_tx.send(()).unwrap();
                out_rx.recv().unwrap();
                // Replaced meanwhile, and not dropped: the section holds.
                assert_eq!(value.check(), round);
            });
            if round == 2 {
                drop(d2); // the thread-local reader holds the thread's last handle
            }
        });
        in_rx.recv().unwrap();
        cell.store(Value::new(round + 1, &live));
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (d, done) = (d.clone(), done.clone());
            thread::spawn(move || {
                d.synchronize();
                done.store(true, Ordering::Release);
            })
        };
        thread::sleep(Duration::from_millis(20));
        assert!(
            !done.load(Ordering::Acquire),
            "round {round}: a grace period ended inside the reader's section"
        );
        out_tx.send(()).unwrap();
        t.join().unwrap();
        waiter.join().unwrap();
        assert!(done.load(Ordering::Acquire));
    }
    d.barrier();
    assert_eq!(
        live.load(Ordering::Relaxed),
        1,
        "only the current value is left"
    );
    let participants = d.stats().participants;
    let t = {
        let d = d.clone();
        thread::spawn(move || READER.with_borrow_mut(|r| *r = Some(d.reader())))
    };
    t.join().unwrap();
    assert_eq!(
        d.stats().participants,
        participants,
        "the exited threads' records were released and reused"
    );
}

/// A reader that holds the domain's last handle: dropping it shuts the
/// domain down, running what was deferred.
#[test]
fn reader_holds_the_last_handle() {
    let ran = Arc::new(AtomicUsize::new(0));
    // No idle steal: under miri the flush latency passes between any two
    // steps, and the reclaimer would run the callback before the drop.
    let reader = Domain::builder()
        .flush_latency(Duration::from_secs(3600))
        .build()
        .reader();
    let r = ran.clone();
    reader.domain().defer(move || {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let cell = RcuCell::new(reader.domain(), 1u32);
    cell.store(2);
    drop(cell);
    assert_eq!(ran.load(Ordering::Relaxed), 0, "the domain still lives");
    drop(reader);
    assert_eq!(ran.load(Ordering::Relaxed), 1, "shutdown ran the callback");
}
