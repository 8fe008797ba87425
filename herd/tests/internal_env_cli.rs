//! herd's internal environment variables set by hand (`HERD_CHILD`,
//! `HERD_PERF_KEPT`, the perf closer's `HERD_PERF_CLOSER_*`): refused
//! with exit 2 naming the variable unless they are what herd itself sets
//! there, and a run at a terminal marked as a child run says so. They
//! used to change what a command did without a word (JSON only, no
//! progress; counters closed in place; a herd that closed descriptors and
//! exited 0 instead of running).

mod common;

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::process::{Command, Output, Stdio};

use common::skip;

/// `herd storm` on [`common::TINY`].
fn tiny_storm() -> Vec<&'static str> {
    [&["storm"], common::TINY].concat()
}

/// `herd ARGS` with `vars` added to its environment (none of herd's
/// internal variables inherited), stdin empty.
fn herd_with(vars: &[(&str, &str)], args: &[&str]) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("herd"));
    for v in [
        "HERD_CHILD",
        "HERD_PERF_KEPT",
        "HERD_PERF_CLOSER_FDS",
        "HERD_PERF_CLOSER_PARENT",
        "HERD_PERF_CLOSER_CGROUP",
        "HERD_PERF_CLOSER_BACK",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(vars.iter().copied())
        .args(args)
        .stdin(Stdio::null());
    cmd
}

fn run(vars: &[(&str, &str)], args: &[&str]) -> Output {
    herd_with(vars, args).output().unwrap()
}

/// Exit 2, `says` on stderr, nothing on stdout (nothing ran).
#[track_caller]
fn assert_refused(out: &Output, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "expected `{says}` in: {err}");
    assert!(err.contains("internal to herd"), "{err}");
    assert!(out.stdout.is_empty(), "{err}");
}

#[test]
fn herd_child_not_naming_the_parent_is_refused() {
    // herd sets it to the parent's pid; a pid that is not the parent's,
    // 1, or an empty value: set by hand, or inherited from another herd.
    for value in ["1", "", "yes", "4194304"] {
        let out = run(&[("HERD_CHILD", value)], &tiny_storm());
        assert_refused(&out, &format!("invalid HERD_CHILD: `{value}`"));
    }
    // Every command, not only the measuring ones.
    let out = run(&[("HERD_CHILD", "1")], &["env"]);
    assert_refused(&out, "invalid HERD_CHILD");
}

#[test]
fn herd_child_naming_the_parent_runs_as_a_child_and_says_so_at_a_terminal() {
    let me = std::process::id().to_string();
    // As herd's own children run: stdin empty, stdout a pipe: nothing said.
    let out = run(&[("HERD_CHILD", &me)], &tiny_storm());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("HERD_CHILD"), "{err}");
    // At a terminal (stdin a pseudo-terminal): one line says so.
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes the two descriptors it opens; name, termios
    // and winsize may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened by openpty and are owned here only.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let out = herd_with(&[("HERD_CHILD", &me)], &tiny_storm())
        .stdin(Stdio::from(slave))
        .output()
        .unwrap();
    drop(master);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("HERD_CHILD")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].contains(&format!(
            "HERD_CHILD is set to this process's parent ({me})"
        )) && notes[0].contains("running as a child run of herd"),
        "{err}"
    );
}

#[test]
fn herd_perf_kept_outside_a_child_run_is_refused() {
    let out = run(&[("HERD_PERF_KEPT", "1")], &tiny_storm());
    assert_refused(&out, "invalid HERD_PERF_KEPT: `1`");
    // In a child run, only herd's own value.
    let me = std::process::id().to_string();
    let out = run(
        &[("HERD_CHILD", &me), ("HERD_PERF_KEPT", "yes")],
        &tiny_storm(),
    );
    assert_refused(&out, "invalid HERD_PERF_KEPT: `yes`");
}

#[test]
fn closer_variables_set_by_hand_are_refused() {
    let me = std::process::id().to_string();
    let parent = ("HERD_PERF_CLOSER_PARENT", me.as_str());
    for (vars, says) in [
        (
            &[("HERD_PERF_CLOSER_FDS", "abc"), parent][..],
            "invalid HERD_PERF_CLOSER_FDS: `abc` is not a descriptor number",
        ),
        (
            &[("HERD_PERF_CLOSER_FDS", "")][..],
            "invalid HERD_PERF_CLOSER_FDS: `` is not a descriptor number",
        ),
        (
            &[("HERD_PERF_CLOSER_FDS", "1"), parent][..],
            "invalid HERD_PERF_CLOSER_FDS: 1 is standard input, output or error",
        ),
        (
            &[("HERD_PERF_CLOSER_FDS", "900"), parent][..],
            "invalid HERD_PERF_CLOSER_FDS: descriptor 900 is not open",
        ),
        (
            &[("HERD_PERF_CLOSER_CGROUP", "/sys/fs/cgroup/x")][..],
            "invalid HERD_PERF_CLOSER_CGROUP: set without HERD_PERF_CLOSER_FDS",
        ),
        (
            &[parent][..],
            "invalid HERD_PERF_CLOSER_PARENT: set without HERD_PERF_CLOSER_FDS",
        ),
        (
            &[("HERD_PERF_CLOSER_BACK", "/sys/fs/cgroup")][..],
            "invalid HERD_PERF_CLOSER_BACK: set without HERD_PERF_CLOSER_FDS",
        ),
    ] {
        let out = run(vars, &tiny_storm());
        assert_refused(&out, says);
    }
}

/// What herd's closer request looks like passes the checks: a real perf
/// counter, inherited, with the parent's pid: served (closed), exit 0,
/// silently.
#[test]
fn a_closer_request_as_herd_makes_it_is_served() {
    let counter = match perf_event::Builder::new(perf_event::events::Software::DUMMY).build() {
        Ok(c) => c,
        Err(e) => {
            skip(&format!("cannot open a perf counter here: {e}"));
            return;
        }
    };
    let fd = counter.as_raw_fd();
    // SAFETY: the counter owns `fd` and outlives this borrow.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    // Inherited across exec, as herd's spawn hands it over.
    nix::fcntl::fcntl(
        borrowed,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let me = std::process::id().to_string();
    let out = run(
        &[
            ("HERD_PERF_CLOSER_FDS", &fd.to_string()),
            ("HERD_PERF_CLOSER_PARENT", &me),
        ],
        &tiny_storm(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty() && out.stdout.is_empty(), "{err}");
    drop(counter);
}

/// `herd --help` names the variables and says what happens to them.
#[test]
fn help_names_the_environment() {
    let out = run(&[], &["--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let env = &text[text.find("Environment:").expect("an Environment section")..];
    for name in [
        "HERD_LIBURCU",
        "HERD_CHILD",
        "HERD_PERF_KEPT",
        "HERD_PERF_CLOSER_*",
    ] {
        assert!(env.contains(name), "{name}: {env}");
    }
    assert!(env.contains("refused (exit 2)"), "{env}");
}
