//! `RcuCell::cache` (`CellCache`): a cache reads the value it kept without
//! a section; the value survives its grace period while a cache keeps it,
//! and is dropped once the cache moves on (a miss or its drop), exactly
//! once; a cache holds no grace period; `replace` waits for another
//! thread's cache and refuses to wait for its own. `RcuOption::cache`
//! (`OptionCache`) the same, with the cell empty now and then.
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use exitq::{Domain, HeldBy, RcuCell, RcuOption, Stall};

mod value_util;
use value_util::{dropped, Value};

#[test]
fn a_load_after_a_store_returns_the_new_value() {
    let d = Domain::new();
    let cell = RcuCell::new(&d, 1u64);
    let mut cache = cell.cache();
    assert_eq!(*cache.load(), 1);
    assert_eq!(*cache.load(), 1);
    cell.store(2);
    assert_eq!(*cache.load(), 2);
    cell.update(|v| v + 1);
    assert_eq!(*cache.load(), 3);
    {
        let g = d.read();
        cell.swap(4, &g);
    }
    assert_eq!(*cache.load(), 4);
    assert_eq!(format!("{cache:?}"), "CellCache { kept: 4 }");
}

/// A value replaced while a cache keeps it outlives its grace period
/// (`barrier` runs its callback) and is dropped after the cache's next
/// load, or its drop: once.
#[test]
fn the_kept_value_survives_until_the_cache_moves_on() {
    for moves_on_by_dropping in [false, true] {
        let d = Domain::new();
        let drops = Arc::new(AtomicUsize::new(0));
        let cell = RcuCell::new(&d, Value::new(1, &drops));
        let mut cache = cell.cache();
        assert_eq!(cache.load().check(), 1);
        cell.store(Value::new(2, &drops));
        d.barrier();
        assert_eq!(dropped(&drops), 0, "the kept value was dropped");
        // Read through the kept value (its `Debug`): still alive.
        assert!(format!("{cache:?}").contains("n: 1"));
        if !moves_on_by_dropping {
            assert_eq!(cache.load().check(), 2);
        }
        drop(cache);
        d.barrier();
        assert_eq!(dropped(&drops), 1, "dropped once the cache moved on");
        d.barrier();
        assert_eq!(dropped(&drops), 1);
        drop(cell);
        assert_eq!(dropped(&drops), 2);
    }
}

/// Two caches, one idle keeping the first value while the other follows
/// every write: the busy cache's misses free each value it moved off
/// (the writer flagged its slot when it parked them) and leave the idle
/// cache's value alive, parked; the idle cache's next load frees it.
#[test]
fn an_idle_cache_keeps_its_value_while_another_moves_on() {
    const WRITES: u64 = 100;
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(0, &drops));
    let mut idle = cell.cache();
    assert_eq!(idle.load().check(), 0);
    let mut busy = cell.cache();
    for i in 1..=WRITES {
        cell.store(Value::new(i, &drops));
        d.barrier();
        assert_eq!(busy.load().check(), i);
    }
    d.barrier();
    assert_eq!(
        dropped(&drops),
        WRITES as usize - 1,
        "every value the busy cache moved off, none the idle one keeps"
    );
    assert!(
        format!("{idle:?}").contains("n: 0"),
        "the idle cache's value"
    );
    assert_eq!(idle.load().check(), WRITES);
    d.barrier();
    assert_eq!(dropped(&drops), WRITES as usize);
    drop(idle);
    drop(busy);
    drop(cell);
    assert_eq!(dropped(&drops), WRITES as usize + 1);
}

/// Many caches keeping one value: parked behind all of them, parked
/// again by each one that moves on while others still keep it, dropped
/// once, when the last one moves on.
#[test]
fn many_caches_keeping_one_value() {
    const CACHES: usize = 200;
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(0, &drops));
    let mut caches: Vec<_> = (0..CACHES).map(|_| cell.cache()).collect();
    for c in &mut caches {
        assert_eq!(c.load().check(), 0);
    }
    cell.store(Value::new(1, &drops));
    d.barrier();
    assert_eq!(dropped(&drops), 0, "kept by every cache");
    for (i, c) in caches.iter_mut().enumerate() {
        assert_eq!(c.load().check(), 1);
        d.barrier();
        assert_eq!(
            dropped(&drops),
            usize::from(i + 1 == CACHES),
            "dropped once the last cache moved on, not before"
        );
    }
    drop(caches);
    drop(cell);
    assert_eq!(dropped(&drops), 2);
}

