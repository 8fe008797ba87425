//! `herd diff A.json B.json`: the comparison of `herd compare`, between two
//! saved results (two kernels, two machines, before and after a patch).
//!
//! Each file may be one run (`herd storm --json`), a set of repetitions
//! (`herd storm -r 5 --json`) or a whole comparison (`herd compare --json`
//! or `--save`). A comparison holds several configurations: the two files'
//! configurations are paired by label (`--label` picks one), and each pair
//! is compared, A as the baseline.
//!
//! Refused unless `--force`: different scenarios, different JSON layout
//! versions, a layout newer than this herd's (even when both files have
//! it: what its fields mean is unknown here), or a different configuration: any key of the typed options
//! (`config`) that differs, except those a comparison file says it varied.
//! Host differences (kernel, CPUs, ...) are the point of a diff and are
//! listed, not refused; a file whose own runs come from different hosts
//! (or herd builds) is flagged: a note and a warning on stderr
//! ([`mixed_within`]), as `herd compare` flags a comparison's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use crate::error::usage;
use crate::export::comparison::{self, Comparison};
use crate::export::comparison_output::ComparisonOutput;
use crate::result::{RunResult, RunSet, SCHEMA_VERSION};

/// Flags of `herd diff`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_long_help = DIFF_HELP, mut_args(ComparisonOutput::diff_help))]
pub struct Args {
    /// The baseline: a run, a RunSet (-r N --json) or a comparison JSON.
    pub a: PathBuf,
    /// The candidate, same kinds as A.
    pub b: PathBuf,
    /// Compare even when scenario, schema or configuration differ.
    #[arg(long)]
    pub force: bool,
    /// Only the configuration with this label (files with several).
    #[arg(long)]
    pub label: Option<String>,
    /// Statistics and output format (the document is a [`DiffDoc`]).
    #[command(flatten)]
    pub output: ComparisonOutput,
}

const DIFF_HELP: &str = "\
Examples:
  herd storm -r 5 --json > before.json; (patch, rebuild) herd storm -r 5 --json > after.json
  herd diff before.json after.json
  herd compare --cleanup locked,exitq --save a.json   # on kernel A, then B.json on kernel B
  herd diff a.json b.json --markdown

Statistics as in `herd compare`: mean ±%stddev, %change of B against A,
Welch's t-test stars and LKP's range rule (R); better/worse when both hold.";

/// One input file, as configurations.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Where it came from.
    pub path: PathBuf,
    /// One set per configuration.
    pub sets: Vec<RunSet>,
    /// Config keys the file's comparison varied (exempt from the check).
    pub varied_keys: Vec<String>,
}

/// The diff document (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct DiffDoc {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Always `herd-diff`.
    pub kind: &'static str,
    /// The baseline file.
    pub a: String,
    /// The candidate file.
    pub b: String,
    /// One comparison per paired configuration.
    pub pairs: Vec<Comparison>,
    /// Differences that were accepted or that the reader should know.
    pub notes: Vec<String>,
}

fn short_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The largest input `herd diff`, `herd report` and `herd compare --resume`
/// read, in bytes (1 GiB).
/// The largest legitimate inputs are a compare journal or a sweep's
/// data.json of many runs: a storm run with perf counters is about 20 KB
/// of JSON, so 10,000 runs (`-r 10000`) are about 200 MB, 2 configurations
/// of them 400 MB; 1 GiB is comfortably above, and keeps `/dev/zero` or a
/// runaway file from taking all memory.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Reads at most [`MAX_INPUT_BYTES`] of `from` (named `name` in errors):
/// a larger input is a usage error, not an unbounded read.
pub fn read_limited(name: &str, from: impl std::io::Read) -> Result<Vec<u8>> {
    read_bounded(name, from, "", "a herd result")
}

/// Reads the file `path` with [`read_limited`] (a regular file larger
/// than the limit is refused before reading it).
pub fn read_file_limited(path: &Path) -> Result<Vec<u8>> {
    read_input(path, "", "a herd result")
}

