//! How a run ended and what it cost: the types the runner produces and
//! the trajectory, the progress lines and the report read (below them
//! all, so none of those imports the runner).

use serde::{Deserialize, Serialize};

use crate::items::Usage;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The model answered without calling tools.
    Finished,
    /// A safety check was not approved.
    Denied,
    /// The operator refused an action or the screenshot.
    Refused,
    /// `max_steps` requests were made.
    StepBudget,
    /// The wall-clock limit passed.
    TimeBudget,
    /// Ctrl-C.
    Interrupted,
    /// Something broke (model, daemon, unknown outcome).
    Failed,
    /// An action failed: refused before anything of its response ran, or
    /// refused or stopped by the daemon (`--on-action-error stop`).
    ActionFailed,
    /// The model ended its turn without a final answer and without a tool
    /// call: only commentary, an unfinished message, or nothing. The
    /// official SDK's runner rejects such a response; so do we.
    NoFinalAnswer,
}

impl Ending {
    pub fn success(self) -> bool {
        self == Ending::Finished
    }
}

/// Usage over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageTotals {
    pub requests: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// Some completed request reported no usage: the sums are a floor.
    pub incomplete: bool,
}

impl UsageTotals {
    pub fn add(&mut self, usage: Option<Usage>) {
        self.requests += 1;
        match usage {
            Some(u) => {
                self.input_tokens += u.input_tokens;
                self.output_tokens += u.output_tokens;
                self.total_tokens += u.total_tokens;
            }
            None => self.incomplete = true,
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub ending: Ending,
    pub message: String,
    pub steps: u32,
    pub usage: UsageTotals,
    /// Per-step loop overhead (ms): step time minus model, daemon and
    /// operator time.
    pub overhead_ms: Vec<f64>,
    /// The tool calls of the last response the run handled that were
    /// started (computer calls sent to the daemon, questions asked), and
    /// those that completed. Call ids only: check the guest before
    /// repeating one that was attempted and did not complete.
    pub attempted_call_ids: Vec<String>,
    pub completed_call_ids: Vec<String>,
    /// Actions that failed over the whole run (refused here or by the
    /// daemon, or stopped), also when `--on-action-error report` went on.
    pub action_failures: u32,
}
