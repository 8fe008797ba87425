//! `herd gp`: grace-period latency against CPU, as a function of exitq's
//! first-check delay and of what the other CPUs do.
//!
//! A normal exitq grace period sleeps `first_check_delay` before it first
//! looks at the readers: short read sections end meanwhile and concurrent
//! updaters join the same grace period, so fewer checks (less CPU) serve
//! more updates, at the price of latency. The kernel saw the same trade-off
//! when it throttled how often idle CPUs are checked: grace periods grew
//! longer and a loop waiting for them slowed by ~40% on an idle machine,
//! not on a busy one. This scenario measures that shape for each
//! `--delay` (and `expedited`, the other extreme) and each `--load`:
//!
//! * `idle`: one registered reader per online CPU but one, each asleep
//!   outside any read section (registered, quiescent);
//! * `busy`: the same readers running read sections of `--section` back to
//!   back (a grace period must wait for the section in progress);
//! * `N`: N busy readers.
//!
//! `--updaters` threads call `synchronize()` back to back for `--duration`
//! per cell. Per cell: the latency of each call (p50/p99/max), grace periods
//! completed, updates (synchronize calls) served per grace period, and the
//! CPU time of the waiting side (updaters and the domain's own threads:
//! process CPU minus the readers') per grace period and as a share of one
//! CPU.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::gpkit::{
    self, fmt_ns, format_duration, new_histogram, record, spawn_error, CpuTime, Latency, OutputArgs,
};
use super::load::{self, Load, LoadThreads};
use crate::error::usage;
use crate::export::format::fmt_value;
use crate::perf::{self, PerfArgs};
use crate::result::{Metric, RunResult};
use crate::runner;

/// One point of the `--delay` axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Point {
    /// `synchronize()` with this first-check delay.
    Delay(Duration),
    /// `synchronize_expedited()` (no delay, membarrier, spinning).
    Expedited,
}

impl Point {
    /// Parses a duration (`0`, `10us`, `1ms`) or `expedited`.
    pub fn parse(s: &str) -> std::result::Result<Point, String> {
        match s.trim() {
            "expedited" => Ok(Point::Expedited),
            t => {
                let d = gpkit::parse_duration(t)?;
                if d > Duration::from_secs(1) {
                    return Err(format!("`{t}` is more than 1s"));
                }
                Ok(Point::Delay(d))
            }
        }
    }

    /// `0`, `10us`, `expedited`.
    pub fn label(&self) -> String {
        match self {
            Point::Delay(d) => format_duration(*d),
            Point::Expedited => "expedited".into(),
        }
    }
}

/// Flags of `herd gp`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// First-check delays to measure (comma-separated durations, or
    /// `expedited` for synchronize_expedited).
    #[arg(long, value_delimiter = ',', default_value = "0,10us,100us,1ms", value_parser = Point::parse)]
    pub delay: Vec<Point>,
    /// What the other CPUs do: idle (registered readers asleep), busy (one
    /// reader per CPU but one in back-to-back read sections) or N busy
    /// readers; comma-separated for several.
    #[arg(long, value_delimiter = ',', default_value = "idle,busy", value_parser = Load::parse)]
    pub load: Vec<Load>,
    /// Threads calling synchronize() back to back (they share grace periods).
    #[arg(long, default_value_t = 2)]
    pub updaters: usize,
    /// How long each (load, delay) cell runs.
    #[arg(long, default_value = "500ms", value_parser = gpkit::parse_duration)]
    pub duration: Duration,
    /// How long a busy reader stays inside each read section.
    #[arg(long, default_value = "1us", value_parser = gpkit::parse_duration)]
    pub section: Duration,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
    /// Output format and repetitions.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Most updater threads (a typo guard).
const MAX_UPDATERS: usize = 65_536;

