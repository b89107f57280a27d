//! The conversation's items, as requests carry them and the trajectory
//! records them: the Responses API's shapes (`reference/openai-openapi.yaml`),
//! which are the loop's own vocabulary whatever the model's provider.
//!
//! Replies are read leniently: unknown fields and unknown item types are
//! kept as raw JSON and ignored, while what the loop acts on (call ids,
//! actions, safety checks, usage) is checked. Raw items are kept so that,
//! without server-side storage, the conversation can be sent back exactly
//! as it was received. The items that answer calls (a user message, a
//! computer call's output, a function call's output) are built here and
//! only here.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Which computer tool the model is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolShape {
    /// The GA tool `{"type": "computer"}`: batched `actions[]`.
    Computer,
    /// `computer_use_preview`: display size, environment, one `action` per
    /// call, `truncation: auto`.
    ComputerUsePreview,
}

/// A pending safety check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SafetyCheck {
    pub id: String,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// Token usage of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

/// One output item we act on.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputItem {
    /// An assistant message (its text and refusal parts joined).
    Message {
        text: String,
        /// Whether it can end a turn: `completed` (or no status given) and
        /// not marked `phase: commentary` (intermediate commentary is not
        /// an answer; the official SDK's runner rejects a response whose
        /// only messages are commentary).
        final_answer: bool,
    },
    /// A computer call: the raw action objects, in order (one for the
    /// preview shape), read leniently later.
    ComputerCall {
        call_id: String,
        actions: Vec<Value>,
        pending_safety_checks: Vec<SafetyCheck>,
        /// The item's status when it is not `completed` (a call cut short
        /// by an incomplete response must not run).
        unfinished: Option<String>,
    },
    /// A function call.
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// A compaction item (Responses `context_management`), its required
    /// fields checked: kept for resending, unchanged.
    Compaction,
    /// Anything else (reasoning, ...): kept for resending only.
    Other,
}

/// A response, read leniently.
#[derive(Debug, Clone)]
pub struct ModelResponse {
    pub id: String,
    pub status: String,
    pub items: Vec<OutputItem>,
    /// The output items exactly as received (resent when nothing is
    /// stored server-side, the default).
    pub raw_output: Vec<Value>,
    pub usage: Option<Usage>,
    /// Why the response is not `completed`, when the API says.
    pub problem: Option<String>,
}

/// Why a reply could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the model's reply is malformed: {0}")]
pub struct Malformed(pub String);

fn text_of(v: &Value) -> String {
    v.get("content")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| {
                    p.get("text")
                        .or_else(|| p.get("refusal"))
                        .and_then(Value::as_str)
                })
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

fn parse_item(v: &Value) -> Result<OutputItem, Malformed> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
    let str_field = |name: &str| -> Result<String, Malformed> {
        v.get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| Malformed(format!("a {kind} item without a string `{name}`")))
    };
    Ok(match kind {
        "message" => OutputItem::Message {
            text: text_of(v),
            final_answer: v
                .get("status")
                .and_then(Value::as_str)
                .is_none_or(|s| s == "completed")
                && v.get("phase").and_then(Value::as_str) != Some("commentary"),
        },
        "computer_call" => {
            let call_id = str_field("call_id")?;
            let actions = match (v.get("actions"), v.get("action")) {
                (Some(Value::Array(a)), _) => a.clone(),
                (_, Some(a @ Value::Object(_))) => vec![a.clone()],
                _ => {
                    return Err(Malformed(format!(
                        "computer call {call_id} has neither `actions` nor `action`"
                    )));
                }
            };
            let pending_safety_checks = match v.get("pending_safety_checks") {
                None | Some(Value::Null) => Vec::new(),
                Some(c) => serde_json::from_value(c.clone()).map_err(|e| {
                    Malformed(format!(
                        "computer call {call_id}: pending_safety_checks: {e}"
                    ))
                })?,
            };
            let unfinished = v
                .get("status")
                .and_then(Value::as_str)
                .filter(|s| *s != "completed")
                .map(str::to_string);
            OutputItem::ComputerCall {
                call_id,
                actions,
                pending_safety_checks,
                unfinished,
            }
        }
        "function_call" => OutputItem::FunctionCall {
            call_id: str_field("call_id")?,
            name: str_field("name")?,
            arguments: v
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_string(),
        },
        "compaction" => {
            // Responses compaction (`context_management`): the required
            // fields of `CompactionBody` are checked; the item is resent
            // as it came, its encrypted content unchanged.
            for name in ["id", "encrypted_content"] {
                if str_field(name)?.is_empty() {
                    return Err(Malformed(format!(
                        "a compaction item with an empty `{name}`"
                    )));
                }
            }
            OutputItem::Compaction
        }
        _ => OutputItem::Other,
    })
}

