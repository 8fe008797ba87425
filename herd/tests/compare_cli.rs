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
    // A value the scenario's parser refuses: exit 2 naming the
    // configuration before anything runs, no journal (it used to run
    // `locked` first and fail on `bogus`'s child).
    let dir = tempfile::tempdir().unwrap();
    herd()
        .current_dir(dir.path())
        .args(["compare", "-r", "1", "--cleanup", "locked,bogus"])
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "configuration `cleanup=bogus`: herd storm refuses its flags",
        ))
        .stderr(predicate::str::contains("invalid value 'bogus'"));
    let kept: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(kept.is_empty(), "nothing ran: {kept:?}");
    // A value only the run refuses (--lag not below --slots): the child's
    // message, then exit 2; the run that finished before it is kept in
    // the journal.
    let lag = |order: &str| {
        let mut c = herd();
        c.current_dir(dir.path())
            .args(["compare", "-r", "1", "--vary"])
            .arg(format!("lag={order}"))
            .args(SMALL)
            .args(["--slots", "20"]);
        c
    };
    lag("2,30")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("must be smaller than --slots"))
        .stderr(predicate::str::contains("1 finished runs are kept in"))
        .stderr(predicate::str::contains("--resume"));
    let kept: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(kept.len(), 1, "one journal");
    // Refused by the first child: no run to resume, no journal left (it
    // used to leave one of no runs, and say to resume it).
    let dir = tempfile::tempdir().unwrap();
    let mut first = lag("30,2");
    first
        .current_dir(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("(no run had finished)"))
        .stderr(predicate::str::contains("--resume").not());
    let kept: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(kept.is_empty(), "{kept:?}");
    herd()
        .args(["compare", "--scenario", "nope", "--cleanup", "a,b"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown scenario"));
}

/// A `--` among the scenario's flags (a second one, or one inside
/// `--config`) is refused before anything runs: exit 2 naming it, no
/// journal left. It used to reach the first child, which refused it, after
/// compare had written a journal of no runs and told the user to resume it.
#[test]
fn a_stray_double_dash_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [&[&str]; 2] = [
        &[
            "--cleanup",
            "locked,exitq",
            "--",
            "--waves",
            "2",
            "--",
            "--spin",
            "0",
        ],
        &[
            "--config",
            "--cleanup locked",
            "--config",
            "-- --cleanup exitq",
        ],
    ];
    for extra in cases {
        herd()
            .current_dir(dir.path())
            .args(["compare", "-r", "1"])
            .args(extra)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "invalid --: found among the scenario's flags",
            ))
            .stderr(predicate::str::contains("finished runs").not());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{extra:?}: nothing written: {left:?}");
    }
}

/// `--metrics` with an empty name is refused before the runs, as `herd
/// diff` refuses it (it used to run the whole comparison and note under
/// the table that the empty pattern matched nothing).
#[test]
fn an_empty_metrics_name_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    herd()
        .current_dir(dir.path())
        .args([
            "compare",
            "-r",
            "1",
            "--cleanup",
            "locked,exitq",
            "--metrics",
            "wall_s,",
        ])
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid --metrics: an empty name"));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing ran: {left:?}");
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

/// `herd compare -r 2 --cleanup locked,exitq --json EXTRA` of a small
/// storm, run in `dir` (where a journal goes).
fn locked_exitq_in(dir: &std::path::Path, extra: &[&str]) -> assert_cmd::Command {
    let mut c = herd();
    c.current_dir(dir)
        .args(["compare", "-r", "2", "--cleanup", "locked,exitq", "--json"])
        .args(extra)
        .args(SMALL);
    c
}

/// A comparison cut short resumes from its journal: only the missing runs
/// are run, and the result has every run. A journal of another plan is
/// refused (exit 2).
#[test]
fn compare_resumes_from_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let j = journal.to_str().unwrap();
    let cmd = |extra: &[&str]| locked_exitq_in(dir.path(), extra);
    let out = cmd(&["--journal", j]).output().unwrap();
    let full: Comparison = success_json(&out);
    assert_eq!(full.complete_runs(0), 2);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(text.lines().count(), 1 + 4, "header and every run");
    // As if the comparison died after round 0: header and 2 runs.
    let cut: Vec<&str> = text.lines().take(3).collect();
    std::fs::write(&journal, cut.join("\n") + "\n").unwrap();
    let out = cmd(&["--resume", j]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("2 finished runs"), "{stderr}");
    let resumed: Comparison = success_json(&out);
    assert_eq!((resumed.complete_runs(0), resumed.complete_runs(1)), (2, 2));
    let again = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(again.lines().count(), 5, "the 2 missing runs appended");
    // Another plan: refused.
    herd()
        .current_dir(dir.path())
        .args([
            "compare",
            "-r",
            "3",
            "--cleanup",
            "locked,exitq",
            "--resume",
            j,
        ])
        .args(SMALL)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("journal of another comparison"));
    // Nothing else was left in the directory (the default journal of a
    // completed comparison is removed).
    let out = herd()
        .current_dir(dir.path())
        .args(["compare", "-r", "1", "--cleanup", "locked,exitq"])
        .args(SMALL)
        .output()
        .unwrap();
    assert!(out.status.success());
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "only j.jsonl");
}

