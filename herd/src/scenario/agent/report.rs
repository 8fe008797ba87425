//! `herd agent`'s run result: time and CPU per job, queueing latency, the
//! churn (threads spawned, exits, how the exits bunch up), perf counters
//! per job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;

use super::churn::Churn;
use super::runner::JobLog;
use super::{Args, Config, Waves};
use crate::export::histogram;
use crate::perf;
use crate::result::{Metric, RunResult};
use crate::runner as child;
use crate::stats::Summary;
use crate::usage::Usage;

/// What one agent run measured.
pub(super) struct Measured<'a> {
    pub(super) args: &'a Args,
    pub(super) cfg: &'a Config,
    pub(super) ncpu: usize,
    pub(super) waves: &'a Waves,
    pub(super) churn: &'a Churn,
    pub(super) log: &'a JobLog,
    pub(super) submitted: &'a [AtomicU64],
    pub(super) ru0: Usage,
    pub(super) ru1: Usage,
    pub(super) perf: &'a perf::Report,
    /// `--cleanup`'s report (thread per job).
    pub(super) cleanup: Option<&'a crate::cleanup::Report>,
}

impl Measured<'_> {
    /// Jobs run.
    fn jobs(&self) -> u64 {
        (self.waves.done * self.cfg.jobs) as u64
    }

    /// `v` per job (0 when no job ran).
    fn per_job(&self, v: f64) -> f64 {
        match self.jobs() {
            0 => 0.0,
            n => v / n as f64,
        }
    }
}

/// The run result of a measured agent run.
pub(super) fn build(m: &Measured<'_>) -> Result<RunResult> {
    let mut r = RunResult::new(
        "agent",
        m.args.to_args(),
        serde_json::to_value(m.cfg)?,
        serde_json::json!({ "cpus": m.ncpu }),
    );
    r.interrupted = m.waves.done < m.cfg.waves;
    push_time_and_cpu(&mut r, m);
    push_latency(&mut r, m)?;
    push_churn(&mut r, m);
    push_perf(&mut r, m);
    if let Some(c) = m.cleanup {
        for x in c.metrics(m.churn.exits_ns.len() as u64) {
            r.push(x);
        }
        r.checks_failed.extend(c.problems());
        r.details["cleanup"] = serde_json::to_value(c)?;
    }
    for w in &r.warnings {
        if !m.args.out.json && !m.args.out.csv && !child::is_child() {
            eprintln!("warning: {w}");
        }
    }
    Ok(r)
}

/// Wall and busy time, jobs per second, user/sys CPU and per job.
fn push_time_and_cpu(r: &mut RunResult, m: &Measured<'_>) {
    let user = m.ru1.user_s - m.ru0.user_s;
    let sys = m.ru1.sys_s - m.ru0.sys_s;
    let busy = m.waves.busy.as_secs_f64();
    r.push(Metric::lower("wall_s", "s", m.waves.wall.as_secs_f64()));
    r.push(Metric::lower("busy_s", "s", busy));
    r.push(Metric::higher(
        "jobs_per_s",
        "/s",
        m.jobs() as f64 / busy.max(1e-9),
    ));
    r.push(Metric::lower("user_s", "s", user));
    r.push(Metric::lower("sys_s", "s", sys));
    r.push(Metric::lower("sys_us_per_job", "us", m.per_job(sys) * 1e6));
    r.push(Metric::lower(
        "cpu_us_per_job",
        "us",
        m.per_job(user + sys) * 1e6,
    ));
}

/// Queueing latency (submit to start) and completion latency (submit to
/// end: what the submitter waits for; a pool with more threads than CPUs
/// starts jobs sooner and finishes them later) over all jobs that ran; a
/// job that never ran is a bug in the runner and fails the run.
fn push_latency(r: &mut RunResult, m: &Measured<'_>) -> Result<()> {
    let mut lat = hdrhistogram::Histogram::<u64>::new(3)?;
    let mut done = hdrhistogram::Histogram::<u64>::new(3)?;
    let mut missing = 0u64;
    for i in 0..(m.waves.done * m.cfg.jobs) {
        let s = m.log.started_ns[i].load(Ordering::Relaxed);
        let e = m.log.ended_ns[i].load(Ordering::Relaxed);
        let q = m.submitted[i].load(Ordering::Relaxed);
        if s == 0 {
            missing += 1;
        } else {
            lat.record(s.saturating_sub(q) / 1000)?;
            done.record(e.saturating_sub(q) / 1000)?;
        }
    }
    if missing > 0 {
        anyhow::bail!(
            "{missing} jobs never ran (a bug in the {} runner)",
            m.cfg.mode.name()
        );
    }
    if !lat.is_empty() {
        r.details["histograms"] = serde_json::json!({
            "latency": histogram::to_json(&lat, "us"),
            "completion": histogram::to_json(&done, "us"),
        });
        for (what, h) in [("latency", &lat), ("completion", &done)] {
            for (q, p) in [(0.5, "p50"), (0.99, "p99")] {
                let name = format!("{what}_{p}_us");
                r.push(Metric::lower(&name, "us", h.value_at_quantile(q) as f64));
            }
        }
    }
    Ok(())
}

