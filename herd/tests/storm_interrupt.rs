//! `herd storm` and Ctrl-C: a run stops between waves, drains what it can,
//! prints its partial result and exits 130, also with `-r N` and with
//! threads that would sleep on.

use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{ctrl_c, ctrl_c_partial_result, spawn_herd, spawn_herd_group, CtrlC, Ready, PATIENCE};

fn metric(r: &Value, name: &str) -> f64 {
    common::metric_opt(r, name)
        .unwrap_or_else(|| panic!("metric {name} missing in {}", r["metrics"]))
}

/// A storm that runs until Ctrl-C (one wave a second).
const UNTIL_CTRL_C: &[&str] = &[
    "storm",
    "--waves",
    "100000000",
    "--per-wave",
    "5",
    "--lag",
    "1",
    "--sleep-ms",
    "1000",
    "--json",
    "--no-perf",
];

#[test]
fn ctrl_c_stops_cleanly_with_partial_results() {
    // Once a storm thread exists: `threads_created > 0` by protocol.
    let r = ctrl_c_partial_result(spawn_herd(UNTIL_CTRL_C), Ready::StormThreads(1));
    let created = r.metric("threads_created").unwrap();
    assert!(created > 0.0);
    assert_eq!(
        r.metric("threads_exited"),
        Some(created),
        "drained after Ctrl-C"
    );
}

/// Ctrl-C while every thread sleeps on (`--cancel none`, a day-long sleep)
/// and `--reap join`: the drain gives up on them after a few seconds, and
/// the run must end then, not when the reaper's joins would (before
/// 2026-12-06 the reaper's `finish` joined the sleeping threads: the run
/// ignored Ctrl-C for as long as they slept).
#[test]
fn ctrl_c_does_not_wait_for_threads_that_sleep_on() {
    use nix::sys::signal::{kill, Signal};
    let mut child = spawn_herd(&[
        "storm",
        "--waves",
        "2",
        "--per-wave",
        "2",
        "--spin",
        "10",
        "--sleep-ms",
        "86400000",
        "--cancel",
        "none",
        "--reap",
        "join",
        "--json",
        "--no-perf",
    ]);
    // All four threads sleep on (it was a 1 s sleep here: on a loaded
    // machine the second wave, or the handler, could come later).
    common::wait_ready(&mut child, Ready::StormThreads(4), CtrlC::Process);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGINT).unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {PATIENCE:?} after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("partial result printed");
    assert_eq!(r["interrupted"], true);
    assert_eq!(metric(&r, "threads_created"), 4.0);
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("did not reach their exit destructor"),
        "{warnings}"
    );
}

/// Ctrl-C at a terminal signals the whole process group: the parent of
/// `-r N` and its child run. The child stops and reports; the parent keeps
/// that partial run, starts no more, prints the set and exits 130.
#[test]
fn ctrl_c_stops_repetitions() {
    let args = [UNTIL_CTRL_C, &["-r", "5"]].concat();
    let out = ctrl_c(
        spawn_herd_group(&args),
        Ready::StormThreads(1),
        CtrlC::Group,
    );
    let set: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = set["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "no run after the interrupted one");
    assert_eq!(runs[0]["interrupted"], true);
    assert!(metric(&runs[0], "threads_created") > 0.0);
}
