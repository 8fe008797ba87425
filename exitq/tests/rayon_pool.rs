//! exitq in rayon's thread pools: `start_handler` gives each worker a
//! shard registered with exitq, `exit_handler` hands the worker's cleanup
//! to exitq (`retire_thread`: no lock, no syscall, counted by the kernel
//! when perf is available). Pools are built and dropped in rounds (a
//! dropped pool's workers exit together); every cleanup runs exactly once
//! and every job a shard counted reaches the totals.
use std::sync::atomic::Ordering;

use rayon::prelude::*;

mod pool_util;
use pool_util::{count_job, Pools, SyscallCounter};

const THREADS: usize = 4;
const ROUNDS: usize = 3;
const JOBS: u64 = 10_000;

#[test]
fn rayon_workers_hand_their_cleanup_to_exitq() {
    let pools = Pools::new();
    for round in 0..ROUNDS {
        let (start, stop) = (pools.clone(), pools.clone());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(THREADS)
            .thread_name(|i| format!("rayon-exitq-{i}"))
            .start_handler(move |_| start.worker_start())
            .exit_handler(move |_| stop.worker_stop(SyscallCounter::open().as_mut()))
            .build()
            .expect("a rayon pool");
        pool.install(|| (0..JOBS).into_par_iter().for_each(|_| count_job()));
        // One job on every worker.
        pool.broadcast(|_| count_job());
        drop(pool); // the workers exit on their own, together
        pools.wait_stopped(THREADS * (round + 1), &format!("rayon round {round}"));
        pools.domain.exit_barrier();
        assert_eq!(
            pools.total_jobs(),
            (JOBS + THREADS as u64) * (round as u64 + 1),
            "round {round}: every job counted once"
        );
    }
    assert_eq!(pools.started.load(Ordering::Relaxed), THREADS * ROUNDS);
    pools.check_cleanups("rayon");
    pools.check_exit_syscalls("rayon");
}
