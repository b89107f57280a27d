//! `host-cli report RUN`: one self-contained HTML file of a run.
//!
//! What it shows: the task, session, model, times and ending; for each
//! step (request) the screenshot the model saw with its actions drawn
//! over it in its own coordinates (click points, drags, scroll arrows,
//! typed text and keys), the actions listed, the model's messages and
//! reasoning summaries, what the operator was asked and answered, the
//! ledger, the usage of the request; totals of tokens and time per phase;
//! network decisions; the screen the run ended on.
//!
//! How it stays safe to open: every string from the run is HTML-escaped
//! ([`html::esc`]); screenshots are decoded with the loop's checked
//! decoders, scaled to at most [`image::MAX_WIDTH`] wide and embedded as
//! JPEG `data:` URIs; the page has no script, links nothing, and its
//! Content-Security-Policy (`default-src 'none'; img-src data:;
//! style-src 'unsafe-inline'`) forbids loading anything else. The run
//! folder's files are read as regular files only ([`files`]): a symbolic
//! link or a FIFO in a run folder from elsewhere is named in the report,
//! never followed.

mod events;
pub(crate) mod html;
mod image;
mod overlay;
mod render;
mod replayed;
pub use replayed::replayed_name;
mod totals;

use sandtop_runfolder::{files, read as load};

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

pub use html::esc;
pub use image::MAX_WIDTH;

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

/// Where the network section's entries come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Journal<'a> {
    /// Only what the run's trajectory recorded.
    None,
    /// Also this session journal, for the run's time window, when the
    /// trajectory recorded no egress decision.
    File(&'a Path),
}

/// Renders the report of the run folder `dir`.
pub fn render(dir: &Path, journal: Journal<'_>) -> anyhow::Result<String> {
    render_with(dir, journal, None)
}

/// [`render`], with `host-cli replay`'s output folder shown beside each
/// step's recorded screens.
pub fn render_with(
    dir: &Path,
    journal: Journal<'_>,
    replay: Option<&Path>,
) -> anyhow::Result<String> {
    let run = load::read(dir)?;
    let mut body = render::header(&run);
    for w in &run.warnings {
        body.push_str(&format!("<p class=\"bad\">{}</p>\n", html::esc(w)));
    }
    body.push_str("<p class=\"muted\">Each step shows the screenshot the model saw when it \
                   answered, with its actions drawn in its own coordinates, numbered as listed.</p>\n");
    for (i, s) in run.steps.iter().enumerate() {
        let next = run.steps.get(i + 1).and_then(|n| n.t_start);
        let next = next.or_else(|| run.finished.as_ref().and_then(|(_, t)| *t));
        body.push_str(&render::step(&run, s, next));
        if let Some(r) = replay {
            body.push_str(&replayed::replayed(&run.dir, s, r));
        }
    }
    body.push_str(&render::the_end(&run));
    body.push_str(&totals::totals(&run));
    let (entries, source) = if !run.egress.is_empty() {
        (run.egress.clone(), Some("the run's trajectory".to_string()))
    } else {
        match journal {
            Journal::File(p) if p.is_file() => (
                load::session_journal(p, &run)?,
                Some(format!("the session's journal {}", p.display())),
            ),
            _ => (Vec::new(), None),
        }
    };
    body.push_str(&totals::network(&run, &entries, source.as_deref()));
    let title = format!(
        "Sandtop run: {}",
        overlay::short(&run.started.clone().unwrap_or_default().task, 80)
    );
    Ok(html::page(&title, &body))
}

/// Writes `text` to `path`, 0600, created exclusively (or replacing an
/// existing file when `force`).
pub fn write_new(path: &Path, text: &str, force: bool) -> anyhow::Result<()> {
    if force && path.is_file() {
        std::fs::remove_file(path).with_context(|| format!("replacing {}", path.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow::anyhow!(
                    "{} exists: give another -o, or --force to replace it",
                    path.display()
                )
            } else {
                anyhow::Error::new(e).context(format!("creating {}", path.display()))
            }
        })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .with_context(|| format!("writing {}", path.display()))
}

/// The journal of the run's session, when the session's folder still
/// exists.
fn session_journal_of(run: &Path) -> Option<PathBuf> {
    let text = files::read_regular_text(run, "trajectory.jsonl").ok()?;
    let entries =
        crate::agent::record::parse_trajectory(text.as_bytes(), "trajectory.jsonl").ok()?;
    let session = entries.iter().find_map(|e| match e {
        crate::agent::record::Entry::RunStarted(s) => Some(s.session.clone()),
        _ => None,
    })?;
    let store = crate::session::Store::open().ok()?;
    // `get` checks the name (a trajectory cannot point outside the store).
    let dir = store.get(&session).ok()?;
    Some(dir.path.join("egress.jsonl"))
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
