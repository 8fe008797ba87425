//! Fake storm results for `herd report`'s tests and its performance
//! figure: a storm as `herd storm --json --contention --perf-scope system`
//! writes it, on a host of any size (`cpus` CPUs in `nodes` NUMA nodes),
//! with `threads` threads, every perf counter per CPU, latency
//! histograms with buckets and a contention profile of 100 callers and
//! 100 locks (the most herd keeps). Deterministic (a fixed-seed
//! xorshift), built as plain JSON so that it is an input from outside,
//! as a saved file is.
//!
//! Used by `herd/tests/report_cli.rs`, `herd/tests/report_browser.rs` and
//! `herd/examples/fake_result.rs` (which prints one:
//! `cargo run --release -p herd --example fake_result -- --cpus 512 --nodes 4 --threads 100000`).

#![allow(dead_code)]

use serde_json::{json, Value};

/// A deterministic pseudo-random sequence (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` values spread log-normally around `median_ns`, as herd's
/// histogram JSON (quantiles and 4-per-octave buckets, in ns).
fn histogram(rng: &mut Rng, n: u64, median_ns: f64, spread: f64) -> Value {
    if n == 0 {
        return json!({"count": 0});
    }
    let mut values: Vec<f64> = (0..n.min(200_000))
        .map(|_| {
            // Box-Muller.
            let (u, v) = (rng.next().max(1e-12), rng.next());
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            (median_ns * (spread * z).exp()).max(1.0)
        })
        .collect();
    values.sort_by(f64::total_cmp);
    let q = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize].round();
    let mut buckets: Vec<(i64, u64)> = Vec::new();
    for v in &values {
        let k = (v.log2() * 4.0).floor() as i64;
        match buckets.last_mut() {
            Some((last, c)) if *last == k => *c += 1,
            _ => buckets.push((k, 1)),
        }
    }
    let pairs: Vec<Value> = buckets
        .iter()
        .map(|&(k, c)| json!([2f64.powf((k + 1) as f64 / 4.0).ceil() as u64, c]))
        .collect();
    json!({
        "count": values.len(), "unit": "ns", "min": q(0.0), "mean": values.iter().sum::<f64>() / values.len() as f64,
        "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0), "log_buckets": pairs,
    })
}

/// The NUMA nodes: `cpus` split evenly into `nodes`.
fn numa(cpus: usize, nodes: usize) -> Vec<Value> {
    let per = cpus.div_ceil(nodes.max(1));
    (0..nodes.max(1))
        .map(|id| json!({"id": id, "cpus": (id * per..((id + 1) * per).min(cpus)).collect::<Vec<_>>()}))
        .collect()
}

/// One per-CPU counter: `total` spread over the CPUs, node 0's CPUs
/// busier, one hot CPU.
fn counter(
    rng: &mut Rng,
    metric: &str,
    event: &str,
    unit: &str,
    total: f64,
    cpus: usize,
    nodes: &[Value],
) -> Value {
    let weights: Vec<f64> = (0..cpus)
        .map(|c| {
            let hot = if c == cpus / 3 { 8.0 } else { 1.0 };
            let node0 = if c < cpus / nodes.len().max(1) {
                2.0
            } else {
                1.0
            };
            hot * node0 * (0.5 + rng.next())
        })
        .collect();
    let sum: f64 = weights.iter().sum();
    let per_cpu: Vec<Value> = weights
        .iter()
        .enumerate()
        .map(|(cpu, w)| {
            let v = (total * w / sum).round();
            json!({"cpu": cpu, "raw": v as u64, "value": v})
        })
        .collect();
    let value: f64 = per_cpu.iter().map(|v| v["value"].as_f64().unwrap()).sum();
    let per_node: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let list = n["cpus"].as_array().unwrap();
            let s: f64 = list
                .iter()
                .map(|c| {
                    per_cpu[c.as_u64().unwrap() as usize]["value"]
                        .as_f64()
                        .unwrap()
                })
                .sum();
            json!({"node": n["id"], "cpus": list.len(), "value": s})
        })
        .collect();
    json!({
        "metric": metric, "event": event, "unit": unit, "raw": value as u64, "value": value,
        "time_enabled_ns": 17_000_000_000u64, "time_running_ns": 17_000_000_000u64, "fds": cpus,
        "optional": false, "unavailable": null, "per_cpu": per_cpu, "per_node": per_node,
    })
}

