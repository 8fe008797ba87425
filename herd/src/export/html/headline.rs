//! The top of a section: what ran (the command line that reproduces it),
//! on what host (CPUs, NUMA nodes, kernel, futex hash mode, the thread
//! limits), when, with which herd, and whether every check passed.
//!
//! Host facts are read from the result's `host` object key by key: a key
//! a result does not have (an agent run records only its CPU count; an
//! older herd fewer facts) is simply not shown, and values of an
//! unexpected type are shown as they are.

use std::fmt::Write as _;

use serde_json::Value;

use super::markup::{badge, esc, Status};
use crate::host::futex_hash::FutexHash;
use crate::host::{format_cpu_list, human_bytes};
use crate::result::RunResult;

/// What a headline shows.
#[derive(Debug, Clone)]
pub(crate) struct Headline {
    /// The section's title (`herd storm`, `herd compare: storm`).
    pub(crate) title: String,
    /// HTML id of the section.
    pub(crate) id: String,
    /// Where it was read from.
    pub(crate) origin: String,
    /// The command line that reproduces it (shell-quoted).
    pub(crate) command: String,
    /// Set when the command is reconstructed, not recorded: why.
    pub(crate) command_note: Option<String>,
    /// When it ran.
    pub(crate) when: String,
    /// herd version and JSON schema of the result.
    pub(crate) version: String,
    /// The badge.
    pub(crate) status: (Status, String),
    /// Facts beside the host's (runs, configurations, ...).
    pub(crate) facts: Vec<(String, String)>,
}

/// A number in a JSON value as text.
fn num(v: &Value) -> Option<u64> {
    v.as_u64()
}

/// `[0, 1, 2, 5]` as `0-2,5 (4)`.
fn cpu_list(v: &Value) -> Option<String> {
    let cpus: Vec<usize> = serde_json::from_value(v.clone()).ok()?;
    Some(format!("{} ({})", format_cpu_list(&cpus), cpus.len()))
}

/// An rlimit `{soft, hard}` (`null`: unlimited), values shown by `show`.
fn rlimit(v: &Value, show: fn(u64) -> String) -> Option<String> {
    let one = |x: &Value| match x {
        Value::Null => Some("unlimited".to_string()),
        x => x.as_u64().map(show),
    };
    Some(format!(
        "{} (hard {})",
        one(v.get("soft")?)?,
        one(v.get("hard")?)?
    ))
}

/// The host facts of a result, `(label, text)` in `herd env`'s order.
pub(crate) fn host_facts(h: &Value, config: &Value) -> Vec<(String, String)> {
    let mut f: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            f.push((k.to_string(), v));
        }
    };
    let s = |k: &str| h.get(k).and_then(Value::as_str).map(str::to_string);
    put(
        "host",
        s("hostname").map(|n| format!("{n} ({})", s("arch").unwrap_or_default())),
    );
    put("kernel", s("kernel"));
    put("glibc", s("libc"));
    put("online CPUs", h.get("online_cpus").and_then(cpu_list));
    let allowed = h
        .get("allowed_cpus")
        .filter(|a| Some(*a) != h.get("online_cpus"));
    put("allowed CPUs", allowed.and_then(cpu_list));
    put("CPUs", h.get("cpus").and_then(num).map(|n| n.to_string()));
    if let Some(nodes) = h.get("numa_nodes").and_then(Value::as_array) {
        let list: Vec<String> = nodes
            .iter()
            .take(8)
            .filter_map(|n| {
                Some(format!(
                    "node{}: {}",
                    n.get("id")?,
                    cpu_list(n.get("cpus")?)?
                ))
            })
            .collect();
        let more = if nodes.len() > 8 {
            format!("; {} more", nodes.len() - 8)
        } else {
            String::new()
        };
        put(
            "NUMA nodes",
            Some(format!("{} — {}{more}", nodes.len(), list.join("; "))),
        );
    }
    put(
        "memory",
        h.get("mem_total_bytes").and_then(num).map(human_bytes),
    );
    put(
        "futex hash",
        h.get("futex_hash")
            .and_then(|v| serde_json::from_value::<FutexHash>(v.clone()).ok())
            .map(|fh| fh.describe()),
    );
    if let Some(c) = config.get("futex_hash") {
        put(
            "--futex-hash",
            Some(c.as_str().map_or_else(|| c.to_string(), str::to_string)),
        );
    }
    let show = |n: u64| n.to_string();
    put(
        "kernel.threads-max",
        h.get("threads_max").and_then(num).map(show),
    );
    put("kernel.pid_max", h.get("pid_max").and_then(num).map(show));
    put(
        "vm.max_map_count",
        h.get("max_map_count").and_then(num).map(show),
    );
    put(
        "cgroup pids.max",
        h.get("cgroup_pids").map(|c| match c.get("max") {
            _ if c.is_null() => "none".to_string(),
            Some(m) => m.as_u64().map_or("max".into(), |m| m.to_string()),
            None => "unknown".into(),
        }),
    );
    put(
        "RLIMIT_NPROC",
        h.get("rlimit_nproc")
            .and_then(|v| rlimit(v, |n| n.to_string())),
    );
    put(
        "RLIMIT_STACK",
        h.get("rlimit_stack").and_then(|v| rlimit(v, human_bytes)),
    );
    put(
        "RLIMIT_AS",
        h.get("rlimit_as").and_then(|v| rlimit(v, human_bytes)),
    );
    put(
        "RLIMIT_DATA",
        h.get("rlimit_data").and_then(|v| rlimit(v, human_bytes)),
    );
    put(
        "perf",
        h.get("perf_usable").and_then(Value::as_bool).map(|u| {
            let paranoid = h
                .get("perf_event_paranoid")
                .map(Value::to_string)
                .unwrap_or_default();
            let tracefs = s("tracefs").unwrap_or_else(|| "not mounted".into());
            format!(
                "{}; perf_event_paranoid {paranoid}; tracefs {tracefs}",
                if u { "usable" } else { "unusable" }
            )
        }),
    );
    put(
        "root",
        h.get("root")
            .and_then(Value::as_bool)
            .map(|r| if r { "yes" } else { "no" }.into()),
    );
    f
}

