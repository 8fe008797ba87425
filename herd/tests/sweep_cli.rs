//! `herd sweep` end to end on small storms.

use predicates::prelude::*;

mod common;

use common::{ctrl_c, herd, spawn_herd_group, CtrlC, Ready, SMALL, SMALL_ANY_WAVE};

#[test]
fn sweep_writes_charts_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sw");
    let out = herd()
        .args([
            "sweep",
            "--over",
            "per-wave=5..20",
            "--steps",
            "2",
            "-r",
            "2",
            "--cleanup",
            "locked,exitq",
        ])
        .args(["--metrics", "wall_s,threads_created,cleanups_run", "--out"])
        .arg(&out_dir)
        .args(SMALL_ANY_WAVE)
        .output()
        .unwrap();
    common::assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("threads_created (threads)"), "{text}");
    for f in [
        "data.json",
        "data.csv",
        "wall_s.svg",
        "threads_created.svg",
        "cleanups_run.svg",
    ] {
        assert!(out_dir.join(f).exists(), "{f} missing: {text}");
    }
    let svg = std::fs::read_to_string(out_dir.join("threads_created.svg")).unwrap();
    assert!(svg.contains("cleanup=locked") && svg.contains("cleanup=exitq"));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("data.json")).unwrap()).unwrap();
    assert_eq!(doc["values"], serde_json::json!(["5", "20"]));
    // 2 configurations x 2 values, 2 runs each.
    assert_eq!(doc["points"].as_array().unwrap().len(), 4);
    let created = &doc["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "threads_created")
        .unwrap()["summaries"];
    assert_eq!(created[1][1]["mean"], 200.0);
    assert_eq!(created[0][0]["mean"], 50.0);
    // Each point ran its configuration's flags plus the swept value.
    for p in doc["points"].as_array().unwrap() {
        let cleanup = ["locked", "exitq"][p["series"].as_u64().unwrap() as usize];
        let value = p["value"].as_str().unwrap();
        assert_eq!(
            p["set"]["label"],
            format!("cleanup={cleanup} per-wave={value}")
        );
        let runs = p["set"]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{}", p["set"]["label"]);
        for r in runs {
            let a: Vec<&str> = r["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert!(
                a.ends_with(&["--cleanup", cleanup, "--per-wave", value]),
                "{a:?}"
            );
        }
    }
    // The swept flag may not also be given.
    herd()
        .args(["sweep", "--over", "waves=1..3", "--out"])
        .arg(dir.path().join("x"))
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--waves"));
}

/// Ctrl-C at a terminal (to the process group) stops the sweep after the
/// running child: exit 130, the partial result kept and written, with a note.
#[test]
fn ctrl_c_stops_the_sweep_and_keeps_what_ran() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sw");
    let out = ctrl_c(
        spawn_herd_group(&[
            "sweep",
            "--over",
            "per-wave=5,10",
            "-r",
            "3",
            "--out",
            out_dir.to_str().unwrap(),
            "--",
            "--waves",
            "100000000",
            "--lag",
            "1",
            "--sleep-ms",
            "1000",
            "--no-perf",
        ]),
        // The first child run has a storm thread: its partial run is kept.
        Ready::StormThreads(1),
        CtrlC::Group,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("note: interrupted by Ctrl-C"), "{text}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("data.json")).unwrap()).unwrap();
    let runs: Vec<&Vec<serde_json::Value>> = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["set"]["runs"].as_array().unwrap())
        .collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].len(), 1, "the interrupted child's run is kept");
    assert_eq!(runs[0][0]["interrupted"], true);
    assert!(runs[1].is_empty(), "no child after the interrupted one");
}

/// sweep's `-r` is bounded (1..=10000) with exit 2 naming the flag (it
/// used to overflow, exit 101, or abort allocating), its own flags cannot
/// be swept or varied (the children ignored `--over runs=...`), and a
/// sweep of too many points is refused before anything runs.
#[test]
fn sweep_bounds_runs_and_refuses_its_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sw");
    let out_dir = out_dir.to_str().unwrap();
    for (args, says) in [
        (
            &["--over", "per-wave=1,2", "-r", "18446744073709551615"][..],
            "--runs",
        ),
        (&["--over", "per-wave=1,2", "-r", "1000000000"], "--runs"),
        (&["--over", "per-wave=1,2", "-r", "10001"], "--runs"),
        (&["--over", "runs=1,2", "-r", "1"], "invalid --over: --runs"),
        (&["--over", "r=1,2", "-r", "1"], "invalid --over: -r"),
        (
            &["--over", "per-wave=1,2", "-r", "1", "--vary", "runs=1,2"],
            "invalid --vary: --runs",
        ),
        // A value the scenario's parser refuses: before anything runs
        // (it used to run `locked`'s points, then fail on `bogus`'s child).
        (
            &[
                "--over",
                "per-wave=1,2",
                "-r",
                "1",
                "--cleanup",
                "locked,bogus",
            ],
            "configuration `cleanup=bogus per-wave=1`: herd storm refuses its flags",
        ),
        // 2 x 10000 points: more configurations than a sweep runs.
        (
            &[
                "--over",
                "per-wave=1..10000:1",
                "-r",
                "1",
                "--cleanup",
                "none,locked",
            ],
            "invalid --over",
        ),
    ] {
        let out = herd()
            .arg("sweep")
            .args(args)
            .args(["--out", out_dir])
            .args(SMALL_ANY_WAVE)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!std::path::Path::new(out_dir).exists(), "nothing written");
}
