//! Interleaved rounds of child runs, shared by `herd compare` and `herd
//! sweep`: each round runs every configuration once, in order (A B C A B C
//! ...), so drift of the machine spreads over all of them; warm-up rounds
//! are discarded; Ctrl-C stops after the running child, whose partial
//! result is kept.

use anyhow::{Context, Result};

use super::Config;
use crate::export::progress::Progress;
use crate::result::{RunResult, RunSet, SCHEMA_VERSION};
use crate::runner;

/// Runs `configs` interleaved: `warmup` discarded rounds, then `runs`
/// rounds of one child per configuration. Returns one set per
/// configuration and whether Ctrl-C stopped it early.
pub fn run_interleaved(
    scenario: &str,
    configs: &[Config],
    runs: usize,
    warmup: usize,
    progress: &Progress,
) -> Result<(Vec<RunSet>, bool)> {
    runner::install_interrupt_handler();
    // Tracepoints stay registered across the children (perf/keeper.rs).
    let children: Vec<&[String]> = configs.iter().map(|c| c.args.as_slice()).collect();
    let _keepers = crate::perf::keeper::Keepers::for_children(&children);
    run_rounds(configs, runs, warmup, progress, |args| {
        runner::run_child(scenario, args)
    })
}

/// [`run_interleaved`] with the measurement as a parameter (tests).
pub fn run_rounds(
    configs: &[Config],
    runs: usize,
    warmup: usize,
    progress: &Progress,
    mut measure: impl FnMut(&[String]) -> Result<RunResult>,
) -> Result<(Vec<RunSet>, bool)> {
    let mut sets: Vec<RunSet> = configs
        .iter()
        .map(|c| RunSet {
            schema: SCHEMA_VERSION,
            label: c.label.clone(),
            runs: Vec::with_capacity(runs),
        })
        .collect();
    for round in 0..warmup + runs {
        for (cfg, set) in configs.iter().zip(sets.iter_mut()) {
            if runner::interrupted() {
                return Ok((sets, true));
            }
            let what = if round < warmup {
                format!("warmup {}/{warmup}", round + 1)
            } else {
                format!("run {}/{runs}", round - warmup + 1)
            };
            progress.set_message(format!("{} ({what})", cfg.label));
            let result: RunResult = measure(&cfg.args)
                .with_context(|| format!("{what} of configuration `{}` failed", cfg.label))?;
            progress.inc();
            let stop = result.interrupted;
            if round >= warmup || stop {
                set.runs.push(result);
            }
            if stop {
                return Ok((sets, true));
            }
        }
    }
    Ok((sets, runner::interrupted()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn configs(labels: &[&str]) -> Vec<Config> {
        labels
            .iter()
            .map(|l| Config {
                label: l.to_string(),
                args: s(&[l]),
            })
            .collect()
    }

    fn result(args: &[String]) -> RunResult {
        RunResult::new(
            "storm",
            args.to_vec(),
            serde_json::json!({}),
            serde_json::json!({}),
        )
    }

    #[test]
    fn rounds_interleave_and_warmups_are_dropped() {
        let mut order = Vec::new();
        let progress = Progress::new(9, "runs");
        let (sets, stopped) = run_rounds(&configs(&["a", "b", "c"]), 2, 1, &progress, |args| {
            order.push(args[0].clone());
            let mut r = result(args);
            r.push(crate::result::Metric::info("seq", "n", order.len() as f64));
            Ok(r)
        })
        .unwrap();
        assert!(!stopped);
        assert_eq!(order, s(&["a", "b", "c", "a", "b", "c", "a", "b", "c"]));
        // The warmup round (runs 1-3) is not kept.
        let seq: Vec<Vec<f64>> = sets
            .iter()
            .map(|st| st.runs.iter().map(|r| r.metric("seq").unwrap()).collect())
            .collect();
        assert_eq!(seq, [vec![4.0, 7.0], vec![5.0, 8.0], vec![6.0, 9.0]]);
    }

    #[test]
    fn an_interrupted_child_stops_the_rounds_and_is_kept() {
        let progress = Progress::new(10, "runs");
        let mut n = 0;
        let (sets, stopped) = run_rounds(&configs(&["a", "b"]), 5, 0, &progress, |args| {
            n += 1;
            let mut r = result(args);
            r.interrupted = n == 3;
            Ok(r)
        })
        .unwrap();
        assert!(stopped);
        assert_eq!(n, 3);
        assert_eq!((sets[0].runs.len(), sets[1].runs.len()), (2, 1));
        assert!(sets[0].runs[1].interrupted);
    }

    #[test]
    fn a_failed_child_names_its_configuration() {
        let progress = Progress::new(1, "runs");
        let e = run_rounds(&configs(&["cleanup=sync"]), 1, 0, &progress, |_| {
            anyhow::bail!("boom")
        })
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("run 1/1 of configuration `cleanup=sync` failed: boom"),
            "{msg}"
        );
    }
}
