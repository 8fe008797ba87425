//! Tracepoints kept registered across the child runs of `compare`,
//! `sweep` and `-r N`, so that each child's counters open and close
//! without the kernel registering and unregistering a probe (whose
//! unregistration waits for a grace period: see [`super::closer`]).
//!
//! The parent opens one counter per tracepoint herd uses, on itself,
//! disabled: it counts nothing, it only holds the kernel's per-tracepoint
//! perf reference above zero. Children open their own counters as a
//! single run does (nothing is shared, so each child measures exactly
//! what a single run measures); their closes are then reference drops.
//! The parent's own close at its end goes to a closer.
//!
//! Not when a configuration runs `--no-perf`: a registered syscall
//! tracepoint sends every task's system calls through the kernel's slow
//! path, so keeping them would tax the very runs that measure herd
//! without counters. Those comparisons pay the closes per child (in
//! place, outside each child's measured phase).

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use perf_event::events::Tracepoint;
use perf_event::Builder;

use super::closer::{self, KEPT_ENV};
use super::events;
use super::sys::{Kernel, RealKernel};
use super::Scope;

/// The held tracepoints (closed through a closer when dropped).
#[derive(Debug)]
pub struct Keepers {
    fds: Vec<OwnedFd>,
}

/// The tracepoints herd opens, in either scope and for `--contention`.
pub fn tracepoints() -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<(&'static str, &'static str)> = Vec::new();
    for scope in [Scope::Process, Scope::System] {
        for e in events::catalog(scope) {
            let tp = match e.source {
                events::Source::Tracepoint(s, n) => (s, n),
                events::Source::KProbe(f) => (super::kprobe::GROUP, f),
                _ => continue,
            };
            if !v.contains(&tp) {
                v.push(tp);
            }
        }
    }
    for tp in [events::CONTENTION_BEGIN, events::CONTENTION_END] {
        if !v.contains(&tp) {
            v.push(tp);
        }
    }
    v
}

/// Whether children with these argument lists should have keepers: not
/// when any of them runs without counters.
pub fn wanted(children: &[&[String]]) -> bool {
    !children.iter().any(|a| a.iter().any(|x| x == "--no-perf"))
}

impl Keepers {
    /// Holds every tracepoint herd uses for the children to come (those
    /// the kernel or tracefs lacks are skipped), and tells children so
    /// through [`KEPT_ENV`]. `None` when not [`wanted`] or nothing could
    /// be held.
    pub fn for_children(children: &[&[String]]) -> Option<Keepers> {
        if !wanted(children) {
            return None;
        }
        Keepers::open(&RealKernel)
    }

    /// Opens the keepers through `kernel`.
    pub fn open(kernel: &dyn Kernel) -> Option<Keepers> {
        closer::hold_session_lock();
        let mut fds = Vec::new();
        for (sys, name) in tracepoints() {
            let Ok(id) = kernel.tracepoint_id(sys, name) else {
                continue;
            };
            let mut b = Builder::new(Tracepoint::with_id(id));
            b.include_kernel()
                .exclude_user(false)
                .observe_self()
                .any_cpu();
            if let Ok(c) = kernel.open(&b) {
                // SAFETY: the descriptor was just taken out of its Counter
                // (`into_raw_fd`), so this OwnedFd is its only owner.
                fds.push(unsafe { OwnedFd::from_raw_fd(c.into_raw_fd()) });
            }
        }
        if fds.is_empty() {
            return None;
        }
        crate::runner::set_child_env(KEPT_ENV, Some("1"));
        Some(Keepers { fds })
    }
}

impl Drop for Keepers {
    fn drop(&mut self) {
        crate::runner::set_child_env(KEPT_ENV, None);
        closer::hand_off(std::mem::take(&mut self.fds), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tracepoint_once_and_none_for_no_perf_children() {
        let tps = tracepoints();
        let mut sorted = tps.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), tps.len());
        assert!(tps.contains(&("lock", "contention_end")));
        assert!(tps.contains(&("syscalls", "sys_enter_futex")));
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (a, b) = (s(&["--waves", "3"]), s(&["--no-perf"]));
        assert!(wanted(&[&a, &a]));
        assert!(!wanted(&[&a, &b]), "would tax the --no-perf runs");
    }
}
