//! `herd::scenario::load::LoadThreads`: threads run, stop, and parked ones
//! are woken. (A separate test binary: unit tests elsewhere in herd count
//! the process's tasks and must not see these threads come and go.)

use std::sync::atomic::Ordering;
use std::time::Duration;

use herd::scenario::load::LoadThreads;

#[test]
fn threads_run_until_stopped() {
    let load = LoadThreads::start("test", 3, |_, stop| {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            std::thread::yield_now();
        }
        n
    })
    .unwrap();
    assert_eq!(load.len(), 3);
    std::thread::sleep(Duration::from_millis(20));
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
    let t = std::time::Instant::now();
    let reports = load.stop();
    assert_eq!(reports.len(), 4);
    assert!(t.elapsed() < Duration::from_secs(5));
}
