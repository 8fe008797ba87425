//! `herd diff` end to end: saved results in, comparison out; incompatible
//! inputs refused with exit 2 unless --force.

use std::path::PathBuf;

use herd::export::comparison::{Comparison, KIND};
use herd::result::{Metric, RunResult, RunSet, SCHEMA_VERSION};
use predicates::prelude::*;
use serde_json::json;

mod common;
use common::{herd, herd_into_closed_pipe};

fn run(
    scenario: &str,
    config: serde_json::Value,
    kernel: &str,
    wall: f64,
    futex: f64,
) -> RunResult {
    let mut r = RunResult::new(
        scenario,
        vec!["--waves".into(), "10".into()],
        config,
        json!({ "kernel": kernel, "cpus": 2 }),
    );
    r.push(Metric::lower("wall_s", "s", wall));
    r.push(Metric::lower("futex_per_exit", "calls", futex));
    r.push(Metric::higher("exits_per_s", "/s", 1000.0 / wall));
    r
}

fn set(label: &str, runs: Vec<RunResult>) -> RunSet {
    RunSet {
        schema: SCHEMA_VERSION,
        label: label.into(),
        runs,
    }
}

fn write(dir: &tempfile::TempDir, name: &str, v: &impl serde::Serialize) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
    p
}

fn before_after(dir: &tempfile::TempDir, after_cfg: serde_json::Value) -> (PathBuf, PathBuf) {
    let cfg = json!({ "waves": 10, "cleanup": "locked" });
    let a = set(
        "x",
        [1.00, 1.02, 0.98, 1.01, 0.99]
            .iter()
            .map(|w| run("storm", cfg.clone(), "6.1", *w, 4.0 + w))
            .collect(),
    );
    let b = set(
        "x",
        [0.80, 0.81, 0.79, 0.80, 0.82]
            .iter()
            .map(|w| run("storm", after_cfg.clone(), "6.18", *w, 4.0 + w))
            .collect(),
    );
    (write(dir, "before.json", &a), write(dir, "after.json", &b))
}

#[test]
fn diff_of_two_runsets_reports_significant_change() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = before_after(&dir, json!({ "waves": 10, "cleanup": "locked" }));
    let out = herd().arg("diff").arg(&a).arg(&b).assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let wall = text.lines().find(|l| l.starts_with("wall_s")).expect(&text);
    assert!(wall.contains("-19.6% ***R better"), "{text}");
    let rate = text
        .lines()
        .find(|l| l.starts_with("exits_per_s"))
        .expect(&text);
    assert!(rate.contains("better"), "{text}");
    assert!(text.contains("hosts differ: kernel"), "{text}");
    assert!(text.contains("A: before.json (base)"), "{text}");

    // JSON: the same numbers, machine-readable.
    let out = herd()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .arg("--json")
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["kind"], "herd-diff");
    let c: Comparison = serde_json::from_value(v["pairs"][0].clone()).unwrap();
    let ch = c.row("wall_s").unwrap().cells[1].change.unwrap();
    assert!(ch.significant && ch.welch.unwrap().p < 0.001);
    assert!((ch.pct.unwrap() + 19.6).abs() < 1e-9, "{ch:?}");

    // CSV and Markdown render the same rows.
    let out = herd()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .arg("--csv")
        .assert()
        .success();
    let csv = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(csv.lines().count(), 1 + 3 * 2, "{csv}");
    herd()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .arg("--markdown")
        .assert()
        .success()
        .stdout(predicate::str::contains("| `wall_s` | s |"));
}

#[test]
fn diff_refuses_different_config_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = before_after(&dir, json!({ "waves": 20, "cleanup": "locked" }));
    herd()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("config waves: 10 vs 20"))
        .stderr(predicate::str::contains("--force"));
    herd()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .arg("--force")
        .assert()
        .success()
        .stdout(predicate::str::contains("forced: config waves: 10 vs 20"));
}

/// Two results of a JSON schema newer than this herd's agree with each
/// other, but this herd does not know what their fields mean: refused
/// (exit 2, naming the schema) unless --force. They used to be diffed
/// silently.
#[test]
fn diff_refuses_a_newer_schema_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = before_after(&dir, json!({ "waves": 10, "cleanup": "locked" }));
    let newer = |p: &PathBuf| {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let n = SCHEMA_VERSION + 1;
        v["schema"] = n.into();
        for r in v["runs"].as_array_mut().unwrap() {
            r["schema"] = n.into();
        }
        std::fs::write(p, v.to_string()).unwrap();
    };
    newer(&a);
    newer(&b);
    let want = format!("JSON schema {}, newer than this herd's", SCHEMA_VERSION + 1);
    herd()
        .arg("diff")
        .args([&a, &b])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(want.as_str()));
    herd()
        .arg("diff")
        .args([&a, &b])
        .arg("--force")
        .assert()
        .success()
        .stdout(predicate::str::contains("note: forced:"));
}

