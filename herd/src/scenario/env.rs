//! `herd env`: the host facts and limits that decide whether a storm can
//! run ([`crate::host::HostFacts`]), as a table or one JSON document.

use anyhow::Result;

use crate::export::run::print_out;
use crate::host::HostFacts;

/// Flags of `herd env`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Print the facts as one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `herd env`: prints the host facts as a table or JSON.
pub fn run(args: &Args) -> Result<u8> {
    let facts = HostFacts::read();
    let text = if args.json {
        serde_json::to_string_pretty(&facts)? + "\n"
    } else {
        facts.table()
    };
    print_out(&text)?;
    Ok(0)
}
