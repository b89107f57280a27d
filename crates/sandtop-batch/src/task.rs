//! The task file: one JSON object a line, each a task in Sandtop's own
//! shape or in OSWorld's (`config`, `evaluator`: mapped by
//! [`crate::osworld`]). Reading is strict: an unknown field, a missing
//! one, a duplicate id or a bad value is an error naming its line, and a
//! file with any such line runs nothing. What a task asks that Sandtop
//! cannot do (a program the guest lacks, an OSWorld evaluator it does not
//! know) is no error: the task is [`Entry::Unsupported`], with the names.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use sandtop_egress::policy::NetworkMode;

/// Where a task's files may be: the guest user's home (the daemon reads
/// files beneath it; `put_file` writes there).
pub const HOME: &str = "/home/user";
/// The programs a `launch` step may start (the guest's apps; the browser
/// is the daemon's own, opened by `open_url`).
pub const PROGRAMS: &[&str] = &["mousepad", "xterm"];
/// A task's step budget when it gives none.
pub const DEFAULT_MAX_STEPS: u32 = 30;
/// The longest `sleep` and `wait_window` a setup step may ask for.
pub const MAX_WAIT_SECS: f64 = 120.0;
/// The largest file a `put_file` step writes.
pub const MAX_PUT_BYTES: usize = 1024 * 1024;
/// The most actions in one turn of a solution.
pub const MAX_TURN_ACTIONS: usize = sandtop_protocol::limits::MAX_ACTIONS;

/// One setup step, run in order before the model's first turn.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Setup {
    /// The daemon's browser opens this URL in its active tab (started on
    /// first use, on the guest's display).
    OpenUrl(String),
    /// A new tab of the daemon's browser with this URL.
    NewTab(String),
    /// A file of the guest user's home, written whole.
    PutFile { path: String, text: String },
    /// A file fetched by the host (http/https, at most 1 MiB) and put
    /// into the guest's home (OSWorld's `download`).
    Download { url: String, path: String },
    /// A program of [`PROGRAMS`] started with these arguments (argv, no
    /// shell), detached, on the guest's display.
    Launch(Vec<String>),
    /// Waits until a top-level window whose title contains `title` is
    /// listed by the window manager (`_NET_CLIENT_LIST`).
    WaitWindow {
        title: String,
        #[serde(default)]
        timeout_s: Option<f64>,
    },
    /// Waits this many seconds.
    Sleep(f64),
}

/// One check of the guest's state after the run (never a screenshot).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CheckSpec {
    /// The file holds exactly `text` (optionally ignoring case, or all
    /// whitespace: OSWorld's `compare_text_file` options).
    FileEquals {
        path: String,
        text: String,
        #[serde(default)]
        ignore_case: bool,
        #[serde(default)]
        ignore_blanks: bool,
    },
    /// The file holds every `include` and no `exclude` string.
    FileContains {
        path: String,
        #[serde(default)]
        include: Vec<String>,
        #[serde(default)]
        exclude: Vec<String>,
    },
    /// The file is JSON and the value at `pointer` (RFC 6901) equals
    /// `equals`.
    FileJson {
        path: String,
        pointer: String,
        equals: Value,
    },
    /// The demo app's last stored submission has these fields (those
    /// given), read from its own record.
    DemoSubmission {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        email: Option<String>,
        #[serde(default)]
        message: Option<String>,
    },
    /// The active tab's text (the browser driver's `get_page_text`)
    /// contains this.
    PageText { contains: String },
    /// The active tab has a form field labelled `label` whose value is
    /// `equals` (the browser driver's `read_page`).
    FieldValue { label: String, equals: String },
    /// The browser's tabs: how many, and URLs some tab must have
    /// (each compared exactly).
    Tabs {
        #[serde(default)]
        count: Option<usize>,
        #[serde(default)]
        urls: Vec<String>,
    },
    /// The active tab's URL, exactly.
    ActiveUrl { equals: String },
}

/// A task Sandtop can run.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub instruction: String,
    pub setup: Vec<Setup>,
    pub checks: Vec<CheckSpec>,
    pub max_steps: u32,
    /// The guest's network, as `--network` spells it (never `ask`: a
    /// batch has nobody to ask).
    pub network: String,
    /// The scripted solution: one list of Responses API computer actions
    /// per turn, played by the scripted model when no API key is set.
    pub solution: Option<Vec<Vec<Value>>>,
    /// The line of the task file (1-based).
    pub line: usize,
    /// The task was given in OSWorld's shape.
    pub osworld: bool,
}

/// One line of the task file, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Task(Task),
    /// A task that needs what Sandtop does not do: never run, never the
    /// agent's failure.
    Unsupported {
        id: String,
        instruction: String,
        line: usize,
        /// What is unsupported, e.g. `config:execute`, `evaluator:compare_table`.
        names: Vec<String>,
    },
}

impl Entry {
    pub fn id(&self) -> &str {
        match self {
            Entry::Task(t) => &t.id,
            Entry::Unsupported { id, .. } => id,
        }
    }
}

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

/// The task file's errors, every bad line named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct FileErrors(pub Vec<LineError>);

/// A task line in Sandtop's shape.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Native {
    id: String,
    instruction: String,
    #[serde(default)]
    setup: Vec<Setup>,
    checks: Vec<CheckSpec>,
    #[serde(default)]
    max_steps: Option<u32>,
    #[serde(default)]
    network: Option<String>,
    #[serde(default)]
    solution: Option<Vec<Vec<Value>>>,
}

