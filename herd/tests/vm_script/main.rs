//! scripts/vm-run.sh and its parts (scripts/vm/) without a guest: its
//! options and errors, what it refuses to install under the test command,
//! the qemu it picks and the guest kernel (here), the qemu command line of
//! each guest size from the builder itself (`qemu_args.rs`), and the
//! guest's CPU hotplug summary (`online_summary.rs`).
//!
//! A fake qemu stands in for the real one: it answers `--version` and the
//! script's x2APIC probe (accepting it, like qemu 8.1+, or refusing it with
//! Debian 12's qemu 7.2 error), so these tests run on any host in seconds.
//! The tests that run vm-run.sh past its checks need what it packs into
//! every initramfs (busybox, cpio; scripts/test-setup.sh installs them).
//!
//!     cargo test -p herd --test vm_script

#[path = "../vm_support/mod.rs"]
mod vm_support;

mod ctrl_c;
mod fetch_interrupt;
mod online_summary;
mod qemu_args;
mod work_interrupt;

use std::path::{Path, PathBuf};

use vm_support::{code, herd_bin, skip, vm_run, vm_run_in};

#[test]
fn help_lists_every_option() {
    let help = vm_run(&["--help"], &[]);
    assert_eq!(code(&help), 0);
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--cpus",
        "--numa",
        "--mem",
        "--machine",
        "--tcg",
        "--qemu ",
        "--timeout",
        "--kernel",
        "--herd",
        "--script",
        "--out-dir",
        "--env",
        "--qemu-arg",
        "--append",
        "--x2apic-ids",
        "--boot-cpus",
        "--prepare",
        "--dry-run",
        "x2APIC",
        "Exit status",
    ] {
        assert!(text.contains(flag), "--help does not mention {flag}");
    }
}

#[test]
fn bad_options_are_usage_errors_naming_the_option() {
    for (bad, names) in [
        (&["--cpus", "0"][..], "--cpus"),
        (&["--cpus", "4097"], "--cpus"),
        (&["--cpus", "99999999999999999999"], "--cpus"),
        (&["--cpus", "lots"], "--cpus"),
        (&["--cpus"], "--cpus"),
        (&["--mem", "12X"], "--mem"),
        (&["--mem", "128M", "--numa", "4", "--cpus", "8"], "--mem"),
        (&["--timeout", "0"], "--timeout"),
        (&["--numa", "3", "--cpus", "2"], "--numa"),
        (&["--numa", "0"], "--numa"),
        (&["--machine", "pc", "--cpus", "256"], "--machine pc"),
        (&["--machine", "virt"], "--machine"),
        (&["--tcg", "fast"], "--tcg"),
        (&["--x2apic-ids", "--cpus", "7"], "--x2apic-ids"),
        (&["--x2apic-ids", "--cpus", "260"], "--x2apic-ids"),
        (
            &["--x2apic-ids", "--cpus", "8", "--numa", "4"],
            "--x2apic-ids",
        ),
        (&["--x2apic-ids", "--machine", "pc"], "--x2apic-ids"),
        (&["--boot-cpus", "0"], "--boot-cpus"),
        (&["--cpus", "8", "--boot-cpus", "9"], "--boot-cpus"),
        (&["--boot-cpus", "some"], "--boot-cpus"),
        // Nothing to trace: every vCPU boots.
        (&["--cpus", "8", "--trace-online"], "--trace-online"),
        (
            &["--cpus", "8", "--boot-cpus", "8", "--trace-online"],
            "--trace-online",
        ),
        (&["--qemu", "/nonexistent/qemu-system-x86_64"], "--qemu"),
        (&["--qemu", "no-such-qemu-on-path"], "--qemu"),
        (&["--frobnicate"], "--frobnicate"),
        (&["--env", "1BAD=x"], "--env"),
        (&["--script", "/nonexistent/script"], "--script"),
        (&["--kernel", "/nonexistent/vmlinuz"], "--kernel"),
    ] {
        let out = vm_run(bad, &[]);
        assert_eq!(code(&out), 2, "vm-run.sh {bad:?} should be a usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("error:") && err.contains(names),
            "the message for {bad:?} does not name {names}: {err}"
        );
    }
}

#[test]
fn a_guest_bigger_than_the_host_memory_is_refused_with_exit_3() {
    let out = vm_run(&["--cpus", "4", "--mem", "100000G"], &[]);
    assert_eq!(code(&out), 3, "a resource refusal");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MemAvailable"), "{err}");
    assert!(
        err.contains("102400000M"),
        "the guest's size is named: {err}"
    );
}

// ------------------------------------------------------------ the host

