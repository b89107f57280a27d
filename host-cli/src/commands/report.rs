//! `host-cli report RUN [-o FILE] [--force] [--journal FILE] [--replay DIR]`:
//! the options, checked once, then one call into [`sandtop_report`].

use std::path::PathBuf;
use std::process::ExitCode;

use sandtop_report::{Journal, render_with, session_journal_of, write_new};

/// `host-cli report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The run folder (the one `host-cli run` printed).
    pub run: PathBuf,
    /// Where to write the report (default: RUN/report.html).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Replace an existing report.
    #[arg(long)]
    pub force: bool,
    /// The session's egress journal (`egress.jsonl` in its folder), when
    /// the run recorded no network decisions itself (default: looked up
    /// from the run's session, if that session still exists).
    #[arg(long)]
    pub journal: Option<PathBuf>,
    /// Show a replay beside the recording: `host-cli replay`'s output
    /// folder (its -o); after each step's call, the recorded screen and
    /// the replayed one side by side.
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
}

/// `host-cli report RUN [-o FILE] [--force]`.
pub fn run(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| a.run.join("report.html"));
    if out.exists() && !a.force {
        anyhow::bail!(
            "{} exists: give another -o, or --force to replace it",
            out.display()
        );
    }
    let journal_path = a.journal.clone().or_else(|| session_journal_of(&a.run));
    let journal = match &journal_path {
        Some(p) => Journal::File(p),
        None => Journal::None,
    };
    if let Some(r) = &a.replay
        && !r.is_dir()
    {
        anyhow::bail!(
            "--replay {}: not a folder (give host-cli replay's -o)",
            r.display()
        );
    }
    let html = render_with(&a.run, journal, a.replay.as_deref())?;
    write_new(&out, &html, a.force)?;
    eprintln!(
        "host-cli: wrote {} ({} KiB)",
        out.display(),
        html.len().div_ceil(1024)
    );
    Ok(ExitCode::SUCCESS)
}
