//! Shared by the cache suites (`cache.rs`, `red_cache.rs`): a cell value
//! that counts its drops and knows whether it was dropped, so a read of a
//! dropped value and a second drop fail the test that made them.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// A value that counts its drops and knows whether it was dropped.
#[derive(Debug)]
pub struct Value {
    pub n: u64,
    dropped: AtomicBool,
    drops: Arc<AtomicUsize>,
}

impl Value {
    pub fn new(n: u64, drops: &Arc<AtomicUsize>) -> Value {
        Value {
            n,
            dropped: AtomicBool::new(false),
            drops: drops.clone(),
        }
    }

    /// Its number, after checking it was not dropped.
    pub fn check(&self) -> u64 {
        assert!(
            !self.dropped.load(Ordering::Relaxed),
            "read a dropped value"
        );
        self.n
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        assert!(!self.dropped.swap(true, Ordering::Relaxed), "dropped twice");
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// How many values counting into `drops` were dropped.
pub fn dropped(drops: &AtomicUsize) -> usize {
    drops.load(Ordering::Relaxed)
}
