//! `exit_futex`'s machinery, by idea: the per-thread counters
//! (`counters.rs`), the foreign-futex filter (`filter.rs`), and the test
//! threads with their hand-shake (`threads.rs`). The test itself, its
//! phases and what they must show, is `tests/exit_futex.rs`.

pub mod counters;
pub mod filter;
pub mod threads;