/// The input a conversation resends once the API compacted it
/// (`context_management`): the user's messages before the newest
/// `compaction` item, that item, and everything after it — the shape of
/// the API's own compacted list (`CompactResource.output`: the user
/// messages, then one compaction item). Items are resent as they are (the
/// encrypted content unchanged); without a compaction item, all of them.
pub fn compacted_window(items: &[Value]) -> Vec<Value> {
    let Some(k) = items.iter().rposition(|i| i["type"] == "compaction") else {
        return items.to_vec();
    };
    items[..k]
        .iter()
        .filter(|i| i["role"] == "user" && (i.get("type").is_none() || i["type"] == "message"))
        .chain(&items[k..])
        .cloned()
        .collect()
}

/// Reads a `Response` object.
pub fn parse_response(v: &Value) -> Result<ModelResponse, Malformed> {
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| Malformed("no response `id`".into()))?
        .to_string();
    let status = v
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("completed")
        .to_string();
    let raw_output = v
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| Malformed("no `output` array".into()))?;
    let items = raw_output
        .iter()
        .map(parse_item)
        .collect::<Result<Vec<_>, _>>()?;
    let usage = v.get("usage").and_then(|u| {
        Some(Usage {
            input_tokens: u.get("input_tokens")?.as_u64()?,
            output_tokens: u.get("output_tokens")?.as_u64()?,
            total_tokens: u.get("total_tokens")?.as_u64()?,
        })
    });
    let problem = match status.as_str() {
        "completed" => None,
        _ => Some(
            v.get("error")
                .and_then(|e| e.get("message"))
                .or_else(|| v.get("incomplete_details").and_then(|d| d.get("reason")))
                .and_then(Value::as_str)
                .map(|m| format!("{status}: {m}"))
                .unwrap_or_else(|| status.clone()),
        ),
    };
    Ok(ModelResponse {
        id,
        status,
        items,
        raw_output,
        usage,
        problem,
    })
}

/// A user message with text and, optionally, a screenshot.
pub fn user_message(text: &str, image_data_url: Option<&str>) -> Value {
    let mut content = vec![json!({"type": "input_text", "text": text})];
    if let Some(url) = image_data_url {
        content.push(json!({"type": "input_image", "image_url": url, "detail": "original"}));
    }
    json!({"type": "message", "role": "user", "content": content})
}

/// The output of a computer call: the screenshot after its actions, and
/// the safety checks the operator acknowledged (exactly the pending ones).
pub fn computer_call_output(
    call_id: &str,
    image_data_url: &str,
    acknowledged: &[SafetyCheck],
) -> Value {
    json!({
        "type": "computer_call_output",
        "call_id": call_id,
        "output": {"type": "computer_screenshot", "image_url": image_data_url},
        "acknowledged_safety_checks": acknowledged,
    })
}

