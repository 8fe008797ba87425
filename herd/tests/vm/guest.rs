//! The shared guest: one boot at `guest_cpus()` vCPUs in `guest_nodes()`
//! NUMA nodes (through a `OnceLock`) runs a script of herd commands, and
//! the tests read its outputs; plus the JSON helpers they share.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;

use crate::vm_support::{code, herd_bin, vm_run};
use crate::{guest_cpus, guest_nodes, guest_x2apic_ids, guests_enabled};

/// One boot at `guest_cpus()` vCPUs in `guest_nodes()` NUMA nodes running
/// several herd commands; their outputs land in `out`.
pub(crate) struct Guest {
    pub(crate) cpus: usize,
    pub(crate) nodes: usize,
    pub(crate) code: i32,
    /// Holds the script and `out/`; removed at exit.
    _dir: tempfile::TempDir,
    out: PathBuf,
}

impl Guest {
    pub(crate) fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(name))
            .unwrap_or_else(|e| panic!("guest output {name}: {e}"))
    }
    /// Exit status of the guest command `name`.
    pub(crate) fn status(&self, name: &str) -> i32 {
        self.file(&format!("{name}.rc")).trim().parse().unwrap()
    }
    /// The CPUs of NUMA node `n`, as vm-run.sh splits them.
    pub(crate) fn node_cpus(&self, n: usize) -> Vec<u64> {
        let (first, last) = node_range(self.cpus, self.nodes, n);
        range(first, last)
    }
}

/// First and last CPU of node `n` when `cpus` are split into `nodes`.
pub(crate) fn node_range(cpus: usize, nodes: usize, n: usize) -> (usize, usize) {
    (n * cpus / nodes, (n + 1) * cpus / nodes - 1)
}

static GUEST: OnceLock<Option<Guest>> = OnceLock::new();

fn guest() -> Option<&'static Guest> {
    GUEST
        .get_or_init(|| {
            let cpus = guest_cpus();
            let nodes = guest_nodes();
            assert!(
                nodes >= 2 && cpus.is_multiple_of(nodes),
                "the guest tests want at least 2 NUMA nodes of equal size \
                 (HERD_VM_CPUS={cpus}, HERD_VM_NUMA={nodes})"
            );
            let dir = tempfile::tempdir().unwrap();
            let script = dir.path().join("guest.sh");
            std::fs::write(&script, guest_script(cpus, nodes)).unwrap();
            let out_dir = dir.path().join("out");
            // docs/guest.md: the 16-vCPU guest runs this in ~25 s, 264
            // vCPUs in ~9 min on this busy 2-CPU host; 512 take 12 min
            // to come up (64 booted, 448 brought online after).
            let timeout = (300 + 12 * cpus).to_string();
            let (cpus_s, nodes_s) = (cpus.to_string(), nodes.to_string());
            let mut args = vec![
                "--cpus",
                &cpus_s,
                "--numa",
                &nodes_s,
                "--herd",
                herd_bin(),
                "--script",
                script.to_str().unwrap(),
                "--out-dir",
                out_dir.to_str().unwrap(),
                "--timeout",
                &timeout,
            ];
            if guest_x2apic_ids() {
                args.push("--x2apic-ids");
            }
            let out = vm_run(&args, &[]);
            Some(Guest {
                cpus,
                nodes,
                code: code(&out),
                _dir: dir,
                out: out_dir,
            })
        })
        .as_ref()
}

/// Storm flags shared by the guest's storms: short threads, few waves.
const QUICK_STORM: &str = "--waves 4 --spin 1000 --sleep-ms 10";

