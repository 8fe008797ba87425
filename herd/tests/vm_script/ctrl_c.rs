//! How these tests press Ctrl-C on vm-run.sh: the script started as at a
//! terminal (a process group of its own, SIGINT at its default), SIGINT
//! sent to the group, and a bounded wait for the script to end; and the
//! stand-in tools they put first on the PATH.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Makes `cmd` a process group of its own with SIGINT at its default, as
/// a command started at a terminal: a test run started in the background
/// (`cmd &` from a script, as a CI runner may) inherits SIGINT ignored,
/// and a shell cannot trap a signal ignored at its start.
pub(crate) fn as_at_a_terminal(cmd: &mut Command) {
    cmd.process_group(0);
    // SAFETY: signal(2) is async-signal-safe; the closure touches nothing
    // of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
}

pub(crate) fn write_exe(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Sends SIGINT to `child`'s process group (`child` started with
/// [`as_at_a_terminal`]) and waits up to 60 s for it to end (what it
/// stops takes milliseconds; only a script that ignores Ctrl-C trips the
/// bound, and is then killed). `stderr` reads what it said, for the
/// message.
pub(crate) fn ctrl_c_and_wait(child: &mut Child, stderr: impl Fn() -> String) -> ExitStatus {
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT).unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            panic!("vm-run.sh did not end within 60 s of SIGINT: {}", stderr());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
