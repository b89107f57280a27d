//! The run folder: an append-only trajectory, screenshots, and the ledger.
//!
//! - `trajectory.jsonl`: one JSON object per line, appended (O_APPEND) and
//!   fsynced at every step end, so a crash of host-cli loses at most the
//!   step in flight (L7). It holds response ids, actions, safety checks and
//!   decisions, ScaleMaps, usage records and timings — never the API key,
//!   the session token or image data (screenshots are files beside it).
//! - Screenshots are created exclusively with mode 0600 and never
//!   overwrite anything (docs/contract.md rule 25).
//! - Every line is one [`Entry`] (`#[serde(tag = "kind")]`) and a
//!   `t_unix_ms` timestamp, written through [`Recorder::write`] and read
//!   back through [`read_trajectory`], strictly: a line with a field its
//!   kind does not have, or without one it needs, is an error naming the
//!   line (never a silent resume from step 0). Only a torn line (not JSON
//!   at all, what a crash mid-write leaves) is skipped.
//! - The ledger is the `ledger` entries of the trajectory: `pending` is
//!   written before a call's actions are sent, then `done`, `failed`
//!   (nothing or a known prefix ran) or `unknown` (sent, no answer). A
//!   resume continues after the last completed step and refuses to go past
//!   a `pending`/`unknown` call until the operator reconciles it (rule 18).
//!
//! Layout: tests apart (`record/tests.rs`): the trajectory's one schema,
//! `Entry` (26 kinds; ~250 lines with the structs they carry), by the
//! `Recorder` that writes it and the strict reader and resume. If it grows,
//! the image references (`externalize`, `internalize`, ...) go first.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use crate::error::{Doing as _, Error, Result};
use sandtop_protocol::{ErrorCode, ScaleMap, ScreenshotOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::items::{SafetyCheck, ToolShape, Usage};
use crate::outcome::{Ending, UsageTotals};
use crate::parts::{Changed, Check, QuestionKind};

/// How a run began (`run_started`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Started {
    pub task: String,
    /// The session the run drives.
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolShape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<ScreenshotOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_actions: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_api: Option<String>,
    /// The model's API (`openai`, `anthropic`); absent in runs recorded
    /// before it was asked, which are `openai`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// With `provider: anthropic`, how the computer was offered when not
    /// as the toolset: `computer_20251124`. Absent: the toolset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_tool: Option<String>,
    /// The offline exercise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exercise: Option<bool>,
    /// The run booted its session's guest (and removes it at the end
    /// unless `keep`, or unless an action's outcome is unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<bool>,
}

/// How a run ended (`run_finished`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finished {
    pub ending: Ending,
    pub message: String,
    pub steps: u32,
    pub usage_totals: UsageTotals,
    pub attempted_call_ids: Vec<String>,
    pub completed_call_ids: Vec<String>,
    pub action_failures: u32,
}

/// One record per completed model request (docs/contract.md rule 14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRecord {
    pub api: String,
    pub stage: String,
    pub reason: String,
    /// Null when the API gave none.
    pub usage: Option<Usage>,
    /// The response's id.
    pub call_id: String,
    pub member: String,
    pub duration_ms: f64,
    pub attempts: u32,
    pub step: u32,
}

