//! `herd report` from the command line: every hostile input gives a
//! clear error with exit 2 or a page that says what is missing, never a
//! panic; `--report` on storm, compare, sweep and diff; the size bound
//! of a 512-CPU, 100,000-thread storm and of a 10,000-CPU host.
//! (The pages in a browser: `report_browser.rs`.)

mod common;
#[path = "common/fake_result.rs"]
mod fake_result;

use std::path::Path;

use common::{herd, SMALL};
use serde_json::Value;

/// `herd report ARGS` in `dir`: (exit code, stdout, stderr).
fn report(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = herd()
        .current_dir(dir)
        .arg("report")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// A page was written, and is the whole document.
fn page(dir: &Path, name: &str) -> String {
    let p = std::fs::read_to_string(dir.join(name)).unwrap();
    assert!(
        p.starts_with("<!DOCTYPE html>") && p.trim_end().ends_with("</html>"),
        "{name}"
    );
    p
}

fn assert_usage_error(code: i32, err: &str, says: &str) {
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(says), "expected `{says}` in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unreadable_inputs_are_usage_errors_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let full = serde_json::to_string_pretty(&fake_result::storm(8, 2, 500)).unwrap();
    write(d, "cut.json", &full[..full.len() * 2 / 3]);
    write(d, "garbage.json", "{\"schema\": 1, \"metrics\": [}");
    write(d, "empty.json", "  \n");
    write(d, "other.json", "{\"name\": \"not herd\"}");
    write(
        d,
        "future.json",
        "{\"kind\": \"herd-flamegraph\", \"schema\": 5}",
    );
    std::fs::write(d.join("binary.json"), [0xff, 0xfe, 0x00, 0x01]).unwrap();
    for (file, says) in [
        ("cut.json", "cut.json: the JSON ends early at line"),
        ("garbage.json", "garbage.json: not JSON"),
        ("empty.json", "empty.json: is empty"),
        ("other.json", "other.json: not a herd result"),
        (
            "future.json",
            "kind `herd-flamegraph`, which this herd does not know",
        ),
        ("binary.json", "binary.json: not text"),
        ("missing.json", "cannot read missing.json"),
    ] {
        let (code, _, err) = report(d, &[file, "-o", "x.html"]);
        assert_usage_error(code, &err, says);
    }
    // A result whose required fields are of another shape (a newer herd
    // that changed them): exit 2, naming versions.
    let mut v: Value = serde_json::from_str(&full).unwrap();
    v["schema"] = 3.into();
    v["metrics"] = serde_json::json!({"wall_s": 1.0});
    write(d, "changed.json", &v.to_string());
    let (code, _, err) = report(d, &["changed.json"]);
    assert_usage_error(code, &err, "a run result this herd cannot read");
    assert!(err.contains("JSON schema 3"), "{err}");
    // An unwritable output.
    write(d, "ok.json", &full);
    let (code, _, err) = report(d, &["ok.json", "-o", "/nonexistent-dir/r.html"]);
    assert_usage_error(code, &err, "cannot write /nonexistent-dir/r.html");
    // --diff takes two.
    let (code, _, err) = report(d, &["--diff", "ok.json"]);
    assert_usage_error(code, &err, "takes two results");
}

#[test]
fn readable_inputs_with_parts_missing_make_a_page_that_says_so() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // A newer herd: unknown fields, a higher schema.
    let mut v = fake_result::storm(8, 2, 500);
    v["schema"] = 42.into();
    v["herd_version"] = "7.1.0".into();
    v["teleport"] = serde_json::json!({"enabled": true});
    v["details"]["histograms"]["exit"]["shape"] = "new".into();
    v["perf"]["counters"][0]["new_field"] = 1.into();
    write(d, "newer.json", &v.to_string());
    let (code, _, err) = report(d, &["newer.json", "-o", "newer.html"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("by herd 7.1.0 with JSON schema 42"), "{err}");
    let p = page(d, "newer.html");
    assert!(
        p.contains("by herd 7.1.0 with JSON schema 42"),
        "said on the page"
    );
    assert!(p.contains("incomplete input"), "the badge says so");
    assert!(
        p.contains("<h2>Per-CPU counters</h2>") && p.contains("sys_futex"),
        "perf still read"
    );
    // An older result: no buckets, no time.
    let mut old = fake_result::storm(4, 1, 200);
    for h in ["create", "start", "exit", "exit_spinning", "exit_own"] {
        old["details"]["histograms"][h]
            .as_object_mut()
            .unwrap()
            .remove("log_buckets");
    }
    old.as_object_mut().unwrap().remove("finished_at");
    write(d, "old.json", &old.to_string());
    let (code, _, err) = report(d, &["old.json", "-o", "old.html"]);
    assert_eq!(code, 0, "{err}");
    let p = page(d, "old.html");
    assert!(
        p.contains("Drawn from five quantiles"),
        "quantiles only, said"
    );
    assert!(p.contains("not recorded (herd before 2026-12-03); the file was written"));
    // A perf section this herd cannot read.
    let mut odd = fake_result::storm(4, 1, 200);
    odd["perf"]["counters"] = "many".into();
    write(d, "odd.json", &odd.to_string());
    let (code, _, err) = report(d, &["odd.json", "-o", "odd.html"]);
    assert_eq!(code, 0, "{err}");
    assert!(page(d, "odd.html").contains("1 run(s) with a perf section this herd cannot read"));
}

#[test]
fn a_compare_journal_with_a_missing_round_names_it() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let mut args = vec![
        "compare",
        "-r",
        "2",
        "--cleanup",
        "locked,exitq",
        "--journal",
        "j.jsonl",
        "--",
    ];
    args.extend_from_slice(SMALL);
    let out = herd().current_dir(d).args(&args).output().unwrap();
    common::assert_success(&out);
    let j = std::fs::read_to_string(d.join("j.jsonl")).unwrap();
    let mut lines: Vec<&str> = j.lines().collect();
    assert_eq!(lines.len(), 1 + 4, "header and 4 runs");
    // Round 2 of the second configuration to run in it is lost, and a
    // crash tore the last line.
    let lost: Value = serde_json::from_str(lines.remove(3)).unwrap();
    let last = lines.pop().unwrap();
    let text = format!("{}\n{}", lines.join("\n"), &last[..40]);
    write(d, "broken.jsonl", &text);
    let (code, _, err) = report(d, &["broken.jsonl", "-o", "j.html"]);
    assert_eq!(code, 0, "{err}");
    let p = page(d, "j.html");
    let label = ["cleanup=locked", "cleanup=exitq"][lost["config"].as_u64().unwrap() as usize];
    assert!(
        p.contains(&format!(
            "2 of the 4 planned runs are not in the journal: round {}",
            lost["round"].as_u64().unwrap() + 1
        )),
        "{err}"
    );
    assert!(p.contains(&format!("of `{label}`")), "{err}");
    assert!(p.contains("is cut short"), "the torn line");
    assert!(p.contains("--resume broken.jsonl"), "how to finish it");
    // The same journal, whole: no gap.
    let (code, _, err) = report(d, &["j.jsonl", "-o", "whole.html"]);
    assert_eq!(code, 0);
    assert!(!err.contains("not in the journal"), "{err}");
    assert!(page(d, "whole.html").contains("every check passed"));
}

