//! The event set: which counters herd opens, under which metric names.
//!
//! `scripts/perf-stat.sh` passes the same events to `perf stat` (a test
//! checks that every event named here appears in the script), so herd's
//! own figures and perf's can be compared one to one.

use perf_event::events::{Hardware as Hw, Software as Sw};

use super::sys::EventKind;
use super::Scope;

/// Where an event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A kernel tracepoint `subsystem:name`, id from tracefs.
    Tracepoint(&'static str, &'static str),
    /// A software event.
    Software(Sw),
    /// A hardware PMU event.
    Hardware(Hw),
    /// A kprobe on a kernel function, as the tracefs event
    /// `herd:<function>` (created on first use, see `kprobe.rs`).
    KProbe(&'static str),
}

/// One counter herd opens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventSpec {
    /// Metric name in results, e.g. `futex_calls`.
    pub metric: &'static str,
    /// The event as `perf stat -e` spells it, e.g. `syscalls:sys_enter_futex`.
    pub event: &'static str,
    /// Display unit of the metric.
    pub(crate) unit: &'static str,
    /// Where the event comes from.
    pub(crate) source: Source,
    /// True when the machine may legitimately lack it (newer syscalls,
    /// hardware PMU): absent is then reported but never fatal.
    pub optional: bool,
    /// Name of the per-thread-exit metric, if one makes sense.
    pub(crate) per_exit: Option<&'static str>,
    /// True when this event counts one of the futex syscalls (summed into
    /// `futex_calls` and `futex_per_exit`).
    pub futex: bool,
    /// Divisor from the raw count to the metric unit (1e6 for ns -> ms).
    pub scale: f64,
}

impl EventSpec {
    const fn new(
        metric: &'static str,
        event: &'static str,
        unit: &'static str,
        source: Source,
    ) -> Self {
        Self {
            metric,
            event,
            unit,
            source,
            optional: false,
            per_exit: None,
            futex: false,
            scale: 1.0,
        }
    }

    const fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    const fn per_exit(mut self, name: &'static str) -> Self {
        self.per_exit = Some(name);
        self
    }

    const fn futex(mut self) -> Self {
        self.futex = true;
        self
    }

    const fn scale(mut self, divisor: f64) -> Self {
        self.scale = divisor;
        self
    }

    /// The kind of event, for error explanations.
    pub fn kind(&self) -> EventKind {
        match self.source {
            Source::Tracepoint(..) | Source::KProbe(_) => EventKind::Tracepoint,
            Source::Software(_) => EventKind::Software,
            Source::Hardware(_) => EventKind::Hardware,
        }
    }
}

/// `lock:contention_begin`, also the contention profile's start event.
pub(crate) const CONTENTION_BEGIN: (&str, &str) = ("lock", "contention_begin");
/// `lock:contention_end`, the contention profile's end event.
pub(crate) const CONTENTION_END: (&str, &str) = ("lock", "contention_end");

