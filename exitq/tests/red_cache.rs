//! Red-team tests of the cell caches (`exitq/src/cell/keep.rs`).
//!
//! Passing on d8a92f5, each failing under a mutation no other test
//! catches: `one_run_two_cells_with_caches` (a look keyed by the run
//! only), `a_look_that_overflows_scans` (a look that keeps its first 8
//! values instead of overflowing), `nested_runs_look_again`
//! (`current_run` returning the outermost run). Also a cache dropped at
//! thread exit, and two stresses (panicking drops, forgotten caches).
//!
//! Failed on d8a92f5 (leaks and a hang, no use-after-free), fixed since:
//! `zero_sized_values_are_dropped_after_the_cache_loads_again` and
//! `replace_of_a_zero_sized_value_returns_once_the_other_cache_loads`
//! (every boxed zero-sized value had the same address, so a cache never
//! missed and its slot protected every retired value for ever: now each
//! gets a byte of its own, `cell/boxed.rs`), and
//! `a_panicking_drop_at_the_cells_drop_leaks_nothing` (`Keepers::drop`
//! stopped at the first panicking drop, and `Raw::drop` leaked the
//! `Keepers` when the cell's own value panicked: both now go on while
//! unwinding).
//!
//! Under miri too (`scripts/test.d/30-miri.sh`): the two deterministic
//! zero-sized and panicking-drop tests and the look's key and overflow
//! (`nested_runs_look_again` leaks a domain on purpose).
use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use exitq::{CellCache, Domain, RcuCell, Reclaimer};

mod value_util;
use value_util::{dropped, Value};

/// How long a wait for something that takes milliseconds may last before
/// it is taken for a hang: long enough that a loaded machine never trips it.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

fn inline_domain() -> Domain {
    Domain::builder().reclaimer(Reclaimer::Inline).build()
}

/// One run releases values of two cells with caches: the look taken for
/// the first cell's slots must not serve the second's (the look's key is
/// the run and the `Keepers`).
#[test]
fn one_run_two_cells_with_caches() {
    for d in [inline_domain(), Domain::new()] {
        let drops = Arc::new(AtomicUsize::new(0));
        let c1 = RcuCell::new(&d, Value::new(10, &drops));
        let c2 = RcuCell::new(&d, Value::new(20, &drops));
        let mut k1 = c1.cache();
        let mut k2 = c2.cache();
        assert_eq!(k1.load().check(), 10);
        let r2 = k2.load();
        assert_eq!(r2.check(), 20);
        c1.store(Value::new(11, &drops));
        c2.store(Value::new(21, &drops));
        d.barrier();
        assert_eq!(dropped(&drops), 0, "both old values are kept by caches");
        assert_eq!(r2.check(), 20);
        drop(k1);
        drop(k2);
        d.barrier();
        d.barrier();
        assert_eq!(dropped(&drops), 2);
        drop((c1, c2));
        assert_eq!(dropped(&drops), 4);
    }
}

/// More distinct values kept than a look remembers (8): the values kept
/// only by the slots past the eighth must be found by a scan.
#[test]
fn a_look_that_overflows_scans() {
    for n in [8usize, 9, 10, 17] {
        for d in [inline_domain(), Domain::new()] {
            let drops = Arc::new(AtomicUsize::new(0));
            let cell = RcuCell::new(&d, Value::new(0, &drops));
            let mut caches: Vec<_> = (0..n).map(|_| cell.cache()).collect();
            let mut refs = Vec::new();
            for (i, c) in caches.iter_mut().enumerate() {
                cell.store(Value::new(i as u64 + 1, &drops));
                let r = c.load();
                assert_eq!(r.check(), i as u64 + 1);
                refs.push(r);
            }
            d.barrier();
            // Value 0 is kept by no cache (each loaded after a store).
            assert_eq!(dropped(&drops), 1);
            cell.store(Value::new(1000, &drops));
            d.barrier();
            d.barrier();
            assert_eq!(dropped(&drops), 1, "n = {n}: a kept value was dropped");
            for (i, r) in refs.iter().enumerate() {
                assert_eq!(r.check(), i as u64 + 1);
            }
            drop(refs);
            drop(caches);
            d.barrier();
            d.barrier();
            assert_eq!(dropped(&drops), n + 1);
            drop(cell);
            assert_eq!(dropped(&drops), n + 2);
        }
    }
}

thread_local! {
    static CACHE: RefCell<Option<CellCache<'static, Value>>> = const { RefCell::new(None) };
}

