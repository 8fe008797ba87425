//! herd's entry point: parse, run, print errors with their context, and
//! turn the outcome into an exit code (0 ok, 1 failure, 2 usage, 130 Ctrl-C).

use std::process::ExitCode;

use clap::Parser;
use herd::cli::{Cli, Command};
use herd::error::exit_code_for;
use herd::scenario;

fn main() -> ExitCode {
    // A perf closer is this executable run again (see perf/closer.rs).
    if let Some(code) = herd::perf::closer::serve() {
        return ExitCode::from(code);
    }
    herd::perf::closer::allow();
    let outcome = match Cli::parse().into_command() {
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
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("Error: {err:#}");
            ExitCode::from(exit_code_for(&err))
        }
    }
}
