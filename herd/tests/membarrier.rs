//! `herd membarrier` end to end: real calls with reader load, the read-side
//! figures, every output format, repetitions, bad flags (exit 2 naming the
//! flag) and a kernel without membarrier (exit 1, clear message).

use std::time::Duration;

use herd::result::{RunResult, RunSet};
use predicates::prelude::*;

mod common;
use common::{ctrl_c_partial_result, exits_2_naming, herd, spawn_herd, success_json};

const QUICK: &[&str] = &[
    "membarrier",
    "--duration",
    "50ms",
    "--read-rounds",
    "2",
    "--read-slice",
    "1ms",
    "--no-perf",
];

/// Runs `herd membarrier QUICK extra --json`; None (after [`common::skip`])
/// if this kernel has no PRIVATE_EXPEDITED membarrier.
fn run_json(extra: &[&str]) -> Option<RunResult> {
    let out = herd()
        .args(QUICK)
        .args(extra)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("membarrier(2)") {
        common::skip(&format!("this kernel has no usable membarrier: {stderr}"));
        return None;
    }
    assert!(out.status.success(), "herd failed: {stderr}");
    Some(serde_json::from_slice(&out.stdout).expect("stdout is one RunResult"))
}

#[test]
fn measures_calls_latency_and_read_side() {
    let Some(r) = run_json(&["--load", "1"]) else {
        return;
    };
    assert_eq!(r.scenario, "membarrier");
    let m = |n: &str| r.metric(n).unwrap_or_else(|| panic!("metric {n} missing"));
    assert!(m("calls") >= 1.0);
    assert!(m("calls_per_s") > 0.0);
    assert!(m("latency_p50_ns") <= m("latency_p99_ns"));
    assert!(m("latency_p99_ns") <= m("latency_max_ns"));
    assert!(m("read_ns_compiler_fence") > 0.0);
    assert!(m("read_ns_seqcst_fence") > 0.0);
    assert_eq!(m("load_threads"), 1.0);
    // One reader ran: its rate during the calls is its sections (counted
    // 256 at a time) over the calls' time, at most all it ran; the
    // slowdown compares it with the rate before, when the reader ran then
    // (a loaded machine may not schedule it in the short baseline window).
    let readers = r.details["readers"].as_array().unwrap();
    assert_eq!(readers.len(), 1);
    let iterations = readers[0]["iterations"].as_u64().unwrap() as f64;
    assert!(iterations > 0.0, "{readers:?}");
    let (before, during) = (
        m("reader_sections_per_s_before"),
        m("reader_sections_per_s_during"),
    );
    let sections = during * r.details["elapsed_s"].as_f64().unwrap();
    assert!(
        (sections / 256.0 - (sections / 256.0).round()).abs() < 1e-6 && sections <= iterations,
        "{during}/s during the calls: {sections} sections of {iterations}"
    );
    match r.metric("reader_slowdown_pct") {
        Some(s) => assert!(
            before > 0.0 && (s - 100.0 * (1.0 - during / before)).abs() < 1e-6,
            "slowdown {s}% from {before}/s to {during}/s"
        ),
        None => assert_eq!(before, 0.0, "no slowdown although the reader ran before"),
    }
    assert_eq!(r.details["latency"]["count"].as_f64(), Some(m("calls")));
    assert_eq!(
        r.details["read_cost"]["compiler_fence_ns"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(r.args[0], "--load");
}

#[test]
fn idle_load_has_no_reader_figures() {
    let Some(r) = run_json(&["--load", "idle"]) else {
        return;
    };
    assert_eq!(r.metric("load_threads"), Some(0.0));
    assert!(r.metric("reader_slowdown_pct").is_none());
}

#[test]
fn table_csv_and_repetitions() {
    if run_json(&["--load", "idle"]).is_none() {
        return;
    }
    herd()
        .args(QUICK)
        .assert()
        .success()
        .stdout(predicate::str::contains("calls"))
        .stdout(predicate::str::contains("with a SeqCst fence"));
    let out = herd()
        .args(QUICK)
        .args(["--load", "idle", "--csv"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("name,unit,value,better"));
    assert!(text.lines().any(|l| l.starts_with("calls_per_s,/s,")));
    let out = herd()
        .args(QUICK)
        .args(["--load", "idle", "-r", "2", "--json"])
        .output()
        .unwrap();
    let set: RunSet = success_json(&out);
    assert_eq!(set.runs.len(), 2);
    assert!(set.runs.iter().all(|r| r.metric("calls").unwrap() >= 1.0));
    // The summary table over runs.
    herd()
        .args(QUICK)
        .args(["--load", "idle", "-r", "2"])
        .assert()
        .success()
        .stdout(predicate::str::contains("2 runs of herd membarrier"))
        .stdout(predicate::str::contains("%stddev"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (&["--load", "lots"][..], "--load"),
        (&["--duration", "0"][..], "--duration"),
        (&["--duration", "10"][..], "--duration"),
        (&["--duration", "25h"][..], "--duration"),
        (&["--read-rounds", "0"][..], "--read-rounds"),
        // Hours are a unit (humantime): 2h is accepted, and the refusal is
        // about the next flag checked.
        (
            &["--duration", "2h", "--read-rounds", "0"][..],
            "--read-rounds",
        ),
        (&["--read-slice", "1us"][..], "--read-slice"),
        (&["-r", "0"][..], "--runs"),
        (&["--cmd", "fast"][..], "--cmd"),
    ] {
        exits_2_naming("membarrier", args, flag);
    }
}

#[test]
fn kernels_without_membarrier_are_explained() {
    for (fake, says) in [
        ("enosys", "membarrier(2) is not available"),
        (
            "no-private-expedited",
            "does not support MEMBARRIER_CMD_PRIVATE_EXPEDITED",
        ),
        ("register-fails", "REGISTER_PRIVATE_EXPEDITED) failed"),
    ] {
        herd()
            .args(QUICK)
            .args(["--fake-kernel", fake])
            .assert()
            .code(1)
            .stderr(predicate::str::contains(says))
            .stderr(predicate::str::contains("panicked").not());
    }
}

#[test]
fn ctrl_c_prints_the_partial_result_and_exits_130() {
    let child = spawn_herd(&[
        "membarrier",
        "--load",
        "1",
        // Minutes unless interrupted: a Ctrl-C that is not acted on fails
        // `ctrl_c`'s bound of a minute (not only its exit code).
        "--duration",
        "300s",
        "--read-rounds",
        "1",
        "--read-slice",
        "1ms",
        "--no-perf",
        "--json",
    ]);
    ctrl_c_partial_result(child, Duration::from_millis(700));
}

#[test]
fn global_command_runs_without_registration() {
    let Some(r) = run_json(&["--cmd", "global", "--load", "idle"]) else {
        return;
    };
    assert!(r.metric("calls").unwrap() >= 1.0);
    assert_eq!(r.config["cmd"], "global");
}

/// `--load N` past the host's thread limits is refused before any thread
/// is created (exit 3 naming vm.max_map_count) instead of aborting in
/// std's thread start-up (exit 134) once the mappings run out.
#[test]
fn load_past_the_mapping_limit_is_refused_up_front() {
    herd()
        .args([
            "membarrier",
            "--no-perf",
            "--duration",
            "5ms",
            "--read-rounds",
            "1",
            "--read-slice",
            "1ms",
            "--load",
            "65536",
        ])
        .assert()
        .code(3)
        .stderr(
            predicate::str::contains("vm.max_map_count").and(predicate::str::contains("--load")),
        );
}