#[test]
fn diff_refuses_different_scenario_and_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = before_after(&dir, json!({}));
    let other = write(
        &dir,
        "gp.json",
        &run(
            "gp",
            json!({ "waves": 10, "cleanup": "locked" }),
            "6.1",
            1.0,
            1.0,
        ),
    );
    herd()
        .arg("diff")
        .arg(&a)
        .arg(&other)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("scenario: storm vs gp"));
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"hello\": 1}").unwrap();
    herd()
        .arg("diff")
        .arg(&a)
        .arg(&junk)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a herd result"));
    herd()
        .arg("diff")
        .arg(&a)
        .arg(dir.path().join("missing.json"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read"));
}

#[test]
fn diff_pairs_comparison_documents_by_label() {
    let dir = tempfile::tempdir().unwrap();
    let doc = |kernel: &str, scale: f64| {
        let sets = ["cleanup=locked", "cleanup=exitq", "cleanup=sync"]
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let cfg = json!({ "waves": 10, "cleanup": l.trim_start_matches("cleanup=") });
                set(
                    l,
                    (0..4)
                        .map(|k| {
                            run(
                                "storm",
                                cfg.clone(),
                                kernel,
                                scale * (1.0 + i as f64) + 0.01 * k as f64,
                                1.0,
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        Comparison::build("storm", vec![], vec!["--cleanup".into()], sets, 0.05, &[])
    };
    let mut b = doc("6.18", 2.0);
    b.sets.pop(); // `sync` only in A
    assert_eq!(b.kind, KIND);
    let pa = write(&dir, "a.json", &doc("6.1", 1.0));
    let pb = write(&dir, "b.json", &b);
    let out = herd()
        .arg("diff")
        .arg(&pa)
        .arg(&pb)
        .arg("--json")
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs[1]["labels"][0], "A: cleanup=exitq");
    assert!(v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "`cleanup=sync` is only in A"));
    // Each pair's notes say its hosts differ once (the second pair's used
    // to carry the first pair's note as well as its own).
    for (i, p) in pairs.iter().enumerate() {
        let hosts = p["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n.as_str().unwrap().starts_with("hosts differ"))
            .count();
        assert_eq!(hosts, 1, "pair {i}: {}", p["notes"]);
    }
    // A compare document varies cleanup across its sets: with --label
    // picking one, the configs match; the varied key is exempt anyway.
    herd()
        .arg("diff")
        .arg(&pa)
        .arg(&pb)
        .args(["--label", "cleanup=exitq"])
        .assert()
        .success()
        .stdout(predicate::str::contains("+99.3% ***R worse"));
    herd()
        .arg("diff")
        .arg(&pa)
        .arg(&pb)
        .args(["--label", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("has no `nope`"));
}

/// `herd diff ... | head -0`: a closed stdout is not a panic, in any format.
#[test]
fn closed_stdout_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = before_after(&dir, json!({ "waves": 10, "cleanup": "locked" }));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for format in [None, Some("--json"), Some("--csv"), Some("--markdown")] {
        let mut args = vec!["diff", a, b];
        args.extend(format);
        let out = herd_into_closed_pipe(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{format:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{format:?}: {err}");
    }
}

/// An input larger than 1 GiB is refused (exit 2, naming the file)
/// instead of read whole (`herd diff /dev/zero x` took GBs of memory).
#[test]
fn diff_refuses_an_input_larger_than_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = before_after(&dir, json!({}));
    let huge = dir.path().join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len((1 << 30) + 1)
        .unwrap();
    herd()
        .arg("diff")
        .arg(&huge)
        .arg(&a)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "huge.json: larger than 1073741824 bytes",
        ));
    herd()
        .arg("diff")
        .arg(&a)
        .arg("/dev/zero")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "/dev/zero: larger than 1073741824 bytes",
        ));
}

/// `--metrics` that selects nothing was an empty table and exit 0 (a typo
/// dropped in silence): exit 2 naming the patterns; an empty name too.
#[test]
fn diff_refuses_metrics_that_select_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = before_after(&dir, json!({ "waves": 10, "cleanup": "locked" }));
    for (list, named) in [
        ("nonexistent", "`nonexistent`"),
        ("wall_s,wal_s", "`wal_s`"),
        ("nope*", "`nope*`"),
        ("", "empty name"),
        (",", "empty name"),
    ] {
        let out = herd()
            .arg("diff")
            .arg(&a)
            .arg(&b)
            .args(["--metrics", list])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--metrics {list:?}: {err}");
        assert!(err.contains("--metrics") && err.contains(named), "{err}");
    }
    herd()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .args(["--metrics", "wall_s,exits*"])
        .assert()
        .success()
        .stdout(predicate::str::contains("wall_s"));
}

/// A file whose own runs come from different hosts (here two kernels in
/// A) is flagged: a warning on stderr and a note in the document and on
/// each pair, naming the file and the values with their run counts. Only
/// the hosts of A against B's were compared; A's mixture was pooled
/// silently.
#[test]
fn a_file_that_mixes_hosts_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = json!({ "waves": 10 });
    let a = set(
        "x",
        vec![
            run("storm", cfg.clone(), "6.1", 1.0, 4.0),
            run("storm", cfg.clone(), "6.1", 1.1, 4.0),
            run("storm", cfg.clone(), "6.18", 0.9, 4.0),
        ],
    );
    let b = set(
        "x",
        (0..3)
            .map(|i| run("storm", cfg.clone(), "6.18", 0.8 + 0.01 * f64::from(i), 4.0))
            .collect(),
    );
    let (pa, pb) = (write(&dir, "mixed.json", &a), write(&dir, "one.json", &b));
    let out = herd()
        .arg("diff")
        .arg(&pa)
        .arg(&pb)
        .arg("--json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let says = "mixes runs measured on different hosts or herd builds: kernel \"6.1\" (2 runs), \
                \"6.18\" (1 runs); its statistics pool them";
    assert!(
        err.contains("herd diff: warning: A (")
            && err.contains("mixed.json) ")
            && err.contains(says),
        "{err}"
    );
    assert!(
        !err.contains("B ("),
        "B's runs all come from one host: {err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for notes in [&v["notes"], &v["pairs"][0]["notes"]] {
        assert!(
            notes
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains(says)),
            "{notes}"
        );
    }
    // Two files of one host each: nothing said.
    let out = herd().arg("diff").arg(&pb).arg(&pb).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("mixes runs"));
}
