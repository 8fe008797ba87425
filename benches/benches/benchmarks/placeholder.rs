//! Removed once the first real bench lands.
use criterion::{criterion_group, Criterion};

fn noop(c: &mut Criterion) {
    c.bench_function("noop", |b| b.iter(|| std::hint::black_box(1u64) + 1));
}

criterion_group!(benches, noop);
