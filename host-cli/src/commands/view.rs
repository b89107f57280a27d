//! `host-cli view [SESSION] [--port N] [--view-only] [--max-width W]`.

use std::process::ExitCode;

use clap::Args;

/// `host-cli view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The session to watch (default: the only running one).
    pub session: Option<String>,
    /// The port on 127.0.0.1 (default: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// The link shows the screen and the run's state, with no controls.
    #[arg(long)]
    pub view_only: bool,
    /// Scale frames down to at most this width (the snapshot stays at
    /// full resolution).
    #[arg(long, value_parser = clap::value_parser!(u32).range(16..=8192))]
    pub max_width: Option<u32>,
}

pub async fn run(a: ViewArgs) -> anyhow::Result<ExitCode> {
    sandtop_view::serve(sandtop_view::Options {
        session: a.session,
        port: a.port,
        view_only: a.view_only,
        max_width: a.max_width,
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