/// A callback of domain A runs B's barrier twice (two nested runs of B's
/// callbacks inside one run of A), with a write to a cell of B and a
/// cache adopting its value in between: the second nested run must look
/// at the slots again (a look keyed by the outer run would miss the
/// value the cache adopted after the first look).
#[test]
fn nested_runs_look_again() {
    let a = inline_domain();
    let b: &'static Domain = Box::leak(Box::new(inline_domain()));
    let drops = Arc::new(AtomicUsize::new(0));
    let cell: &'static RcuCell<Value> = Box::leak(Box::new(RcuCell::new(b, Value::new(0, &drops))));
    CACHE.with(|c| {
        let mut cache = cell.cache();
        assert_eq!(cache.load().check(), 0);
        *c.borrow_mut() = Some(cache);
    });
    let main = std::thread::current().id();
    let ran = Arc::new(AtomicUsize::new(0));
    {
        let (drops, ran) = (drops.clone(), ran.clone());
        a.defer(move || {
            assert_eq!(std::thread::current().id(), main, "A's callback on main");
            cell.store(Value::new(1, &drops));
            b.barrier(); // nested run 1: value 0 parked (kept by the cache)
            CACHE.with(|c| {
                let mut c = c.borrow_mut();
                let cache = c.as_mut().unwrap();
                let r = cache.load(); // a miss: keeps value 1, frees 0
                assert_eq!(r.check(), 1);
                cell.store(Value::new(2, &drops));
                b.barrier(); // nested run 2: value 1 is kept
                b.barrier();
                assert_eq!(r.check(), 1);
                assert_eq!(dropped(&drops), 1, "only value 0 dropped");
            });
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    a.barrier();
    a.barrier();
    assert_eq!(
        ran.load(Ordering::Relaxed),
        1,
        "the callback ran and passed"
    );
    assert_eq!(a.stats().callbacks_panicked, 0);
    CACHE.with(|c| drop(c.borrow_mut().take()));
    b.barrier();
    b.barrier();
    assert_eq!(dropped(&drops), 2);
}

thread_local! {
    static TLS_CACHE: RefCell<Option<CellCache<'static, Value>>> = const { RefCell::new(None) };
}

/// A cache in a thread-local keeps a value that a writer replaced (it is
/// parked); the thread exits and the cache drops during thread-local
/// teardown, before or after the domain's own thread state: its collect
/// hands the value to the domain from there, and it is dropped once.
#[test]
fn a_cache_dropped_at_thread_exit() {
    for exitq_first in [false, true] {
        for d in [inline_domain(), Domain::new()] {
            let d: &'static Domain = Box::leak(Box::new(d));
            let drops = Arc::new(AtomicUsize::new(0));
            let cell: &'static RcuCell<Value> =
                Box::leak(Box::new(RcuCell::new(d, Value::new(0, &drops))));
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (tx2, rx2) = std::sync::mpsc::channel::<()>();
            let t = std::thread::spawn(move || {
                if exitq_first {
                    // The domain's thread state first: destroyed last.
                    d.defer(|| ());
                }
                TLS_CACHE.with(|c| {
                    let mut cache = cell.cache();
                    assert_eq!(cache.load().check(), 0);
                    *c.borrow_mut() = Some(cache);
                });
                if !exitq_first {
                    d.defer(|| ());
                }
                tx.send(()).unwrap();
                rx2.recv().unwrap();
            });
            rx.recv().unwrap();
            cell.store(Value::new(1, &drops));
            d.barrier();
            d.barrier();
            assert_eq!(dropped(&drops), 0, "kept by the thread's cache");
            tx2.send(()).unwrap();
            t.join().unwrap();
            for _ in 0..4 {
                d.exit_barrier();
                d.barrier();
            }
            assert_eq!(
                dropped(&drops),
                1,
                "exitq_first {exitq_first}: dropped once after the thread exit"
            );
        }
    }
}

/// A value for the stress: counts its making and its drop, carries a
/// canary cleared by its drop, and may panic in its drop (after
/// counting).
struct Noisy {
    canary: u64,
    n: u64,
    panics: bool,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    made: AtomicUsize,
    dropped: AtomicUsize,
    bad_reads: AtomicUsize,
}

const CANARY: u64 = 0x5eed_f00d_cafe_beef;

impl Noisy {
    fn new(n: u64, panics: bool, counts: &Arc<Counts>) -> Noisy {
        counts.made.fetch_add(1, Ordering::Relaxed);
        Noisy {
            canary: CANARY,
            n,
            panics,
            counts: counts.clone(),
        }
    }

    fn check(&self) -> u64 {
        // Volatile: a freed value's memory, reused, shows another canary.
        // SAFETY: `&self.canary` is a valid, aligned reference (a read
        // through it after a free is what the canary is there to catch).
        let c = unsafe { std::ptr::read_volatile(&self.canary) };
        assert_eq!(c, CANARY, "read a dropped value (n = {})", self.n);
        self.n
    }
}

impl Drop for Noisy {
    fn drop(&mut self) {
        assert_eq!(self.canary, CANARY, "dropped twice");
        self.canary = 0;
        self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        if self.panics {
            panic!("a noisy drop");
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn stress(d: Domain, panic_one_in: u64, forget: bool, millis: u64) {
    const CELLS: usize = 3;
    const READERS: usize = 3;
    const CACHES: usize = 5; // per reader and cell: 15 per cell
    let counts = Arc::new(Counts::default());
    let cells: Vec<RcuCell<Noisy>> = (0..CELLS)
        .map(|i| RcuCell::new(&d, Noisy::new(i as u64, false, &counts)))
        .collect();
    let stop = AtomicBool::new(false);
    let panics = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("a noisy drop") {
            panics(info);
        }
    }));
    std::thread::scope(|s| {
        for r in 0..READERS {
            let (cells, stop) = (&cells, &stop);
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((r as u64 + 1) * 0x1234_5678));
                let mut caches: Vec<Vec<Option<CellCache<'_, Noisy>>>> = cells
                    .iter()
                    .map(|c| (0..CACHES).map(|_| Some(c.cache())).collect())
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.below(CELLS as u64) as usize;
                    let k = rng.below(CACHES as u64) as usize;
                    match rng.below(100) {
                        0..=79 => {
                            if let Some(c) = caches[i][k].as_mut() {
                                let v = c.load();
                                v.check();
                                if rng.below(8) == 0 {
                                    std::thread::yield_now();
                                    v.check();
                                }
                            }
                        }
                        80..=89 => std::thread::yield_now(),
                        90..=97 => {
                            caches[i][k] = match caches[i][k].take() {
                                Some(_) => None,
                                None => Some(cells[i].cache()),
                            };
                        }
                        _ => {
                            if forget {
                                if let Some(mut c) = caches[i][k].take() {
                                    c.load().check();
                                    std::mem::forget(c);
                                }
                            }
                        }
                    }
                }
            });
        }
        for wr in 0..2 {
            let (cells, counts, d) = (&cells, &counts, &d);
            s.spawn(move || {
                let mut rng = Rng(0xdead_beef_1234_5678 ^ ((wr as u64 + 7) * 0x9876_5431));
                let mut n = 1000;
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_millis(millis) {
                    let i = rng.below(CELLS as u64) as usize;
                    n += 1;
                    let p = panic_one_in != 0 && rng.below(panic_one_in) == 0;
                    match rng.below(3) {
                        0 => cells[i].store(Noisy::new(n, p, counts)),
                        1 => {
                            let g = d.read();
                            cells[i].swap(Noisy::new(n, p, counts), &g).check();
                        }
                        // A value that loses the race is dropped here:
                        // never a panicking one.
                        _ => cells[i].update(|_| Noisy::new(n, false, counts)),
                    }
                    if rng.below(64) == 0 {
                        std::thread::yield_now();
                    }
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(millis));
        stop.store(true, Ordering::Relaxed);
    });
    for _ in 0..3 {
        d.barrier();
    }
    for c in cells {
        // A cell's own value never panics here; a forgotten cache's value
        // may be dropped by the `Keepers`.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(c)));
        assert!(r.is_ok() || panic_one_in != 0);
    }
    for _ in 0..3 {
        d.barrier();
    }
    drop(d);
    let _ = std::panic::take_hook();
    assert_eq!(counts.bad_reads.load(Ordering::Relaxed), 0);
    assert_eq!(
        counts.made.load(Ordering::Relaxed),
        counts.dropped.load(Ordering::Relaxed),
        "every value dropped once (panic 1/{panic_one_in}, forget {forget})"
    );
}

fn stress_millis() -> u64 {
    std::env::var("RED_STRESS_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500)
}

#[test]
fn stress_panicking_drops() {
    stress(Domain::new(), 8, false, stress_millis());
    stress(inline_domain(), 8, false, stress_millis());
}

#[test]
fn stress_forgotten_caches() {
    stress(Domain::new(), 0, true, stress_millis());
    stress(inline_domain(), 0, true, stress_millis());
}

/// A cache of a cell of zero-sized values: the values a writer replaced
/// are dropped once the cache loads again (it follows the cell, as with
/// any other type). Every zero-sized value has the same address, so the
/// cache's compare never misses and its slot holds that address for
/// ever: every replaced value stays parked while any cache of the cell
/// lives (a parked node per write).
#[test]
fn zero_sized_values_are_dropped_after_the_cache_loads_again() {
    // A zero-sized token: its drop counter is a static.
    struct Zst;
    static ZDROPS: AtomicUsize = AtomicUsize::new(0);
    impl Drop for Zst {
        fn drop(&mut self) {
            ZDROPS.fetch_add(1, Ordering::Relaxed);
        }
    }
    let d = inline_domain();
    let cell = RcuCell::new(&d, Zst);
    let mut cache = cell.cache();
    cache.load();
    for _ in 0..100 {
        cell.store(Zst);
    }
    d.barrier();
    cache.load(); // the cell changed 100 times: the cache moves on
    d.barrier();
    d.barrier();
    assert_eq!(
        ZDROPS.load(Ordering::Relaxed),
        100,
        "the 100 replaced values, dropped after the cache loaded again"
    );
    drop(cache);
    drop(cell);
}

/// `replace` waits for another thread's cache to load again (docs): with
/// zero-sized values that load is a hit, and `replace` never returned.
///
/// The test gave `replace` a fixed second (a sleep, then one look), which
/// a descheduled replacer thread could miss; now it waits up to 60 s for
/// what takes milliseconds, and `replace` starts only once the other
/// cache has loaded (it was a 50 ms sleep: a cache that had not loaded yet
/// kept nothing, and the test showed nothing).
#[test]
fn replace_of_a_zero_sized_value_returns_once_the_other_cache_loads() {
    struct Zst;
    let d = Domain::new();
    let cell = RcuCell::new(&d, Zst);
    let done = AtomicBool::new(false);
    let loaded = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let replaced = std::thread::scope(|s| {
        let (cell, stop, loaded) = (&cell, &stop, &loaded);
        s.spawn(move || {
            let mut cache = cell.cache();
            while !stop.load(Ordering::Relaxed) {
                cache.load();
                // SeqCst (test code): read by the test thread below.
                loaded.store(true, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        while !loaded.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let done = &done;
        s.spawn(move || {
            let _old: Zst = cell.replace(Zst);
            // SeqCst (test code): read by the test thread below.
            done.store(true, Ordering::SeqCst);
        });
        let start = std::time::Instant::now();
        while !done.load(Ordering::SeqCst) && start.elapsed() < LIMIT {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let replaced = done.load(Ordering::SeqCst);
        stop.store(true, Ordering::Relaxed);
        replaced
    });
    assert!(
        replaced,
        "replace still waiting after {LIMIT:?} while the other cache loads every 1 ms"
    );
}

/// A value whose drop may panic (after counting).
struct Bomb {
    panics: bool,
    drops: Arc<AtomicUsize>,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
        if self.panics {
            panic!("a bomb's drop");
        }
    }
}

/// Values parked behind forgotten caches are dropped when the cell (its
/// `Keepers`) drops; one of them panicking in its drop must not leak the
/// others (as a `Vec` drops every element when one panics), nor must the
/// cell's own value panicking leak the parked ones.
#[test]
fn a_panicking_drop_at_the_cells_drop_leaks_nothing() {
    let mut seen = Vec::new();
    for cell_value_panics in [false, true] {
        let d = inline_domain();
        let drops = Arc::new(AtomicUsize::new(0));
        let bomb = |panics| Bomb {
            panics,
            drops: drops.clone(),
        };
        // v0 kept by a forgotten cache, then v1 (panics unless the cell's
        // own value does), then the cell's own value v2.
        let cell = RcuCell::new(&d, bomb(false));
        let mut f0 = cell.cache();
        f0.load();
        std::mem::forget(f0);
        cell.store(bomb(!cell_value_panics));
        let mut f1 = cell.cache();
        f1.load();
        std::mem::forget(f1);
        cell.store(bomb(cell_value_panics));
        d.barrier();
        d.barrier();
        assert_eq!(dropped(&drops), 0, "both kept by forgotten caches");
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| drop(cell)));
        assert!(r.is_err(), "one drop panicked");
        d.barrier();
        seen.push((cell_value_panics, dropped(&drops)));
    }
    assert_eq!(
        seen,
        [(false, 3), (true, 3)],
        "(whether the cell's own value panics, values dropped of 3)"
    );
}