/// A stand-in for qemu-system-x86_64 at `dir/usr/bin/` (the layout the
/// script fetches a qemu into), with `usr/share/qemu` beside it. `x2apic`
/// says whether it accepts the script's probe for a q35 guest with x2APIC.
struct FakeQemu {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    root: PathBuf,
    kernel: PathBuf,
}

fn fake_qemu(version: &str, x2apic: bool) -> FakeQemu {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("qemu");
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::create_dir_all(root.join("usr/share/qemu")).unwrap();
    let bin = root.join("usr/bin/qemu-system-x86_64");
    let refuse = if x2apic {
        "exit 0".to_string()
    } else {
        "echo 'qemu-system-x86_64: -device intel-iommu,intremap=on,eim=on: \
         eim=on requires accel=kvm,kernel-irqchip=split' >&2; exit 1"
            .to_string()
    };
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\n\
             case \" $* \" in *' --version '*) echo 'QEMU emulator version {version} (fake)'; exit 0 ;; esac\n\
             cat >/dev/null\n\
             case \"$*\" in *eim=on*) {refuse} ;; esac\n\
             echo 'fake qemu: does not boot' >&2; exit 1\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let kernel = dir.path().join("vmlinuz");
    std::fs::write(&kernel, b"not a kernel: --dry-run never boots it").unwrap();
    FakeQemu {
        _dir: dir,
        bin,
        root,
        kernel,
    }
}

impl FakeQemu {
    /// `vm-run.sh --dry-run --cpus CPUS` with this qemu, its kernel and the
    /// herd under test.
    fn dry_run(&self, cpus: &str, envs: &[(&str, &str)]) -> std::process::Output {
        vm_run(
            &[
                "--dry-run",
                "--cpus",
                cpus,
                "--qemu",
                self.bin.to_str().unwrap(),
                "--kernel",
                self.kernel.to_str().unwrap(),
                "--herd",
                herd_bin(),
            ],
            envs,
        )
    }

