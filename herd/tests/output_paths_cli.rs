//! Output files named on the command line (`--report`, `--save`,
//! `--journal`): a path is only checked before the run, never created or
//! emptied then, so an error (exit 2), a refusal (exit 3) or a failed run
//! leaves an existing file as it was and an input is still read whole; a
//! path that cannot be written is exit 2 naming the flag and the path. A
//! write that fails (sweep's `--out` files too) leaves the old file whole.

mod common;

use std::path::{Path, PathBuf};

use common::{herd, SMALL, TINY};
use herd::result::{Metric, RunResult, RunSet, SCHEMA_VERSION};
use serde_json::json;

/// `herd ARGS` in `dir`: (exit code, stdout, stderr).
fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = herd().current_dir(dir).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file `name` in `dir` holding `precious`.
fn precious(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, "precious").unwrap();
    p
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// A saved `-r 3` set of storm runs, for `herd diff`.
fn saved_set(dir: &Path, name: &str, wall: f64) -> PathBuf {
    let runs = (0..3)
        .map(|i| {
            let mut r = RunResult::new(
                "storm",
                vec!["--waves".into(), "10".into()],
                json!({ "waves": 10, "cleanup": "locked" }),
                json!({ "kernel": "6.1", "cpus": 2 }),
            );
            r.push(Metric::lower("wall_s", "s", wall + 0.01 * f64::from(i)));
            r
        })
        .collect();
    let set = RunSet {
        schema: SCHEMA_VERSION,
        label: "x".into(),
        runs,
    };
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(&set).unwrap()).unwrap();
    p
}

/// Nothing but `names` in `dir` (no temporary file left beside it).
fn only(dir: &Path, names: &[&str]) {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want);
}

#[test]
fn report_file_survives_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let keep = precious(t.path(), "keep.html");
    let (code, _, err) = run(
        t.path(),
        &["storm", "--waves", "0", "--report", "keep.html"],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(read(&keep), "precious", "emptied by the --report check");
    only(t.path(), &["keep.html"]);
}

#[test]
fn report_file_survives_a_resource_refusal() {
    let t = tempfile::tempdir().unwrap();
    let keep = precious(t.path(), "keep.html");
    let args = [
        &["storm"],
        TINY,
        &["--stack-size", "1T", "--report", "keep.html"],
    ]
    .concat();
    let (code, _, err) = run(t.path(), &args);
    assert_eq!(code, 3, "{err}");
    assert_eq!(read(&keep), "precious", "emptied by the --report check");
}

#[test]
fn report_is_written_whole_after_the_run() {
    let t = tempfile::tempdir().unwrap();
    let keep = precious(t.path(), "keep.html");
    let mut args = vec!["storm"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(&["--report", "keep.html"]);
    let (code, _, err) = run(t.path(), &args);
    assert!(code == 0 || code == 4, "{code}: {err}");
    let page = read(&keep);
    assert!(
        page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"),
        "{page:.200}"
    );
    only(t.path(), &["keep.html"]);
}

#[test]
fn unwritable_report_is_exit_2_and_creates_nothing() {
    let t = tempfile::tempdir().unwrap();
    for bad in ["/proc/x", "no-such-dir/r.html", "."] {
        let (code, _, err) = run(t.path(), &["storm", "--waves", "0", "--report", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(
            err.contains("--report") && err.contains(bad),
            "{bad}: {err}"
        );
    }
    only(t.path(), &[]);
}

/// `herd diff x.json y.json --report x.json` read x.json after the
/// `--report` check had emptied it ("not JSON: EOF").
#[test]
fn diff_refuses_an_output_that_is_an_input() {
    let t = tempfile::tempdir().unwrap();
    let x = saved_set(t.path(), "x.json", 1.0);
    saved_set(t.path(), "y.json", 0.8);
    let before = read(&x);
    for flag in ["--report", "--save"] {
        let (code, _, err) = run(
            t.path(),
            &["diff", "x.json", "y.json", "--json", flag, "x.json"],
        );
        // Before 2026-12-06 --report emptied x.json before it was read
        // ("not JSON"), then wrote the page over it.
        assert!(!err.contains("not JSON"), "{err}");
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains(flag) && err.contains("also an input"), "{err}");
        assert_eq!(read(&x), before, "{flag}: the input was changed");
    }
}

/// compare's `--save` check emptied the file before the runs: a compare
/// that then fails (here a missing `--resume` journal) lost it.
#[test]
fn compare_save_survives_a_failed_compare() {
    let t = tempfile::tempdir().unwrap();
    let keep = precious(t.path(), "keep.json");
    let (code, _, err) = run(
        t.path(),
        &[
            "compare",
            "--cleanup",
            "none,locked",
            "-r",
            "1",
            "--save",
            "keep.json",
            "--resume",
            "no-such.journal.jsonl",
            "--",
            "--waves",
            "2",
            "--no-perf",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(read(&keep), "precious", "emptied by the --save check");
    only(t.path(), &["keep.json"]);
}

/// `herd compare --cleanup none,locked -r 1 FLAG PATH -- TINY`.
fn compare_with(dir: &Path, flag: &str, path: &str) -> (i32, String, String) {
    let mut args = vec![
        "compare",
        "--cleanup",
        "none,locked",
        "-r",
        "1",
        flag,
        path,
        "--",
    ];
    args.extend_from_slice(TINY);
    run(dir, &args)
}

#[test]
fn unwritable_save_is_exit_2_naming_it() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("dir")).unwrap();
    for bad in ["/proc/x", "dir/", "dir", "no-such-dir/s.json"] {
        let (code, _, err) = compare_with(t.path(), "--save", bad);
        assert_eq!(code, 2, "compare --save {bad}: {err}");
        assert!(
            err.contains("--save") && err.contains(bad.trim_end_matches('/')),
            "{bad}: {err}"
        );
    }
    saved_set(t.path(), "a.json", 1.0);
    saved_set(t.path(), "b.json", 0.8);
    let (code, _, err) = run(t.path(), &["diff", "a.json", "b.json", "--save", "/proc/x"]);
    assert_eq!(code, 2, "diff --save /proc/x: {err}");
    assert!(err.contains("--save") && err.contains("/proc/x"), "{err}");
}

#[test]
fn unwritable_journal_is_exit_2_naming_it() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("dir")).unwrap();
    for bad in ["/proc/x", "dir", "no-such-dir/j.jsonl"] {
        let (code, _, err) = compare_with(t.path(), "--journal", bad);
        assert_eq!(code, 2, "compare --journal {bad}: {err}");
        assert!(
            err.contains("--journal") && err.contains(bad),
            "{bad}: {err}"
        );
    }
}

