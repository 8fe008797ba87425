//! `herd unregister`: not built yet (see its issue).

/// Flags of `herd unregister`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd unregister`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd unregister is not built yet")
}
