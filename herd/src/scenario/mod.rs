//! Scenarios. Each module has a clap `Args` struct and
//! `pub fn run(&Args) -> anyhow::Result<u8>` returning the exit code
//! (0, or 130 after Ctrl-C with partial results printed).

pub mod agent;
pub mod compare;
pub mod diff;
pub mod env;
pub mod gp;
pub mod gpkit;
pub mod load;
pub mod membarrier;
pub mod report;
pub mod storm;
pub mod sweep;
pub mod unregister;