/// `herd report y.json -o y.json` wrote the page over its input (exit 0):
/// refused, exit 2 naming `--output`, the input untouched.
#[test]
fn report_refuses_an_output_that_is_an_input() {
    let t = tempfile::tempdir().unwrap();
    let x = saved_set(t.path(), "x.json", 1.0);
    let before = read(&x);
    for out in ["x.json", "./x.json"] {
        let (code, _, err) = run(t.path(), &["report", "x.json", "-o", out]);
        assert_eq!(code, 2, "{out}: {err}");
        assert!(
            err.contains("--output") && err.contains("also an input"),
            "{err}"
        );
        assert_eq!(read(&x), before, "{out}: the input was changed");
    }
    only(t.path(), &["x.json"]);
    let (code, _, err) = run(t.path(), &["report", "x.json", "-o", "x.html"]);
    assert_eq!(code, 0, "{err}");
    only(t.path(), &["x.html", "x.json"]);
}

/// sweep's `--out` files (data.json, data.csv, the charts) are written as
/// `--save` and `--report` are, to a temporary file renamed over the old
/// one: a write that fails (here past the file-size limit, RLIMIT_FSIZE
/// at 4 KiB, SIGXFSZ ignored, so the write returns EFBIG) leaves the
/// previous sweep's files whole and no temporary file behind. They were
/// written in place: data.json was left cut at 4 KiB. The new
/// measurements are not lost: the spare file in $TMPDIR is past the limit
/// too, so they are printed on stdout, and the error says so (they were
/// lost).
#[test]
fn sweep_files_survive_a_failed_write() {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sw");
    std::fs::create_dir(&out_dir).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let files = ["data.json", "data.csv", "wall_s.svg"];
    for f in files {
        precious(&out_dir, f);
    }
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("herd"));
    cmd.args(["sweep", "--over", "per-wave=2,4", "-r", "1"])
        .args(["--metrics", "wall_s", "--out"])
        .arg(&out_dir)
        .arg("--")
        .args(common::TINY_ANY_WAVE)
        .env("TMPDIR", &tmp);
    // SAFETY: signal and setrlimit are async-signal-safe; the closure
    // touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: 4096,
                rlim_max: 4096,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write") && err.contains("data.json"),
        "{err}"
    );
    for f in files {
        let now = read(&out_dir.join(f));
        assert!(
            now == "precious",
            "{f} changed ({} bytes): {err}",
            now.len()
        );
    }
    only(&out_dir, &files);
    assert!(
        err.contains("printed on standard output") && err.contains("File too large"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not the sweep document ({e}): {err}"));
    assert_eq!(doc["kind"], "herd-sweep");
    assert_eq!(doc["points"].as_array().unwrap().len(), 2, "{doc}");
    only(&tmp, &[]);
}

/// A sweep whose data.json cannot be replaced (here a directory stands in
/// its way, as a read-only or full `--out` would) saves the measurements
/// in a new file in $TMPDIR, names it and exits 1; they were lost.
#[test]
fn sweep_measurements_go_to_a_spare_file_when_out_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sw");
    std::fs::create_dir_all(out_dir.join("data.json").join("x")).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = herd()
        .args(["sweep", "--over", "per-wave=2,4", "-r", "1"])
        .args(["--metrics", "wall_s", "--out"])
        .arg(&out_dir)
        .arg("--")
        .args(common::TINY_ANY_WAVE)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let spare: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(spare.len(), 1, "no spare file in $TMPDIR: {err}");
    let spare = &spare[0];
    assert!(
        err.contains("cannot write")
            && err.contains(&out_dir.join("data.json").display().to_string())
            && err.contains(&spare.display().to_string()),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_str(&read(spare)).unwrap();
    assert_eq!(doc["kind"], "herd-sweep");
    assert_eq!(doc["points"].as_array().unwrap().len(), 2, "{doc}");
    assert!(out_dir.join("data.json").join("x").is_dir());
}
