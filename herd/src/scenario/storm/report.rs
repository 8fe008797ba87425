//! The storm's run result: the figures of a finished [`super::StormRun`]
//! as metrics, warnings and details, and the storm's own sections below
//! the metrics table (contention profile, placement, pre-flight,
//! warnings).

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::json;

use super::collect::{placement, push_hist};
use super::Measured;
use crate::export::format::fmt_value;
use crate::export::histogram;
use crate::host::format_cpu_list;
use crate::host::numa::NodeMap;
use crate::perf;
use crate::result::{Metric, RunResult};
use crate::runner;
use crate::spawn::Reap;

/// The run result of a measured storm.
pub(super) fn build(m: &Measured<'_>, perf: &perf::Report) -> Result<RunResult> {
    let cfg = m.cfg;
    let mut r = RunResult::new(
        "storm",
        m.argv.clone(),
        serde_json::to_value(cfg)?,
        m.facts.to_json(),
    );
    r.interrupted = m.interrupted;
    push_time_and_rusage(&mut r, m);
    push_threads(&mut r, m);
    push_hist(&mut r, "create", &m.collector.create);
    push_hist(&mut r, "start", &m.collector.start);
    push_hist(&mut r, "exit", &m.collector.exit);
    push_hist(&mut r, "exit_done", &m.collector.exit_done);
    push_hist(&mut r, "exit_spinning", &m.collector.exit_spinning);
    push_hist(&mut r, "exit_own", &m.collector.exit_own);
    if !m.collector.exit_hook.is_empty() {
        push_hist(&mut r, "exit_hook", &m.collector.exit_hook);
    }
    r.push(Metric::lower(
        "peak_rss_kib",
        "KiB",
        m.ru1.max_rss_kib as f64,
    ));
    r.push(Metric::lower(
        "minor_faults",
        "faults",
        m.ru1.minor_faults.saturating_sub(m.ru0.minor_faults) as f64,
    ));
    if let Some(s) = m.spawner.recycled_stacks() {
        for x in s.metrics() {
            r.push(x);
        }
        r.warnings.extend(s.warnings());
        let canaries = s.stats().canary_violations;
        if canaries > 0 {
            r.checks_failed.push(format!(
                "stacks: {canaries} pooled stacks failed their canary check"
            ));
        }
    }
    // The futex hash the waves ran on, read after them (a private table is
    // made at a process's first thread and grows with its thread count).
    let hash = crate::host::futex_hash::FutexHash::read();
    if let Some(n) = hash.slots {
        r.push(Metric::info("futex_hash_buckets", "buckets", n as f64));
    }
    if let Some(h) = r.host.as_object_mut() {
        h.insert("futex_hash".into(), serde_json::to_value(&hash)?);
    }
    let place = placement(cfg, &m.collector, &NodeMap::read());
    r.push(Metric::info(
        "cpus_used",
        "cpus",
        place["cpus_used"].as_u64().unwrap_or(0) as f64,
    ));
    for x in perf.metrics(m.exits) {
        r.push(x);
    }
    if let Some(c) = &m.cleanup {
        for x in c.metrics(m.exits) {
            r.push(x);
        }
        // The strategy's own checks (violations, missing or repeated
        // cleanups): the run is written in full, and exits 4.
        r.checks_failed.extend(c.problems());
    }
    r.checks_failed.extend(perf.checks());
    r.perf = perf.to_json();
    for x in crate::spawn::recycled::mmap_lock_metrics(&r.perf) {
        r.push(x);
    }
    for line in perf.notes() {
        eprintln!("{line}");
    }
    push_warnings(&mut r, m);
    r.details = json!({
        "waves_run": m.waves_run,
        "threads_requested": cfg.total_threads(),
        "ended_by_request": m.collector.ended_by_request,
        "ended_while_spinning": m.collector.ended_spinning,
        "ended_on_own": m.collector.ended_on_own,
        "never_exited": m.never_exited,
        "detached": m.counts.detached,
        "detached_after_exit": m.counts.detached_after_exit,
        "leaked": m.counts.leaked,
        "failures": m.failures.groups(),
        "histograms": {
            "create": histogram::to_json(&m.collector.create, "ns"),
            "start": histogram::to_json(&m.collector.start, "ns"),
            "exit": histogram::to_json(&m.collector.exit, "ns"),
            "exit_spinning": histogram::to_json(&m.collector.exit_spinning, "ns"),
            "exit_own": histogram::to_json(&m.collector.exit_own, "ns"),
            "exit_hook": histogram::to_json(&m.collector.exit_hook, "ns"),
            "exit_done": histogram::to_json(&m.collector.exit_done, "ns"),
        },
        "placement": place,
        "preflight": m.pre,
        "cleanup": m.cleanup,
        "stacks": m.spawner.recycled_stacks().map(|s| s.to_json()),
    });
    if runner::is_child() {
        // Children print JSON only; the parent shows stderr as is.
        for w in r.warnings.iter().chain(&r.checks_failed) {
            eprintln!("herd: {w}");
        }
    }
    Ok(r)
}

