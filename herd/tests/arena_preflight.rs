//! The pre-flight counts the malloc arenas a run's threads can make
//! under `RLIMIT_AS`: glibc gives each new thread that allocates an
//! arena of its own, 64 MiB of address space reserved, until 8 per CPU
//! exist (at least 9 with the main one), unless `MALLOC_ARENA_MAX` or
//! `glibc.malloc.arena_max` says fewer. Under 400 MiB, herd (about 150
//! MiB at its pre-flight) has room for a few dozen 2 MiB stacks, not for
//! a dozen arenas: the old pre-flight, which kept 64 MiB (one arena) of
//! slack, let these runs start, and they then ran into the limit half
//! way through.

use std::process::Output;

mod common;

const LIMIT: u64 = 400 << 20;

fn under_limit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = common::herd_under_rlimit_as(args, LIMIT);
    // The test's own environment must not decide the arena limit.
    cmd.env_remove("MALLOC_ARENA_MAX")
        .env_remove("GLIBC_TUNABLES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Refused (exit 3) naming the arenas, how many and how much, and the
/// ways out; with `MALLOC_ARENA_MAX=1` (or the tunable) the same run
/// fits and runs (exit 0).
fn refused_for_arenas_then_fits_with_one(args: &[&str]) {
    let out = under_limit(args, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
    assert!(
        err.contains("RLIMIT_AS = 400.0 MiB")
            && err.contains("malloc arenas")
            && err.contains("64.0 MiB each")
            && err.contains("MALLOC_ARENA_MAX=1")
            && err.contains("--force"),
        "{args:?}: {err}"
    );
    for env in [
        ("MALLOC_ARENA_MAX", "1"),
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max=1"),
    ] {
        let out = under_limit(args, &[env]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?} with {env:?}: {err}");
        assert!(!err.contains("RLIMIT_AS"), "{args:?} with {env:?}: {err}");
    }
}

#[test]
fn agent_threads_whose_arenas_do_not_fit_are_refused() {
    refused_for_arenas_then_fits_with_one(&[
        "agent",
        "--no-perf",
        "--mode",
        "thread",
        "--waves",
        "1",
        "--jobs",
        "60",
        "--job-us",
        "20000",
        "--gap-ms",
        "0",
    ]);
}

#[test]
fn storm_std_threads_whose_arenas_do_not_fit_are_refused() {
    refused_for_arenas_then_fits_with_one(&[
        "storm",
        "--no-perf",
        "--spawn",
        "std",
        "--waves",
        "1",
        "--per-wave",
        "60",
        "--sleep-ms",
        "1",
        "--cancel",
        "none",
    ]);
}
