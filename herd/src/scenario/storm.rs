//! `herd storm`: not built yet (see its issue).

/// Flags of `herd storm`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs `herd storm`.
pub fn run(_args: &Args) -> anyhow::Result<u8> {
    anyhow::bail!("herd storm is not built yet")
}

/// Plain `herd`: the storm on its built-in defaults.
pub fn run_default() -> anyhow::Result<u8> {
    run(&Args {})
}
