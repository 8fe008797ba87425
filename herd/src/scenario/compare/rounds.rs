//! Interleaved rounds of child runs, shared by `herd compare` and `herd
//! sweep`: each round runs every configuration once, and the orders of
//! the rounds form a Williams design (a balanced Latin square, [`order`]):
//! over every n rounds (2n for an odd number n of configurations) each
//! configuration runs in each position, and right after each other one,
//! equally often. So drift of the machine spreads over all of them, none
//! always runs first (on a cold machine), and what a run leaves behind for
//! the next (page cache, memory fragmentation, heat, a reclaimer still
//! busy) falls on every configuration alike. A plain rotation by one (A B
//! C, B C A, C A B) places each configuration in each position but runs B
//! right after A in every round where A is not last: herd did that until
//! 2026-12-06. Warm-up rounds are discarded, and the measured rounds
//! start the design afresh, so `-r` a multiple of n (2n) is balanced
//! exactly; Ctrl-C stops after the running child, whose partial result is
//! kept. With a [`Journal`] every finished run is written as it
//! finishes, and runs already in it are not run again.

use anyhow::{Context, Result};

use super::journal::{Entry, Journal};
use super::Config;
use crate::export::progress::Progress;
use crate::result::{RunResult, RunSet, SCHEMA_VERSION};
use crate::runner;

/// Runs already finished (from a journal) and where to record new ones.
#[derive(Debug, Default)]
pub struct Record<'a> {
    /// Finished runs; interrupted ones are run again.
    pub done: Vec<Entry>,
    /// Where each new run is written as it finishes.
    pub journal: Option<&'a mut Journal>,
}

/// Runs `configs` interleaved: `warmup` discarded rounds, then `runs`
/// rounds of one child per configuration. Returns one set per
/// configuration and whether Ctrl-C stopped it early.
pub fn run_interleaved(
    scenario: &str,
    configs: &[Config],
    runs: usize,
    warmup: usize,
    progress: &Progress,
    record: Record<'_>,
) -> Result<(Vec<RunSet>, bool)> {
    runner::install_interrupt_handler();
    // Tracepoints stay registered across the children (perf/keeper.rs).
    let children: Vec<&[String]> = configs.iter().map(|c| c.args.as_slice()).collect();
    let _keepers = crate::perf::keeper::Keepers::for_children(&children);
    run_rounds(configs, runs, warmup, progress, record, |args| {
        runner::run_child(scenario, args)
    })
}

/// The configuration that runs `slot`-th in row `row` of the Williams
/// design of `n` configurations. Row 0 is 0, 1, n-1, 2, n-2, ...; row r
/// adds r to each (mod n): for an even n these n rows put every ordered
/// pair side by side exactly once. For an odd n, rows n..2n are rows
/// 0..n reversed, and every ordered pair is side by side twice in 2n rows.
/// Rows repeat with that period.
pub fn order(row: usize, slot: usize, n: usize) -> usize {
    let period = if n.is_multiple_of(2) { n } else { 2 * n };
    let row = row % period.max(1);
    let (row, slot) = if row >= n {
        (row - n, n - 1 - slot)
    } else {
        (row, slot)
    };
    let first = if slot == 0 {
        0
    } else if slot % 2 == 1 {
        slot.div_ceil(2)
    } else {
        n - slot / 2
    };
    (first + row) % n
}

