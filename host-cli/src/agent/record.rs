//! The run folder: an append-only trajectory, screenshots, and the ledger.
//!
//! - `trajectory.jsonl`: one JSON object per line, appended (O_APPEND) and
//!   fsynced at every step end, so a crash of host-cli loses at most the
//!   step in flight (L7). It holds response ids, actions, safety checks and
//!   decisions, ScaleMaps, usage records and timings — never the API key,
//!   the session token or image data (screenshots are files beside it).
//! - Screenshots are created exclusively with mode 0600 and never
//!   overwrite anything (CONTRACT.md rule 25).
//! - The ledger is the `ledger` entries of the trajectory: `pending` is
//!   written before a call's actions are sent, then `done`, `failed`
//!   (nothing or a known prefix ran) or `unknown` (sent, no answer). A
//!   resume continues after the last completed step and refuses to go past
//!   a `pending`/`unknown` call until the operator reconciles it (rule 18).

use std::fs::File;
use std::io::{BufRead as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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
    pub fn create(dir: &Path) -> anyhow::Result<Recorder> {
        if let Some(parent) = dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the run folder {}", dir.display()))?;
        Recorder::open(dir)
    }

    /// Opens an existing run folder for appending (a resume).
    pub fn open(dir: &Path) -> anyhow::Result<Recorder> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join("trajectory.jsonl"))
            .with_context(|| format!("opening the trajectory in {}", dir.display()))?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            file,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one entry (`kind` plus fields) with a timestamp.
    pub fn log(&mut self, kind: &str, mut fields: Value) -> anyhow::Result<()> {
        if !fields.is_object() {
            fields = json!({ "value": fields });
        }
        fields["kind"] = json!(kind);
        fields["t_unix_ms"] = json!(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
        );
        let mut line = serde_json::to_vec(&fields)?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .context("appending to the trajectory")?;
        Ok(())
    }

    /// A ledger entry, made durable at once.
    pub fn ledger(
        &mut self,
        step: u32,
        call_id: &str,
        state: LedgerState,
        detail: Value,
    ) -> anyhow::Result<()> {
        self.log(
            "ledger",
            json!({"step": step, "call_id": call_id, "state": state, "detail": detail}),
        )?;
        self.sync()
    }

    /// fsync: everything logged so far survives a crash.
    pub fn sync(&mut self) -> anyhow::Result<()> {
        self.file.sync_data().context("syncing the trajectory")
    }

    /// Saves an image next to the trajectory (0600, never overwriting);
    /// returns its file name.
    pub fn save_image(&self, name: &str, bytes: &[u8]) -> anyhow::Result<String> {
        let path = self.dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        f.write_all(bytes)?;
        Ok(name.to_string())
    }
}

/// What a trajectory says about where to resume.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumePoint {
    /// The `run_started` entry (task, model, options).
    pub started: Value,
    /// The last response whose every call was settled.
    pub last_response_id: Option<String>,
    /// Steps (requests) completed.
    pub steps_done: u32,
    /// Items to send with the next request: outputs of calls that were
    /// settled after the last request.
    pub pending_outputs: Vec<Value>,
    /// A call whose outcome is unknown (`pending` or `unknown` last).
    pub unsettled: Option<(u32, String)>,
    /// The full input so far (for runs without server-side storage).
    pub conversation: Vec<Value>,
    /// Whether the run already finished.
    pub finished: bool,
}