/// One line in Sandtop's own shape (`value` is its JSON object).
pub(crate) fn native(v: Value, line: usize) -> Result<Entry, String> {
    let n: Native = serde_json::from_value(v).map_err(|e| format!("not a task: {e}"))?;
    let task = Task {
        id: n.id,
        instruction: n.instruction,
        setup: n.setup,
        checks: n.checks,
        max_steps: n.max_steps.unwrap_or(DEFAULT_MAX_STEPS),
        network: n.network.unwrap_or_else(|| "none".into()),
        solution: n.solution,
        line,
        osworld: false,
    };
    validate(task)
}

/// The rules every task keeps, whatever its shape; a program the guest
/// lacks makes the task unsupported.
pub(crate) fn validate(t: Task) -> Result<Entry, String> {
    check_id(&t.id)?;
    if t.instruction.trim().is_empty() {
        return Err(format!("task {:?}: `instruction` is empty", t.id));
    }
    if t.checks.is_empty() {
        return Err(format!(
            "task {:?}: no `checks` (a task's verdict comes from its checks)",
            t.id
        ));
    }
    if !(1..=500).contains(&t.max_steps) {
        return Err(format!("task {:?}: `max_steps`: 1 to 500", t.id));
    }
    match t.network.parse::<NetworkMode>() {
        Ok(NetworkMode::Ask { .. }) => {
            return Err(format!(
                "task {:?}: `network`: `ask` needs an operator to answer, and a batch has none",
                t.id
            ));
        }
        Ok(_) => {}
        Err(e) => return Err(format!("task {:?}: `network`: {e}", t.id)),
    }
    let mut unsupported = Vec::new();
    for s in &t.setup {
        match s {
            Setup::PutFile { path, text } => {
                home_path(path).map_err(|e| format!("task {:?}: put_file {e}", t.id))?;
                if text.len() > MAX_PUT_BYTES {
                    return Err(format!("task {:?}: put_file: more than 1 MiB", t.id));
                }
            }
            Setup::Download { url, path } => {
                home_path(path).map_err(|e| format!("task {:?}: download {e}", t.id))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("task {:?}: download: an http(s) URL", t.id));
                }
            }
            Setup::Launch(argv) => match argv.first() {
                None => return Err(format!("task {:?}: launch: an empty argv", t.id)),
                Some(p) if !PROGRAMS.contains(&p.as_str()) => {
                    unsupported.push(format!("launch:{p}"))
                }
                Some(_) => {}
            },
            Setup::OpenUrl(u) | Setup::NewTab(u) => {
                if !(u.starts_with("http://") || u.starts_with("https://") || u == "about:blank") {
                    return Err(format!(
                        "task {:?}: open_url/new_tab: an http(s) URL or about:blank, got {u:?}",
                        t.id
                    ));
                }
            }
            Setup::WaitWindow { timeout_s, title } => {
                if title.is_empty() {
                    return Err(format!("task {:?}: wait_window: an empty title", t.id));
                }
                wait_secs(timeout_s.unwrap_or(30.0))
                    .map_err(|e| format!("task {:?}: wait_window: {e}", t.id))?;
            }
            Setup::Sleep(s) => {
                wait_secs(*s).map_err(|e| format!("task {:?}: sleep: {e}", t.id))?;
            }
        }
    }
    for c in &t.checks {
        match c {
            CheckSpec::FileEquals { path, .. }
            | CheckSpec::FileContains { path, .. }
            | CheckSpec::FileJson { path, .. } => {
                home_path(path).map_err(|e| format!("task {:?}: check {e}", t.id))?;
            }
            _ => {}
        }
        if let CheckSpec::FileJson { pointer, .. } = c
            && !(pointer.is_empty() || pointer.starts_with('/'))
        {
            return Err(format!(
                "task {:?}: file_json: `pointer` is a JSON pointer (\"\" or starting with /)",
                t.id
            ));
        }
    }
    if let Some(turns) = &t.solution {
        if turns.is_empty() {
            return Err(format!("task {:?}: `solution` has no turn", t.id));
        }
        for (i, turn) in turns.iter().enumerate() {
            if turn.is_empty() || turn.len() > MAX_TURN_ACTIONS {
                return Err(format!(
                    "task {:?}: solution turn {}: 1 to {MAX_TURN_ACTIONS} actions",
                    t.id,
                    i + 1
                ));
            }
            for a in turn {
                // The same strict parse the loop's preflight applies.
                serde_json::from_value::<sandtop_protocol::Action>(a.clone()).map_err(|e| {
                    format!(
                        "task {:?}: solution turn {}: not a computer action: {e}",
                        t.id,
                        i + 1
                    )
                })?;
            }
        }
    }
    if unsupported.is_empty() {
        Ok(Entry::Task(t))
    } else {
        Ok(Entry::Unsupported {
            id: t.id,
            instruction: t.instruction,
            line: t.line,
            names: unsupported,
        })
    }
}

/// An id names a run folder: letters, digits, `-`, `_`, `.`, 1 to 100.
fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 100
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`id` {id:?}: 1 to 100 of A-Z a-z 0-9 - _ . (not starting with .): it names the task's run folder"
        ))
    }
}

/// A path beneath [`HOME`] with no `.`/`..` part.
pub fn home_path(path: &str) -> Result<(), String> {
    sandtop_protocol::files::ReadFileRequest {
        path: path.to_string(),
    }
    .beneath(HOME)
    .map(|_| ())
    .map_err(|e| format!("{path:?}: {e} ({HOME})"))
}

fn wait_secs(s: f64) -> Result<(), String> {
    if s.is_finite() && s > 0.0 && s <= MAX_WAIT_SECS {
        Ok(())
    } else {
        Err(format!("seconds: more than 0, at most {MAX_WAIT_SECS}"))
    }
}

#[cfg(test)]
mod tests;
