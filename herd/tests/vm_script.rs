//! scripts/vm-run.sh without a guest: its options, its errors, and the qemu
//! command line it builds for each guest size (`--dry-run` prints it).
//!
//! A fake qemu stands in for the real one: it answers `--version` and the
//! script's x2APIC probe (accepting it, like qemu 8.1+, or refusing it with
//! Debian 12's qemu 7.2 error), so these tests run on any host in seconds.
//! What they need is what the script packs into every initramfs (busybox,
//! cpio): installed as root, else the tests that pack one skip loudly.
//!
//!     cargo test -p herd --test vm_script

mod vm_support;

use std::path::PathBuf;

use vm_support::{code, herd_bin, skipped, vm_run};

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

// ------------------------------------------------------------ --dry-run

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

/// `vm-run.sh --dry-run` with `args`: the qemu command line, one argument
/// per line; `None` (skipped loudly) when the host lacks the tools to pack
/// an initramfs and installing them needs root.
fn dry_run(q: &FakeQemu, args: &[&str]) -> Option<Vec<String>> {
    dry_run_env(q, args, &[])
}

/// [`dry_run`] with environment variables set.
fn dry_run_env(q: &FakeQemu, args: &[&str], envs: &[(&str, &str)]) -> Option<Vec<String>> {
    let mut all = vec![
        "--dry-run",
        "--qemu",
        q.bin.to_str().unwrap(),
        "--kernel",
        q.kernel.to_str().unwrap(),
        "--herd",
        herd_bin(),
    ];
    all.extend_from_slice(args);
    let out = vm_run(&all, envs);
    let err = String::from_utf8_lossy(&out.stderr);
    if code(&out) == 125 && err.contains("error: missing") {
        skipped(&format!(
            "vm-run.sh --dry-run: host tools missing and not root ({})",
            err.trim()
        ));
        return None;
    }
    assert_eq!(code(&out), 0, "vm-run.sh {args:?} --dry-run: {err}");
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect(),
    )
}

/// Every value following `flag` on the command line.
fn values<'a>(cmd: &'a [String], flag: &str) -> Vec<&'a str> {
    cmd.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].as_str())
        .collect()
}

fn one<'a>(cmd: &'a [String], flag: &str) -> &'a str {
    match values(cmd, flag)[..] {
        [v] => v,
        ref vs => panic!("{flag} given {} times ({vs:?}): {cmd:?}", vs.len()),
    }
}

#[test]
fn a_small_guest_is_a_pc_machine_on_one_tcg_thread() {
    let q = fake_qemu("7.2.0", false);
    let Some(cmd) = dry_run(&q, &["--cpus", "16", "--numa", "2"]) else {
        return;
    };
    assert_eq!(one(&cmd, "-machine"), "pc");
    assert!(
        values(&cmd, "-device").is_empty(),
        "no IOMMU on pc: {cmd:?}"
    );
    assert!(
        values(&cmd, "-cpu").is_empty(),
        "the default CPU model on pc"
    );
    assert_eq!(one(&cmd, "-accel"), "tcg,thread=single");
    assert_eq!(one(&cmd, "-smp"), "16,sockets=2,cores=8,threads=1");
    assert_eq!(one(&cmd, "-m"), "1024M");
    assert_eq!(
        values(&cmd, "-numa"),
        [
            "node,nodeid=0,cpus=0-7,memdev=m0",
            "node,nodeid=1,cpus=8-15,memdev=m1"
        ]
    );
    assert_eq!(
        values(&cmd, "-object"),
        [
            "memory-backend-ram,id=m0,size=512M",
            "memory-backend-ram,id=m1,size=512M"
        ]
    );
    // The fetched-qemu layout brings its own firmware and modules.
    let root = q.root.to_str().unwrap();
    assert_eq!(
        values(&cmd, "-L"),
        [
            format!("{root}/usr/share/qemu"),
            format!("{root}/usr/share/seabios")
        ]
    );
    assert!(
        cmd.contains(&format!(
            "env QEMU_MODULE_DIR={root}/usr/lib/x86_64-linux-gnu/qemu"
        )),
        "{cmd:?}"
    );
}