/// [`run_interleaved`] with the measurement as a parameter (tests).
pub fn run_rounds(
    configs: &[Config],
    runs: usize,
    warmup: usize,
    progress: &Progress,
    record: Record<'_>,
    mut measure: impl FnMut(&[String]) -> Result<RunResult>,
) -> Result<(Vec<RunSet>, bool)> {
    let rounds = warmup.saturating_add(runs);
    // The callers check this first (naming their flags); the table below
    // is allocated whole, so it is checked again here.
    super::check_plan_size(configs.len(), rounds, "--runs")?;
    let mut results: Vec<Vec<Option<RunResult>>> = vec![vec![None; rounds]; configs.len()];
    for e in record.done {
        if e.round < rounds && e.config < configs.len() && !e.result.interrupted {
            results[e.config][e.round] = Some(e.result);
            progress.inc();
        }
    }
    let mut journal = record.journal;
    let mut stopped = false;
    'rounds: for round in 0..rounds {
        for slot in 0..configs.len() {
            // Warm-up rounds, then the measured ones from row 0.
            let row = if round < warmup {
                round
            } else {
                round - warmup
            };
            let i = order(row, slot, configs.len());
            if results[i][round].is_some() {
                continue;
            }
            if runner::interrupted() {
                stopped = true;
                break 'rounds;
            }
            let cfg = &configs[i];
            let what = if round < warmup {
                format!("warmup {}/{warmup}", round + 1)
            } else {
                format!("run {}/{runs}", round - warmup + 1)
            };
            progress.set_message(format!("{} ({what})", cfg.label));
            let result: RunResult = measure(&cfg.args).with_context(|| {
                let kept = results.iter().flatten().flatten().count();
                let resume = match &journal {
                    Some(j) if kept > 0 => format!(
                        " ({kept} finished runs are kept in {}: the same command with \
                         --resume {} runs only what is missing)",
                        j.path().display(),
                        j.path().display()
                    ),
                    Some(_) => " (no run had finished)".to_string(),
                    None => String::new(),
                };
                format!("{what} of configuration `{}` failed{resume}", cfg.label)
            })?;
            progress.inc();
            if let Some(j) = journal.as_deref_mut() {
                j.record(&Entry {
                    round,
                    config: i,
                    result: result.clone(),
                })?;
            }
            let stop = result.interrupted;
            results[i][round] = Some(result);
            if stop {
                stopped = true;
                break 'rounds;
            }
        }
    }
    let sets = configs
        .iter()
        .zip(results)
        .map(|(c, per_round)| RunSet {
            schema: SCHEMA_VERSION,
            label: c.label.clone(),
            // Warm-up rounds are dropped, except a run Ctrl-C cut short.
            runs: per_round
                .into_iter()
                .enumerate()
                .filter_map(|(round, r)| r.filter(|r| round >= warmup || r.interrupted))
                .collect(),
        })
        .collect();
    Ok((sets, stopped || runner::interrupted()))
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
    fn huge_rounds_are_refused_not_allocated() {
        let progress = Progress::new(0, "runs");
        for (runs, warmup) in [(usize::MAX, 1), (1, usize::MAX), (1_000_000_000, 0)] {
            let e = run_rounds(
                &configs(&["a", "b"]),
                runs,
                warmup,
                &progress,
                Record::default(),
                |_| unreachable!("nothing runs"),
            )
            .unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{e}");
        }
    }

    #[test]
    fn rounds_interleave_and_warmups_are_dropped() {
        let mut order = Vec::new();
        let progress = Progress::new(9, "runs");
        let (sets, stopped) = run_rounds(
            &configs(&["a", "b", "c"]),
            2,
            1,
            &progress,
            Record::default(),
            |args| {
                order.push(args[0].clone());
                let mut r = result(args);
                r.push(crate::result::Metric::info("seq", "n", order.len() as f64));
                Ok(r)
            },
        )
        .unwrap();
        assert!(!stopped);
        // The warm-up round, then the design from its first row: no
        // configuration always first.
        assert_eq!(order, s(&["a", "b", "c", "a", "b", "c", "b", "c", "a"]));
        // The warmup round (runs 1-3) is not kept.
        let seq: Vec<Vec<f64>> = sets
            .iter()
            .map(|st| st.runs.iter().map(|r| r.metric("seq").unwrap()).collect())
            .collect();
        assert_eq!(seq, [vec![4.0, 9.0], vec![5.0, 7.0], vec![6.0, 8.0]]);
    }

    /// Over one period of the design (n rounds, 2n for an odd n) every
    /// configuration runs in every position, and right after every other
    /// one, equally often. The rotation by one herd used before ran b
    /// right after a in 2 of 3 rounds and never a right after b.
    #[test]
    fn rounds_balance_positions_and_neighbours() {
        for n in 1..=9usize {
            let period = if n.is_multiple_of(2) { n } else { 2 * n };
            let rows: Vec<Vec<usize>> = (0..period)
                .map(|r| (0..n).map(|slot| order(r, slot, n)).collect())
                .collect();
            let mut at = vec![vec![0usize; n]; n];
            let mut after = vec![vec![0usize; n]; n];
            for row in &rows {
                let mut sorted = row.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n}: {row:?}");
                for (slot, &c) in row.iter().enumerate() {
                    at[c][slot] += 1;
                }
                for w in row.windows(2) {
                    after[w[0]][w[1]] += 1;
                }
            }
            let per_position = period / n;
            assert!(
                at.iter().flatten().all(|&k| k == per_position),
                "n={n}: {at:?}"
            );
            let per_pair = if n.is_multiple_of(2) { 1 } else { 2 };
            for (i, row) in after.iter().enumerate() {
                for (j, &k) in row.iter().enumerate() {
                    let want = if i == j { 0 } else { per_pair };
                    assert_eq!(k, want, "n={n}: {i} then {j}: {rows:?}");
                }
            }
        }
    }

    #[test]
    fn an_interrupted_child_stops_the_rounds_and_is_kept() {
        let progress = Progress::new(10, "runs");
        let mut n = 0;
        let (sets, stopped) = run_rounds(
            &configs(&["a", "b"]),
            5,
            0,
            &progress,
            Record::default(),
            |args| {
                n += 1;
                let mut r = result(args);
                r.interrupted = n == 3;
                Ok(r)
            },
        )
        .unwrap();
        assert!(stopped);
        assert_eq!(n, 3);
        // Round 2 starts with b (row 1: b a): b's run is the interrupted one.
        assert_eq!((sets[0].runs.len(), sets[1].runs.len()), (1, 2));
        assert!(sets[1].runs[1].interrupted);
    }

    #[test]
    fn a_failed_child_names_its_configuration() {
        let progress = Progress::new(1, "runs");
        let e = run_rounds(
            &configs(&["cleanup=sync"]),
            1,
            0,
            &progress,
            Record::default(),
            |_| anyhow::bail!("boom"),
        )
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("run 1/1 of configuration `cleanup=sync` failed: boom"),
            "{msg}"
        );
    }

    #[test]
    fn a_failed_child_keeps_the_finished_runs_and_a_resume_runs_the_rest() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("cmp.journal.jsonl");
        let cfgs = configs(&["a", "b"]);
        let header = super::super::journal::Header::new("storm", &cfgs, 3, 0);
        let progress = Progress::new(6, "runs");
        let mut j = Journal::create(&path, &header).unwrap();
        let mut n = 0;
        let e = run_rounds(
            &cfgs,
            3,
            0,
            &progress,
            Record {
                done: vec![],
                journal: Some(&mut j),
            },
            |args| {
                n += 1;
                if n == 4 {
                    anyhow::bail!("child killed");
                }
                Ok(result(args))
            },
        )
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("3 finished runs are kept in"), "{msg}");
        // One space between the words (the message once carried the
        // indentation of its source line: "with                  --resume").
        assert!(msg.contains(" the same command with --resume "), "{msg}");
        drop(j);
        // The resume runs only the 3 missing ones, and every set is whole.
        let (mut j, done) = Journal::resume(&path, &header).unwrap();
        assert_eq!(done.len(), 3);
        let mut ran = Vec::new();
        let (sets, stopped) = run_rounds(
            &cfgs,
            3,
            0,
            &progress,
            Record {
                done,
                journal: Some(&mut j),
            },
            |args| {
                ran.push(args[0].clone());
                Ok(result(args))
            },
        )
        .unwrap();
        assert!(!stopped);
        assert_eq!(
            ran,
            s(&["a", "a", "b"]),
            "round 1 from a, then round 2 (a, b)"
        );
        assert_eq!((sets[0].runs.len(), sets[1].runs.len()), (3, 3));
        let (_, all) = Journal::resume(&path, &header).unwrap();
        assert_eq!(all.len(), 6);
    }
}
