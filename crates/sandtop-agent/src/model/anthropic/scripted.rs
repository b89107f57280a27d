//! The offline scripted model spoken through the Messages API's shapes
//! (`host-cli exercise --provider anthropic`, docs/contract.md rule 70).
//!
//! Every request the loop makes is translated into the Messages body the
//! real client would send (`to_messages_request`) and checked as the API
//! would check its structure ([`check_request`]: alternating roles, every
//! `tool_use` answered by a `tool_result` in the next user message, first,
//! in order, base64 images); the script's answer (Responses items) is
//! turned into a `Message` whose `tool_use` blocks are the computer
//! toolset's members ([`to_member`]) and the browser toolset's
//! ([`browser::to_member`]), and read back by [`from_message_in`],
//! exactly as a reply from the API is. So the exercise runs the whole
//! Anthropic translation against the real guest, offline. What has no
//! counterpart in the Messages API is dropped and said so: the script's
//! pending safety checks (the Messages API raises none).

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{BLOCK, ComputerTool, browser, from_message_in, translate};
use crate::model::scripted::{ScriptedModel, ScriptedOnly};
use crate::model::{Creating, Model, ModelError};
use crate::runner::PLACEHOLDER_PNG;
use sandtop_protocol::limits;

/// The scripted model, through the Messages API's shapes.
#[derive(Debug)]
pub struct ScriptedMessages {
    inner: ScriptedModel,
    n: u32,
    /// The Messages bodies the loop's requests became, for tests.
    pub sent: Vec<Value>,
    /// How many safety checks of the script were dropped.
    pub dropped_checks: usize,
    computer: ComputerTool,
}

impl ScriptedMessages {
    pub fn new(inner: ScriptedModel) -> ScriptedMessages {
        ScriptedMessages {
            inner,
            n: 0,
            sent: Vec::new(),
            dropped_checks: 0,
            computer: ComputerTool::Toolset,
        }
    }

    /// Offers (and speaks) the computer as `tool`.
    pub fn with_computer_tool(mut self, tool: ComputerTool) -> ScriptedMessages {
        self.computer = tool;
        self
    }
}

/// What the Messages API would refuse in a request's structure.
pub fn check_request(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("no messages")?;
    if messages.first().map(|m| &m["role"]) != Some(&json!("user")) {
        return Err("the first message is not the user's".into());
    }
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().ok_or("a message without a role")?;
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err(format!("message {i} is {role}'s, expected {want}'s"));
        }
        let content = m["content"].as_array().ok_or("a message without content")?;
        if content.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if role == "user" {
            let results: Vec<&str> = content
                .iter()
                .take_while(|b| b["type"] == "tool_result")
                .filter_map(|b| b["tool_use_id"].as_str())
                .collect();
            if results != open {
                return Err(format!(
                    "message {i} answers {results:?}, the calls before it were {open:?}"
                ));
            }
            if content
                .iter()
                .skip(results.len())
                .any(|b| b["type"] == "tool_result")
            {
                return Err(format!("message {i}: a tool_result after other content"));
            }
            for b in content {
                let images = std::iter::once(b)
                    .chain(b["content"].as_array().into_iter().flatten())
                    .filter(|c| c["type"] == "image");
                for img in images {
                    if img["source"]["type"] != "base64" || !img["source"]["data"].is_string() {
                        return Err(format!("message {i}: an image that is not base64"));
                    }
                }
            }
            open.clear();
        } else {
            open = content
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_string))
                .collect();
            let unique: HashSet<&String> = open.iter().collect();
            if unique.len() != open.len() {
                return Err(format!("message {i}: tool_use ids repeat"));
            }
        }
    }
    if !open.is_empty() {
        return Err("the last assistant turn's calls are unanswered".into());
    }
    Ok(())
}

