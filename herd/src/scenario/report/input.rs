//! Reading saved results for `herd report`, tolerantly.
//!
//! Any document herd writes is recognised by its shape: a run (`herd
//! <scenario> --json`), a set of repetitions (`-r N --json`), a
//! comparison (`herd compare --json/--save`), a compare journal (JSON
//! Lines), a sweep's `data.json` (or its directory), a `herd diff --json`
//! document. What cannot be read is an error naming the file and why
//! (exit 2): a file cut short ("ends early at line L"), not JSON, not a
//! herd document, a document of a kind this herd does not know, a sweep
//! whose parts do not agree (a row of figures longer or shorter than its
//! values: `sweep/shape.rs`). What can be read with parts missing becomes
//! a page that says what is missing: a journal with runs missing (the
//! rounds and configurations named) or with a last line cut short, a
//! result of a newer herd (its schema and version named; fields this herd
//! does not know are ignored).

use std::path::Path;

use anyhow::Result;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::usage;
use crate::export::comparison::{self, Comparison};
use crate::export::html::{Content, Section};
use crate::result::{RunResult, RunSet, SCHEMA_VERSION};
use crate::scenario::compare::journal::{self, Entry, Header};
use crate::scenario::compare::{MAX_CONFIGS, MAX_PLANNED_RUNS, MAX_RUNS, MAX_WARMUP};
use crate::scenario::diff::{read_file_limited, read_limited};
use crate::scenario::sweep::SweepDoc;
use crate::stats::DEFAULT_ALPHA;

/// Reads `path` (`-`: standard input; a directory: its `data.json`).
pub(super) fn read(path: &Path) -> Result<Section> {
    let (path, text) = if path == Path::new("-") {
        let bytes = read_limited("standard input", std::io::stdin())?;
        let s = String::from_utf8(bytes)
            .map_err(|_| usage("", "standard input: not text (UTF-8): not a herd result"))?;
        (path.to_path_buf(), s)
    } else {
        let file = if path.is_dir() {
            path.join("data.json")
        } else {
            path.to_path_buf()
        };
        let text = read_file_limited(&file)?;
        let text = String::from_utf8(text).map_err(|_| {
            usage(
                "",
                format!("{}: not text (UTF-8): not a herd result", file.display()),
            )
        })?;
        (file, text)
    };
    let mut s = parse(&path.display().to_string(), &text)?;
    s.file_time = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .map(|t| humantime::format_rfc3339_seconds(t).to_string());
    Ok(s)
}

/// A usage error about `origin`.
fn bad(origin: &str, why: impl std::fmt::Display) -> anyhow::Error {
    usage("", format!("{origin}: {why}"))
}

/// Why `text` is not JSON, in words: cut short, or malformed.
fn json_error(origin: &str, e: &serde_json::Error) -> anyhow::Error {
    match e.classify() {
        serde_json::error::Category::Eof => bad(
            origin,
            format!(
                "the JSON ends early at line {}, column {}: the file is cut short (a copy that did \
                 not finish, or a run stopped while writing); a compare's journal keeps every \
                 finished run",
                e.line(),
                e.column()
            ),
        ),
        _ => bad(origin, format!("not JSON: {e}")),
    }
}

/// Deserialises `v` as a `what`; the error says what is wrong: a newer
/// schema (a newer herd's report reads it), a `schema` that is no schema
/// number, or a document of this herd's schema that is damaged.
fn typed<T: DeserializeOwned>(origin: &str, what: &str, v: Value) -> Result<T> {
    let schema = v.get("schema").cloned();
    serde_json::from_value(v).map_err(|e| {
        let version = env!("CARGO_PKG_VERSION");
        let why = match schema.as_ref().map(|s| (s, s.as_u64())) {
            Some((_, Some(n))) if n > u64::from(SCHEMA_VERSION) => format!(
                "it has JSON schema {n}, this herd ({version}) reads schema {SCHEMA_VERSION}: a \
                 newer herd's report reads it"
            ),
            Some((_, Some(n))) if n >= 1 => format!(
                "it has JSON schema {n}, which this herd ({version}) reads, but the document does \
                 not have the fields of one: it was edited, damaged or not written by herd"
            ),
            Some((s, _)) => format!(
                "its `schema` is {s}, not a schema number (a whole number from 1; this herd \
                 writes {SCHEMA_VERSION}): it was edited, damaged or not written by herd"
            ),
            None => "it has no `schema` field: it was edited, damaged or not written by herd"
                .to_string(),
        };
        bad(
            origin,
            format!("a {what} this herd cannot read ({e}); {why}"),
        )
    })
}

