//! The descriptor budget of a session: how many file descriptors its
//! counters take, computed before any is opened, and `RLIMIT_NOFILE`
//! raised as far as that needs.
//!
//! Every per-CPU counter is one descriptor per CPU: 15 events on 2 CPUs
//! are 30, on 384 CPUs 5,760, and `--contention` adds two sampling events
//! per CPU (and per thread for inherited counters). The usual soft limit
//! is 1024, so a big machine runs out part-way through the catalog: the
//! EMFILE that results must say so, with the numbers, not send the user
//! to `perf_event_paranoid`. [`FdBudget::ensure`] raises the soft limit to
//! what the session needs (never lowers it, never beyond what is needed),
//! raises the hard limit too where the process may (CAP_SYS_RESOURCE),
//! and records what it found; [`emfile`] explains a shortage with that
//! record.

use serde::{Deserialize, Serialize};

use super::unavailable::Unavailable;

/// Descriptors kept free for everything else the process opens (files,
/// pipes of child runs, /proc reads).
pub(crate) const RESERVE: u64 = 64;

/// What a session's counters need and what the limit allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdBudget {
    /// Counting events to open.
    pub events: u64,
    /// Descriptors per event (CPUs for per-CPU counters, threads for
    /// inherited ones).
    pub(crate) per_event: u64,
    /// Sampling descriptors of the contention profile.
    pub(crate) sampling: u64,
    /// Descriptors open before the session.
    pub(crate) open_before: u64,
    /// Everything: counters, sampling, those open before, and [`RESERVE`].
    pub(crate) needed: u64,
    /// The soft limit found (`None`: unlimited).
    pub(crate) soft_before: Option<u64>,
    /// The soft limit after raising it.
    pub(crate) soft: Option<u64>,
    /// The hard limit (after raising it, where that was possible).
    pub(crate) hard: Option<u64>,
    /// Why the hard limit could not be raised, when it had to be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hard_error: Option<String>,
    /// `fs.nr_open`: the kernel's ceiling for either limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nr_open: Option<u64>,
}

impl FdBudget {
    /// The budget of `events` counters of `per_event` descriptors each and
    /// `sampling` sampling descriptors, with `open_before` already open.
    pub fn plan(events: u64, per_event: u64, sampling: u64, open_before: u64) -> FdBudget {
        FdBudget {
            events,
            per_event,
            sampling,
            open_before,
            needed: events * per_event + sampling + open_before + RESERVE,
            ..Default::default()
        }
    }

    /// True when the soft limit covers the budget.
    pub(crate) fn fits(&self) -> bool {
        !matches!(self.soft, Some(s) if s < self.needed)
    }

    /// Raises `RLIMIT_NOFILE` (soft, and hard where permitted: root, or
    /// CAP_SYS_RESOURCE, as perf does) to [`FdBudget::needed`], never
    /// beyond `fs.nr_open` (the kernel refuses more), and records the limits.
    pub(crate) fn ensure(self) -> FdBudget {
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|v| v.trim().parse().ok());
        self.ensure_with(nr_open)
    }

    /// [`FdBudget::ensure`] with `fs.nr_open` given (tests).
    pub(crate) fn ensure_with(mut self, nr_open: Option<u64>) -> FdBudget {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        self.nr_open = nr_open;
        let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            return self;
        };
        let lim = |v: u64| (v != libc::RLIM_INFINITY).then_some(v);
        let (mut soft, mut hard) = (lim(soft), lim(hard));
        self.soft_before = soft;
        let need = self.needed;
        if hard.is_some_and(|h| h < need) {
            // Raising the hard limit needs CAP_SYS_RESOURCE; the kernel caps
            // both limits at fs.nr_open.
            let to = nr_open.map_or(need, |n| n.min(need));
            match setrlimit(Resource::RLIMIT_NOFILE, to, to) {
                Ok(()) => {
                    hard = Some(to);
                    soft = Some(to);
                }
                Err(e) => self.hard_error = Some(format!("setrlimit(RLIMIT_NOFILE, {to}): {e}")),
            }
            if to < need {
                self.hard_error = Some(format!(
                    "fs.nr_open is {to}, the most any process may open (sysctl fs.nr_open={need} \
                     raises it)"
                ));
            }
        }
        if soft.is_some_and(|s| s < need) {
            let to = hard.map_or(need, |h| h.min(need));
            let raw_hard = hard.unwrap_or(libc::RLIM_INFINITY);
            if setrlimit(Resource::RLIMIT_NOFILE, to, raw_hard).is_ok() {
                soft = Some(to);
            }
        }
        self.soft = soft;
        self.hard = hard;
        self
    }

    /// The refusal of a session whose budget the limit cannot cover (exit
    /// 3): the number needed, the limits, and the fix for this user.
    pub fn refusal(&self, root: bool) -> Option<String> {
        if self.fits() {
            return None;
        }
        let why = self
            .hard_error
            .as_ref()
            .map(|e| format!("; raising it failed: {e}"))
            .unwrap_or_default();
        let fix = if self.nr_open.is_some_and(|n| n < self.needed) {
            format!("sysctl fs.nr_open={} first, then run again", self.needed)
        } else if root {
            format!(
                "`ulimit -Hn {}` before starting herd (this process may not raise its hard \
                 limit: a container without CAP_SYS_RESOURCE?)",
                self.needed
            )
        } else {
            format!(
                "`ulimit -n {}` (above the hard limit {}, root raises it: ulimit -Hn, \
                 /etc/security/limits.conf or LimitNOFILE=)",
                self.needed,
                show(self.hard)
            )
        };
        Some(format!(
            "perf: the counters need {} file descriptors ({} events x {} + {} sampling + {} \
             open + {RESERVE} reserve) and RLIMIT_NOFILE allows {} (hard {}){why}; not \
             starting a run that would lose counters. Fix: {fix}; or count fewer (--cpus, \
             --perf-scope process) or none (--no-perf)",
            self.needed,
            self.events,
            self.per_event,
            self.sampling,
            self.open_before,
            show(self.soft),
            show(self.hard),
        ))
    }
}

