//! A `--cleanup` knob (`--cleanup-work`, `--cleanup-monitor-us`,
//! `--cleanup-poll-ms`, `--seize-batch`) set away from its default for a
//! strategy that ignores it: a single run (storm, agent, `-r N`) warns on
//! stderr, once, and keeps the note in its result's `warnings`; compare
//! and sweep warn once when no configuration uses it, and keep the note
//! in their document; their children say nothing. These flags used to be
//! accepted and ignored without a word.

mod common;

use common::{herd, success_json, TINY};
use serde_json::Value;

/// Runs `herd ARGS`: (stdout as JSON, stderr), asserting success.
fn run(args: &[&str]) -> (Value, String) {
    let out = herd().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (success_json(&out), err)
}

/// The warning lines of `err` (herd's own and compare's/sweep's).
fn warnings(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.contains("warning:")).collect()
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

#[test]
fn a_storm_warns_and_notes_a_knob_its_strategy_ignores() {
    let note = "--seize-batch 64 has no effect: --cleanup exitq does not use it (only seize does)";
    let mut args = vec![
        "storm",
        "--cleanup",
        "exitq",
        "--seize-batch",
        "64",
        "--json",
    ];
    args.extend(TINY);
    let (r, err) = run(&args);
    assert_eq!(warnings(&err), [format!("herd: warning: {note}")], "{err}");
    assert_eq!(strings(&r["warnings"]), [note]);
    // The strategy that uses it: nothing to say.
    let mut args = vec![
        "storm",
        "--cleanup",
        "seize",
        "--seize-batch",
        "64",
        "--json",
    ];
    args.extend(TINY);
    let (r, err) = run(&args);
    assert!(warnings(&err).is_empty(), "{err}");
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{r}");
    // none uses no knob, locked all but --cleanup-poll-ms, exitq all but
    // --seize-batch.
    for (strategy, noted) in [
        (
            "none",
            &[
                "--cleanup-work 64",
                "--cleanup-monitor-us 0",
                "--cleanup-poll-ms 10",
                "--seize-batch 32",
            ][..],
        ),
        ("locked", &["--cleanup-poll-ms 10", "--seize-batch 32"][..]),
        ("exitq", &["--seize-batch 32"][..]),
    ] {
        let mut args = vec!["storm", "--cleanup", strategy, "--cleanup-work", "64"];
        args.extend(["--cleanup-monitor-us", "0", "--cleanup-poll-ms", "10"]);
        args.extend(["--seize-batch", "32", "--json"]);
        args.extend(TINY);
        let (r, err) = run(&args);
        let got = strings(&r["warnings"]);
        assert_eq!(got.len(), noted.len(), "{strategy}: {got:?}");
        for (g, knob) in got.iter().zip(noted) {
            let want = format!("{knob} has no effect: --cleanup {strategy} does not use it");
            assert!(g.starts_with(&want), "{strategy}: {g}");
        }
        assert_eq!(warnings(&err).len(), noted.len(), "{strategy}: {err}");
    }
    // A knob at its default is never named.
    let mut args = vec!["storm", "--cleanup", "none", "--cleanup-work", "256"];
    args.extend(["--cleanup-poll-ms", "50", "--json"]);
    args.extend(TINY);
    let (r, err) = run(&args);
    assert!(warnings(&err).is_empty(), "{err}");
    assert!(r["warnings"].as_array().unwrap().is_empty(), "{r}");
}

#[test]
fn repetitions_warn_once_and_note_every_run() {
    let mut args = vec!["storm", "--cleanup-work", "64", "-r", "2", "--json"];
    args.extend(TINY);
    let (set, err) = run(&args);
    let note =
        "--cleanup-work 64 has no effect: --cleanup none does not use it (every strategy but none does)";
    assert_eq!(warnings(&err), [format!("herd: warning: {note}")], "{err}");
    let runs = set["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(strings(&r["warnings"]), [note]);
    }
}

#[test]
fn an_agent_warns_and_notes_a_knob_its_strategy_ignores() {
    let (r, err) = run(&[
        "agent",
        "--mode",
        "thread",
        "--waves",
        "1",
        "--jobs",
        "4",
        "--no-perf",
        "--json",
        "--cleanup",
        "locked",
        "--cleanup-poll-ms",
        "5",
    ]);
    let note =
        "--cleanup-poll-ms 5 has no effect: --cleanup locked does not use it (only exitq does)";
    assert_eq!(warnings(&err), [format!("herd: warning: {note}")], "{err}");
    assert!(strings(&r["warnings"]).contains(&note), "{r}");
}

#[test]
fn compare_warns_once_when_no_configuration_uses_a_knob() {
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("cmp.json");
    let compare = |cleanup: &str| {
        let out = herd()
            .current_dir(dir.path())
            .args([
                "compare",
                "-r",
                "2",
                "--cleanup",
                cleanup,
                "--json",
                "--save",
            ])
            .arg(&save)
            .args(["--seize-batch", "64"])
            .args(TINY)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let c: Value = success_json(&out);
        (c, err)
    };
    let note = "--seize-batch 64 has no effect in any configuration: --cleanup locked, exitq does \
                not use it (only seize does)";
    let (c, err) = compare("locked,exitq");
    assert_eq!(
        warnings(&err),
        [format!("herd compare: warning: {note}")],
        "said once, by compare, none of its 4 children: {err}"
    );
    assert!(strings(&c["notes"]).contains(&note), "{}", c["notes"]);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&save).unwrap()).unwrap();
    assert!(strings(&saved["notes"]).contains(&note));
    for set in c["sets"].as_array().unwrap() {
        for r in set["runs"].as_array().unwrap() {
            assert!(r["warnings"].as_array().unwrap().is_empty(), "{r}");
        }
    }
    // seize uses it: locked ignoring it is expected, nothing said.
    let (c, err) = compare("locked,seize");
    assert!(warnings(&err).is_empty(), "{err}");
    assert!(
        !strings(&c["notes"]).iter().any(|n| n.contains("no effect")),
        "{}",
        c["notes"]
    );
}

#[test]
fn sweep_warns_once_when_no_point_uses_the_swept_knob() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sw");
    let out = herd()
        .args(["sweep", "--over", "cleanup-work=16,32", "-r", "1"])
        .args(["--metrics", "wall_s", "--out"])
        .arg(&out_dir)
        .args(TINY)
        .output()
        .unwrap();
    common::assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let note = "--cleanup-work 16, 32 has no effect in any configuration: --cleanup none does not \
                use it (every strategy but none does)";
    assert_eq!(
        warnings(&err),
        [format!("herd sweep: warning: {note}")],
        "{err}"
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("data.json")).unwrap()).unwrap();
    assert!(strings(&doc["notes"]).contains(&note), "{}", doc["notes"]);
}
