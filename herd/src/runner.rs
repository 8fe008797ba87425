//! One measurement per child process, and Ctrl-C handling.
//!
//! `-r N`, `compare` and `sweep` re-run herd itself (`current_exe`) once per
//! measurement with `--json` and read the [`RunResult`] it prints. Why a
//! process per run: leaked threads, peak RSS (`ru_maxrss`), getrusage totals
//! and inherited perf counters all belong to a process; running repetitions
//! in one process would let the first run's leftovers (leaked threads,
//! mappings, a grown heap) bias the next.
//!
//! Ctrl-C: [`install_interrupt_handler`] sets a flag that scenarios poll
//! between waves ([`interrupted`]). A child that sees it stops, prints what
//! it measured with `interrupted: true` and exits 130; the parent, which got
//! the same SIGINT (same process group), keeps that partial result and
//! starts no further runs.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, OnceLock};

use anyhow::{bail, Context, Result};

use crate::error::{
    ResourceError, UsageError, EXIT_CHECKS, EXIT_INTERRUPTED, EXIT_RESOURCE, EXIT_USAGE,
};
use crate::result::RunResult;

/// Set in the environment of child runs so they know they are children
/// (no progress bars, no nested repetitions), to the parent's process id:
/// a child checks it against its own parent ([`child_mark`]), so a value
/// set by hand, or inherited from a herd that is not the parent, is told
/// apart (and refused, `internal_env.rs`).
pub const CHILD_ENV: &str = "HERD_CHILD";

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// Extra environment of every child run (e.g. `HERD_PERF_KEPT` while a
/// parent keeps the tracepoints registered).
static CHILD_ENV_EXTRA: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Sets (`Some`) or removes (`None`) one variable of the child runs'
/// environment.
pub fn set_child_env(key: &str, value: Option<&str>) {
    let mut env = CHILD_ENV_EXTRA.lock().unwrap_or_else(|p| p.into_inner());
    env.retain(|(k, _)| k != key);
    if let Some(v) = value {
        env.push((key.to_string(), v.to_string()));
    }
}

/// Installs the Ctrl-C handler once per process. Safe to call repeatedly.
pub fn install_interrupt_handler() {
    INSTALL.call_once(|| {
        // Relaxed is enough: the flag carries no data, readers only poll it.
        let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::Relaxed));
    });
}

/// True once Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Marks the run as interrupted (tests and internal stops use this too).
pub fn set_interrupted() {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// What [`CHILD_ENV`] says about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildMark {
    /// Not set: a run of the user's.
    Unset,
    /// Set to the parent's process id, as [`run_child`] sets it: a child run.
    Parent,
    /// Set to something else (the value): by hand, or inherited from a
    /// herd that is not this process's parent.
    Other(String),
}

/// Reads [`CHILD_ENV`] and compares it with the parent's process id.
pub fn child_mark() -> ChildMark {
    match std::env::var_os(CHILD_ENV) {
        None => ChildMark::Unset,
        Some(v) => {
            let parent = nix::unistd::getppid().as_raw().to_string();
            if v.to_str() == Some(parent.as_str()) {
                ChildMark::Parent
            } else {
                ChildMark::Other(v.to_string_lossy().into_owned())
            }
        }
    }
}

/// True when this process is a child measurement started by [`run_child`]
/// ([`ChildMark::Parent`]). Decided once, at the first call (herd's `main`
/// makes it at start-up): a child whose parent dies mid-run stays one.
pub fn is_child() -> bool {
    static CHILD: OnceLock<bool> = OnceLock::new();
    *CHILD.get_or_init(|| child_mark() == ChildMark::Parent)
}

/// Runs `herd <scenario> <args...> --json` in a child process and returns
/// the result it printed. stderr is passed through (pre-flight warnings
/// stay visible). A child that exits 2 becomes a [`UsageError`], 3 a
/// [`ResourceError`]; one that was interrupted returns its partial result
/// with `interrupted` set, one whose own checks failed (4) its whole
/// result with `checks_failed`.
pub fn run_child(scenario: &str, args: &[String]) -> Result<RunResult> {
    let exe = std::env::current_exe().context("cannot find herd's own executable")?;
    let mut cmd = Command::new(&exe);
    cmd.arg(scenario).args(args).arg("--json");
    for (k, v) in CHILD_ENV_EXTRA
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        cmd.env(k, v);
    }
    cmd.env(CHILD_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let code = out.status.code();
    if code == Some(EXIT_USAGE as i32) {
        return Err(UsageError::new(
            "",
            format!(
                "herd {scenario} {} was refused (see the message above)",
                args.join(" ")
            ),
        )
        .into());
    }
    if code == Some(EXIT_RESOURCE as i32) {
        return Err(ResourceError {
            flag: String::new(),
            message: format!(
                "herd {scenario} {} was refused: the host cannot give it what it needs (see the \
                 message above)",
                args.join(" ")
            ),
        }
        .into());
    }
    let parsed: Result<RunResult, _> = serde_json::from_slice(&out.stdout);
    match (code, parsed) {
        // A run whose own checks failed is still a whole result (exit 4).
        (Some(0), Ok(r)) => Ok(r),
        (Some(c), Ok(r)) if c == EXIT_CHECKS as i32 => Ok(r),
        (Some(c), Ok(mut r)) if c == EXIT_INTERRUPTED as i32 => {
            r.interrupted = true;
            set_interrupted();
            Ok(r)
        }
        (_, parsed) => {
            let how = match code {
                Some(c) => format!("exit code {c}"),
                None => format!("killed by a signal ({:?})", out.status),
            };
            let parse = parsed
                .err()
                .map(|e| format!("; its output did not parse: {e}"))
                .unwrap_or_default();
            bail!(
                "child run `herd {scenario} {}` failed: {how}{parse}",
                args.join(" ")
            )
        }
    }
}
