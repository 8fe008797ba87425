//! What a run of `herd unregister` measured, as metrics and details
//! ([`result`]), and as text ([`render`]).

use anyhow::{bail, Result};

use super::measure::Measured;
use super::{sample_every, Args, SyncMode};
use crate::export::format::fmt_value;
use crate::result::{Metric, RunResult};
use crate::scenario::gpkit::{fmt_ns, fmt_rate, host_facts, CpuTime};
use crate::scenario::load;

/// What the updaters did in total.
#[derive(Debug, Default, Clone, Copy)]
struct UpdaterTotals {
    ops: u64,
    cpu: CpuTime,
}

/// The run's result: configuration, metrics, details; an error if a
/// deferred free was lost or ran twice.
pub(super) fn result(args: &Args, run: Measured) -> Result<RunResult> {
    let Measured {
        readers: nreaders,
        uses_membarrier,
        completed,
        stopped,
        elapsed,
        proc_cpu,
        s0,
        s1,
        updaters: upd_reports,
        readers_run: rd_reports,
        violations,
        op_latency,
        allocated,
        perf: report,
    } = run;
    let mut result = RunResult::new(
        "unregister",
        args.to_args(),
        serde_json::json!({
            "sync": args.sync,
            "updaters": args.updaters,
            "readers": nreaders,
            "objects": args.objects,
            "duration_s": args.duration.as_secs_f64(),
            "batch_size": args.batch_size,
            "first_check_delay_s": args.first_check_delay.map(|d| d.as_secs_f64()),
            "uses_membarrier": uses_membarrier,
        }),
        host_facts(),
    );
    let upd = upd_reports
        .iter()
        .fold(UpdaterTotals::default(), |a, r| UpdaterTotals {
            ops: a.ops + r.iterations,
            cpu: a.cpu.plus(r.cpu),
        });
    let rd = load::totals(&rd_reports);
    // CPU of neither updaters nor readers: the reclaimer (deferred callbacks,
    // grace periods run for them) and the main thread.
    let other_cpu = proc_cpu.since(upd.cpu).since(rd.cpu);

    let gps = s1.grace_periods - s0.grace_periods;
    let secs = elapsed.as_secs_f64();
    let ops = upd.ops;
    result.interrupted = !completed;
    result.push(Metric::higher("ops_per_s", "/s", ops as f64 / secs));
    if ops > 0 {
        result.push(Metric::lower(
            "ns_per_op",
            "ns",
            secs * 1e9 * args.updaters as f64 / ops as f64,
        ));
        let update_cpu = upd.cpu.plus(other_cpu);
        result.push(Metric::lower(
            "update_cpu_ns_per_op",
            "ns",
            update_cpu.total() * 1e9 / ops as f64,
        ));
        result.push(Metric::lower(
            "update_sys_ns_per_op",
            "ns",
            update_cpu.sys_s * 1e9 / ops as f64,
        ));
    }
    if op_latency.count > 0 {
        result.push(Metric::lower("op_p50_ns", "ns", op_latency.p50_ns as f64));
        result.push(Metric::lower("op_p99_ns", "ns", op_latency.p99_ns as f64));
        result.push(Metric::lower("op_max_ns", "ns", op_latency.max_ns as f64));
    }
    result.push(Metric::info("ops", "ops", ops as f64));
    result.push(Metric::info("grace_periods", "GPs", gps as f64));
    result.push(Metric::info("grace_periods_per_s", "/s", gps as f64 / secs));
    result.push(Metric::info(
        "expedited",
        "GPs",
        (s1.expedited - s0.expedited) as f64,
    ));
    if gps > 0 {
        result.push(Metric::info(
            "frees_per_gp",
            "frees",
            ops as f64 / gps as f64,
        ));
    }
    let cbs = s1.callbacks_run - s0.callbacks_run;
    if args.sync == SyncMode::Deferred {
        result.push(Metric::info("callbacks_run", "callbacks", cbs as f64));
        result.push(Metric::info("max_batch", "callbacks", s1.max_batch as f64));
        if cbs != ops {
            bail!("{ops} frees deferred but {cbs} callbacks ran: callbacks lost or run twice");
        }
    }
    result.push(Metric::higher(
        "reader_sections_per_s",
        "/s",
        rd.iterations as f64 / stopped.as_secs_f64(),
    ));
    result.push(Metric::lower("violations", "reads", violations as f64));
    result.push(Metric::lower("user_s", "s", proc_cpu.user_s));
    result.push(Metric::lower("sys_s", "s", proc_cpu.sys_s));
    result.push(Metric::info(
        "objects_allocated",
        "objects",
        allocated as f64,
    ));
    for m in report.metrics(0) {
        result.push(m);
    }
    result.warnings.extend(report.notes());
    if args.sync == SyncMode::None && violations == 0 {
        result.warnings.push(
            "--sync none found no violation this time: the readers never caught a free \
             (try a longer --duration or more --objects)"
                .into(),
        );
    }
    result.perf = report.to_json();
    result.details = serde_json::json!({
        "elapsed_s": secs,
        "op_latency": op_latency,
        "op_latency_sampled_every": sample_every(args.sync),
        "updaters_stopped_s": stopped.as_secs_f64(),
        "process_cpu": proc_cpu,
        "updater_cpu": upd.cpu,
        "reader_cpu": rd.cpu,
        "other_cpu": other_cpu,
        "updaters": upd_reports,
        "readers": rd_reports,
        "reader_sections": rd.iterations,
        "domain": stats_delta(&s0, &s1),
    });
    Ok(result)
}

