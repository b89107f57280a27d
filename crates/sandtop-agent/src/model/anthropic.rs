//! The Anthropic Messages API (`POST {base}/v1/messages`) behind the same
//! [`Model`] trait as the Responses client (docs/contract.md rule 69).
//!
//! The loop speaks the Responses API's items (they are its vocabulary, its
//! trajectory and its resume point), so this client translates at the edge
//! and nowhere else:
//!
//! * **request**: the `CreateResponse` body the runner built becomes a
//!   `MessageCreateParams` body: `instructions` the `system` prompt, the
//!   computer tool the `computer_toolset_20260801` toolset entry (all
//!   17 members offered), each function
//!   tool a custom tool (`input_schema` its `parameters`), and the input
//!   items the alternating `messages`: user text and screenshots as `text`
//!   and base64 `image` blocks, the assistant's turns as the very content
//!   blocks the API sent (kept on the items, see below), a computer call's
//!   output a `tool_result` (`toolset_name: "computer"`) holding the
//!   toolset's own acknowledgment line and the screenshot after it (a
//!   `zoom`'s: its image alone), a function call's output (and a
//!   `cursor_position`'s, `X=..,Y=..`) a `tool_result` holding its text;
//! * **response**: a `Message` becomes a Responses-shaped response: a
//!   `text` block an assistant `message` (commentary unless the turn
//!   ended), a computer member's `tool_use` a `computer_call` whose
//!   `actions` are the daemon's actions for it (so every later check —
//!   strict parsing, bounds through the ScaleMap, key names, approvals,
//!   confirmations, the ledger — is the one the OpenAI loop runs), any
//!   other `tool_use` a `function_call`. Every such item carries the block
//!   it came from under [`BLOCK`], so the conversation resent (and resumed
//!   from the trajectory) is exactly what the API sent.
//!
//! Shapes are the SDK's (`anthropic==2.17.0`, `anthropic/types/beta/`:
//! `BetaComputerToolset20260801Param`, `BetaComputer*Input`,
//! `BetaToolResultBlockParam`, `BetaMessage`; the acknowledgment lines are
//! `lib/tools/_toolsets/_computer_registry.py`'s `ROWS`). The tests of
//! `python/tests/test_anthropic_loop.py` validate every request this client
//! sends with the SDK's own request type.
//!
//! The key is sent as the SDK 2.x sends it (`Authorization: Bearer`) and
//! never appears in errors or logs.

use serde_json::{Value, json};

use super::{Attempt, Creating, Model, RetryPolicy, http_client, json_reply, send, with_retries};
use sandtop_hostkit::secret::Secret;
use sandtop_protocol::limits;
use sandtop_runfolder::items::{self as wire, ModelResponse};

pub mod browser;
pub mod scripted;

/// Where each translated item keeps the content block it came from.
pub const BLOCK: &str = "anthropic_block";

/// The toolset entry's `type`.
pub const COMPUTER_TOOLSET: &str = "computer_toolset_20260801";

/// The older computer tool's `type` (`BetaToolComputerUse20251124Param`):
/// one tool named `computer` whose `tool_use` input names the member in
/// `action`.
pub const COMPUTER_20251124: &str = "computer_20251124";

/// How the computer is offered to Claude.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ComputerTool {
    /// The computer toolset (`computer_toolset_20260801`).
    #[default]
    Toolset,
    /// The older `computer_20251124` tool (`--computer-20251124`), for
    /// models that still use it: its display size is the screenshots'.
    Computer20251124,
}

/// The `anthropic-version` header the SDK 2.17.0 sends (`_constants.py`).
pub const API_VERSION: &str = "2026-10-21";

/// `max_tokens` of every request (required by the API).
pub const MAX_TOKENS: u64 = 8192;

/// The computer toolset's members (`_computer_registry.py` `ROWS`, in
/// its order): the loop runs every one, so the toolset entry withholds
/// none. `cursor_position` and `zoom` run as the loop's reads
/// ([`crate::computer::reads`]), `left_mouse_down`, `left_mouse_up` and
/// `hold_key` as Sandtop's own actions (docs/contract.md rule 66).
pub const MEMBERS: &[&str] = &[
    "key",
    "hold_key",
    "type",
    "cursor_position",
    "mouse_move",
    "left_mouse_down",
    "left_mouse_up",
    "left_click",
    "left_click_drag",
    "right_click",
    "middle_click",
    "double_click",
    "triple_click",
    "scroll",
    "wait",
    "screenshot",
    "zoom",
];

