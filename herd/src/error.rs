//! Error kinds that decide the process exit code.
//!
//! * [`UsageError`]: the command line asks for something invalid or
//!   impossible on this host (bad value, lag >= slots, unknown CPU,
//!   pre-flight refusal). Exit code 2, like clap's own parse errors.
//! * anything else (`anyhow::Error`): a runtime failure. Exit code 1.
//!
//! Code returns `anyhow::Result` and wraps usage problems in `UsageError`;
//! `main` finds it with `downcast_ref` anywhere in the chain.

use std::fmt;

/// Exit code for usage errors (matches clap).
pub const EXIT_USAGE: u8 = 2;
/// Exit code for runtime failures.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code when a run was interrupted by Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// A command-line value that is invalid, names the flag it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
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

/// Shorthand: `Err(usage("--lag", "must be smaller than --slots"))?`.
pub fn usage(flag: impl Into<String>, message: impl Into<String>) -> anyhow::Error {
    UsageError::new(flag, message).into()
}

/// The exit code for an error chain: 2 if any link is a [`UsageError`].
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err
        .chain()
        .any(|e| e.downcast_ref::<UsageError>().is_some())
    {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }
}
