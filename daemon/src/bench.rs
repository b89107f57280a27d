//! `sandtopd bench` (filled in below).

/// Options of `sandtopd bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(_args: BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not yet")
}
