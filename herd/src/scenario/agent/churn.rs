//! What a runner reports when it is shut down: threads spawned, creations
//! that failed, exits (or retirement decisions) and when. Its own module
//! because every runner (`runner.rs`, `rayon_mode.rs`, `tokio_blocking.rs`)
//! fills one and the report reads it.

/// Exit and spawn bookkeeping gathered by one run.
#[derive(Debug, Default)]
pub(super) struct Churn {
    pub(super) spawned: u64,
    pub(super) spawn_failures: u64,
    pub(super) last_spawn_error: Option<String>,
    /// Exit (or retirement decision) times, ns since the run's start.
    pub(super) exits_ns: Vec<u64>,
    pub(super) ran_on_caller: u64,
}
