//! The tests' random values.

/// A small deterministic generator (xorshift) for property tests: no
/// extra dependency, reproducible failures (the seed is printed).
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(super) fn f64(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(super) fn sample(&mut self) -> Vec<f64> {
        let n = 1 + (self.next() % 12) as usize;
        let (c, w) = (self.f64(-1e3, 1e3), self.f64(0.0, 50.0));
        (0..n).map(|_| c + self.f64(-w, w)).collect()
    }
}