    /// [`FakeQemu::dry_run`] on this host, or `None` after [`skip`] when it
    /// lacks a tool vm-run.sh packs.
    fn dry_run_here(&self, cpus: &str) -> Option<(i32, Vec<String>, String)> {
        let out = self.dry_run(cpus, &[]);
        if tools_missing(&out, &format!("vm-run.sh --dry-run --cpus {cpus}")) {
            return None;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        Some((
            code(&out),
            stdout.lines().map(String::from).collect(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

/// Whether vm-run.sh stopped because the host lacks a tool it packs
/// (busybox, cpio); then the test [`skip`]s naming it.
fn tools_missing(out: &std::process::Output, what: &str) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    if code(out) == 125 && err.contains("error: missing") {
        skip(&format!("{what}: host tools missing ({})", err.trim()));
        return true;
    }
    false
}

/// The qemu command `--dry-run` prints: the plumbing around the builder
/// (qemu_args.rs tests the builder itself), here for a qemu unpacked into
/// a folder, as the script fetches one: it brings its own firmware and
/// modules.
#[test]
fn a_fetched_qemu_brings_its_firmware_and_modules() {
    let q = fake_qemu("7.2.0", false);
    let Some((rc, cmd, err)) = q.dry_run_here("16") else {
        return;
    };
    assert_eq!(rc, 0, "{err}");
    let root = q.root.to_str().unwrap();
    assert_eq!(
        cmd[0],
        format!("env QEMU_MODULE_DIR={root}/usr/lib/x86_64-linux-gnu/qemu")
    );
    assert!(cmd[1].starts_with(&format!("env LD_LIBRARY_PATH={root}/usr/lib/")));
    assert_eq!(cmd[2], q.bin.to_str().unwrap());
    assert_eq!(
        &cmd[3..7],
        [
            "-L",
            &format!("{root}/usr/share/qemu"),
            "-L",
            &format!("{root}/usr/share/seabios")
        ]
    );
    // The initramfs it packed, and the kernel it was given.
    let i = cmd.iter().position(|a| a == "-initrd").unwrap();
    assert!(cmd[i + 1].ends_with("/initrd.gz"), "{cmd:?}");
    let k = cmd.iter().position(|a| a == "-kernel").unwrap();
    assert_eq!(cmd[k + 1], q.kernel.to_str().unwrap());
}

/// `--out-dir` is made and tried before the guest boots: a path that
/// cannot be a writable directory is a usage error naming it (it used to
/// be found after the guest ran, exit 1 from mkdir or cp, herd's stdout
/// never printed); `--dry-run` checks it too.
#[test]
fn an_out_dir_that_cannot_be_written_is_refused_before_the_boot() {
    let q = fake_qemu("10.0.2", true);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "precious").unwrap();
    for bad in [file.clone(), file.join("below-a-file")] {
        let bad = bad.to_str().unwrap();
        let out = vm_run(
            &[
                "--dry-run",
                "--cpus",
                "2",
                "--qemu",
                q.bin.to_str().unwrap(),
                "--kernel",
                q.kernel.to_str().unwrap(),
                "--herd",
                herd_bin(),
                "--out-dir",
                bad,
            ],
            &[],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 2, "--out-dir {bad}: {err}");
        assert!(err.contains("--out-dir") && err.contains(bad), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
}

/// Paths that begin with a dash, and counts with a leading zero, through
/// the whole script (`--dry-run` packs the initramfs): `--script -s.sh`
/// was cp's option (exit 1), `--cpus 08` a bash error (exit 1).
#[test]
fn dash_paths_and_leading_zero_counts_go_through() {
    let q = fake_qemu("10.0.2", true);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("-s.sh"), "herd env\n").unwrap();
    let out = vm_run_in(
        Some(dir.path()),
        &[
            "--dry-run",
            "--cpus",
            "08",
            "--qemu",
            q.bin.to_str().unwrap(),
            "--kernel",
            q.kernel.to_str().unwrap(),
            "--herd",
            herd_bin(),
            "--script",
            "-s.sh",
            "--out-dir",
            "-out",
        ],
        &[],
    );
    if tools_missing(&out, "vm-run.sh --dry-run --script -s.sh") {
        return;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 0, "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cmd: Vec<&str> = stdout.lines().collect();
    let i = cmd.iter().position(|a| *a == "-smp").unwrap();
    assert_eq!(cmd[i + 1], "8", "{cmd:?}");
    assert!(dir.path().join("-out").is_dir(), "--out-dir -out is ./-out");
}

/// Ctrl-C while the guest runs (SIGINT to the whole process group, as a
/// terminal sends it): exit 130, qemu gone, the work directory removed.
/// The console relay ends on that SIGINT by itself, and the cleanup's kill
/// of it then failed under set -e: exit 1, the work directory (initramfs,
/// console) left in $TMPDIR. The qemu here is a stand-in that quits on
/// SIGINT as qemu does (python: a shell cannot trap a signal ignored at
/// its start, as SIGINT is for a background job).
#[test]
fn ctrl_c_while_the_guest_runs_exits_130_and_leaves_nothing() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let qemu = dir.path().join("qemu-system-x86_64");
    let started = dir.path().join("started");
    std::fs::write(
        &qemu,
        format!(
            r#"#!/usr/bin/env python3
import os, signal, sys, time
if "--version" in sys.argv:
    print("QEMU emulator version 10.0.2 (fake)")
    sys.exit(0)
signal.signal(signal.SIGINT, lambda *_: sys.exit(1))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
with open({started:?}, "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
"#
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
    let kernel = dir.path().join("vmlinuz");
    std::fs::write(&kernel, "not a kernel").unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let err_path = dir.path().join("stderr");
    let mut cmd = Command::new("bash");
    cmd.arg(vm_support::vm_run_sh())
        .args(["--cpus", "2", "--qemu", qemu.to_str().unwrap()])
        .args(["--kernel", kernel.to_str().unwrap(), "--herd", herd_bin()])
        .args(["--", "env"])
        .env("HERD_NO_INSTALL", "1")
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    // SIGINT as at a terminal: otherwise vm-run.sh in a test run started
    // in the background would never see the Ctrl-C (the stand-in qemu,
    // which sets its own handler, exits 1 and the script reports a failed
    // boot, 125).
    ctrl_c::as_at_a_terminal(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    // Until the stand-in qemu runs (packing the initramfs takes a second).
    let t0 = Instant::now();
    while !started.exists() {
        if let Some(st) = child.try_wait().unwrap() {
            let err = stderr();
            if st.code() == Some(125) && err.contains("error: missing") {
                skip(&format!(
                    "vm-run.sh Ctrl-C: host tools missing ({})",
                    err.trim()
                ));
                return;
            }
            panic!("vm-run.sh ended ({st}) before qemu started: {err}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "qemu never started: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let qemu_pid: i32 = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let status = ctrl_c::ctrl_c_and_wait(&mut child, stderr);
    let err = stderr();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in $TMPDIR: {left:?}");
    // Gone (a few seconds for init to reap it).
    let t0 = Instant::now();
    while nix::sys::signal::kill(nix::unistd::Pid::from_raw(qemu_pid), None).is_ok() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "qemu {qemu_pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn above_255_a_qemu_without_x2apic_is_refused_naming_what_it_said() {
    let q = fake_qemu("7.2.0", false);
    let Some((rc, _, err)) = q.dry_run_here("300") else {
        return;
    };
    assert_eq!(rc, 125, "{err}");
    for want in ["7.2.0", "x2APIC", "8.1", "eim=on requires accel=kvm"] {
        assert!(err.contains(want), "no '{want}' in: {err}");
    }
}

/// The default guest kernel: the release's cloud kernel up to 255 vCPUs,
/// the backports one above (`$HERD_VM_CACHE/backports/`), each fetched once
/// and found in the cache after (here both are there already).
#[test]
fn above_255_vcpus_the_guest_kernel_is_the_backports_one() {
    let q = fake_qemu("10.0.2", true);
    let cache = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cache.path().join("backports")).unwrap();
    let release = cache.path().join("vmlinuz-6.1.0-99-cloud-amd64");
    let backports = cache.path().join("backports/vmlinuz-6.12.0-99-cloud-amd64");
    std::fs::write(&release, "fake").unwrap();
    std::fs::write(&backports, "fake").unwrap();
    for (cpus, want) in [("16", &release), ("255", &release), ("256", &backports)] {
        let out = vm_run(
            &[
                "--prepare",
                "--cpus",
                cpus,
                "--qemu",
                q.bin.to_str().unwrap(),
            ],
            &[("HERD_VM_CACHE", cache.path().to_str().unwrap())],
        );
        if tools_missing(&out, "vm-run.sh --prepare") {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 0, "--cpus {cpus}: {err}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.lines().last(),
            Some(want.to_str().unwrap()),
            "--cpus {cpus}"
        );
    }
}

// ------------------------------------------------- nothing installed here

/// A directory of links to every command on the PATH but `leave_out`: the
/// host as it would be without that package.
fn path_without(dir: &Path, leave_out: &[&str]) -> String {
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let link = dir.join(&name);
            if leave_out.iter().any(|l| name == **l) || link.exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), link);
        }
    }
    dir.to_str().unwrap().to_string()
}

/// Under the test command (HERD_NO_INSTALL=1, which [`vm_run`] always
/// sets) a missing tool is an error naming its Debian package, even as
/// root: no test installs anything.
#[test]
fn a_missing_tool_is_named_never_installed() {
    let q = fake_qemu("10.0.2", true);
    let bin = tempfile::tempdir().unwrap();
    let path = path_without(bin.path(), &["busybox", "cpio"]);
    let out = q.dry_run("2", &[("PATH", &path)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 125, "{err}");
    assert!(
        err.contains("missing busybox cpio: install the Debian package(s) busybox-static cpio")
            && err.contains("HERD_NO_INSTALL=1"),
        "{err}"
    );
    assert!(!err.contains("installing"), "{err}");
}

/// Nor does a test fetch a guest kernel or a qemu: with an empty cache
/// vm-run.sh names the --prepare that would.
#[test]
fn a_missing_kernel_or_qemu_is_named_never_fetched() {
    let cache = tempfile::tempdir().unwrap();
    let c = cache.path().to_str().unwrap();
    let q = fake_qemu("10.0.2", true);
    for (cpus, want) in [
        ("16", "no guest kernel in "),
        ("300", "no guest kernel for more than 255 vCPUs in "),
    ] {
        let out = vm_run(
            &[
                "--prepare",
                "--cpus",
                cpus,
                "--qemu",
                q.bin.to_str().unwrap(),
            ],
            &[("HERD_VM_CACHE", c)],
        );
        if tools_missing(&out, "vm-run.sh --prepare") {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 125, "{err}");
        assert!(err.contains(want) && err.contains("--prepare"), "{err}");
    }
    // A system qemu that cannot emulate x2APIC: the newer one would be
    // fetched, which a test does not do.
    let old = fake_qemu("7.2.0", false);
    let path = format!(
        "{}:{}",
        old.bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = vm_run(
        &[
            "--prepare",
            "--cpus",
            "300",
            "--kernel",
            old.kernel.to_str().unwrap(),
        ],
        &[("HERD_VM_CACHE", c), ("PATH", &path)],
    );
    if tools_missing(&out, "vm-run.sh --prepare") {
        return;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 125, "{err}");
    assert!(
        err.contains("no qemu that emulates x2APIC in ") && err.contains("--x2apic-ids --prepare"),
        "{err}"
    );
    // Nothing came into the cache (its lock files aside).
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        assert!(n.starts_with('.') || n == "backports", "{n} in the cache");
    }
    assert_eq!(
        std::fs::read_dir(cache.path().join("backports"))
            .unwrap()
            .filter(|e| !e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.'))
            .count(),
        0
    );
}