/// Wall time of the measured phase and its parts; getrusage deltas.
fn push_time_and_rusage(r: &mut RunResult, m: &Measured<'_>) {
    let s = |ns: u64| ns as f64 / 1e9;
    r.push(Metric::lower("wall_s", "s", s(m.t1 - m.t0)));
    r.push(Metric::lower("waves_s", "s", s(m.t_waves - m.t0)));
    r.push(Metric::lower("drain_s", "s", s(m.t1 - m.t_waves)));
    r.push(Metric::lower("user_s", "s", m.ru1.user_s - m.ru0.user_s));
    r.push(Metric::lower("sys_s", "s", m.ru1.sys_s - m.ru0.sys_s));
    if m.exits > 0 {
        // The process's system time over its thread exits (everything the
        // kernel did for the storm, not only the exits).
        r.push(Metric::lower(
            "sys_us_per_exit",
            "us",
            (m.ru1.sys_s - m.ru0.sys_s) * 1e6 / m.exits as f64,
        ));
    }
    let (u0, u1) = (&m.ru0, &m.ru1);
    for (name, after, before) in [
        (
            "ctx_voluntary",
            u1.voluntary_switches,
            u0.voluntary_switches,
        ),
        (
            "ctx_involuntary",
            u1.involuntary_switches,
            u0.involuntary_switches,
        ),
    ] {
        let delta = after.saturating_sub(before) as f64;
        r.push(Metric::lower(name, "switches", delta));
    }
}

/// Threads created, failed, cancelled, exited, reaped; the create rate.
fn push_threads(r: &mut RunResult, m: &Measured<'_>) {
    let c = &m.counts;
    let reaped = match m.cfg.reap {
        Reap::Join => m.reaped,
        Reap::Detach => c.detached,
        Reap::Leak => 0,
    };
    let failed = m.failures.total() as f64;
    r.push(Metric::info("threads_created", "threads", c.created as f64));
    r.push(Metric::lower("threads_failed", "threads", failed));
    for (name, v) in [
        ("threads_cancelled", c.cancel_requests),
        ("threads_exited", m.exits),
        ("threads_reaped", reaped),
    ] {
        r.push(Metric::info(name, "threads", v as f64));
    }
    let waves_s = (m.t_waves - m.t0) as f64 / 1e9;
    if waves_s > 0.0 {
        r.push(Metric::higher(
            "create_rate",
            "threads/s",
            c.created as f64 / waves_s,
        ));
    }
}

/// Creation failures with the limit named, pre-flight warnings, threads
/// that never exited, failed cancels and joins.
fn push_warnings(r: &mut RunResult, m: &Measured<'_>) {
    for g in &m.failures.groups() {
        r.warnings.push(format!(
            "{} thread creations failed with {} ({}): {}; first in wave {} after {} threads created",
            g.count, g.errno_name, g.limit_name, g.evidence, g.first_wave, g.created_before
        ));
    }
    r.warnings.extend(m.pre.warnings.iter().cloned());
    if m.never_exited > 0 {
        r.warnings.push(format!(
            "{} threads did not reach their exit destructor within the drain timeout",
            m.never_exited
        ));
    }
    if m.counts.cancel_errors > 0 {
        r.warnings.push(format!(
            "{} pthread_cancel calls failed",
            m.counts.cancel_errors
        ));
    }
    if m.reap_failed > 0 {
        r.warnings.push(format!("{} joins failed", m.reap_failed));
    }
    if m.counts.detach_left > 0 {
        r.warnings.push(format!(
            "{} detached threads that exited before their wave was retired were still exiting at the end: left unjoined",
            m.counts.detach_left
        ));
    }
}

/// Up to this many CPUs with threads the placement lists every CPU; above,
/// a summary (as the per-CPU counters are summarised), every CPU with
/// `-A/--no-aggregate` or in the JSON.
const LIST_EVERY_CPU_UPTO: usize = 64;

