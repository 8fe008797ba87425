//! `herd diff`: not built yet (see its issue).

/// Flags of `herd diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd diff`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd diff is not built yet")
}
