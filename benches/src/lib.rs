//! Shared helpers for the criterion benches in `benches/benches/` and the
//! whole-process examples in `benches/examples/`.
//!
//! The benches themselves live in `benches/benches/benchmarks/<topic>.rs`
//! and are collected by `benches/benches/bench_main.rs`.

pub mod spawn;

use std::ops::RangeInclusive;

/// The batch size of the seize collectors the examples build: the
/// `SEIZE_BATCH` environment variable (1..=65536, as herd's
/// `--seize-batch`), or 256 (seize's default of 32 pays a membarrier
/// every 32 retires, 2-8x slower on this VM; the sizes that suit it are
/// 256-1024, `scripts/bench-defer-free.sh --seize-batches`).
pub fn seize_batch() -> Result<usize, String> {
    Ok(env_num("SEIZE_BATCH", 1..=1 << 16)?.unwrap_or(256) as usize)
}

/// The environment variable `name` as a number in `range`; `None` if it
/// is not set; an error naming it if it is set to anything else (an
/// experiment's knob silently ignored measures the default instead).
pub fn env_num(name: &str, range: RangeInclusive<u64>) -> Result<Option<u64>, String> {
    let bad = |v: &dyn std::fmt::Debug| {
        format!(
            "{name} must be a number in {}..={}, got {v:?}",
            range.start(),
            range.end()
        )
    };
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(bad(&v)),
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(bad(&v)),
        },
    }
}
