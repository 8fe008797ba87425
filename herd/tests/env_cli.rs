//! `herd env`: the host facts as a table and as JSON.

use assert_cmd::Command;
use serde_json::Value;

#[test]
fn env_json_has_the_facts() {
    let out = Command::cargo_bin("herd")
        .unwrap()
        .args(["env", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let f: Value = serde_json::from_slice(&out.stdout).unwrap();
    let online = f["online_cpus"].as_array().unwrap();
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    assert_eq!(online.len() as i64, n);
    let want = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(
        f["threads_max"].as_u64().unwrap(),
        want("/proc/sys/kernel/threads-max")
    );
    assert_eq!(
        f["pid_max"].as_u64().unwrap(),
        want("/proc/sys/kernel/pid_max")
    );
    assert_eq!(
        f["max_map_count"].as_u64().unwrap(),
        want("/proc/sys/vm/max_map_count")
    );
    assert!(f["kernel"].as_str().unwrap().len() > 3);
    assert!(f["rlimit_stack"].is_object());
    assert!(f["rlimit_nproc"].is_object());
    assert!(f["rlimit_as"].is_object());
    assert!(f["rlimit_data"].is_object());
    assert!(f["perf_usable"].is_boolean());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert_eq!(f["root"].as_bool().unwrap(), root);
    assert_eq!(
        f["tracefs"].is_string(),
        std::path::Path::new("/sys/kernel/tracing/events").is_dir()
            || std::path::Path::new("/sys/kernel/debug/tracing/events").is_dir()
    );
}

#[test]
fn env_table_lists_every_limit() {
    let out = Command::cargo_bin("herd")
        .unwrap()
        .arg("env")
        .output()
        .unwrap();
    assert!(out.status.success());
    let t = String::from_utf8(out.stdout).unwrap();
    for k in [
        "online CPUs",
        "NUMA nodes",
        "kernel",
        "kernel.threads-max",
        "kernel.pid_max",
        "vm.max_map_count",
        "RLIMIT_NPROC",
        "RLIMIT_STACK",
        "RLIMIT_AS",
        "RLIMIT_DATA",
        "perf_event_paranoid",
        "perf counters",
        "tracefs",
        "root",
    ] {
        assert!(t.contains(k), "herd env lacks {k}:\n{t}");
    }
}
