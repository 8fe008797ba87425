//! Helpers shared by herd's integration tests (each test binary includes
//! this module with `mod common;` and uses what it needs).

#![allow(dead_code)]

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use herd::result::RunResult;
use serde::de::DeserializeOwned;
use serde_json::Value;

mod skip;
pub use skip::skip;

/// The `herd` binary under test.
pub fn herd() -> Command {
    Command::cargo_bin("herd").unwrap()
}

/// The `--cleanup` checks every strategy must end at 0 (storm and agent).
pub const CLEANUP_ZEROS: &[&str] = &[
    "cleanup_violations",
    "cleanups_missing",
    "cleanups_repeated",
    "cleanup_merge_errors",
    "cleanup_frees_missing",
];

/// The smallest storm: 2 waves of 2 threads that do nothing, no perf (for
/// tests of the command line and the outputs, not of the measurement).
pub const TINY: &[&str] = &[
    "--waves",
    "2",
    "--per-wave",
    "2",
    "--spin",
    "0",
    "--sleep-ms",
    "0",
    "--no-perf",
];
/// [`TINY`] without `--per-wave` (for sweeps that vary it).
pub const TINY_ANY_WAVE: &[&str] = &[
    "--waves",
    "2",
    "--spin",
    "0",
    "--sleep-ms",
    "0",
    "--no-perf",
];

/// A small, quick storm for `herd compare` and `herd sweep`.
pub const SMALL: &[&str] = &[
    "--waves",
    "10",
    "--per-wave",
    "20",
    "--spin",
    "1000",
    "--sleep-ms",
    "20",
    "--no-perf",
];
/// [`SMALL`] without `--per-wave` (for runs that vary it).
pub const SMALL_ANY_WAVE: &[&str] = &[
    "--waves",
    "10",
    "--spin",
    "1000",
    "--sleep-ms",
    "20",
    "--no-perf",
];

/// Runs `herd storm ARGS --json --no-perf` and returns the parsed RunResult.
pub fn storm_json(args: &[&str]) -> Value {
    let out = herd()
        .arg("storm")
        .args(args)
        .arg("--json")
        .arg("--no-perf")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "herd storm {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The value of metric `name` in a RunResult as JSON, if it has one.
pub fn metric_opt(r: &Value, name: &str) -> Option<f64> {
    r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["value"].as_f64())
}

/// Asserts that the run succeeded (its stderr in the message) and parses
/// its stdout as JSON.
pub fn success_json<T: DeserializeOwned>(out: &Output) -> T {
    assert_success(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Asserts that the run succeeded, with its stderr as the message.
#[track_caller]
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `herd ARGS` with stdout and stderr piped.
pub fn spawn_herd(args: &[&str]) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("herd"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `herd ARGS` with its stdout a pipe nobody reads any more (as in
/// `herd ... | head -0`), its stderr captured.
pub fn herd_into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    std::process::Command::new(assert_cmd::cargo::cargo_bin("herd"))
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// `herd ARGS`, not yet run, under an address-space limit (`RLIMIT_AS`,
/// soft and hard) of `bytes`, set in the child before it execs.
pub fn herd_under_rlimit_as(args: &[&str], bytes: u64) -> std::process::Command {
    herd_under_rlimit(libc::RLIMIT_AS, args, bytes)
}

/// `herd ARGS`, not yet run, under a data limit (`RLIMIT_DATA`: private
/// writable memory, thread stacks included; soft and hard) of `bytes`, set
/// in the child before it execs.
pub fn herd_under_rlimit_data(args: &[&str], bytes: u64) -> std::process::Command {
    herd_under_rlimit(libc::RLIMIT_DATA, args, bytes)
}

/// `herd ARGS`, not yet run, under `resource` (soft and hard) of `bytes`,
/// set in the child before it execs.
pub fn herd_under_rlimit(
    resource: libc::__rlimit_resource_t,
    args: &[&str],
    bytes: u64,
) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("herd"));
    cmd.args(args);
    // SAFETY: the closure runs in the forked child before exec; setrlimit
    // is async-signal-safe and it touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(resource, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Starts `herd ARGS` like [`spawn_herd`], as the leader of a process group
/// of its own (as a shell starts a job), for [`CtrlC::Group`].
pub fn spawn_herd_group(args: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(assert_cmd::cargo::cargo_bin("herd"))
        .args(args)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Who receives a test's Ctrl-C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlC {
    /// The herd process alone (`kill`).
    Process,
    /// Its whole process group, as a terminal does (`killpg`): herd and
    /// the child runs it started. Start it with [`spawn_herd_group`].
    Group,
}

/// What a test waits for before its Ctrl-C. A fixed delay after the start
/// raced herd's start-up: on a loaded machine the signal could come before
/// herd had installed its handler (killed by SIGINT, no partial result) or
/// before the storm had created a thread (`threads_created > 0` failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// The measuring herd catches SIGINT; then `after` more, so that the
    /// Ctrl-C lands in the middle of the run.
    Handler { after: Duration },
    /// The measuring herd, a storm with `--reap join` (the default),
    /// catches SIGINT and has at least this many storm threads alive (so
    /// that many were created before the Ctrl-C).
    StormThreads(usize),
}

/// A plain delay: [`Ready::Handler`] with that delay after the handler.
impl From<Duration> for Ready {
    fn from(after: Duration) -> Ready {
        Ready::Handler { after }
    }
}

/// How long a test waits for herd to get ready or to stop: only a defect
/// (or a machine far slower than any CI run) takes this long.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `done` every 10 ms until it holds: `Err` naming `what` if it
/// did not within [`PATIENCE`].
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() >= PATIENCE {
            return Err(format!("{what}: not within {PATIENCE:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Whether process `pid` catches SIGINT (a handler installed: `SigCgt` in
/// `/proc/PID/status`).
pub fn catches_sigint(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGINT - 1)) != 0)
}

/// The child processes of `pid` (`/proc/PID/task/*/children`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The storm threads of herd process `pid` alive now, once its helper
/// threads are named (`ctrl-c`, the Ctrl-C handler's, and `herd-reaper`:
/// a storm with `--reap join`, the default, starts both before its first
/// wave; until a thread names itself it has the process's name, as a
/// storm thread keeps): its other threads that have the name `herd`, the
/// main thread left out. `None` while a helper is not named yet.
pub fn storm_threads(pid: u32) -> Option<usize> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let comms: Vec<String> = tasks
        .flatten()
        .filter(|t| t.file_name().to_str() != Some(&pid.to_string()))
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim_end().to_string())
        .collect();
    let named = |n: &str| comms.iter().any(|c| c == n);
    (named("ctrl-c") && named("herd-reaper")).then(|| comms.iter().filter(|c| *c == "herd").count())
}

