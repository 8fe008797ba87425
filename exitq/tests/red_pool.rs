//! Defects of `exitq::pool` found by the red-team reviews (after issue 25,
//! and of the pool and stacks later): each test failed before its fix (a
//! hang caught by a watchdog, a panic, or an abort seen from a forked
//! child).
use std::sync::Arc;
use std::time::Duration;

use exitq::pool::Pool;

mod skip_util;
mod thread_limit_util;
mod watch_util;
use watch_util::{fork_child, within};

const LIMIT: Duration = Duration::from_secs(30);

/// A pool that cannot start any worker (the kernel refuses to map a 64 TiB
/// stack), so every job runs on its submitting thread, inside `execute`.
fn workerless_pool() -> Arc<Pool> {
    Arc::new(
        Pool::builder()
            .min_workers(0)
            .max_workers(2)
            .stack_size(1 << 46)
            .build()
            .expect("a pool with no workers yet builds"),
    )
}

/// A job run on its submitting thread (no worker could start) shuts the
/// pool down. That thread is no worker, so nothing refuses the call, and
/// `shutdown` waited for every submitter to leave `execute`, the job's own
/// submitter among them: it never returned.
#[test]
fn shutdown_from_a_job_run_on_its_submitter_returns() {
    let pool = workerless_pool();
    let p = pool.clone();
    let report = within("shutdown inside an inline job", LIMIT, move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        p.execute(move || tx.send(p2.shutdown()).unwrap())
            .expect("the pool runs");
        rx.recv().expect("the job ran before execute returned")
    });
    assert_eq!(report.stats.live_threads, 0);
    assert!(pool.execute(|| ()).is_err(), "the pool is shut down");
}

/// The same with `shutdown_now`.
#[test]
fn shutdown_now_from_a_job_run_on_its_submitter_returns() {
    let pool = workerless_pool();
    let p = pool.clone();
    let left = within("shutdown_now inside an inline job", LIMIT, move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        p.execute(move || tx.send(p2.shutdown_now().len()).unwrap())
            .expect("the pool runs");
        rx.recv().expect("the job ran before execute returned")
    });
    assert_eq!(left, 0, "nothing else was queued");
    assert!(pool.execute(|| ()).is_err(), "the pool is shut down");
}

/// A thread name with a NUL byte: std's `thread::Builder` panics on it.
/// `build` accepted it (with no minimum worker to start), and the first
/// `execute` panicked inside the pool's spawn, after the worker had been
/// counted and while the submitter was still registered: dropping the pool
/// then waited for that submitter for ever (and `shutdown` for that
/// worker). With a minimum worker, `build` itself panicked. Now `build`
/// refuses the name, as `DomainBuilder::try_build` does.
#[test]
fn a_thread_name_with_a_nul_byte_is_refused_by_build() {
    for min in [0, 1] {
        let e = Pool::builder()
            .thread_name("bad\0name")
            .min_workers(min)
            .build()
            .expect_err("a NUL byte in the thread name is refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("NUL"), "{e}");
    }
}

/// A huge `max_workers`: the pool allocates its slot table (128 bytes a
/// worker) at build time, and `build` accepted up to 2^32 - 2 workers, so
/// asking for that many aborted the process (a 512 GiB allocation). Now a
/// `max_workers` above the most threads a Linux process can have (2^22,
/// `PID_MAX_LIMIT`) is refused, and a table that cannot be allocated is an
/// `OutOfMemory` error. Run in a forked child, where an abort fails the
/// test instead of killing the harness.
#[test]
fn a_huge_max_workers_is_an_error_not_an_abort() {
    let code = fork_child(LIMIT, || {
        for n in [u32::MAX as usize - 2, usize::MAX, (1 << 22) + 1] {
            match Pool::builder().max_workers(n).build() {
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
                _ => return 1,
            }
        }
        // The largest accepted table (512 MiB) under an address-space limit
        // that leaves it no room: an error from `build`, not an abort. The
        // domain is built first, so only the table is refused.
        let domain = exitq::Domain::builder()
            .reclaimer(exitq::Reclaimer::Inline)
            .build();
        if !limit_address_space_to_current_plus(64 << 20) {
            return 2;
        }
        match Pool::builder().domain(domain).max_workers(1 << 22).build() {
            Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => 0,
            _ => 3,
        }
    });
    assert_eq!(code, 0, "1: accepted; 2: setrlimit; 3: no OutOfMemory");
}

/// Sets `RLIMIT_AS` to the address space this process maps now plus
/// `extra` bytes (only in a forked child: it is the whole process's limit).
fn limit_address_space_to_current_plus(extra: u64) -> bool {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return false;
    };
    let Some(pages) = statm
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u64>().ok())
    else {
        return false;
    };
    // SAFETY: sysconf has no memory arguments.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let lim = pages * page + extra;
    let rl = libc::rlimit {
        rlim_cur: lim,
        rlim_max: lim,
    };
    // SAFETY: `rl` is a valid rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) == 0 }
}