/// The counters for `scope`, in display order.
///
/// In system scope the time base is `cpu-clock` (time on the CPUs
/// watched), in process scope `task-clock` (time our threads ran), as
/// `perf stat` does.
pub fn catalog(scope: Scope) -> Vec<EventSpec> {
    use Source::*;
    let mut v = vec![
        EventSpec::new(
            "sys_futex",
            "syscalls:sys_enter_futex",
            "calls",
            Tracepoint("syscalls", "sys_enter_futex"),
        )
        .futex(),
        EventSpec::new(
            "sys_futex_wait",
            "syscalls:sys_enter_futex_wait",
            "calls",
            Tracepoint("syscalls", "sys_enter_futex_wait"),
        )
        .optional()
        .futex(),
        EventSpec::new(
            "sys_futex_wake",
            "syscalls:sys_enter_futex_wake",
            "calls",
            Tracepoint("syscalls", "sys_enter_futex_wake"),
        )
        .optional()
        .futex(),
        EventSpec::new(
            "sys_futex_waitv",
            "syscalls:sys_enter_futex_waitv",
            "calls",
            Tracepoint("syscalls", "sys_enter_futex_waitv"),
        )
        .optional()
        .futex(),
        EventSpec::new(
            "sys_futex_requeue",
            "syscalls:sys_enter_futex_requeue",
            "calls",
            Tracepoint("syscalls", "sys_enter_futex_requeue"),
        )
        .optional()
        .futex(),
        // Every futex(2) enters do_futex(), and so does the one futex call
        // the kernel makes itself: an exiting thread's clear-tid wake
        // (mm_release). The difference is the exits' in-kernel wakes.
        EventSpec::new(
            "kernel_futex_calls",
            "herd:do_futex",
            "calls",
            KProbe("do_futex"),
        )
        .optional(),
        EventSpec::new(
            "lock_contentions",
            "lock:contention_begin",
            "events",
            Tracepoint(CONTENTION_BEGIN.0, CONTENTION_BEGIN.1),
        )
        .per_exit("contentions_per_exit"),
        EventSpec::new(
            "task_exits",
            "sched:sched_process_exit",
            "tasks",
            Tracepoint("sched", "sched_process_exit"),
        ),
        EventSpec::new(
            "tasks_created",
            "task:task_newtask",
            "tasks",
            Tracepoint("task", "task_newtask"),
        ),
        EventSpec::new(
            "context_switches",
            "context-switches",
            "switches",
            Software(Sw::CONTEXT_SWITCHES),
        )
        .per_exit("context_switches_per_exit"),
        EventSpec::new(
            "cpu_migrations",
            "cpu-migrations",
            "migrations",
            Software(Sw::CPU_MIGRATIONS),
        )
        .per_exit("cpu_migrations_per_exit"),
        EventSpec::new(
            "page_faults",
            "page-faults",
            "faults",
            Software(Sw::PAGE_FAULTS),
        )
        .per_exit("page_faults_per_exit"),
    ];
    v.push(match scope {
        Scope::Process => EventSpec::new(
            "task_clock_ms",
            "task-clock",
            "ms",
            Software(Sw::TASK_CLOCK),
        )
        .scale(1e6)
        .per_exit("task_clock_us_per_exit"),
        Scope::System => EventSpec::new("cpu_clock_ms", "cpu-clock", "ms", Software(Sw::CPU_CLOCK))
            .scale(1e6)
            .per_exit("cpu_clock_us_per_exit"),
    });
    v.push(
        EventSpec::new("cycles", "cycles", "cycles", Hardware(Hw::CPU_CYCLES))
            .optional()
            .per_exit("cycles_per_exit"),
    );
    v.push(
        EventSpec::new(
            "instructions",
            "instructions",
            "instructions",
            Hardware(Hw::INSTRUCTIONS),
        )
        .optional()
        .per_exit("instructions_per_exit"),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_unique_and_scopes_differ_only_in_clock() {
        for scope in [Scope::Process, Scope::System] {
            let c = catalog(scope);
            let mut names: Vec<_> = c.iter().map(|e| e.metric).collect();
            names.extend(c.iter().filter_map(|e| e.per_exit));
            let n = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), n, "duplicate metric names in {scope:?}");
        }
        let p: Vec<_> = catalog(Scope::Process).iter().map(|e| e.event).collect();
        let s: Vec<_> = catalog(Scope::System).iter().map(|e| e.event).collect();
        assert!(p.contains(&"task-clock") && s.contains(&"cpu-clock"));
    }

    #[test]
    fn perf_stat_script_uses_the_same_events() {
        let script = include_str!("../../../scripts/perf-stat.sh");
        for scope in [Scope::Process, Scope::System] {
            for e in catalog(scope) {
                assert!(
                    script.contains(e.event),
                    "scripts/perf-stat.sh lacks {}",
                    e.event
                );
            }
        }
    }
}
