//! Ctrl-C while vm-run.sh makes its work directory: exit 130, said, and
//! no `herd-vm.*` directory left in `$TMPDIR`. The script made it with
//! `mktemp -d` and set its EXIT trap (which removes it) only after: a
//! Ctrl-C in between left the directory. Now the name is chosen and the
//! trap set before the directory is made.
//!
//! `mktemp` and `mkdir` on the PATH are stand-ins that make what the
//! script asks for (with the real tools), then, when it is the work
//! directory, wait as a slow file system would, until the test sends
//! SIGINT to the process group. Either tool may be the one the script
//! uses: the test holds for the old script and the new.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ctrl_c::{as_at_a_terminal, ctrl_c_and_wait, write_exe};
use crate::vm_support::{herd_bin, skip, vm_run_sh};

/// A stand-in for `tool` (at `real`) that runs it, then, if an argument
/// names a `herd-vm.` work directory, writes `waiting` and sleeps.
fn waiting_stand_in(bin: &Path, tool: &str, real: &str) {
    write_exe(
        &bin.join(tool),
        &format!(
            "#!/bin/sh\n\
             {real} \"$@\" || exit $?\n\
             case \" $* \" in *herd-vm.*) : >'{}'; exec sleep 60 ;; esac\n",
            bin.join("waiting").display()
        ),
    );
}

#[test]
fn ctrl_c_while_the_work_directory_is_made_leaves_none() {
    let real = |t: &str| {
        ["/usr/bin", "/bin"]
            .iter()
            .map(|d| format!("{d}/{t}"))
            .find(|p| Path::new(p).is_file())
    };
    let (Some(real_mkdir), Some(real_mktemp)) = (real("mkdir"), real("mktemp")) else {
        skip("vm-run.sh's work directory interrupted: no mkdir/mktemp in /usr/bin or /bin");
        return;
    };
    let path = std::env::var("PATH").unwrap_or_default();
    let missing: Vec<_> = ["busybox", "cpio", "gzip", "ldd"]
        .into_iter()
        .filter(|t| !std::env::split_paths(&path).any(|d| d.join(t).is_file()))
        .collect();
    if !missing.is_empty() {
        skip(&format!(
            "vm-run.sh's work directory interrupted: {missing:?} not installed (busybox-static, cpio)"
        ));
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    waiting_stand_in(bin.path(), "mkdir", &real_mkdir);
    waiting_stand_in(bin.path(), "mktemp", &real_mktemp);
    write_exe(
        &bin.path().join("qemu-system-x86_64"),
        "#!/bin/sh\necho 'QEMU emulator version 10.0.2 (fake)'\n",
    );
    let kernel = bin.path().join("vmlinuz");
    std::fs::write(&kernel, "not a kernel").unwrap();
    let err_path = bin.path().join("stderr");
    let mut cmd = Command::new("bash");
    cmd.arg(vm_run_sh())
        .args(["--dry-run", "--machine", "pc", "--cpus", "2"])
        .args(["--kernel", kernel.to_str().unwrap(), "--herd", herd_bin()])
        .env("HERD_NO_INSTALL", "1")
        .env("TMPDIR", tmp.path())
        .env("PATH", format!("{}:{path}", bin.path().display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    as_at_a_terminal(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let t0 = Instant::now();
    while !bin.path().join("waiting").exists() {
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "vm-run.sh ended ({st}) before it made its work directory: {}",
                stderr()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the work directory was never made: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let made: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(
        made.len(),
        1,
        "the work directory exists while the stand-in waits"
    );
    let status = ctrl_c_and_wait(&mut child, stderr);
    let err = stderr();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}; {err}");
}