/// A `--resume` whose journal holds runs measured elsewhere (here: on
/// another kernel, as after a reboot) warns and notes it under the table,
/// with how many runs had each kernel: it used to pool them silently.
#[test]
fn a_resume_on_another_kernel_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let j = journal.to_str().unwrap();
    let cmd = |extra: &[&str]| locked_exitq_in(dir.path(), extra);
    let out = cmd(&["--journal", j]).output().unwrap();
    let full: Comparison = success_json(&out);
    assert!(
        !full.notes.iter().any(|n| n.contains("different hosts")),
        "{:?}",
        full.notes
    );
    // Keep round 0, measured "before the reboot" on another kernel.
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut lines: Vec<String> = text.lines().take(3).map(String::from).collect();
    for line in &mut lines[1..] {
        let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
        e["result"]["host"]["kernel"] = "5.10.0-old".into();
        *line = e.to_string();
    }
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let out = cmd(&["--resume", j]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: runs measured on different hosts or herd builds"),
        "{stderr}"
    );
    let resumed: Comparison = success_json(&out);
    let note = resumed
        .notes
        .iter()
        .find(|n| n.contains("different hosts"))
        .unwrap_or_else(|| panic!("{:?}", resumed.notes));
    assert!(
        note.contains("kernel \"5.10.0-old\" (2 runs), \"")
            && note.contains("(2 runs); the statistics pool them"),
        "{note}"
    );
}

/// `--resume` reads its journal with the bound of every input herd reads
/// (1 GiB, `scenario::diff::MAX_INPUT_BYTES`): a larger file is refused
/// with exit 2 naming the flag, the file and the limit, and is left as it
/// was. It used to be read whole into memory and, its header being this
/// plan's, cut back to the header and resumed. The file is sparse: it
/// costs no disk.
#[test]
fn resume_refuses_a_journal_over_1_gib() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.journal.jsonl");
    let configs: Vec<serde_json::Value> = ["locked", "exitq"]
        .iter()
        .map(|s| {
            let mut args = SMALL.to_vec();
            args.extend(["--cleanup", s]);
            serde_json::json!([format!("cleanup={s}"), args])
        })
        .collect();
    let header = serde_json::json!({
        "kind": "herd-compare-journal",
        "scenario": "storm",
        "configs": configs,
        "runs": 1,
        "warmup": 0,
    });
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "{header}").unwrap();
    let size = (1u64 << 30) + 1;
    f.set_len(size).unwrap();
    drop(f);
    let out = herd()
        .current_dir(dir.path())
        .args([
            "compare",
            "-r",
            "1",
            "--cleanup",
            "locked,exitq",
            "--resume",
        ])
        .arg(&path)
        .args(SMALL)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid --resume"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(
        err.contains("larger than 1073741824 bytes (1 GiB)"),
        "{err}"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        size,
        "the journal is left as it was"
    );
}

/// `-r` and `--warmup` are bounded (1..=10000, 0..=10000) with exit 2
/// naming the flag: they used to overflow (panic, exit 101) or allocate
/// the whole results table at once (abort, 134); a plan of more than a
/// million runs is refused too.
#[test]
fn compare_bounds_runs_and_warmup() {
    let dir = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (&["-r", "18446744073709551615"][..], "--runs"),
        (&["--warmup", "18446744073709551615"], "--warmup"),
        (&["-r", "1000000000"], "--runs"),
        (&["-r", "10001"], "--runs"),
        (&["--warmup", "10001"], "--warmup"),
        (&["-r", "0"], "--runs"),
    ] {
        let out = herd()
            .current_dir(dir.path())
            .args(["compare", "--cleanup", "none,locked"])
            .args(args)
            .arg("--")
            .args(SMALL)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // 101 configurations x 20000 rounds: more than a million runs.
    let many: Vec<String> = (1..=101).map(|i| i.to_string()).collect();
    let vary = format!("per-wave={}", many.join(","));
    let out = herd()
        .current_dir(dir.path())
        .args([
            "compare", "-r", "10000", "--warmup", "10000", "--vary", &vary,
        ])
        .args(SMALL_ANY_WAVE)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("too many runs"), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no journal"
    );
}

/// compare's own flags cannot be varied: the children run with
/// HERD_CHILD=1 and ignored `--vary runs=...` (exit 0, the column
/// meaningless); `--vary report=...` made every child write a page.
#[test]
fn compare_refuses_its_own_flags_in_vary() {
    let dir = tempfile::tempdir().unwrap();
    for (vary, flag) in [
        ("runs=1,3", "--runs"),
        ("report=a.html,b.html", "--report"),
        ("r=1,2", "-r"),
        ("--warmup=0,1", "--warmup"),
        ("json=1,2", "--json"),
    ] {
        let out = herd()
            .current_dir(dir.path())
            .args(["compare", "-r", "1", "--metrics", "wall_s"])
            .arg(format!("--vary={vary}"))
            .arg("--")
            .args(SMALL)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{vary}: {err}");
        assert!(err.contains("invalid --vary"), "{vary}: {err}");
        assert!(err.contains(flag), "{vary}: {err}");
        assert!(err.contains("cannot vary"), "{vary}: {err}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no child ran, no report written"
    );
}
