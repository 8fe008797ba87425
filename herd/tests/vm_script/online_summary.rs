//! scripts/vm/online-summary.awk, the guest init's summary of a CPU
//! hotplug trace (`vm-run.sh --trace-online`), on a trace whose figures
//! are known: under busybox's awk, which runs it in the guest, and under
//! the host's awk. (The guest tests run it on a real trace.)

use std::io::Write;
use std::process::{Command, Stdio};

use crate::vm_support::{repo, skip};

/// One ftrace line of a cpuhp event at `ts` seconds.
fn line(ts: f64, cpu: u32, what: &str) -> String {
    format!("          <idle>-0       [{cpu:03}] d..1.  {ts:10.6}: {what}")
}

/// CPUs 8, 9, 10 and 11 brought online (the trace prints them as 0008 to
/// 0011: busybox awk would read 0010 and 0011 as octal 8 and 9, the same
/// CPUs as the first two). Each runs
/// smpboot_create_threads (step 1), 10 ms on the first two CPUs and 30 ms
/// on the last two, and sched_cpu_activate (step 2, a multi-instance
/// state), 5 ms each, 100 ms after its first event on the first two and
/// 200 ms on the last two. Lines that are not cpuhp events, and an exit
/// without its enter, are ignored.
fn trace() -> String {
    let mut t = vec![line(0.5, 0, "sched_switch: prev_comm=swapper/0")];
    for (n, cpu) in [8u32, 9, 10, 11].into_iter().enumerate() {
        let base = 1.0 + n as f64;
        let late = n >= 2;
        let (create, activate_at) = if late { (0.030, 0.200) } else { (0.010, 0.100) };
        t.push(line(
            base,
            cpu,
            &format!("cpuhp_enter: cpu: {cpu:04} target: 233 step:   1 (smpboot_create_threads)"),
        ));
        t.push(line(
            base + create,
            cpu,
            &format!("cpuhp_exit: cpu: {cpu:04}  state:   1 step:   1 ret: 0"),
        ));
        if n == 0 {
            // An exit whose enter the trace missed.
            t.push(line(
                base + 0.05,
                cpu,
                "cpuhp_exit: cpu: 0008  state:   9 step:   9 ret: 0",
            ));
        }
        t.push(line(
            base + activate_at,
            cpu,
            &format!("cpuhp_multi_enter: cpu: {cpu:04} target: 233 step:   2 (sched_cpu_activate)"),
        ));
        t.push(line(
            base + activate_at + 0.005,
            cpu,
            &format!("cpuhp_exit: cpu: {cpu:04}  state:   2 step:   2 ret: 0"),
        ));
    }
    t.join("\n") + "\n"
}

/// The summary `awk` (a command line) prints for `input`, with `lost`.
fn summary(awk: &[&str], input: &str, lost: u32) -> String {
    let mut child = Command::new(awk[0])
        .args(&awk[1..])
        .arg("-v")
        .arg(format!("lost={lost}"))
        .arg("-f")
        .arg(repo().join("scripts/vm/online-summary.awk"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{awk:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{awk:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn state(name: &str, total_s: f64, first_ms: f64, last_ms: f64) -> String {
    format!(
        "herd-vm: online: trace: {name:<36} {total_s:8.2} s in all, {first_ms:7.1} ms per CPU first, {last_ms:7.1} ms last"
    )
}

fn check(awk: &[&str]) {
    let got = summary(awk, &trace(), 3);
    let want = [
        "herd-vm: online: trace: 4 CPUs traced (3 events lost); first hotplug event to last \
         per CPU: 105 ms for the first 2, 205 ms for the last 2"
            .to_string(),
        // Costliest first; its mean per CPU grows from the first to the last.
        state("smpboot_create_threads", 0.08, 10.0, 30.0),
        state("sched_cpu_activate", 0.02, 5.0, 5.0),
    ];
    assert_eq!(got.lines().collect::<Vec<_>>(), want, "{awk:?}");
    assert_eq!(
        summary(awk, "# tracer: nop\n", 0),
        "herd-vm: online: trace: no hotplug events traced\n",
        "{awk:?}"
    );
}

#[test]
fn busybox_awk_summarises_a_known_trace() {
    if Command::new("busybox").arg("true").status().is_err() {
        skip("busybox is not installed (Debian package busybox-static)");
        return;
    }
    check(&["busybox", "awk"]);
}

#[test]
fn the_hosts_awk_summarises_a_known_trace() {
    check(&["awk"]);
}
