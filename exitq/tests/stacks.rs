//! exitq::stacks: spawning, bounds, memory returned, page release, failure
//! paths. (Reuse safety under a cancellation storm: stacks_canary.rs.)

mod stacks_util;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use exitq::stacks::{Reap, Release, SpawnError, StackPool};
use stacks_util::{kernel_version, mappings_of_len, own_stack, resident_pages, usleep};

const PAGE: usize = 4096;

/// Reports the thread's stack low address into `*arg` (an AtomicUsize),
/// then returns `arg`.
unsafe extern "C-unwind" fn report_stack(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the test passes a pointer to a live AtomicUsize.
    let slot = unsafe { &*arg.cast::<AtomicUsize>() };
    slot.store(own_stack().0 as usize, Ordering::Relaxed);
    arg
}

/// Reports the thread's stack low address and the word stored there (the
/// canary's state word while the stack is lent) into `arg` (two
/// AtomicUsizes), then returns `arg`.
unsafe extern "C-unwind" fn report_canary(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the test passes a pointer to two live AtomicUsizes.
    let out = unsafe { &*arg.cast::<[AtomicUsize; 2]>() };
    let low = own_stack().0 as usize;
    // SAFETY: the stack's lowest word, mapped read-write (the canary);
    // the pool accesses it atomically too.
    let word = unsafe { &*(low as *const AtomicU64) }.load(Ordering::Relaxed);
    out[0].store(low, Ordering::Relaxed);
    out[1].store(word as usize, Ordering::Relaxed);
    arg
}

/// Waits until `*arg` (an AtomicBool) is true, sleeping in a cancellation
/// point.
unsafe extern "C-unwind" fn wait_flag(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the test passes a pointer to a static AtomicBool.
    let flag = unsafe { &*arg.cast::<AtomicBool>() };
    while !flag.load(Ordering::Acquire) {
        // SAFETY: plain libc call; this frame holds no destructors.
        unsafe { usleep(200) };
    }
    std::ptr::null_mut()
}

/// Touches `*arg` KiB of its own stack, then returns.
unsafe extern "C-unwind" fn touch_stack(arg: *mut c_void) -> *mut c_void {
    touch(arg as usize);
    std::ptr::null_mut()
}

/// Set to let `touch_then_wait` threads end.
static TOUCHED_GO: AtomicBool = AtomicBool::new(false);

/// Touches `*arg` KiB of its own stack, then waits for [`TOUCHED_GO`].
unsafe extern "C-unwind" fn touch_then_wait(arg: *mut c_void) -> *mut c_void {
    touch(arg as usize);
    while !TOUCHED_GO.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_micros(200));
    }
    std::ptr::null_mut()
}

