//! Ctrl-C while vm-run.sh fetches the guest kernel or a qemu: exit 130,
//! said, and no scratch directory left in the cache. The fetches make
//! `$HERD_VM_CACHE/dl.*` (the kernel) and `apt.*` (a private apt for the
//! backports) and used to remove them only when they ended by themselves:
//! a Ctrl-C killed the script (no INT trap yet at that point, and none in
//! the command substitution the fetch runs in) and left them.
//!
//! Nothing is fetched: apt-get and apt-cache are stand-ins on the PATH that
//! answer what the script asks before the download and then wait, as a
//! slow download does, until the test sends SIGINT to the process group.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::ctrl_c::{as_at_a_terminal, ctrl_c_and_wait, write_exe};
use crate::vm_support::{herd_bin, skip, vm_run_sh};

/// Runs vm-run.sh `args` with the stand-ins of `bin` first on the PATH,
/// the cache `cache` and installing allowed (no HERD_NO_INSTALL: the
/// fetch must start); once a stand-in wrote `bin/waiting`, sends SIGINT
/// to the group. `None` (after [`skip`]) when the script ended first
/// because the host lacks what it packs.
fn interrupt_the_fetch(bin: &Path, cache: &Path, args: &[&str]) -> Option<(ExitStatus, String)> {
    // Without HERD_NO_INSTALL, as root, vm-run.sh would install a missing
    // tool first (the stand-in apt-get would wait there instead): the
    // tools it needs must be on the host.
    let path = std::env::var("PATH").unwrap_or_default();
    let on_path = |t: &str| std::env::split_paths(&path).any(|d| d.join(t).is_file());
    let missing: Vec<_> = ["busybox", "cpio", "gzip", "ldd", "dpkg-deb"]
        .into_iter()
        .filter(|t| !on_path(t))
        .collect();
    if !missing.is_empty() {
        skip(&format!(
            "vm-run.sh's fetch interrupted: {missing:?} not installed (busybox-static, cpio, dpkg)"
        ));
        return None;
    }
    let err_path = bin.join("stderr");
    let mut cmd = Command::new("bash");
    cmd.arg(vm_run_sh())
        .args(args)
        .env_remove("HERD_NO_INSTALL")
        .env("HERD_VM_CACHE", cache)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    as_at_a_terminal(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let t0 = Instant::now();
    while !bin.join("waiting").exists() {
        if let Some(st) = child.try_wait().unwrap() {
            let err = stderr();
            if st.code() == Some(125) && err.contains("error: missing") {
                skip(&format!(
                    "vm-run.sh {args:?}: host tools missing ({})",
                    err.trim()
                ));
                return None;
            }
            panic!("vm-run.sh {args:?} ended ({st}) before its fetch started: {err}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the fetch never started: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = ctrl_c_and_wait(&mut child, stderr);
    Some((status, stderr()))
}

/// The cache's entries but its lock files.
fn cache_entries(cache: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for dir in [cache.to_path_buf(), cache.join("backports")] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd {
            let n = e.unwrap().file_name().into_string().unwrap();
            if !n.starts_with('.') && n != "backports" {
                names.push(n);
            }
        }
    }
    names
}

/// The stand-ins: apt-get answers `indextargets` (this host's release's
/// archive, as the system's apt would)
/// and waits at anything else (update, download) after writing
/// `waiting`; apt-cache names the kernel package; a qemu for the PATH.
fn stand_ins(bin: &Path) {
    let waiting = bin.join("waiting");
    write_exe(
        &bin.join("apt-get"),
        &format!(
            "#!/bin/sh\n\
             case \" $* \" in *' indextargets '*) . /etc/os-release; echo \"http://deb.debian.org/debian $VERSION_CODENAME\"; exit 0 ;; esac\n\
             : >'{}'\n\
             exec sleep 60\n",
            waiting.display()
        ),
    );
    write_exe(
        &bin.join("apt-cache"),
        "#!/bin/sh\necho 'linux-image-cloud-amd64'\necho '  Depends: linux-image-6.1.0-99-cloud-amd64'\n",
    );
}

#[test]
fn ctrl_c_while_the_kernel_downloads_leaves_no_dl_directory() {
    let bin = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    stand_ins(bin.path());
    write_exe(
        &bin.path().join("qemu-system-x86_64"),
        "#!/bin/sh\necho 'QEMU emulator version 10.0.2 (fake)'\n",
    );
    let Some((status, err)) = interrupt_the_fetch(
        bin.path(),
        cache.path(),
        &["--prepare", "--cpus", "16", "--herd", herd_bin()],
    ) else {
        return;
    };
    assert!(err.contains("downloading kernel package"), "{err}");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(cache_entries(cache.path()), Vec::<String>::new(), "{err}");
}

/// The x2APIC qemu, fetched with a private apt (`apt.*`) because the
/// system's qemu (a stand-in of Debian 12's 7.2) cannot emulate it.
#[test]
fn ctrl_c_while_the_qemu_is_fetched_leaves_no_apt_directory() {
    let codename = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("VERSION_CODENAME=") && l.len() > "VERSION_CODENAME=".len());
    if !codename {
        skip("vm-run.sh's qemu fetch: no VERSION_CODENAME in /etc/os-release (not Debian)");
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    stand_ins(bin.path());
    write_exe(
        &bin.path().join("qemu-system-x86_64"),
        "#!/bin/sh\n\
         case \" $* \" in *' --version '*) echo 'QEMU emulator version 7.2.0 (fake)'; exit 0 ;; esac\n\
         cat >/dev/null\n\
         echo 'qemu-system-x86_64: -device intel-iommu,intremap=on,eim=on: eim=on requires accel=kvm,kernel-irqchip=split' >&2\n\
         exit 1\n",
    );
    let kernel = bin.path().join("vmlinuz");
    std::fs::write(&kernel, "not a kernel").unwrap();
    let Some((status, err)) = interrupt_the_fetch(
        bin.path(),
        cache.path(),
        &[
            "--prepare",
            "--cpus",
            "300",
            "--kernel",
            kernel.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    assert!(err.contains("fetching qemu from"), "{err}");
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(cache_entries(cache.path()), Vec::<String>::new(), "{err}");
}
