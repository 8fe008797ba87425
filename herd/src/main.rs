//! herd's entry point: parse, run, print errors with their context, and
//! turn the outcome into an exit code (0 ok, 1 failure, 2 usage, 130 Ctrl-C).

use std::process::ExitCode;

use clap::Parser;
use herd::cli::{Cli, Command};
use herd::error::exit_code_for;
use herd::{host, scenario};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        None => scenario::storm::run_default(),
        Some(Command::Storm(a)) => scenario::storm::run(&a),
        Some(Command::Env(a)) => host::run_env(&a),
        Some(Command::Compare(a)) => scenario::compare::run(&a),
        Some(Command::Diff(a)) => scenario::diff::run(&a),
        Some(Command::Sweep(a)) => scenario::sweep::run(&a),
        Some(Command::Unregister(a)) => scenario::unregister::run(&a),
        Some(Command::Gp(a)) => scenario::gp::run(&a),
        Some(Command::Membarrier(a)) => scenario::membarrier::run(&a),
        Some(Command::Agent(a)) => scenario::agent::run(&a),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("Error: {err:#}");
            ExitCode::from(exit_code_for(&err))
        }
    }
}
