//! The process's resource usage (getrusage(2), through nix's wrapper):
//! CPU time, context switches, peak RSS, minor faults. Scenarios take a
//! snapshot before and after their measured phase and report deltas.

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

/// One `getrusage(RUSAGE_SELF)` snapshot: every thread of the process,
/// live or joined.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// User-mode CPU seconds.
    pub user_s: f64,
    /// Kernel-mode CPU seconds.
    pub sys_s: f64,
    /// Voluntary context switches (`ru_nvcsw`).
    pub voluntary_switches: u64,
    /// Involuntary context switches (`ru_nivcsw`).
    pub involuntary_switches: u64,
    /// Peak resident set size in KiB (`ru_maxrss`; not a delta).
    pub max_rss_kib: u64,
    /// Minor page faults (`ru_minflt`).
    pub minor_faults: u64,
}

impl Usage {
    /// The whole process's usage so far. getrusage(2) fails only for an
    /// invalid `who`, so a failure reports nothing used.
    pub fn process() -> Usage {
        let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
            return Usage::default();
        };
        let count = |v: libc::c_long| u64::try_from(v).unwrap_or(0);
        Usage {
            user_s: seconds(u.user_time()),
            sys_s: seconds(u.system_time()),
            voluntary_switches: count(u.voluntary_context_switches()),
            involuntary_switches: count(u.involuntary_context_switches()),
            max_rss_kib: count(u.max_rss()),
            minor_faults: count(u.minor_page_faults()),
        }
    }
}

/// A `timeval` in seconds.
pub fn seconds(t: TimeVal) -> f64 {
    t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spinning shows up as CPU time: spin until it does (10 s at most,
    /// however slow the machine), so only a getrusage that never moves fails.
    #[test]
    fn usage_grows_with_work() {
        let a = Usage::process();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 0u64;
        let b = loop {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            let b = Usage::process();
            if b.user_s + b.sys_s > a.user_s + a.sys_s || std::time::Instant::now() > deadline {
                break b;
            }
        };
        assert!(b.user_s + b.sys_s > a.user_s + a.sys_s, "{a:?} {b:?}");
        assert!(b.max_rss_kib > 0 && b.minor_faults >= a.minor_faults);
    }
}