/// A cache on an unchanged cell holds no grace period: another thread's
/// `synchronize` returns while the cache stays alive and idle, and a
/// value no cache keeps is dropped after its grace period as without
/// caches.
#[test]
fn a_cache_holds_no_grace_period() {
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(1, &drops));
    let other = RcuCell::new(&d, Value::new(10, &drops));
    let mut cache = cell.cache();
    assert_eq!(cache.load().check(), 1);
    other.store(Value::new(11, &drops));
    let d2 = d.clone();
    thread::spawn(move || d2.synchronize()).join().unwrap();
    d.synchronize();
    d.barrier();
    assert_eq!(dropped(&drops), 1, "the other cell's old value");
    let mut second = cell.cache();
    assert_eq!(second.load().check(), 1);
    drop(cache);
    cell.store(Value::new(2, &drops));
    d.barrier();
    assert_eq!(dropped(&drops), 1, "kept by the second cache");
    assert_eq!(second.load().check(), 2);
    d.barrier();
    assert_eq!(dropped(&drops), 2);
}

/// `replace` gives the old value back only once no cache keeps it: it
/// waits for another thread's cache to load again; with a cache of its
/// own thread keeping it, it panics before replacing anything.
#[test]
fn replace_waits_for_the_caches() {
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(1, &drops));
    let (kept_tx, kept_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let returned = AtomicBool::new(false);
    thread::scope(|s| {
        let (cell, returned) = (&cell, &returned);
        s.spawn(move || {
            let mut cache = cell.cache();
            assert_eq!(cache.load().check(), 1);
            kept_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            assert!(
                !returned.load(Ordering::Acquire),
                "replace returned while a cache kept the value"
            );
            assert_eq!(cache.load().check(), 2);
        });
        kept_rx.recv().unwrap();
        s.spawn(move || {
            thread::sleep(Duration::from_millis(50));
            go_tx.send(()).unwrap();
        });
        let old = cell.replace(Value::new(2, &drops));
        returned.store(true, Ordering::Release);
        assert_eq!(old.check(), 1);
    });
    let mut cache = cell.cache();
    assert_eq!(cache.load().check(), 2);
    let err = panic::catch_unwind(AssertUnwindSafe(|| cell.replace(Value::new(3, &drops))));
    assert!(
        err.is_err(),
        "replace with this thread's cache keeping the value"
    );
    assert_eq!(cache.load().check(), 2, "nothing was replaced");
    d.barrier();
    assert_eq!(dropped(&drops), 2, "the refused value and the returned one");
}

/// A `replace` held up by another thread's cache for longer than the
/// stall timeout reports it once, through the stall handler (the cache's
/// thread, `HeldBy::Cache`), and returns once that cache moves on.
#[test]
fn replace_reports_a_cache_that_holds_it_up() {
    let (stall_tx, stall_rx) = mpsc::channel::<Stall>();
    let d = Domain::builder()
        .stall_timeout(Duration::from_millis(50))
        .stall_handler(move |s| stall_tx.send(s.clone()).unwrap())
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(1, &drops));
    let (kept_tx, kept_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::scope(|s| {
        let cell = &cell;
        thread::Builder::new()
            .name("cache-holder".into())
            .spawn_scoped(s, move || {
                let mut cache = cell.cache();
                assert_eq!(cache.load().check(), 1);
                // SAFETY: gettid has no preconditions.
                kept_tx.send(unsafe { libc::gettid() }).unwrap();
                // Until the stall is reported (or the test gave up).
                let _ = go_rx.recv_timeout(Duration::from_secs(120));
                drop(cache);
            })
            .unwrap();
        let holder = kept_rx.recv().unwrap();
        let replacer = s.spawn(move || cell.replace(Value::new(2, &drops)).check());
        let stall = stall_rx.recv_timeout(Duration::from_secs(60));
        go_tx.send(()).unwrap();
        let stall = stall.expect("no stall report within 60 s");
        assert_eq!(stall.held_by, HeldBy::Cache);
        assert_eq!(stall.tid, holder, "the cache's thread");
        assert_eq!(stall.thread_name.as_deref(), Some("cache-holder"));
        assert!(stall.waited >= Duration::from_millis(50), "{stall:?}");
        assert!(stall.to_string().contains("replace() stalled"), "{stall}");
        assert_eq!(replacer.join().unwrap(), 1, "the old value");
    });
    assert!(stall_rx.try_recv().is_err(), "reported once");
    assert_eq!(d.stats().stalls, 1);
}

