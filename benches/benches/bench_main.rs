//! Criterion entry point: one module per topic under `benchmarks/`.
use criterion::criterion_main;

mod benchmarks;

criterion_main! {
    benchmarks::placeholder::benches,
    benchmarks::pool::benches,
}
