//! Pre-flight: will the storm's threads fit under the host's limits?
//!
//! From the configuration and the host facts it predicts the peak number
//! of live threads (tasks) and of stack mappings, and compares them with
//! every limit that can stop `pthread_create`: `kernel.threads-max`,
//! `kernel.pid_max`, the cgroup's `pids.max`, `RLIMIT_NPROC` (not for
//! root), `vm.max_map_count`, `RLIMIT_AS` and memory.
//!
//! The model: a retired wave is cancelled and exits, so with `--cancel
//! pthread|flag` about `(lag + 2) x per-wave` threads are alive at once
//! (lag + 1 waves running plus one exiting). With `--cancel none` threads
//! live until their sleep ends, so at least that many. Each thread's stack
//! is two mappings (stack and guard page); `--reap leak` keeps every stack
//! mapped until the process exits, so its mappings grow with every thread
//! created: the micro's ~32K-thread wall at vm.max_map_count = 65530.
//!
//! A certain failure is refused (exit 2) unless `--force`; the leak mode's
//! mapping wall is only a warning, because reproducing it (and counting
//! the failures) is the point of the micro.

use serde::{Deserialize, Serialize};

use super::options::Config;
use crate::host::{human_bytes, map_count, HostFacts, Rlimit};
use crate::spawn::failure::user_tasks;
use crate::spawn::{Backend, Cancel, Reap};

/// What pre-flight predicted and decided.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Preflight {
    /// Stack size each thread maps, bytes.
    pub stack_bytes: u64,
    /// Predicted peak of live storm threads.
    pub peak_live_threads: u64,
    /// True when the prediction is a lower bound (`--cancel none`).
    pub peak_is_lower_bound: bool,
    /// Predicted peak of this process's mappings.
    pub peak_mappings: u64,
    /// Threads that fit before `vm.max_map_count` (leak mode), if limited.
    pub leak_thread_capacity: Option<u64>,
    /// Things that will (probably) make creation fail, with the limit.
    pub problems: Vec<String>,
    /// Problems that are only warnings (leak mode's mapping wall).
    pub warnings: Vec<String>,
}

/// The stack a thread of `cfg` maps.
pub fn stack_bytes(cfg: &Config, facts: &HostFacts) -> u64 {
    if let Some(s) = cfg.stack_size {
        return s;
    }
    match cfg.spawn {
        Backend::Pthread => facts
            .default_thread_stack_bytes
            .or(facts.rlimit_stack.and_then(|r| r.soft))
            .unwrap_or(8 << 20),
        Backend::Std => std::env::var("RUST_MIN_STACK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2 << 20),
    }
}

/// Runs the pre-flight checks.
pub fn check(cfg: &Config, facts: &HostFacts) -> Preflight {
    let stack = stack_bytes(cfg, facts);
    let total = cfg.total_threads();
    let live = cfg
        .per_wave
        .saturating_mul((cfg.lag + 2).min(cfg.waves))
        .min(total);
    let maps_now = map_count().unwrap_or(0);
    let stacks_mapped = if cfg.reap == Reap::Leak { total } else { live };
    let mut p = Preflight {
        stack_bytes: stack,
        peak_live_threads: live,
        peak_is_lower_bound: cfg.cancel == Cancel::None,
        peak_mappings: maps_now + 2 * stacks_mapped,
        ..Default::default()
    };
    let tasks = facts.tasks_now.unwrap_or(0);
    if let Some(max) = facts.threads_max {
        if tasks + live > max {
            p.problems.push(format!(
                "about {live} threads alive at once, {tasks} tasks exist already, kernel.threads-max = {max}"
            ));
        }
    }
    if let Some(max) = facts.pid_max {
        if tasks + live > max {
            p.problems.push(format!(
                "about {live} threads alive at once need as many pids; {tasks} in use, kernel.pid_max = {max}"
            ));
        }
    }
    if let Some(c) = &facts.cgroup_pids {
        if let Some(max) = c.max {
            let cur = c.current.unwrap_or(0);
            if cur + live > max {
                p.problems.push(format!(
                    "about {live} threads alive at once, cgroup {} has {cur} tasks and pids.max = {max}",
                    c.path
                ));
            }
        }
    }
    if !facts.root {
        if let Some(Rlimit {
            soft: Some(lim), ..
        }) = facts.rlimit_nproc
        {
            let mine = user_tasks().unwrap_or(0);
            if mine + live > lim {
                p.problems.push(format!(
                    "about {live} threads alive at once, this user has {mine} tasks, RLIMIT_NPROC = {lim} (ulimit -u)"
                ));
            }
        }
    }
    if let Some(max) = facts.max_map_count {
        let room = max.saturating_sub(maps_now) / 2;
        if cfg.reap == Reap::Leak {
            p.leak_thread_capacity = Some(room);
        }
        if 2 * stacks_mapped + maps_now > max {
            let msg = format!(
                "{} keeps {stacks_mapped} stacks mapped (2 mappings each) but vm.max_map_count = {max} \
                 leaves room for about {room} threads: after that pthread_create fails with EAGAIN",
                if cfg.reap == Reap::Leak { "--reap leak" } else { "this run" }
            );
            if cfg.reap == Reap::Leak {
                p.warnings.push(format!(
                    "{msg}; the failures will be counted (use --reap join or detach to run them all)"
                ));
            } else {
                p.problems.push(msg);
            }
        }
    }
    if let Some(Rlimit {
        soft: Some(lim), ..
    }) = facts.rlimit_as
    {
        let need = stack.saturating_mul(stacks_mapped);
        if need > lim {
            let msg = format!(
                "{stacks_mapped} stacks of {} need {} of address space, RLIMIT_AS = {}",
                human_bytes(stack),
                human_bytes(need),
                human_bytes(lim)
            );
            if cfg.reap == Reap::Leak {
                p.warnings
                    .push(format!("{msg}; creation will fail once it is used up"));
            } else {
                p.problems.push(msg);
            }
        }
    }
    if let Some(mem) = facts.mem_total_bytes {
        if stack > mem {
            p.problems.push(format!(
                "one stack of {} is larger than the machine's memory ({}): it cannot be mapped",
                human_bytes(stack),
                human_bytes(mem)
            ));
        }
    }
    p
}
