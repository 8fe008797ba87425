//! Defects of `exitq::stacks` found by the red-team review of the pool and
//! stacks: each test failed before its fix (the reclaimer thread dying,
//! or an abort seen from a forked child).
//!
//! `StackPool::spawn` is `unsafe`; these tests keep its contract (plain
//! start routines, no join or detach but the pool's), so a failure is the
//! pool's.
use std::ffi::c_void;
use std::time::Duration;

use exitq::stacks::{Reap, StackPool};

mod skip_util;
mod watch_util;
use watch_util::fork_child;

/// How long a test waits for something that should happen by itself; it
/// only bounds how long a failure takes to show.
const PATIENCE: Duration = Duration::from_secs(20);

/// Returns its argument.
unsafe extern "C-unwind" fn identity(arg: *mut c_void) -> *mut c_void {
    arg
}

/// A `reclaim_interval` near `Duration::MAX`: the idle reclaimer's backoff
/// (`interval * 2^rounds`) overflowed on its first idle round and the
/// panic ended the reclaimer thread, so no `Reap::Reclaimer` stack ever
/// came back and `drain` never succeeded (with `Duration::MAX` it would
/// have waited for ever). The backoff now saturates; `drain` wakes the
/// reclaimer.
#[test]
fn a_huge_reclaim_interval_keeps_the_reclaimer_alive() {
    for interval in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
        let pool = StackPool::builder()
            .stack_size(128 << 10)
            .reclaim_interval(interval)
            .build()
            .unwrap();
        // Let the reclaimer reach its first idle sleep (where it panicked).
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..4 {
            // SAFETY: `identity` is a plain function without destructors;
            // the thread is joined by the pool's reclaimer only.
            let t = unsafe { pool.spawn(identity, std::ptr::null_mut(), Reap::Reclaimer) }.unwrap();
            drop(t);
        }
        assert!(
            pool.drain(PATIENCE),
            "the reclaimer joined and recycled every stack: {:?}",
            pool.stats()
        );
        let s = pool.stats();
        assert_eq!((s.recycled, s.mapped, s.lent), (4, 0, 0), "{s:?}");
    }
}

/// `max_pooled` and `max_pooled_bytes` both "unbounded": the queue of idle
/// stacks is allocated at build time, and `build` sized it by the request
/// (`usize::MAX / 28 KiB` entries of 16 bytes): the process aborted. The
/// cap is now at most 2^20 stacks. In a forked child, where an abort fails
/// the test instead of killing the harness.
#[test]
fn an_unbounded_pool_cap_is_not_an_abort() {
    let code = fork_child(PATIENCE, || {
        let Ok(pool) = StackPool::builder()
            .stack_size(128 << 10)
            .max_pooled(usize::MAX)
            .max_pooled_bytes(usize::MAX)
            .build()
        else {
            return 1;
        };
        if pool.capacity() != 1 << 20 {
            return 2;
        }
        // SAFETY: as above; joined through the handle.
        let Ok(t) = (unsafe { pool.spawn(identity, 7 as *mut c_void, Reap::Owner) }) else {
            return 3;
        };
        match t.join() {
            Ok(v) if v as usize == 7 => {}
            _ => return 4,
        }
        i32::from(pool.stats().pooled != 1) * 5
    });
    assert_eq!(
        code, 0,
        "1: build failed; 2: capacity; 3: spawn; 4: join; 5: not pooled"
    );
}

/// The stack pool's reclaimer thread that cannot be created: `build`
/// returned the bare OS error. Now it says which thread and the limits
/// behind EAGAIN, as a pooled thread's `SpawnError::Create` does (which
/// did not name a cgroup's `pids.max`). Needs root to become a user with
/// `RLIMIT_NPROC` = 1 in a forked child.
#[test]
fn a_reclaimer_that_cannot_be_created_is_explained() {
    let create = exitq::stacks::SpawnError::Create(libc::EAGAIN).to_string();
    assert!(
        create.contains("RLIMIT_NPROC") && create.contains("pids.max"),
        "{create}"
    );
    if !watch_util::is_root() {
        skip_util::skip("needs root to run a child as nobody with RLIMIT_NPROC = 1");
        return;
    }
    let code = fork_child(PATIENCE, || {
        if !watch_util::become_nobody_at_the_thread_limit() {
            return 1;
        }
        match StackPool::builder().stack_size(128 << 10).build() {
            Err(e) => {
                let m = e.to_string();
                if m.contains("exitq-stacks")
                    && m.contains("RLIMIT_NPROC")
                    && m.contains("pids.max")
                {
                    0
                } else {
                    3
                }
            }
            Ok(_) => 2,
        }
    });
    assert_eq!(
        code, 0,
        "1: could not become nobody; 2: built; 3: not explained"
    );
}
