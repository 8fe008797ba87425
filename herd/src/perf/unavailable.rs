//! Why a counter could not be opened, and what would fix it: the one
//! value every part of the perf module reports a failure with.

use serde::{Deserialize, Serialize};

/// Why a counter could not be opened, and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// What went wrong, in the user's terms (with the errno where there is one).
    pub reason: String,
    /// What to do about it; empty when nothing can be done on this machine.
    pub fix: String,
    /// True when the machine simply does not have the event (no PMU in a VM,
    /// a tracepoint this kernel version lacks). `--require-perf` does not
    /// fail for these: no setting could make them appear.
    pub absent: bool,
}

impl Unavailable {
    /// A counter the user can make available (permissions, tracefs, limits).
    pub(crate) fn fixable(reason: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            fix: fix.into(),
            absent: false,
        }
    }

    /// A counter this hardware or kernel does not have.
    pub fn absent(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            fix: String::new(),
            absent: true,
        }
    }
}

impl Unavailable {
    /// True when the counter failed for want of file descriptors (EMFILE,
    /// ENFILE): not a fact of the host but a run that lost a counter.
    pub(crate) fn is_descriptor_shortage(&self) -> bool {
        self.reason.contains("(EMFILE)") || self.reason.contains("fs.file-max reached")
    }
}

/// An errno's symbolic name, e.g. `EACCES`.
pub fn errno_name(errno: i32) -> String {
    if errno == 0 {
        return "no errno".into();
    }
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}

/// An I/O error with its errno's name: `No such device (ENODEV)`.
pub fn io_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!(
            "{} ({})",
            std::io::Error::from_raw_os_error(n)
                .to_string()
                .split(" (os error")
                .next()
                .unwrap_or(""),
            errno_name(n)
        ),
        None => e.to_string(),
    }
}
