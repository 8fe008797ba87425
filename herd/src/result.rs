//! The one serde document every measurement produces.
//!
//! Every scenario turns one repetition into a [`RunResult`]. The flat
//! [`RunResult::metrics`] list is what `stats`, `compare`, `diff` and
//! `sweep` work on, so they need no knowledge of any scenario; everything
//! scenario-specific (histograms, per-CPU placement, contention tables)
//! goes into [`RunResult::details`]. `herd <scenario> --json` prints this
//! document (or a [`RunSet`] for several repetitions) and the [`crate::runner`]
//! reads it back from child processes.

use serde::{Deserialize, Serialize};

/// Version of the JSON layout; bump when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// Which direction of a metric is an improvement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Smaller is better (times, syscalls, contentions).
    #[default]
    Lower,
    /// Larger is better (rates, throughput).
    Higher,
    /// Informational only (counts that are inputs, e.g. threads created).
    Neither,
}

/// One named figure of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// Stable, machine-friendly name, e.g. `wall_s`, `futex_per_exit`.
    pub name: String,
    /// Unit for display, e.g. `s`, `ms`, `calls`, `/s`, `KiB`.
    pub(crate) unit: String,
    /// The value. Unavailable figures are left out, never written as 0.
    pub value: f64,
    /// Which direction is an improvement.
    #[serde(default)]
    pub(crate) better: Better,
}

impl Metric {
    /// A metric where lower is better.
    pub fn lower(name: &str, unit: &str, value: f64) -> Self {
        Self {
            name: name.into(),
            unit: unit.into(),
            value,
            better: Better::Lower,
        }
    }
    /// A metric where higher is better.
    pub fn higher(name: &str, unit: &str, value: f64) -> Self {
        Self {
            name: name.into(),
            unit: unit.into(),
            value,
            better: Better::Higher,
        }
    }
    /// An informational metric.
    pub(crate) fn info(name: &str, unit: &str, value: f64) -> Self {
        Self {
            name: name.into(),
            unit: unit.into(),
            value,
            better: Better::Neither,
        }
    }
}

/// The result of one repetition of one scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// [`SCHEMA_VERSION`] at the time of writing.
    pub schema: u32,
    /// herd's version (`CARGO_PKG_VERSION`).
    pub(crate) herd_version: String,
    /// Scenario name: `storm`, `unregister`, `gp`, `membarrier`, `agent`.
    pub scenario: String,
    /// The arguments after the scenario name that reproduce this run.
    pub args: Vec<String>,
    /// The validated, typed options (serialized), for compatibility checks.
    pub config: serde_json::Value,
    /// Host facts at the time of the run (see `host::HostFacts`).
    pub host: serde_json::Value,
    /// Flat figures, in display order.
    pub metrics: Vec<Metric>,
    /// Scenario-specific detail: histograms, placement, contention, ...
    #[serde(default)]
    pub details: serde_json::Value,
    /// perf counters, when the scenario opened any (see `perf`).
    #[serde(default)]
    pub perf: serde_json::Value,
    /// Things the user should know (pre-flight warnings, creation failures).
    #[serde(default)]
    pub(crate) warnings: Vec<String>,
    /// True when Ctrl-C stopped the run early: figures cover what ran.
    #[serde(default)]
    pub interrupted: bool,
    /// The run's own checks that failed (cleanup violations, missing or
    /// repeated cleanups, lost contention samples, ...): the figures are
    /// all here, but not to be trusted; the process exits 4.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) checks_failed: Vec<String>,
    /// When the result was made, at the end of the run (RFC 3339, UTC);
    /// absent in results of herd before 2026-12-03.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finished_at: Option<String>,
}

/// The exit code of a finished run: 130 interrupted, 4 when its own
/// checks failed, else 0.
pub(crate) fn run_code(r: &RunResult) -> u8 {
    if r.interrupted {
        crate::error::EXIT_INTERRUPTED
    } else if !r.checks_failed.is_empty() {
        crate::error::EXIT_CHECKS
    } else {
        0
    }
}

/// The exit code of several runs (repetitions, a comparison): the first
/// of 130, 4 that any run has, else 0.
pub(crate) fn runs_code<'a>(runs: impl IntoIterator<Item = &'a RunResult>) -> u8 {
    let codes: Vec<u8> = runs.into_iter().map(run_code).collect();
    [crate::error::EXIT_INTERRUPTED, crate::error::EXIT_CHECKS]
        .into_iter()
        .find(|c| codes.contains(c))
        .unwrap_or(0)
}