/// One Responses computer action as a computer toolset member call
/// (`(name, input)`), the inverse of [`super::member_actions`].
pub fn to_member(action: &Value) -> Result<(&'static str, Value), String> {
    let xy = || json!([action["x"], action["y"]]);
    let held = |mut input: Value| {
        if let Some(keys) = action["keys"].as_array().filter(|k| !k.is_empty()) {
            let names: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
            input["text"] = json!(names.join("+"));
        }
        input
    };
    Ok(match action["type"].as_str().unwrap_or("") {
        "click" => {
            let name = match action["button"].as_str() {
                Some("left") => "left_click",
                Some("right") => "right_click",
                Some("wheel") => "middle_click",
                other => return Err(format!("a click of button {other:?}")),
            };
            (name, held(json!({"coordinate": xy()})))
        }
        "double_click" => ("double_click", held(json!({"coordinate": xy()}))),
        "move" => ("mouse_move", json!({"coordinate": xy()})),
        "drag" => match action["path"].as_array().map(Vec::as_slice) {
            Some([a, b]) => (
                "left_click_drag",
                held(json!({"start_coordinate": [a["x"], a["y"]], "coordinate": [b["x"], b["y"]]})),
            ),
            _ => return Err("a drag of other than two points".into()),
        },
        "keypress" => {
            let keys: Vec<&str> = action["keys"]
                .as_array()
                .ok_or("a keypress without keys")?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            ("key", json!({"text": keys.join("+")}))
        }
        "type" => ("type", json!({"text": action["text"]})),
        "wait" => ("wait", json!({"duration": 1})),
        "screenshot" => ("screenshot", json!({})),
        "scroll" => {
            let (dx, dy) = (
                action["scroll_x"].as_i64().unwrap_or(0),
                action["scroll_y"].as_i64().unwrap_or(0),
            );
            let (dir, d) = match (dx, dy) {
                (0, d) if d < 0 => ("up", -d),
                (0, d) => ("down", d),
                (d, 0) if d < 0 => ("left", -d),
                (d, 0) => ("right", d),
                _ => return Err("a diagonal scroll".into()),
            };
            let per = limits::SCROLL_PIXELS_PER_CLICK as i64;
            (
                "scroll",
                held(json!({"coordinate": xy(), "scroll_direction": dir,
                            "scroll_amount": (d + per - 1) / per})),
            )
        }
        other => return Err(format!("the action {other:?} has no member")),
    })
}

/// The script's Responses items as a `Message`; the number of safety
/// checks dropped.
pub fn to_message(n: u32, items: &[Value]) -> Result<(Value, usize), String> {
    to_message_as(n, items, ComputerTool::Toolset)
}