/// One line of the trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    RunStarted(Box<Started>),
    /// `--resume` continued the run after `steps_done` steps.
    RunResumed {
        steps_done: u32,
    },
    /// A screenshot the model is shown (`call_id` absent for the first).
    Observation {
        step: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        file: String,
        scale_map: ScaleMap,
    },
    /// The new input items of request `step` (images as file references).
    RequestInput {
        step: u32,
        items: Vec<Value>,
        previous_response_id: Option<String>,
        images: usize,
        bytes: usize,
    },
    /// A completed model request's diagnostics record.
    Usage(UsageRecord),
    /// The model's response (images stripped).
    Response {
        step: u32,
        id: String,
        status: String,
        output: Vec<Value>,
    },
    ModelError {
        step: u32,
        error: String,
    },
    /// The decision on a call's pending safety checks.
    SafetyChecks {
        step: u32,
        call_id: String,
        checks: Vec<SafetyCheck>,
        /// `approved`, or `denied: why`.
        decision: String,
        /// Who decided: `terminal`, `view`, `policy`, `scripted` or
        /// `nobody` (absent in older recordings, or when the operator does
        /// not say).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Before approved actions ran, a fresh capture showed the screen
    /// changed around a call's targets since the approval (`before`, the
    /// screenshot the operator was shown; `after`, the fresh capture): the
    /// operator is asked again, shown both.
    ScreenChanged {
        step: u32,
        call_id: String,
        before: String,
        after: String,
        changed: Vec<Changed>,
    },
    /// `--confirm-actions`: one action (`index`) or, `index` null, the
    /// final screenshot.
    Confirm {
        step: u32,
        call_id: String,
        index: Option<usize>,
        approved: bool,
        /// Who decided: `terminal`, `view`, `policy`, `scripted` or
        /// `nobody` (absent in older recordings, or when the operator does
        /// not say).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The ledger: what became of a computer call's actions.
    Ledger {
        step: u32,
        call_id: String,
        state: LedgerState,
        detail: Value,
    },
    /// An item answering a tool call (images as file references).
    CallOutput {
        step: u32,
        item: Value,
    },
    /// A call the host refused before anything of its response ran.
    Refused {
        step: u32,
        call_id: String,
        index: Option<usize>,
        code: ErrorCode,
        reason: String,
    },
    /// A call not run because an earlier one of its response failed.
    Skipped {
        step: u32,
        call_id: String,
        after: String,
    },
    /// The operator's decision on a browser call (a state-changing
    /// member, or a read named by `--confirm-reads`).
    BrowserApproval {
        step: u32,
        call_id: String,
        member: String,
        read: bool,
        /// `approved`, or `refused: why`.
        decision: String,
        /// Who decided: `terminal`, `view`, `policy`, `scripted` or
        /// `nobody` (absent in older recordings, or when the operator does
        /// not say).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    AskUser {
        step: u32,
        call_id: String,
        question: String,
        answered: bool,
    },
    Guidance {
        step: u32,
        text: String,
    },
    /// A `request_sign_in` call: its shape (origin, field ids, labels,
    /// types, targets, options), who answered, how it ended. Never a value.
    SignIn {
        step: u32,
        call_id: String,
        /// `None` when the arguments were refused before being read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<Value>,
        /// `submitted`, `declined`, `cancelled` or `refused`.
        status: String,
        /// `file`, `terminal`, or none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        selected_option: Option<String>,
        /// Why it was refused, declined or cancelled (the host's words).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    RunFinished(Box<Finished>),
    /// A question to the operator closed (docs/contract.md rule 50): its kind and title,
    /// who answered (`terminal`, `view`, `stop`, `timeout`) and the
    /// answer's word. What was decided is in the entry of its kind too.
    Answered {
        step: u32,
        question: QuestionKind,
        title: String,
        by: String,
        answer: String,
    },
    /// The operator took the desktop at a step boundary (`host-cli view`).
    OperatorTook {
        step: u32,
    },
    /// The operator's actions while in control, in screen pixels, checked
    /// as the model's, and what the daemon said.
    OperatorActed {
        step: u32,
        actions: Vec<Value>,
        ok: bool,
        executed: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The operator gave the desktop back; the model was told, and shown
    /// `file` (the screen then) when it has the computer tool.
    OperatorGave {
        step: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
    /// The egress proxy asked about an origin on this run's terminal.
    OriginQuestion {
        origin: String,
        answer: String,
    },
    /// An egress decision for this session, as the proxy journals it.
    Egress {
        entry: Value,
    },
    /// The offline exercise's checks of the apps' records.
    ExerciseChecks {
        checks: Vec<Check>,
    },
}

impl Entry {
    /// The `kind` it is written with.
    pub fn kind(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default()
    }
}

/// A run's folder, open for appending.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    file: File,
}

/// The state of a computer call in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    /// About to be sent to the daemon.
    Pending,
    /// Every action ran and the screenshot came back.
    Done,
    /// The daemon refused or stopped it; its answer says what ran.
    Failed,
    /// Sent, but no answer: effects unknown.
    Unknown,
}

impl Recorder {
    /// Creates a new run folder (0700); fails if it exists.
    pub fn create(dir: &Path) -> Result<Recorder> {
        Self::create_parent(dir)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .doing(|| format!("creating the run folder {}", dir.display()))?;
        Recorder::open(dir)
    }

    /// Creates a new run folder (0700) named `base`, or `base-2`,
    /// `base-3`, … when that exists (two runs of one session in one
    /// second): each name is taken by mkdir(2), which fails on an
    /// existing name, so two runs never share a folder.
    pub fn create_unique(base: &Path) -> Result<Recorder> {
        Self::create_parent(base)?;
        let mut dir = base.to_path_buf();
        for n in 2..=Self::UNIQUE_TRIES + 1 {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Recorder::open(&dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let mut name = base.as_os_str().to_owned();
                    name.push(format!("-{n}"));
                    dir = PathBuf::from(name);
                }
                Err(source) => {
                    return Err(Error::Io {
                        doing: format!("creating the run folder {}", dir.display()),
                        source,
                    });
                }
            }
        }
        Err(Error::Io {
            doing: format!("creating the run folder {}", base.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("it and {} numbered ones exist", Self::UNIQUE_TRIES - 1),
            ),
        })
    }

    /// How many names [`Recorder::create_unique`] tries.
    const UNIQUE_TRIES: u32 = 1000;

    fn create_parent(dir: &Path) -> Result<()> {
        if let Some(parent) = dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .doing(|| format!("creating {}", parent.display()))?;
        }
        Ok(())
    }

    /// Opens an existing run folder for appending (a resume). A torn last
    /// line (a crash mid-write) is ended first, so that it stays alone on
    /// its line and the next entry is whole.
    pub fn open(dir: &Path) -> Result<Recorder> {
        let path = dir.join("trajectory.jsonl");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(&path)
            .doing(|| format!("opening the trajectory in {}", dir.display()))?;
        let end_torn_line = |file: &mut File| -> std::io::Result<()> {
            use std::io::{Read as _, Seek as _};
            let len = file.metadata()?.len();
            if len > 0 {
                let mut last = [0u8; 1];
                file.seek(std::io::SeekFrom::Start(len - 1))?;
                file.read_exact(&mut last)?;
                if last[0] != b'\n' {
                    file.write_all(b"\n")?;
                }
            }
            Ok(())
        };
        end_torn_line(&mut file).doing(|| {
            format!(
                "ending the last line of the trajectory in {}",
                dir.display()
            )
        })?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            file,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one entry with a timestamp.
    pub fn write(&mut self, entry: &Entry) -> Result<()> {
        let mut fields = serde_json::to_value(entry).map_err(Error::Encode)?;
        fields["t_unix_ms"] = json!(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
        );
        let mut line = serde_json::to_vec(&fields).map_err(Error::Encode)?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .doing(|| "appending to the trajectory")
    }

    /// A ledger entry, made durable at once.
    pub fn ledger(
        &mut self,
        step: u32,
        call_id: &str,
        state: LedgerState,
        detail: Value,
    ) -> Result<()> {
        self.write(&Entry::Ledger {
            step,
            call_id: call_id.to_string(),
            state,
            detail,
        })?;
        self.sync()
    }

    /// fsync: everything logged so far survives a crash.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().doing(|| "syncing the trajectory")
    }

    /// Saves an image next to the trajectory (0600, never overwriting);
    /// returns its file name.
    pub fn save_image(&self, name: &str, bytes: &[u8]) -> Result<String> {
        let path = self.dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .doing(|| format!("creating {}", path.display()))?;
        f.write_all(bytes)
            .doing(|| format!("writing {}", path.display()))?;
        Ok(name.to_string())
    }
}

