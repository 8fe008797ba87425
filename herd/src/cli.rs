//! Command-line definitions. Each subcommand's flags live next to the code
//! that uses them (`scenario::<name>::Args`, `host::EnvArgs`); this file only
//! lists the subcommands. Plain `herd` (no subcommand) runs `herd storm` on
//! its defaults.

use clap::{Parser, Subcommand};

use crate::{host, scenario};

/// Reproduce and measure the thread-exit thundering herd.
#[derive(Debug, Parser)]
#[command(name = "herd", version, about, long_about = None)]
pub struct Cli {
    /// What to run; `storm` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// herd's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Waves of short-lived threads spawned and cancelled across every CPU.
    Storm(scenario::storm::Args),
    /// Host facts and limits: CPUs, kernel, thread limits, perf and tracefs.
    Env(host::EnvArgs),
    /// Several configurations, interleaved and repeated, with significance.
    Compare(scenario::compare::Args),
    /// Compare two saved JSON results.
    Diff(scenario::diff::Args),
    /// One flag over a range for several configurations, with SVG charts.
    Sweep(scenario::sweep::Args),
    /// Register/unregister objects under an exitq domain with readers active.
    Unregister(scenario::unregister::Args),
    /// Grace-period latency as a function of the first-check delay and load.
    Gp(scenario::gp::Args),
    /// membarrier(2) PRIVATE_EXPEDITED rate and latency.
    Membarrier(scenario::membarrier::Args),
    /// Bursts of short jobs: thread per job vs pools (exitq::pool).
    Agent(scenario::agent::Args),
}