#[test]
fn a_512_vcpu_guest_in_4_nodes_is_q35_with_x2apic_and_a_thread_per_vcpu() {
    let q = fake_qemu("10.0.2", true);
    let Some(cmd) = dry_run(&q, &["--cpus", "512", "--numa", "4"]) else {
        return;
    };
    // 64 vCPUs at boot, the others brought online by the guest's init:
    // no PIT, HPET, MTRRs or PAT (see boot_cpus_below_cpus_...).
    assert_eq!(one(&cmd, "-machine"), "q35,pit=off,hpet=off");
    assert_eq!(one(&cmd, "-cpu"), "qemu64,x2apic=on,mtrr=off");
    assert!(one(&cmd, "-append").contains(" maxcpus=64 "));
    assert_eq!(one(&cmd, "-device"), "intel-iommu,intremap=on,eim=on");
    assert_eq!(one(&cmd, "-accel"), "tcg,thread=multi");
    assert_eq!(one(&cmd, "-smp"), "512,sockets=4,cores=128,threads=1");
    // 512M + 8M per vCPU, split evenly.
    assert_eq!(one(&cmd, "-m"), "4608M");
    let nodes: Vec<String> = (0..4)
        .map(|n| {
            format!(
                "node,nodeid={n},cpus={}-{},memdev=m{n}",
                128 * n,
                128 * n + 127
            )
        })
        .collect();
    assert_eq!(values(&cmd, "-numa"), nodes);
    assert!(values(&cmd, "-object")
        .iter()
        .all(|o| o.ends_with(",size=1152M")));
}

#[test]
fn append_adds_to_the_guest_kernel_command_line() {
    let q = fake_qemu("10.0.2", true);
    let Some(cmd) = dry_run(
        &q,
        &[
            "--cpus",
            "16",
            "--append",
            "maxcpus=4",
            "--append=no_timer_check",
        ],
    ) else {
        return;
    };
    let line = one(&cmd, "-append");
    // vm-run.sh's own settings stay, the extra ones come after them.
    assert!(line.starts_with("console=ttyS0 "), "{line}");
    assert!(line.ends_with(" maxcpus=4 no_timer_check"), "{line}");
}

/// `--boot-cpus K` below `--cpus`: the kernel boots K (maxcpus=K), and the
/// guest runs without the devices and the cache control that make each
/// later CPU expensive; at K = --cpus (the default up to 255) nothing
/// changes.
#[test]
fn boot_cpus_below_cpus_boot_that_many_without_pit_hpet_mtrr_or_pat() {
    let q = fake_qemu("10.0.2", true);
    let late = "maxcpus=8 nopat no_timer_check tsc_early_khz=";
    for (args, machine, cpu) in [
        (
            &["--cpus", "16", "--boot-cpus", "8"][..],
            "pc,pit=off,hpet=off",
            Some("qemu64,mtrr=off"),
        ),
        (
            &["--cpus", "16", "--x2apic-ids", "--boot-cpus", "8"],
            "q35,pit=off,hpet=off",
            Some("qemu64,x2apic=on,mtrr=off"),
        ),
        (&["--cpus", "16", "--boot-cpus", "16"], "pc", None),
        (&["--cpus", "255"], "pc", None),
    ] {
        let Some(cmd) = dry_run(&q, args) else {
            return;
        };
        assert_eq!(one(&cmd, "-machine"), machine, "{args:?}");
        assert_eq!(values(&cmd, "-cpu").first().copied(), cpu, "{args:?}");
        let line = one(&cmd, "-append");
        assert_eq!(line.contains(late), cpu.is_some(), "{args:?}: {line}");
        assert_eq!(line.contains("maxcpus="), cpu.is_some(), "{args:?}: {line}");
    }
    // HERD_VM_BOOT_CPUS is the default.
    let Some(cmd) = dry_run_env(&q, &["--cpus", "16"], &[("HERD_VM_BOOT_CPUS", "8")]) else {
        return;
    };
    let line = one(&cmd, "-append");
    assert!(line.contains(late), "{line}");
}

#[test]
fn tcg_threading_follows_the_size_unless_given() {
    let q = fake_qemu("10.0.2", true);
    for (args, want) in [
        (&["--cpus", "2"][..], "tcg,thread=single"),
        (&["--cpus", "300"], "tcg,thread=multi"),
        (&["--cpus", "512", "--tcg", "single"], "tcg,thread=single"),
        (&["--cpus", "2", "--tcg", "multi"], "tcg,thread=multi"),
    ] {
        let Some(cmd) = dry_run(&q, args) else {
            return;
        };
        assert_eq!(one(&cmd, "-accel"), want, "{args:?}");
    }
}