/// A note when `v` was written with a newer JSON schema than this herd's.
fn newer(v: &Value) -> Option<String> {
    let schema = v.get("schema")?.as_u64()?;
    (schema > u64::from(SCHEMA_VERSION)).then(|| {
        let by = v
            .get("herd_version")
            .and_then(Value::as_str)
            .map(|h| format!(" by herd {h}"))
            .unwrap_or_default();
        format!(
            "Written{by} with JSON schema {schema}; this herd ({}) reads schema {SCHEMA_VERSION}: \
             what it does not know of is not shown.",
            env!("CARGO_PKG_VERSION")
        )
    })
}

/// Parses one input's text.
pub(super) fn parse(origin: &str, text: &str) -> Result<Section> {
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| bad(origin, "is empty"))?;
    if let Ok(head) = serde_json::from_str::<Value>(first) {
        if head.get("kind").and_then(Value::as_str) == Some(journal::KIND) {
            return parse_journal(origin, text);
        }
    }
    let v: Value = serde_json::from_str(text).map_err(|e| json_error(origin, &e))?;
    let mut gaps: Vec<String> = newer(&v).into_iter().collect();
    let kind = v.get("kind").and_then(Value::as_str).map(str::to_string);
    let (what, content) = match kind.as_deref() {
        Some(comparison::KIND) => (
            "compare result".to_string(),
            Content::Comparison(typed(origin, "comparison", v)?),
        ),
        Some("herd-sweep") => {
            let doc: SweepDoc = typed(origin, "sweep", v)?;
            if let Some(why) = doc.inconsistency() {
                return Err(bad(
                    origin,
                    format!(
                        "a sweep whose parts do not agree: {why}. herd writes one entry per \
                         configuration and value (null where nothing was measured): the file \
                         was edited or damaged"
                    ),
                ));
            }
            (
                "sweep data".to_string(),
                Content::Sweep(Box::new(doc.report_view())),
            )
        }
        Some("herd-diff") => {
            let pairs: Vec<Comparison> = typed(origin, "diff", v["pairs"].clone())?;
            let side = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
            (
                "diff".to_string(),
                Content::Diff {
                    a: side("a"),
                    b: side("b"),
                    pairs,
                },
            )
        }
        Some(other) if v.get("metrics").is_none() && v.get("runs").is_none() => {
            return Err(bad(
                origin,
                format!("a herd document of kind `{other}`, which this herd does not know (written by a newer herd?)"),
            ));
        }
        _ if v.get("runs").is_some() => {
            let set: RunSet = typed(origin, "set of runs", v)?;
            if let Some(n) = set
                .runs
                .iter()
                .find_map(|r| newer(&serde_json::to_value(r).ok()?))
            {
                gaps.push(n);
            }
            let scenario = set
                .runs
                .first()
                .map_or("", |r| r.scenario.as_str())
                .to_string();
            (
                format!("{} {scenario} runs", set.runs.len()),
                Content::Runs(set),
            )
        }
        _ if v.get("metrics").is_some() => {
            let run: RunResult = typed(origin, "run result", v)?;
            let what = format!("{} run", run.scenario);
            (
                what,
                Content::Runs(RunSet {
                    schema: run.schema,
                    label: origin.to_string(),
                    runs: vec![run],
                }),
            )
        }
        _ => {
            return Err(bad(
                origin,
                "not a herd result (expected the JSON of `herd <scenario> --json`, `herd compare \
                 --save`, a compare journal, a sweep's data.json or `herd diff --json`)",
            ))
        }
    };
    let mut s = Section::new(origin, &what, content);
    s.gaps = gaps;
    Ok(s)
}

/// The longest argument list every configuration starts with.
fn common_prefix(configs: &[(String, Vec<String>)]) -> Vec<String> {
    let Some((_, first)) = configs.first() else {
        return Vec::new();
    };
    let mut n = (0..first.len())
        .take_while(|&i| configs.iter().all(|(_, a)| a.get(i) == first.get(i)))
        .count();
    // A flag whose values differ (`--cleanup locked` / `--cleanup exitq`)
    // belongs to the configurations, not to the shared part.
    while n > 0 && first[n - 1].starts_with('-') && configs.iter().any(|(_, a)| a.len() > n) {
        n -= 1;
    }
    first[..n].to_vec()
}