/// Threads spawned and exited, the exit herd's shape, failed creations.
fn push_churn(r: &mut RunResult, m: &Measured<'_>) {
    let churn = m.churn;
    for (name, v) in [
        ("threads_spawned", churn.spawned),
        ("thread_exits", churn.exits_ns.len() as u64),
    ] {
        r.push(Metric::info(name, "threads", v as f64));
    }
    r.push(Metric::lower(
        "spawns_per_wave",
        "threads",
        churn.spawned as f64 / m.waves.done.max(1) as f64,
    ));
    let (burst, spread) = exit_shape(
        &churn.exits_ns,
        &m.waves.starts_ns,
        Duration::from_millis(1),
    );
    r.push(Metric::lower("max_exits_per_ms", "exits", burst as f64));
    if let Some(s) = spread {
        r.push(Metric::info("exit_spread_p50_ms", "ms", s));
    }
    if churn.spawn_failures > 0 {
        r.push(Metric::lower(
            "spawn_failures",
            "threads",
            churn.spawn_failures as f64,
        ));
        r.warnings.push(failure_warning(churn));
        if !churn.failure_groups.is_empty() {
            // As `herd storm` records them (the page's failure table).
            r.details["failures"] =
                serde_json::to_value(&churn.failure_groups).unwrap_or(serde_json::Value::Null);
            r.details["failure_diagnoses"] = churn.diagnoses.into();
            r.details["failure_refusals"] = churn.refused.into();
        }
    }
}

/// The warning of a run whose thread creations failed: how many, and
/// what is known of why, saying which failure each explanation is of.
/// Thread per job: every cause (errno and limit) with its count, its
/// evidence and the wave of its first failure, and the diagnoses made
/// (one per errno and wave). The pools: the one failure they explain
/// ([`super::churn::SpawnNote`]).
fn failure_warning(churn: &Churn) -> String {
    let head = format!(
        "{} thread creations failed ({} jobs ran on the submitter instead)",
        churn.spawn_failures, churn.ran_on_caller
    );
    if !churn.failure_groups.is_empty() {
        let causes: Vec<String> = churn
            .failure_groups
            .iter()
            .map(|g| {
                format!(
                    "{} with {} ({}): {}; first in wave {} after {} threads created",
                    g.count, g.errno_name, g.limit_name, g.evidence, g.first_wave, g.created_before
                )
            })
            .collect();
        return format!(
            "{head}, by cause: {} ({})",
            causes.join("; "),
            explained(churn)
        );
    }
    match &churn.spawn_note {
        Some(n) => format!("{head}; {}: {}", n.which, n.why),
        None => format!("{head}; no explanation recorded"),
    }
}

/// How the failures of thread per job were explained: diagnoses made
/// (one per error number and wave) and refusals for want of room, which
/// explain themselves.
fn explained(churn: &Churn) -> String {
    let diagnosed = churn.spawn_failures.saturating_sub(churn.refused);
    let diagnoses = format!(
        "{} diagnoses: one per error number and wave",
        churn.diagnoses
    );
    match (churn.refused, diagnosed) {
        (0, _) => diagnoses,
        (r, 0) => format!(
            "{r} refused for want of room for the thread, each refusal explaining itself: no \
             diagnosis needed"
        ),
        (r, _) => {
            format!("{diagnoses}; {r} refused for want of room, each refusal explaining itself")
        }
    }
}

/// The perf counters, futex calls and contentions per job, their notes
/// and the contention table.
fn push_perf(r: &mut RunResult, m: &Measured<'_>) {
    let report = m.perf;
    let perf_metrics = report.metrics(0);
    for x in &perf_metrics {
        r.push(x.clone());
    }
    for (total_name, name) in [
        ("futex_calls", "futex_per_job"),
        ("lock_contentions", "contentions_per_job"),
    ] {
        if let Some(x) = perf_metrics.iter().find(|x| x.name == total_name) {
            r.push(Metric::lower(name, "calls", m.per_job(x.value)));
        }
    }
    // The whole measured phase's counts over the workers that retired in
    // it (absent when none did: rayon).
    let exits = m.churn.exits_ns.len();
    for (total_name, name) in [
        ("futex_calls", "futex_per_exit"),
        ("lock_contentions", "contentions_per_exit"),
    ] {
        if let Some(x) = perf_metrics.iter().find(|x| x.name == total_name) {
            if exits > 0 {
                r.push(Metric::lower(name, "calls", x.value / exits as f64));
            }
        }
    }
    r.perf = report.to_json();
    r.warnings.extend(report.notes());
    if let Some(t) = report.contention_table() {
        r.details["contention_table"] = t.into();
    }
}

