//! `herd agent` under an address space (`RLIMIT_AS`) or a data limit
//! (`RLIMIT_DATA`, which thread stacks count against since Linux 4.7)
//! that runs out after a few dozen 2 MiB stacks: every mode is refused up
//! front (exit 3, the limit named with its numbers); a run that fits is
//! not; with `--force` past the pre-flight, a worker thread that cannot be
//! created is explained with the limit hit and its numbers. And thread
//! per job in a cgroup whose `pids.max` stops it, as root: its failures
//! diagnosed once per error number and wave.

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

/// Every agent mode with the arguments that ask it for 1,000 threads, and
/// the flag that sets them.
fn every_mode_asking_1000_threads() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let modes = [
        ("tokio-blocking", "--max-workers"),
        ("mutex-pool", "--max-workers"),
        ("exitq-pool", "--max-workers"),
        ("rayon", "--max-workers"),
        ("thread", "--jobs"),
    ];
    modes
        .into_iter()
        .map(|(mode, flag)| {
            let mut args = vec!["--mode", mode, "--jobs", "1000", "--job-us", "2000"];
            if mode != "thread" {
                args.extend(["--max-workers", "1000"]);
            }
            (mode, flag, args)
        })
        .collect()
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
    for (mode, flag, args) in every_mode_asking_1000_threads() {
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

/// A forced agent run's JSON result (exit 0), the creations that failed,
/// and their groups by cause, the first of them `limit`'s, which together
/// count every failure.
fn failures_by_cause(out: Output, limit: &str) -> (serde_json::Value, f64, Vec<serde_json::Value>) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = common::metric_opt(&r, "spawn_failures").expect("creations failed");
    let groups = r["details"]["failures"]
        .as_array()
        .expect("failures by cause")
        .clone();
    assert_eq!(groups[0]["limit"], limit, "{groups:?}");
    let counted: f64 = groups.iter().map(|g| g["count"].as_f64().unwrap()).sum();
    assert_eq!(counted, failed, "{groups:?}");
    (r, failed, groups)
}