/// `hold_key`'s longest hold in seconds (the daemon's `MAX_HOLD_KEY_MS`).
pub const MAX_HOLD_SECONDS: i64 = (limits::MAX_HOLD_KEY_MS / 1000) as i64;

/// The image of an older screenshot the runner's context budget replaced.
pub const PRUNED_TEXT: &str = "(an older screenshot, removed to keep the context small)";

/// `ANTHROPIC_BASE_URL` as the SDK reads it.
pub fn base_url() -> String {
    std::env::var("ANTHROPIC_BASE_URL")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "https://api.anthropic.com".to_string())
        .trim_end_matches('/')
        .to_string()
}

/// The Messages API over HTTP.
#[derive(Debug)]
pub struct AnthropicModel {
    client: reqwest::Client,
    url: String,
    key: Secret,
    retry: RetryPolicy,
    /// The screenshot placeholder the runner's budget puts in place of an
    /// older screenshot (sent as a line of text instead).
    placeholder: &'static str,
    computer: ComputerTool,
}

impl AnthropicModel {
    /// A client for `ANTHROPIC_BASE_URL` (or the default).
    pub fn new(key: Secret, retry: RetryPolicy) -> Result<AnthropicModel, reqwest::Error> {
        AnthropicModel::with_base_url(key, &base_url(), retry)
    }

    /// A client for an explicit base URL (`{base}/v1/messages` is called).
    pub fn with_base_url(
        key: Secret,
        base: &str,
        retry: RetryPolicy,
    ) -> Result<AnthropicModel, reqwest::Error> {
        Ok(AnthropicModel {
            client: http_client()?,
            url: format!("{}/v1/messages", base.trim_end_matches('/')),
            key,
            retry,
            placeholder: crate::runner::PLACEHOLDER_PNG,
            computer: ComputerTool::Toolset,
        })
    }

    /// Offers the computer as `tool` (the toolset by default).
    pub fn with_computer_tool(mut self, tool: ComputerTool) -> AnthropicModel {
        self.computer = tool;
        self
    }

    async fn attempt(&self, body: &Value, roles: &browser::Roles) -> Attempt {
        let req = self
            .client
            .post(&self.url)
            .header("anthropic-version", API_VERSION)
            .json(body);
        match send(req, &self.key).await {
            Ok(resp) => json_reply(resp, |v| from_message_in(v, roles)).await,
            Err(a) => a,
        }
    }
}

impl Model for AnthropicModel {
    fn describe(&self) -> String {
        format!("anthropic messages at {}", self.url)
    }

    fn own_actions(&self) -> bool {
        true
    }

    fn create<'a>(&'a mut self, body: &'a Value) -> Creating<'a> {
        Box::pin(async move {
            let request = translate(body, self.placeholder, self.computer)?;
            let roles = browser::roles(body["input"].as_array().map_or(&[], Vec::as_slice));
            let (this, request, roles) = (&*self, &request, &roles);
            with_retries(this.retry, move || this.attempt(request, roles)).await
        })
    }
}

fn malformed(m: impl Into<String>) -> wire::Malformed {
    wire::Malformed(m.into())
}

/// The toolset entry: every member is on by default and the loop runs
/// them all ([`MEMBERS`]), so no `configs` (as the SDK sends a toolset
/// whose driver serves every member).
pub fn computer_toolset() -> Value {
    json!({"type": COMPUTER_TOOLSET})
}

/// The older computer tool's entry for screenshots of `size`.
pub fn computer_20251124(size: (u32, u32)) -> Value {
    json!({"type": COMPUTER_20251124, "name": "computer",
           "display_width_px": size.0, "display_height_px": size.1})
}

/// The width and height of a PNG data URL (its IHDR), if it is one.
fn png_size(url: &str) -> Option<(u32, u32)> {
    use base64::Engine as _;
    let data = url.strip_prefix("data:image/png;base64,")?;
    // 32 base64 characters are the first 24 bytes: through the height.
    let head = base64::engine::general_purpose::STANDARD
        .decode(data.get(..32)?)
        .ok()?;
    sandtop_channel::image_check::png_size(&head)
}

