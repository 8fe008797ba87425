//! compare's and sweep's warning about a `--cleanup` knob
//! (`--cleanup-work`, `--cleanup-poll-ms`, `--seize-batch`, ...) that no
//! configuration's strategy uses (`cleanup/knobs.rs`): said once, before
//! the runs, and kept in the document's notes. Their children, which all
//! get the same flags, say nothing: a knob one strategy of the comparison
//! uses is expected to be ignored by the others.

use clap::Parser;

use super::Config;
use crate::cleanup::{ignored_by_every, CleanupArgs};

/// `storm`'s flags, parsed as its child runs will parse them.
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct StormFlags {
    #[command(flatten)]
    args: crate::scenario::storm::Args,
}

/// `agent`'s flags, parsed as its child runs will parse them.
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct AgentFlags {
    #[command(flatten)]
    args: crate::scenario::agent::Args,
}

/// The `--cleanup` flags of one configuration of `scenario`; `None` for a
/// scenario without them, or arguments its child will refuse anyway.
fn cleanup_of(scenario: &str, args: &[String]) -> Option<CleanupArgs> {
    match scenario {
        "storm" => StormFlags::try_parse_from(args)
            .ok()
            .map(|f| f.args.cleanup),
        "agent" => AgentFlags::try_parse_from(args)
            .ok()
            .map(|f| f.args.cleanup),
        _ => None,
    }
}

/// One note per knob set in some configuration and used by none: each
/// printed on stderr as `herd <command>: warning: ...`; the caller keeps
/// them in its document's notes.
pub fn warn_ignored_knobs(command: &str, scenario: &str, configs: &[Config]) -> Vec<String> {
    let Some(all) = configs
        .iter()
        .map(|c| cleanup_of(scenario, &c.args))
        .collect::<Option<Vec<_>>>()
    else {
        return Vec::new();
    };
    let notes = ignored_by_every(&all);
    for n in &notes {
        eprintln!("herd {command}: warning: {n}");
    }
    notes
}
