//! No stack is reused while its thread still runs: a cancellation storm
//! over pooled stacks, with every thread still working on its stack *after*
//! the pool's exit hook has run (as glibc does for real), and canary words
//! at the far end of each stack.
//!
//! Each thread writes `RUNNING(token)` into the canary state word at the
//! far end of its stack and registers a lingering exit destructor (a pthread
//! key of the test's): it keeps watching that word and only restores the
//! pool's `IN_USE` value when it leaves. The linger runs after the pool's
//! exit hook by protocol, whatever the keys' indices: its first call only
//! sets its key again, which makes glibc run a second round of destructors,
//! and every destructor of the first round (the pool's hook among them) has
//! run before the second round begins. A pool that recycled the stack before the
//! thread is gone finds `RUNNING` there (the recycle CAS fails) and
//! quarantines the stack; the thread sees the word change under it.
//! Independently, a registry of stacks in use counts any stack that two
//! threads occupy at once.
//!
//! * The sound pool (join, then recycle), in both reap modes, with
//!   cancellation: zero canary violations, zero overlaps, stacks reused.
//! * The deliberately unsound pool (recycle at the exit hook): every such
//!   early recycle is caught by the canary check, proving the test can fail.
//!
//! One #[test] runs the scenarios in sequence (they share the statics
//! below).

mod stacks_util;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use exitq::stacks::{PooledThread, Reap, StackPool};
use stacks_util::{own_stack, usleep};

/// How a thread's lingering exit destructor ended.
const OUT_NONE: u32 = 0;
/// It restored IN_USE itself: nobody touched its stack while it ran.
const OUT_RESTORED: u32 = 1;
/// The canary changed under it: the pool took the stack while it ran.
const OUT_CAUGHT: u32 = 2;
/// It gave up waiting (unsound scenario only: would be a test failure).
const OUT_GAVE_UP: u32 = 3;

fn running(token: u64) -> u64 {
    0x5255_4e4e_494e_4700 ^ token
}

/// One thread's record (owned by the test, outlives the thread).
struct Rec {
    token: u64,
    /// Linger: `None` = until the canary changes (or 10 s), else this long.
    linger: Option<Duration>,
    canary: AtomicUsize,
    initial: AtomicU64,
    low: AtomicUsize,
    outcome: AtomicU32,
    /// Set by the linger's first call, which only re-arms the key.
    rearmed: AtomicBool,
    key: libc::pthread_key_t,
}

/// Stacks occupied right now (low address → threads on it).
static OCCUPIED: Mutex<Option<HashMap<usize, u32>>> = Mutex::new(None);
static OVERLAPS: AtomicUsize = AtomicUsize::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

fn occupy(low: usize) {
    let mut g = OCCUPIED.lock().unwrap();
    let n = g.get_or_insert_with(HashMap::new).entry(low).or_insert(0);
    *n += 1;
    if *n > 1 {
        OVERLAPS.fetch_add(1, Ordering::Relaxed);
    }
}

fn vacate(low: usize) {
    let mut g = OCCUPIED.lock().unwrap();
    if let Some(n) = g.get_or_insert_with(HashMap::new).get_mut(&low) {
        *n -= 1;
    }
}

