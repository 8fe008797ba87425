//! Host facts and limits (being built: herd storm issue).

/// Flags of `herd env`.
#[derive(Debug, Clone, clap::Args)]
pub struct EnvArgs {}

/// Runs `herd env`.
pub fn run_env(_args: &EnvArgs) -> anyhow::Result<u8> {
    anyhow::bail!("herd env is not built yet")
}
