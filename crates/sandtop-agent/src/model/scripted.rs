//! The scripted model: answers from a fixed list of responses, offline.
//!
//! Each call to `create` returns the next response of the script, shaped
//! exactly like the API's (`id`, `status`, `output`, `usage`), so the loop
//! cannot tell it from the real thing. [`Script`] implementations decide
//! the next output from what the loop sent (for instance the last
//! screenshot), like a model would.

use serde_json::{Value, json};

pub mod proof;

pub use proof::ScriptedOnly;

use super::{CallStats, Creating, Model, ModelError};
use sandtop_runfolder::items as wire;

/// Produces the output items of the next response from the request body.
pub trait Script: Send {
    /// `None` when the script has nothing left to say.
    fn next(&mut self, request: &Value) -> Result<Option<Vec<Value>>, String>;
}

/// A script that plays a fixed list of outputs in order.
#[derive(Debug, Clone)]
pub struct Fixed(pub std::collections::VecDeque<Vec<Value>>);

impl Script for Fixed {
    fn next(&mut self, _request: &Value) -> Result<Option<Vec<Value>>, String> {
        Ok(self.0.pop_front())
    }
}

/// The scripted model.
pub struct ScriptedModel {
    script: Box<dyn Script>,
    n: u32,
    /// The request bodies it received, for tests.
    pub seen: Vec<Value>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl ScriptedModel {
    pub fn new(script: Box<dyn Script>) -> ScriptedModel {
        ScriptedModel {
            script,
            n: 0,
            seen: Vec::new(),
        }
    }
}

impl Model for ScriptedModel {
    fn describe(&self) -> String {
        "the offline scripted model".into()
    }

    fn scripted(&self) -> Option<ScriptedOnly> {
        Some(ScriptedOnly::new())
    }

    fn create<'a>(&'a mut self, body: &'a Value) -> Creating<'a> {
        Box::pin(async move {
            let start = std::time::Instant::now();
            self.seen.push(body.clone());
            let output = self
                .script
                .next(body)
                .map_err(ModelError::Script)?
                .ok_or_else(|| ModelError::Script("the script has ended".into()))?;
            self.n += 1;
            let resp = json!({
                "id": format!("resp_scripted_{}", self.n),
                "object": "response",
                "status": "completed",
                "output": output,
                // A scripted model spends no tokens; say so honestly.
                "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}},
            });
            let parsed = wire::parse_response(&resp)?;
            // The script's own thinking (it decodes screenshots) is model
            // time, not loop overhead.
            Ok((
                parsed,
                CallStats {
                    attempts: 1,
                    duration: start.elapsed(),
                },
            ))
        })
    }
}

/// A computer call item (GA shape) for scripts.
pub fn computer_call(n: u32, actions: Vec<Value>, checks: Vec<Value>) -> Value {
    json!({
        "type": "computer_call",
        "id": format!("cu_scripted_{n}"),
        "call_id": format!("call_scripted_{n}"),
        "status": "completed",
        "pending_safety_checks": checks,
        "actions": actions,
    })
}

/// An assistant message item for scripts.
pub fn message(n: u32, text: &str) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_scripted_{n}"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}