/// When `runs` ran: their `finished_at` (one time, or the first and the
/// last), else the input file's time with a word on why.
pub(crate) fn when(runs: &[&RunResult], file_time: Option<&str>) -> String {
    let mut times: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.finished_at.as_deref())
        .collect();
    times.sort_unstable();
    match (times.first(), times.last(), file_time) {
        (Some(a), Some(b), _) if a == b => format!("{a} (end of the run)"),
        (Some(a), Some(b), _) => format!("{a} to {b} (ends of the first and last runs)"),
        (_, _, Some(f)) => {
            format!("not recorded (herd before 2026-12-03); the file was written {f}")
        }
        _ => "not recorded (herd before 2026-12-03)".into(),
    }
}

/// `herd X, JSON schema N` of `runs` (every version when they differ).
pub(crate) fn version(runs: &[&RunResult]) -> String {
    let mut v: Vec<String> = runs
        .iter()
        .map(|r| format!("{}, JSON schema {}", r.herd_version, r.schema))
        .collect();
    v.dedup();
    v.sort();
    v.dedup();
    if v.is_empty() {
        "unknown (no runs)".into()
    } else {
        v.join("; ")
    }
}

/// The headline's HTML: title, badge, command, then the facts.
pub(crate) fn render(h: &Headline, host: &[(String, String)]) -> String {
    let mut out = format!(
        "<section id=\"{}\"><h1>{}</h1>\n<p>{}<span class=\"mute\">from {}</span></p>\n",
        esc(&h.id),
        esc(&h.title),
        badge(h.status.0, &h.status.1),
        esc(&h.origin)
    );
    let _ = writeln!(
        out,
        "<pre class=\"cmd\"><code>{}</code></pre>",
        esc(&h.command)
    );
    if let Some(n) = &h.command_note {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(n));
    }
    out.push_str("<dl class=\"facts\">");
    let mut fact = |k: &str, v: &str| {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
    };
    fact("when", &h.when);
    fact("herd", &h.version);
    for (k, v) in h.facts.iter().chain(host) {
        fact(k, v);
    }
    out.push_str("</dl>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_of_a_storm_and_of_an_agent() {
        let host = serde_json::json!({
            "hostname": "vm", "arch": "x86_64", "kernel": "6.18", "libc": "2.36",
            "online_cpus": [0, 1, 2, 3], "allowed_cpus": [0, 1, 2, 3],
            "numa_nodes": [{"id": 0, "cpus": [0, 1]}, {"id": 1, "cpus": [2, 3]}],
            "futex_hash": {"per_process": true, "slots": 16},
            "rlimit_stack": {"soft": 8388608, "hard": null}, "cgroup_pids": null,
            "threads_max": 192724, "perf_usable": true, "perf_event_paranoid": 2,
            "tracefs": "/sys/kernel/tracing", "root": true, "brand_new_fact": {"x": 1}
        });
        let f = host_facts(&host, &serde_json::json!({"futex_hash": "global"}));
        let get = |k: &str| f.iter().find(|(l, _)| l == k).map(|(_, v)| v.as_str());
        assert_eq!(get("online CPUs"), Some("0-3 (4)"));
        assert_eq!(get("allowed CPUs"), None, "same as online");
        assert_eq!(
            get("NUMA nodes"),
            Some("2 — node0: 0-1 (2); node1: 2-3 (2)")
        );
        assert!(get("futex hash")
            .unwrap()
            .contains("private table of 16 buckets"));
        assert_eq!(get("--futex-hash"), Some("global"));
        assert_eq!(get("RLIMIT_STACK"), Some("8.0 MiB (hard unlimited)"));
        assert_eq!(get("cgroup pids.max"), Some("none"));
        assert!(get("perf")
            .unwrap()
            .starts_with("usable; perf_event_paranoid 2"));
        let agent = host_facts(&serde_json::json!({"cpus": 2}), &Value::Null);
        assert_eq!(agent, [("CPUs".to_string(), "2".to_string())]);
        // Odd types are skipped, not fatal.
        assert!(host_facts(
            &serde_json::json!({"online_cpus": "lots", "kernel": 3}),
            &Value::Null
        )
        .is_empty());
    }
}
