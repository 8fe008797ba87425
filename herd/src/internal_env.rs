//! herd's internal environment variables, set by hand.
//!
//! herd passes a few facts to the processes it starts through the
//! environment: [`CHILD_ENV`] (`HERD_CHILD`: this is a child run of `-r
//! N`, compare or sweep, set to the parent's pid), [`KEPT_ENV`]
//! (`HERD_PERF_KEPT=1`: the parent keeps the tracepoints registered, close
//! the counters in place) and the perf closer's `HERD_PERF_CLOSER_FDS`,
//! `_PARENT`, `_CGROUP`, `_BACK` (`perf/closer.rs`, which checks its own
//! request). Set by hand they would change what a command does without a
//! word (JSON only and no progress; counters closed in place; a herd that
//! closes descriptors instead of running). So [`check`], run by `main`
//! before any command, refuses (exit 2, naming the variable) every value
//! herd would not have set there, and says so in one line when a run
//! started at a terminal is marked as a child run.

use std::io::IsTerminal as _;

use anyhow::Result;

use crate::error::usage;
use crate::perf::closer::{BACK_ENV, CGROUP_ENV, KEPT_ENV, PARENT_ENV};
use crate::runner::{self, ChildMark, CHILD_ENV};

/// Checks herd's internal variables in this process's environment
/// (module docs); the error names the variable (exit 2).
pub fn check() -> Result<()> {
    match runner::child_mark() {
        ChildMark::Unset => {}
        ChildMark::Parent => {
            if std::io::stdin().is_terminal() || std::io::stdout().is_terminal() {
                eprintln!(
                    "herd: note: {CHILD_ENV} is set to this process's parent ({}): running as a \
                     child run of herd (no progress, warnings left to the parent); unset it for \
                     a run of your own",
                    nix::unistd::getppid()
                );
            }
        }
        ChildMark::Other(v) => {
            return Err(usage(
                CHILD_ENV,
                format!(
                    "`{v}`: the variable is internal to herd, which sets it to the parent's \
                     process id in its child runs (-r N, compare, sweep); this process's parent \
                     is {}, so this is not one of them: unset {CHILD_ENV} (--json prints the \
                     result as JSON)",
                    nix::unistd::getppid()
                ),
            ))
        }
    }
    if let Some(v) = std::env::var_os(KEPT_ENV) {
        if v != "1" || !runner::is_child() {
            return Err(usage(
                KEPT_ENV,
                format!(
                    "`{}`: the variable is internal to herd, which sets it to 1 in its child \
                     runs while the parent keeps the tracepoints registered; this is not such a \
                     run: unset {KEPT_ENV}",
                    v.to_string_lossy()
                ),
            ));
        }
    }
    for var in [PARENT_ENV, CGROUP_ENV, BACK_ENV] {
        if std::env::var_os(var).is_some() {
            return Err(usage(
                var,
                format!(
                    "set without HERD_PERF_CLOSER_FDS: the variable is internal to herd, which \
                     sets it, with the others, only for the perf closer process it starts: unset \
                     {var}"
                ),
            ));
        }
    }
    Ok(())
}
