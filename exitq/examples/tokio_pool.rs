//! exitq in a tokio runtime: per-thread state handed to exitq at thread exit.
//!
//!     cargo run -p exitq --example tokio_pool
//!
//! Every runtime thread (the async workers and the blocking pool's
//! threads) gets a statistics shard at `on_thread_start`, and its cleanup
//! is registered with exitq there; `on_thread_stop` hands the cleanup over
//! with `retire_thread` (no lock, no syscall, no allocation). A burst of
//! `spawn_blocking` work leaves the blocking pool idle past its keep-alive:
//! its threads retire together, and their cleanups run in a batch on
//! exitq's reclaimer after one grace period. See `shared/shards.rs` for the
//! shard registry.
use std::sync::Arc;
use std::time::Duration;

#[path = "shared/shards.rs"]
mod shards;
use shards::Shards;

const BLOCKING_JOBS: u64 = 256;

fn main() -> std::io::Result<()> {
    let shards = Shards::new();
    let (start, stop) = (shards.clone(), shards.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(32)
        .thread_keep_alive(Duration::from_millis(50))
        .on_thread_start(move || start.worker_start())
        .on_thread_stop(move || stop.worker_stop())
        // Parked: offline in every exitq domain until the next job uses one.
        .on_thread_park(exitq::thread_offline)
        .build()?;

    rt.block_on(async {
        let jobs: Vec<_> = (0..BLOCKING_JOBS)
            .map(|_| {
                tokio::task::spawn_blocking(|| {
                    std::thread::sleep(Duration::from_millis(1)); // blocking work
                    Shards::count_job();
                })
            })
            .collect();
        for job in jobs {
            job.await.expect("the job ran");
        }
    });
    let started = Shards::get(&shards.started);
    println!(
        "burst: {BLOCKING_JOBS} blocking jobs on {} threads ({} live shards)",
        started,
        shards.live_workers()
    );

    // Past the keep-alive the idle blocking threads exit; the async
    // workers stay.
    shards.wait_stopped(started - 2);
    println!(
        "after the keep-alive: {} threads retired, {} cleanups run, {} live shards, {} jobs counted",
        Shards::get(&shards.stopped),
        Shards::get(&shards.cleanups),
        shards.live_workers(),
        shards.total_jobs()
    );

    drop(rt); // stops the async workers too, and waits for them
    shards.wait_stopped(started);
    let cleanups = Shards::get(&shards.cleanups);
    println!("after shutdown: {cleanups} cleanups for {started} threads");
    assert_eq!(cleanups, started, "every cleanup ran exactly once");
    assert_eq!(shards.total_jobs(), BLOCKING_JOBS);
    assert_eq!(shards.live_workers(), 0);
    drop(Arc::into_inner(shards));
    Ok(())
}