/// One placement list, `(cpu, threads)` for the CPUs that had threads: all
/// of them, 8 to a line, or above [`LIST_EVERY_CPU_UPTO`] (unless
/// `every_cpu`) the range and the busiest CPUs.
fn threads_per_cpu(label: &str, counts: &[(i64, u64)], every_cpu: bool) -> String {
    let mut out = String::new();
    if counts.len() > LIST_EVERY_CPU_UPTO && !every_cpu {
        let mut n: Vec<u64> = counts.iter().map(|&(_, k)| k).collect();
        n.sort_unstable();
        let mut busiest = counts.to_vec();
        // Most threads first, lower CPU first among equals.
        busiest.sort_by_key(|&(cpu, k)| (std::cmp::Reverse(k), cpu));
        let top: Vec<String> = busiest
            .iter()
            .take(5)
            .map(|(cpu, k)| format!("cpu{cpu}:{k}"))
            .collect();
        let _ = writeln!(
            out,
            "  threads per CPU at {label}: {} CPUs with threads, min {}, median {}, max {}; \
             busiest {} (every CPU: -A/--no-aggregate or the JSON)",
            counts.len(),
            n[0],
            n[n.len() / 2],
            n[n.len() - 1],
            top.join(" ")
        );
        return out;
    }
    let _ = write!(out, "  threads per CPU at {label}:");
    for (i, (cpu, k)) in counts.iter().enumerate() {
        if i % 8 == 0 {
            let _ = write!(out, "\n    ");
        } else {
            out.push_str("  ");
        }
        let _ = write!(out, "cpu{cpu}:{k}");
    }
    out.push('\n');
    out
}

/// The storm's own sections below the metrics table: the `--contention`
/// profile, placement, failures, warnings.
pub fn extra_sections(r: &RunResult) -> String {
    let mut out = String::new();
    if let Some(t) = perf::Report::from_json(&r.perf).and_then(|p| p.contention_table()) {
        let _ = writeln!(out, "\n{t}");
    }
    let drive = &r.details["cleanup"]["drive"];
    if let Some(how) = drive["how"].as_str() {
        // A library need not run its deferred frees by itself: say how the
        // end of the run made it (cleanup/reclaimers.rs).
        let _ = writeln!(
            out,
            "\ncleanup: {} entries were freed only when herd drove {} at the end: {how} ({} rounds)",
            r.details["cleanup"]["frees_at_finish"],
            r.details["cleanup"]["strategy"].as_str().unwrap_or("the library"),
            drive["rounds"]
        );
    }
    let p = &r.details["placement"];
    if let Some(starts) = p["per_cpu_start"].as_array() {
        let requested = cpu_numbers(&p["cpus_requested"]);
        let _ = writeln!(
            out,
            "\nplacement: {} CPUs used of {} requested ({}), imbalance {} (max/mean threads per CPU at start)",
            p["cpus_used"],
            requested.len(),
            format_cpu_list(&requested),
            fmt_value(p["imbalance"].as_f64().unwrap_or(0.0))
        );
        let (os, oe) = (
            p["outside_requested_start"].as_u64().unwrap_or(0),
            p["outside_requested_exit"].as_u64().unwrap_or(0),
        );
        if os + oe > 0 {
            let _ = writeln!(
                out,
                "  threads seen outside the requested CPUs: {os} at start, {oe} at exit"
            );
        }
        let nodes = p["per_node"].as_array().map_or(&[][..], Vec::as_slice);
        let report = perf::Report::from_json(&r.perf);
        let per_node = report.as_ref().is_some_and(|p| p.per_node);
        let every_cpu = report.as_ref().is_some_and(|p| p.no_aggregate);
        if per_node || nodes.len() > 1 {
            out.push_str(&nodes_section(nodes));
        }
        let lists = if per_node {
            // --per-node: the per-CPU lists are in the JSON only.
            Vec::new()
        } else {
            vec![
                ("start", starts),
                ("exit", p["per_cpu_exit"].as_array().unwrap_or(starts)),
            ]
        };
        for (label, list) in lists {
            // CPU -1: threads whose CPU was not known.
            let counts: Vec<(i64, u64)> = list
                .iter()
                .filter_map(|e| Some((e.get(0)?.as_i64()?, e.get(1)?.as_u64()?)))
                .collect();
            out.push_str(&threads_per_cpu(label, &counts, every_cpu));
        }
    }
    let pre = &r.details["preflight"];
    if pre.is_object() {
        let _ = writeln!(
            out,
            "\npre-flight: stack {} per thread, peak live threads {}{}, peak mappings {}{}",
            crate::host::human_bytes(pre["stack_bytes"].as_u64().unwrap_or(0)),
            if pre["peak_is_lower_bound"] == true {
                ">= "
            } else {
                "~"
            },
            pre["peak_live_threads"],
            pre["peak_mappings"],
            match pre["leak_thread_capacity"].as_u64() {
                Some(c) => format!(", room for ~{c} leaked threads"),
                None => String::new(),
            }
        );
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(out, "\nwarnings:");
        for w in &r.warnings {
            let _ = writeln!(out, "  - {w}");
        }
    }
    if !r.checks_failed.is_empty() {
        let _ = writeln!(
            out,
            "\nchecks FAILED (exit 4; the figures above are not to be trusted):"
        );
        for w in &r.checks_failed {
            let _ = writeln!(out, "  - {w}");
        }
    }
    out
}