/// The size of the latest screenshot of the conversation (the space the
/// model's coordinates are in).
fn screenshot_size(items: &[Value], placeholder: &str) -> Option<(u32, u32)> {
    let calls = tool_uses(items);
    items.iter().rev().find_map(|i| {
        let urls: Vec<&str> = match i["type"].as_str() {
            // A zoom's image is not the screenshot's space.
            Some("computer_call_output")
                if i["call_id"]
                    .as_str()
                    .and_then(|id| calls.get(id))
                    .and_then(|b| member_of(b))
                    .is_some_and(|(m, _)| m == "zoom") =>
            {
                Vec::new()
            }
            Some("computer_call_output") => i
                .pointer("/output/image_url")
                .and_then(Value::as_str)
                .into_iter()
                .collect(),
            _ => i["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["image_url"].as_str())
                .collect(),
        };
        urls.into_iter()
            .rev()
            .filter(|u| *u != placeholder)
            .find_map(png_size)
    })
}

/// One Responses tool as a Messages tool; `computer` is the computer's
/// entry.
fn tool(
    t: &Value,
    computer: &dyn Fn() -> Result<Value, wire::Malformed>,
) -> Result<Value, wire::Malformed> {
    match t["type"].as_str() {
        Some("computer") => computer(),
        Some("function") => {
            let mut out = json!({
                "name": t["name"],
                "input_schema": t["parameters"],
            });
            if let Some(d) = t.get("description") {
                out["description"] = d.clone();
            }
            if let Some(s) = t.get("strict").and_then(Value::as_bool) {
                out["strict"] = json!(s);
            }
            Ok(out)
        }
        other => Err(malformed(format!(
            "the tool {other:?} has no Messages API counterpart here"
        ))),
    }
}

/// A data URL's media type and base64 data.
fn image_source(url: &str) -> Result<Value, wire::Malformed> {
    let rest = url
        .strip_prefix("data:")
        .ok_or_else(|| malformed("an image that is not a data URL"))?;
    let (media, data) = rest
        .split_once(";base64,")
        .ok_or_else(|| malformed("an image data URL that is not base64"))?;
    if !matches!(
        media,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return Err(malformed(format!("an image of type {media:?}")));
    }
    Ok(json!({"type": "base64", "media_type": media, "data": data}))
}

fn image_block(url: &str, placeholder: &str) -> Result<Value, wire::Malformed> {
    if url == placeholder {
        return Ok(json!({"type": "text", "text": PRUNED_TEXT}));
    }
    Ok(json!({"type": "image", "source": image_source(url)?}))
}

/// The toolset's own acknowledgment of a member that ran
/// (`_computer_registry.py` `ROWS`; `None` for `screenshot`).
pub fn acknowledgment(block: &Value) -> Option<String> {
    let (name, input) = member_of(block)?;
    let input = &input;
    let field = |k: &str| match &input[k] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    };
    Some(match name.as_str() {
        "key" => format!("Pressed {}.", field("text")),
        "hold_key" => format!("Held {} for {}s.", field("text"), field("duration")),
        "type" => "Typed.".into(),
        "mouse_move" => "Moved the mouse.".into(),
        "left_mouse_down" => "Left mouse button pressed.".into(),
        "left_mouse_up" => "Left mouse button released.".into(),
        "left_click" => "Clicked.".into(),
        "left_click_drag" => "Dragged.".into(),
        "right_click" => "Right-clicked.".into(),
        "middle_click" => "Middle-clicked.".into(),
        "double_click" => "Double-clicked.".into(),
        "triple_click" => "Triple-clicked.".into(),
        "scroll" => format!("Scrolled {}.", field("scroll_direction")),
        "wait" => format!("Waited {}s.", field("duration")),
        _ => return None,
    })
}

/// A computer `tool_use`'s member and its input: the toolset's `name` and
/// `input`, or the older tool's `input.action` and the rest of `input`.
pub fn member_of(block: &Value) -> Option<(String, Value)> {
    if block["toolset_name"] == "computer" {
        return Some((block["name"].as_str()?.to_string(), block["input"].clone()));
    }
    if block["name"] != "computer" {
        return None;
    }
    let mut input = block["input"].as_object()?.clone();
    match input.remove("action")? {
        Value::String(a) => Some((a, Value::Object(input))),
        _ => None,
    }
}