impl Args {
    fn validate(&self) -> Result<()> {
        if self.delay.is_empty() {
            return Err(usage("--delay", "give at least one delay"));
        }
        if self.load.is_empty() {
            return Err(usage("--load", "give at least one load"));
        }
        for (flag, dup) in [
            ("--delay", has_dup(&self.delay)),
            ("--load", has_dup(&self.load)),
        ] {
            if dup {
                return Err(usage(flag, "lists a value twice"));
            }
        }
        if !(1..=MAX_UPDATERS).contains(&self.updaters) {
            return Err(usage(
                "--updaters",
                format!("must be between 1 and {MAX_UPDATERS}"),
            ));
        }
        if self.duration < Duration::from_millis(1) || self.duration > gpkit::MAX_RUN {
            return Err(usage("--duration", "must be between 1ms and 24h"));
        }
        if self.section > Duration::from_millis(100) {
            return Err(usage("--section", "must be at most 100ms"));
        }
        Ok(())
    }

    /// The arguments that reproduce this configuration (no output flags).
    pub fn to_args(&self) -> Vec<String> {
        let join = |v: Vec<String>| v.join(",");
        let mut a = vec![
            "--delay".into(),
            join(self.delay.iter().map(Point::label).collect()),
            "--load".into(),
            join(self.load.iter().map(Load::label).collect()),
            "--updaters".into(),
            self.updaters.to_string(),
            "--duration".into(),
            format_duration(self.duration),
            "--section".into(),
            format_duration(self.section),
        ];
        a.extend(gpkit::perf_args(&self.perf));
        a
    }
}

fn has_dup<T: PartialEq>(v: &[T]) -> bool {
    v.iter().enumerate().any(|(i, x)| v[..i].contains(x))
}

/// One (load, delay) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// `idle`, `busy` or a reader count.
    pub load: String,
    /// Reader threads.
    pub readers: usize,
    /// `0`, `10us`, ..., `expedited`.
    pub delay: String,
    /// Seconds measured.
    pub elapsed_s: f64,
    /// synchronize() calls (updates served).
    pub updates: u64,
    /// Grace periods completed.
    pub grace_periods: u64,
    /// Latency of each synchronize() call.
    pub latency: Latency,
    /// CPU of the waiting side: process minus readers.
    pub gp_side_cpu: CpuTime,
    /// CPU of the updater threads alone.
    pub updater_cpu: CpuTime,
    /// CPU of the readers.
    pub reader_cpu: CpuTime,
    /// Read sections completed by the readers.
    pub reader_sections: u64,
}

impl Cell {
    fn updates_per_gp(&self) -> f64 {
        if self.grace_periods == 0 {
            0.0
        } else {
            self.updates as f64 / self.grace_periods as f64
        }
    }
    fn cpu_us_per_gp(&self) -> f64 {
        if self.grace_periods == 0 {
            0.0
        } else {
            self.gp_side_cpu.total() * 1e6 / self.grace_periods as f64
        }
    }
    fn cpu_pct(&self) -> f64 {
        100.0 * self.gp_side_cpu.total() / self.elapsed_s.max(1e-9)
    }
}

/// Runs `herd gp`.
pub fn run(args: &Args) -> Result<u8> {
    args.validate()?;
    // Each cell's readers run beside its updaters (and exitq's reclaimer);
    // the cells run one after the other.
    let online = gpkit::usable_cpus().len();
    let readers = args
        .load
        .iter()
        .map(|l| match l {
            Load::Idle => Load::Busy.threads(online),
            other => other.threads(online),
        })
        .max()
        .unwrap_or(0);
    gpkit::preflight_threads(
        "--load",
        &format!("{readers} reader(s) and {} updater(s)", args.updaters),
        readers + args.updaters + 1,
    )?;
    let (code, _) = gpkit::run_scenario("gp", &args.output, || run_once(args), render)?;
    Ok(code)
}