/// [`read_file_limited`] for the file given to `flag` (e.g. `--resume`),
/// which should be `what` (e.g. "a herd compare journal"): its errors
/// (exit 2) name the flag, the file and the limit.
pub fn read_input(path: &Path, flag: &str, what: &str) -> Result<Vec<u8>> {
    let name = path.display().to_string();
    let file =
        std::fs::File::open(path).map_err(|e| usage(flag, format!("cannot read {name}: {e}")))?;
    if let Ok(m) = file.metadata() {
        if m.is_file() && m.len() > MAX_INPUT_BYTES {
            return Err(too_large(&name, flag, what));
        }
    }
    read_bounded(&name, file, flag, what)
}

fn read_bounded(name: &str, from: impl std::io::Read, flag: &str, what: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut from.take(MAX_INPUT_BYTES + 1), &mut buf)
        .map_err(|e| usage(flag, format!("cannot read {name}: {e}")))?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_large(name, flag, what));
    }
    Ok(buf)
}

fn too_large(name: &str, flag: &str, what: &str) -> anyhow::Error {
    usage(
        flag,
        format!("{name}: larger than {MAX_INPUT_BYTES} bytes (1 GiB): not {what}"),
    )
}

/// Reads a run, a RunSet or a comparison document.
pub fn load(path: &Path) -> Result<Loaded> {
    let text = String::from_utf8(read_file_limited(path)?).map_err(|_| {
        usage(
            "",
            format!("{}: not text (UTF-8): not a herd result", path.display()),
        )
    })?;
    parse(path, &text)
}

/// [`load`] on text already read.
pub fn parse(path: &Path, text: &str) -> Result<Loaded> {
    let bad = |why: String| usage("", format!("{}: {why}", path.display()));
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let name = short_name(path);
    if v.get("kind").and_then(Value::as_str) == Some(comparison::KIND) {
        let c: Comparison =
            serde_json::from_value(v).map_err(|e| bad(format!("not a herd comparison: {e}")))?;
        let varied_keys = c.varied.iter().map(|f| config_key(f)).collect();
        return Ok(Loaded {
            path: path.to_path_buf(),
            sets: c.sets,
            varied_keys,
        });
    }
    if v.get("runs").is_some() {
        let set: RunSet =
            serde_json::from_value(v).map_err(|e| bad(format!("not a herd RunSet: {e}")))?;
        return Ok(Loaded {
            path: path.to_path_buf(),
            sets: vec![set],
            varied_keys: vec![],
        });
    }
    if v.get("metrics").is_some() {
        let run: RunResult =
            serde_json::from_value(v).map_err(|e| bad(format!("not a herd run: {e}")))?;
        return Ok(Loaded {
            path: path.to_path_buf(),
            sets: vec![RunSet {
                schema: run.schema,
                label: name,
                runs: vec![run],
            }],
            varied_keys: vec![],
        });
    }
    Err(bad(
        "not a herd result (expected `herd <scenario> --json` output or `herd compare --json`)"
            .into(),
    ))
}

/// The `config` key a flag sets: `--per-wave` -> `per_wave`.
pub fn config_key(flag: &str) -> String {
    flag.trim_start_matches('-').replace('-', "_")
}

/// Flattens a JSON value into `path -> value` pairs (`a.b[2].c`).
fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// Keys whose values differ between two JSON objects, as `key: a vs b`.
pub fn differences(a: &Value, b: &Value, exempt: &[String]) -> Vec<String> {
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten("", a, &mut fa);
    flatten("", b, &mut fb);
    let keys: std::collections::BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    keys.into_iter()
        .filter(|k| {
            let top = k.split(['.', '[']).next().unwrap_or(k);
            !exempt.iter().any(|e| e == top || e == *k)
        })
        .filter_map(|k| {
            let (va, vb) = (fa.get(k), fb.get(k));
            (va != vb).then(|| {
                let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(absent)".into());
                format!("{k}: {} vs {}", show(va), show(vb))
            })
        })
        .collect()
}