/// The commands the shared guest runs; `NAME.out` holds each one's stdout,
/// `NAME.rc` its exit status, `NAME.err` its stderr. The console shows
/// each one's exit status and guest seconds.
fn guest_script(cpus: usize, nodes: usize) -> String {
    let (first, last) = node_range(cpus, nodes, nodes - 1);
    let mut s = String::from(
        "run() { name=$1; shift; read -r t0 _ </proc/uptime; \
         \"$@\" >\"$name.out\" 2>\"$name.err\"; echo $? >\"$name.rc\"; read -r t1 _ </proc/uptime; \
         echo \"== $name: exit $(cat $name.rc) after $(awk -v a=$t0 -v b=$t1 'BEGIN {printf \"%.1f\", b - a}')s\" >&2; }\n",
    );
    s.push_str("run nproc nproc\n");
    s.push_str("run online cat /sys/devices/system/cpu/online\n");
    s.push_str("run cmdline cat /proc/cmdline\n");
    s.push_str("run cpuinfo cat /proc/cpuinfo\n");
    s.push_str("run dmesg dmesg\n");
    s.push_str("run env herd env --json\n");
    s.push_str(&format!(
        "run storm_rr herd storm {QUICK_STORM} --per-wave {cpus} --pin round-robin --json\n"
    ));
    // Per node: a storm on the last node's CPUs only, with system-scope
    // counters, which show where the threads ran and exited.
    s.push_str(&format!(
        "run storm_node herd storm {QUICK_STORM} --per-wave {cpus} --pin round-robin \
         --cpus {first}-{last} --perf-scope system --json\n"
    ));
    s.push_str(&format!(
        "run storm_table herd storm --waves 2 --spin 1000 --sleep-ms 10 --per-wave {cpus} \
         --pin round-robin\n"
    ));
    s.push_str(&format!(
        "run perf_system herd storm {QUICK_STORM} --per-wave {cpus} --perf-scope system --json\n"
    ));
    // The same with the descriptor limit (soft and hard) below what one
    // counter per event and CPU needs: herd, as root, must raise it.
    s.push_str(&format!(
        "run perf_lowfd sh -c 'ulimit -n {}; exec herd storm {QUICK_STORM} --per-wave {cpus} \
         --perf-scope system --json'\n",
        low_fd_limit(cpus)
    ));
    s.push_str(&format!(
        "run contention herd storm {QUICK_STORM} --per-wave {cpus} --contention --json\n"
    ));
    // Process scope: through herd's cgroup (vm-run.sh mounts cgroup2), then
    // without cgroup2, where it falls back to inherited per-thread counters.
    s.push_str(&format!(
        "run perf_process herd storm {QUICK_STORM} --per-wave {cpus} --reap join --json\n"
    ));
    // The previous run's perf closer (perf/closer.rs) outlives herd by the
    // counters' last close and holds its cgroup until then: the umount is
    // busy for that long, so it is retried (up to 10 s).
    s.push_str(&format!(
        "i=0; until umount /sys/fs/cgroup; do i=$((i+1)); [ $i -ge 100 ] && break; \
         sleep 0.1; done\n\
         run perf_inherit herd storm {QUICK_STORM} --per-wave {cpus} --reap join --json\n\
         mount -t cgroup2 cgroup2 /sys/fs/cgroup\n"
    ));
    s.push_str(&format!(
        "run perf_table herd storm --waves 2 --spin 1000 --sleep-ms 10 --per-wave {cpus} \
         --perf-scope system\n"
    ));
    // --per-node: counters and placement per NUMA node, JSON and table.
    s.push_str(&format!(
        "run perf_pernode herd storm {QUICK_STORM} --per-wave {cpus} --pin round-robin \
         --perf-scope system --per-node --json\n"
    ));
    s.push_str(&format!(
        "run pernode_table herd storm --waves 2 --spin 1000 --sleep-ms 10 --per-wave {cpus} \
         --pin round-robin --perf-scope system --per-node\n"
    ));
    s
}

/// A descriptor limit below the need of system scope (several events per
/// CPU), as the 512-vCPU guest's default (hard 4096) is below 9 x 512.
pub(crate) fn low_fd_limit(cpus: usize) -> usize {
    4 * cpus
}

pub(crate) fn with_guest(test: &str, check: impl FnOnce(&Guest)) {
    if !guests_enabled(test) {
        return;
    }
    let g = guest().expect("guest ran");
    assert_eq!(g.code, 0, "the guest script failed (see its console above)");
    check(g);
}

impl Guest {
    /// The JSON document command `name` printed; its exit status must be 0.
    pub(crate) fn json(&self, name: &str) -> Value {
        assert_eq!(
            self.status(name),
            0,
            "guest command {name} failed:\n{}",
            self.file(&format!("{name}.err"))
        );
        let text = self.file(&format!("{name}.out"));
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{name}: stdout is not one JSON document ({e}):\n{text}"))
    }
}

pub(crate) fn range(from: usize, to_incl: usize) -> Vec<u64> {
    (from as u64..=to_incl as u64).collect()
}

pub(crate) fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap_or_else(|| panic!("not a u64: {x}")))
        .collect()
}

/// `[[cpu, count], ...]` as (cpus, counts).
pub(crate) fn per_cpu(v: &Value) -> (Vec<u64>, Vec<u64>) {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|pair| {
            let p = u64s(pair);
            assert_eq!(p.len(), 2, "per-CPU entry is [cpu, count]: {pair}");
            (p[0], p[1])
        })
        .unzip()
}

pub(crate) fn metric(run: &Value, name: &str) -> f64 {
    run["metrics"]
        .as_array()
        .expect("metrics array")
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name}"))["value"]
        .as_f64()
        .unwrap()
}

/// Counter `name` of a run's `perf` section.
pub(crate) fn counter<'a>(perf: &'a Value, name: &str) -> &'a Value {
    perf["counters"]
        .as_array()
        .expect("perf.counters")
        .iter()
        .find(|c| c["metric"] == name)
        .unwrap_or_else(|| panic!("no counter {name}: {perf}"))
}
