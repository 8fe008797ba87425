//! Which `--cleanup` strategy reads which of the strategy knobs
//! (`--cleanup-work`, `--cleanup-monitor-us`, `--cleanup-poll-ms`,
//! `--seize-batch`), and the note when one is set, away from its
//! default, for a strategy that ignores it.
//!
//! Ignoring is not refusing: `herd compare --cleanup locked,seize
//! --seize-batch 64` gives every configuration the same flags and each
//! strategy takes those it uses. So a single run (not a child of `-r`,
//! compare or sweep) warns on stderr and keeps the note in its result;
//! compare and sweep warn once, before their runs, about a knob that no
//! configuration uses (it then has no effect at all); their children say
//! nothing.
//!
//! Who uses what (`cleanup.rs`): every strategy but `none` builds the
//! registry, so `--cleanup-work` and `--cleanup-monitor-us` apply to all
//! of them; `--cleanup-poll-ms` is how often exitq's reclaimer looks for
//! exited threads' cleanups, registered by `exitq` alone (`sync` and
//! `expedited` build their domain with it but register none, so there is
//! nothing for it to find); `--seize-batch` is seize's.

use super::args::{CleanupArgs, Strategy, DEFAULT_MONITOR_US, DEFAULT_POLL_MS, DEFAULT_WORK};

/// Every strategy but `none`.
pub(super) const ALL_BUT_NONE: &[Strategy] = &[
    Strategy::Locked,
    Strategy::Exitq,
    Strategy::Sync,
    Strategy::Expedited,
    Strategy::CrossbeamEpoch,
    Strategy::Sdd,
    Strategy::Seize,
    Strategy::Urcu,
];

/// One knob: its flag, the strategies that read it, and those in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    /// The flag, e.g. `--seize-batch`.
    pub flag: &'static str,
    /// The strategies that read it.
    pub users: &'static [Strategy],
    /// `users` in words, e.g. `only seize does`.
    pub who: &'static str,
}

/// The knobs, in the order of `--help`.
pub const KNOBS: [Knob; 4] = [
    Knob {
        flag: "--cleanup-work",
        users: ALL_BUT_NONE,
        who: "every strategy but none does",
    },
    Knob {
        flag: "--cleanup-monitor-us",
        users: ALL_BUT_NONE,
        who: "every strategy but none does",
    },
    Knob {
        flag: "--cleanup-poll-ms",
        users: &[Strategy::Exitq],
        who: "only exitq does",
    },
    Knob {
        flag: "--seize-batch",
        users: &[Strategy::Seize],
        who: "only seize does",
    },
];

impl CleanupArgs {
    /// The knobs set away from their defaults, each with its value.
    pub fn knobs_set(&self) -> Vec<(Knob, String)> {
        let [work, monitor, poll, batch] = KNOBS;
        let mut set = Vec::new();
        if self.cleanup_work != DEFAULT_WORK {
            set.push((work, self.cleanup_work.to_string()));
        }
        if self.cleanup_monitor_us != DEFAULT_MONITOR_US {
            set.push((monitor, self.cleanup_monitor_us.to_string()));
        }
        if self.cleanup_poll_ms != DEFAULT_POLL_MS {
            set.push((poll, self.cleanup_poll_ms.to_string()));
        }
        if let Some(b) = self.seize_batch {
            set.push((batch, b.to_string()));
        }
        set
    }

    /// One note per knob set away from its default that this run's
    /// strategy ignores (empty when every knob set is used).
    pub fn ignored_knobs(&self) -> Vec<String> {
        self.knobs_set()
            .into_iter()
            .filter(|(k, _)| !k.users.contains(&self.cleanup))
            .map(|(k, value)| {
                format!(
                    "{} {value} has no effect: --cleanup {} does not use it ({})",
                    k.flag,
                    self.cleanup.name(),
                    k.who
                )
            })
            .collect()
    }

    /// [`CleanupArgs::ignored_knobs`] for a single run, each printed on
    /// stderr as a warning before the run; none in a child run of `-r`,
    /// compare or sweep (its parent warns, once).
    pub fn warn_ignored_knobs(&self) -> Vec<String> {
        if crate::runner::is_child() {
            return Vec::new();
        }
        let notes = self.ignored_knobs();
        for n in &notes {
            eprintln!("herd: warning: {n}");
        }
        notes
    }
}

/// For several configurations (compare, sweep): one note per knob set
/// away from its default in some configuration and used by none of the
/// configurations that set it: it has no effect at all. Each value given
/// and each strategy are named once.
pub fn ignored_by_every(configs: &[CleanupArgs]) -> Vec<String> {
    let mut notes = Vec::new();
    for knob in KNOBS {
        let mut values: Vec<String> = Vec::new();
        let mut strategies: Vec<&str> = Vec::new();
        let mut used = false;
        for c in configs {
            let Some((_, v)) = c.knobs_set().into_iter().find(|(k, _)| *k == knob) else {
                continue;
            };
            used |= knob.users.contains(&c.cleanup);
            if !values.contains(&v) {
                values.push(v);
            }
            if !strategies.contains(&c.cleanup.name()) {
                strategies.push(c.cleanup.name());
            }
        }
        if !values.is_empty() && !used {
            notes.push(format!(
                "{} {} has no effect in any configuration: --cleanup {} does not use it ({})",
                knob.flag,
                values.join(", "),
                strategies.join(", "),
                knob.who
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cleanup: Strategy) -> CleanupArgs {
        CleanupArgs {
            cleanup,
            ..CleanupArgs::default()
        }
    }

    #[test]
    fn defaults_are_never_noted() {
        for s in ALL_BUT_NONE.iter().chain([&Strategy::None]) {
            assert!(args(*s).ignored_knobs().is_empty(), "{s:?}");
        }
    }

    #[test]
    fn a_knob_is_noted_only_for_a_strategy_that_ignores_it() {
        let batch = CleanupArgs {
            seize_batch: Some(64),
            ..args(Strategy::Exitq)
        };
        assert_eq!(
            batch.ignored_knobs(),
            ["--seize-batch 64 has no effect: --cleanup exitq does not use it (only seize does)"]
        );
        let seize = CleanupArgs {
            cleanup: Strategy::Seize,
            ..batch.clone()
        };
        assert!(seize.ignored_knobs().is_empty());
        let none = CleanupArgs {
            cleanup_work: 16,
            cleanup_monitor_us: 0,
            cleanup_poll_ms: 10,
            ..args(Strategy::None)
        };
        let notes = none.ignored_knobs();
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].starts_with("--cleanup-work 16 has no effect: --cleanup none"));
        let locked = CleanupArgs {
            cleanup: Strategy::Locked,
            ..none
        };
        assert_eq!(locked.ignored_knobs().len(), 1, "only --cleanup-poll-ms");
    }

    #[test]
    fn several_configurations_are_noted_when_none_uses_a_knob() {
        let with = |s: Strategy| CleanupArgs {
            seize_batch: Some(64),
            ..args(s)
        };
        let notes = ignored_by_every(&[with(Strategy::Locked), with(Strategy::Exitq)]);
        assert_eq!(
            notes,
            ["--seize-batch 64 has no effect in any configuration: --cleanup locked, exitq does \
              not use it (only seize does)"]
        );
        assert!(ignored_by_every(&[with(Strategy::Locked), with(Strategy::Seize)]).is_empty());
        // Set only where it is ignored: no effect, whoever else runs.
        let notes = ignored_by_every(&[with(Strategy::Exitq), args(Strategy::Seize)]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(ignored_by_every(&[args(Strategy::Exitq), args(Strategy::Seize)]).is_empty());
    }
}