/// The tool_use blocks of the conversation so far, by id.
fn tool_uses(items: &[Value]) -> std::collections::HashMap<&str, &Value> {
    items
        .iter()
        .filter_map(|i| i.get(BLOCK))
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| Some((b["id"].as_str()?, b)))
        .collect()
}

/// Translates a `CreateResponse` body into a `MessageCreateParams` body,
/// the computer offered as its toolset. `placeholder` is the data URL the
/// runner puts in place of a pruned screenshot.
pub fn to_messages_request(body: &Value, placeholder: &str) -> Result<Value, wire::Malformed> {
    translate(body, placeholder, ComputerTool::Toolset)
}

/// [`to_messages_request`] with the computer offered as `computer`.
pub fn translate(
    body: &Value,
    placeholder: &str,
    computer: ComputerTool,
) -> Result<Value, wire::Malformed> {
    let items = body["input"]
        .as_array()
        .ok_or_else(|| malformed("a request without an `input` array"))?;
    let calls = tool_uses(items);
    // (role, blocks), consecutive blocks of one role in one message.
    let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match messages.last_mut() {
        Some((r, blocks)) if *r == role => blocks.push(block),
        _ => messages.push((role, vec![block])),
    };
    for item in items {
        if let Some(block) = item.get(BLOCK) {
            push("assistant", block.clone());
            continue;
        }
        match (item["type"].as_str(), item["role"].as_str()) {
            (Some("message") | None, Some("user")) => {
                let parts = item["content"]
                    .as_array()
                    .ok_or_else(|| malformed("a user message without content parts"))?;
                for p in parts {
                    match p["type"].as_str() {
                        Some("input_text") => {
                            push("user", json!({"type": "text", "text": p["text"]}))
                        }
                        Some("input_image") => push(
                            "user",
                            image_block(p["image_url"].as_str().unwrap_or(""), placeholder)?,
                        ),
                        other => {
                            return Err(malformed(format!("a user message part {other:?}")));
                        }
                    }
                }
            }
            (Some("computer_call_output"), _) => {
                let id = item["call_id"].as_str().unwrap_or("");
                let mut content = Vec::new();
                let block = calls.get(id).copied();
                if let Some(ack) = block.and_then(acknowledgment) {
                    content.push(json!({"type": "text", "text": ack}));
                }
                let url = item
                    .pointer("/output/image_url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed("a computer call output without a screenshot"))?;
                content.push(image_block(url, placeholder)?);
                let mut result =
                    json!({"type": "tool_result", "tool_use_id": id, "content": content});
                // The older tool's results carry no toolset (it is a tool).
                if block.is_none_or(|b| b["toolset_name"] == "computer") {
                    result["toolset_name"] = json!("computer");
                }
                push("user", result);
            }
            (Some("function_call_output"), _)
                if calls
                    .get(item["call_id"].as_str().unwrap_or(""))
                    .is_some_and(|b| b["toolset_name"] == "browser") =>
            {
                let block = calls[item["call_id"].as_str().unwrap_or("")];
                push(
                    "user",
                    browser::tool_result(block, item, |url| image_block(url, placeholder))?,
                );
            }
            (Some("function_call_output"), _) => {
                let id = item["call_id"].as_str().unwrap_or("");
                let text = match &item["output"] {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                let mut block = json!({"type": "tool_result", "tool_use_id": id,
                                       "content": [{"type": "text", "text": if text.is_empty() { "(empty)".to_string() } else { text }}]});
                if let Some(ts) = calls.get(id).and_then(|b| b.get("toolset_name"))
                    && !ts.is_null()
                {
                    block["toolset_name"] = ts.clone();
                }
                push("user", block);
            }
            (kind, _) => {
                return Err(malformed(format!(
                    "the item {kind:?} cannot be sent to the Messages API (was this run started with another provider?)"
                )));
            }
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let entry = || {
        match computer {
        ComputerTool::Toolset => Ok(computer_toolset()),
        ComputerTool::Computer20251124 => screenshot_size(items, placeholder)
            .map(computer_20251124)
            .ok_or_else(|| {
                malformed(
                    "the computer_20251124 tool needs the screenshots' size, and the conversation has no screenshot yet",
                )
            }),
    }
    };
    let tools = browser::tools(body["tools"].as_array().map_or(&[], Vec::as_slice), |t| {
        tool(t, &entry)
    })?;
    let mut out = json!({
        "model": body["model"],
        "max_tokens": MAX_TOKENS,
        "messages": messages,
    });
    if !tools.is_empty() {
        out["tools"] = json!(tools);
    }
    if let Some(s) = body.get("instructions").and_then(Value::as_str) {
        out["system"] = json!(s);
    }
    Ok(out)
}

/// `"ctrl+s"` → `[["ctrl", "s"]]`; whitespace separates presses; `"ctrl++"`
/// holds ctrl and presses `+` (the Python driver's `chords`).
pub fn chords(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut out = Vec::new();
    for chord in text.split_whitespace() {
        let mut keys = Vec::new();
        let mut rest = chord;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('+') {
                keys.push("+".to_string());
                rest = r.strip_prefix('+').unwrap_or(r);
                continue;
            }
            let (name, after, sep) = match rest.split_once('+') {
                Some((n, a)) => (n, a, true),
                None => (rest, "", false),
            };
            keys.push(name.to_string());
            if sep && after.is_empty() {
                return Err(format!("{chord:?} ends with '+' and no key after it"));
            }
            rest = after;
        }
        out.push(keys);
    }
    if out.is_empty() {
        return Err("no key given".into());
    }
    Ok(out)
}

/// The most key presses one `key` call may make (chords times `repeat`),
/// as the Python driver allows.
pub const MAX_KEY_PRESSES: usize = 100;

/// The daemon's actions for one computer member's input, in the
/// Responses action vocabulary the loop checks. An input the loop cannot
/// run (a member it does not run, a pointer member without `coordinate`)
/// yields an action the runner's strict parsing refuses before anything of
/// the response runs, with the member named.
pub fn member_actions(name: &str, input: &Value) -> Vec<Value> {
    match member_actions_checked(name, input) {
        Ok(actions) => actions,
        // A type no schema defines: the preflight refuses it by name.
        Err(why) => vec![json!({"type": format!("{name}: {why}")})],
    }
}

fn member_actions_checked(name: &str, input: &Value) -> Result<Vec<Value>, String> {
    let obj = input
        .as_object()
        .ok_or_else(|| "input is not an object".to_string())?;
    let point = |k: &str| -> Result<(i64, i64), String> {
        match obj.get(k).and_then(Value::as_array).map(Vec::as_slice) {
            Some([x, y]) => match (x.as_i64(), y.as_i64()) {
                (Some(x), Some(y)) => Ok((x, y)),
                _ => Err(format!("{k} must be two integers")),
            },
            _ => Err(format!("{k} (x, y) is required here")),
        }
    };
    let held = || -> Result<Option<Vec<String>>, String> {
        match obj.get("text") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => {
                let mut c = chords(s)?;
                if c.len() != 1 {
                    return Err("text: one key combination to hold".into());
                }
                Ok(c.pop())
            }
            Some(_) => Err("text must be a string".into()),
        }
    };
    let int = |k: &str| obj.get(k).and_then(Value::as_i64);
    let with_keys = |mut a: Value, keys: Option<Vec<String>>| {
        if let Some(k) = keys {
            a["keys"] = json!(k);
        }
        a
    };
    let allowed: &[&str] = match name {
        "left_click" | "right_click" | "middle_click" | "double_click" | "triple_click" => {
            &["coordinate", "text"]
        }
        "mouse_move" => &["coordinate"],
        "left_click_drag" => &["start_coordinate", "coordinate", "text"],
        "scroll" => &["coordinate", "scroll_direction", "scroll_amount", "text"],
        "type" => &["text"],
        "key" => &["text", "repeat"],
        "wait" => &["duration"],
        "screenshot" | "cursor_position" | "left_mouse_down" | "left_mouse_up" => &[],
        "hold_key" => &["text", "duration"],
        "zoom" => &["region"],
        _ => return Err("this member is not run by host-cli".into()),
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("unknown field {k:?}"));
    }
    Ok(match name {
        "left_click" | "right_click" | "middle_click" => {
            let (x, y) = point("coordinate")?;
            let button = match name {
                "left_click" => "left",
                "right_click" => "right",
                _ => "wheel",
            };
            vec![with_keys(
                json!({"type": "click", "button": button, "x": x, "y": y}),
                held()?,
            )]
        }
        "double_click" | "triple_click" => {
            let (x, y) = point("coordinate")?;
            let keys = held()?;
            let mut v = vec![with_keys(
                json!({"type": "double_click", "x": x, "y": y}),
                keys.clone(),
            )];
            if name == "triple_click" {
                // The double click and a third click back to back in one
                // batch, as the Python driver does.
                v.push(with_keys(
                    json!({"type": "click", "button": "left", "x": x, "y": y}),
                    keys,
                ));
            }
            v
        }
        "mouse_move" => {
            let (x, y) = point("coordinate")?;
            vec![json!({"type": "move", "x": x, "y": y})]
        }
        "left_click_drag" => {
            let (x0, y0) = point("start_coordinate")?;
            let (x1, y1) = point("coordinate")?;
            vec![with_keys(
                json!({"type": "drag", "path": [{"x": x0, "y": y0}, {"x": x1, "y": y1}]}),
                held()?,
            )]
        }
        "scroll" => {
            let (x, y) = point("coordinate")?;
            let amount = int("scroll_amount").ok_or("scroll_amount must be an integer")?;
            if amount < 0 {
                return Err("scroll_amount must not be negative".into());
            }
            let d = amount.saturating_mul(limits::SCROLL_PIXELS_PER_CLICK as i64);
            let (dx, dy) = match obj.get("scroll_direction").and_then(Value::as_str) {
                Some("up") => (0, -d),
                Some("down") => (0, d),
                Some("left") => (-d, 0),
                Some("right") => (d, 0),
                _ => return Err("scroll_direction must be up, down, left or right".into()),
            };
            vec![with_keys(
                json!({"type": "scroll", "x": x, "y": y, "scroll_x": dx, "scroll_y": dy}),
                held()?,
            )]
        }
        "type" => {
            let text = obj
                .get("text")
                .and_then(Value::as_str)
                .ok_or("text must be a string")?;
            vec![json!({"type": "type", "text": text})]
        }
        "key" => {
            let text = obj
                .get("text")
                .and_then(Value::as_str)
                .ok_or("text must be a string")?;
            let repeat = match obj.get("repeat") {
                None | Some(Value::Null) => 1,
                Some(v) => v.as_i64().ok_or("repeat must be an integer")?,
            };
            let presses = chords(text)?;
            if repeat < 1 || (repeat as usize).saturating_mul(presses.len()) > MAX_KEY_PRESSES {
                return Err(format!(
                    "repeat must be at least 1, and at most {MAX_KEY_PRESSES} presses in all"
                ));
            }
            (0..repeat)
                .flat_map(|_| presses.iter())
                .map(|keys| json!({"type": "keypress", "keys": keys}))
                .collect()
        }
        "wait" => {
            let d = int("duration").ok_or("duration must be an integer")?;
            if !(0..=30).contains(&d) {
                return Err("duration must be 0 to 30 seconds".into());
            }
            // The loop's wait is "until the screen settles" (capped): the
            // duration is not honoured to the second (docs/contract.md).
            vec![json!({"type": "wait"})]
        }
        "screenshot" => vec![json!({"type": "screenshot"})],
        // The loop's reads (crate::computer::reads): the pointer in the
        // screenshot's space, a region of the screenshot at full
        // resolution (bounds checked against it by the preflight).
        "cursor_position" => vec![json!({"type": "cursor_position"})],
        "zoom" => {
            let region = match obj
                .get("region")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                Some(r @ [_, _, _, _]) => r
                    .iter()
                    .map(Value::as_i64)
                    .collect::<Option<Vec<i64>>>()
                    .ok_or("region must be four integers")?,
                _ => return Err("region (x0, y0, x1, y1) is required here".into()),
            };
            vec![json!({"type": "zoom", "region": region})]
        }
        // Sandtop's own actions (rule 66): the left button pressed where
        // the pointer is and left held, released; a chord held.
        "left_mouse_down" => vec![json!({"type": "mouse_down", "button": "left"})],
        "left_mouse_up" => vec![json!({"type": "mouse_up", "button": "left"})],
        "hold_key" => {
            let text = obj
                .get("text")
                .and_then(Value::as_str)
                .ok_or("text must be a string")?;
            let d = int("duration").ok_or("duration must be an integer")?;
            if !(0..=MAX_HOLD_SECONDS).contains(&d) {
                return Err(format!("duration must be 0 to {MAX_HOLD_SECONDS} seconds"));
            }
            let mut presses = chords(text)?;
            if presses.len() != 1 {
                return Err("text: one key combination to hold".into());
            }
            vec![json!({"type": "hold_key", "keys": presses.pop(), "duration_ms": d * 1000})]
        }
        _ => unreachable!("filtered above"),
    })
}