#[test]
fn sockets_per_node_only_where_the_apic_ids_fit() {
    let q = fake_qemu("10.0.2", true);
    for (args, smp) in [
        // pc: ids 0-254. 2 x 100 cores: socket 1 starts at id 128.
        (
            &["--cpus", "200", "--numa", "2"][..],
            "200,sockets=2,cores=100,threads=1",
        ),
        // 3 x 85 cores: socket 2 would start at id 256.
        (&["--cpus", "255", "--numa", "3"], "255"),
        // q35 has x2APIC: any split.
        (
            &["--cpus", "255", "--numa", "3", "--machine", "q35"],
            "255,sockets=3,cores=85,threads=1",
        ),
        // Uneven nodes: no socket split, the nodes still cover every vCPU.
        (&["--cpus", "10", "--numa", "3"], "10"),
        (&["--cpus", "8"], "8"),
    ] {
        let Some(cmd) = dry_run(&q, args) else {
            return;
        };
        assert_eq!(one(&cmd, "-smp"), smp, "{args:?}");
    }
    let Some(cmd) = dry_run(&q, &["--cpus", "10", "--numa", "3"]) else {
        return;
    };
    assert_eq!(
        values(&cmd, "-numa"),
        [
            "node,nodeid=0,cpus=0-2,memdev=m0",
            "node,nodeid=1,cpus=3-5,memdev=m1",
            "node,nodeid=2,cpus=6-9,memdev=m2"
        ]
    );
    // 1024M does not split in 3: 1023M, 341M each.
    assert_eq!(one(&cmd, "-m"), "1023M");
}

#[test]
fn above_255_a_qemu_without_x2apic_is_refused_naming_what_it_said() {
    let q = fake_qemu("7.2.0", false);
    let kernel = q.kernel.to_str().unwrap();
    let out = vm_run(
        &[
            "--dry-run",
            "--cpus",
            "300",
            "--qemu",
            q.bin.to_str().unwrap(),
            "--kernel",
            kernel,
            "--herd",
            herd_bin(),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 125, "{err}");
    for want in ["7.2.0", "x2APIC", "8.1", "eim=on requires accel=kvm"] {
        assert!(err.contains(want), "no '{want}' in: {err}");
    }
}

#[test]
fn x2apic_ids_put_half_the_vcpus_in_a_socket_from_id_256() {
    let q = fake_qemu("10.0.2", true);
    let Some(cmd) = dry_run(&q, &["--cpus", "16", "--numa", "2", "--x2apic-ids"]) else {
        return;
    };
    assert_eq!(one(&cmd, "-machine"), "q35");
    assert_eq!(one(&cmd, "-cpu"), "qemu64,x2apic=on");
    // 129 cores per socket: 8 bits of core id, socket 1 from APIC id 256.
    assert_eq!(
        one(&cmd, "-smp"),
        "8,maxcpus=258,sockets=2,cores=129,threads=1"
    );
    let mut devices = vec!["intel-iommu,intremap=on,eim=on".to_string()];
    devices
        .extend((0..8).map(|c| format!("qemu64-x86_64-cpu,socket-id=1,core-id={c},thread-id=0")));
    assert_eq!(values(&cmd, "-device"), devices);
    assert_eq!(
        values(&cmd, "-numa"),
        [
            "node,nodeid=0,memdev=m0",
            "cpu,node-id=0,socket-id=0",
            "node,nodeid=1,memdev=m1",
            "cpu,node-id=1,socket-id=1"
        ]
    );
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
        let err = String::from_utf8_lossy(&out.stderr);
        if code(&out) == 125 && err.contains("error: missing") {
            skipped(&format!(
                "vm-run.sh --prepare: host tools missing and not root ({})",
                err.trim()
            ));
            return;
        }
        assert_eq!(code(&out), 0, "--cpus {cpus}: {err}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.lines().last(),
            Some(want.to_str().unwrap()),
            "--cpus {cpus}"
        );
    }
}
