//! The Responses API request body, as much of it as the loop needs.
//!
//! Requests are built here and only here, in the shapes of
//! `reference/openai-openapi.yaml` (`CreateResponse`; the tests validate
//! every body we build against it). The items a request carries are
//! [`sandtop_runfolder::items`]'s.

use serde_json::{Value, json};

use sandtop_runfolder::items::ToolShape;

/// The tools offered to the model: the computer tool (unless `shape` is
/// `None`: the browser alone), the browser's function tools, `ask_user`.
pub fn tools(
    shape: Option<ToolShape>,
    display: sandtop_protocol::Size,
    ask_user: bool,
    browser: &[Value],
) -> Vec<Value> {
    let mut tools: Vec<Value> = shape
        .map(|shape| match shape {
            ToolShape::Computer => json!({"type": "computer"}),
            ToolShape::ComputerUsePreview => json!({
                "type": "computer_use_preview",
                "display_width": display.width,
                "display_height": display.height,
                "environment": "linux",
            }),
        })
        .into_iter()
        .collect();
    tools.extend(browser.iter().cloned());
    if ask_user {
        tools.push(json!({
            "type": "function",
            "name": "ask_user",
            "description": "Ask the human operator a question and wait for the answer. \
                Use it when the task is ambiguous or needs information only they have. \
                Never use it to ask for passwords or other credentials.",
            "strict": true,
            "parameters": {
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "The question, in one or two sentences."}
                },
                "required": ["question"],
                "additionalProperties": false,
            },
        }));
    }
    tools
}

/// Everything that shapes one request.
#[derive(Debug, Clone)]
pub struct RequestParts<'a> {
    pub model: &'a str,
    /// The computer tool's shape; `None` offers no computer tool.
    pub shape: Option<ToolShape>,
    /// The browser's function tools (none without `--browser`).
    pub browser: &'a [Value],
    pub display: sandtop_protocol::Size,
    pub instructions: Option<&'a str>,
    pub input: &'a [Value],
    pub previous_response_id: Option<&'a str>,
    pub store: bool,
    pub stream: bool,
    pub ask_user: bool,
    /// Ask the API to compact the context (`context_management`).
    pub compaction: bool,
}

/// Builds a `CreateResponse` body.
pub fn create_request(p: &RequestParts<'_>) -> Value {
    let mut body = json!({
        "model": p.model,
        "input": p.input,
        "tools": tools(p.shape, p.display, p.ask_user, p.browser),
        "store": p.store,
        "stream": p.stream,
    });
    if let Some(i) = p.instructions {
        body["instructions"] = json!(i);
    }
    if let Some(prev) = p.previous_response_id {
        body["previous_response_id"] = json!(prev);
    }
    if p.shape == Some(ToolShape::ComputerUsePreview) {
        // The preview tool requires it.
        body["truncation"] = json!("auto");
    }
    if p.compaction {
        // `ContextManagementParam`: only `compaction` is supported; no
        // `compact_threshold` leaves the API's own.
        body["context_management"] = json!([{"type": "compaction"}]);
    }
    if !p.store {
        // Without storage, reasoning items can only be sent back with
        // their encrypted content.
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    body
}
