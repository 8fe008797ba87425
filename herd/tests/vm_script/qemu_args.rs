//! The qemu command line of each guest size, from the builder itself:
//! `parse_options` (scripts/vm/options.sh) and `qemu_args`
//! (scripts/vm/qemu-args.sh) sourced into a bash that prints the
//! arguments. No qemu, kernel, initramfs or host tool is needed.

use std::process::Command;

use crate::vm_support::repo;

/// Sources the option parser and the builder, parses `"$@"`, builds with
/// fixed paths (the serial ports' files: $CONSOLE and $RESULT when set)
/// and a 2500 MHz host, prints one argument per line.
const DRIVER: &str = r#"
set -euo pipefail
. "$VM/options.sh"
. "$VM/qemu-args.sh"
parse_options "$@"
qemu_cmd=(qemu-system-x86_64)
kernel=/k/vmlinuz initrd=/w/initrd.gz mhz=2500
console=${CONSOLE:-/w/console.log} result=${RESULT:-/w/result.tar}
qemu_args
printf '%s\n' "${qemu[@]}"
"#;

/// The defaults' variables, cleared so that the caller's environment
/// cannot change what a test sees.
const VM_ENV: &[&str] = &[
    "HERD_VM_CPUS",
    "HERD_VM_MEM",
    "HERD_VM_BOOT_CPUS",
    "HERD_VM_TIMEOUT",
    "HERD_VM_KERNEL",
    "HERD_VM_QEMU",
    "HERD_VM_BOOT_RETRIES",
];

/// The qemu command (binary first) for vm-run.sh's options `args`.
fn qemu_args(args: &[&str]) -> Vec<String> {
    qemu_args_env(args, &[])
}

/// [`qemu_args`] with environment variables set.
fn qemu_args_env(args: &[&str], envs: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(DRIVER)
        .arg("qemu-args")
        .args(args)
        .env("VM", repo().join("scripts/vm"));
    for v in VM_ENV {
        cmd.env_remove(v);
    }
    cmd.envs(envs.iter().copied());
    let out = cmd.output().expect("run bash");
    assert!(
        out.status.success(),
        "qemu_args {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cmd: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(cmd[0], "qemu-system-x86_64", "{cmd:?}");
    cmd
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
    let cmd = qemu_args(&["--cpus", "16", "--numa", "2"]);
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
    // The paths it was given, the two serial ports, no reboot.
    assert_eq!(one(&cmd, "-kernel"), "/k/vmlinuz");
    assert_eq!(one(&cmd, "-initrd"), "/w/initrd.gz");
    assert_eq!(
        values(&cmd, "-serial"),
        ["file:/w/console.log", "chardev:result"]
    );
    assert_eq!(one(&cmd, "-chardev"), "file,id=result,path=/w/result.tar");
    assert_eq!(cmd.last().unwrap(), "-no-reboot");
    // The kernel command line: quiet console, watchdogs off, the delay
    // loop's calibration given (lpj = MHz x 4000 at HZ=250).
    let line = one(&cmd, "-append");
    assert!(
        line.starts_with("console=ttyS0 quiet loglevel=3 "),
        "{line}"
    );
    for w in ["nowatchdog", "nosoftlockup", "lpj=10000000", "tsc=reliable"] {
        assert!(line.split(' ').any(|x| x == w), "no {w} in {line}");
    }
}

#[test]
fn verbose_shows_every_kernel_message_and_qemu_arg_comes_last() {
    let cmd = qemu_args(&["--cpus", "4", "-v", "--qemu-arg", "-foo", "--mem", "2G"]);
    let line = one(&cmd, "-append");
    assert!(line.starts_with("console=ttyS0 loglevel=7 "), "{line}");
    assert!(!line.contains("quiet"), "{line}");
    assert_eq!(one(&cmd, "-m"), "2048M");
    assert_eq!(&cmd[cmd.len() - 2..], ["-no-reboot", "-foo"]);
}

#[test]
fn a_512_vcpu_guest_in_4_nodes_is_q35_with_x2apic_and_a_thread_per_vcpu() {
    let cmd = qemu_args(&["--cpus", "512", "--numa", "4"]);
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
    let cmd = qemu_args(&[
        "--cpus",
        "16",
        "--append",
        "maxcpus=4",
        "--append=no_timer_check",
    ]);
    let line = one(&cmd, "-append");
    // vm-run.sh's own settings stay, the extra ones come after them.
    assert!(line.starts_with("console=ttyS0 "), "{line}");
    assert!(line.ends_with(" maxcpus=4 no_timer_check"), "{line}");
}

/// `--boot-cpus K` below `--cpus`: the kernel boots K (maxcpus=K), and the
/// guest runs without the devices and the cache control that make each
/// later CPU expensive, and is told the TSC's rate; at K = --cpus (the
/// default up to 255) nothing changes.
#[test]
fn boot_cpus_below_cpus_boot_that_many_without_pit_hpet_mtrr_or_pat() {
    let late = "maxcpus=8 nopat no_timer_check tsc_early_khz=2500000";
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
        let cmd = qemu_args(args);
        assert_eq!(one(&cmd, "-machine"), machine, "{args:?}");
        assert_eq!(values(&cmd, "-cpu").first().copied(), cpu, "{args:?}");
        let line = one(&cmd, "-append");
        assert_eq!(line.contains(late), cpu.is_some(), "{args:?}: {line}");
        assert_eq!(line.contains("maxcpus="), cpu.is_some(), "{args:?}: {line}");
    }
    // HERD_VM_BOOT_CPUS is the default.
    let cmd = qemu_args_env(&["--cpus", "16"], &[("HERD_VM_BOOT_CPUS", "8")]);
    let line = one(&cmd, "-append");
    assert!(line.contains(late), "{line}");
}