/// A forgotten cache keeps its value until the cell and its callbacks are
/// gone; nothing is dropped twice, nothing is lost.
#[test]
fn a_forgotten_cache_leaks_its_value_until_the_cell_drops() {
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(1, &drops));
    let mut cache = cell.cache();
    assert_eq!(cache.load().check(), 1);
    std::mem::forget(cache);
    cell.store(Value::new(2, &drops));
    d.barrier();
    assert_eq!(dropped(&drops), 0, "kept by the forgotten cache");
    drop(cell);
    d.barrier();
    assert_eq!(dropped(&drops), 2, "both dropped with the cell");
}

/// Caches on several threads against writers through every write path:
/// every value read is alive and goes forward, every value made is
/// dropped exactly once.
#[test]
fn cached_readers_against_writers() {
    const OPS: u64 = 20_000;
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Value::new(0, &drops));
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for kind in 0..3u64 {
            let (cell, stop) = (&cell, &stop);
            s.spawn(move || {
                let mut last = 0;
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // A new cache now and then (slots given back, reused).
                    let mut cache = cell.cache();
                    for _ in 0..(100 + kind * 1000) {
                        let n = cache.load().check();
                        assert!(n >= last, "values go forward: {n} after {last}");
                        last = n;
                        reads += 1;
                        if kind == 2 && reads % 64 == 0 {
                            thread::yield_now();
                        }
                    }
                }
            });
        }
        for i in 1..=OPS {
            match i % 5 {
                0 => cell.store(Value::new(i, &drops)),
                1 => {
                    let g = d.read();
                    assert_eq!(cell.swap(Value::new(i, &drops), &g).check(), i - 1);
                }
                2 => {
                    let g = d.read();
                    let seen = cell.load(&g);
                    assert!(cell
                        .compare_exchange(seen, Value::new(i, &drops), &g)
                        .is_ok());
                }
                3 => cell.update(|v| Value::new(v.n + 1, &drops)),
                _ => assert_eq!(cell.replace(Value::new(i, &drops)).check(), i - 1),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    d.barrier();
    assert_eq!(dropped(&drops), OPS as usize, "every replaced value, once");
    drop(cell);
    assert_eq!(dropped(&drops), OPS as usize + 1);
}

/// A value whose `Drop` panics, dropped after its cache moved on (the
/// cache hands it to the domain) or straight from its callback (no cache
/// kept it): each panic is caught and counted as a callback's, each value
/// dropped once, and the cell and its caches go on working.
#[test]
fn a_panicking_drop_is_caught_and_counted() {
    struct Bomb(Arc<AtomicUsize>);
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
            panic!("a value's drop panics");
        }
    }
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuCell::new(&d, Some(Bomb(drops.clone())));
    let mut cache = cell.cache();
    assert!(cache.load().is_some());
    cell.store(None); // kept by the cache: parked, then collected
    d.barrier();
    assert_eq!(dropped(&drops), 0);
    assert!(cache.load().is_none());
    d.barrier();
    assert_eq!((dropped(&drops), d.stats().callbacks_panicked), (1, 1));
    cell.store(Some(Bomb(drops.clone())));
    assert!(cache.load().is_some());
    let mut other = cell.cache();
    assert!(other.load().is_some());
    cell.store(None);
    drop(cache); // both move on: the value is dropped by a callback
    assert!(other.load().is_none());
    d.barrier();
    d.barrier();
    assert_eq!((dropped(&drops), d.stats().callbacks_panicked), (2, 2));
}

