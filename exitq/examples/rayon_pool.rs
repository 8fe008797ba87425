//! exitq in a rayon thread pool: per-worker state handed to exitq at
//! worker exit.
//!
//!     cargo run -p exitq --example rayon_pool
//!
//! Each worker gets a statistics shard at `start_handler`, and its cleanup
//! is registered with exitq there; `exit_handler` hands the cleanup over
//! with `retire_thread` (no lock, no syscall, no allocation). Dropping the
//! pool makes all its workers exit together; their cleanups run in a batch
//! on exitq's reclaimer after one grace period. See `shared/shards.rs` for
//! the shard registry.
use rayon::prelude::*;

#[path = "shared/shards.rs"]
mod shards;
use shards::Shards;

const THREADS: u64 = 4;
const JOBS: u64 = 100_000;

fn main() -> Result<(), rayon::ThreadPoolBuildError> {
    let shards = Shards::new();
    for round in 1..=3 {
        let (start, stop) = (shards.clone(), shards.clone());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(THREADS as usize)
            .start_handler(move |_| start.worker_start())
            .exit_handler(move |_| stop.worker_stop())
            .build()?;
        pool.install(|| (0..JOBS).into_par_iter().for_each(|_| Shards::count_job()));
        drop(pool); // the workers exit on their own, together
        shards.wait_stopped(THREADS * round);
        println!(
            "round {round}: {} workers retired, {} cleanups run, {} live shards, {} jobs counted",
            Shards::get(&shards.stopped),
            Shards::get(&shards.cleanups),
            shards.live_workers(),
            shards.total_jobs()
        );
    }
    assert_eq!(
        Shards::get(&shards.cleanups),
        3 * THREADS,
        "every cleanup ran once"
    );
    assert_eq!(shards.total_jobs(), 3 * JOBS);
    Ok(())
}