/// The most exits within any `window`, and the median over waves of how
/// long each wave's exits took from first to last (ms). Wave `i` owns the
/// exits from its start to the next wave's start (its burst and its gap);
/// waves with fewer than two exits are left out.
fn exit_shape(exits_ns: &[u64], wave_starts_ns: &[u64], window: Duration) -> (usize, Option<f64>) {
    let mut v = exits_ns.to_vec();
    v.sort_unstable();
    let w = window.as_nanos() as u64;
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..v.len() {
        while v[hi] - v[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    let mut spreads = Vec::new();
    for (i, &start) in wave_starts_ns.iter().enumerate() {
        let end = wave_starts_ns.get(i + 1).copied().unwrap_or(u64::MAX);
        let mine: Vec<u64> = v
            .iter()
            .copied()
            .filter(|&t| t >= start && t < end)
            .collect();
        if let (Some(first), Some(last)) = (mine.first(), mine.last()) {
            if mine.len() >= 2 {
                spreads.push((last - first) as f64 / 1e6);
            }
        }
    }
    (best, Summary::of(&spreads).map(|s| s.median))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::failure::{DiagContext, Failures};

    /// The warning says which failure it explains: every cause of thread
    /// per job with its count and first wave; a pool's one failure with
    /// what it is (it said `last:` before the explanation of whichever
    /// failure the runner kept: the mutex pool kept the first of each
    /// error number).
    #[test]
    fn the_failure_warning_says_which_failure_it_explains() {
        let ctx = DiagContext {
            stack_bytes: 2 << 20,
            read: exitq::limits::Readings::default,
        };
        let mut f = Failures::default();
        for _ in 0..5 {
            f.record(libc::EAGAIN, 2, 30, &ctx);
        }
        let churn = Churn {
            spawn_failures: f.total(),
            failure_groups: f.groups(),
            diagnoses: f.diagnoses(),
            ran_on_caller: 5,
            ..Churn::default()
        };
        let w = failure_warning(&churn);
        assert!(
            w.starts_with(
                "5 thread creations failed (5 jobs ran on the submitter instead), by cause: 5 \
                 with EAGAIN (memory): "
            ),
            "{w}"
        );
        assert!(
            w.contains("first in wave 2 after 30 threads created"),
            "{w}"
        );
        assert!(
            w.ends_with("(1 diagnoses: one per error number and wave)"),
            "{w}"
        );
        assert!(!w.contains("last:"), "{w}");
        // Refusals for want of room explain themselves.
        let refusal = exitq::limits::NoRoom(exitq::limits::Diagnosis {
            errno: libc::EAGAIN,
            limit: exitq::limits::Limit::RlimitAs,
            detail: "RLIMIT_AS 1 nearly reached".into(),
        });
        let mut f = Failures::default();
        for _ in 0..4 {
            f.record_refused(&refusal, 0, 6);
        }
        let refused = |f: &Failures| Churn {
            spawn_failures: f.total(),
            failure_groups: f.groups(),
            diagnoses: f.diagnoses(),
            refused: f.refused(),
            ..Churn::default()
        };
        let w = failure_warning(&refused(&f));
        assert!(
            w.contains("4 with EAGAIN (RLIMIT_AS): RLIMIT_AS 1 nearly reached; first in wave 0")
                && w.ends_with(
                    "(4 refused for want of room for the thread, each refusal explaining \
                     itself: no diagnosis needed)"
                ),
            "{w}"
        );
        f.record(libc::EAGAIN, 1, 30, &ctx);
        let w = failure_warning(&refused(&f));
        assert!(
            w.ends_with(
                "(1 diagnoses: one per error number and wave; 4 refused for want of room, \
                 each refusal explaining itself)"
            ),
            "{w}"
        );
        let pool = Churn {
            spawn_failures: 3,
            spawn_note: Some(super::super::churn::SpawnNote {
                which: "the last failure (0.250 s into the run)".into(),
                why: "EAGAIN: RLIMIT_AS ...".into(),
            }),
            ..Churn::default()
        };
        assert_eq!(
            failure_warning(&pool),
            "3 thread creations failed (0 jobs ran on the submitter instead); the last failure \
             (0.250 s into the run): EAGAIN: RLIMIT_AS ..."
        );
    }

    #[test]
    fn exit_shape_counts_the_densest_millisecond_and_wave_spread() {
        let ms = 1_000_000;
        // Wave 0 (from 0): 5 exits within 0.5 ms; wave 1 (from 40 ms): 3
        // exits over 6 ms; wave 2 (from 100 ms): one exit (no spread).
        let v = [
            0,
            100_000,
            200_000,
            300_000,
            400_000,
            50 * ms,
            53 * ms,
            56 * ms,
            120 * ms,
        ];
        let (burst, spread) = exit_shape(&v, &[0, 40 * ms, 100 * ms], Duration::from_millis(1));
        assert_eq!(burst, 5);
        // Spreads 0.4 ms and 6 ms: median 3.2.
        assert!((spread.unwrap() - 3.2).abs() < 1e-9);
        assert_eq!(exit_shape(&[], &[0], Duration::from_millis(1)), (0, None));
    }
}
