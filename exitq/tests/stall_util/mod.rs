//! A domain whose stall reports are collected, and the threads that end a
//! reader's hold (once a stall is reported, or after a delay): what the
//! grace-period and stall tests of `tests/grace_periods.rs` and
//! `tests/qsbr.rs` share.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use exitq::{Domain, Stall};

/// The reports a domain's stall handler collected.
pub type Reports = Arc<Mutex<Vec<Stall>>>;

/// A domain that reports a reader stalling a grace period after 20 ms into
/// the returned list.
pub fn reporting_domain() -> (Domain, Reports) {
    let reports: Reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let d = Domain::builder()
        .stall_timeout(Duration::from_millis(20))
        .stall_handler(move |s| sink.lock().unwrap().push(s.clone()))
        .build();
    (d, reports)
}

/// Sets `release` once a stall has been reported, or after 60 s, so that a
/// broken detector fails the test's assertions instead of hanging it (not
/// less: a loaded machine may delay a report by seconds).
pub fn release_after_first_report(release: &Arc<AtomicBool>, reports: &Reports) -> JoinHandle<()> {
    let (release, reports) = (release.clone(), reports.clone());
    thread::spawn(move || {
        for _ in 0..60_000 {
            if !reports.lock().unwrap().is_empty() {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        release.store(true, Ordering::SeqCst);
    })
}

/// Sets `release` after `delay`, from another thread: a reader held until
/// then is still inside when the caller's `synchronize` starts.
pub fn release_after(release: &Arc<AtomicBool>, delay: Duration) -> JoinHandle<()> {
    let release = release.clone();
    thread::spawn(move || {
        thread::sleep(delay);
        release.store(true, Ordering::SeqCst);
    })
}