/// A JSON array of CPU numbers (placement's `cpus_requested`, a node's
/// `cpus`) as numbers; anything else is an empty list.
fn cpu_numbers(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as usize)
                .collect()
        })
        .unwrap_or_default()
}

/// Threads per NUMA node at start and exit, one line per node, from
/// `placement.per_node`.
fn nodes_section(nodes: &[serde_json::Value]) -> String {
    let mut out = String::from("  threads per node at start / exit:\n");
    for n in nodes {
        let cpus = cpu_numbers(&n["cpus"]);
        let _ = writeln!(
            out,
            "    N{} ({} requested CPUs: {}): {} / {}",
            n["node"],
            cpus.len(),
            format_cpu_list(&cpus),
            n["start"],
            n["exit"]
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::storm::collect::{placement, Collector};
    use crate::scenario::storm::options::Preset;
    use crate::scenario::storm::{Config, Pin};
    use crate::spawn::{Cancel, Reap};

    fn cfg_with_cpus(cpus: Vec<usize>) -> Config {
        Config {
            preset: Preset::Default,
            waves: 1,
            per_wave: 1,
            lag: 0,
            slots: 1,
            spin: 0,
            sleep_ms: 0,
            spawn: crate::spawn::Backend::Pthread,
            stack_size: None,
            stacks: Default::default(),
            stack_release: Default::default(),
            cancel: Cancel::Pthread,
            reap: Reap::Join,
            cpus,
            pin: Pin::RoundRobin,
            force: false,
            futex_hash: Default::default(),
            cleanup: Default::default(),
        }
    }

    /// Placement on a simulated 384-CPU machine: ids above 128 and 256,
    /// no fixed-size tables anywhere.
    #[test]
    fn placement_beyond_128_cpus() {
        let requested: Vec<usize> = (0..128).chain(256..384).collect();
        let cfg = cfg_with_cpus(requested.clone());
        let mut c = Collector::new();
        for &cpu in &requested {
            let n = if cpu == 300 { 4 } else { 2 };
            c.per_cpu_start.insert(cpu as i32, n);
            c.per_cpu_exit.insert(cpu as i32, n);
        }
        let p = placement(&cfg, &c, &NodeMap::default());
        assert_eq!(p["cpus_used"], 256);
        assert_eq!(p["cpus_requested"].as_array().unwrap().len(), 256);
        assert_eq!(p["per_cpu_start"][200], serde_json::json!([328, 2]));
        let total = 2.0 * 255.0 + 4.0;
        assert!((p["imbalance"].as_f64().unwrap() - 4.0 / (total / 256.0)).abs() < 1e-9);
        let mut r = {
            let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
            r.details = json!({ "placement": p });
            r
        };
        let text = extra_sections(&r);
        assert!(
            text.contains("256 CPUs used of 256 requested (0-127,256-383)"),
            "{text}"
        );
        // 256 CPUs: summarised, the busiest first, not one line per 8.
        assert!(
            text.contains(
                "threads per CPU at start: 256 CPUs with threads, min 2, median 2, max 4; \
                 busiest cpu300:4 cpu0:2 cpu1:2 cpu2:2 cpu3:2 (every CPU: -A/--no-aggregate or the JSON)"
            ),
            "{text}"
        );
        assert!(!text.contains("cpu383:2"), "{text}");
        assert!(text.lines().count() < 10, "{text}");
        // -A/--no-aggregate: every CPU.
        r.perf = crate::perf::Report {
            enabled: true,
            no_aggregate: true,
            ..Default::default()
        }
        .to_json();
        let text = extra_sections(&r);
        assert!(text.contains("cpu383:2"), "{text}");
        assert!(!text.contains("busiest"), "{text}");
    }

    /// Up to 64 CPUs with threads every CPU is listed; one more and the
    /// list is summarised.
    #[test]
    fn placement_lists_every_cpu_up_to_64() {
        let counts: Vec<(i64, u64)> = (0..64).map(|c| (c, 1 + c as u64 % 3)).collect();
        let text = threads_per_cpu("exit", &counts, false);
        assert_eq!(text.lines().count(), 1 + 8, "{text}");
        assert!(text.contains("cpu63:1"), "{text}");
        let mut more = counts.clone();
        more.push((64, 9));
        let text = threads_per_cpu("exit", &more, false);
        assert_eq!(
            text,
            "  threads per CPU at exit: 65 CPUs with threads, min 1, median 2, max 9; \
             busiest cpu64:9 cpu2:3 cpu5:3 cpu8:3 cpu11:3 (every CPU: -A/--no-aggregate or the JSON)\n"
        );
    }

    #[test]
    fn placement_counts_unused_requested_cpus_in_the_imbalance() {
        // 10 threads all on CPU 1 of 0-4: imbalance 5 (max 10 / mean 2).
        let cfg = cfg_with_cpus(vec![0, 1, 2, 3, 4]);
        let mut c = Collector::new();
        c.per_cpu_start.insert(1, 10);
        c.per_cpu_exit.insert(1, 10);
        let p = placement(&cfg, &c, &NodeMap::default());
        assert_eq!(p["cpus_used"], 1);
        assert_eq!(p["imbalance"], 5.0);
        assert_eq!(p["outside_requested_start"], 0);
        // A thread that exited on CPU 7, outside 0-4, is reported.
        c.per_cpu_exit.insert(7, 1);
        let p = placement(&cfg, &c, &NodeMap::default());
        assert_eq!(p["outside_requested_exit"], 1);
    }

    /// Placement per node on a fake 4-node machine with sparse ids (0, 1,
    /// 3, 6): round-robin over 16 CPUs, node k holding CPUs 4k..4k+4.
    #[test]
    fn placement_per_node_sums_threads_per_node() {
        let map = NodeMap::from_nodes(
            [0, 1, 3, 6]
                .iter()
                .enumerate()
                .map(|(k, &id)| crate::host::NumaNode {
                    id,
                    cpus: (4 * k..4 * k + 4).collect(),
                })
                .collect(),
        );
        let cfg = cfg_with_cpus((0..16).collect());
        let mut c = Collector::new();
        for cpu in 0..16 {
            c.per_cpu_start.insert(cpu, 10);
            c.per_cpu_exit.insert(cpu, 10);
        }
        // One thread migrated from CPU 0 (N0) to CPU 15 (N6) before exit,
        // one whose CPU is unknown.
        *c.per_cpu_exit.get_mut(&0).unwrap() -= 1;
        *c.per_cpu_exit.get_mut(&15).unwrap() += 1;
        c.per_cpu_exit.insert(-1, 1);
        let p = placement(&cfg, &c, &map);
        let nodes = p["per_node"].as_array().unwrap();
        let row = |i: usize| {
            let n = &nodes[i];
            (
                n["node"].as_u64().unwrap(),
                n["cpus_requested"].as_u64().unwrap(),
                n["start"].as_u64().unwrap(),
                n["exit"].as_u64().unwrap(),
            )
        };
        assert_eq!(nodes.len(), 4);
        assert_eq!(row(0), (0, 4, 40, 39));
        assert_eq!(row(1), (1, 4, 40, 40));
        assert_eq!(row(3), (6, 4, 40, 41));
        assert_eq!(nodes[2]["cpus"], json!([8, 9, 10, 11]));

        let mut r = RunResult::new("storm", vec![], Default::default(), Default::default());
        r.details = json!({ "placement": p });
        let text = extra_sections(&r);
        assert!(text.contains("threads per node at start / exit:"), "{text}");
        assert!(
            text.contains("N6 (4 requested CPUs: 12-15): 40 / 41"),
            "{text}"
        );
        assert!(
            text.contains("cpu15:"),
            "per-CPU lists without --per-node: {text}"
        );
        // --per-node: the node lines only, the per-CPU lists in the JSON.
        r.perf = crate::perf::Report {
            enabled: true,
            per_node: true,
            ..Default::default()
        }
        .to_json();
        let text = extra_sections(&r);
        assert!(
            text.contains("N3 (4 requested CPUs: 8-11): 40 / 40"),
            "{text}"
        );
        assert!(!text.contains("cpu15:"), "{text}");
        // One node: no node lines unless asked for.
        let p = placement(&cfg, &c, &NodeMap::default());
        assert_eq!(p["per_node"].as_array().unwrap().len(), 1);
        r.perf = serde_json::Value::Null;
        r.details = json!({ "placement": p });
        assert!(!extra_sections(&r).contains("threads per node"));
    }
}
