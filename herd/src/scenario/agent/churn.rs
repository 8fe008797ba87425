//! What a runner reports when it is shut down: threads spawned, creations
//! that failed (and what is known of why), exits (or retirement
//! decisions) and when. Its own module because every runner
//! (`per_job.rs`, `runner.rs`, `rayon_mode.rs`, `tokio_blocking.rs`)
//! fills one and the report reads it.

use crate::spawn::failure::FailureGroup;

/// Exit and spawn bookkeeping gathered by one run.
#[derive(Debug, Default)]
pub(super) struct Churn {
    pub(super) spawned: u64,
    pub(super) spawn_failures: u64,
    /// Thread per job: the failed creations by errno and limit, each with
    /// its count, first wave and the evidence of its diagnosis.
    pub(super) failure_groups: Vec<FailureGroup>,
    /// Thread per job: diagnoses made (at most one per errno and wave).
    pub(super) diagnoses: u64,
    /// Thread per job: creations refused for want of room, each
    /// explained by its refusal (not among `diagnoses`).
    pub(super) refused: u64,
    /// The pools: what they can say of their failed creations, worded to
    /// say which failure it explains and when (`SpawnNote`).
    pub(super) spawn_note: Option<SpawnNote>,
    /// Exit (or retirement decision) times, ns since the run's start.
    pub(super) exits_ns: Vec<u64>,
    pub(super) ran_on_caller: u64,
}

/// A pool's explanation of a failed creation, and which failure it is.
#[derive(Debug, Clone)]
pub(super) struct SpawnNote {
    /// Which failure is explained, and when it happened (`the last
    /// failure`, `the first EAGAIN failure, 0.135 s into the run`).
    pub(super) which: String,
    /// The explanation: the error and the limit with its numbers.
    pub(super) why: String,
}
