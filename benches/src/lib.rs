//! Shared helpers for the criterion benches in `benches/benches/` and the
//! whole-process examples in `benches/examples/`.
//!
//! The benches themselves live in `benches/benches/benchmarks/<topic>.rs`
//! and are collected by `benches/benches/bench_main.rs`.

pub mod spawn;

/// The batch size of the seize collectors the examples build: the
/// `SEIZE_BATCH` environment variable, or 256 (seize's default of 32 pays
/// a membarrier every 32 retires, 2-8x slower on this VM; the sizes that
/// suit it are 256-1024, `scripts/bench-defer-free.sh --seize-batches`).
pub fn seize_batch() -> Result<usize, String> {
    match std::env::var("SEIZE_BATCH") {
        Err(_) => Ok(256),
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("SEIZE_BATCH must be a positive integer, got '{v}'")),
    }
}
