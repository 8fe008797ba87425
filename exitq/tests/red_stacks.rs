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
mod thread_limit_util;
mod watch_util;
use watch_util::fork_child;

/// How long a test waits for something that should happen by itself; it
/// only bounds how long a failure takes to show.
/// (60 s: under load a child or a reclaimer may not run for seconds.)
const PATIENCE: Duration = Duration::from_secs(60);

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
/// returned the bare OS error; then it said which thread and listed the
/// limits EAGAIN may stand for, as a pooled thread's `SpawnError::Create`
/// did. Now both name the limit that stopped the thread, with its
/// numbers, read right after the failure (`exitq::limits`): here
/// `RLIMIT_NPROC 1 reached: user <uid> has 1 task` for the reclaimer (a
/// forked child as a user of its own with `RLIMIT_NPROC` = 1), and
/// `RLIMIT_NPROC 2 reached: user <uid> has 2 tasks` for a pooled thread
/// (the child and the reclaimer under a limit of 2). Needs root.
#[test]
fn a_thread_that_cannot_be_created_is_explained_by_the_limit_reached() {
    if !thread_limit_util::root_or_skip("to run a child as another user with a low RLIMIT_NPROC") {
        return;
    }
    let code = fork_child(PATIENCE, || {
        let uid = thread_limit_util::become_lone_user_with_task_limit(1);
        let e = small_pool().expect_err("the reclaimer started");
        let m = e.to_string();
        assert!(m.contains("exitq-stacks"), "{m}");
        assert!(thread_limit_util::names_rlimit_nproc(&m, 1, uid), "{m}");
        0
    });
    assert_eq!(code, 0);
    let code = fork_child(PATIENCE, || {
        let uid = thread_limit_util::become_lone_user_with_task_limit(2);
        let pool = small_pool().expect("the reclaimer is the user's second task");
        // SAFETY: `identity` is a plain function; joined through the handle.
        let e = unsafe { pool.spawn(identity, std::ptr::null_mut(), Reap::Owner) }
            .expect_err("a third task of the user");
        assert_eq!(e.errno(), libc::EAGAIN, "{e}");
        assert_eq!(e.limit(), "RLIMIT_NPROC", "{e}");
        let m = e.to_string();
        assert!(
            m.starts_with("pthread_create on a pooled stack failed"),
            "{m}"
        );
        assert!(thread_limit_util::names_rlimit_nproc(&m, 2, uid), "{m}");
        0
    });
    assert_eq!(code, 0);
}

/// The same at a cgroup's `pids.max` (as root, whom `RLIMIT_NPROC` does
/// not stop): a pooled thread in a child whose pids cgroup has no room
/// for another task, and the reclaimer of a pool built there. The errors
/// listed candidates; now they name the cgroup with both numbers.
#[test]
fn a_thread_stopped_by_a_cgroup_pids_max_is_explained_by_it() {
    let Some(cgroup) = thread_limit_util::PidsCgroup::create_or_skip("red-stacks") else {
        return;
    };
    let code = fork_child(PATIENCE, || {
        let pool = small_pool().expect("a pool before the cgroup");
        // The child and the pool's reclaimer: 2.
        let named = cgroup.reached(cgroup.enter_full().expect("entered the cgroup"));
        // SAFETY: `identity` is a plain function; joined through the handle.
        let e = unsafe { pool.spawn(identity, std::ptr::null_mut(), Reap::Owner) }
            .expect_err("no room for a thread");
        assert_eq!(e.limit(), "cgroup pids.max", "{e}");
        assert!(e.to_string().contains(&named), "{e}");
        let e = small_pool().expect_err("a second reclaimer started");
        assert!(e.to_string().contains(&named), "{e}");
        0
    });
    assert_eq!(code, 0);
}

/// A pool of 128 KiB stacks (starts its reclaimer thread).
fn small_pool() -> std::io::Result<StackPool> {
    StackPool::builder().stack_size(128 << 10).build()
}
