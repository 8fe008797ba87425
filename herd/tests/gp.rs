//! `herd gp` end to end: one cell per (load, delay), the delay visibly
//! lengthens grace periods, metric names, outputs, and bad flags (exit 2).

use std::time::Duration;

use herd::result::RunResult;
use predicates::prelude::*;

mod common;
use common::{ctrl_c_partial_result, exits_2_naming, herd, spawn_herd};

fn run_json(args: &[&str]) -> RunResult {
    let out = herd()
        .arg("gp")
        .arg("--no-perf")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "herd gp {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one RunResult")
}

#[test]
fn one_cell_per_load_and_delay() {
    let r = run_json(&[
        "--delay",
        "0,2ms,expedited",
        "--load",
        "idle,busy",
        "--duration",
        "60ms",
        "--updaters",
        "1",
    ]);
    let cells = r.details["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    let labels: Vec<(String, String)> = cells
        .iter()
        .map(|c| {
            (
                c["load"].as_str().unwrap().into(),
                c["delay"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(labels[0], ("idle".into(), "0".into()));
    assert_eq!(labels[5], ("busy".into(), "expedited".into()));
    for c in cells {
        assert!(c["updates"].as_u64().unwrap() >= 1, "{c}");
        assert!(c["grace_periods"].as_u64().unwrap() >= 1, "{c}");
        assert!(c["readers"].as_u64().unwrap() >= 1, "{c}");
    }
    // A normal grace period sleeps the first-check delay before it looks at
    // the readers: with one updater every call waits at least that long.
    let p50 = r.metric("gp_p50_us{load=idle,delay=2ms}").unwrap();
    assert!(p50 >= 2000.0, "p50 {p50}us with a 2ms first-check delay");
    assert!(r.metric("updates_per_gp{load=busy,delay=0}").unwrap() >= 1.0);
    assert!(r.metric("cpu_us_per_gp{load=idle,delay=0}").is_some());
    // Busy readers ran read sections; idle ones slept.
    assert!(cells[3]["reader_sections"].as_u64().unwrap() > 0);
    assert_eq!(cells[0]["reader_sections"].as_u64(), Some(0));
}

#[test]
fn single_cell_uses_plain_metric_names() {
    let r = run_json(&["--delay", "10us", "--load", "2", "--duration", "30ms"]);
    assert!(r.metric("gp_p50_us").is_some());
    assert!(r.metric("gp_side_cpu_pct").is_some());
    assert_eq!(r.details["cells"][0]["readers"].as_u64(), Some(2));
}

#[test]
fn table_and_csv() {
    herd()
        .args([
            "gp",
            "--no-perf",
            "--delay",
            "0,100us",
            "--load",
            "idle",
            "--duration",
            "20ms",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("CPU/GP"))
        .stdout(predicate::str::contains("100us"));
    herd()
        .args([
            "gp",
            "--no-perf",
            "--delay",
            "0",
            "--load",
            "idle",
            "--duration",
            "20ms",
            "--csv",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("\ngp_p99_us,us,"));
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (&["--delay", "2s"][..], "--delay"),
        (&["--delay", "soon"][..], "--delay"),
        (&["--delay", "0,0"][..], "--delay"),
        (&["--load", "idle,idle"][..], "--load"),
        (&["--load", "lots"][..], "--load"),
        (&["--updaters", "0"][..], "--updaters"),
        (&["--duration", "0"][..], "--duration"),
        (&["--section", "1s"][..], "--section"),
    ] {
        exits_2_naming("gp", args, flag);
    }
}

#[test]
fn ctrl_c_prints_the_partial_result_and_exits_130() {
    let child = spawn_herd(&[
        "gp",
        "--delay",
        "0,1ms",
        "--load",
        "idle,busy",
        // Minutes unless interrupted (four cells): a Ctrl-C that is not
        // acted on fails `ctrl_c`'s bound of a minute.
        "--duration",
        "20s",
        "--no-perf",
        "--json",
    ]);
    ctrl_c_partial_result(child, Duration::from_millis(700));
}
