//! `herd::scenario::LoadThreads`: threads run, stop, and parked ones
//! are woken. (A separate test binary: unit tests elsewhere in herd count
//! the process's tasks and must not see these threads come and go.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herd::scenario::LoadThreads;

#[test]
fn threads_run_until_stopped() {
    // Each thread counts its first iteration, and the stop comes only once
    // all three have: every report then has iterations > 0 by protocol, not
    // because 20 ms were enough for the scheduler to run them.
    let started = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&started);
    let load = LoadThreads::start("test", 3, move |_, stop| {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            if n == 0 {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            n += 1;
            std::thread::yield_now();
        }
        n
    })
    .unwrap();
    assert_eq!(load.len(), 3);
    let deadline = Instant::now() + Duration::from_secs(120);
    while started.load(Ordering::Relaxed) < 3 {
        assert!(Instant::now() < deadline, "the load threads never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    let reports = load.stop();
    assert_eq!(reports.len(), 3);
    assert!(reports.iter().all(|r| r.iterations > 0), "{reports:?}");
}

#[test]
fn parked_threads_are_woken_by_stop() {
    let load = LoadThreads::start("parked", 4, |_, stop| {
        let mut wakeups = 0;
        while !stop.load(Ordering::Relaxed) {
            std::thread::park();
            wakeups += 1;
        }
        wakeups
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // A stop that did not wake them would never return: wait for it on a
    // watchdog (a hang detector with room for a 2-4x slow machine, not a
    // timing threshold), so the test fails instead of hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(load.stop());
    });
    let reports = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("stop() woke the parked threads and joined them");
    assert_eq!(reports.len(), 4);
}

/// `herd gp --load N` past the host's thread limits is refused before any
/// thread is created (exit 3 naming vm.max_map_count), where std's thread
/// start-up used to abort the process (exit 134: "failed to set up
/// alternative stack guard page") once the mappings ran out.
#[test]
fn gp_load_past_the_mapping_limit_is_refused_up_front() {
    let start = Instant::now();
    let out = assert_cmd::Command::cargo_bin("herd")
        .unwrap()
        .args([
            "gp",
            "--no-perf",
            "--duration",
            "5ms",
            "--delay",
            "0",
            "--load",
            "65536",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("vm.max_map_count"), "{err}");
    assert!(err.contains("--load"), "{err}");
    // A bound with room for a loaded machine (it was 10 s); the exit code
    // above already tells a refusal from a run that created the threads.
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
}
