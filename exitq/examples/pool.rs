//! An elastic pool serving bursts: watch it grow for each burst and shrink
//! in each quiet period, with its idle workers retiring one by one instead
//! of all at once.
//!
//! ```text
//! cargo run --release -p exitq --example pool -- [bursts] [jobs-per-burst]
//! ```
//!
//! Prints, per burst, the pool's size while busy, then every retirement of
//! the quiet period with its time since the burst ended (decision, and the
//! exit bookkeeping done later by exitq's reclaimer), and final counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exitq::pool::{Pool, RetireReason, Retirement};

fn main() {
    let mut args = std::env::args().skip(1);
    let parse = |a: Option<String>, name: &str, default: usize| -> usize {
        match a {
            None => default,
            Some(s) => s.parse().unwrap_or_else(|_| {
                eprintln!("error: {name} must be a positive integer, got {s:?}");
                std::process::exit(2);
            }),
        }
    };
    let bursts = parse(args.next(), "bursts", 3);
    let jobs = parse(args.next(), "jobs-per-burst", 2_000);

    let retirements: Arc<Mutex<Vec<Retirement>>> = Arc::default();
    let pool = {
        let log = retirements.clone();
        Pool::builder()
            .min_workers(1)
            .max_workers(16)
            .keep_alive(Duration::from_millis(50))
            .keep_alive_jitter(Duration::from_millis(50))
            .retire_batch(2)
            .thread_name("example")
            .on_retire(move |r| log.lock().unwrap().push(*r))
            .build()
            .unwrap_or_else(|e| {
                eprintln!("error: cannot start the pool: {e}");
                std::process::exit(1);
            })
    };

    let total = Arc::new(AtomicU64::new(0));
    for b in 1..=bursts {
        // A burst of short jobs that block a little (like an agent's I/O).
        let t0 = Instant::now();
        let handles: Vec<_> = (0..jobs)
            .map(|i| {
                let total = total.clone();
                pool.spawn(move || {
                    if i % 64 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    total.fetch_add(1, Ordering::Relaxed);
                    i
                })
                .expect("the pool is running")
            })
            .collect();
        let busy = pool.stats().workers;
        let sum: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, jobs * (jobs - 1) / 2);
        let burst_end = Instant::now();
        println!(
            "burst {b}: {jobs} jobs in {:.1} ms, {busy} workers busy",
            (burst_end - t0).as_secs_f64() * 1e3
        );

        // Quiet period: idle workers retire, staggered.
        std::thread::sleep(Duration::from_millis(300));
        let mut log = retirements.lock().unwrap();
        log.sort_by_key(|r| r.decided_at);
        for r in log.drain(..).filter(|r| r.reason == RetireReason::Idle) {
            println!(
                "  worker {:>2} retired at +{:>6.1} ms (cleaned up by exitq at +{:>6.1} ms)",
                r.slot,
                r.decided_at
                    .saturating_duration_since(burst_end)
                    .as_secs_f64()
                    * 1e3,
                r.cleaned_at
                    .saturating_duration_since(burst_end)
                    .as_secs_f64()
                    * 1e3,
            );
        }
        println!("  now {} worker(s) (min 1)", pool.stats().workers);
    }

    let report = pool.shutdown();
    let s = report.stats;
    println!(
        "done: {} jobs, {} threads spawned, {} retired idle, {} at shutdown, peak {} workers, {} panics",
        total.load(Ordering::Relaxed),
        s.spawned,
        s.retired_idle,
        s.retired_shutdown,
        s.peak_workers,
        s.panicked
    );
}
