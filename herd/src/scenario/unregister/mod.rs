//! `herd unregister`: the cost of paying for a grace period per operation.
//!
//! `--updaters N` threads each, per operation, register a new object in a
//! registry (a table of `--objects` slots) and unregister the one it
//! replaces, while `--readers M` threads walk the whole registry inside exitq
//! read sections. The unregistered object may only be freed once no reader
//! can hold it, i.e. after a grace period of the domain. `--sync` says how
//! that grace period is paid for:
//!
//! * `per-op`: `synchronize()` per operation, then free (the kernel change
//!   that made an unregistration wait for a full SRCU grace period);
//! * `expedited`: `synchronize_expedited()` per operation (membarrier IPIs,
//!   spin instead of sleep: lower latency, more CPU);
//! * `deferred`: `defer(free)`; the callbacks are batched per thread and run
//!   after one grace period per batch (call_rcu instead of synchronize_rcu);
//! * `none`: free at once, no grace period. Wrong on purpose: it shows that
//!   the use-after-free check below catches what a missing grace period does.
//!
//! Use-after-free check: "freeing" an object poisons it (`magic = POISON`)
//! and returns it to a free list from which updaters reuse it (bumping its
//! generation), like a type-stable slab. Memory is never returned to the
//! allocator while threads run, so a reader that holds a freed object reads
//! valid memory and sees the poison or a new generation instead of
//! undefined behaviour. Each read section records every object it saw and
//! re-checks all of them just before it ends; any mismatch is a violation.
//! With a working domain the count is 0 in every mode but `none`.
//!
//! The measured phase ends when every update is reclaimed (`barrier()` in
//! deferred mode), so deferred work is not hidden from the rate.
//!
//! Layout: this file holds the flags and the entry point; `registry.rs`
//! the registry and its use-after-free check; `measure.rs` one run (set-up,
//! the measured phase, tear-down); `report.rs` the metrics and the text.

mod measure;
mod registry;
mod report;

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::gpkit::{self, format_duration, OutputArgs};
use crate::error::usage;
use crate::perf::PerfArgs;

/// How an unregistration waits for readers before freeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// `synchronize()` per operation.
    PerOp,
    /// `synchronize_expedited()` per operation.
    Expedited,
    /// `defer()` the free: batched, one grace period per batch.
    Deferred,
    /// No grace period at all (unsafe on purpose: shows the checker works).
    None,
}

impl SyncMode {
    pub(super) fn name(self) -> &'static str {
        match self {
            SyncMode::PerOp => "per-op",
            SyncMode::Expedited => "expedited",
            SyncMode::Deferred => "deferred",
            SyncMode::None => "none",
        }
    }
}

/// Flags of `herd unregister`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// How an unregistered object waits for readers before it is freed.
    #[arg(long, value_enum, default_value_t = SyncMode::Deferred)]
    pub sync: SyncMode,
    /// Updater threads (each registers and unregisters objects).
    #[arg(long, default_value_t = 1)]
    pub updaters: usize,
    /// Reader threads walking the registry [default: online CPUs - 1, at least 1].
    #[arg(long)]
    pub readers: Option<usize>,
    /// Slots in the registry (objects registered at any time).
    #[arg(long, default_value_t = 64)]
    pub objects: usize,
    /// How long the updaters run.
    #[arg(long, default_value = "1s", value_parser = gpkit::parse_duration)]
    pub duration: Duration,
    /// exitq: callbacks per thread-local batch (deferred mode) [default: exitq's].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// exitq: sleep before the first check of readers in a normal grace
    /// period [default: exitq's].
    #[arg(long, value_parser = gpkit::parse_duration)]
    pub first_check_delay: Option<Duration>,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
    /// Output format and repetitions.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Most threads of one role (a typo guard).
const MAX_THREADS: usize = 65_536;

