//! The shared guest's topology and herd's placement on it: every CPU
//! online (APIC ids above 254 too), `herd env`'s CPUs and NUMA nodes,
//! storms pinned round-robin, to one node, and their table.

use serde_json::Value;

use crate::guest::{counter, metric, per_cpu, range, u64s, with_guest};
use crate::guest_x2apic_ids;
use crate::vm_support::not_in_this_pass;

#[test]
fn guest_kernel_has_all_the_cpus_online() {
    with_guest("guest_kernel_has_all_the_cpus_online", |g| {
        assert_eq!(g.status("nproc"), 0);
        assert_eq!(g.file("nproc.out").trim(), g.cpus.to_string());
        let want = if g.cpus == 1 {
            "0".to_string()
        } else {
            format!("0-{}", g.cpus - 1)
        };
        assert_eq!(g.file("online.out").trim(), want);
    });
}

/// The vCPUs vm-run.sh boots the kernel with (`--boot-cpus`): what
/// HERD_VM_BOOT_CPUS says, else every vCPU up to 255 and 64 above.
fn boot_cpus(cpus: usize) -> usize {
    match std::env::var("HERD_VM_BOOT_CPUS") {
        Ok(v) => v.parse().expect("HERD_VM_BOOT_CPUS is a number"),
        Err(_) if cpus > 255 => 64,
        Err(_) => cpus,
    }
}

/// With fewer vCPUs at boot than in the guest, the kernel booted that many
/// (maxcpus=) without PAT, and the guest's init brought every other CPU
/// online (the test above sees them all online).
#[test]
fn cpus_not_booted_are_brought_online_by_init() {
    with_guest("cpus_not_booted_are_brought_online_by_init", |g| {
        assert_eq!(g.status("cmdline"), 0);
        let cmdline = g.file("cmdline.out");
        let words: Vec<&str> = cmdline.split_whitespace().collect();
        let boot = boot_cpus(g.cpus);
        if boot < g.cpus {
            assert!(
                words.contains(&format!("maxcpus={boot}").as_str()),
                "{cmdline}"
            );
            assert!(words.contains(&"nopat"), "{cmdline}");
        } else {
            assert!(
                !words.iter().any(|w| w.starts_with("maxcpus=")),
                "{cmdline}"
            );
            not_in_this_pass(&format!(
                "cpus_not_booted_are_brought_online_by_init: the guest booted all {} vCPUs \
                 (HERD_VM_BOOT_CPUS unset at or below 255 vCPUs; CI's x2APIC guest sets it)",
                g.cpus
            ));
        }
    });
}

/// `(processor, apicid)` of every CPU in the guest's /proc/cpuinfo.
fn apic_ids(cpuinfo: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cpu = None;
    for line in cpuinfo.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().parse::<u64>();
        match key.trim() {
            "processor" => cpu = value.ok(),
            "apicid" => out.push((cpu.expect("apicid before processor"), value.unwrap())),
            _ => {}
        }
    }
    out
}

/// Above 255 vCPUs (or with `--x2apic-ids`) the guest runs its APICs in
/// x2APIC mode, through the IOMMU's interrupt remapping, and the CPUs with
/// APIC ids above 254 are online and used by a round-robin storm.
#[test]
fn guest_cpus_with_apic_ids_above_254_are_online_and_used() {
    with_guest(
        "guest_cpus_with_apic_ids_above_254_are_online_and_used",
        |g| {
            let want_high = if guest_x2apic_ids() {
                g.cpus / 2
            } else if g.cpus > 255 {
                g.cpus - 255
            } else {
                not_in_this_pass(&format!(
                    "x2APIC check: the guest has {} vCPUs with xAPIC ids; it runs \
                     above 255 vCPUs or with HERD_VM_X2APIC_IDS=1 (CI's second guest)",
                    g.cpus
                ));
                return;
            };
            let dmesg = g.file("dmesg.out");
            let want = "Enabled IRQ remapping in x2apic mode";
            assert!(dmesg.contains(want), "no '{want}' in the guest's dmesg");
            let ids = apic_ids(&g.file("cpuinfo.out"));
            let cpus: Vec<u64> = ids.iter().map(|&(c, _)| c).collect();
            assert_eq!(cpus, range(0, g.cpus - 1), "one cpuinfo entry per CPU");
            let mut apic: Vec<u64> = ids.iter().map(|&(_, a)| a).collect();
            apic.sort_unstable();
            apic.dedup();
            assert_eq!(apic.len(), g.cpus, "APIC ids are distinct");
            let high: Vec<u64> = ids
                .iter()
                .filter(|&&(_, a)| a > 254)
                .map(|&(c, _)| c)
                .collect();
            assert!(
                high.len() >= want_high,
                "{} CPUs have APIC ids above 254, want {want_high}: {ids:?}",
                high.len()
            );
            let run = g.json("storm_rr");
            let (used, _) = per_cpu(&run["details"]["placement"]["per_cpu_exit"]);
            for cpu in &high {
                assert!(used.contains(cpu), "cpu{cpu} (x2APIC id) ran no thread");
            }
        },
    );
}