#[test]
fn tcg_threading_follows_the_size_unless_given() {
    for (args, want) in [
        (&["--cpus", "2"][..], "tcg,thread=single"),
        (&["--cpus", "63"], "tcg,thread=single"),
        (&["--cpus", "64"], "tcg,thread=multi"),
        (&["--cpus", "300"], "tcg,thread=multi"),
        (&["--cpus", "512", "--tcg", "single"], "tcg,thread=single"),
        (&["--cpus", "2", "--tcg", "multi"], "tcg,thread=multi"),
    ] {
        assert_eq!(one(&qemu_args(args), "-accel"), want, "{args:?}");
    }
}

#[test]
fn sockets_per_node_only_where_the_apic_ids_fit() {
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
        assert_eq!(one(&qemu_args(args), "-smp"), smp, "{args:?}");
    }
    let cmd = qemu_args(&["--cpus", "10", "--numa", "3"]);
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
fn x2apic_ids_put_half_the_vcpus_in_a_socket_from_id_256() {
    let cmd = qemu_args(&["--cpus", "16", "--numa", "2", "--x2apic-ids"]);
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

/// Counts with a leading zero are decimal, as written. bash's arithmetic
/// reads them as octal where test(1) reads decimal: `--cpus 09` was a bash
/// error, `--cpus 010 --numa 02` gave `-smp 010,sockets=2,cores=4` (8 in
/// the arithmetic, 10 to qemu) and `--mem 01536M` a guest of `-m 01536M`.
#[test]
fn counts_with_a_leading_zero_are_decimal() {
    let cmd = qemu_args(&["--cpus", "010", "--numa", "02", "--mem", "01536M"]);
    assert_eq!(one(&cmd, "-smp"), "10,sockets=2,cores=5,threads=1");
    assert_eq!(one(&cmd, "-m"), "1536M");
    assert_eq!(
        values(&cmd, "-numa"),
        [
            "node,nodeid=0,cpus=0-4,memdev=m0",
            "node,nodeid=1,cpus=5-9,memdev=m1"
        ]
    );
    let cmd = qemu_args(&["--cpus", "09", "--boot-cpus", "08", "--timeout", "060"]);
    assert_eq!(one(&cmd, "-smp"), "9");
    assert!(one(&cmd, "-append").contains(" maxcpus=8 "), "{cmd:?}");
    assert_eq!(
        one(&qemu_args(&["--cpus", "2", "--mem", "08G"]), "-m"),
        "8192M"
    );
    let cmd = qemu_args_env(&[], &[("HERD_VM_CPUS", "016")]);
    assert_eq!(one(&cmd, "-smp"), "16");
}

/// A comma in the work directory's path (from `$TMPDIR`): qemu reads a
/// `-chardev` value as `key=value` pairs split at commas, with a doubled
/// comma standing for one, so the result port's path has its commas
/// doubled; `-serial file:PATH` takes the rest of its argument as it is.
/// The path used to go in as it was: qemu refused it ("Invalid parameter")
/// and every run from such a directory failed to boot, exit 125. The
/// value is then given to the system's qemu, which must create the file
/// at the path meant.
#[test]
fn a_comma_in_the_work_directory_is_doubled_in_the_chardev_path() {
    let dir = tempfile::Builder::new()
        .prefix("herd-vm,comma.")
        .tempdir()
        .unwrap();
    let result = dir.path().join("result.tar");
    let console = dir.path().join("console.log");
    let (result, console) = (result.to_str().unwrap(), console.to_str().unwrap());
    let cmd = qemu_args_env(
        &["--cpus", "2"],
        &[("RESULT", result), ("CONSOLE", console)],
    );
    let chardev = one(&cmd, "-chardev");
    assert_eq!(
        chardev,
        format!("file,id=result,path={}", result.replace(',', ",,"))
    );
    assert_eq!(
        values(&cmd, "-serial"),
        [format!("file:{console}").as_str(), "chardev:result"]
    );
    // What qemu makes of it: the result file at the path meant.
    let qmp = r#"{"execute":"qmp_capabilities"}
{"execute":"quit"}
"#;
    let mut qemu = Command::new("qemu-system-x86_64");
    qemu.args(["-nodefaults", "-no-user-config", "-display", "none"])
        .args(["-S", "-qmp", "stdio", "-machine", "none"])
        .args(["-chardev", chardev])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = match qemu.spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::vm_support::skip(&format!(
                "qemu's reading of the -chardev value: qemu-system-x86_64 does not run ({e}; Debian package qemu-system-x86)"
            ));
            return;
        }
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(qmp.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "qemu refused -chardev {chardev}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::path::Path::new(result).exists(),
        "qemu did not create {result} from -chardev {chardev}"
    );
}