/// A worker that cannot be created at build time (`min_workers`), or the
/// shared domain's reclaimer thread that the first pool starts: `build`
/// returned the bare OS error ("Resource temporarily unavailable"), and
/// `Pool::new`, documented never to fail, failed so. The explanation the
/// pool keeps for later failures (`last_spawn_error`) was lost with the
/// pool. Then every error listed the limits EAGAIN may stand for
/// (`RLIMIT_NPROC, kernel.threads-max, pid_max or a cgroup pids.max
/// limit`), and a domain's own `try_build` none. Now each names the limit
/// that stopped it, with its numbers, read right after the failure
/// (`exitq::limits`): here `RLIMIT_NPROC 1 reached: user <uid> has 1 task`
/// (a forked child as a user of its own with `RLIMIT_NPROC` = 1, which
/// needs root),
/// at build, for a domain's reclaimer, and for a worker started by a
/// submit (`last_spawn_error`).
#[test]
fn a_thread_that_cannot_be_created_is_explained_by_the_limit_reached() {
    if !thread_limit_util::root_or_skip("to run a child as another user with RLIMIT_NPROC = 1") {
        return;
    }
    let code = fork_child(LIMIT, || {
        let uid = thread_limit_util::become_lone_user_with_task_limit(1);
        let reached = |what: &str, m: &str| {
            assert!(
                thread_limit_util::names_rlimit_nproc(m, 1, uid),
                "{what} does not name RLIMIT_NPROC 1 with user {uid}'s tasks: {m}"
            );
        };
        // The fork child builds its own shared domain: its reclaimer
        // thread cannot start.
        let e = Pool::new().expect_err("Pool::new started a thread");
        assert!(e.to_string().contains("exitq-pool-reclaim"), "{e}");
        reached("Pool::new", &e.to_string());
        let e = exitq::Domain::builder()
            .thread_name("own-reclaim")
            .try_build()
            .expect_err("a domain started its reclaimer");
        assert!(e.to_string().contains("own-reclaim"), "{e}");
        reached("a domain's try_build", &e.to_string());
        let inline = || {
            exitq::Domain::builder()
                .reclaimer(exitq::Reclaimer::Inline)
                .build()
        };
        let e = Pool::builder()
            .domain(inline())
            .min_workers(1)
            .build()
            .expect_err("a minimum worker started");
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        reached("a minimum worker", &e.to_string());
        // No worker: the job runs on the submitter, the failure is kept.
        let pool = Pool::builder().domain(inline()).build().expect("pool");
        let (tx, rx) = std::sync::mpsc::channel();
        pool.execute(move || tx.send(()).unwrap()).expect("runs");
        rx.try_recv().expect("the job ran on the submitting thread");
        assert_eq!(pool.stats().spawn_failures, 1);
        let last = pool.last_spawn_error().expect("a last spawn error");
        assert!(last.starts_with("cannot create a worker thread"), "{last}");
        reached("last_spawn_error", &last);
        0
    });
    assert_eq!(code, 0);
}

/// The same at a cgroup's `pids.max` (as root, whom `RLIMIT_NPROC` does
/// not stop): a child in a pids cgroup with no room for another task. The
/// errors named the limit's candidates; now the cgroup with both numbers,
/// `cgroup <dir> pids.max 1 reached (pids.current 1)`.
#[test]
fn a_thread_stopped_by_a_cgroup_pids_max_is_explained_by_it() {
    let Some(cgroup) = thread_limit_util::PidsCgroup::create_or_skip("red-pool") else {
        return;
    };
    let code = fork_child(LIMIT, || {
        let named = cgroup.reached(cgroup.enter_full().expect("entered the cgroup"));
        let reached = |what: &str, m: &str| {
            assert!(m.contains(&named), "{what} does not say {named:?}: {m}");
        };
        let e = Pool::new().expect_err("Pool::new started a thread");
        reached("Pool::new", &e.to_string());
        let pool = Pool::builder()
            .domain(
                exitq::Domain::builder()
                    .reclaimer(exitq::Reclaimer::Inline)
                    .build(),
            )
            .build()
            .expect("pool");
        pool.execute(|| ()).expect("runs");
        reached(
            "last_spawn_error",
            &pool.last_spawn_error().expect("a last spawn error"),
        );
        0
    });
    assert_eq!(code, 0);
}

/// A pool built in a `fork()` child on a domain the parent built: every
/// use of that domain panics in the child, and the first was each worker's
/// `register_exit` at its start, before it took a job: the worker died
/// still counted (and "on its way" to the queue, so later submits woke
/// nobody), its job never ran, and `shutdown` would have waited for it for
/// ever. Now `build` refuses such a domain.
#[test]
fn a_domain_from_before_fork_is_refused_in_the_child() {
    let parents = exitq::Domain::new();
    let code = fork_child(LIMIT, move || {
        let pool = match Pool::builder().domain(parents).build() {
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => return 0,
            Err(_) => return 1,
            Ok(pool) => pool,
        };
        // The old code: the job never runs.
        let (tx, rx) = std::sync::mpsc::channel();
        if pool.execute(move || tx.send(()).unwrap()).is_err() {
            return 2;
        }
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(()) => 3,
            Err(_) => 4,
        }
    });
    assert_eq!(
        code, 0,
        "1: another error; 2: rejected; 3: built and ran (no refusal); 4: built, the job never ran"
    );
}
