//! Helpers shared by the tests of scripts/vm-run.sh: `vm/` (guests) and
//! `vm_script.rs` (the script's options and qemu command line, no guest).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (herd's manifest dir is `<root>/herd`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("herd/ has a parent")
        .to_path_buf()
}

pub fn vm_run_sh() -> PathBuf {
    repo().join("scripts/vm-run.sh")
}

#[path = "../common/skip.rs"]
mod skip;
#[allow(unused_imports)] // each test binary uses one of them
pub use skip::{not_in_this_pass, skip};

/// Runs scripts/vm-run.sh with `args`; stdout and stderr captured. With
/// `HERD_NO_INSTALL=1`: a test never installs a package or fetches a
/// kernel, it fails naming what is missing (scripts/test-setup.sh
/// provides it).
pub fn vm_run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    vm_run_in(None, args, envs)
}

/// [`vm_run`] in the working directory `dir` (`None`: the test's own).
pub fn vm_run_in(dir: Option<&Path>, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(vm_run_sh()).args(args).env("HERD_NO_INSTALL", "1");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run scripts/vm-run.sh");
    // Show the guest's console relay and vm-run.sh's notes in the test log.
    eprintln!(
        "--- vm-run.sh {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn code(out: &Output) -> i32 {
    out.status.code().expect("vm-run.sh exited by a signal")
}

/// The herd binary cargo built for this test run.
pub fn herd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_herd")
}
