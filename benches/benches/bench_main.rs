//! Criterion entry point: one module per topic under `benchmarks/`.
//!
//! `cargo bench -p benches` runs all; `cargo bench -p benches -- defer` one
//! topic. Contended benchmarks use `iter_custom` and say what they time.
use criterion::criterion_main;

mod benchmarks;

criterion_main! {
    benchmarks::defer::benches,
    benchmarks::defer_free::benches,
    benchmarks::read_guard::benches,
    benchmarks::synchronize::benches,
    benchmarks::exit_hook::benches,
    benchmarks::pool::benches,
}