/// The thread body: mark the far end, arm the lingering destructor, spin
/// a little, then sleep in a cancellation point until cancelled (or return
/// after ~2 ms if never cancelled). No value with a destructor is live at
/// the cancellation point (plain old frame, RFC 2945).
unsafe extern "C-unwind" fn body(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the test passes a `Rec` that outlives the thread.
    let rec = unsafe { &*arg.cast::<Rec>() };
    let (low, _) = own_stack();
    occupy(low as usize);
    // SAFETY: the far end of our own stack, also accessed atomically by the
    // pool.
    let canary = unsafe { &*low.cast::<AtomicU64>() };
    rec.low.store(low as usize, Ordering::Relaxed);
    rec.canary.store(low as usize, Ordering::Relaxed);
    rec.initial
        .store(canary.load(Ordering::Relaxed), Ordering::Relaxed);
    canary.store(running(rec.token), Ordering::Relaxed);
    // SAFETY: valid key; value is the record.
    assert_eq!(unsafe { libc::pthread_setspecific(rec.key, arg) }, 0);
    let mut x = 0u64;
    for i in 0..2000u64 {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    for _ in 0..4 {
        // SAFETY: cancellation point; nothing to drop in this frame.
        unsafe { usleep(500) };
    }
    std::ptr::null_mut()
}

/// The lingering exit destructor. Its first call sets the key again and
/// returns: glibc then runs another round of key destructors (up to
/// PTHREAD_DESTRUCTOR_ITERATIONS), so the second call comes after every
/// destructor of the first round, the pool's exit hook included, whether
/// the pool's key has a lower index than ours or not.
extern "C" fn linger(p: *mut c_void) {
    // SAFETY: the value set in `body`.
    let rec = unsafe { &*p.cast::<Rec>() };
    if !rec.rearmed.swap(true, Ordering::Relaxed) {
        // SAFETY: valid key; the value is the record, as in `body`. (Should
        // it fail, linger now: a wrong order then shows as OUT_GAVE_UP.)
        if unsafe { libc::pthread_setspecific(rec.key, p) } == 0 {
            return;
        }
    }
    // SAFETY: still our own stack (we are running on it).
    let canary = unsafe { &*(rec.canary.load(Ordering::Relaxed) as *const AtomicU64) };
    let mine = running(rec.token);
    // Without a set linger, until caught or 60 s (it was 10 s: the
    // reclaimer that recycles the stack early may not run for seconds on a
    // loaded machine, and the thread gave up: a false OUT_GAVE_UP).
    let end = Instant::now() + rec.linger.unwrap_or(Duration::from_secs(60));
    let outcome = loop {
        if canary.load(Ordering::Relaxed) != mine {
            break OUT_CAUGHT;
        }
        if Instant::now() >= end || STOP.load(Ordering::Relaxed) {
            break if rec.linger.is_some() {
                OUT_RESTORED
            } else {
                OUT_GAVE_UP
            };
        }
        std::thread::yield_now();
    };
    if outcome != OUT_CAUGHT
        && canary
            .compare_exchange(
                mine,
                rec.initial.load(Ordering::Relaxed),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
    {
        rec.outcome.store(OUT_CAUGHT, Ordering::Relaxed);
    } else {
        rec.outcome.store(outcome, Ordering::Relaxed);
    }
    vacate(rec.low.load(Ordering::Relaxed));
}

struct Storm {
    waves: usize,
    per_wave: usize,
    lag: usize,
    reap: Reap,
    linger: Option<Duration>,
    unsound: bool,
}

struct Outcome {
    /// Boxed: each thread holds a pointer to its record while the vector
    /// grows.
    #[allow(clippy::vec_box)]
    recs: Vec<Box<Rec>>,
    stats: exitq::stacks::StackPoolStats,
}

/// Waves of threads; wave i-LAG is cancelled (every third thread is left
/// to return on its own) and reaped per the mode.
///
/// With the sound pool, the next wave is spawned only once every stack of
/// the reaped waves has been recycled (after the join: the owner's, or the
/// pool reclaimer's `pthread_tryjoin_np`), so from wave LAG + 1 on each
/// spawn finds a pooled stack: reuse follows from the protocol, not from
/// how fast the reclaimer happened to run on a busy machine. (The unsound
/// pool recycles at the exit hook and quarantines what it catches, so it
/// has nothing to wait for.)
fn storm(s: &Storm) -> Outcome {
    let builder = StackPool::builder()
        .stack_size(128 * 1024)
        .reclaim_interval(Duration::from_micros(200));
    // SAFETY: the unsound storm expects stacks reused under running
    // threads: the canary check catching them is what it tests.
    let pool = unsafe { builder.unsound_recycle_at_exit_for_tests(s.unsound) }
        .build()
        .unwrap();
    // `linger` re-arms itself once, so it runs after the pool's exit hook
    // whatever the two keys' indices (see there).
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: valid out-pointer; `linger` never unwinds.
    let rc = unsafe { libc::pthread_key_create(&mut key, Some(linger)) };
    assert_eq!(rc, 0);
    STOP.store(false, Ordering::Relaxed);
    let mut recs: Vec<Box<Rec>> = Vec::new();
    let mut ring: Vec<Vec<PooledThread>> = Vec::new();
    let mut reaped = 0u64;
    let wait_recycled = |reaped: u64| {
        if s.unsound {
            return;
        }
        let end = Instant::now() + Duration::from_secs(60);
        while pool.stats().recycled < reaped {
            assert!(
                Instant::now() < end,
                "the pool did not recycle {reaped} joined threads' stacks within 60 s: {:?}",
                pool.stats()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    let reap_wave = |wave: Vec<PooledThread>| {
        for (i, t) in wave.into_iter().enumerate() {
            if i % 3 != 0 {
                assert_eq!(t.cancel(), 0);
            }
            match s.reap {
                Reap::Owner => {
                    t.join().unwrap();
                }
                Reap::Reclaimer => drop(t),
            }
        }
    };
    for w in 0..s.waves {
        let mut wave = Vec::new();
        for i in 0..s.per_wave {
            let rec = Box::new(Rec {
                token: (w * s.per_wave + i) as u64,
                linger: s.linger,
                canary: AtomicUsize::new(0),
                initial: AtomicU64::new(0),
                low: AtomicUsize::new(0),
                outcome: AtomicU32::new(OUT_NONE),
                rearmed: AtomicBool::new(false),
                key,
            });
            let arg = &*rec as *const Rec as *mut c_void;
            recs.push(rec);
            // SAFETY: `body` is cancellation-safe (see there); the thread is
            // reaped only through the handle.
            wave.push(unsafe { pool.spawn(body, arg, s.reap) }.unwrap());
        }
        ring.push(wave);
        if ring.len() > s.lag {
            reap_wave(ring.remove(0));
            reaped += s.per_wave as u64;
            wait_recycled(reaped);
        }
    }
    for wave in ring.drain(..) {
        reap_wave(wave);
    }
    if s.unsound {
        // Give every lingering thread the chance to be caught (each gives
        // up after 60 s of its own), then stop.
        let end = Instant::now() + Duration::from_secs(90);
        while recs
            .iter()
            .any(|r| r.outcome.load(Ordering::Relaxed) == OUT_NONE)
            && Instant::now() < end
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        STOP.store(true, Ordering::Relaxed);
    }
    assert!(
        pool.drain(Duration::from_secs(60)),
        "every stack came back: {:?}",
        pool.stats()
    );
    let stats = pool.stats();
    drop(pool);
    // SAFETY: every thread using the key has been joined.
    unsafe { libc::pthread_key_delete(key) };
    Outcome { recs, stats }
}

fn count(recs: &[Box<Rec>], outcome: u32) -> usize {
    recs.iter()
        .filter(|r| r.outcome.load(Ordering::Relaxed) == outcome)
        .count()
}

#[test]
fn no_stack_is_reused_while_its_thread_runs() {
    // 1. Sound pool, reclaimer joins (detached behaviour), cancellation.
    for reap in [Reap::Reclaimer, Reap::Owner] {
        OVERLAPS.store(0, Ordering::Relaxed);
        let (waves, per_wave, lag) = (40, 16, 3);
        let o = storm(&Storm {
            waves,
            per_wave,
            lag,
            reap,
            linger: Some(Duration::from_micros(300)),
            unsound: false,
        });
        let n = o.recs.len();
        let s = o.stats;
        eprintln!("sound {reap:?}: {s:?}");
        assert_eq!(s.spawned as usize, n);
        assert_eq!(
            s.canary_violations, 0,
            "sound pool: no early reuse ({reap:?}): {s:?}"
        );
        assert_eq!(s.quarantined, 0);
        assert_eq!(
            OVERLAPS.load(Ordering::Relaxed),
            0,
            "no two threads on one stack"
        );
        assert_eq!(
            count(&o.recs, OUT_RESTORED),
            n,
            "every thread finished on an untouched stack"
        );
        assert_eq!(s.recycled as usize, n);
        // Every wave after LAG + 1 spawns on the stacks of the wave reaped
        // (and recycled) before it: a pool that never reuses fails here.
        assert!(
            s.reused as usize >= (waves - lag - 1) * per_wave,
            "stacks really were reused (the test is not vacuous): {s:?}"
        );
        if reap == Reap::Reclaimer {
            assert_eq!(s.exit_pushes as usize, n, "one exit push per thread");
        }
    }

    // 2. The unsound pool: recycles at the exit hook, before the join.
    OVERLAPS.store(0, Ordering::Relaxed);
    let o = storm(&Storm {
        waves: 10,
        per_wave: 8,
        lag: 2,
        reap: Reap::Reclaimer,
        linger: None,
        unsound: true,
    });
    let n = o.recs.len();
    let s = o.stats;
    eprintln!("unsound: {s:?}");
    assert_eq!(
        count(&o.recs, OUT_GAVE_UP),
        0,
        "the linger always ran after the pool's exit hook"
    );
    assert_eq!(
        count(&o.recs, OUT_CAUGHT),
        n,
        "every early recycle was seen by the thread still on the stack"
    );
    assert_eq!(
        s.canary_violations as usize, n,
        "the canary check caught every early recycle: {s:?}"
    );
    assert_eq!(s.quarantined as usize, n);
    assert_eq!(s.reused, 0, "no caught stack was lent again");
    assert_eq!(OVERLAPS.load(Ordering::Relaxed), 0);
}
