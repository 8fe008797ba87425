//! Command-line definitions. Each subcommand's flags live next to the code
//! that uses them (`scenario::<name>::Args`); this file only
//! lists the subcommands. Plain `herd` (no subcommand) is `herd storm` with
//! every one of its flags: the storm's [`scenario::storm::Args`] are
//! flattened into [`Cli`] (clap's default-subcommand pattern), so `herd
//! --waves 10` and `herd storm --waves 10` are the same run. Nothing below
//! [`main`] reads [`Cli`]: the dependency goes one way, cli -> scenarios.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::exit_code_for;
use crate::scenario;

/// herd's entry point (the binary is this one call): parse, run, print
/// errors with their context, and turn the outcome into an exit code (0
/// ok, 1 failure, 2 usage, 3 resource refusal, 130 Ctrl-C).
pub fn main() -> ExitCode {
    // A perf closer is this executable run again (see perf/closer.rs).
    if let Some(code) = crate::perf::closer::serve() {
        return ExitCode::from(code);
    }
    crate::perf::closer::allow();
    let command = Cli::parse().into_command();
    // herd's own variables set by hand: refused before any command.
    let outcome = crate::internal_env::check().and_then(|()| match command {
        Command::Storm(a) => scenario::storm::run(&a),
        Command::Env(a) => scenario::env::run(&a),
        Command::Compare(a) => scenario::compare::run(&a),
        Command::Diff(a) => scenario::diff::run(&a),
        Command::Sweep(a) => scenario::sweep::run(&a),
        Command::Unregister(a) => scenario::unregister::run(&a),
        Command::Gp(a) => scenario::gp::run(&a),
        Command::Membarrier(a) => scenario::membarrier::run(&a),
        Command::Agent(a) => scenario::agent::run(&a),
        Command::Report(a) => scenario::report::run(&a),
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("Error: {err:#}");
            ExitCode::from(exit_code_for(&err))
        }
    }
}

/// Reproduce and measure the thread-exit thundering herd.
///
/// Without a subcommand, runs `herd storm` with the flags given.
#[derive(Debug, Parser)]
#[command(
    name = "herd",
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_value_name = "COMMAND",
    subcommand_help_heading = "Commands (storm when omitted)",
    after_long_help = ENVIRONMENT_HELP
)]
pub(crate) struct Cli {
    /// What to run; `storm` when omitted.
    #[command(subcommand)]
    command: Option<Command>,
    /// `herd storm`'s flags, for plain `herd`.
    #[command(flatten)]
    storm: scenario::storm::Args,
}

impl Cli {
    /// The command to run: the subcommand given, else the storm with the
    /// flags given without one.
    pub(crate) fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Storm(self.storm))
    }
}

/// The end of `herd --help`: the environment variables herd reads.
const ENVIRONMENT_HELP: &str = "\
Environment:
  HERD_LIBURCU=FILE  the liburcu --cleanup urcu loads (default liburcu-memb.so.8)
  HERD_CHILD, HERD_PERF_KEPT, HERD_PERF_CLOSER_*
                     internal: herd sets them for the processes it starts;
                     set by hand they are refused (exit 2) unless they are
                     what herd would set (docs/herd-guide.md#environment)";

/// herd's subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Waves of short-lived threads spawned and cancelled across every CPU.
    Storm(scenario::storm::Args),
    /// Host facts and limits: CPUs, kernel, thread limits, perf and tracefs.
    Env(scenario::env::Args),
    /// Several configurations, interleaved and repeated, with significance.
    Compare(scenario::compare::Args),
    /// Compare two saved JSON results.
    Diff(scenario::diff::Args),
    /// One flag over a range for several configurations, with SVG charts.
    Sweep(scenario::sweep::Args),
    /// Register/unregister objects under an exitq domain with readers active.
    Unregister(scenario::unregister::Args),
    /// Grace-period latency as a function of the first-check delay and load.
    Gp(scenario::gp::Args),
    /// membarrier(2) PRIVATE_EXPEDITED rate and latency.
    Membarrier(scenario::membarrier::Args),
    /// Bursts of short jobs: thread per job vs pools (exitq::pool).
    Agent(scenario::agent::Args),
    /// Saved results as one self-contained HTML page (charts, heat maps).
    Report(scenario::report::Args),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// scripts/perf-stat.sh runs herd itself when its first word is one of
    /// herd's subcommands: its list names every one (`report` was missing,
    /// so `perf-stat.sh report ...` ran a program called `report`).
    #[test]
    fn perf_stat_script_knows_every_subcommand() {
        use clap::CommandFactory;
        let script = include_str!("../../scripts/perf-stat.sh");
        let line = script
            .lines()
            .find(|l| l.starts_with("HERD_SUBCOMMANDS="))
            .expect("HERD_SUBCOMMANDS in scripts/perf-stat.sh");
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            assert!(
                line.contains(&format!(" {name} ")),
                "scripts/perf-stat.sh's HERD_SUBCOMMANDS lacks {name}: {line}"
            );
        }
    }

    fn storm_args(argv: &[&str]) -> scenario::storm::Args {
        match Cli::try_parse_from(argv).expect("parses").into_command() {
            Command::Storm(a) => a,
            other => panic!("not a storm: {other:?}"),
        }
    }

    #[test]
    fn plain_herd_takes_every_storm_flag() {
        let plain = storm_args(&["herd", "--waves", "10", "--cpus", "0", "-r", "3", "--json"]);
        let sub = storm_args(&[
            "herd", "storm", "--waves", "10", "--cpus", "0", "-r", "3", "--json",
        ]);
        assert_eq!(format!("{plain:?}"), format!("{sub:?}"));
        assert_eq!(plain.waves, Some(10));
        assert_eq!(plain.out.runs, 3);
        assert_eq!(
            format!("{:?}", storm_args(&["herd"])),
            format!("{:?}", storm_args(&["herd", "storm"]))
        );
    }

    #[test]
    fn storm_flags_before_another_subcommand_are_refused() {
        let err = Cli::try_parse_from(["herd", "--waves", "10", "env"]).unwrap_err();
        assert_ne!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(Cli::try_parse_from(["herd", "env", "--waves", "3"]).is_err());
        assert!(matches!(
            Cli::try_parse_from(["herd", "env"]).unwrap().into_command(),
            Command::Env(_)
        ));
    }
}