/// Reads a `Message` (`BetaMessage`) as a Responses-shaped response, with
/// no reads in the conversation before it.
pub fn from_message(v: &Value) -> Result<ModelResponse, wire::Malformed> {
    from_message_in(v, &browser::Roles::new())
}

/// Reads a `Message` (`BetaMessage`) as a Responses-shaped response;
/// `roles` are the element roles of the conversation's reads (a browser
/// `form_input` chooses its call by them).
pub fn from_message_in(
    v: &Value,
    roles: &browser::Roles,
) -> Result<ModelResponse, wire::Malformed> {
    if v["type"] != "message" {
        return Err(malformed("the reply is not a `message`"));
    }
    let id = v["id"]
        .as_str()
        .ok_or_else(|| malformed("no message `id`"))?
        .to_string();
    let blocks = v["content"]
        .as_array()
        .ok_or_else(|| malformed("no `content` array"))?;
    let stop = v["stop_reason"].as_str().unwrap_or("");
    let ended = matches!(stop, "end_turn" | "stop_sequence" | "refusal");
    let mut output = Vec::new();
    for b in blocks {
        let mut item = match b["type"].as_str() {
            Some("text") => json!({
                "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": b["text"].as_str().unwrap_or(""), "annotations": []}],
            }),
            Some("tool_use") => {
                let call_id = b["id"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| malformed("a tool_use without an `id`"))?;
                let name = b["name"]
                    .as_str()
                    .ok_or_else(|| malformed(format!("tool_use {call_id} without a `name`")))?;
                if !b["input"].is_object() {
                    return Err(malformed(format!(
                        "tool_use {call_id}: `input` is not an object"
                    )));
                }
                match b["toolset_name"].as_str() {
                    Some("computer") => json!({
                        "type": "computer_call", "id": call_id, "call_id": call_id,
                        "status": "completed", "pending_safety_checks": [],
                        "actions": member_actions(name, &b["input"]),
                    }),
                    // The older computer_20251124 tool: `action` names the member.
                    None if name == "computer" => {
                        let actions = match member_of(b) {
                            Some((member, input)) => member_actions(&member, &input),
                            None => vec![
                                json!({"type": "computer: `action` (a member name) is required"}),
                            ],
                        };
                        json!({
                            "type": "computer_call", "id": call_id, "call_id": call_id,
                            "status": "completed", "pending_safety_checks": [], "actions": actions,
                        })
                    }
                    Some("browser") => browser::function_call(call_id, name, &b["input"], roles),
                    Some(other) => {
                        return Err(malformed(format!(
                            "tool_use {call_id}: the toolset {other:?} is not offered"
                        )));
                    }
                    None => json!({
                        "type": "function_call", "id": call_id, "call_id": call_id,
                        "status": "completed", "name": name,
                        "arguments": b["input"].to_string(),
                    }),
                }
            }
            // thinking, redacted_thinking, ...: resent as they came.
            Some(_) => json!({"type": "anthropic_other"}),
            None => return Err(malformed("a content block without a `type`")),
        };
        if !ended && item["type"] == "message" {
            item["phase"] = json!("commentary");
        }
        item[BLOCK] = b.clone();
        output.push(item);
    }
    let mut resp = json!({"id": id, "status": "completed", "output": output});
    match stop {
        "max_tokens" | "pause_turn" | "model_context_window_exceeded" => {
            resp["status"] = json!("incomplete");
            resp["incomplete_details"] = json!({"reason": stop});
        }
        _ => {}
    }
    if let Some(u) = v.get("usage") {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        let input =
            n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens");
        let output = n("output_tokens");
        resp["usage"] =
            json!({"input_tokens": input, "output_tokens": output, "total_tokens": input + output});
    }
    wire::parse_response(&resp)
}

#[cfg(test)]
mod tests;
