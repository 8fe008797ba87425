//! What `herd compare` and `herd sweep` refuse before they run anything:
//! `-r`, `--warmup` and plan sizes past their bounds (each child run's
//! results are kept in memory, and `herd report` reads a journal's header
//! against the same bounds), an unknown scenario, and compare's own flags
//! among the scenario's or in `--vary`/`--over` (a child would ignore them,
//! or each write its own report).

use anyhow::Result;

use crate::error::usage;
use crate::export::comparison_output::check_alpha;

/// Scenarios that produce a [`RunResult`](crate::result::RunResult) and can be compared.
pub const SCENARIOS: &[&str] = &["storm", "unregister", "gp", "membarrier", "agent"];

/// The most repetitions `-r` takes (as the scenarios' own `-r`).
pub const MAX_RUNS: usize = 10_000;
/// The most warm-up rounds `--warmup` takes.
pub const MAX_WARMUP: usize = 10_000;
/// The most configurations a comparison (or a sweep: configurations times
/// values) has: `--vary`, `--config` and the shorthands multiply, and far
/// fewer than this is already days of runs.
pub const MAX_CONFIGS: usize = 10_000;
/// The most child runs one comparison or sweep plans (configurations times
/// warm-up and measured rounds): bounds the memory of the results table
/// (and of `herd report` reading a journal's header).
pub const MAX_PLANNED_RUNS: usize = 1_000_000;

/// `-r`/`--runs` of compare and sweep: 1..=[`MAX_RUNS`] (clap names the
/// flag and exits 2 beyond).
pub fn runs_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_RUNS as u64)
}

/// `--warmup`: 0..=[`MAX_WARMUP`].
pub fn warmup_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_WARMUP as u64)
}

/// Checks the size of a plan: `configs` configurations of `rounds`
/// rounds each (warm-up included); `what` names the flags that made it.
pub fn check_plan_size(configs: usize, rounds: usize, what: &str) -> Result<()> {
    if configs > MAX_CONFIGS {
        return Err(usage(
            what,
            format!("{configs} configurations is too many (at most {MAX_CONFIGS})"),
        ));
    }
    match configs.checked_mul(rounds) {
        Some(n) if n <= MAX_PLANNED_RUNS => Ok(()),
        _ => Err(usage(
            what,
            format!(
                "{configs} configurations x {rounds} rounds is too many runs \
                 (at most {MAX_PLANNED_RUNS})"
            ),
        )),
    }
}

/// Flags that belong to compare/sweep themselves (or to the child protocol)
/// and must not appear among the scenario's flags.
const OWN_FLAGS: &[&str] = &[
    "-r",
    "--runs",
    "--json",
    "--csv",
    "--markdown",
    "--warmup",
    "--alpha",
    "--metrics",
    "--save",
    "--scenario",
    "--vary",
    "--config",
    "--over",
    "--steps",
    "--scale",
    "--out",
    "--report",
];

/// Whether `name` (a flag, maybe `--flag=value`) is one of compare's and
/// sweep's own flags (or `-rN`).
fn is_own_flag(tok: &str) -> bool {
    let name = tok.split('=').next().unwrap_or(tok);
    let short_r = name.starts_with("-r") && !name.starts_with("--") && name.len() > 1;
    OWN_FLAGS.contains(&name) || short_r
}

/// Checks a flag given to `--vary`/`--over` (`origin`): not one of
/// compare's and sweep's own (the children would ignore it, or each write
/// a report).
pub fn check_varied_flag(flag: &str, origin: &str) -> Result<()> {
    if is_own_flag(flag) {
        return Err(usage(
            origin,
            format!(
                "{flag} is compare's and sweep's own flag, not the scenario's: it cannot \
                 vary (its children would ignore it); give it once, before the scenario's flags"
            ),
        ));
    }
    Ok(())
}

/// Checks the scenario's flags: no `--` (clap takes the first one, before
/// the scenario's flags; a second one would reach every child, which
/// takes no positional argument and refuses it, but only once the
/// comparison has started and left a journal of no runs), none of
/// compare's own, and none that is also varied.
pub fn check_common(common: &[String], varied_flags: &[String]) -> Result<()> {
    for tok in common {
        if tok == "--" {
            return Err(usage(
                "--",
                "found among the scenario's flags (a second `--`, or one inside --config): \
                 the scenario takes no positional arguments, so every run would refuse it; \
                 give `--` at most once, between compare's flags and the scenario's",
            ));
        }
        let name = tok.split('=').next().unwrap_or(tok);
        if is_own_flag(name) {
            return Err(usage(
                name,
                "found among the scenario's flags: compare's and sweep's own flags \
                 (-r, --json, --vary, ...) must come before the scenario's flags, \
                 e.g. `herd compare -r 5 --cleanup locked,exitq -- --waves 50`",
            ));
        }
        if varied_flags.iter().any(|v| v == name) {
            return Err(usage(
                name,
                "is both varied and given as a shared scenario flag; give it once",
            ));
        }
    }
    Ok(())
}

/// Checks the options shared by compare and sweep.
pub fn check_run_options(scenario: &str, runs: usize, alpha: f64) -> Result<()> {
    if !SCENARIOS.contains(&scenario) {
        return Err(usage(
            "--scenario",
            format!(
                "unknown scenario `{scenario}` (one of {})",
                SCENARIOS.join(", ")
            ),
        ));
    }
    if !(1..=MAX_RUNS).contains(&runs) {
        return Err(usage(
            "--runs",
            format!("{runs}: must be 1..={MAX_RUNS} (5 or more for significance)"),
        ));
    }
    check_alpha(alpha)
}
