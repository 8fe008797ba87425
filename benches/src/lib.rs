//! Shared helpers for the criterion benches in `benches/benches/`.
//!
//! The benches themselves live in `benches/benches/benchmarks/<topic>.rs`
//! and are collected by `benches/benches/bench_main.rs`.
