//! `herd membarrier`: not built yet (see its issue).

/// Flags of `herd membarrier`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd membarrier`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd membarrier is not built yet")
}
