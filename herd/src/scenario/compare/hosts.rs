//! Whether every run of a comparison was measured on the same machine.
//!
//! A comparison's runs are meant to differ only in their configuration. A
//! `--resume` after a reboot (into another kernel), on another machine,
//! or with another herd build mixes runs the statistics should not pool:
//! the journal's header checks the plan (the arguments), not where the
//! runs ran. So the host facts that identify a machine and its software
//! ([`IDENTITY`]; not those that move from run to run, such as
//! `tasks_now`) and herd's version are compared over every run; each that
//! differs becomes a note of the document and a warning on stderr, with
//! how many runs had each value. `herd diff` asks the same of each of its
//! two files ([`differing`]): a file whose own runs come from different
//! hosts pools them as compare would.

use serde_json::Value;

use crate::result::{RunResult, RunSet};

/// The host facts (`RunResult::host` keys) that identify the machine, its
/// kernel and C library, and what the runs could use of it.
pub const IDENTITY: &[&str] = &[
    "hostname",
    "kernel",
    "arch",
    "libc",
    "online_cpus",
    "allowed_cpus",
    "numa_nodes",
    "mem_total_bytes",
];

/// The value of fact `name` of run `r` as text (`herd version`: herd's).
fn fact(r: &RunResult, name: &str) -> String {
    if name == HERD_VERSION {
        return Value::from(r.herd_version.as_str()).to_string();
    }
    r.host
        .get(name)
        .map_or_else(|| "(absent)".to_string(), Value::to_string)
}

/// The name of herd's version among the facts compared.
const HERD_VERSION: &str = "herd version";

/// One note per fact that differs between the runs of `sets`:
/// `... kernel "A" (3 runs), "B" (5 runs) ...`.
pub fn mixed(sets: &[RunSet]) -> Vec<String> {
    let runs: Vec<&RunResult> = sets.iter().flat_map(|s| &s.runs).collect();
    differing(&runs)
        .into_iter()
        .map(|d| {
            format!(
                "runs measured on different hosts or herd builds (a --resume elsewhere?): \
                 {d}; the statistics pool them"
            )
        })
        .collect()
}

/// Each identity fact (and herd's version) that differs between `runs`,
/// with how many runs had each value: `kernel "6.1" (2 runs), "6.18" (3
/// runs)`; empty when they all agree.
pub fn differing(runs: &[&RunResult]) -> Vec<String> {
    let mut out = Vec::new();
    for name in IDENTITY.iter().copied().chain([HERD_VERSION]) {
        let mut seen: Vec<(String, usize)> = Vec::new();
        for r in runs {
            let v = fact(r, name);
            match seen.iter_mut().find(|(s, _)| *s == v) {
                Some((_, n)) => *n += 1,
                None => seen.push((v, 1)),
            }
        }
        if seen.len() > 1 {
            let values: Vec<String> = seen
                .iter()
                .map(|(v, n)| format!("{v} ({n} runs)"))
                .collect();
            out.push(format!("{name} {}", values.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::SCHEMA_VERSION;

    fn run(kernel: &str, tasks: u64) -> RunResult {
        RunResult::new(
            "storm",
            vec![],
            serde_json::json!({}),
            serde_json::json!({"kernel": kernel, "hostname": "vm", "tasks_now": tasks}),
        )
    }

    fn set(runs: Vec<RunResult>) -> RunSet {
        RunSet {
            schema: SCHEMA_VERSION,
            label: "x".into(),
            runs,
        }
    }

    #[test]
    fn only_identity_facts_that_differ_are_noted() {
        let same = [
            set(vec![run("6.1", 10), run("6.1", 11)]),
            set(vec![run("6.1", 12)]),
        ];
        assert!(mixed(&same).is_empty(), "tasks_now moves, it is not noted");
        let resumed = [
            set(vec![run("6.1", 1), run("6.18", 1)]),
            set(vec![run("6.1", 1), run("6.18", 1), run("6.18", 1)]),
        ];
        assert_eq!(
            mixed(&resumed),
            [
                "runs measured on different hosts or herd builds (a --resume elsewhere?): kernel \
              \"6.1\" (2 runs), \"6.18\" (3 runs); the statistics pool them"
            ]
        );
        let mut other = run("6.1", 1);
        other.herd_version = "9.9.9".into();
        let notes = mixed(&[set(vec![run("6.1", 1), other])]);
        assert_eq!(notes.len(), 1);
        let want = format!(
            "herd version \"{}\" (1 runs), \"9.9.9\" (1 runs)",
            env!("CARGO_PKG_VERSION")
        );
        assert!(notes[0].contains(&want), "{notes:?}");
    }
}
