//! std threads at the mapping wall (`vm.max_map_count`): `herd agent
//! --force` and `herd storm --spawn std --force` are refused with exit 3
//! naming the wall, where they used to run and abort (exit 134; agent 8
//! runs in 9, storm 4 in 4: a thread whose stack got its mappings could
//! not map the signal stack std gives it, "failed to allocate an
//! alternative stack"); `herd storm` on raw pthreads runs there and counts
//! the failures.
//! The wall is brought near by a preload that adds mappings before main
//! (`benches/c/extra_maps.c`, as `scripts/micro-vs-herd.sh` uses it).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// `benches/c/extra_maps.c` built as a preload into `dir`.
fn build_extra_maps(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/c/extra_maps.c");
    let so = dir.join("extra_maps.so");
    let status = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("gcc runs (cargo's linker here; scripts/test.sh installs it)");
    assert!(status.success(), "gcc could not build {}", src.display());
    so
}

/// herd with ARGS, `extra` mappings added before its main by `so`.
fn herd_with_extra_maps(so: &Path, extra: u64, args: &[&str]) -> std::process::Output {
    Command::new(assert_cmd::cargo::cargo_bin("herd"))
        .args(args)
        .env("LD_PRELOAD", so)
        .env("HERD_EXTRA_MAPS", extra.to_string())
        .output()
        .unwrap()
}

fn max_map_count() -> u64 {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .expect("vm.max_map_count is readable")
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn forced_past_the_mapping_wall_is_refused_not_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let so = build_extra_maps(dir.path());
    // Room for about 50 threads of 4 mappings beside herd's own.
    let extra = max_map_count().saturating_sub(500);
    for force in [true, false] {
        let mut args = vec![
            "agent",
            "--no-perf",
            "--mode",
            "thread",
            "--waves",
            "2",
            "--jobs",
            "200",
            "--job-us",
            "2000",
            "--gap-ms",
            "1",
        ];
        if force {
            args.push("--force");
        }
        let out = herd_with_extra_maps(&so, extra, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "--force {force}: {err}");
        assert!(
            err.contains("--jobs") && err.contains("vm.max_map_count"),
            "--force {force}: the wall is not named: {err}"
        );
        if force {
            assert!(
                err.contains("--force does not run past vm.max_map_count"),
                "{err}"
            );
        }
        assert!(
            !err.contains("alternative stack") && !err.contains("fatal runtime error"),
            "--force {force}: {err}"
        );
    }
}

#[test]
fn a_std_storm_forced_past_the_mapping_wall_is_refused_a_pthread_one_counts() {
    let dir = tempfile::tempdir().unwrap();
    let so = build_extra_maps(dir.path());
    // Room for about 100 stacks; the storm keeps 600 alive.
    let extra = max_map_count().saturating_sub(500);
    let storm = [
        "storm",
        "--no-perf",
        "--force",
        "--waves",
        "3",
        "--per-wave",
        "200",
        "--sleep-ms",
        "5",
        "--cancel",
        "none",
        "--json",
        "--spawn",
    ];
    let mut args = storm.to_vec();
    args.push("std");
    let out = herd_with_extra_maps(&so, extra, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("vm.max_map_count") && err.contains("even --force does not run past"),
        "{err}"
    );
    assert!(
        !err.contains("alternative stack") && !err.contains("fatal runtime error"),
        "{err}"
    );
    let mut args = storm.to_vec();
    args.push("pthread");
    let out = herd_with_extra_maps(&so, extra, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = common::metric_opt(&r, "threads_failed").expect("a threads_failed metric");
    assert!(failed > 0.0, "creations past the wall were counted: {err}");
    assert!(
        err.contains("vm.max_map_count"),
        "the cause is named: {err}"
    );
}