/// Why `a` and `b` must not be compared (empty: compatible).
pub fn incompatibilities(a: &RunSet, b: &RunSet, exempt: &[String]) -> Vec<String> {
    let mut why = Vec::new();
    let (Some(ra), Some(rb)) = (a.runs.first(), b.runs.first()) else {
        why.push("a side has no runs".to_string());
        return why;
    };
    if ra.scenario != rb.scenario {
        why.push(format!("scenario: {} vs {}", ra.scenario, rb.scenario));
    }
    if a.schema != b.schema || ra.schema != rb.schema {
        why.push(format!("JSON schema: {} vs {}", ra.schema, rb.schema));
    }
    // Two files of one newer schema agree with each other, but this herd
    // does not know what their fields mean (the schema is bumped when a
    // field changes meaning), and serde drops the fields it does not know.
    for set in [a, b] {
        let newest = set.runs.iter().map(|r| r.schema).chain([set.schema]).max();
        if let Some(n) = newest.filter(|&n| n > SCHEMA_VERSION) {
            why.push(format!(
                "{}: JSON schema {n}, newer than this herd's ({SCHEMA_VERSION}, herd {}): \
                 its figures may mean something else here; a newer herd diffs it",
                set.label,
                env!("CARGO_PKG_VERSION")
            ));
        }
    }
    for set in [a, b] {
        if let Some(odd) = set.runs.iter().find(|r| r.config != set.runs[0].config) {
            why.push(format!(
                "{}: runs with different configurations inside one set ({})",
                set.label,
                differences(&set.runs[0].config, &odd.config, &[]).join(", ")
            ));
        }
    }
    why.extend(
        differences(&ra.config, &rb.config, exempt)
            .into_iter()
            .map(|d| format!("config {d}")),
    );
    why
}

/// Paired configurations (A, B) and notes about the unpaired.
type Pairing = (Vec<(RunSet, RunSet)>, Vec<String>);

/// Pairs the configurations of two files (by label when either has several).
fn pair(a: &Loaded, b: &Loaded, only: Option<&str>) -> Result<Pairing> {
    let pick = |l: &Loaded| -> Result<Vec<RunSet>> {
        match only {
            None => Ok(l.sets.clone()),
            Some(label) => {
                let sets: Vec<RunSet> = l
                    .sets
                    .iter()
                    .filter(|s| s.label == label)
                    .cloned()
                    .collect();
                if sets.is_empty() {
                    let have: Vec<&str> = l.sets.iter().map(|s| s.label.as_str()).collect();
                    return Err(usage(
                        "--label",
                        format!(
                            "{} has no `{label}` (it has: {})",
                            l.path.display(),
                            have.join(", ")
                        ),
                    ));
                }
                Ok(sets)
            }
        }
    };
    let (sa, sb) = (pick(a)?, pick(b)?);
    let mut notes = Vec::new();
    if sa.len() == 1 && sb.len() == 1 {
        let (mut x, mut y) = (sa[0].clone(), sb[0].clone());
        x.label = format!("A: {}", short_name(&a.path));
        y.label = format!("B: {}", short_name(&b.path));
        if sa[0].label != sb[0].label {
            notes.push(format!(
                "labels differ: A is `{}`, B is `{}`",
                sa[0].label, sb[0].label
            ));
        }
        return Ok((vec![(x, y)], notes));
    }
    let mut pairs = Vec::new();
    for x in &sa {
        match sb.iter().find(|y| y.label == x.label) {
            Some(y) => {
                let (mut x, mut y) = (x.clone(), y.clone());
                let label = x.label.clone();
                x.label = format!("A: {label}");
                y.label = format!("B: {label}");
                pairs.push((x, y));
            }
            None => notes.push(format!("`{}` is only in A", x.label)),
        }
    }
    for y in sb.iter().filter(|y| !sa.iter().any(|x| x.label == y.label)) {
        notes.push(format!("`{}` is only in B", y.label));
    }
    if pairs.is_empty() {
        return Err(usage(
            "",
            "no configuration label is in both files (use --label, or files with one configuration)",
        ));
    }
    Ok((pairs, notes))
}

/// One note per identity fact (kernel, CPUs, hostname, herd version, ...:
/// [`crate::scenario::compare::hosts::IDENTITY`]) that differs between the
/// runs of file `l` itself (`which`: `A` or `B`). A diff says how the two
/// files' hosts differ; a file whose own runs come from different hosts
/// (runs merged by hand, a `--resume` elsewhere) pools them in its
/// statistics, and that is said too.
pub fn mixed_within(l: &Loaded, which: &str) -> Vec<String> {
    let runs: Vec<&RunResult> = l.sets.iter().flat_map(|s| &s.runs).collect();
    crate::scenario::compare::hosts::differing(&runs)
        .into_iter()
        .map(|d| {
            format!(
                "{which} ({}) mixes runs measured on different hosts or herd builds: {d}; its \
                 statistics pool them",
                l.path.display()
            )
        })
        .collect()
}

