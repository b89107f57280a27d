//! Diagnostics records (docs/contract.md rule 14).
//!
//! One [`Diagnostic`] per completed model request (api `responses`, stage
//! `request`, reason `completed`, usage) and per computer call (api
//! `computer`, stage `action`, reason `done`/`failed`/`unknown`, the
//! daemon's own timings). Each carries the call id, the member (the
//! request's method, or the call's action kinds) and the measured
//! duration — never raw errors, page text, arguments or images.
//!
//! The writer is an observer: the runner ignores its errors and panics
//! (a warning is logged), so a failing writer can neither approve
//! anything nor change a result. The default writes `diagnostics.jsonl`
//! in the run folder.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::error::{Doing as _, Error, Result};
use sandtop_protocol::Timings;
use serde::{Deserialize, Serialize};

use crate::items::Usage;

/// One diagnostics record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnostic {
    /// `responses` (the model) or `computer` (the daemon).
    pub api: String,
    /// `request` or `action`.
    pub stage: String,
    /// `completed` for a model request; `done`, `failed` or `unknown` for
    /// a computer call.
    pub reason: String,
    /// The response's id, or the computer call's id.
    pub call_id: String,
    /// `responses.create`, or the call's action kinds (`click,type`).
    pub member: String,
    /// Measured on the host.
    pub duration_ms: f64,
    /// The model's usage; null when the API gave none, and for actions.
    pub usage: Option<Usage>,
    /// The daemon's own timings of the call's last request, when it
    /// answered.
    pub daemon_timings: Option<Timings>,
    pub step: u32,
}

/// Where diagnostics go.
pub trait Diagnostics: Send {
    fn record(&mut self, d: &Diagnostic) -> Result<()>;
}

/// `diagnostics.jsonl` in the run folder (0600, appended).
#[derive(Debug)]
pub struct FileDiagnostics {
    path: PathBuf,
}

impl FileDiagnostics {
    pub fn in_run(dir: &Path) -> FileDiagnostics {
        FileDiagnostics {
            path: dir.join("diagnostics.jsonl"),
        }
    }
}

impl Diagnostics for FileDiagnostics {
    fn record(&mut self, d: &Diagnostic) -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .doing(|| format!("opening {}", self.path.display()))?;
        let mut line = serde_json::to_vec(d).map_err(Error::Encode)?;
        line.push(b'\n');
        f.write_all(&line)
            .doing(|| format!("appending to {}", self.path.display()))
    }
}
