//! Tests of `report.rs`: readings, metrics, notes and tables.

use super::*;

fn reading(metric: &str, event: &str, unit: &str, v: Option<f64>) -> CounterReading {
    CounterReading {
        metric: metric.into(),
        event: event.into(),
        unit: unit.into(),
        raw: v.map(|v| v as u64),
        value: v,
        not_counted: false,
        time_enabled_ns: 100,
        time_running_ns: 100,
        fds: 1,
        optional: false,
        unavailable: v.is_none().then(|| Unavailable::absent("nope")),
        per_cpu: Vec::new(),
        per_node: Vec::new(),
    }
}

#[test]
fn metrics_sum_futex_and_divide_per_exit_and_skip_unavailable() {
    let r = Report {
        enabled: true,
        counters: vec![
            reading(
                "sys_futex",
                "syscalls:sys_enter_futex",
                "calls",
                Some(300.0),
            ),
            reading(
                "sys_futex_wake",
                "syscalls:sys_enter_futex_wake",
                "calls",
                Some(100.0),
            ),
            reading(
                "task_exits",
                "sched:sched_process_exit",
                "tasks",
                Some(100.0),
            ),
            reading("task_clock_ms", "task-clock", "ms", Some(50.0)),
            reading("cycles", "cycles", "cycles", None),
        ],
        ..Default::default()
    };
    let m = r.metrics(100);
    let get = |n: &str| m.iter().find(|x| x.name == n).map(|x| x.value);
    assert_eq!(get("futex_calls"), Some(400.0));
    assert_eq!(get("futex_per_exit"), Some(4.0));
    assert_eq!(get("task_clock_us_per_exit"), Some(500.0));
    assert_eq!(get("cycles"), None, "unavailable is left out, not 0");
    assert_eq!(get("cycles_per_exit"), None);
    assert!(r.metrics(0).iter().all(|x| !x.name.ends_with("_per_exit")));
    let notes = r.notes();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].contains("cycles unavailable: nope"), "{notes:?}");
}

#[test]
fn exit_futex_wakes_are_do_futex_calls_not_from_the_syscall() {
    let mut r = Report {
        enabled: true,
        counters: vec![
            reading(
                "sys_futex",
                "syscalls:sys_enter_futex",
                "calls",
                Some(300.0),
            ),
            reading("kernel_futex_calls", "herd:do_futex", "calls", Some(400.0)),
            reading(
                "task_exits",
                "sched:sched_process_exit",
                "exits",
                Some(100.0),
            ),
        ],
        ..Default::default()
    };
    let m = r.metrics(100);
    let get = |n: &str| m.iter().find(|x| x.name == n).map(|x| x.value);
    assert_eq!(get("exit_futex_wakes"), Some(100.0));
    assert_eq!(get("exit_futex_wakes_per_exit"), Some(1.0));
    assert_eq!(
        get("futex_calls"),
        Some(300.0),
        "the kprobe is not a syscall"
    );
    // Exits not counted (inherited counters detached before exit): the
    // exits' wakes were not either.
    r.counters[2].value = None;
    assert!(r.metrics(100).iter().all(|x| x.name != "exit_futex_wakes"));
    let without = Report {
        enabled: true,
        counters: vec![reading(
            "sys_futex",
            "syscalls:sys_enter_futex",
            "calls",
            Some(3.0),
        )],
        ..Default::default()
    };
    assert!(without
        .metrics(1)
        .iter()
        .all(|x| x.name != "exit_futex_wakes"));
}

#[test]
fn counters_lost_to_a_descriptor_shortage_fail_the_checks() {
    let mut lost = reading("page_faults", "page-faults", "faults", None);
    lost.unavailable = Some(super::super::budget::emfile(None, true));
    let mut policy = reading("sys_futex", "syscalls:sys_enter_futex", "calls", None);
    policy.unavailable = Some(Unavailable::fixable("tracefs is not mounted", "mount it"));
    let r = Report {
        enabled: true,
        counters: vec![lost, policy],
        ..Default::default()
    };
    let c = r.checks();
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("counters incomplete: page-faults"), "{c:?}");
    assert!(
        !c[0].contains("sys_enter_futex"),
        "a host fact is a note, not a failure"
    );
}

