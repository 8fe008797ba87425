//! `herd compare` end to end on small storms.

use herd::export::comparison::Comparison;
use predicates::prelude::*;

mod common;
use common::{herd, success_json, SMALL, SMALL_ANY_WAVE};

#[test]
fn compare_cleanup_strategies_json_and_save() {
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("cmp.json");
    let out = herd()
        .args([
            "compare",
            "-r",
            "2",
            "--cleanup",
            "locked,exitq",
            "--json",
            "--save",
        ])
        .arg(&save)
        .args(SMALL)
        .output()
        .unwrap();
    let c: Comparison = success_json(&out);
    assert_eq!(c.labels, ["cleanup=locked", "cleanup=exitq"]);
    assert_eq!(c.varied, ["--cleanup"]);
    assert_eq!(c.sets.len(), 2);
    for (set, strategy) in c.sets.iter().zip(["locked", "exitq"]) {
        assert_eq!(set.runs.len(), 2);
        for r in &set.runs {
            assert_eq!(r.config["cleanup"], strategy);
            assert_eq!(r.metric("cleanup_violations"), Some(0.0));
        }
    }
    let wall = c.row("wall_s").unwrap();
    assert_eq!(wall.cells[0].summary.as_ref().unwrap().n, 2);
    assert!(wall.cells[1].change.is_some());
    // The saved document is the same and `herd diff` reads it back.
    let saved: Comparison = serde_json::from_str(&std::fs::read_to_string(&save).unwrap()).unwrap();
    assert_eq!(saved.labels, c.labels);
    herd()
        .arg("diff")
        .arg(&save)
        .arg(&save)
        .assert()
        .success()
        .stdout(predicate::str::contains("A: cleanup=exitq"));
}

#[test]
fn compare_general_form_table_csv_markdown() {
    let out = herd()
        .args([
            "compare",
            "-r",
            "2",
            "--config",
            "--cleanup locked",
            "--config",
            "--cleanup sync",
            "--",
        ])
        .args(SMALL)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("--cleanup locked (base)"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("wall_s ")), "{text}");
    assert!(text.contains("Welch"), "{text}");
    let out = herd()
        .args(["compare", "-r", "2", "--vary", "per-wave=10,20", "--csv"])
        .args(SMALL_ANY_WAVE)
        .assert()
        .success();
    let csv = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(csv.starts_with("metric,unit,better,config,n,mean"), "{csv}");
    assert!(
        csv.lines()
            .any(|l| l.starts_with("threads_created,threads,neither,per-wave=20,2,200,")),
        "{csv}"
    );
    herd()
        .args([
            "compare",
            "-r",
            "2",
            "--cleanup",
            "none,exitq",
            "--markdown",
            "--metrics",
            "wall_s,cleanup*",
        ])
        .args(SMALL)
        .assert()
        .success()
        .stdout(predicate::str::contains("| `wall_s` | s |"))
        .stdout(predicate::str::contains("`threads_created`").not());
}

#[test]
fn compare_refuses_mistakes_with_exit_2() {
    // One configuration only.
    herd()
        .args(["compare", "--cleanup", "exitq"])
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing to compare"));
    // compare's own flag after the scenario's.
    herd()
        .args([
            "compare",
            "--cleanup",
            "locked,exitq",
            "--waves",
            "5",
            "-r",
            "3",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("must come before"));
    // A value the scenario refuses: the child's message, then exit 2.
    herd()
        .args(["compare", "-r", "1", "--cleanup", "locked,bogus"])
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bogus"));
    herd()
        .args(["compare", "--scenario", "nope", "--cleanup", "a,b"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown scenario"));
}

/// compare, diff and sweep share the declarations of their output flags
/// and of the trailing scenario flags; each keeps its own wording of them.
#[test]
fn shared_flags_keep_each_command_s_help() {
    let help = |cmd: &str| {
        let out = herd().args([cmd, "--help"]).output().unwrap();
        assert!(out.status.success(), "herd {cmd} --help");
        String::from_utf8(out.stdout).unwrap()
    };
    let compare = help("compare");
    for text in [
        "Print the comparison as CSV (one line per metric and configuration)",
        "Also write the JSON document to FILE (input for `herd diff`)",
        "shared by every configuration. They come after compare's flags",
        "[SCENARIO FLAGS]...",
        "Significance level of Welch's t-test",
    ] {
        assert!(
            compare.contains(text),
            "compare --help lacks {text:?}:\n{compare}"
        );
    }
    let diff = help("diff");
    for text in [
        r#"Print JSON (`{"kind":"herd-diff","pairs":[comparison, ...]}`)"#,
        "Print CSV (one line per pair, metric and side)",
        "Print Markdown tables",
        "Also write the JSON document to FILE\n",
        "Significance level of Welch's t-test",
    ] {
        assert!(diff.contains(text), "diff --help lacks {text:?}:\n{diff}");
    }
    assert!(!diff.contains("SCENARIO FLAGS"), "{diff}");
    let sweep = help("sweep");
    assert!(
        sweep.contains("The scenario's own flags, shared by every point\n"),
        "{sweep}"
    );
    assert!(!sweep.contains("--markdown"), "{sweep}");
}