#[test]
fn a_512_cpu_storm_page_is_small_and_a_10000_cpu_host_stays_bounded() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(
        d,
        "big.json",
        &fake_result::storm(512, 4, 100_000).to_string(),
    );
    let (code, _, err) = report(d, &["big.json", "-o", "big.html"]);
    assert_eq!(code, 0, "{err}");
    let p = page(d, "big.html");
    assert!(p.len() < 2 << 20, "{} bytes", p.len());
    for n in 0..4 {
        assert!(p.contains(&format!(">node {n}<")), "node {n} labelled");
    }
    assert!(p.contains("<title>cpu511: "), "one cell per CPU");
    assert!(p.contains("busiest cpu170"), "the hot CPU named");
    assert!(
        p.contains("madvise_do_behavior+0x23f"),
        "the contention profile"
    );
    write(
        d,
        "huge.json",
        &fake_result::storm(10_000, 16, 20_000).to_string(),
    );
    let (code, _, err) = report(d, &["huge.json", "-o", "huge.html"]);
    assert_eq!(code, 0, "{err}");
    let p = page(d, "huge.html");
    assert!(p.len() < 2 << 20, "{} bytes", p.len());
    assert!(p.contains("Each cell is 10 consecutive CPUs of one node"));
    assert!(p.contains(">node 15<"));
}