/// Reads a trajectory for `--resume`.
pub fn resume_point(dir: &Path) -> anyhow::Result<ResumePoint> {
    let path = dir.join("trajectory.jsonl");
    let f = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let mut started = None;
    let mut last_response_id = None;
    let mut steps_done = 0;
    let mut pending_outputs: Vec<Value> = Vec::new();
    let mut ledger: std::collections::BTreeMap<String, (u32, LedgerState)> = Default::default();
    let mut conversation = Vec::new();
    let mut finished = false;
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            // A torn last line from a crash: everything before it stands.
            tracing::warn!(line = n + 1, "ignoring an unreadable trajectory line");
            continue;
        };
        match v["kind"].as_str().unwrap_or("") {
            "run_started" => started = Some(v.clone()),
            "response" => {
                last_response_id = v["id"].as_str().map(str::to_string);
                steps_done = v["step"].as_u64().unwrap_or(0) as u32;
                pending_outputs.clear();
                if let Some(items) = v["output"].as_array() {
                    conversation.extend(items.iter().cloned());
                }
            }
            "request_input" => {
                if let Some(items) = v["items"].as_array() {
                    conversation.extend(items.iter().cloned());
                }
            }
            "call_output" => pending_outputs.push(v["item"].clone()),
            "ledger" => {
                let state: LedgerState = serde_json::from_value(v["state"].clone())
                    .context("a ledger entry with an unknown state")?;
                let call = v["call_id"].as_str().unwrap_or("").to_string();
                ledger.insert(call, (v["step"].as_u64().unwrap_or(0) as u32, state));
            }
            // Only a run the model finished or ended without an answer,
            // one stopped by a failed action (whose call has no answer to
            // send), or one the operator stopped by refusing is over; an
            // interrupted or failed one can resume.
            "run_finished" => {
                finished = matches!(
                    v["ending"].as_str(),
                    Some(
                        "finished"
                            | "no_final_answer"
                            | "action_failed"
                            | "denied"
                            | "refused"
                            | "step_budget"
                    )
                );
            }
            "run_resumed" => finished = false,
            _ => {}
        }
    }
    let Some(started) = started else {
        bail!("{} has no run_started entry", path.display());
    };
    let pending_outputs = pending_outputs
        .iter()
        .map(|v| internalize(v, dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let conversation = conversation
        .iter()
        .map(|v| internalize(v, dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
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
pub fn internalize(v: &Value, dir: &Path) -> anyhow::Result<Value> {
    Ok(match v {
        Value::String(s) if s.starts_with(FILE_MARK) => {
            use base64::Engine as _;
            let name = &s[FILE_MARK.len()..];
            if name.contains('/') || name.starts_with('.') {
                bail!("a trajectory refers to `{name}`, which is not a file of the run folder");
            }
            let bytes = std::fs::read(dir.join(name))
                .with_context(|| format!("reading {name} from the run folder"))?;
            let mime = if name.ends_with(".webp") {
                "image/webp"
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
                .collect::<anyhow::Result<_>>()?,
        ),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), internalize(x, dir)?)))
                .collect::<anyhow::Result<_>>()?,
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
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn images_are_exclusive_and_private() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Recorder::create(&tmp.path().join("run")).unwrap();
        r.save_image("a.png", b"x").unwrap();
        let mode = std::fs::metadata(r.dir().join("a.png"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            r.save_image("a.png", b"y").is_err(),
            "an existing screenshot was overwritten"
        );
        assert_eq!(std::fs::read(r.dir().join("a.png")).unwrap(), b"x");
    }

    #[test]
    fn resume_stops_at_an_unsettled_call_and_survives_a_torn_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let mut r = Recorder::create(&dir).unwrap();
        r.log("run_started", json!({"task": "t"})).unwrap();
        r.log("response", json!({"step": 1, "id": "resp_1", "output": []}))
            .unwrap();
        r.ledger(1, "call_a", LedgerState::Pending, json!({}))
            .unwrap();
        r.ledger(1, "call_a", LedgerState::Done, json!({})).unwrap();
        r.log(
            "call_output",
            json!({"item": {"type": "computer_call_output", "call_id": "call_a"}}),
        )
        .unwrap();
        r.log("response", json!({"step": 2, "id": "resp_2", "output": []}))
            .unwrap();
        r.ledger(2, "call_b", LedgerState::Pending, json!({}))
            .unwrap();
        drop(r);
        // A crash mid-write leaves half a line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("trajectory.jsonl"))
            .unwrap();
        f.write_all(b"{\"kind\": \"ledger\", \"sta").unwrap();
        let p = resume_point(&dir).unwrap();
        assert_eq!(p.last_response_id.as_deref(), Some("resp_2"));
        assert_eq!(p.steps_done, 2);
        assert_eq!(p.unsettled, Some((2, "call_b".to_string())));
        assert!(
            p.pending_outputs.is_empty(),
            "outputs before resp_2 were already sent"
        );
        assert!(!p.finished);
    }

    #[test]
    fn image_data_never_reaches_the_trajectory() {
        let v = json!({"output": {"image_url": "data:image/png;base64,AAAA"}, "n": [1, "data:image/webp;base64,x"]});
        let s = strip_images(&v).to_string();
        assert!(!s.contains("base64"), "{s}");
    }
}
