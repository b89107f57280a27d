//! The report of a run folder: one self-contained HTML file (`host-cli
//! report RUN` is its command).
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
pub mod html;
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

/// What rendering or writing a report fails on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The run folder (or the session journal) could not be read.
    #[error(transparent)]
    Run(#[from] sandtop_runfolder::Error),
    /// The report's file exists and replacing it was not asked for.
    #[error("{} exists: give another -o, or --force to replace it", path.display())]
    Exists { path: PathBuf },
    /// Creating, replacing or writing the report's file failed.
    #[error("{doing}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
}

pub use html::esc;
pub use image::MAX_WIDTH;

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
pub fn render(dir: &Path, journal: Journal<'_>) -> Result<String, Error> {
    render_with(dir, journal, None)
}

/// [`render`], with `host-cli replay`'s output folder shown beside each
/// step's recorded screens.
pub fn render_with(
    dir: &Path,
    journal: Journal<'_>,
    replay: Option<&Path>,
) -> Result<String, Error> {
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
pub fn write_new(path: &Path, text: &str, force: bool) -> Result<(), Error> {
    let io = |doing: &str| {
        let doing = format!("{doing} {}", path.display());
        move |source| Error::Io { doing, source }
    };
    if force && path.is_file() {
        std::fs::remove_file(path).map_err(io("replacing"))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::Exists {
                    path: path.to_path_buf(),
                }
            } else {
                io("creating")(e)
            }
        })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(io("writing"))
}

/// The journal of the run's session, when the session's folder still
/// exists.
pub fn session_journal_of(run: &Path) -> Option<PathBuf> {
    let text = files::read_regular_text(run, "trajectory.jsonl").ok()?;
    let entries =
        sandtop_runfolder::trajectory::parse_trajectory(text.as_bytes(), "trajectory.jsonl")
            .ok()?;
    let session = entries.iter().find_map(|e| match e {
        sandtop_runfolder::trajectory::Entry::RunStarted(s) => Some(s.session.clone()),
        _ => None,
    })?;
    let store = sandtop_guest::session::Store::open().ok()?;
    // `get` checks the name (a trajectory cannot point outside the store).
    let dir = store.get(&session).ok()?;
    Some(dir.path.join("egress.jsonl"))
}