/// Thread per job, forced past the pre-flight under RLIMIT_AS: every
/// creation that might not fit is refused by exitq's `ThreadRoom` before
/// it is tried, each refusal carrying its own diagnosis. They are counted
/// by cause (RLIMIT_AS), recorded as refusals (`failure_refusals`), with
/// at most one diagnosis per error number and wave for any other
/// failure, and the warning says the refusals explain themselves (it
/// said `(0 diagnoses: one per error number and wave)`, as if nothing
/// was explained).
#[test]
fn thread_per_job_refusals_explain_themselves() {
    let args = [
        "--force", "--mode", "thread", "--waves", "3", "--jobs", "300", "--job-us", "1000",
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let (r, failed, groups) = failures_by_cause(agent_under_rlimit_as(&with_json), "rlimit_as");
    let refused = r["details"]["failure_refusals"].as_f64().unwrap();
    let diagnoses = r["details"]["failure_diagnoses"].as_f64().unwrap();
    assert!(
        refused >= 1.0 && refused <= failed && diagnoses <= 3.0 * groups.len() as f64,
        "{refused} refused, {diagnoses} diagnoses for {failed} failures in 3 waves"
    );
    let out = agent_under_rlimit_as(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("ran on the submitter instead), by cause: ")
            && err.contains("with EAGAIN (RLIMIT_AS): RLIMIT_AS ")
            && err.contains("nearly reached")
            && err.contains("first in wave 0 after ")
            && err.contains("refused for want of room")
            && err.contains("each refusal explaining itself")
            && !err.contains("(0 diagnoses"),
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

/// The data limit of the `RLIMIT_DATA` tests: 256 MiB, room for about a
/// hundred 2 MiB stacks (herd itself has a few MiB of `VmData`).
const DATA_LIMIT: u64 = 256 << 20;

/// `herd agent --no-perf ARGS` (one wave unless ARGS say) under an
/// `RLIMIT_DATA` of [`DATA_LIMIT`], malloc kept to one arena grown 64 MiB
/// ahead as under `RLIMIT_AS` ([`agent_under_rlimit_as`]): a thread that
/// did start then never needs more data for a small allocation, only the
/// stacks run into the limit.
fn agent_under_rlimit_data(args: &[&str]) -> Output {
    let mut all = vec!["agent", "--no-perf", "--gap-ms", "1"];
    if !args.contains(&"--waves") {
        all.extend(["--waves", "1"]);
    }
    all.extend(args);
    common::herd_under_rlimit_data(&all, DATA_LIMIT)
        .env(
            "GLIBC_TUNABLES",
            "glibc.malloc.arena_max=1:glibc.malloc.top_pad=67108864",
        )
        .output()
        .unwrap()
}

/// The `N` of "RLIMIT_DATA = ... leaves room for about N threads".
fn data_room(err: &str) -> u64 {
    let at = err.find("RLIMIT_DATA = ").expect("RLIMIT_DATA named");
    let rest = &err[at..];
    let from = rest.find("leaves room for about ").expect("room named") + 22;
    rest[from..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no thread count: {err}"))
}

/// Every mode is refused before its first thread under `RLIMIT_DATA`
/// (exit 3 about the flag that sets the threads, naming `RLIMIT_DATA` with
/// its numbers and how many threads fit). Before the pre-flight modelled
/// it, each ran: the thread mode counted hundreds of failed creations,
/// the others aborted or ran with the workers they could create.
#[test]
fn every_mode_past_rlimit_data_is_refused_up_front() {
    for (mode, flag, args) in every_mode_asking_1000_threads() {
        let out = agent_under_rlimit_data(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{mode}: {err}");
        assert!(err.contains(flag), "{mode}: {err}");
        assert!(
            err.contains("RLIMIT_DATA = 256.0 MiB (ulimit -d)")
                && err.contains("of private writable memory"),
            "{mode}: the limit is not named with its numbers: {err}"
        );
        assert!(!err.contains("RLIMIT_AS"), "{mode}: {err}");
        // 256 MiB, less herd's own data and the slack, in stacks of
        // 2 MiB and 64 KiB: fewer than 128, and not none.
        let room = data_room(&err);
        assert!((40..128).contains(&room), "{mode}: room for {room}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("fatal runtime error"),
            "{mode}: {err}"
        );
    }
}

/// Under the same `RLIMIT_DATA` a run whose threads fit is not refused,
/// and creates them all.
#[test]
fn a_run_that_fits_under_rlimit_data_is_not_refused() {
    for (mode, workers) in [("thread", None), ("mutex-pool", Some("20"))] {
        let mut args = vec!["--mode", mode, "--jobs", "20", "--job-us", "1000", "--json"];
        if let Some(w) = workers {
            args.extend(["--max-workers", w]);
        }
        let out = agent_under_rlimit_data(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{mode}: {err}");
        assert!(!err.contains("pre-flight"), "{mode}: {err}");
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            common::metric_opt(&r, "spawn_failures").unwrap_or(0.0),
            0.0,
            "{mode}: {err}"
        );
    }
}

/// Thread per job forced past the `RLIMIT_DATA` pre-flight: it runs
/// (exit 0, the refusal given as a warning), and its failed creations are
/// counted under `rlimit_data`, exitq's diagnosis.
#[test]
fn thread_per_job_forced_past_rlimit_data_counts_the_failures() {
    let out = agent_under_rlimit_data(&[
        "--force", "--mode", "thread", "--jobs", "300", "--job-us", "1000", "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("--force: run past the pre-flight") && err.contains("RLIMIT_DATA = "),
        "{err}"
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = common::metric_opt(&r, "spawn_failures").expect("creations failed");
    assert!(failed > 0.0, "{err}");
    let groups = r["details"]["failures"]
        .as_array()
        .expect("failures by cause");
    assert_eq!(groups[0]["limit"], "rlimit_data", "{groups:?}");
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

/// A pids cgroup (`testkit::PidsCgroup`) with `pids.max` = `max`, or
/// `None` with the reason given (`common::skip`: not root, no pids cgroup
/// hierarchy; a failure under the test command as root).
fn pids_cgroup_or_skip(max: u64) -> Option<testkit::PidsCgroup> {
    let skip = |why: String| {
        common::skip(&format!("thread_per_job_diagnoses_once_per_wave: {why}"));
        None
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("needs root to make a pids cgroup".into());
    }
    let cg = match testkit::PidsCgroup::create(&format!("herd-test-{}-pids", std::process::id())) {
        Ok(cg) => cg,
        Err(why) => return skip(why),
    };
    cg.set_max(max).expect("pids.max");
    Some(cg)
}

/// `herd ARGS`, not yet run, moved into `cg` before it execs.
fn herd_in(cg: &testkit::PidsCgroup, args: &[&str]) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("herd"));
    cmd.args(args);
    cg.enter_on_exec(&mut cmd);
    cmd
}

/// Thread per job, forced past the pre-flight in a cgroup whose
/// `pids.max` stops its threads: a limit exitq's room check does not
/// cover, so `pthread_create` itself fails (EAGAIN; 30-55 times in 3
/// waves here: an exited thread frees its pid at once, and each failed
/// job runs on the submitter meanwhile), and each failure is counted
/// while a diagnosis (the limits and `/proc` read) runs at most once per
/// error number and wave, off the submitters' lock (a diagnosis per
/// failure fails it: "37 diagnoses for 37 failures"); the warning gives the cause with its count and first
/// wave (it gave `last:` and one explanation). Under RLIMIT_AS, where
/// this was tested before, the room check now refuses first
/// (`thread_per_job_refusals_explain_themselves`).
#[test]
fn thread_per_job_diagnoses_once_per_wave() {
    let Some(cg) = pids_cgroup_or_skip(40) else {
        return;
    };
    let args = [
        "agent",
        "--no-perf",
        "--gap-ms",
        "1",
        "--force",
        "--mode",
        "thread",
        "--waves",
        "3",
        "--jobs",
        "300",
        "--job-us",
        "1000",
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let out = herd_in(&cg, &with_json).output().unwrap();
    let (r, failed, groups) = failures_by_cause(out, "cgroup_pids_max");
    let diagnoses = r["details"]["failure_diagnoses"].as_f64().unwrap();
    assert!(
        diagnoses >= 1.0 && diagnoses <= 3.0 * groups.len() as f64 && failed > 2.0 * diagnoses,
        "{diagnoses} diagnoses for {failed} failures in 3 waves"
    );
    let out = herd_in(&cg, &args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("ran on the submitter instead), by cause: ")
            && err.contains("with EAGAIN (cgroup pids.max): cgroup ")
            && err.contains("first in wave 0 after ")
            && err.contains("diagnoses: one per error number and wave)"),
        "{err}"
    );
    assert!(!err.contains("last:"), "{err}");
}