fn stats_delta(a: &exitq::DomainStats, b: &exitq::DomainStats) -> serde_json::Value {
    serde_json::json!({
        "grace_periods": b.grace_periods - a.grace_periods,
        "expedited": b.expedited - a.expedited,
        "synchronize_calls": b.synchronize_calls - a.synchronize_calls,
        "callbacks_run": b.callbacks_run - a.callbacks_run,
        "callbacks_panicked": b.callbacks_panicked - a.callbacks_panicked,
        "batches": b.batches - a.batches,
        "passes": b.passes - a.passes,
        "stolen_batches": b.stolen_batches - a.stolen_batches,
        "backlog_waits": b.backlog_waits - a.backlog_waits,
        "stalls": b.stalls - a.stalls,
        "max_batch": b.max_batch,
        "pending_after_barrier": b.pending,
    })
}

pub(super) fn render(r: &RunResult) -> String {
    let m = |n: &str| r.metric(n).unwrap_or(0.0);
    let c = &r.config;
    let d = &r.details;
    let cpu = |k: &str| {
        let v = &d[k];
        format!(
            "user {}s sys {}s",
            fmt_value(v["user_s"].as_f64().unwrap_or(0.0)),
            fmt_value(v["sys_s"].as_f64().unwrap_or(0.0))
        )
    };
    let mut s = format!(
        "\nunregister --sync {}: {} updater(s), {} reader(s), {} objects, {:.2}s{}\n",
        c["sync"].as_str().unwrap_or("?"),
        c["updaters"],
        c["readers"],
        c["objects"],
        d["elapsed_s"].as_f64().unwrap_or(0.0),
        if r.interrupted { " (interrupted)" } else { "" }
    );
    s += &format!(
        "  ops {}  {}  {} per op per updater\n",
        fmt_value(m("ops")),
        fmt_rate(m("ops_per_s")),
        fmt_ns(m("ns_per_op"))
    );
    let lat = &d["op_latency"];
    let l = |k: &str| fmt_ns(lat[k].as_f64().unwrap_or(0.0));
    s += &format!(
        "  op latency p50 {}  p99 {}  max {} ({})\n",
        l("p50_ns"),
        l("p99_ns"),
        l("max_ns"),
        match d["op_latency_sampled_every"].as_u64() {
            Some(1) => "every op timed".to_string(),
            Some(n) => format!("one op in {n} timed"),
            None => "not timed".to_string(),
        }
    );
    s += &format!(
        "  grace periods {} ({}, {} expedited), {} frees per grace period\n",
        fmt_value(m("grace_periods")),
        fmt_rate(m("grace_periods_per_s")),
        fmt_value(m("expedited")),
        fmt_value(r.metric("frees_per_gp").unwrap_or(0.0))
    );
    s += &format!(
        "  update-side CPU {} per op ({} in the kernel)\n",
        fmt_ns(m("update_cpu_ns_per_op")),
        fmt_ns(m("update_sys_ns_per_op"))
    );
    s += &format!(
        "  CPU: process {}; updaters {}; readers {}; reclaimer+main {}\n",
        cpu("process_cpu"),
        cpu("updater_cpu"),
        cpu("reader_cpu"),
        cpu("other_cpu")
    );
    s += &format!(
        "  readers {} sections; use-after-free violations: {}\n",
        fmt_rate(m("reader_sections_per_s")),
        fmt_value(m("violations"))
    );
    s
}
