//! Scenarios. Each module has a clap `Args` struct and
//! `pub fn run(&Args) -> anyhow::Result<u8>` returning the exit code
//! (0, or 130 after Ctrl-C with partial results printed).

pub(crate) mod agent;
pub(crate) mod compare;
pub(crate) mod diff;
pub(crate) mod env;
pub(crate) mod gp;
pub(crate) mod gpkit;
pub(crate) mod load;
pub(crate) mod membarrier;
pub(crate) mod report;
pub(crate) mod storm;
pub(crate) mod sweep;
pub(crate) mod unregister;

// For the tests (the load threads) and the benches (the mutex pool).
pub use agent::MutexPool;
pub use load::LoadThreads;
