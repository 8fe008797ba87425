//! `herd sweep`: not built yet (see its issue).

/// Flags of `herd sweep`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd sweep`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd sweep is not built yet")
}
