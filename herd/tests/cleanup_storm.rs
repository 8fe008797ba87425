//! `herd storm --cleanup ...` end to end: every strategy, with every
//! cancellation kind that exits threads differently, cleans every thread
//! exactly once and never lets the registry monitor reach a freed entry.

mod common;
use common::{herd, metric_opt as metric, storm_json};

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

#[test]
fn every_strategy_cleans_every_thread_exactly_once() {
    for strategy in ["locked", "exitq", "sync", "expedited"] {
        for cancel in ["pthread", "flag", "none"] {
            let mut args = SMALL.to_vec();
            args.extend([
                "--cleanup",
                strategy,
                "--cleanup-work",
                "64",
                "--cancel",
                cancel,
            ]);
            let r = storm_json(&args);
            let created = metric(&r, "threads_created").unwrap();
            assert_eq!(created, 500.0, "{args:?}");
            assert_eq!(
                metric(&r, "cleanups_run"),
                Some(created),
                "{args:?}: {}",
                r["details"]["cleanup"]
            );
            for zero in [
                "cleanup_violations",
                "cleanups_missing",
                "cleanups_repeated",
                "cleanup_merge_errors",
            ] {
                assert_eq!(
                    metric(&r, zero),
                    Some(0.0),
                    "{args:?}: {zero}: {}",
                    r["details"]["cleanup"]
                );
            }
            assert!(metric(&r, "monitor_walks").unwrap() > 0.0, "{args:?}");
            assert_eq!(r["config"]["cleanup"], strategy);
            assert_eq!(r["config"]["cleanup_work"], 64);
            assert!(r["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| !w.as_str().unwrap().starts_with("cleanup:")));
            match strategy {
                "exitq" => {
                    // One push at exit, the work in batches: far fewer grace
                    // periods than exits, and no exit hook of storm's own.
                    assert!(
                        metric(&r, "grace_periods_per_exit").unwrap() < 1.0,
                        "{args:?}"
                    );
                    assert_eq!(metric(&r, "exit_hook_p99_us"), None, "{args:?}");
                    assert_eq!(metric(&r, "synchronize_calls"), Some(0.0));
                }
                "sync" | "expedited" => {
                    assert_eq!(metric(&r, "synchronize_calls"), Some(created), "{args:?}");
                    assert!(metric(&r, "exit_hook_p99_us").is_some(), "{args:?}");
                }
                _ => assert!(metric(&r, "exit_hook_p99_us").is_some(), "{args:?}"),
            }
        }
    }
}

#[test]
fn std_threads_and_detached_threads_too() {
    for extra in [
        &["--spawn", "std", "--cancel", "flag"][..],
        &["--reap", "detach"][..],
        &["--reap", "leak"][..],
    ] {
        let mut args = SMALL.to_vec();
        args.extend(extra);
        args.extend(["--cleanup", "exitq"]);
        let r = storm_json(&args);
        assert_eq!(
            metric(&r, "cleanups_run"),
            metric(&r, "threads_created"),
            "{args:?}"
        );
        assert_eq!(metric(&r, "cleanup_violations"), Some(0.0), "{args:?}");
    }
}

#[test]
fn none_adds_nothing_and_bad_sizes_are_refused() {
    let r = storm_json(SMALL);
    assert_eq!(metric(&r, "cleanups_run"), None);
    assert_eq!(r["config"]["cleanup"], "none");
    for (flag, value) in [
        ("--cleanup-work", "0"),
        ("--cleanup-work", "99999999"),
        ("--cleanup", "fast"),
    ] {
        let out = herd().args(["storm", flag, value]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}
