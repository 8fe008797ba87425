//! `herd agent` from the command line: validation, every mode runs every
//! job, the figures are present and consistent.

use predicates::str::contains;

mod common;
use common::{exits_2_naming, herd, success_json};

#[test]
fn bad_flags_exit_2_and_name_the_flag() {
    for (args, flag) in [
        (vec!["--waves", "0"], "--waves"),
        (vec!["--jobs", "0"], "--jobs"),
        (vec!["--job-us", "5000000"], "--job-us"),
        (vec!["--submitters", "0"], "--submitters"),
        (vec!["--jobs", "2", "--submitters", "3"], "--submitters"),
        (vec!["--max-workers", "0"], "--max-workers"),
        (
            vec!["--min-workers", "9", "--max-workers", "4"],
            "--min-workers",
        ),
        (vec!["--keep-alive-ms", "0"], "--keep-alive-ms"),
        (vec!["--retire-batch", "0"], "--retire-batch"),
        (vec!["--runs", "0"], "--runs"),
        (vec!["--gap-ms", "x"], "--gap-ms"),
        // A flag of another mode is refused, not ignored.
        (
            vec!["--mode", "mutex-pool", "--min-workers", "5"],
            "--min-workers",
        ),
        (
            vec!["--mode", "rayon", "--min-workers", "5"],
            "--min-workers",
        ),
        (vec!["--mode", "rayon", "--jitter-ms", "3"], "--jitter-ms"),
        (
            vec!["--mode", "rayon", "--keep-alive-ms", "9"],
            "--keep-alive-ms",
        ),
        (
            vec!["--mode", "thread", "--max-workers", "7"],
            "--max-workers",
        ),
        (
            vec!["--mode", "thread", "--retire-batch", "9"],
            "--retire-batch",
        ),
        (vec!["--mode", "thread", "--spin-us", "7"], "--spin-us"),
        (
            vec!["--mode", "tokio-blocking", "--exit-poll-ms", "5"],
            "--exit-poll-ms",
        ),
        // tokio's pool can neither report nor survive what --force lets in.
        (vec!["--mode", "tokio-blocking", "--force"], "--force"),
    ] {
        exits_2_naming("agent", &args, flag);
    }
    herd()
        .args(["agent", "--mode", "fork"])
        .assert()
        .code(2)
        .stderr(contains("--mode"));
}

/// `herd agent --mode MODE` on 3 waves of 200 jobs, 8 workers at most,
/// keep-alive 10 ms unless `extra` gives one.
fn run_json(mode: &str, extra: &[&str]) -> serde_json::Value {
    // The pool flags only where the mode uses them (others are refused).
    let keep_alive = if extra.iter().any(|a| a.starts_with("--keep-alive-ms"))
        || matches!(mode, "thread" | "rayon")
    {
        &[][..]
    } else {
        &["--keep-alive-ms=10"][..]
    };
    let max_workers = if mode == "thread" {
        &[][..]
    } else {
        &["--max-workers=8"][..]
    };
    let out = herd()
        .args([
            "agent",
            "--mode",
            mode,
            "--waves=3",
            "--jobs=200",
            "--job-us=5",
            "--gap-ms=40",
            "--json",
        ])
        .args(max_workers)
        .args(keep_alive)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "herd agent --mode {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn metric(r: &serde_json::Value, name: &str) -> f64 {
    r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("metric {name} missing: {r}"))["value"]
        .as_f64()
        .unwrap()
}

