//! `herd agent --mode tokio-blocking` when the OS creates no thread at
//! all, through a limit the pre-flight cannot see: a seccomp filter, set
//! in the child before it execs, under which every thread creation fails
//! with EAGAIN (`clone3` is refused with ENOSYS, so glibc falls back to
//! `clone`, which fails when it asks for `CLONE_THREAD`; processes are
//! unaffected). tokio's `spawn_blocking` then panics ("OS can't spawn
//! worker thread"): herd counts the failure, runs the job on the
//! submitter and names tokio's message in its own warning. Nothing else
//! of tokio's panic reaches stderr: Rust's default panic hook printed
//! `thread 'main' panicked at .../tokio/src/runtime/blocking/pool.rs` and
//! the `RUST_BACKTRACE` note for every failed job, ahead of herd's
//! diagnosis.

use std::os::unix::process::CommandExt;

mod common;

/// `herd ARGS`, not yet run, under a seccomp filter that fails every
/// thread creation with EAGAIN (module docs). The filter reads the
/// system call's number and first argument only, which every
/// architecture's `seccomp_data` places alike.
fn herd_without_threads(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("herd"));
    cmd.args(args);
    // SAFETY: the closure runs in the forked child before exec; prctl is
    // async-signal-safe, the program lives on the closure's stack for the
    // call (the kernel copies it) and nothing of the parent's is touched.
    unsafe {
        cmd.pre_exec(|| {
            const BPF_LD_W_ABS: u16 = 0x20;
            const BPF_JMP_JEQ_K: u16 = 0x15;
            const BPF_JMP_JSET_K: u16 = 0x45;
            const BPF_RET_K: u16 = 0x06;
            const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
            const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
            // `struct seccomp_data`: nr at 0, args[0]'s low half at 16
            // (little-endian).
            const NR: u32 = 0;
            const ARG0_LOW: u32 = 16;
            let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
            let mut prog = [
                ins(BPF_LD_W_ABS, 0, 0, NR),
                ins(BPF_JMP_JEQ_K, 0, 1, libc::SYS_clone3 as u32),
                ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
                ins(BPF_JMP_JEQ_K, 0, 3, libc::SYS_clone as u32),
                ins(BPF_LD_W_ABS, 0, 0, ARG0_LOW),
                ins(BPF_JMP_JSET_K, 0, 1, libc::CLONE_THREAD as u32),
                ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::EAGAIN as u32),
                ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
            ];
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// Every job of a run whose pool cannot start one thread runs on the
/// submitter; stderr gives herd's warning with tokio's message, and not
/// the panic that carried it (which it printed once per job before).
#[test]
fn tokio_spawn_failures_are_diagnosed_without_the_panic_message() {
    let out = herd_without_threads(&[
        "agent",
        "--no-perf",
        "--mode",
        "tokio-blocking",
        "--waves",
        "1",
        "--jobs",
        "20",
        "--job-us",
        "0",
        "--gap-ms",
        "1",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // herd's diagnosis, with tokio's message as its reason.
    assert!(
        err.contains("20 thread creations failed (20 jobs ran on the submitter instead)")
            && err.contains(
                "tokio's `spawn_blocking` with no thread left): OS can't spawn worker thread: \
                 Resource temporarily unavailable"
            ),
        "{err}"
    );
    // And nothing of the panic hook's.
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "tokio's panic reached stderr: {err}"
    );
    assert_eq!(
        err.matches("OS can't spawn worker thread").count(),
        1,
        "tokio's message once, in herd's warning: {err}"
    );
}