/// The contention profile: 100 callers and 100 locks.
fn contention(rng: &mut Rng, exits: f64) -> Value {
    let callers = [
        "madvise_do_behavior+0x23f",
        "do_exit+0x15e",
        "__vm_munmap+0xa7",
        "vm_mmap_pgoff+0xe9",
        "do_mprotect_pkey+0x159",
        "alloc_pid+0x183",
        "calculate_sigpending+0x1a",
        "try_to_wake_up+0x218",
        "futex_wake+0x9c",
        "futex_wait_setup+0x71",
        "release_task+0x113",
        "exit_signals+0x2f",
    ];
    let row = |i: usize, rng: &mut Rng, address: String, symbol: String, region: &str| {
        let class = ["rwsem:R", "rwsem:W", "spinlock", "rwlock:W", "mutex"][i % 5];
        let n = (exits / (1.0 + i as f64).powf(1.3) * (0.5 + rng.next())).max(1.0) as u64;
        let avg = 3_000.0 + 2_000_000.0 / (1.0 + i as f64) * rng.next();
        json!({"address": address, "symbol": symbol, "region": region,
               "class": class,
               "contended": n, "total_ns": (n as f64 * avg) as u64, "max_ns": (avg * 12.0) as u64, "min_ns": 2_800})
    };
    let by_caller: Vec<Value> = (0..100)
        .map(|i| {
            let sym = format!(
                "{}{}",
                callers[i % callers.len()],
                if i < callers.len() {
                    String::new()
                } else {
                    format!(".{i}")
                }
            );
            row(i, rng, String::new(), sym, "")
        })
        .collect();
    let by_lock: Vec<Value> = (0..100)
        .map(|i| {
            row(
                i,
                rng,
                format!(
                    "ffff8881{:08x}",
                    0x2333_d1f8u32.wrapping_add(i as u32 * 0x40)
                ),
                String::new(),
                "dynamic",
            )
        })
        .collect();
    let total: u64 = by_caller
        .iter()
        .map(|r| r["total_ns"].as_u64().unwrap())
        .sum();
    let pairs: u64 = by_caller
        .iter()
        .map(|r| r["contended"].as_u64().unwrap())
        .sum();
    json!({
        "by_lock": by_lock, "by_caller": by_caller, "rows_omitted": 412, "samples": 2 * pairs,
        "begins": pairs, "ends": pairs, "pairs": pairs, "total_wait_ns": total, "max_wait_ns": 29_449_413,
        "unfinished": 0, "unmatched_ends": 0, "lost": 0, "dropped": 0, "broken_by_loss": 0, "buffer_growths": 0,
        "mmap_lock": {"addresses": ["ffff88812333d1f8"], "waits": pairs / 2, "read_waits": pairs / 3,
                      "wait_ns": total / 2, "other_callers": pairs / 5},
        "ring_buffers": 0, "ring_kib": 1024, "kallsyms_hidden": false, "kallsyms_data": false,
    })
}

