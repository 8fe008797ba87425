//! std threads at the edge of `RLIMIT_AS` and `RLIMIT_DATA` in runs
//! forced past the pre-flight: a thread that would get its 2 MiB stack
//! but not the signal stack std maps in it (12 KiB with its guard) is not
//! created, and is counted and explained as a failed creation naming the
//! limit, where the process used to abort (exit 134, "failed to allocate
//! an alternative stack": on the old code every test here aborted at
//! some limit a page or two below the edge).
//!
//! The edge is found from the child's own usage: the smallest limit at
//! which a forced run creates its one thread is searched page by page
//! (bisection), then runs at each of the 8 pages below it must end
//! cleanly. `MALLOC_ARENA_MAX=1` keeps glibc from reserving an arena per
//! thread, so the child's address space at its first creation moves by a
//! page or two at most from run to run, less than the window.

use std::process::Output;

mod common;

const PAGE: u64 = 4096;

/// herd with `args` under `limit` = `bytes` (soft and hard), set in the
/// child before exec.
fn herd_under(limit: libc::__rlimit_resource_t, bytes: u64, args: &[&str]) -> Output {
    let mut cmd = common::herd_under_rlimit(limit, args, bytes);
    cmd.env("MALLOC_ARENA_MAX", "1");
    // A run takes well under a second; one that has not ended in two
    // minutes hung (on the old code a thread whose signal stack could
    // not be mapped under RLIMIT_DATA sometimes deadlocked in its panic
    // instead of aborting): killed, and reported as such.
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} under {bytes} hung: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// The run's failed creations (its JSON metric `metric`; absent: none),
/// or `None` when it did not exit 0.
fn failures(out: &Output, metric: &str) -> Option<f64> {
    if out.status.code() != Some(0) {
        return None;
    }
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(common::metric_opt(&r, metric).unwrap_or(0.0))
}

/// The smallest limit, in pages, at which `args` creates its threads
/// without a failure.
fn edge(limit: libc::__rlimit_resource_t, args: &[&str], metric: &str) -> u64 {
    let (mut lo, mut hi) = (PAGE, 1 << 30);
    let fits = |b: u64| failures(&herd_under(limit, b, args), metric) == Some(0.0);
    assert!(fits(hi), "{args:?} does not run under 1 GiB");
    while hi - lo > PAGE {
        let mid = (lo + hi) / 2 / PAGE * PAGE;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Below the edge of `limit` (named `name`), page by page: never an
/// abort; every run exits 0, and those that could not create their
/// thread count it, explained with the limit's name.
fn no_abort_below_the_edge(
    limit: libc::__rlimit_resource_t,
    name: &str,
    args: &[&str],
    metric: &str,
) {
    let edge = edge(limit, args, metric);
    let mut explained = 0;
    for pages in 1..=8 {
        let bytes = edge - pages * PAGE;
        let out = herd_under(limit, bytes, args);
        // The explanation is in the JSON (stdout), warnings on stderr.
        let err = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !err.contains("alternative stack") && !err.contains("fatal runtime error"),
            "{name} {bytes} ({pages} pages below the edge): {err}"
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} {bytes} ({pages} pages below the edge): {:?} {err}",
            out.status
        );
        let failed = failures(&out, metric).unwrap();
        if failed > 0.0 {
            assert!(
                err.contains(&format!("{name} {bytes} nearly reached"))
                    || err.contains(&format!("{name} {bytes} reached")),
                "{name} {bytes}: the failure is not explained: {err}"
            );
            if err.contains("std aborts the whole process") {
                explained += 1;
            }
        }
    }
    assert!(
        explained > 0,
        "{name}: no run below the edge ({edge}) was refused for want of room"
    );
}

const AGENT_THREAD: [&str; 14] = [
    "agent",
    "--no-perf",
    "--force",
    "--json",
    "--mode",
    "thread",
    "--waves",
    "1",
    "--jobs",
    "1",
    "--job-us",
    "0",
    "--gap-ms",
    "0",
];

#[test]
fn agent_thread_per_job_at_rlimit_as() {
    no_abort_below_the_edge(
        libc::RLIMIT_AS,
        "RLIMIT_AS",
        &AGENT_THREAD,
        "spawn_failures",
    );
}

#[test]
fn agent_thread_per_job_at_rlimit_data() {
    no_abort_below_the_edge(
        libc::RLIMIT_DATA,
        "RLIMIT_DATA",
        &AGENT_THREAD,
        "spawn_failures",
    );
}

#[test]
fn agent_mutex_pool_at_rlimit_as() {
    let mut args = AGENT_THREAD.to_vec();
    args[5] = "mutex-pool";
    args.extend(["--max-workers", "1"]);
    no_abort_below_the_edge(libc::RLIMIT_AS, "RLIMIT_AS", &args, "spawn_failures");
}

#[test]
fn storm_std_at_rlimit_as() {
    let args = [
        "storm",
        "--no-perf",
        "--force",
        "--json",
        "--spawn",
        "std",
        "--waves",
        "1",
        "--per-wave",
        "1",
        "--sleep-ms",
        "1",
        "--cancel",
        "none",
        "--reap",
        "detach",
    ];
    no_abort_below_the_edge(libc::RLIMIT_AS, "RLIMIT_AS", &args, "threads_failed");
}