/// Waits until herd `child` is [`Ready`] for a Ctrl-C sent `to` it: the
/// measuring process is herd itself, or with [`CtrlC::Group`] (`-r N`,
/// sweep) its child run, and then herd too must catch SIGINT. If it does
/// not get ready in time, kills it (a run until Ctrl-C would run on) and
/// fails the test.
pub fn wait_ready(child: &mut Child, ready: Ready, to: CtrlC) {
    let pid = child.id();
    let waited =
        wait_for("herd installs its Ctrl-C handler", || catches_sigint(pid)).and_then(|()| {
            let measuring = match to {
                CtrlC::Process => pid,
                CtrlC::Group => {
                    let mut run = None;
                    wait_for("herd starts a child run that catches Ctrl-C", || {
                        run = children_of(pid).into_iter().find(|&c| catches_sigint(c));
                        run.is_some()
                    })?;
                    run.unwrap()
                }
            };
            match ready {
                Ready::Handler { after } => {
                    std::thread::sleep(after);
                    Ok(())
                }
                Ready::StormThreads(n) => {
                    wait_for(&format!("herd creates {n} storm threads"), || {
                        storm_threads(measuring).is_some_and(|t| t >= n)
                    })
                }
            }
        });
    if let Err(why) = waited {
        if to == CtrlC::Group {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = child.kill();
        let out = child.wait();
        panic!("{why} (herd: {out:?})");
    }
}

/// Sends `child` SIGINT once it is [`Ready`] (to it, or to its group), then
/// checks that it stops within [`PATIENCE`] and exits 130; returns what it
/// printed. (The runs interrupted here last minutes if not interrupted, so
/// a Ctrl-C that is not acted on still fails the test.)
pub fn ctrl_c(mut child: Child, ready: impl Into<Ready>, to: CtrlC) -> Output {
    use nix::sys::signal::{kill, killpg, Signal};
    wait_ready(&mut child, ready.into(), to);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    match to {
        CtrlC::Process => kill(pid, Signal::SIGINT),
        CtrlC::Group => killpg(pid, Signal::SIGINT),
    }
    .unwrap();
    let start = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        start.elapsed() < PATIENCE,
        "took {:?} to stop after Ctrl-C",
        start.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`ctrl_c`] to the process alone, then checks that it printed a partial
/// RunResult marked interrupted.
pub fn ctrl_c_partial_result(child: Child, ready: impl Into<Ready>) -> RunResult {
    let out = ctrl_c(child, ready, CtrlC::Process);
    let r: RunResult = serde_json::from_slice(&out.stdout).expect("partial result printed");
    assert!(r.interrupted);
    r
}

/// `herd SUBCOMMAND ARGS` exits 2 with a message naming `flag`; returns
/// the message.
pub fn exits_2_naming(subcommand: &str, args: &[&str], flag: &str) -> String {
    let out = herd().arg(subcommand).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let cmd = format!("herd {subcommand} {}", args.join(" "));
    assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
    assert!(
        err.contains(flag),
        "{cmd}: message does not name {flag}: {err}"
    );
    err
}

/// Whether the real-kernel perf tests can run here; if not, [`skip`]s
/// naming why (no tracefs, or neither root nor `perf_event_paranoid <= 1`).
pub fn perf_usable() -> bool {
    match perf_skip_reason() {
        None => true,
        Some(why) => {
            skip(&why);
            false
        }
    }
}

fn perf_skip_reason() -> Option<String> {
    use herd::perf::sys::{Kernel, RealKernel};
    let k = RealKernel;
    if k.tracefs().is_none() {
        return Some("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)".into());
    }
    if !k.is_root() && !matches!(k.paranoid(), Some(p) if p <= 1) {
        return Some(format!(
            "not root and kernel.perf_event_paranoid={:?} (needs <= 1)",
            k.paranoid()
        ));
    }
    None
}

/// Waits until the test harness's other threads are gone (process-scope
/// counters count every thread of this process; the harness's main thread
/// and this test's remain), so only this test's threads count. Up to
/// [`PATIENCE`] (it was 5 s: a joined thread's task may linger a while
/// on a loaded machine).
pub fn quiesce() {
    let ok = wait_for("the harness's other threads are gone", || {
        herd::host::own_threads().len() <= 2
    });
    if let Err(why) = ok {
        panic!("{why}: threads left over: {:?}", herd::host::own_threads());
    }
}