impl Args {
    fn validate(&self) -> Result<()> {
        if !(1..=MAX_THREADS).contains(&self.updaters) {
            return Err(usage(
                "--updaters",
                format!("must be between 1 and {MAX_THREADS}"),
            ));
        }
        if let Some(r) = self.readers {
            if r > MAX_THREADS {
                return Err(usage("--readers", format!("must be at most {MAX_THREADS}")));
            }
        }
        if !(1..=1 << 24).contains(&self.objects) {
            return Err(usage("--objects", "must be between 1 and 16777216"));
        }
        if self.objects < self.updaters {
            return Err(usage(
                "--objects",
                format!(
                    "must be at least --updaters ({}): each updater owns its own slots",
                    self.updaters
                ),
            ));
        }
        if self.duration < Duration::from_millis(1) || self.duration > gpkit::MAX_RUN {
            return Err(usage("--duration", "must be between 1ms and 24h"));
        }
        if let Some(b) = self.batch_size {
            if !(1..=1 << 20).contains(&b) {
                return Err(usage("--batch-size", "must be between 1 and 1048576"));
            }
            if self.sync != SyncMode::Deferred {
                return Err(usage(
                    "--batch-size",
                    "only applies to --sync deferred (the other modes defer nothing)",
                ));
            }
        }
        if let Some(d) = self.first_check_delay {
            if d > Duration::from_secs(1) {
                return Err(usage("--first-check-delay", "must be at most 1s"));
            }
            if matches!(self.sync, SyncMode::None | SyncMode::Expedited) {
                return Err(usage(
                    "--first-check-delay",
                    format!(
                        "only applies to --sync per-op or deferred (--sync {} waits for no \
                         normal grace period)",
                        self.sync.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn reader_count(&self, online: usize) -> usize {
        self.readers
            .unwrap_or_else(|| online.saturating_sub(1).max(1))
    }

    /// The arguments that reproduce this configuration (no output flags).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--sync".into(),
            self.sync.name().into(),
            "--updaters".into(),
            self.updaters.to_string(),
            "--objects".into(),
            self.objects.to_string(),
            "--duration".into(),
            format_duration(self.duration),
        ];
        if let Some(r) = self.readers {
            a.extend(["--readers".into(), r.to_string()]);
        }
        if let Some(b) = self.batch_size {
            a.extend(["--batch-size".into(), b.to_string()]);
        }
        if let Some(d) = self.first_check_delay {
            a.extend(["--first-check-delay".into(), format_duration(d)]);
        }
        a.extend(gpkit::perf_args(&self.perf));
        a
    }
}

/// Runs `herd unregister`.
pub fn run(args: &Args) -> Result<u8> {
    args.validate()?;
    // Readers and updaters run together, beside exitq's reclaimer.
    let nreaders = args.reader_count(gpkit::usable_cpus().len());
    gpkit::preflight_threads(
        "",
        &format!("--readers {nreaders} and --updaters {}", args.updaters),
        nreaders + args.updaters + 1,
    )?;
    let (code, _) = gpkit::run_scenario(
        "unregister",
        &args.output,
        || {
            let mut r = report::result(args, measure::run_once(args)?)?;
            let violations = r.metric("violations").unwrap_or(0.0);
            if violations > 0.0 && args.sync != SyncMode::None {
                // The run's own check: exit 4, the result written in full.
                r.checks_failed.push(format!(
                    "{violations} read(s) saw a freed object with --sync {}: the grace period \
                     did not protect the readers (an exitq bug)",
                    args.sync.name()
                ));
            }
            Ok(r)
        },
        report::render,
    )?;
    Ok(code)
}

/// One operation in this many is timed for the latency histogram: every
/// one when it waits for a grace period (microseconds; two clock reads do
/// not matter), one in 64 when it does not (a clock read costs as much as
/// the operation).
pub(super) fn sample_every(sync: SyncMode) -> u64 {
    match sync {
        SyncMode::PerOp | SyncMode::Expedited => 1,
        SyncMode::Deferred | SyncMode::None => 64,
    }
}