#[test]
fn herd_env_reports_every_online_cpu_and_the_numa_nodes() {
    with_guest(
        "herd_env_reports_every_online_cpu_and_the_numa_nodes",
        |g| {
            let env = g.json("env");
            let all = range(0, g.cpus - 1);
            assert_eq!(u64s(&env["online_cpus"]), all);
            assert_eq!(u64s(&env["allowed_cpus"]), all);
            // The CPUs split evenly into the nodes, in order.
            let nodes = env["numa_nodes"].as_array().expect("numa_nodes");
            assert_eq!(nodes.len(), g.nodes, "{}", env["numa_nodes"]);
            for (n, node) in nodes.iter().enumerate() {
                assert_eq!(u64s(&node["cpus"]), g.node_cpus(n), "node {n}");
            }
            assert_eq!(env["tracefs"], "/sys/kernel/tracing");
            assert_eq!(env["root"], true);
        },
    );
}

/// Checks a round-robin storm's placement over `cpus`: every CPU used,
/// each with the same share, at start and at exit.
pub(crate) fn check_round_robin(run: &Value, cpus: &[u64], threads_per_cpu: u64) {
    let p = &run["details"]["placement"];
    assert_eq!(u64s(&p["cpus_requested"]), cpus);
    assert_eq!(p["cpus_used"].as_u64(), Some(cpus.len() as u64), "{p}");
    assert_eq!(metric(run, "cpus_used"), cpus.len() as f64);
    for side in ["per_cpu_start", "per_cpu_exit"] {
        let (used, counts) = per_cpu(&p[side]);
        assert_eq!(used, cpus, "{side}: CPUs other than the requested ones");
        assert!(
            counts.iter().all(|&c| c == threads_per_cpu),
            "{side}: uneven round-robin: {counts:?}"
        );
    }
    assert_eq!(metric(run, "threads_failed"), 0.0);
}

#[test]
fn storm_round_robin_uses_every_cpu() {
    with_guest("storm_round_robin_uses_every_cpu", |g| {
        let run = g.json("storm_rr");
        // 4 waves of `cpus` threads: 4 threads per CPU.
        check_round_robin(&run, &range(0, g.cpus - 1), 4);
    });
}

/// A storm on one NUMA node's CPUs: placed on exactly those, and the
/// system-scope exit counter counts its threads there, per CPU.
#[test]
fn storm_on_one_node_runs_and_exits_there() {
    with_guest("storm_on_one_node_runs_and_exits_there", |g| {
        let run = g.json("storm_node");
        let node = g.node_cpus(g.nodes - 1);
        // 4 waves of `cpus` threads over one node's CPUs.
        let per_cpu_threads = (4 * g.cpus / node.len()) as u64;
        check_round_robin(&run, &node, per_cpu_threads);
        let exits = counter(&run["perf"], "task_exits");
        let pc = exits["per_cpu"]
            .as_array()
            .unwrap_or_else(|| panic!("task_exits has no per-CPU values: {exits}"));
        let (mut inside, mut outside) = (0, 0);
        for e in pc {
            let (cpu, raw) = (e["cpu"].as_u64().unwrap(), e["raw"].as_u64().unwrap());
            if node.contains(&cpu) {
                assert!(
                    raw >= per_cpu_threads,
                    "cpu{cpu}: {raw} exits for {per_cpu_threads} pinned threads"
                );
                inside += raw;
            } else {
                outside += raw;
            }
        }
        let threads = 4 * g.cpus as u64;
        assert!(
            inside >= threads,
            "{inside} exits on the node for {threads}"
        );
        assert!(
            outside < threads / 10,
            "{outside} exits outside the node (the reaper and herd's own threads only)"
        );
    });
}

#[test]
fn storm_table_shows_the_placement() {
    with_guest("storm_table_shows_the_placement", |g| {
        assert_eq!(g.status("storm_table"), 0, "{}", g.file("storm_table.err"));
        let table = g.file("storm_table.out");
        let want = format!("{n} CPUs used of {n} requested", n = g.cpus);
        assert!(table.contains(&want), "no '{want}' in:\n{table}");
        // 2 waves pinned round-robin: 2 threads on every CPU, listed CPU
        // by CPU up to 64 CPUs, summarised above.
        let want = if g.cpus <= 64 {
            format!("cpu{}:2", g.cpus - 1)
        } else {
            format!(
                "threads per CPU at start: {} CPUs with threads, min 2, median 2, max 2; busiest cpu0:2 ",
                g.cpus
            )
        };
        assert!(table.contains(&want), "no '{want}' in:\n{table}");
    });
}