/// A compare journal: its finished runs as a comparison, and what is
/// missing from it (runs never finished, a last line cut short).
fn parse_journal(origin: &str, text: &str) -> Result<Section> {
    let mut lines = text.split_inclusive('\n').enumerate();
    let (_, first) = lines.next().ok_or_else(|| bad(origin, "is empty"))?;
    let header: Header = serde_json::from_str(first.trim()).map_err(|e| {
        bad(
            origin,
            format!("a compare journal whose header this herd cannot read: {e}"),
        )
    })?;
    if header.configs.is_empty() {
        return Err(bad(origin, "a compare journal without configurations"));
    }
    // The same bounds as compare's flags: the table below is allocated
    // whole, and a crafted header must not make it overflow, exhaust
    // memory or take for ever.
    if !(1..=MAX_RUNS).contains(&header.runs) {
        return Err(bad(
            origin,
            format!(
                "a compare journal whose header has `runs` {}: compare runs 1..={MAX_RUNS}",
                header.runs
            ),
        ));
    }
    if header.warmup > MAX_WARMUP {
        return Err(bad(
            origin,
            format!(
                "a compare journal whose header has `warmup` {}: compare runs 0..={MAX_WARMUP}",
                header.warmup
            ),
        ));
    }
    let rounds = header.warmup + header.runs;
    if header.configs.len() > MAX_CONFIGS || header.configs.len() * rounds > MAX_PLANNED_RUNS {
        return Err(bad(
            origin,
            format!(
                "a compare journal whose header has {} `configs` of {rounds} rounds: compare plans \
                 at most {MAX_CONFIGS} configurations and {MAX_PLANNED_RUNS} runs",
                header.configs.len()
            ),
        ));
    }
    let mut gaps = Vec::new();
    let mut slots: Vec<Vec<Option<RunResult>>> = vec![vec![None; rounds]; header.configs.len()];
    let mut newer_note = None;
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let e: Entry = match serde_json::from_str(line.trim()) {
            Ok(e) => e,
            Err(err) if !line.ends_with('\n') => {
                gaps.push(format!(
                    "The journal's last line (line {}) is cut short ({err}): the run being written when \
                     the comparison stopped; left out.",
                    i + 1
                ));
                continue;
            }
            Err(err) => {
                gaps.push(format!(
                    "Line {} is not a run of this journal ({err}); left out.",
                    i + 1
                ));
                continue;
            }
        };
        if e.config >= header.configs.len() || e.round >= rounds {
            gaps.push(format!(
                "Line {}: round {} of configuration {} is outside the plan; left out.",
                i + 1,
                e.round,
                e.config
            ));
            continue;
        }
        if newer_note.is_none() {
            newer_note = serde_json::to_value(&e.result)
                .ok()
                .as_ref()
                .and_then(newer);
        }
        slots[e.config][e.round] = Some(e.result);
    }
    let mut missing = Vec::new();
    for (c, runs) in slots.iter().enumerate() {
        for (round, r) in runs.iter().enumerate().skip(header.warmup) {
            if r.is_none() {
                missing.push(format!(
                    "round {} of `{}`",
                    round - header.warmup + 1,
                    header.configs[c].0
                ));
            }
        }
    }
    let planned = header.runs * header.configs.len();
    if !missing.is_empty() {
        let listed: Vec<&str> = missing.iter().take(12).map(String::as_str).collect();
        let more = if missing.len() > 12 {
            format!(" and {} more", missing.len() - 12)
        } else {
            String::new()
        };
        gaps.push(format!(
            "{} of the {planned} planned runs are not in the journal: {}{more}. The statistics cover the \
             runs that finished; the same herd compare command with --resume {origin} runs only what is missing.",
            missing.len(),
            listed.join(", ")
        ));
    }
    gaps.extend(newer_note);
    let sets: Vec<RunSet> = header
        .configs
        .iter()
        .zip(slots)
        .map(|((label, _), runs)| RunSet {
            schema: SCHEMA_VERSION,
            label: label.clone(),
            runs: runs.into_iter().skip(header.warmup).flatten().collect(),
        })
        .collect();
    let common = common_prefix(&header.configs);
    let mut c = Comparison::build(
        &header.scenario,
        common,
        Vec::new(),
        sets,
        DEFAULT_ALPHA,
        &[],
    );
    c.title = format!(
        "herd compare (journal): {} {}",
        header.scenario,
        c.common_args.join(" ")
    )
    .trim_end()
    .to_string();
    let mut s = Section::new(origin, "compare journal", Content::Comparison(c));
    s.gaps = gaps;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_json() -> String {
        let mut r = RunResult::new(
            "storm",
            vec!["--waves".into(), "3".into()],
            Value::Null,
            Value::Null,
        );
        r.push(crate::result::Metric::lower("wall_s", "s", 1.0));
        serde_json::to_string_pretty(&r).unwrap()
    }

    fn code(e: &anyhow::Error) -> u8 {
        crate::error::exit_code_for(e)
    }

    #[test]
    fn recognises_a_run_and_a_set() {
        let s = parse("r.json", &run_json()).unwrap();
        assert_eq!(s.kind, "storm run");
        assert!(s.gaps.is_empty());
        let set = format!("{{\"schema\":1,\"label\":\"x\",\"runs\":[{}]}}", run_json());
        assert_eq!(parse("s.json", &set).unwrap().kind, "1 storm runs");
    }

    #[test]
    fn hostile_documents_are_usage_errors_naming_the_file() {
        let text = run_json();
        let cut = &text[..text.len() / 2];
        let e = parse("cut.json", cut).unwrap_err();
        assert_eq!(code(&e), 2);
        assert!(
            e.to_string()
                .contains("cut.json: the JSON ends early at line"),
            "{e}"
        );
        for (doc, says) in [
            ("", "is empty"),
            ("{\"a\": [1, 2}", "not JSON"),
            ("[1, 2, 3]", "not a herd result"),
            ("{\"kind\": \"herd-hologram\"}", "kind `herd-hologram`"),
            (
                "{\"schema\": 9, \"metrics\": 3}",
                "a run result this herd cannot read",
            ),
        ] {
            let e = parse("x.json", doc).unwrap_err();
            assert_eq!(code(&e), 2, "{doc}");
            assert!(e.to_string().contains(says), "{doc}: {e}");
        }
    }

    #[test]
    fn a_newer_result_reads_with_a_note() {
        let mut v: Value = serde_json::from_str(&run_json()).unwrap();
        v["schema"] = 7.into();
        v["herd_version"] = "9.9.9".into();
        v["quantum_flux"] = serde_json::json!({"level": 11});
        let s = parse("new.json", &v.to_string()).unwrap();
        assert_eq!(s.gaps.len(), 1);
        assert!(
            s.gaps[0].contains("by herd 9.9.9 with JSON schema 7"),
            "{:?}",
            s.gaps
        );
    }

    #[test]
    fn a_journal_with_a_missing_round_and_a_torn_line() {
        let header = serde_json::json!({"kind": journal::KIND, "scenario": "storm",
            "configs": [["cleanup=locked", ["--waves", "3", "--cleanup", "locked"]],
                        ["cleanup=exitq", ["--waves", "3", "--cleanup", "exitq"]]],
            "runs": 2, "warmup": 1});
        let r: Value = serde_json::from_str(&run_json()).unwrap();
        let mut text = format!("{header}\n");
        for (round, config) in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)] {
            text += &format!(
                "{}\n",
                serde_json::json!({"round": round, "config": config, "result": r})
            );
        }
        text += "{\"round\": 2, \"config\": 1, \"resu";
        let s = parse("j.jsonl", &text).unwrap();
        assert_eq!(s.kind, "compare journal");
        let Content::Comparison(c) = &s.content else {
            panic!("not a comparison")
        };
        assert_eq!(c.sets[0].runs.len(), 2, "warm-up left out");
        assert_eq!(c.sets[1].runs.len(), 1);
        assert_eq!(c.common_args, ["--waves", "3"]);
        let gaps = s.gaps.join("\n");
        assert!(gaps.contains("last line (line 7) is cut short"), "{gaps}");
        assert!(
            gaps.contains(
                "1 of the 4 planned runs are not in the journal: round 2 of `cleanup=exitq`"
            ),
            "{gaps}"
        );
        assert!(gaps.contains("--resume j.jsonl"), "{gaps}");
    }

    #[test]
    fn common_prefix_of_configurations() {
        let c = |a: &[&str]| {
            (
                "x".to_string(),
                a.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            common_prefix(&[c(&["-a", "1", "-b"]), c(&["-a", "1", "-c"])]),
            ["-a", "1"]
        );
        assert_eq!(
            common_prefix(&[c(&["-a", "1", "-b", "x"]), c(&["-a", "1", "-b", "y"])]),
            ["-a", "1"]
        );
        assert!(common_prefix(&[]).is_empty());
    }
}