#[test]
fn every_mode_runs_every_job_and_reports_churn() {
    for mode in [
        "thread",
        "mutex-pool",
        "exitq-pool",
        "tokio-blocking",
        "rayon",
    ] {
        let r = run_json(mode, &[]);
        assert_eq!(r["scenario"], "agent");
        assert_eq!(r["config"]["mode"], mode);
        assert_eq!(r["interrupted"], false);
        // The waves' busy time lies within the wall time; the rates and
        // per-job figures are of the 3 x 200 jobs.
        let (wall, busy) = (metric(&r, "wall_s"), metric(&r, "busy_s"));
        assert!(
            busy > 0.0 && busy <= wall,
            "{mode}: busy {busy} s, wall {wall} s"
        );
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        let rate = metric(&r, "jobs_per_s");
        assert!(close(rate * busy, 600.0), "{mode}: {rate}/s x {busy} s");
        let (sys_job, sys) = (metric(&r, "sys_us_per_job"), metric(&r, "sys_s"));
        assert!(
            close(sys_job * 600.0, sys * 1e6),
            "{mode}: {sys_job} us x 600 vs {sys} s"
        );
        assert!(metric(&r, "latency_p50_us") <= metric(&r, "latency_p99_us"));
        // A job completes after it starts (quantiles of 3 significant digits).
        for q in ["p50", "p99"] {
            let (start, end) = (
                metric(&r, &format!("latency_{q}_us")),
                metric(&r, &format!("completion_{q}_us")),
            );
            assert!(end >= start * 0.999 - 1.0, "{mode}: {q} {start} > {end}");
        }
        let spawned = metric(&r, "threads_spawned");
        let exits = metric(&r, "thread_exits");
        match mode {
            // One thread per job.
            "thread" => assert_eq!(spawned, 600.0),
            // A fixed pool of --max-workers, started once, never retiring.
            "rayon" => {
                assert_eq!(spawned, 8.0);
                assert_eq!(exits, 0.0);
            }
            // The pools grow in each burst (at most 8 workers at a time) and
            // shrink in each 40 ms gap (keep-alive 10 ms, jitter 5 ms). How
            // many threads they start, and how many time out in a gap
            // (`thread_exits`: idle retirements, not the shutdown), depends
            // on when the scheduler runs them, so only what the pools
            // guarantee is checked here: at least one thread, at most one
            // per job, no more time-outs than threads. That they reuse
            // threads is `pools_reuse_their_workers_when_none_times_out`;
            // that idle workers do retire, exitq's tests/pool.rs.
            _ => {
                assert!((1.0..=600.0).contains(&spawned), "{mode}: {spawned}");
                assert!(exits <= spawned, "{mode}: {exits} exits of {spawned}");
            }
        }
        // Per retired worker: the measured phase's totals over its
        // retirements; absent without retirements (or without perf).
        let has = |n: &str| {
            r["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == n)
        };
        for (total, per) in [
            ("futex_calls", "futex_per_exit"),
            ("lock_contentions", "contentions_per_exit"),
        ] {
            if has(total) && exits > 0.0 {
                let (t, p) = (metric(&r, total), metric(&r, per));
                assert!((p * exits - t).abs() <= 1e-9 * t.max(1.0), "{mode}: {per}");
            } else {
                assert!(!has(per), "{mode}: {per} without retirements or perf");
            }
        }
    }
}

/// With a keep-alive far longer than the run no worker can time out, so
/// the elastic pools never hold more than `--max-workers` threads and never
/// replace one: at most 8 spawns for 600 jobs and no idle retirement,
/// whatever the scheduler does.
#[test]
fn pools_reuse_their_workers_when_none_times_out() {
    for mode in ["mutex-pool", "exitq-pool", "tokio-blocking"] {
        let r = run_json(mode, &["--keep-alive-ms=600000"]);
        let (spawned, exits) = (metric(&r, "threads_spawned"), metric(&r, "thread_exits"));
        assert!(
            (1.0..=8.0).contains(&spawned),
            "{mode}: {spawned} threads for 600 jobs with --max-workers 8"
        );
        assert_eq!(exits, 0.0, "{mode}: a worker timed out within 10 minutes");
    }
}

#[test]
fn repetitions_run_in_child_processes_and_print_a_runset() {
    let out = herd()
        .args([
            "agent",
            "--waves=2",
            "--jobs=50",
            "--job-us=0",
            "--gap-ms=5",
            "-r",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    let set: serde_json::Value = success_json(&out);
    assert_eq!(set["runs"].as_array().unwrap().len(), 2);

    let out = herd()
        .args([
            "agent",
            "--waves=2",
            "--jobs=50",
            "--job-us=0",
            "--gap-ms=5",
            "--csv",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("jobs_per_s,/s,")),
        "{text}"
    );
}

/// System-scope counters watch the CPUs the agent may use, by number:
/// under `taskset -c 1` that is CPU 1, not CPU 0 (which `0..count` gave).
#[test]
fn system_scope_counts_on_the_usable_cpus() {
    if !common::perf_usable() {
        return;
    }
    let online = herd::host::online_cpus();
    let Some(&last) = online.last().filter(|_| online.len() > 1) else {
        common::skip("needs 2 online CPUs to pin to one that is not CPU 0");
        return;
    };
    if std::process::Command::new("taskset")
        .arg("-V")
        .output()
        .is_err()
    {
        common::skip("taskset (util-linux) is not installed");
        return;
    }
    let exe = assert_cmd::cargo::cargo_bin("herd");
    let out = std::process::Command::new("taskset")
        .arg("-c")
        .arg(last.to_string())
        .arg(exe)
        .args([
            "agent",
            "--mode",
            "thread",
            "--waves",
            "1",
            "--jobs",
            "4",
            "--gap-ms",
            "1",
            "--perf-scope",
            "system",
            "--json",
        ])
        .output()
        .unwrap();
    let r: serde_json::Value = success_json(&out);
    assert_eq!(
        r["perf"]["cpus"],
        serde_json::json!([last]),
        "{}",
        r["perf"]["cpus"]
    );
}

/// Thread per job or a pool past the host's thread limits is refused
/// before any thread is created (exit 3 naming vm.max_map_count): thread
/// per job used to abort in std's thread start-up (exit 134), a rayon pool
/// of 20000 workers to spend minutes starting.
#[test]
fn threads_past_the_mapping_limit_are_refused_up_front() {
    for args in [
        &["--mode", "thread", "--jobs", "100000"][..],
        &["--mode", "rayon", "--jobs", "2", "--max-workers", "65536"][..],
    ] {
        let start = std::time::Instant::now();
        herd()
            .args(["agent", "--no-perf", "--waves", "1", "--job-us", "0"])
            .args(args)
            .assert()
            .code(3)
            .stderr(contains("vm.max_map_count"));
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
    }
}

/// Ctrl-C in a long gap stops the run within a gap slice and prints the
/// waves done (exit 130): the gap used to be one 10-minute sleep.
#[test]
fn ctrl_c_in_a_long_gap_stops_the_run() {
    let child = common::spawn_herd(&[
        "agent",
        "--no-perf",
        "--waves",
        "5",
        "--jobs",
        "2",
        "--gap-ms",
        "600000",
        "--json",
    ]);
    let r = common::ctrl_c_partial_result(child, std::time::Duration::from_secs(1));
    assert_eq!(r.config["waves"], 5);
}

/// A flag of one mode is refused in a run of another (above), but a
/// compare that varies the mode shares its flags with every configuration
/// (as docs/results-agent.md's commands do): each mode takes what it uses.
#[test]
fn a_compare_across_modes_shares_mode_flags() {
    let out = herd()
        .args([
            "compare",
            "--scenario",
            "agent",
            "--vary",
            "mode=thread,mutex-pool",
        ])
        .args([
            "-r",
            "1",
            "--json",
            "--",
            "--no-perf",
            "--waves",
            "1",
            "--jobs",
            "2",
        ])
        .args(["--job-us", "0", "--max-workers", "8"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sets"].as_array().map(Vec::len), Some(2), "{v}");
}
