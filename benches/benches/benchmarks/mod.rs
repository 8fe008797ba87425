pub mod defer;
pub mod exit_hook;
pub mod pool;
pub mod read_guard;
pub mod synchronize;

/// Thread counts every contended benchmark runs at.
pub const THREADS: [usize; 3] = [1, 2, 4];