#[inline(never)]
fn touch(kib: usize) {
    let mut buf = [0u8; 512 * 1024];
    let n = (kib * 1024).min(buf.len());
    for i in (0..n).step_by(PAGE) {
        buf[i] = 1;
    }
    std::hint::black_box(&mut buf);
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn owner_join_recycles_the_same_stack() {
    let pool = StackPool::builder().stack_size(256 * 1024).build().unwrap();
    let slot = AtomicUsize::new(0);
    let mut lows = Vec::new();
    for _ in 0..20 {
        let arg = &slot as *const AtomicUsize as *mut c_void;
        // SAFETY: report_stack has no destructors; joined below only.
        let t = unsafe { pool.spawn(report_stack, arg, Reap::Owner) }.unwrap();
        assert_eq!(t.join().unwrap(), arg);
        lows.push(slot.load(Ordering::Relaxed));
    }
    assert!(
        lows.iter().all(|&l| l == lows[0]),
        "one thread at a time must reuse one stack: {lows:x?}"
    );
    let s = pool.stats();
    assert_eq!(s.spawned, 20);
    assert_eq!(s.maps, 1);
    assert_eq!(s.reused, 19);
    assert_eq!(s.recycled, 20);
    assert_eq!(s.lent, 0);
    assert_eq!(s.canary_violations, 0);
    assert_eq!(
        pool.mapping_size(),
        pool.stack_size() + 128 + PAGE,
        "one guard page + header"
    );
}

#[test]
fn the_pthread_sees_the_stack_the_pool_gave() {
    let pool = StackPool::builder().stack_size(300 * 1024).build().unwrap();
    let runs: Vec<(usize, u64)> = (0..2)
        .map(|_| {
            let out = [AtomicUsize::new(0), AtomicUsize::new(0)];
            let arg = &out as *const [AtomicUsize; 2] as *mut c_void;
            // SAFETY: as above.
            let t = unsafe { pool.spawn(report_canary, arg, Reap::Owner) }.unwrap();
            t.join().unwrap();
            let low = out[0].load(Ordering::Relaxed);
            assert_eq!(
                low % PAGE,
                0,
                "stack low end is page aligned just above the guard"
            );
            // After the join the canary no longer says "lent".
            // SAFETY: the stack is idle in the pool (mapped, read-write);
            // the pool accesses these words atomically too.
            let idle = unsafe { &*(low as *const AtomicU64) }.load(Ordering::Relaxed);
            let lent = out[1].load(Ordering::Relaxed) as u64;
            assert_ne!(idle, lent, "the recycle marked the canary free");
            assert_ne!(idle, 0);
            (low, lent)
        })
        .collect();
    assert_eq!(runs[0].0, runs[1].0, "the second thread reused the stack");
    assert_ne!(runs[0].1, runs[1].1, "each lending has its own generation");
    assert_eq!(pool.stats().canary_violations, 0);
}

#[test]
fn pool_bound_by_count_holds_and_extra_stacks_are_unmapped() {
    static GO: AtomicBool = AtomicBool::new(false);
    let pool = StackPool::builder()
        .stack_size(128 * 1024)
        .max_pooled(3)
        .build()
        .unwrap();
    assert_eq!(pool.capacity(), 3);
    let arg = &GO as *const AtomicBool as *mut c_void;
    // SAFETY: wait_flag holds no destructors; joined below only.
    let ts: Vec<_> = (0..10)
        .map(|_| unsafe { pool.spawn(wait_flag, arg, Reap::Owner) }.unwrap())
        .collect();
    let s = pool.stats();
    assert_eq!((s.mapped, s.lent, s.pooled), (10, 10, 0));
    GO.store(true, Ordering::Release);
    for t in ts {
        t.join().unwrap();
        assert!(pool.stats().pooled <= 3);
    }
    let s = pool.stats();
    assert_eq!(s.pooled, 3, "{s:?}");
    assert_eq!(s.mapped, 3);
    assert_eq!(s.unmaps, 7, "stacks above the bound are unmapped at once");
    assert_eq!(s.peak_mapped, 10);
}

#[test]
fn pool_bound_by_bytes_holds() {
    let probe = StackPool::builder()
        .stack_size(64 * 1024)
        .max_pooled(0)
        .build()
        .unwrap();
    let mapping = probe.mapping_size();
    let pool = StackPool::builder()
        .stack_size(64 * 1024)
        .max_pooled_bytes(2 * mapping + mapping / 2)
        .build()
        .unwrap();
    assert_eq!(pool.capacity(), 2);
    // Capacity 0: nothing is ever kept.
    let slot = AtomicUsize::new(0);
    let arg = &slot as *const AtomicUsize as *mut c_void;
    for _ in 0..3 {
        // SAFETY: as above.
        unsafe { probe.spawn(report_stack, arg, Reap::Owner) }
            .unwrap()
            .join()
            .unwrap();
    }
    let s = probe.stats();
    assert_eq!(
        (s.maps, s.unmaps, s.mapped, s.pooled),
        (3, 3, 0, 0),
        "{s:?}"
    );
}

#[test]
fn memory_is_returned_at_the_end() {
    static GO: AtomicBool = AtomicBool::new(false);
    // An unusual size, so /proc/self/maps lines of exactly this length are
    // ours (the read-write part of each mapping is `stack_size` long).
    let size = 1024 * 1024 + 13 * PAGE;
    assert_eq!(mappings_of_len(size), 0);
    let pool = StackPool::builder()
        .stack_size(size)
        .max_pooled(64)
        .build()
        .unwrap();
    let arg = &GO as *const AtomicBool as *mut c_void;
    // SAFETY: as above.
    let ts: Vec<_> = (0..24)
        .map(|_| unsafe { pool.spawn(wait_flag, arg, Reap::Owner) }.unwrap())
        .collect();
    assert_eq!(mappings_of_len(size), 24);
    GO.store(true, Ordering::Release);
    for t in ts {
        t.join().unwrap();
    }
    assert_eq!(mappings_of_len(size), 24, "pooled stacks stay mapped");
    assert!(pool.drain(Duration::from_secs(60)));
    assert_eq!(mappings_of_len(size), 0, "drain unmaps every idle stack");
    assert_eq!(pool.stats().mapped, 0);
}

#[test]
fn dropping_the_pool_with_live_threads_unmaps_after_they_end() {
    static GO: AtomicBool = AtomicBool::new(false);
    let size = 1024 * 1024 + 17 * PAGE;
    let pool = StackPool::builder().stack_size(size).build().unwrap();
    let arg = &GO as *const AtomicBool as *mut c_void;
    for _ in 0..8 {
        // SAFETY: as above; the reclaimer joins these.
        drop(unsafe { pool.spawn(wait_flag, arg, Reap::Reclaimer) }.unwrap());
    }
    drop(pool);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        mappings_of_len(size),
        8,
        "stacks of running threads stay mapped"
    );
    GO.store(true, Ordering::Release);
    wait_until(
        "the reclaimer to unmap every stack",
        Duration::from_secs(60),
        || mappings_of_len(size) == 0,
    );
}