/// [`to_message`] with the computer's calls shaped for `computer`.
pub fn to_message_as(
    n: u32,
    items: &[Value],
    computer: ComputerTool,
) -> Result<(Value, usize), String> {
    let mut content = Vec::new();
    let mut dropped = 0;
    let mut calls = 0;
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                let text: String = item["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["text"].as_str())
                    .collect();
                content.push(json!({"type": "text", "text": text}));
            }
            Some("computer_call") => {
                dropped += item["pending_safety_checks"].as_array().map_or(0, Vec::len);
                let call_id = item["call_id"].as_str().ok_or("a call without a call_id")?;
                let actions = item["actions"].as_array().ok_or("a call without actions")?;
                for (k, a) in actions.iter().enumerate() {
                    let (name, input) = to_member(a)?;
                    calls += 1;
                    // The script's own id (it may look for its answer), one
                    // per member when a call had several actions.
                    let id = if actions.len() == 1 {
                        call_id.to_string()
                    } else {
                        format!("{call_id}_{}", k + 1)
                    };
                    content.push(match computer {
                        ComputerTool::Toolset => json!({"type": "tool_use", "id": id,
                            "name": name, "input": input, "toolset_name": "computer"}),
                        ComputerTool::Computer20251124 => {
                            let mut input = input;
                            input["action"] = json!(name);
                            json!({"type": "tool_use", "id": id, "name": "computer", "input": input})
                        }
                    });
                }
            }
            Some("function_call") => {
                let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap_or("{}"))
                    .map_err(|e| format!("function arguments: {e}"))?;
                calls += 1;
                // A browser call the toolset expresses goes as its member;
                // the others (wait_for, the file members, any other
                // function) as the custom tools they are offered as.
                let member = item["name"]
                    .as_str()
                    .and_then(|n| n.strip_prefix("browser_"))
                    .and_then(|m| browser::to_member(m, &args));
                content.push(match member {
                    Some((name, input)) => json!({"type": "tool_use", "id": item["call_id"],
                        "name": name, "input": input, "toolset_name": "browser"}),
                    None => json!({"type": "tool_use", "id": item["call_id"],
                                   "name": item["name"], "input": args}),
                });
            }
            other => return Err(format!("the script's item {other:?} has no Messages block")),
        }
    }
    let stop = if calls > 0 { "tool_use" } else { "end_turn" };
    Ok((
        json!({"id": format!("msg_scripted_{n}"), "type": "message", "role": "assistant",
               "model": "sandtop-scripted-exercise", "content": content, "stop_reason": stop,
               "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}}),
        dropped,
    ))
}

impl Model for ScriptedMessages {
    fn describe(&self) -> String {
        "the offline scripted model, through the Messages API's shapes".into()
    }

    fn scripted(&self) -> Option<ScriptedOnly> {
        self.inner.scripted()
    }

    fn own_actions(&self) -> bool {
        true
    }

    fn create<'a>(&'a mut self, body: &'a Value) -> Creating<'a> {
        Box::pin(async move {
            let request = translate(body, PLACEHOLDER_PNG, self.computer)?;
            check_request(&request).map_err(|e| {
                ModelError::Script(format!("the Messages request is malformed: {e}"))
            })?;
            self.sent.push(request);
            // The script reads the loop's own request (its screenshots).
            let (resp, stats) = self.inner.create(body).await?;
            self.n += 1;
            let (message, dropped) = to_message_as(self.n, &resp.raw_output, self.computer)
                .map_err(ModelError::Script)?;
            if dropped > 0 {
                tracing::info!(
                    dropped,
                    "the Messages API has no safety checks: the script's are not raised"
                );
            }
            self.dropped_checks += dropped;
            let roles = browser::roles(body["input"].as_array().map_or(&[], Vec::as_slice));
            let parsed = from_message_in(&message, &roles)?;
            debug_assert!(parsed.raw_output.iter().all(|i| i.get(BLOCK).is_some()));
            Ok((parsed, stats))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::anthropic::{from_message, member_actions};

    #[test]
    fn script_actions_go_through_members_and_back_unchanged() {
        for a in [
            json!({"type": "click", "button": "left", "x": 17, "y": 285}),
            json!({"type": "click", "button": "right", "x": 1, "y": 2, "keys": ["CTRL"]}),
            json!({"type": "double_click", "x": 3, "y": 4}),
            json!({"type": "move", "x": 5, "y": 6}),
            json!({"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 9, "y": 9}]}),
            json!({"type": "keypress", "keys": ["CTRL", "S"]}),
            json!({"type": "keypress", "keys": ["SUPER", "E"]}),
            json!({"type": "type", "text": "Zoë 山田"}),
            json!({"type": "wait"}),
            json!({"type": "screenshot"}),
            json!({"type": "scroll", "x": 7, "y": 8, "scroll_x": 0, "scroll_y": 150}),
        ] {
            let (name, input) = to_member(&a).unwrap();
            assert_eq!(member_actions(name, &input), vec![a.clone()], "{a}");
        }
    }

    #[test]
    fn the_request_structure_is_checked_as_the_api_would() {
        let ok = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "t"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "n", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": []},
                                         {"type": "text", "text": "note"}]},
        ]});
        check_request(&ok).unwrap();
        let mut unanswered = ok.clone();
        unanswered["messages"][2]["content"][0]["tool_use_id"] = json!("b");
        assert!(check_request(&unanswered).is_err());
        let mut late = ok.clone();
        late["messages"][2]["content"] = json!([{"type": "text", "text": "x"},
            {"type": "tool_result", "tool_use_id": "a", "content": []}]);
        assert!(check_request(&late).is_err());
        let mut open = ok.clone();
        open["messages"].as_array_mut().unwrap().pop();
        assert!(check_request(&open).is_err());
    }

    #[test]
    fn a_scripted_response_becomes_a_message_with_its_checks_counted() {
        let items = vec![
            crate::model::scripted::computer_call(
                1,
                vec![
                    json!({"type": "wait"}),
                    json!({"type": "keypress", "keys": ["SUPER", "E"]}),
                ],
                vec![json!({"id": "sc", "code": "c", "message": "m"})],
            ),
            crate::model::scripted::message(1, "ok"),
        ];
        let (m, dropped) = to_message(1, &items).unwrap();
        assert_eq!(dropped, 1);
        assert_eq!(m["stop_reason"], "tool_use");
        let r = from_message(&m).unwrap();
        assert_eq!(r.items.len(), 3);
    }
}