/// The output of a function call.
pub fn function_call_output(call_id: &str, output: &str) -> Value {
    json!({"type": "function_call_output", "call_id": call_id, "output": output})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_call_shapes_and_keeps_unknown_items() {
        let r = parse_response(&json!({
            "id": "resp_1", "object": "response", "status": "completed", "future": 1,
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
                 "pending_safety_checks": [{"id": "sc_1", "code": "sensitive_domain", "message": "m"}],
                 "actions": [{"type": "click", "button": "left", "x": 1, "y": 2}, {"type": "wait"}]},
                {"type": "computer_call", "id": "cu_2", "call_id": "call_2", "status": "completed",
                 "pending_safety_checks": [], "action": {"type": "screenshot"}},
                {"type": "message", "id": "m", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "done", "annotations": []}]}
            ],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        }))
        .unwrap();
        assert_eq!(r.raw_output.len(), 4);
        assert_eq!(r.items[0], OutputItem::Other);
        match &r.items[1] {
            OutputItem::ComputerCall {
                call_id,
                actions,
                pending_safety_checks,
                ..
            } => {
                assert_eq!(call_id, "call_1");
                assert_eq!(actions.len(), 2);
                assert_eq!(pending_safety_checks[0].id, "sc_1");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(&r.items[2], OutputItem::ComputerCall { actions, .. } if actions.len() == 1)
        );
        assert_eq!(
            r.items[3],
            OutputItem::Message {
                text: "done".into(),
                final_answer: true,
            }
        );
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 10,
                output_tokens: 5,
                total_tokens: 15
            })
        );
        assert!(r.problem.is_none());
    }

    #[test]
    fn commentary_and_unfinished_messages_are_not_final_answers() {
        let msg = |extra: Value| {
            let mut m = json!({"type": "message", "id": "m", "role": "assistant",
                               "content": [{"type": "output_text", "text": "t", "annotations": []}]});
            for (k, v) in extra.as_object().unwrap() {
                m[k] = v.clone();
            }
            let r = parse_response(&json!({"id": "r", "output": [m]})).unwrap();
            match &r.items[0] {
                OutputItem::Message { final_answer, .. } => *final_answer,
                other => panic!("{other:?}"),
            }
        };
        assert!(msg(json!({"status": "completed"})));
        assert!(msg(json!({"status": "completed", "phase": "final_answer"})));
        assert!(msg(json!({"status": "completed", "phase": null})));
        assert!(msg(json!({})));
        assert!(!msg(json!({"status": "completed", "phase": "commentary"})));
        assert!(!msg(json!({"status": "incomplete"})));
        assert!(!msg(
            json!({"status": "in_progress", "phase": "final_answer"})
        ));
    }

    #[test]
    fn missing_usage_is_none_and_problems_are_reported() {
        let r = parse_response(&json!({"id": "r", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}, "output": []}))
        .unwrap();
        assert!(r.usage.is_none());
        assert_eq!(r.problem.as_deref(), Some("incomplete: max_output_tokens"));
        assert!(parse_response(&json!({"status": "completed", "output": []})).is_err());
        assert!(
            parse_response(
                &json!({"id": "r", "output": [{"type": "computer_call", "call_id": "c"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn compaction_items_are_checked_and_the_window_starts_at_the_newest() {
        let ok = json!({"id": "r", "output": [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "abc", "created_by": "x"}
        ]});
        assert_eq!(
            parse_response(&ok).unwrap().items,
            vec![OutputItem::Compaction]
        );
        for bad in [
            json!({"type": "compaction", "id": "cmp_1"}),
            json!({"type": "compaction", "encrypted_content": "abc"}),
            json!({"type": "compaction", "id": "cmp_1", "encrypted_content": ""}),
            json!({"type": "compaction", "id": 1, "encrypted_content": "abc"}),
        ] {
            let v = json!({"id": "r", "output": [bad]});
            assert!(parse_response(&v).is_err(), "{v}");
        }
        let task = user_message("the task", None);
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let out = function_call_output("c1", "x");
        let cmp = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "abc"});
        let later = json!({"type": "message", "role": "assistant", "content": []});
        let items = vec![task.clone(), call.clone(), out, cmp.clone(), later.clone()];
        assert_eq!(compacted_window(&items), vec![task.clone(), cmp, later]);
        let plain = vec![task, call];
        assert_eq!(compacted_window(&plain), plain);
    }
}
