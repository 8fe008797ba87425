//! `herd agent`: not built yet (see its issue).

/// Flags of `herd agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd agent`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd agent is not built yet")
}
