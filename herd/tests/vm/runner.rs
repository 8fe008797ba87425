//! scripts/vm-run.sh on small guests: what it hands back (stdout byte for
//! byte, the exit status, files, stderr), its time-out, its console relay,
//! and the libraries it packs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::small_guests_enabled;
use crate::vm_support::{code, herd_bin, skip, vm_run};

/// A guest run exited `want`, and its stderr contains each of `needles`
/// (vm-run.sh relays the guest's stderr and console there); returns that
/// stderr.
fn assert_guest_exit(out: &Output, want: i32, needles: &[&str]) -> String {
    assert_eq!(
        code(out),
        want,
        "guest exit status; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    for n in needles {
        assert!(err.contains(n), "no {n:?} in the guest's stderr:\n{err}");
    }
    err
}

#[test]
fn guest_returns_stdout_byte_for_byte_and_the_exit_status() {
    if !small_guests_enabled("guest_returns_stdout_byte_for_byte_and_the_exit_status") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bytes.sh");
    // Every byte value (CR, LF, NUL, 0xff...), a megabyte of random data,
    // text on stderr, a file in $HERD_VM_OUT, quoting of --env, and a
    // non-zero exit status.
    std::fs::write(
        &script,
        r#"
i=0
while [ $i -lt 256 ]; do printf "\\$(printf %o $i)"; i=$((i+1)); done
head -c 1048576 /dev/urandom > rand.bin
cat rand.bin
sha256sum rand.bin | cut -d' ' -f1 > rand.sha256
echo "note on stderr" >&2
printf '%s' "$GREETING" > greeting.txt
exit 7
"#,
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = vm_run(
        &[
            "--cpus",
            "2",
            "--herd",
            herd_bin(),
            "--script",
            script.to_str().unwrap(),
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--env",
            "GREETING=it's a \"test\" $HOME `x`",
        ],
        &[],
    );
    // The script's exit status comes back, stderr is relayed live.
    assert_guest_exit(&out, 7, &["note on stderr"]);
    let all: Vec<u8> = (0..=255u8).collect();
    assert_eq!(&out.stdout[..256], &all[..], "bytes 0-255 intact");
    let rand = &out.stdout[256..];
    assert_eq!(rand.len(), 1 << 20);
    assert_eq!(rand, std::fs::read(out_dir.join("rand.bin")).unwrap());
    let sha = std::fs::read_to_string(out_dir.join("rand.sha256")).unwrap();
    let host_sha = Command::new("sha256sum")
        .arg(out_dir.join("rand.bin"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&host_sha.stdout).starts_with(sha.trim()));
    assert_eq!(
        std::fs::read_to_string(out_dir.join("greeting.txt")).unwrap(),
        "it's a \"test\" $HOME `x`"
    );
}

#[test]
fn guest_that_does_not_finish_times_out_with_the_console_tail() {
    if !small_guests_enabled("guest_that_does_not_finish_times_out_with_the_console_tail") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hang.sh");
    std::fs::write(&script, "echo about to hang >&2\nsleep 3600\n").unwrap();
    let out = vm_run(
        &[
            "--cpus",
            "1",
            "--herd",
            herd_bin(),
            "--script",
            script.to_str().unwrap(),
            "--timeout",
            "60",
        ],
        &[],
    );
    // The console tail is shown.
    assert_guest_exit(
        &out,
        124,
        &["did not finish within --timeout 60s", "  | about to hang"],
    );
}

#[test]
fn verbose_relays_the_kernel_console() {
    if !small_guests_enabled("verbose_relays_the_kernel_console") {
        return;
    }
    let out = vm_run(
        &[
            "--cpus",
            "1",
            "--verbose",
            "--herd",
            herd_bin(),
            "--",
            "env",
        ],
        &[],
    );
    // Kernel messages, and vm-run.sh's own.
    assert_guest_exit(&out, 0, &["Linux version", "herd-vm: guest up in"]);
}

/// A guest kernel that panics before the init runs is booted again,
/// HERD_VM_BOOT_RETRIES times, each retry said; then the run fails (125).
/// The panic here is deterministic (no such rdinit, so no root to mount),
/// standing in for the MTTCG code-patching race seen at 512 vCPUs.
#[test]
fn a_kernel_panic_before_init_is_booted_again_then_reported() {
    if !small_guests_enabled("a_kernel_panic_before_init_is_booted_again_then_reported") {
        return;
    }
    let args = [
        "--cpus",
        "1",
        "--append",
        "rdinit=/nonexistent",
        "--herd",
        herd_bin(),
        "--",
        "env",
    ];
    let out = vm_run(&args, &[("HERD_VM_BOOT_RETRIES", "1")]);
    let err = assert_guest_exit(
        &out,
        125,
        &[
            "warning: the guest kernel panicked before the init ran (boot 1 of at most 2;",
            "  | ",
            "Kernel panic",
            ", 2 boots): it did not boot",
        ],
    );
    assert!(!err.contains("(boot 2 of"), "booted a third time:\n{err}");
    // Retries off: one boot, no warning.
    let out = vm_run(&args, &[("HERD_VM_BOOT_RETRIES", "0")]);
    let err = assert_guest_exit(&out, 125, &["it did not boot"]);
    assert!(!err.contains("booting again"), "{err}");
    let out = vm_run(&args, &[("HERD_VM_BOOT_RETRIES", "many")]);
    assert_guest_exit(&out, 2, &["HERD_VM_BOOT_RETRIES must be a count"]);
}

/// `--trace-online`: the cpuhp tracepoints while init brings CPUs online;
/// the summary names every CPU brought online (CPUs 10 and 11 among them,
/// whose trace numbers 0010 and 0011 busybox awk would read as octal 8
/// and 9) and the raw trace
/// comes back in the out directory.
#[test]
fn trace_online_summarises_the_hotplug_states_of_every_cpu_brought_online() {
    if !small_guests_enabled(
        "trace_online_summarises_the_hotplug_states_of_every_cpu_brought_online",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = vm_run(
        &[
            "--cpus",
            "12",
            "--boot-cpus",
            "2",
            "--trace-online",
            "--herd",
            herd_bin(),
            "--out-dir",
            out_dir.to_str().unwrap(),
            "--",
            "env",
        ],
        &[],
    );
    let err = assert_guest_exit(
        &out,
        0,
        &[
            "brought 10 CPUs online",
            "herd-vm: online: trace: 10 CPUs traced (0 events lost)",
        ],
    );
    // The states the kernel runs for every CPU it brings up.
    for state in ["sched_cpu_activate", "smpboot_create_threads"] {
        assert!(
            err.lines()
                .any(|l| l.starts_with("herd-vm: online: trace: ") && l.contains(state)),
            "no {state} in the summary:\n{err}"
        );
    }
    let trace = std::fs::read_to_string(out_dir.join("online-trace.txt")).unwrap();
    for cpu in 2..12 {
        let tag = format!("cpuhp_enter: cpu: {cpu:04} ");
        assert!(trace.contains(&tag), "no {tag:?} in the trace");
    }
}

/// A C program that cancels threads but does not link libgcc_s (ldd does
/// not list it); glibc dlopens libgcc_s.so.1 at the first pthread_cancel.
fn build_cancel_program(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("cancel.c");
    std::fs::write(
        &src,
        r#"
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *sleeper(void *arg) { (void)arg; for (;;) sleep(1); return NULL; }
int main(void) {
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, sleeper, NULL);
    for (int i = 0; i < 8; i++) { pthread_cancel(t[i]); pthread_join(t[i], NULL); }
    printf("cancelled 8 threads\n");
    return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.join("cancel");
    let built = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status();
    match built {
        Ok(s) if s.success() => Some(bin),
        other => {
            skip(&format!(
                "libgcc_s test: no working C compiler ({other:?}); \
                 scripts/test.sh installs gcc as root"
            ));
            None
        }
    }
}

#[test]
fn libgcc_s_is_packed_so_pthread_cancel_works_in_the_guest() {
    if !small_guests_enabled("libgcc_s_is_packed_so_pthread_cancel_works_in_the_guest") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = build_cancel_program(dir.path()) else {
        return;
    };
    let ldd = Command::new("ldd").arg(&bin).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libgcc_s"),
        "the test program must not link libgcc_s, or it tests nothing"
    );
    let bin = bin.to_str().unwrap();

    let ok = vm_run(&["--cpus", "2", "--herd", bin], &[]);
    assert_guest_exit(&ok, 0, &[]);
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "cancelled 8 threads\n");

    // The control: the same program without libgcc_s.so.1 aborts, so the
    // test above really depends on vm-run.sh packing it.
    let bad = vm_run(
        &["--cpus", "2", "--quiet", "--herd", bin],
        &[("HERD_VM_OMIT_LIBGCC", "1")],
    );
    // SIGABRT without libgcc_s.so.1.
    assert_guest_exit(
        &bad,
        134,
        &["libgcc_s.so.1 must be installed for pthread_cancel"],
    );
}