#[test]
fn lost_contention_samples_fail_the_checks_unless_allowed() {
    let mut r = Report {
        enabled: true,
        contention: Some(super::super::contention::ContentionReport {
            lost: 3,
            ..Default::default()
        }),
        ..Default::default()
    };
    let c = r.checks();
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("lost 3") && c[0].contains("--allow-lost-samples"));
    r.allow_lost_samples = true;
    assert!(r.checks().is_empty());
    r.allow_lost_samples = false;
    r.contention.as_mut().unwrap().lost = 0;
    assert!(r.checks().is_empty(), "nothing lost");
}

#[test]
fn json_round_trips() {
    let r = Report {
        enabled: true,
        counters: vec![reading(
            "sys_futex",
            "syscalls:sys_enter_futex",
            "calls",
            Some(3.0),
        )],
        ..Default::default()
    };
    assert_eq!(Report::from_json(&r.to_json()), Some(r));
}

#[test]
fn a_counter_that_never_ran_is_not_counted_not_zero() {
    let spec = events::catalog(Scope::System)
        .into_iter()
        .find(|e| e.kind() == super::super::sys::EventKind::Hardware)
        .unwrap();
    let never = [percpu::Sample {
        count: 0,
        enabled_ns: 5_000_000,
        running_ns: 0,
    }; 2];
    let c = CounterReading::counted(&spec, &never, &[0, 1]);
    assert!(c.not_counted);
    assert_eq!(c.value, None, "perf stat prints <not counted>, not 0");
    let r = Report {
        enabled: true,
        counters: vec![c],
        ..Default::default()
    };
    assert!(r.metrics(10).iter().all(|m| m.name != spec.metric));
    assert!(r.notes()[0].contains("<not counted>"), "{:?}", r.notes());
    assert!(r.counter_table().contains("<not counted>"));
    // One CPU ran: counted.
    let mut some = never;
    some[1].running_ns = 5_000_000;
    some[1].count = 3;
    assert_eq!(
        CounterReading::counted(&spec, &some, &[0, 1]).value,
        Some(3.0)
    );
}

/// Seen under load (perf_counters.rs, process scope through the
/// cgroup): every software and tracepoint counter had its count right
/// and time_enabled = time_running = 0 on every CPU. Before, each was
/// <not counted> and its metric left out.
#[test]
fn software_and_tracepoint_counts_are_exact_whatever_their_times() {
    let catalog = events::catalog(Scope::Process);
    let exits = catalog
        .iter()
        .find(|e| e.metric == "task_exits")
        .copied()
        .unwrap();
    let clock = catalog
        .iter()
        .find(|e| e.kind() == super::super::sys::EventKind::Software)
        .copied()
        .unwrap();
    let zero_times = |count| percpu::Sample {
        count,
        enabled_ns: 0,
        running_ns: 0,
    };
    let c = CounterReading::counted(&exits, &[zero_times(64), zero_times(0)], &[0, 1]);
    assert!(!c.not_counted);
    assert_eq!(c.value, Some(64.0));
    assert!(c.per_cpu.iter().all(|v| v.running.is_none()), "{c:?}");
    // Enabled on a CPU where the cgroup never ran: exactly 0 there.
    let idle = percpu::Sample {
        count: 0,
        enabled_ns: 5_000_000,
        running_ns: 0,
    };
    let c = CounterReading::counted(&clock, &[idle, idle], &[0, 1]);
    assert_eq!(c.value, Some(0.0));
    let r = Report {
        enabled: true,
        counters: vec![c],
        ..Default::default()
    };
    assert!(r.notes().is_empty(), "{:?}", r.notes());
    assert!(!r.counter_table().contains("<not counted>"));
}

#[test]
fn multiplexed_counters_are_noted() {
    let mut c = reading("cycles", "cycles", "cycles", Some(10.0));
    c.time_running_ns = 50;
    let r = Report {
        enabled: true,
        counters: vec![c],
        ..Default::default()
    };
    assert!(
        r.notes()[0].contains("multiplexed: counted 50.0%"),
        "{:?}",
        r.notes()
    );
}
