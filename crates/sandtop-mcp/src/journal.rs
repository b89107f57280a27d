//! The run folder of one server session, in the loop's own format
//! ([`sandtop_runfolder::trajectory`]), so that `host-cli report` reads it: each
//! tool call that touches a guest is one step, recorded as the call the
//! client made (a `response` whose output is the `computer_call` or
//! `function_call`), the approval, the ledger (`pending` fsynced before
//! anything is sent), and the screenshot after it (a 0600 file beside the
//! trajectory, an `observation`). Never image data, tokens or secrets.

use std::path::Path;

use sandtop_protocol::{ErrorCode, ScaleMap};
use serde_json::{Value, json};

use sandtop_runfolder::outcome::{Ending, UsageTotals};
use sandtop_runfolder::trajectory::{Entry, Finished, LedgerState, Recorder, Started};

/// The server session's recorder.
#[derive(Debug)]
pub struct Journal {
    rec: Recorder,
    step: u32,
    attempted: Vec<String>,
    completed: Vec<String>,
    failures: u32,
}

impl Journal {
    pub fn create(dir: &Path, session: Option<&str>) -> sandtop_runfolder::Result<Journal> {
        let mut rec = Recorder::create(dir)?;
        rec.write(&Entry::RunStarted(Box::new(Started {
            task: "MCP server session (host-cli mcp): the client's tool calls".into(),
            session: session.unwrap_or("mcp").to_string(),
            model_api: Some("mcp".into()),
            ..Started::default()
        })))?;
        rec.sync()?;
        Ok(Journal {
            rec,
            step: 0,
            attempted: Vec::new(),
            completed: Vec::new(),
            failures: 0,
        })
    }

    /// Opens the next step with the client's call (`item`, a Responses
    /// API output item); returns the step and its call id.
    pub fn begin(&mut self, item: Value) -> sandtop_runfolder::Result<(u32, String)> {
        self.step += 1;
        let step = self.step;
        let call_id = format!("mcp_{step:04}");
        let mut item = item;
        item["call_id"] = json!(call_id);
        self.rec.write(&Entry::Response {
            step,
            id: format!("mcp-call-{step}"),
            status: "completed".into(),
            output: vec![item],
        })?;
        self.attempted.push(call_id.clone());
        Ok((step, call_id))
    }

    pub fn refused(
        &mut self,
        step: u32,
        call_id: &str,
        index: Option<usize>,
        code: ErrorCode,
        reason: &str,
    ) -> sandtop_runfolder::Result<()> {
        self.failures += 1;
        self.rec.write(&Entry::Refused {
            step,
            call_id: call_id.to_string(),
            index,
            code,
            reason: reason.to_string(),
        })?;
        self.rec.sync()
    }

    /// The decision on a call: `by` is `elicitation`, `policy` or `nobody`.
    pub fn approval(
        &mut self,
        step: u32,
        call_id: &str,
        member: Option<&str>,
        approved: Result<(), &str>,
        by: &str,
    ) -> sandtop_runfolder::Result<()> {
        let entry = match member {
            Some(m) => Entry::BrowserApproval {
                step,
                call_id: call_id.to_string(),
                member: m.to_string(),
                read: !sandtop_agent::browser::toolset::Toolset::needs_approval(m),
                decision: match approved {
                    Ok(()) => "approved".into(),
                    Err(why) => format!("refused: {why}"),
                },
                by: Some(by.to_string()),
            },
            None => Entry::Confirm {
                step,
                call_id: call_id.to_string(),
                index: Some(0),
                approved: approved.is_ok(),
                by: Some(by.to_string()),
            },
        };
        self.rec.write(&entry)?;
        self.rec.sync()
    }

    pub fn ledger(
        &mut self,
        step: u32,
        call_id: &str,
        state: LedgerState,
        detail: Value,
    ) -> sandtop_runfolder::Result<()> {
        match state {
            LedgerState::Done => self.completed.push(call_id.to_string()),
            LedgerState::Failed | LedgerState::Unknown => self.failures += 1,
            LedgerState::Pending => {}
        }
        self.rec.ledger(step, call_id, state, detail)
    }

    /// The screenshot after a call (or of a `screenshot` call): saved 0600.
    pub fn observation(
        &mut self,
        step: u32,
        call_id: Option<&str>,
        png: &[u8],
        map: ScaleMap,
    ) -> sandtop_runfolder::Result<()> {
        let name = match call_id {
            Some(c) => format!("step-{step:03}-{c}.png"),
            None => format!("shot-{step:03}-{}.png", self.rec_count()),
        };
        let file = self.rec.save_image(&name, png)?;
        self.rec.write(&Entry::Observation {
            step,
            call_id: call_id.map(str::to_string),
            file,
            scale_map: map,
        })?;
        self.rec.sync()
    }

    fn rec_count(&self) -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0)
    }

    /// How a `request_sign_in` ended: the request's shape (labels and
    /// refs, never a value) and `submitted`, `declined`, `cancelled` or
    /// `refused`; `source` is where the values came from (`page`, `file`).
    #[allow(clippy::too_many_arguments)]
    pub fn sign_in(
        &mut self,
        step: u32,
        call_id: &str,
        request: Option<Value>,
        status: &str,
        source: Option<&str>,
        option: Option<String>,
        why: Option<String>,
    ) -> sandtop_runfolder::Result<()> {
        if status == "submitted" {
            self.completed.push(call_id.to_string());
        }
        self.rec.write(&Entry::SignIn {
            step,
            call_id: call_id.to_string(),
            request,
            status: status.to_string(),
            source: source.map(str::to_string),
            selected_option: option,
            why,
        })?;
        self.rec.sync()
    }

    /// What a browser call answered (no image data).
    pub fn output(&mut self, step: u32, item: Value) -> sandtop_runfolder::Result<()> {
        self.rec.write(&Entry::CallOutput { step, item })?;
        self.rec.sync()
    }

    /// The step a call without one of its own belongs to (a screenshot).
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The end of the server session.
    pub fn finish(&mut self, message: &str) -> sandtop_runfolder::Result<()> {
        self.rec.write(&Entry::RunFinished(Box::new(Finished {
            ending: Ending::Finished,
            message: message.to_string(),
            steps: self.step,
            usage_totals: UsageTotals::default(),
            attempted_call_ids: self.attempted.clone(),
            completed_call_ids: self.completed.clone(),
            action_failures: self.failures,
        })))?;
        self.rec.sync()
    }
}