#[test]
fn report_flags_write_pages_beside_the_other_outputs() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let run = |args: &[&str]| {
        let out = herd().current_dir(d).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // storm: the JSON still printed, the page written.
    let json = run(&[&["storm"], SMALL, &["--json", "--report", "storm.html"]].concat());
    let r: Value = serde_json::from_str(&json).unwrap();
    assert!(r["finished_at"].as_str().unwrap().ends_with('Z'));
    assert!(r["details"]["histograms"]["create"]["log_buckets"].is_array());
    let p = page(d, "storm.html");
    assert!(
        p.contains("herd storm --waves 10 --per-wave 20"),
        "the command, without --report"
    );
    assert!(
        !p.contains("storm.html"),
        "--report is not part of what reproduces the run"
    );
    // -r N: children do not write it, the parent writes the set's page.
    run(&[&["storm"], SMALL, &["-r", "2", "--report", "set.html"]].concat());
    assert!(page(d, "set.html").contains("herd storm: 2 runs"));
    run(&[
        &[
            "compare",
            "-r",
            "1",
            "--cleanup",
            "none,locked",
            "--report",
            "cmp.html",
            "--save",
            "cmp.json",
            "--",
        ],
        SMALL,
    ]
    .concat());
    let p = page(d, "cmp.html");
    assert!(p.contains("cleanup=none (base)"), "the baseline named");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("cmp.json")).unwrap()).unwrap();
    assert_eq!(saved["command"][0], "compare", "the command line recorded");
    run(&["diff", "cmp.json", "cmp.json", "--report", "diff.html"]);
    assert!(page(d, "diff.html").contains("herd diff cmp.json cmp.json"));
    run(&[
        &[
            "sweep",
            "--over",
            "per-wave=5,10",
            "-r",
            "1",
            "--out",
            "sw",
            "--report",
            "sweep.html",
            "--",
        ],
        &SMALL[..2],
        &["--no-perf"],
    ]
    .concat());
    assert!(page(d, "sweep.html").contains("herd sweep: storm over --per-wave"));
    // A page that cannot be written fails before the run.
    let out = herd()
        .current_dir(d)
        .args([&["storm"], SMALL, &["--report", "/nonexistent-dir/r.html"]].concat())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write /nonexistent-dir/r.html"));
    // --report among compare's scenario flags is refused.
    let out = herd()
        .current_dir(d)
        .args(
            [
                &["compare", "--cleanup", "none,locked", "--"],
                SMALL,
                &["--report", "x.html"],
            ]
            .concat(),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn several_inputs_stdin_and_stdout() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let storm = fake_result::storm(4, 1, 300).to_string();
    write(d, "a.json", &storm);
    let out = herd()
        .current_dir(d)
        .args(["report", "a.json", "-", "-o", "-"])
        .write_stdin(storm)
        .output()
        .unwrap();
    common::assert_success(&out);
    let p = String::from_utf8(out.stdout).unwrap();
    assert!(p.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        p.matches("<section id=").count(),
        2,
        "one section per input"
    );
    assert!(p.contains("<nav class=\"toc\">"), "a table of contents");
    // --diff A B: the pair, or diff's refusal when they do not compare.
    write(d, "b.json", &fake_result::storm(4, 1, 300).to_string());
    let (code, _, err) = report(d, &["--diff", "a.json", "b.json", "-o", "d.html"]);
    assert_eq!(code, 0, "{err}");
    assert!(page(d, "d.html").contains("herd diff a.json b.json"));
    let mut agent = fake_result::storm(4, 1, 300);
    agent["scenario"] = "agent".into();
    write(d, "c.json", &agent.to_string());
    let (code, _, err) = report(d, &["--diff", "a.json", "c.json"]);
    assert_usage_error(code, &err, "not comparable");
}