/// A storm of `threads` threads on a `cpus`-CPU host in `nodes` nodes.
pub fn storm(cpus: usize, nodes: usize, threads: u64) -> Value {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ cpus as u64 ^ (threads << 20));
    let node_list = numa(cpus, nodes);
    let all: Vec<usize> = (0..cpus).collect();
    let exits = threads as f64;
    let counters: Vec<Value> = [
        ("sys_futex", "syscalls:sys_enter_futex", "calls", 0.85),
        ("lock_contentions", "lock:contention_begin", "events", 0.84),
        ("task_exits", "sched:sched_process_exit", "tasks", 1.0),
        ("tasks_created", "task:task_newtask", "tasks", 1.0),
        ("context_switches", "context-switches", "switches", 3.45),
        ("cpu_migrations", "cpu-migrations", "migrations", 0.02),
        ("page_faults", "page-faults", "faults", 2.9),
        ("task_clock_ms", "task-clock", "ms", 0.12),
    ]
    .iter()
    .map(|&(m, e, u, per)| counter(&mut rng, m, e, u, exits * per, cpus, &node_list))
    .chain([json!({
        "metric": "cycles", "event": "cycles", "unit": "cycles", "raw": null, "value": null,
        "time_enabled_ns": 0, "time_running_ns": 0, "fds": 0, "optional": true,
        "unavailable": {"reason": "not supported by this CPU/VM (ENOENT: no hardware PMU event exposed)",
                        "fix": "a VM needs a virtual PMU, e.g. QEMU -cpu host", "absent": true},
    })])
    .collect();
    let per_cpu_start: Vec<Value> = all
        .iter()
        .map(|&c| {
            json!([
                c,
                (exits / cpus as f64 * (0.7 + 0.6 * rng.next())).round() as u64
            ])
        })
        .collect();
    let per_cpu_exit = per_cpu_start.clone();
    let metric = |name: &str, unit: &str, value: f64, better: &str| json!({"name": name, "unit": unit, "value": value, "better": better});
    let create = histogram(&mut rng, threads, 48_000.0, 0.8);
    let start = histogram(&mut rng, threads, 280_000.0, 1.2);
    let exit = histogram(&mut rng, threads * 8 / 10, 450_000.0, 1.6);
    let exit_spinning = histogram(&mut rng, threads / 10, 6_000_000.0, 0.5);
    let exit_own = histogram(&mut rng, threads / 10, 450.0, 0.4);
    let us = |h: &Value, k: &str| h[k].as_f64().unwrap_or(0.0) / 1e3;
    let metrics = vec![
        metric("wall_s", "s", 17.74, "lower"),
        metric("user_s", "s", 8.572, "lower"),
        metric("sys_s", "s", 13.58, "lower"),
        metric("threads_created", "threads", exits, "neither"),
        metric("threads_failed", "threads", 0.0, "lower"),
        metric("create_p50_us", "us", us(&create, "p50"), "lower"),
        metric("start_p50_us", "us", us(&start, "p50"), "lower"),
        metric("exit_p50_us", "us", us(&exit, "p50"), "lower"),
        metric("exit_p99_us", "us", us(&exit, "p99"), "lower"),
        metric("futex_per_exit", "calls", 0.852, "lower"),
        metric("contentions_per_exit", "events", 0.8355, "lower"),
        metric("cpus_used", "cpus", cpus as f64, "neither"),
    ];
    json!({
        "schema": 1, "herd_version": "0.1.0", "scenario": "storm",
        "args": ["--waves", (threads / 100).to_string(), "--perf-scope", "system", "--contention"],
        "config": {"cancel": "pthread", "cleanup": "none", "cpus": all, "futex_hash": "default", "lag": 5,
                   "per_wave": 100, "pin": "none", "preset": "default", "reap": "join", "sleep_ms": 100,
                   "slots": 20, "spawn": "pthread", "spin": 100000, "stacks": "glibc", "waves": threads / 100},
        "host": {"hostname": format!("fake-{cpus}"), "arch": "x86_64", "kernel": "6.18.0 #1 SMP PREEMPT_DYNAMIC",
                 "libc": "2.36", "online_cpus": all, "allowed_cpus": all, "numa_nodes": node_list,
                 "mem_total_bytes": 1u64 << 40, "threads_max": 4_000_000, "pid_max": 4_194_304,
                 "max_map_count": 65530, "cgroup_pids": null, "rlimit_nproc": {"soft": 4_000_000, "hard": 4_000_000},
                 "rlimit_stack": {"soft": 8_388_608, "hard": null}, "rlimit_as": {"soft": null, "hard": null},
                 "page_size": 4096, "perf_event_paranoid": 2, "perf_usable": true, "tracefs": "/sys/kernel/tracing",
                 "tracepoints_usable": true, "root": true, "futex_hash": {"per_process": true, "slots": 4096}},
        "metrics": metrics,
        "details": {
            "histograms": {"create": create, "start": start, "exit": exit, "exit_spinning": exit_spinning,
                           "exit_own": exit_own, "exit_hook": {"count": 0}},
            "placement": {"cpus_requested": all, "per_cpu_start": per_cpu_start, "per_cpu_exit": per_cpu_exit,
                          "cpus_used": cpus, "imbalance": 1.3, "outside_requested_start": 0,
                          "outside_requested_exit": 0},
            "failures": [],
        },
        "perf": {"enabled": true, "scope": "system", "cpus": all, "threads_at_open": 0, "method": "percpu",
                 "counted_s": 17.7, "counters": counters, "contention_requested": true,
                 "contention": contention(&mut rng, exits), "contention_unavailable": null,
                 "nodes": numa(cpus, nodes)},
        "warnings": [],
        "interrupted": false,
        "finished_at": "2026-12-03T12:00:00Z",
    })
}
