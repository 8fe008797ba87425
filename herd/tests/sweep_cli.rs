//! `herd sweep` end to end on small storms.

use predicates::prelude::*;

mod common;
use common::{herd, SMALL, SMALL_ANY_WAVE};

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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    // The swept flag may not also be given.
    herd()
        .args(["sweep", "--over", "waves=1..3", "--out"])
        .arg(dir.path().join("x"))
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--waves"));
}