/// What a trajectory says about where to resume.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePoint {
    /// The `run_started` entry (task, model, options).
    pub started: Started,
    /// The last response whose every call was settled.
    pub last_response_id: Option<String>,
    /// Steps (requests) completed.
    pub steps_done: u32,
    /// Items to send with the next request: outputs of calls that were
    /// settled after the last response, or, when a request was sent and
    /// never answered (a crash while the model thought), that request's
    /// whole input, sent again.
    pub pending_outputs: Vec<Value>,
    /// A call whose outcome is unknown (`pending` or `unknown` last).
    pub unsettled: Option<(u32, String)>,
    /// The input so far up to the last response, the response included
    /// (for runs without server-side storage; the next request sends it,
    /// then `pending_outputs`).
    pub conversation: Vec<Value>,
    /// Whether the run already finished.
    pub finished: bool,
}

/// Reads a trajectory, every line through [`Entry`]. A line that is not
/// JSON is what a crash mid-write leaves: skipped, with a warning. A JSON
/// line that is not an entry (an unknown kind, a misspelt or missing
/// field) is an error naming the line.
pub fn read_trajectory(dir: &Path) -> Result<Vec<Entry>> {
    let path = dir.join("trajectory.jsonl");
    let f = File::open(&path).doing(|| format!("opening {}", path.display()))?;
    parse_trajectory(std::io::BufReader::new(f), &path.display().to_string())
}