fn show(v: Option<u64>) -> String {
    v.map_or("unlimited".into(), |v| v.to_string())
}

/// Descriptors open in this process now (entries of `/proc/self/fd`).
pub fn open_now() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// The explanation of an EMFILE: a descriptor shortage, with the budget
/// when there is one, and a fix for this user.
pub(crate) fn emfile(budget: Option<&FdBudget>, root: bool) -> Unavailable {
    let numbers = budget
        .map(|b| {
            format!(
                ": this session needs {} ({} events x {}{}), RLIMIT_NOFILE is {} (hard {})",
                b.needed,
                b.events,
                b.per_event,
                if b.sampling > 0 {
                    format!(" + {} sampling", b.sampling)
                } else {
                    String::new()
                },
                show(b.soft),
                show(b.hard)
            )
        })
        .unwrap_or_else(|| ": one descriptor per counter per CPU".into());
    let need = budget.map_or("65536".to_string(), |b| b.needed.to_string());
    let fix = if root {
        format!(
            "raise the hard limit before starting herd: `ulimit -Hn {need}` (needs \
             CAP_SYS_RESOURCE, which a container may drop), or LimitNOFILE= in its unit"
        )
    } else {
        format!(
            "raise the limit: `ulimit -n {need}` (beyond the hard limit, root must raise it: \
             ulimit -Hn, /etc/security/limits.conf or LimitNOFILE=)"
        )
    };
    Unavailable::fixable(format!("out of file descriptors (EMFILE){numbers}"), fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_events_times_cpus_plus_sampling_and_reserve() {
        // 15 events on 384 CPUs with --contention (2 x 384 sampling).
        let b = FdBudget::plan(15, 384, 768, 10);
        assert_eq!(b.needed, 15 * 384 + 768 + 10 + RESERVE);
        let short = FdBudget {
            soft: Some(1024),
            hard: Some(4096),
            ..b.clone()
        };
        assert!(!short.fits());
        let line = short.refusal(false).unwrap();
        assert!(line.contains("need 6602 file descriptors"), "{line}");
        assert!(
            line.contains("RLIMIT_NOFILE allows 1024 (hard 4096)"),
            "{line}"
        );
        let unlimited = FdBudget { soft: None, ..b };
        assert!(unlimited.fits() && unlimited.refusal(true).is_none());
    }

    #[test]
    fn ensure_raises_the_soft_limit_as_far_as_needed_and_no_further() {
        // A budget certainly within any hard limit: the soft limit ends at
        // least there (it may have been higher already; never lowered).
        let before =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let b = FdBudget::plan(4, 2, 0, open_now()).ensure();
        assert!(b.fits(), "{b:?}");
        assert_eq!(
            b.soft_before,
            Some(before.0).filter(|&v| v != libc::RLIM_INFINITY)
        );
        assert!(b.soft.unwrap_or(u64::MAX) >= before.0.min(b.needed));
    }

    #[test]
    fn a_budget_beyond_the_limit_is_refused_naming_the_number() {
        let b = FdBudget {
            soft: Some(1024),
            hard: Some(4096),
            ..FdBudget::plan(16, 512, 0, 8)
        };
        let r = b.refusal(false).unwrap();
        assert!(r.contains("need 8264 file descriptors"), "{r}");
        assert!(r.contains("16 events x 512"), "{r}");
        assert!(r.contains("ulimit -n 8264"), "{r}");
        assert!(b.refusal(true).unwrap().contains("ulimit -Hn 8264"));
        let capped = FdBudget {
            nr_open: Some(4096),
            ..b.clone()
        };
        assert!(capped
            .refusal(true)
            .unwrap()
            .contains("sysctl fs.nr_open=8264"));
        let fits = FdBudget {
            soft: Some(8264),
            ..b
        };
        assert!(fits.refusal(false).is_none());
    }

    #[test]
    fn ensure_never_asks_beyond_nr_open() {
        // nr_open below the need and below the current hard limit: nothing
        // is raised past it, and the budget says why.
        let (_, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        if hard == libc::RLIM_INFINITY {
            return;
        }
        let b = FdBudget::plan(1, hard + 100, 0, 0).ensure_with(Some(hard + 10));
        assert!(!b.fits(), "{b:?}");
        assert!(b.soft.unwrap() <= hard + 10, "{b:?}");
        assert!(
            b.hard_error.as_deref().unwrap_or("").contains("fs.nr_open") || b.hard == Some(hard),
            "{b:?}"
        );
    }

    #[test]
    fn emfile_names_the_budget() {
        let b = FdBudget {
            soft: Some(1024),
            hard: Some(1024),
            ..FdBudget::plan(15, 384, 0, 8)
        };
        let u = emfile(Some(&b), false);
        assert!(u.reason.contains("EMFILE"), "{u:?}");
        assert!(u.reason.contains("15 events x 384"), "{u:?}");
        assert!(u.fix.contains(&format!("ulimit -n {}", b.needed)), "{u:?}");
        let r = emfile(Some(&b), true);
        assert!(r.fix.contains("ulimit -Hn"), "{r:?}");
        assert!(!r.fix.contains("run as root"), "{r:?}");
    }
}
