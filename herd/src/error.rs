//! Error kinds and outcomes that decide the process exit code, the way
//! stress-ng separates them (its 2 is our usage code, as clap's):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | the run completed and its own checks passed |
//! | 1 | a runtime failure ([`anyhow::Error`] of any other kind) |
//! | 2 | usage: an invalid command line ([`UsageError`]: bad value, lag >= slots, unknown CPU) |
//! | 3 | a resource refusal before the run ([`ResourceError`]: pre-flight predicts thread creation fails, `--require-perf` counters unavailable, `--futex-hash` unsupported) |
//! | 4 | the run completed, its results are written in full, but its own checks failed ([`RunResult::checks_failed`](crate::result::RunResult::checks_failed): cleanup violations, missing or repeated cleanups, lost contention samples unless `--allow-lost-samples`, reads of freed objects) |
//! | 130 | stopped by Ctrl-C (partial results written) |
//!
//! Code returns `anyhow::Result` and wraps usage and resource problems in
//! their types; `main` finds them with `downcast_ref` anywhere in the
//! chain. `RunResult::exit_code` turns a finished run into 0, 4 or 130.

use std::fmt;

/// Exit code for usage errors (matches clap).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code for runtime failures.
pub(crate) const EXIT_FAILURE: u8 = 1;
/// Exit code when a run was interrupted by Ctrl-C (128 + SIGINT).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;
/// Exit code for a resource refusal before the run (stress-ng's
/// EXIT_NO_RESOURCE).
pub const EXIT_RESOURCE: u8 = 3;
/// Exit code when a run completed but its own checks failed (its results
/// are written in full).
pub(crate) const EXIT_CHECKS: u8 = 4;

/// A command-line value that is invalid, names the flag it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsageError {
    /// The flag, e.g. `--lag`; empty when the problem spans several flags.
    pub flag: String,
    /// What is wrong and, where possible, what would work.
    pub message: String,
}

impl UsageError {
    /// A usage error about `flag`.
    pub fn new(flag: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            flag: flag.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.flag.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "invalid {}: {}", self.flag, self.message)
        }
    }
}

impl std::error::Error for UsageError {}

/// The host cannot give what the run needs (checked before it starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceError {
    /// The flag that asks for it, or empty.
    pub flag: String,
    /// What is missing and what would provide it.
    pub message: String,
}

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.flag.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.flag, self.message)
        }
    }
}

impl std::error::Error for ResourceError {}

/// Shorthand for a [`ResourceError`].
pub(crate) fn resource(flag: impl Into<String>, message: impl Into<String>) -> anyhow::Error {
    ResourceError {
        flag: flag.into(),
        message: message.into(),
    }
    .into()
}

/// Shorthand: `Err(usage("--lag", "must be smaller than --slots"))?`.
pub(crate) fn usage(flag: impl Into<String>, message: impl Into<String>) -> anyhow::Error {
    UsageError::new(flag, message).into()
}

/// The exit code for an error chain: 2 if any link is a [`UsageError`],
/// 3 if one is a [`ResourceError`], else 1.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err
        .chain()
        .any(|e| e.downcast_ref::<UsageError>().is_some())
    {
        EXIT_USAGE
    } else if err
        .chain()
        .any(|e| e.downcast_ref::<ResourceError>().is_some())
    {
        EXIT_RESOURCE
    } else {
        EXIT_FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_table() {
        assert_eq!(exit_code_for(&usage("--lag", "x")), 2);
        assert_eq!(exit_code_for(&resource("", "no threads")), 3);
        let wrapped = resource("", "x").context("while starting");
        assert_eq!(exit_code_for(&wrapped), 3, "found anywhere in the chain");
        assert_eq!(exit_code_for(&anyhow::anyhow!("boom")), 1);
    }
}