/// A compare journal whose header asks for more than compare can plan
/// (runs 1..=10000, warmup 0..=10000, at most 10000 configurations and a
/// million runs) is refused naming the file and the field: it used to
/// overflow (panic), abort allocating the table, or run for ever.
#[test]
fn a_journal_header_beyond_compare_s_limits_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let journal = |name: &str, runs: u64, warmup: u64, configs: usize| {
        let configs: Vec<Value> = (0..configs)
            .map(|i| serde_json::json!([format!("c{i}"), ["--lag", i.to_string()]]))
            .collect();
        let h = serde_json::json!({"kind": "herd-compare-journal", "scenario": "storm",
            "configs": configs, "runs": runs, "warmup": warmup});
        write(d, name, &format!("{h}\n"));
    };
    journal("runs.journal.jsonl", u64::MAX, 1, 2);
    journal("warmup.journal.jsonl", 1, u64::MAX, 2);
    journal("alloc.journal.jsonl", 1_000_000_000, 0, 2);
    journal("zero.journal.jsonl", 0, 0, 2);
    journal("configs.journal.jsonl", 1, 0, 10_001);
    journal("product.journal.jsonl", 10_000, 0, 101);
    for (file, says) in [
        (
            "runs.journal.jsonl",
            "header has `runs` 18446744073709551615",
        ),
        (
            "warmup.journal.jsonl",
            "header has `warmup` 18446744073709551615",
        ),
        ("alloc.journal.jsonl", "header has `runs` 1000000000"),
        ("zero.journal.jsonl", "header has `runs` 0"),
        ("configs.journal.jsonl", "header has 10001 `configs`"),
        ("product.journal.jsonl", "header has 101 `configs`"),
    ] {
        let (code, _, err) = report(d, &[file, "-o", "x.html"]);
        assert_usage_error(code, &err, says);
        assert!(err.contains(file), "{err}");
    }
}

/// An input larger than 1 GiB is refused (exit 2, naming the file)
/// instead of read whole: a regular file before reading, a stream
/// (`/dev/zero`) after 1 GiB.
#[test]
fn an_input_larger_than_the_limit_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    // Sparse: takes no disk.
    let f = std::fs::File::create(d.join("huge.json")).unwrap();
    f.set_len((1 << 30) + 1).unwrap();
    let (code, _, err) = report(d, &["huge.json", "-o", "x.html"]);
    assert_usage_error(code, &err, "huge.json: larger than 1073741824 bytes");
    let (code, _, err) = report(d, &["/dev/zero", "-o", "x.html"]);
    assert_usage_error(code, &err, "/dev/zero: larger than 1073741824 bytes");
}

/// A result herd cannot read says what is wrong: a `schema` that is no
/// schema number, or a document of this herd's schema with a field
/// missing, is not "a newer herd's" document.
#[test]
fn a_bad_schema_or_a_missing_field_is_not_called_newer() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let full = serde_json::to_value(fake_result::storm(8, 2, 500)).unwrap();
    let mut neg = full.clone();
    neg["schema"] = (-1).into();
    write(d, "neg.json", &neg.to_string());
    let mut cut = full.clone();
    cut.as_object_mut().unwrap().remove("config");
    write(d, "noconfig.json", &cut.to_string());
    for (file, says) in [
        ("neg.json", "its `schema` is -1, not a schema number"),
        ("noconfig.json", "missing field `config`"),
        ("noconfig.json", "JSON schema 1, which this herd"),
    ] {
        let (code, _, err) = report(d, &[file, "-o", "x.html"]);
        assert_usage_error(code, &err, says);
        assert!(!err.contains("newer herd"), "{err}");
    }
}

