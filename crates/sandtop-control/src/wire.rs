//! The run's control socket: what a running `host-cli run` tells a viewer
//! (`host-cli view`) and what a viewer may ask of it.
//!
//! - The socket is `control.sock` in the session's folder (0700), created
//!   by the run that holds the session's run lock, mode 0600, removed when
//!   the run ends; a peer whose uid is not ours is refused (SO_PEERCRED).
//! - Each message is one JSON object on one line (at most
//!   [`MAX_LINE_BYTES`]), tagged by `type`; unknown fields are refused.
//! - Everything a message carries that came from the model, the guest or a
//!   page is data: the viewer escapes it and never shows it as its own
//!   words.
//! - A question is open until one `closed` names it: the first answer
//!   (terminal, viewer, policy, a stop) wins and every other prompt of it
//!   closes.

pub use sandtop_runfolder::parts::QuestionKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The control protocol's version (`hello.version`).
pub const VERSION: u32 = 1;

/// The socket's file name in the session folder.
pub const SOCKET_NAME: &str = "control.sock";

/// The longest line either side sends.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Who holds the desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    /// The model's calls run.
    Agent,
    /// Asked for: the agent pauses at its next step boundary.
    TakeRequested,
    /// The operator's input runs; the agent waits.
    Operator,
}

/// What the run is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Starting,
    /// Waiting for the model's response.
    Model,
    /// Waiting for an answer to a question.
    Question,
    /// Running a response's calls.
    Calls,
    /// Paused for the operator (after Take control).
    Paused,
    Finished,
}

/// The usage so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSoFar {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

/// The last computer call's actions, in the model's coordinates, with the
/// map of the screenshot they refer to (so a viewer can mark the targets
/// on the screen).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastCall {
    pub step: u32,
    pub call_id: String,
    /// Responses API action objects, as the model sent them (validated).
    pub actions: Vec<Value>,
    pub scale_map: sandtop_protocol::ScaleMap,
    /// `pending`, `done`, `failed`, `unknown` (the ledger's word),
    /// `denied` (its safety check was not approved: it never ran), or
    /// `operator` for the operator's own input.
    pub state: String,
}

/// One field a sign-in filled: the model's label and the field's kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedInField {
    pub label: String,
    pub kind: String,
}

/// Run -> viewer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// First line on every connection.
    Hello {
        version: u32,
        session: String,
        /// The run folder (its trajectory and screenshots).
        run_folder: String,
        task: String,
    },
    /// The run's state; sent on connect and at every change.
    State {
        step: u32,
        max_steps: u32,
        phase: Phase,
        holder: Holder,
        usage: UsageSoFar,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_call: Option<LastCall>,
        /// The ending, once finished.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ending: Option<String>,
    },
    /// An egress decision (the proxy's journal entry, as journaled).
    Network { entry: Value },
    /// A sign-in's values went into a page: which origin got which fields,
    /// and from where (`file`, `terminal`). Never a value; labels come
    /// from the model (data).
    SignedIn {
        call_id: String,
        origin: String,
        fields: Vec<SignedInField>,
        source: String,
    },
    /// A question opened; sent on connect for every open one too.
    Question {
        id: u64,
        kind: QuestionKind,
        /// One line: what is asked (host words).
        title: String,
        /// The details, made inert (model, guest and page text inside).
        text: String,
        /// The marked screenshot's file name in the run folder, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        marked: Option<String>,
        /// The answers a button may give: `approve`, `deny`, `cancel`;
        /// an `ask_user` question takes `text` (or `deny` to refuse).
        answers: Vec<String>,
    },
    /// A question closed: who answered (`terminal`, `view`, `policy`,
    /// `stop`, `timeout`) and the answer's word (`approve`, `deny`,
    /// `cancel`, `text`).
    Closed { id: u64, by: String, answer: String },
    /// The result of the operator's `act`.
    Acted {
        ok: bool,
        executed: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A command refused (not in control, unknown question, ...).
    Refused { what: String, why: String },
}

/// Viewer -> run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// Answers an open question. `answer` is one of the question's
    /// `answers`, or `text` with `text` set (ask_user).
    Answer {
        id: u64,
        answer: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Take control: the agent pauses at its next step boundary.
    Take {},
    /// Give control back: the model is told the operator acted and shown
    /// the new screen.
    Give {},
    /// The operator's input while in control: Responses API action
    /// objects in *screen* pixels (checked like the model's, sent through
    /// the same action API, recorded as the operator's).
    Act { actions: Vec<Value> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_unknown_fields_are_refused() {
        let c = Command::Answer {
            id: 3,
            answer: "approve".into(),
            text: None,
        };
        let line = serde_json::to_string(&c).unwrap();
        assert_eq!(line, r#"{"type":"answer","id":3,"answer":"approve"}"#);
        assert_eq!(serde_json::from_str::<Command>(&line).unwrap(), c);
        assert!(serde_json::from_str::<Command>(r#"{"type":"take","x":1}"#).is_err());
        assert!(serde_json::from_str::<Command>(r#"{"type":"explode"}"#).is_err());
        let e: Event =
            serde_json::from_str(r#"{"type":"closed","id":1,"by":"view","answer":"deny"}"#)
                .unwrap();
        assert_eq!(
            e,
            Event::Closed {
                id: 1,
                by: "view".into(),
                answer: "deny".into()
            }
        );
    }
}