fn run_once(args: &Args) -> Result<RunResult> {
    runner::install_interrupt_handler();
    let cpus = gpkit::usable_cpus();
    let mut result = RunResult::new(
        "gp",
        args.to_args(),
        serde_json::json!({
            "delay": args.delay.iter().map(Point::label).collect::<Vec<_>>(),
            "load": args.load.iter().map(Load::label).collect::<Vec<_>>(),
            "updaters": args.updaters,
            "duration_s": args.duration.as_secs_f64(),
            "section_s": args.section.as_secs_f64(),
        }),
        gpkit::host_facts(),
    );
    let mut session = perf::Session::open(&args.perf, &cpus)?;
    let mut cells = Vec::new();
    'outer: for &load in &args.load {
        for &point in &args.delay {
            if runner::interrupted() {
                result.interrupted = true;
                break 'outer;
            }
            cells.push(run_cell(args, load, point, cpus.len(), &mut session)?);
        }
    }
    if runner::interrupted() {
        result.interrupted = true;
    }
    let report = session.finish()?;
    let single = cells.len() == 1;
    for c in &cells {
        let name = |n: &str| {
            if single {
                n.to_string()
            } else {
                format!("{n}{{load={},delay={}}}", c.load, c.delay)
            }
        };
        let us = |ns: f64| ns / 1e3;
        result.push(Metric::lower(
            &name("gp_p50_us"),
            "us",
            us(c.latency.p50_ns as f64),
        ));
        result.push(Metric::lower(
            &name("gp_p99_us"),
            "us",
            us(c.latency.p99_ns as f64),
        ));
        result.push(Metric::lower(
            &name("gp_max_us"),
            "us",
            us(c.latency.max_ns as f64),
        ));
        result.push(Metric::info(
            &name("grace_periods"),
            "GPs",
            c.grace_periods as f64,
        ));
        result.push(Metric::info(
            &name("updates_per_gp"),
            "updates",
            c.updates_per_gp(),
        ));
        if c.grace_periods > 0 {
            result.push(Metric::lower(
                &name("cpu_us_per_gp"),
                "us",
                c.cpu_us_per_gp(),
            ));
        }
        result.push(Metric::lower(&name("gp_side_cpu_pct"), "%", c.cpu_pct()));
    }
    for m in report.metrics(0) {
        result.push(m);
    }
    result.warnings.extend(report.notes());
    result.perf = report.to_json();
    result.details = serde_json::json!({ "cells": cells });
    Ok(result)
}

fn run_cell(
    args: &Args,
    load: Load,
    point: Point,
    online: usize,
    session: &mut perf::Session,
) -> Result<Cell> {
    let mut builder = exitq::Domain::builder();
    if let Point::Delay(d) = point {
        builder = builder.first_check_delay(d);
    }
    let domain = builder.build();
    let nreaders = match load {
        Load::Idle => Load::Busy.threads(online),
        other => other.threads(online),
    };
    let busy = load != Load::Idle;
    let section = args.section;
    let d2 = domain.clone();
    let readers = LoadThreads::start("reader", nreaders, move |_, stop| {
        if !busy {
            // Registered, then quiescent: asleep outside any read section.
            drop(d2.read());
            while !stop.load(Ordering::Relaxed) {
                std::thread::park();
            }
            return 0;
        }
        let mut n = 0u64;
        // At least one section, however late the scheduler runs us (the
        // stop is checked after it): a busy reader that never read would
        // make the cell say nothing.
        loop {
            let g = d2.read();
            if !section.is_zero() {
                let t = Instant::now();
                while t.elapsed() < section {
                    std::hint::spin_loop();
                }
            }
            black_box(&g);
            drop(g);
            n += 1;
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        n
    })?;

    let s0 = domain.stats();
    let proc0 = CpuTime::process();
    session.enable()?;
    let start = Instant::now();
    let deadline = start + args.duration;
    let calls = AtomicU64::new(0);
    let outcomes: Vec<Result<(Histogram<u64>, CpuTime)>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for i in 0..args.updaters {
            let (domain, calls) = (&domain, &calls);
            let h = std::thread::Builder::new()
                .name(format!("herd-updater-{i}"))
                .spawn_scoped(s, move || {
                    let t0 = CpuTime::thread();
                    let mut hist = new_histogram();
                    loop {
                        let t = Instant::now();
                        match point {
                            Point::Delay(_) => domain.synchronize(),
                            Point::Expedited => domain.synchronize_expedited(),
                        }
                        let done = Instant::now();
                        record(&mut hist, done - t);
                        // Relaxed: a count read after the scope joins.
                        calls.fetch_add(1, Ordering::Relaxed);
                        if done >= deadline || runner::interrupted() {
                            break;
                        }
                    }
                    (hist, CpuTime::thread().since(t0))
                });
            match h {
                Ok(h) => handles.push(Ok(h)),
                Err(e) => handles.push(Err(spawn_error("updater", i, e))),
            }
        }
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .map_err(|_| anyhow::anyhow!("an updater thread panicked")),
                Err(e) => Err(e),
            })
            .collect()
    });
    let elapsed = start.elapsed();
    session.disable()?;
    let proc_cpu = CpuTime::process().since(proc0);
    let s1 = domain.stats();
    let reports = readers.stop();
    let rd = load::totals(&reports);

    let mut hist = new_histogram();
    let mut updater_cpu = CpuTime::default();
    for o in outcomes {
        let (h, c) = o?;
        hist.add(&h)
            .map_err(|e| anyhow::anyhow!("merging histograms: {e:?}"))?;
        updater_cpu = updater_cpu.plus(c);
    }
    Ok(Cell {
        load: load.label(),
        readers: nreaders,
        delay: point.label(),
        elapsed_s: elapsed.as_secs_f64(),
        updates: calls.into_inner(),
        grace_periods: s1.grace_periods - s0.grace_periods,
        latency: Latency::of(&hist),
        gp_side_cpu: proc_cpu.since(rd.cpu),
        updater_cpu,
        reader_cpu: rd.cpu,
        reader_sections: rd.iterations,
    })
}