/// A sweep's data.json whose parts do not agree (edited by hand: a row of
/// figures longer or shorter than the swept values, `x` and `values` of
/// different lengths, figures for a configuration the sweep does not
/// have, a point at no value of the sweep) is refused with exit 2 naming
/// what does not agree, and no page is written. It used to be drawn with
/// points silently left out and `NaN` in the table. The document edited
/// is a real one, from a tiny sweep; unedited, its page has no `NaN`.
#[test]
fn an_inconsistent_sweep_is_refused_naming_what_disagrees() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let out = herd()
        .current_dir(d)
        .args(["sweep", "--over", "per-wave=2,4", "-r", "1", "--out", "sw"])
        .args(["--metrics", "wall_s,threads_created", "--"])
        .args(common::TINY_ANY_WAVE)
        .output()
        .unwrap();
    common::assert_success(&out);
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("sw/data.json")).unwrap()).unwrap();
    let (code, _, err) = report(d, &["sw/data.json", "-o", "good.html"]);
    assert_eq!(code, 0, "{err}");
    assert!(!page(d, "good.html").contains("NaN"));
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit, &str); 5] = [
        (
            "long_row.json",
            |v| {
                let row = &mut v["metrics"][0]["summaries"][0];
                let first = row[0].clone();
                row.as_array_mut().unwrap().push(first);
            },
            "metric `wall_s`, configuration `(shared flags only)`: `summaries` has 3 entries for 2 values of --per-wave",
        ),
        (
            "short_row.json",
            |v| {
                v["metrics"][1]["changes"][0].as_array_mut().unwrap().pop();
            },
            "metric `threads_created`, configuration `(shared flags only)`: `changes` has 1 entries",
        ),
        (
            "short_x.json",
            |v| {
                v["x"].as_array_mut().unwrap().pop();
            },
            "it has 1 numbers (`x`) for 2 values of --per-wave",
        ),
        (
            "extra_series.json",
            |v| {
                let row = v["metrics"][0]["summaries"][0].clone();
                v["metrics"][0]["summaries"]
                    .as_array_mut()
                    .unwrap()
                    .push(row);
            },
            "metric `wall_s`: `summaries` has rows for 2 configurations, the sweep has 1",
        ),
        (
            "stray_point.json",
            |v| v["points"][1]["value"] = "3".into(),
            "point 1 is at --per-wave = 3, which is not one of the sweep's values (2, 4)",
        ),
    ];
    for (name, edit, says) in edits {
        let mut v = doc.clone();
        edit(&mut v);
        write(d, name, &v.to_string());
        let (code, _, err) = report(d, &[name, "-o", "bad.html"]);
        assert_usage_error(code, &err, says);
        assert!(err.contains(name), "{err}");
        assert!(!d.join("bad.html").exists(), "{name}: no page");
    }
}

/// The heat maps of a set add up the runs its figures count: one cut
/// short by Ctrl-C (or failing its checks) is left out of them as from
/// the statistics, and the page says so. It was summed in: here the
/// interrupted run's 1000 futex calls per CPU made every cell 1007, the
/// figures beside the map being of the counted run alone.
#[test]
fn heat_maps_leave_out_the_runs_the_statistics_leave_out() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let with_futex = |per_cpu: f64| {
        let mut r = fake_result::storm(4, 1, 200);
        let c = r["perf"]["counters"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["metric"] == "sys_futex")
            .unwrap();
        for v in c["per_cpu"].as_array_mut().unwrap() {
            v["value"] = per_cpu.into();
            v["raw"] = (per_cpu as u64).into();
        }
        c["value"] = (4.0 * per_cpu).into();
        r
    };
    let counted = with_futex(7.0);
    let mut cut = with_futex(1000.0);
    cut["interrupted"] = true.into();
    let set = serde_json::json!({
        "schema": counted["schema"].clone(), "label": "x", "runs": [counted, cut],
    });
    write(d, "set.json", &set.to_string());
    let (code, _, err) = report(d, &["set.json", "-o", "set.html"]);
    assert_eq!(code, 0, "{err}");
    let p = page(d, "set.html");
    assert!(p.contains("<title>cpu0: 7</title>"), "counted run only");
    assert!(
        !p.contains("<title>cpu0: 1007</title>"),
        "the cut run summed in"
    );
    assert!(
        p.contains(
            "1 run(s) interrupted or failing their own checks are left out, as from the \
             statistics."
        ),
        "the page says what it left out"
    );
}
