//! `herd gp`: not built yet (see its issue).

/// Flags of `herd gp`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd gp`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd gp is not built yet")
}
