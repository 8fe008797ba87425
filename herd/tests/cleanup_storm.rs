//! `herd storm --cleanup ...` end to end: every strategy, with every
//! cancellation kind that exits threads differently, and every spawn and
//! reap mode, cleans every thread exactly once, frees every entry and
//! never lets the registry monitor reach a freed entry.

mod common;
use common::{herd, metric_opt as metric, skip, CLEANUP_ZEROS};

const SMALL: &[&str] = &[
    "--waves",
    "20",
    "--per-wave",
    "25",
    "--spin",
    "1000",
    "--sleep-ms",
    "20",
];

/// The strategies that go through a reclamation library.
const LIBRARIES: &[&str] = &["crossbeam-epoch", "sdd", "seize", "urcu"];

/// A message for a missing liburcu: as root (the test command, which
/// installs liburcu-dev first) a failure, otherwise a loud skip.
fn liburcu_missing(stderr: &str) -> bool {
    if !stderr.contains("needs liburcu") {
        return false;
    }
    assert!(
        !nix::unistd::geteuid().is_root(),
        "liburcu is not installed (scripts/test.sh installs liburcu-dev): {stderr}"
    );
    skip(&format!(
        "--cleanup urcu: liburcu is not installed (not root): {stderr}"
    ));
    true
}

/// `herd storm SMALL ARGS --json --no-perf`, or None when the strategy's
/// library is missing on a non-root run (see [`liburcu_missing`]).
fn storm(args: &[&str]) -> Option<serde_json::Value> {
    let out = herd()
        .arg("storm")
        .args(SMALL)
        .args(args)
        .args(["--json", "--no-perf"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && liburcu_missing(&err) {
        return None;
    }
    assert!(
        out.status.success(),
        "herd storm {args:?}: {}\n{err}",
        out.status
    );
    Some(serde_json::from_slice(&out.stdout).expect("valid JSON"))
}

/// The checks every strategy must pass, whatever the spawn mode.
fn assert_clean(r: &serde_json::Value, args: &[&str]) {
    let created = metric(r, "threads_created").unwrap();
    assert_eq!(created, 500.0, "{args:?}");
    assert_eq!(
        metric(r, "cleanups_run"),
        Some(created),
        "{args:?}: {}",
        r["details"]["cleanup"]
    );
    for &zero in CLEANUP_ZEROS {
        assert_eq!(
            metric(r, zero),
            Some(0.0),
            "{args:?}: {zero}: {}",
            r["details"]["cleanup"]
        );
    }
    assert!(metric(r, "monitor_walks").unwrap() > 0.0, "{args:?}");
    assert!(r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| !w.as_str().unwrap().starts_with("cleanup:")));
    // The timeline: every thread's entry freed some time after its exit,
    // and something held meanwhile.
    let p50 = metric(r, "cleanup_to_free_p50_us").unwrap();
    let max = metric(r, "cleanup_to_free_max_us").unwrap();
    assert!(p50 > 0.0 && p50 <= max, "{args:?}: {p50} {max}");
    assert!(
        metric(r, "cleanup_held_peak_kib").unwrap() > 0.0,
        "{args:?}"
    );
    assert!(
        metric(r, "cleanup_pending_peak").unwrap() >= 1.0,
        "{args:?}"
    );
}

#[test]
fn every_strategy_cleans_every_thread_exactly_once() {
    let all = ["locked", "exitq", "sync", "expedited"]
        .iter()
        .chain(LIBRARIES);
    for &strategy in all {
        for cancel in ["pthread", "flag", "none"] {
            let args = [
                "--cleanup",
                strategy,
                "--cleanup-work",
                "64",
                "--cancel",
                cancel,
            ];
            let Some(r) = storm(&args) else { continue };
            assert_clean(&r, &args);
            let created = metric(&r, "threads_created").unwrap();
            assert_eq!(r["config"]["cleanup"], strategy);
            assert_eq!(r["config"]["cleanup_work"], 64);
            match strategy {
                "exitq" => {
                    // One push at exit, the work in batches: far fewer grace
                    // periods than exits, and no exit hook of storm's own.
                    assert!(
                        metric(&r, "grace_periods_per_exit").unwrap() < 1.0,
                        "{args:?}"
                    );
                    assert_eq!(metric(&r, "exit_hook_p99_us"), None, "{args:?}");
                    assert_eq!(metric(&r, "cleanup_exit_work_p99_us"), None);
                    assert_eq!(metric(&r, "synchronize_calls"), Some(0.0));
                }
                "sync" | "expedited" => {
                    assert_eq!(metric(&r, "synchronize_calls"), Some(created), "{args:?}");
                    assert!(metric(&r, "exit_hook_p99_us").is_some(), "{args:?}");
                }
                "locked" => assert!(metric(&r, "exit_hook_p99_us").is_some(), "{args:?}"),
                _ => {
                    // The exit work runs in herd's thread-local destructor,
                    // not in storm's exit hook; herd times it itself, and
                    // says how it drove the library at the end.
                    assert_eq!(metric(&r, "exit_hook_p99_us"), None, "{args:?}");
                    assert!(metric(&r, "cleanup_exit_work_p99_us").is_some());
                    let drive = &r["details"]["cleanup"]["drive"];
                    assert!(drive["how"].as_str().is_some(), "{args:?}: {drive}");
                }
            }
        }
    }
}

#[test]
fn std_threads_detached_leaked_and_pooled_stacks_too() {
    for extra in [
        &["--spawn", "std", "--cancel", "flag"][..],
        &["--spawn", "std", "--cancel", "none"][..],
        &["--reap", "detach"][..],
        &["--reap", "leak"][..],
        &["--stacks", "recycled"][..],
    ] {
        for &strategy in ["exitq"].iter().chain(LIBRARIES) {
            let mut args = extra.to_vec();
            args.extend(["--cleanup", strategy]);
            if let Some(r) = storm(&args) {
                assert_clean(&r, &args);
            }
        }
    }
}

#[test]
fn none_adds_nothing_and_bad_values_are_refused() {
    let r = storm(&[]).unwrap();
    assert_eq!(metric(&r, "cleanups_run"), None);
    assert_eq!(r["config"]["cleanup"], "none");
    for (flag, value) in [
        ("--cleanup-work", "0"),
        ("--cleanup-work", "99999999"),
        ("--cleanup", "fast"),
        ("--cleanup", "crossbeam"),
        ("--seize-batch", "0"),
        ("--seize-batch", "65537"),
        ("--seize-batch", "-3"),
        ("--seize-batch", "many"),
    ] {
        // `--flag=value`, so that `-3` is a value and not a flag.
        let out = herd()
            .args(["storm", &format!("{flag}={value}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

#[test]
fn urcu_without_liburcu_is_refused_naming_the_packages() {
    // HERD_LIBURCU replaces the soname herd loads: a file that does not
    // exist stands for a machine without liburcu.
    for cmd in [
        &["storm", "--cleanup", "urcu", "--waves", "1"][..],
        &["storm", "--cleanup", "urcu", "--waves", "1", "-r", "2"][..],
        &[
            "agent",
            "--mode",
            "thread",
            "--cleanup",
            "urcu",
            "--waves",
            "1",
        ][..],
    ] {
        let out = herd()
            .env("HERD_LIBURCU", "/nonexistent/liburcu-memb.so.8")
            .args(cmd)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        for needle in ["--cleanup", "liburcu8", "userspace-rcu", "/nonexistent"] {
            assert!(err.contains(needle), "{cmd:?}: no `{needle}` in: {err}");
        }
    }
}

#[test]
fn seize_batch_is_used_and_everything_is_freed_by_the_end() {
    // A batch of 1: every retire tries to reclaim at once, so nothing is
    // left for the end; a huge batch never fills during the run, so the
    // end reclaims everything (seize's reclaim_all), and still every entry
    // is freed exactly once.
    let small = storm(&["--cleanup", "seize", "--seize-batch", "1"]).unwrap();
    let big = storm(&["--cleanup", "seize", "--seize-batch", "65536"]).unwrap();
    assert_clean(&small, &["--seize-batch", "1"]);
    assert_clean(&big, &["--seize-batch", "65536"]);
    assert_eq!(big["config"]["seize_batch"], 65536);
    assert_eq!(metric(&big, "cleanup_frees_at_finish"), Some(500.0));
    assert!(metric(&small, "cleanup_frees_at_finish").unwrap() < 500.0);
}