/// An `OptionCache` follows its cell through empty and full: `None` while
/// empty, the value it kept alive until it moves on, and `replace` may
/// wait on this thread while its cache keeps `None` (nothing to keep
/// alive) but not while it keeps a value.
#[test]
fn an_option_cache_follows_empty_and_full() {
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell = RcuOption::empty(&d);
    let mut cache = cell.cache();
    assert!(cache.load().is_none());
    assert_eq!(format!("{cache:?}"), "OptionCache { kept: None }");
    assert!(cell.replace(Some(Value::new(1, &drops))).is_none());
    assert_eq!(cache.load().map(Value::check), Some(1));
    cell.take(); // kept by the cache: dropped once it moves on
    d.barrier();
    assert_eq!(dropped(&drops), 0, "the kept value was dropped");
    assert!(format!("{cache:?}").contains("n: 1"));
    assert!(cache.load().is_none());
    d.barrier();
    assert_eq!(dropped(&drops), 1, "dropped once the cache moved on");
    // Keeping `None`, this thread may replace (and wait for others).
    assert!(cell.replace(Some(Value::new(2, &drops))).is_none());
    assert_eq!(cache.load().map(Value::check), Some(2));
    let err = panic::catch_unwind(AssertUnwindSafe(|| cell.replace(None)));
    assert!(
        err.is_err(),
        "replace with this thread's cache keeping the value"
    );
    assert_eq!(
        cache.load().map(Value::check),
        Some(2),
        "nothing was replaced"
    );
    drop(cache);
    assert_eq!(cell.replace(None).map(|v| v.check()), Some(2));
    d.barrier();
    assert_eq!(dropped(&drops), 2);
    let mut cache = cell.cache();
    assert!(cache.load().is_none());
    cell.store(Some(Value::new(3, &drops)));
    assert_eq!(cache.load().map(Value::check), Some(3));
    drop(cache);
    drop(cell);
    assert_eq!(dropped(&drops), 3);
}

/// Option caches on several threads against a writer that fills and
/// empties the cell through every write path: every value read is alive
/// and goes forward, every value made is dropped exactly once.
#[test]
fn option_caches_against_writers() {
    const OPS: u64 = 20_000;
    let d = Domain::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let cell: RcuOption<Value> = RcuOption::empty(&d);
    let stop = AtomicBool::new(false);
    // The writer starts once both readers run, and each reader makes at
    // least one round of loads: a reader that started only after the
    // writer was done read nothing (the check `empty + full > 0` below
    // failed when a reader's thread started 3 s late).
    let started = std::sync::Barrier::new(3);
    let made = thread::scope(|s| {
        for kind in 0..2u64 {
            let (cell, stop, started) = (&cell, &stop, &started);
            s.spawn(move || {
                let mut last = 0;
                let (mut empty, mut full) = (0u64, 0u64);
                started.wait();
                let mut first = true;
                while std::mem::take(&mut first) || !stop.load(Ordering::Relaxed) {
                    let mut cache = cell.cache();
                    for _ in 0..(100 + kind * 1000) {
                        match cache.load() {
                            Some(v) => {
                                let n = v.check();
                                assert!(n >= last, "values go forward: {n} after {last}");
                                last = n;
                                full += 1;
                            }
                            None => empty += 1,
                        }
                    }
                }
                assert!(empty + full > 0);
            });
        }
        started.wait();
        let mut made = 0;
        for i in 1..=OPS {
            match i % 6 {
                0 => cell.take(),
                1 => {
                    let g = d.read();
                    cell.swap(None, &g);
                }
                2 => {
                    let g = d.read();
                    let seen = cell.load(&g);
                    let fresh = Some(Value::new(i, &drops));
                    made += 1;
                    assert!(cell.compare_exchange(seen, fresh, &g).is_ok());
                }
                3 => {
                    made += 1;
                    cell.update(|_| Some(Value::new(i, &drops)));
                }
                4 => {
                    made += 1;
                    drop(cell.replace(Some(Value::new(i, &drops))));
                }
                _ => {
                    made += 1;
                    cell.store(Some(Value::new(i, &drops)));
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        made
    });
    d.barrier();
    let left = usize::from(cell.with(|v| v.is_some()));
    assert_eq!(dropped(&drops) + left, made, "every replaced value, once");
    drop(cell);
    assert_eq!(dropped(&drops), made);
}