fn render(r: &RunResult) -> String {
    let cells = r.details["cells"].as_array().cloned().unwrap_or_default();
    let mut s = format!(
        "\ngrace periods: {} updater(s) calling synchronize() back to back, {}s per cell{}\n",
        r.config["updaters"],
        fmt_value(r.config["duration_s"].as_f64().unwrap_or(0.0)),
        if r.interrupted { " (interrupted)" } else { "" }
    );
    s += &format!(
        "{:<6} {:>7} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>12}\n",
        "load",
        "readers",
        "delay",
        "GPs",
        "upd/GP",
        "p50",
        "p99",
        "max",
        "CPU/GP",
        "GP CPU%",
        "reads/s"
    );
    for c in &cells {
        let f = |k: &str| c[k].as_f64().unwrap_or(0.0);
        let lat = |k: &str| c["latency"][k].as_f64().unwrap_or(0.0);
        let gps = f("grace_periods");
        let cpu = c["gp_side_cpu"]["user_s"].as_f64().unwrap_or(0.0)
            + c["gp_side_cpu"]["sys_s"].as_f64().unwrap_or(0.0);
        let elapsed = f("elapsed_s").max(1e-9);
        s += &format!(
            "{:<6} {:>7} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8.1}% {:>12}\n",
            c["load"].as_str().unwrap_or("?"),
            c["readers"],
            c["delay"].as_str().unwrap_or("?"),
            fmt_value(gps),
            if gps > 0.0 {
                fmt_value(f("updates") / gps)
            } else {
                "-".into()
            },
            fmt_ns(lat("p50_ns")),
            fmt_ns(lat("p99_ns")),
            fmt_ns(lat("max_ns")),
            if gps > 0.0 {
                fmt_ns(cpu * 1e9 / gps)
            } else {
                "-".into()
            },
            100.0 * cpu / elapsed,
            if c["load"] == "idle" {
                "-".into()
            } else {
                gpkit::fmt_rate(f("reader_sections") / elapsed)
            },
        );
    }
    s += "CPU/GP and GP CPU%: CPU time of the updaters and the domain's threads (process minus readers).\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse() {
        assert_eq!(Point::parse("0").unwrap(), Point::Delay(Duration::ZERO));
        assert_eq!(
            Point::parse("10us").unwrap(),
            Point::Delay(Duration::from_micros(10))
        );
        assert_eq!(Point::parse("expedited").unwrap(), Point::Expedited);
        assert!(Point::parse("2s").is_err());
        assert!(Point::parse("soon").is_err());
        assert_eq!(Point::parse("100us").unwrap().label(), "100us");
    }

    #[test]
    fn duplicates_found() {
        assert!(has_dup(&[1, 2, 1]));
        assert!(!has_dup(&[1, 2, 3]));
    }
}
