//! `herd compare`: not built yet (see its issue).

/// Flags of `herd compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd compare`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd compare is not built yet")
}