/// The exit code of configurations' runs (compare, sweep): 4 when any
/// run failed its own checks (each is printed), else 0.
pub(crate) fn checks_code(sets: &[RunSet]) -> u8 {
    let mut code = 0;
    for s in sets {
        for r in &s.runs {
            for c in &r.checks_failed {
                eprintln!("herd: check failed ({}): {c}", s.label);
                code = crate::error::EXIT_CHECKS;
            }
        }
    }
    code
}

impl RunResult {
    /// A result with the common fields filled in.
    pub fn new(
        scenario: &str,
        args: Vec<String>,
        config: serde_json::Value,
        host: serde_json::Value,
    ) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            herd_version: env!("CARGO_PKG_VERSION").to_string(),
            scenario: scenario.to_string(),
            args,
            config,
            host,
            metrics: Vec::new(),
            details: serde_json::Value::Null,
            perf: serde_json::Value::Null,
            warnings: Vec::new(),
            interrupted: false,
            checks_failed: Vec::new(),
            finished_at: Some(
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            ),
        }
    }

    /// Whether the run's figures count in statistics: it ran to the end
    /// (not interrupted) and passed its own checks. A run cut short covers
    /// part of the work, and one that failed its checks (cleanups missing
    /// or run twice, samples lost, ...) may have done less of it, so
    /// either would pull a mean towards "faster". Such runs are kept in
    /// every document and listed; they are left out of means, medians and
    /// tests.
    pub fn counted(&self) -> bool {
        !self.interrupted && self.checks_failed.is_empty()
    }

    /// The value of metric `name`, if present.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }

    /// Appends a metric (replacing one of the same name). A value that is
    /// not finite (a rate over no time, 0/0) is an unavailable figure: left
    /// out, with a warning naming it. Written as it was, it became `null`
    /// in the JSON (JSON has no infinity or NaN), which no reader of a
    /// result accepts: compare, sweep and `-r N` failed on the child run.
    pub fn push(&mut self, m: Metric) {
        if !m.value.is_finite() {
            self.metrics.retain(|o| o.name != m.name);
            self.warnings.push(format!(
                "metric {} is {} (not a number it can report): left out",
                m.name, m.value
            ));
            return;
        }
        if let Some(old) = self.metrics.iter_mut().find(|o| o.name == m.name) {
            *old = m;
        } else {
            self.metrics.push(m);
        }
    }
}

/// Several repetitions of the same configuration: what `-r N --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSet {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// A label for the configuration (e.g. `--cleanup exitq`).
    pub label: String,
    /// One entry per repetition, in the order they ran.
    pub runs: Vec<RunResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A metric that is not finite is left out, said in a warning, and
    /// the result still reads back (it used to be written as `null`).
    #[test]
    fn a_metric_that_is_not_finite_is_left_out() {
        let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
        r.push(Metric::lower("wall_s", "s", 1.0));
        r.push(Metric::higher("create_rate", "threads/s", f64::INFINITY));
        r.push(Metric::lower("ratio", "x", f64::NAN));
        assert_eq!(r.metrics.len(), 1);
        assert_eq!(r.metric("create_rate"), None);
        assert!(
            r.warnings[0].contains("metric create_rate is inf"),
            "{:?}",
            r.warnings
        );
        let back: RunResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.metrics, r.metrics);
    }

    #[test]
    fn exit_codes_of_runs() {
        let new = || RunResult::new("storm", vec![], Default::default(), Default::default());
        let mut r = new();
        assert_eq!(run_code(&r), 0);
        r.checks_failed.push("cleanup: 1 cleanups ran twice".into());
        assert_eq!(run_code(&r), 4);
        let ok = new();
        assert_eq!(runs_code([&ok, &r]), 4);
        let set = |runs: Vec<RunResult>| RunSet {
            schema: SCHEMA_VERSION,
            label: "x".into(),
            runs,
        };
        assert_eq!(checks_code(&[set(vec![new()]), set(vec![r.clone()])]), 4);
        assert_eq!(checks_code(&[set(vec![new()])]), 0);
        r.interrupted = true;
        assert_eq!(runs_code([&ok, &r]), 130);
        assert_eq!(runs_code([&ok]), 0);
    }
}
