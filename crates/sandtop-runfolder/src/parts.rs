//! The values trajectory entries carry that other parts of Sandtop use
//! too: what a question to the operator was about, how the screen changed
//! around an approval's targets, one check of the offline exercise.

use sandtop_protocol::Rect;
use serde::{Deserialize, Serialize};

/// The kinds of question a viewer can answer (the run's control
/// socket) and the trajectory records as answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    /// A computer call's pending safety checks: approve or deny.
    SafetyCheck,
    /// `--confirm-actions`: one action or the final screenshot.
    ConfirmAction,
    /// A state-changing browser member (or a read named by
    /// `--confirm-reads`): approve or deny.
    Browser,
    /// The guest wants an origin (`--network ask`): approve, deny, cancel.
    Origin,
    /// The model asks the operator (`ask_user`): a text answer, or refuse.
    AskUser,
}

/// One region that changed, and by how much.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Changed {
    pub region: Rect,
    /// Changed pixels over all pixels of the region.
    pub share: f64,
}

/// One check of the exercise's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub what: String,
    pub ok: bool,
    pub detail: String,
}
