//! exitq in tokio's runtime: `on_thread_start` gives each thread (the two
//! async workers and every thread of the blocking pool) a shard registered
//! with exitq, `on_thread_stop` hands the thread's cleanup to exitq
//! (`retire_thread`: no lock, no syscall, counted by the kernel when perf
//! is available), and `on_thread_park` takes a parked thread offline
//! (`exitq::thread_offline`; its next job's read brings it back). Bursts of `spawn_blocking` leave the blocking pool idle
//! past its keep-alive, so its threads retire between bursts (the herd of
//! exits the issue is about); the runtime's shutdown stops the rest. Every
//! cleanup runs exactly once, and every job counted by a shard reaches the
//! totals, through the live registry or a retired worker's cleanup.
use std::sync::atomic::Ordering;
use std::time::Duration;

mod pool_util;
use pool_util::{count_job, Pools, SyscallCounter};

const WORKERS: usize = 2;
const BLOCKING: usize = 16;
const BURSTS: usize = 3;
const JOBS: usize = 64;

#[test]
fn tokio_threads_hand_their_cleanup_to_exitq() {
    let pools = Pools::new();
    let (start, stop) = (pools.clone(), pools.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .max_blocking_threads(BLOCKING)
        .thread_keep_alive(Duration::from_millis(20))
        .on_thread_start(move || start.worker_start())
        .on_thread_stop(move || stop.worker_stop(SyscallCounter::open().as_mut()))
        // Parked: offline in every exitq domain until the next job uses one.
        .on_thread_park(exitq::thread_offline)
        .build()
        .expect("a tokio runtime");
    let mut retired_between_bursts = 0;
    for burst in 0..BURSTS {
        rt.block_on(async {
            let blocking: Vec<_> = (0..JOBS)
                .map(|_| {
                    tokio::task::spawn_blocking(|| {
                        std::thread::sleep(Duration::from_millis(2));
                        count_job();
                    })
                })
                .collect();
            let tasks: Vec<_> = (0..JOBS)
                .map(|_| tokio::spawn(async { count_job() }))
                .collect();
            for h in blocking.into_iter().chain(tasks) {
                h.await.expect("the job ran");
            }
        });
        // The burst's blocking threads go idle and retire after the
        // keep-alive; the async workers stay.
        let started = pools.started.load(Ordering::Relaxed);
        assert!(started > WORKERS, "burst {burst} started blocking threads");
        pools.wait_stopped(started - WORKERS, &format!("tokio burst {burst}"));
        retired_between_bursts = pools.stopped.load(Ordering::Acquire);
        pools.domain.exit_barrier();
        assert_eq!(
            pools.total_jobs(),
            2 * JOBS as u64 * (burst as u64 + 1),
            "every job counted once, live or retired"
        );
    }
    assert!(
        retired_between_bursts >= BURSTS,
        "idle blocking threads retired"
    );
    drop(rt); // stops the async workers (and waits for them)
    let started = pools.started.load(Ordering::Relaxed);
    pools.wait_stopped(started, "tokio shutdown");
    pools.check_cleanups("tokio");
    assert_eq!(pools.total_jobs(), 2 * (JOBS * BURSTS) as u64);
    pools.check_exit_syscalls("tokio");
}