#[test]
fn orphaned_owner_thread_is_reaped_by_the_reclaimer() {
    static GO: AtomicBool = AtomicBool::new(false);
    let pool = StackPool::builder().stack_size(128 * 1024).build().unwrap();
    let arg = &GO as *const AtomicBool as *mut c_void;
    // SAFETY: as above.
    drop(unsafe { pool.spawn(wait_flag, arg, Reap::Owner) }.unwrap());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(
        pool.stats().recycled,
        0,
        "not recycled while the thread runs"
    );
    GO.store(true, Ordering::Release);
    assert!(pool.drain(Duration::from_secs(60)));
    let s = pool.stats();
    assert_eq!((s.recycled, s.lent, s.mapped), (1, 0, 0), "{s:?}");
}

#[test]
fn reclaimer_threads_are_joined_and_recycled() {
    let pool = StackPool::builder().stack_size(128 * 1024).build().unwrap();
    let slot = AtomicUsize::new(0);
    let arg = &slot as *const AtomicUsize as *mut c_void;
    for batch in 1..=5u64 {
        for _ in 0..10 {
            // SAFETY: as above; handle dropped at once (fire and forget).
            drop(unsafe { pool.spawn(report_stack, arg, Reap::Reclaimer) }.unwrap());
        }
        wait_until("the reclaimer", Duration::from_secs(60), || {
            pool.stats().recycled == batch * 10
        });
    }
    let before_drain = pool.stats();
    // A timeout past what an `Instant` holds means no deadline (it used to
    // panic adding it to `Instant::now()`).
    assert!(pool.drain(Duration::MAX));
    let s = pool.stats();
    assert_eq!(s.spawned, 50);
    assert_eq!(s.exit_pushes, 50, "every exit pushed its stack once: {s:?}");
    assert_eq!(s.recycled, 50);
    assert_eq!(s.canary_violations, 0);
    assert!(
        before_drain.maps <= 10,
        "later batches reuse the first batch's stacks: {before_drain:?}"
    );
    assert_eq!(before_drain.reused + before_drain.maps, 50);
}

