//! `herd agent` under an address space (`RLIMIT_AS`) that runs out after a
//! few dozen 2 MiB stacks: every mode is refused up front (exit 3, the
//! limit named with its numbers); with `--force` past the pre-flight, a
//! worker thread that cannot be created is explained with the limit hit
//! and its numbers.

use std::process::{Command, Output};

mod common;

/// `herd agent --no-perf ARGS` (one wave unless ARGS say) under an `RLIMIT_AS` of 300 MiB
/// (herd itself needs about 150).
///
/// With the address space used up by 2 MiB stacks, the next allocation
/// that needs more of it fails too, whichever comes first: a worker's
/// stack (what these tests provoke) or, in a thread that did start, a
/// small `malloc` that must grow its arena (glibc then aborts: "failed to
/// register TLS destructor: out of memory", Rust "memory allocation of 41
/// bytes failed"; 5 runs in 40 of the debug build beside a CI run). So
/// malloc keeps one arena and grows it 64 MiB ahead (glibc's tunables, set
/// at exec): its small allocations come from room taken at start, and
/// only the stacks run into the limit.
fn agent_under_rlimit_as(args: &[&str]) -> Output {
    let mut all = vec!["agent", "--no-perf", "--gap-ms", "1"];
    if !args.contains(&"--waves") {
        all.extend(["--waves", "1"]);
    }
    all.extend(args);
    common::herd_under_rlimit_as(&all, 300 << 20)
        .env(
            "GLIBC_TUNABLES",
            "glibc.malloc.arena_max=1:glibc.malloc.top_pad=67108864",
        )
        .output()
        .unwrap()
}

/// Every mode is refused before its first thread (exit 3 about the flag
/// that sets the threads, naming `RLIMIT_AS` with its numbers and the
/// threads that would fit). tokio's blocking pool used to abort the
/// process (exit 134, "failed to allocate an alternative stack": a thread
/// created in the last room under the limit could not map its signal
/// stack, and std aborts then) or to run with a pool it silently could
/// not grow (exit 0); the mutex pool aborted the same way at some limits
/// (220 MiB here).
#[test]
fn every_mode_past_rlimit_as_is_refused_up_front() {
    for (mode, flag) in [
        ("tokio-blocking", "--max-workers"),
        ("mutex-pool", "--max-workers"),
        ("exitq-pool", "--max-workers"),
        ("rayon", "--max-workers"),
        ("thread", "--jobs"),
    ] {
        let workers: &[&str] = if mode == "thread" {
            &[]
        } else {
            &["--max-workers", "1000"]
        };
        let mut args = vec!["--mode", mode, "--jobs", "1000", "--job-us", "2000"];
        args.extend(workers);
        let out = agent_under_rlimit_as(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{mode}: {err}");
        assert!(err.contains(flag), "{mode}: {err}");
        assert!(
            err.contains("RLIMIT_AS = 300.0 MiB") && err.contains("leaves room for about"),
            "{mode}: the limit is not named with its numbers: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("fatal runtime error"),
            "{mode}: {err}"
        );
    }
}

/// The mutex pool, forced past the pre-flight, counts its failed
/// creations and names the limit (it gave the bare `Resource temporarily
/// unavailable (os error 11)`).
#[test]
fn a_mutex_pool_worker_that_cannot_be_created_is_explained() {
    let out = agent_under_rlimit_as(&[
        "--force",
        "--mode",
        "mutex-pool",
        "--jobs",
        "1000",
        "--job-us",
        "2000",
        "--max-workers",
        "1000",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("thread creations failed"), "{err}");
    assert!(
        err.contains("EAGAIN: RLIMIT_AS") && err.contains("bytes of address space in use"),
        "the limit is not named with its numbers: {err}"
    );
    // Which failure is explained, and when (it said `last:` before the
    // first failure of the error number).
    assert!(
        err.contains("the first failure of its error number (")
            && err.contains(" s into the run; later ones of that number are counted"),
        "{err}"
    );
    assert!(!err.contains("last:"), "{err}");
}

/// Thread per job, forced past the pre-flight: the failed creations of a
/// wave are counted by cause and diagnosed once per error number and wave
/// (each diagnosis reads the limits and `/proc`; this mode diagnosed
/// every failure, about 600 of them here, in the measured phase: a
/// wave's stacks stay mapped until it is joined at its end), and the
/// warning gives each cause with its count and first wave (it gave
/// `last:` and one explanation).
#[test]
fn thread_per_job_diagnoses_once_per_wave() {
    let args = [
        "--force", "--mode", "thread", "--waves", "3", "--jobs", "300", "--job-us", "1000",
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let out = agent_under_rlimit_as(&with_json);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = common::metric_opt(&r, "spawn_failures").expect("creations failed");
    let groups = r["details"]["failures"]
        .as_array()
        .expect("failures by cause");
    assert_eq!(groups[0]["limit"], "rlimit_as", "{groups:?}");
    let counted: f64 = groups.iter().map(|g| g["count"].as_f64().unwrap()).sum();
    assert_eq!(counted, failed, "{groups:?}");
    let diagnoses = r["details"]["failure_diagnoses"].as_f64().unwrap();
    assert!(
        diagnoses >= 1.0 && diagnoses <= 3.0 * groups.len() as f64 && failed > 10.0 * diagnoses,
        "{diagnoses} diagnoses for {failed} failures in 3 waves"
    );
    let out = agent_under_rlimit_as(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("ran on the submitter instead), by cause: ")
            && err.contains("with EAGAIN (RLIMIT_AS): RLIMIT_AS ")
            && err.contains("first in wave 0 after ")
            && err.contains("diagnoses: one per error number and wave)"),
        "{err}"
    );
    assert!(!err.contains("last:"), "{err}");
}

/// A rayon pool that cannot start all its workers (forced past the
/// pre-flight) is refused (exit 3, `--max-workers`) naming the limit; it
/// listed the limits it might be (without RLIMIT_AS) and exited 1.
#[test]
fn a_rayon_pool_that_cannot_start_names_the_limit() {
    let out = agent_under_rlimit_as(&[
        "--force",
        "--mode",
        "rayon",
        "--jobs",
        "10",
        "--job-us",
        "0",
        "--max-workers",
        "1000",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--max-workers"), "{err}");
    assert!(
        err.contains("EAGAIN: RLIMIT_AS") && err.contains("bytes of address space in use"),
        "the limit is not named with its numbers: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `--waves` x `--jobs` whose job log cannot fit in memory is refused
/// before anything is allocated (exit 3 naming `--jobs`): 10^6 waves of
/// 10^7 jobs aborted on a failed 80 TB allocation (exit 134).
#[test]
fn a_job_log_larger_than_memory_is_refused() {
    let out = Command::new(assert_cmd::cargo::cargo_bin("herd"))
        .args([
            "agent",
            "--no-perf",
            "--waves",
            "1000000",
            "--jobs",
            "10000000",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--jobs") && err.contains("memory"), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
}
