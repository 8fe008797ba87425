//! The `--cleanup` flags: which strategy and the size of its work, and
//! their validation (usage errors name the flag, exit 2). Which strategy
//! uses which of the other flags: `knobs.rs`.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::usage;

/// How the per-thread exit work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// No exit work at all.
    #[default]
    None,
    /// Everything under one std Mutex (the baseline).
    Locked,
    /// One lock-free push at exit; batched cleanup after a grace period.
    Exitq,
    /// Unlink, then a full grace period (synchronize) on every exit.
    Sync,
    /// Unlink, then an expedited grace period (membarrier) on every exit.
    Expedited,
    /// Unlink, then `defer_destroy` the entry through a registered
    /// crossbeam-epoch `LocalHandle`, flushed.
    #[serde(rename = "crossbeam-epoch")]
    #[value(name = "crossbeam-epoch")]
    CrossbeamEpoch,
    /// Unlink, then drop the entry's `sdd::Owned` (sdd's epoch collector).
    Sdd,
    /// Unlink, then `seize::Collector::retire` with `reclaim::boxed`.
    Seize,
    /// Unlink, then liburcu's `call_rcu` (urcu-memb; liburcu loaded at run
    /// time).
    Urcu,
}

impl Strategy {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Locked => "locked",
            Strategy::Exitq => "exitq",
            Strategy::Sync => "sync",
            Strategy::Expedited => "expedited",
            Strategy::CrossbeamEpoch => "crossbeam-epoch",
            Strategy::Sdd => "sdd",
            Strategy::Seize => "seize",
            Strategy::Urcu => "urcu",
        }
    }
}

/// `--cleanup` flags (flattened into `herd storm` and `herd agent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct CleanupArgs {
    /// Exit-cleanup strategy: none, locked, exitq, sync, expedited, or a
    /// reclamation library: crossbeam-epoch, sdd, seize, urcu.
    #[arg(long, value_enum, default_value_t = Strategy::None)]
    pub cleanup: Strategy,
    /// Size of each thread's cleanup: words in its buffer and number of
    /// statistics counters merged at exit (1..=1048576). Every strategy but
    /// none; set with none it has no effect, and a warning says so.
    #[arg(long, default_value_t = DEFAULT_WORK, value_name = "WORDS")]
    pub cleanup_work: usize,
    /// Pause of the registry monitor between two walks, microseconds
    /// (0: walk back to back). Every strategy but none; set with none it
    /// has no effect, and a warning says so.
    #[arg(long, default_value_t = DEFAULT_MONITOR_US, value_name = "US")]
    pub cleanup_monitor_us: u64,
    /// exitq strategy: how often the idle reclaimer looks for exited
    /// threads' cleanups, milliseconds (1..=1000). Longer: bigger batches,
    /// fewer grace periods (each costs the reclaimer a timed futex wait),
    /// but dead threads stay registered longer. Other strategies ignore
    /// it, and a warning says so.
    #[arg(long, default_value_t = DEFAULT_POLL_MS, value_name = "MS")]
    pub cleanup_poll_ms: u64,
    /// seize strategy: retired objects per batch before seize tries to
    /// reclaim (1..=65536, rounded up to a power of two by seize) [default:
    /// seize's own, 32 or the CPU count if larger]. Each attempt costs one
    /// membarrier (an IPI to every CPU running the process); smaller
    /// batches free sooner, larger ones pay fewer IPIs. Other strategies
    /// ignore it, and a warning says so.
    #[arg(long, value_name = "N")]
    pub seize_batch: Option<usize>,
}

/// Default `--cleanup-poll-ms` (exitq's own default is 10 ms; 50 ms
/// cuts the grace periods of a storm about fivefold, see docs/results-cleanup.md).
pub const DEFAULT_POLL_MS: u64 = 50;

/// Default `--cleanup-work`.
pub const DEFAULT_WORK: usize = 256;
/// Default `--cleanup-monitor-us`.
pub const DEFAULT_MONITOR_US: u64 = 100;
/// Largest `--cleanup-work`.
pub const MAX_WORK: usize = 1 << 20;
/// Largest `--seize-batch`.
pub const MAX_SEIZE_BATCH: usize = 1 << 16;

impl Default for CleanupArgs {
    fn default() -> Self {
        CleanupArgs {
            cleanup: Strategy::None,
            cleanup_work: DEFAULT_WORK,
            cleanup_monitor_us: DEFAULT_MONITOR_US,
            cleanup_poll_ms: DEFAULT_POLL_MS,
            seize_batch: None,
        }
    }
}

impl CleanupArgs {
    /// Checks the values (usage errors name the flag), and that the
    /// strategy's library can be used here (`urcu`: liburcu installed).
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_WORK).contains(&self.cleanup_work) {
            return Err(usage(
                "--cleanup-work",
                format!("{} is not in 1..={MAX_WORK}", self.cleanup_work),
            ));
        }
        if !(1..=1000).contains(&self.cleanup_poll_ms) {
            return Err(usage(
                "--cleanup-poll-ms",
                format!("{} is not in 1..=1000", self.cleanup_poll_ms),
            ));
        }
        if self.cleanup_monitor_us > 1_000_000 {
            return Err(usage(
                "--cleanup-monitor-us",
                format!("{} is more than one second", self.cleanup_monitor_us),
            ));
        }
        if let Some(b) = self.seize_batch {
            if !(1..=MAX_SEIZE_BATCH).contains(&b) {
                return Err(usage(
                    "--seize-batch",
                    format!("{b} is not in 1..={MAX_SEIZE_BATCH}"),
                ));
            }
        }
        if self.cleanup == Strategy::Urcu {
            super::liburcu::load().map_err(|why| usage("--cleanup", why))?;
        }
        Ok(())
    }
}