/// Builds the diff of two loaded files.
pub fn diff(a: &Loaded, b: &Loaded, args: &Args) -> Result<DiffDoc> {
    let (pairs, mut notes) = pair(a, b, args.label.as_deref())?;
    notes.extend(mixed_within(a, "A"));
    notes.extend(mixed_within(b, "B"));
    // Inputs known: a pattern that selects nothing is a usage error here
    // (compare, whose metrics come after its runs, notes it instead).
    let all_runs = pairs.iter().flat_map(|(x, y)| x.runs.iter().chain(&y.runs));
    let unmatched = crate::export::comparison::unmatched_patterns(all_runs, &args.output.metrics);
    if !unmatched.is_empty() {
        return Err(usage(
            "--metrics",
            format!(
                "{} select(s) no metric of {} or {}",
                unmatched
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                args.a.display(),
                args.b.display()
            ),
        ));
    }
    let exempt: Vec<String> = a
        .varied_keys
        .iter()
        .chain(&b.varied_keys)
        .cloned()
        .collect();
    let mut comparisons = Vec::new();
    // The pairing's notes go with every pair; each pair's own (forced
    // differences, hosts, versions) with that pair, and all in the document.
    let shared = notes.clone();
    for (x, y) in pairs {
        let mut own: Vec<String> = Vec::new();
        let why = incompatibilities(&x, &y, &exempt);
        if !why.is_empty() {
            if !args.force {
                return Err(usage(
                    "",
                    format!(
                        "`{}` and `{}` are not comparable:\n  {}\n(--force compares them anyway)",
                        x.label,
                        y.label,
                        why.join("\n  ")
                    ),
                ));
            }
            own.extend(why.into_iter().map(|w| format!("forced: {w}")));
        }
        if let (Some(ra), Some(rb)) = (x.runs.first(), y.runs.first()) {
            let host = differences(&ra.host, &rb.host, &[]);
            if !host.is_empty() {
                own.push(format!("hosts differ: {}", host.join("; ")));
            }
            if ra.herd_version != rb.herd_version {
                own.push(format!(
                    "herd versions: {} vs {}",
                    ra.herd_version, rb.herd_version
                ));
            }
        }
        let scenario = x
            .runs
            .first()
            .map(|r| r.scenario.clone())
            .unwrap_or_default();
        let common = x.runs.first().map(|r| r.args.clone()).unwrap_or_default();
        let mut c = args.output.build(&scenario, common, vec![], vec![x, y]);
        c.title = format!(
            "herd diff: {} (A) vs {} (B)",
            args.a.display(),
            args.b.display()
        );
        c.notes.extend(shared.iter().chain(&own).cloned());
        notes.extend(own);
        comparisons.push(c);
    }
    notes.sort();
    notes.dedup();
    Ok(DiffDoc {
        schema: SCHEMA_VERSION,
        kind: "herd-diff",
        a: args.a.display().to_string(),
        b: args.b.display().to_string(),
        pairs: comparisons,
        notes,
    })
}

/// Runs `herd diff`.
pub fn run(args: &Args) -> Result<u8> {
    args.output.check()?;
    // Before anything is read: an output must not replace an input.
    for (flag, out) in [
        ("--report", &args.output.report),
        ("--save", &args.output.save),
    ] {
        if let Some(out) = out {
            if let Some(input) = [&args.a, &args.b]
                .into_iter()
                .find(|i| crate::export::html::same_file(i, out))
            {
                return Err(crate::error::usage(
                    flag,
                    format!(
                        "{} is also an input ({}): it would be replaced",
                        out.display(),
                        input.display()
                    ),
                ));
            }
        }
    }
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    let doc = diff(&a, &b, args)?;
    for n in mixed_within(&a, "A").iter().chain(&mixed_within(&b, "B")) {
        eprintln!("herd diff: warning: {n}");
    }
    args.output
        .emit(&serde_json::to_string_pretty(&doc)?, &doc.pairs)?;
    if let Some(path) = &args.output.report {
        let content = crate::export::html::Content::Diff {
            a: doc.a.clone(),
            b: doc.b.clone(),
            pairs: doc.pairs,
        };
        crate::export::html::write(
            path,
            &[crate::export::html::Section::new(
                "this diff",
                "diff",
                content,
            )],
        )?;
    }
    Ok(0)
}