#[test]
fn a_trampled_idle_stack_is_caught_at_hand_out() {
    let pool = StackPool::builder().stack_size(128 * 1024).build().unwrap();
    let slot = AtomicUsize::new(0);
    let arg = &slot as *const AtomicUsize as *mut c_void;
    // SAFETY: as above.
    unsafe { pool.spawn(report_stack, arg, Reap::Owner) }
        .unwrap()
        .join()
        .unwrap();
    let low = slot.load(Ordering::Relaxed);
    // Someone writes the far end of the idle stack.
    // SAFETY: mapped and idle; accessed atomically by the pool as well.
    unsafe { &*(low as *const AtomicU64) }.store(0xdead_beef, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { pool.spawn(report_stack, arg, Reap::Owner) }
        .unwrap()
        .join()
        .unwrap();
    assert_ne!(
        slot.load(Ordering::Relaxed),
        low,
        "the trampled stack was not lent again"
    );
    let s = pool.stats();
    assert_eq!(
        (s.canary_violations, s.quarantined, s.maps),
        (1, 1, 2),
        "{s:?}"
    );
    assert!(pool.drain(Duration::from_secs(60)));
    assert_eq!(
        pool.stats().mapped,
        0,
        "quarantined stacks are unmapped by drain"
    );
}

#[test]
fn release_dontneed_drops_pages_with_batched_process_madvise() {
    let size = 1024 * 1024;
    for release in [Release::Keep, Release::DontNeed] {
        let pool = StackPool::builder()
            .stack_size(size)
            .release(release)
            .build()
            .unwrap();
        let slots: Vec<AtomicUsize> = (0..16).map(|_| AtomicUsize::new(0)).collect();
        // Phase 1: 16 threads alive at once learn their stacks.
        let ts: Vec<_> = slots
            .iter()
            .map(|s| {
                // SAFETY: as above.
                unsafe {
                    pool.spawn(
                        report_stack,
                        s as *const AtomicUsize as *mut c_void,
                        Reap::Owner,
                    )
                }
                .unwrap()
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        wait_until("recycling", Duration::from_secs(60), || {
            pool.stats().recycled == 16
        });
        // Phase 2: touch 256 KiB on each of those stacks (LIFO reuse is not
        // guaranteed, so touch via 16 threads again and join them all).
        let ts: Vec<_> = (0..16)
            .map(|_| {
                // SAFETY: touch_then_wait is never cancelled.
                unsafe { pool.spawn(touch_then_wait, 256 as *mut c_void, Reap::Reclaimer) }.unwrap()
            })
            .collect();
        // All 16 are alive at once, so each took one of phase 1's stacks.
        assert_eq!(pool.stats().reused, 16);
        drop(ts);
        TOUCHED_GO.store(true, Ordering::Release);
        wait_until("recycling", Duration::from_secs(60), || {
            pool.stats().recycled == 32
        });
        let lows: Vec<usize> = slots.iter().map(|s| s.load(Ordering::Relaxed)).collect();
        let resident: usize = lows
            .iter()
            .map(|&l| resident_pages((l + PAGE) as *mut u8, pool.stack_size() - 2 * PAGE))
            .sum();
        let s = pool.stats();
        match release {
            Release::Keep => {
                assert!(
                    resident >= 16 * 60,
                    "touched pages stay resident with Keep: {resident}"
                );
                assert_eq!(s.released_ranges, 0);
            }
            _ => {
                assert_eq!(
                    resident, 0,
                    "DontNeed releases every page but the canary and header pages"
                );
                assert_eq!(s.released_ranges, 32, "{s:?}");
                if kernel_version() >= (6, 13) {
                    assert!(
                        s.process_madvise_calls >= 1,
                        "process_madvise(MADV_DONTNEED) on self works on Linux 6.13+: {s:?}"
                    );
                    assert!(s.process_madvise_calls < 32, "ranges are batched: {s:?}");
                    assert_eq!(s.madvise_calls, 0, "{s:?}");
                } else {
                    eprintln!("NOTE: kernel {:?} < 6.13: process_madvise(MADV_DONTNEED) refused, per-stack madvise fallback checked instead", kernel_version());
                    assert_eq!(s.madvise_calls, 32, "{s:?}");
                }
            }
        }
        assert!(pool.drain(Duration::from_secs(60)));
        TOUCHED_GO.store(false, Ordering::Release);
    }
}

#[test]
fn trim_releases_idle_stacks() {
    let pool = StackPool::builder()
        .stack_size(1024 * 1024)
        .build()
        .unwrap();
    let ts: Vec<_> = (0..4)
        .map(|_| {
            // SAFETY: as above.
            unsafe { pool.spawn(touch_stack, 256 as *mut c_void, Reap::Owner) }.unwrap()
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    assert_eq!(pool.trim(), 4);
    assert_eq!(pool.stats().released_ranges, 4);
}

#[test]
fn an_unmappable_stack_is_a_named_spawn_error() {
    // 1 PiB: beyond the 47-bit user address space, mmap must refuse.
    let pool = StackPool::builder().stack_size(1 << 50).build().unwrap();
    let slot = AtomicUsize::new(0);
    let arg = &slot as *const AtomicUsize as *mut c_void;
    // SAFETY: as above.
    let err = unsafe { pool.spawn(report_stack, arg, Reap::Owner) }.unwrap_err();
    assert!(matches!(err, SpawnError::Map(_)), "{err}");
    assert_eq!(err.errno(), libc::ENOMEM);
    // No limit at its ceiling: every one the mmap meets, with its count.
    assert_eq!(err.limit(), "memory", "{err}");
    assert!(err.to_string().contains("vm.max_map_count"), "{err}");
    assert!(
        err.to_string().contains("no free range of address space"),
        "{err}"
    );
    assert_eq!(pool.stats().spawn_failed, 1);
}

#[test]
fn absurd_sizes_are_refused_at_build() {
    assert!(StackPool::builder().stack_size(1024).build().is_err());
    let e = StackPool::builder()
        .stack_size(usize::MAX - 10)
        .build()
        .unwrap_err();
    assert!(
        e.to_string().contains("overflow") || e.to_string().contains("absurd"),
        "{e}"
    );
}

#[test]
fn reclaimer_join_with_cancel_via_handle() {
    static NEVER: AtomicBool = AtomicBool::new(false);
    let pool = StackPool::builder().stack_size(128 * 1024).build().unwrap();
    let arg = &NEVER as *const AtomicBool as *mut c_void;
    for _ in 0..20 {
        // SAFETY: wait_flag is cancellation-safe (no destructors at usleep).
        let t = unsafe { pool.spawn(wait_flag, arg, Reap::Reclaimer) }.unwrap();
        assert_eq!(t.cancel(), 0);
        drop(t);
    }
    let mut owned = Vec::new();
    for _ in 0..20 {
        // SAFETY: as above.
        let t = unsafe { pool.spawn(wait_flag, arg, Reap::Owner) }.unwrap();
        assert_eq!(t.cancel(), 0);
        owned.push(t);
    }
    for t in owned {
        assert_eq!(t.join().unwrap(), usize::MAX as *mut c_void);
    }
    assert!(pool.drain(Duration::from_secs(60)));
    let s = pool.stats();
    assert_eq!(s.recycled, 40, "{s:?}");
    assert_eq!(s.exit_pushes, 20, "{s:?}");
    assert_eq!(s.canary_violations, 0);
}
