//! `herd agent --mode thread --cleanup ...`: every job thread runs the
//! strategy's exit work; every cleanup runs once and every entry is freed.

mod common;
use common::{herd, metric_opt as metric, skip, CLEANUP_ZEROS};

#[test]
fn thread_per_job_runs_every_strategy() {
    for strategy in [
        "locked",
        "exitq",
        "sync",
        "crossbeam-epoch",
        "sdd",
        "seize",
        "urcu",
    ] {
        let out = herd()
            .args(["agent", "--mode", "thread", "--waves", "3", "--jobs", "100"])
            .args([
                "--gap-ms",
                "5",
                "--no-perf",
                "--json",
                "--cleanup",
                strategy,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if strategy == "urcu" && out.status.code() == Some(2) && err.contains("needs liburcu") {
            assert!(
                !nix::unistd::geteuid().is_root(),
                "liburcu is not installed (scripts/test.sh installs liburcu-dev): {err}"
            );
            skip(&format!(
                "--cleanup urcu: liburcu is not installed (not root): {err}"
            ));
            continue;
        }
        assert!(out.status.success(), "{strategy}: {err}");
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["config"]["cleanup"], strategy);
        assert_eq!(metric(&r, "cleanups_run"), Some(300.0), "{strategy}");
        for &zero in CLEANUP_ZEROS {
            assert_eq!(metric(&r, zero), Some(0.0), "{strategy}: {zero}");
        }
        assert!(metric(&r, "cleanup_to_free_p99_us").is_some(), "{strategy}");
    }
}

#[test]
fn cleanup_needs_thread_per_job_and_sane_values() {
    for args in [
        &["--mode", "exitq-pool", "--cleanup", "locked"][..],
        &[
            "--mode",
            "thread",
            "--cleanup",
            "seize",
            "--seize-batch",
            "0",
        ][..],
        &["--mode", "thread", "--cleanup-work", "0"][..],
    ] {
        let out = herd().arg("agent").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let flag = args[args.len() - 2];
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