/// [`read_trajectory`] on any reader (`name` is what errors call it); the
/// fuzz target `trajectory` feeds it arbitrary bytes.
pub fn parse_trajectory(r: impl std::io::BufRead, name: &str) -> Result<Vec<Entry>> {
    Ok(parse_trajectory_timed(r, name)?
        .into_iter()
        .map(|(e, _)| e)
        .collect())
}

/// [`read_trajectory`] with each entry's `t_unix_ms` (when it has one).
pub fn read_trajectory_timed(dir: &Path) -> Result<Vec<(Entry, Option<u64>)>> {
    let path = dir.join("trajectory.jsonl");
    let f = File::open(&path).doing(|| format!("opening {}", path.display()))?;
    parse_trajectory_timed(std::io::BufReader::new(f), &path.display().to_string())
}

fn parse_trajectory_timed(
    r: impl std::io::BufRead,
    name: &str,
) -> Result<Vec<(Entry, Option<u64>)>> {
    let mut out = Vec::new();
    for (n, line) in r.lines().enumerate() {
        let line = line.doing(|| format!("reading {name} line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&line) else {
            tracing::warn!(line = n + 1, "ignoring a torn trajectory line");
            continue;
        };
        let t = v
            .as_object_mut()
            .and_then(|o| o.remove("t_unix_ms"))
            .and_then(|t| t.as_u64());
        let entry = serde_json::from_value::<Entry>(v).map_err(|source| Error::Entry {
            file: name.to_string(),
            line: n + 1,
            source,
        })?;
        out.push((entry, t));
    }
    Ok(out)
}

/// Reads a trajectory for `--resume`.
pub fn resume_point(dir: &Path) -> Result<ResumePoint> {
    let path = dir.join("trajectory.jsonl");
    let mut started = None;
    let mut last_response_id = None;
    let mut steps_done = 0;
    let mut pending_outputs: Vec<Value> = Vec::new();
    let mut ledger: std::collections::BTreeMap<String, (u32, LedgerState)> = Default::default();
    let mut conversation = Vec::new();
    // The input of a request not answered (yet): part of the conversation
    // once its response is recorded, else what the resumed run sends.
    let mut unanswered: Vec<Value> = Vec::new();
    let mut finished = false;
    for entry in read_trajectory(dir)? {
        match entry {
            Entry::RunStarted(s) => started = Some(*s),
            Entry::Response {
                step, id, output, ..
            } => {
                last_response_id = Some(id);
                steps_done = step;
                pending_outputs.clear();
                conversation.append(&mut unanswered);
                conversation.extend(output);
            }
            // A request sent again (a resumed run's) carries the earlier
            // unanswered input: the latest replaces it.
            Entry::RequestInput { items, .. } => unanswered = items,
            Entry::CallOutput { item, .. } => pending_outputs.push(item),
            Entry::Ledger {
                step,
                call_id,
                state,
                ..
            } => {
                ledger.insert(call_id, (step, state));
            }
            // Only a run the model finished or ended without an answer,
            // one stopped by a failed action (whose call has no answer to
            // send), or one the operator stopped by refusing is over; an
            // interrupted or failed one can resume.
            Entry::RunFinished(f) => {
                finished = matches!(
                    f.ending,
                    Ending::Finished
                        | Ending::NoFinalAnswer
                        | Ending::ActionFailed
                        | Ending::Denied
                        | Ending::Refused
                        | Ending::StepBudget
                );
            }
            Entry::RunResumed { .. } => finished = false,
            _ => {}
        }
    }
    let Some(started) = started else {
        return Err(Error::NotARun(format!(
            "{} has no run_started entry",
            path.display()
        )));
    };
    if !unanswered.is_empty() {
        // Sent after the outputs it carries: sent again, once.
        pending_outputs = unanswered;
    }
    let pending_outputs = pending_outputs
        .iter()
        .map(|v| internalize(v, dir))
        .collect::<Result<Vec<_>>>()?;
    let conversation = conversation
        .iter()
        .map(|v| internalize(v, dir))
        .collect::<Result<Vec<_>>>()?;
    let unsettled = ledger
        .into_iter()
        .find(|(_, (_, s))| matches!(s, LedgerState::Pending | LedgerState::Unknown))
        .map(|(call, (step, _))| (step, call));
    Ok(ResumePoint {
        started,
        last_response_id,
        steps_done,
        pending_outputs,
        unsettled,
        conversation,
        finished,
    })
}

/// The prefix that stands for an image file of the run folder in the
/// trajectory, so a resume can send the same image again.
pub const FILE_MARK: &str = "sandtop-file:";

/// Replaces the data URLs of saved screenshots (`files`: URL, file name)
/// with [`FILE_MARK`] references, and any other image data with its size.
pub fn externalize(v: &Value, files: &[(String, String)]) -> Value {
    match v {
        Value::String(s) if s.starts_with("data:image/") => {
            match files.iter().find(|(url, _)| url == s) {
                Some((_, file)) => json!(format!("{FILE_MARK}{file}")),
                None => json!(format!("<image {} bytes>", s.len())),
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| externalize(x, files)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), externalize(x, files)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The inverse of [`externalize`]: file references become data URLs again.
pub fn internalize(v: &Value, dir: &Path) -> Result<Value> {
    Ok(match v {
        Value::String(s) if s.starts_with(FILE_MARK) => {
            use base64::Engine as _;
            let name = &s[FILE_MARK.len()..];
            if name.contains('/') || name.starts_with('.') {
                return Err(Error::NotARun(format!(
                    "a trajectory refers to `{name}`, which is not a file of the run folder"
                )));
            }
            let bytes = std::fs::read(dir.join(name))
                .doing(|| format!("reading {name} from the run folder"))?;
            // The extension the run gave the file (`ImageFormat::extension`).
            let mime = if name.ends_with(".webp") {
                "image/webp"
            } else if name.ends_with(".jpg") {
                "image/jpeg"
            } else {
                "image/png"
            };
            json!(format!(
                "data:{mime};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            ))
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| internalize(x, dir))
                .collect::<Result<_>>()?,
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), internalize(x, dir)?)))
                .collect::<Result<_>>()?,
        ),
        other => other.clone(),
    })
}

/// Replaces image data in a JSON value with a short reference, for the
/// trajectory (the images are files beside it).
pub fn strip_images(v: &Value) -> Value {
    match v {
        Value::String(s) if s.starts_with("data:image/") => {
            json!(format!("<image {} bytes>", s.len()))
        }
        Value::Array(a) => Value::Array(a.iter().map(strip_images).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), strip_images(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
