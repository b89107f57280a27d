//! The page agent and the tabs: `page.js` evaluated in the BiDi sandbox
//! realm of a tab's document, the tab list with titles and the shown tab,
//! and which tab a call acts on.

use std::time::Duration;

use sandtop_protocol::browser::{self as wire, BrowserState, BrowserTab};
use sandtop_protocol::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::bidi::Bidi;
use super::bidi_error;

const PAGE_JS: &str = include_str!("page.js");

/// Wait for ordinary commands.
pub(super) const COMMAND_WAIT: Duration = Duration::from_secs(10);
/// Wait for a navigation to complete.
pub(super) const NAVIGATE_WAIT: Duration = Duration::from_secs(25);

/// Limits handed to the page agent.
fn limits() -> Value {
    json!({
        "label": wire::MAX_LABEL_BYTES,
        "value": wire::MAX_VALUE_BYTES,
        "text": wire::MAX_READ_TEXT_BYTES,
        "elements": wire::MAX_READ_ELEMENTS,
        "title": wire::MAX_TITLE_BYTES,
        "refs": 20_000,
        "nodes": 60_000,
        "frames": 16,
        "frame_depth": 3,
    })
}

/// Runs the page agent in the sandbox realm of `context`'s document.
pub(super) async fn agent(
    bidi: &Bidi,
    context: &str,
    mut request: Value,
) -> Result<Value, ErrorBody> {
    request["limits"] = limits();
    let expression = format!("({PAGE_JS})({request})");
    let result = bidi
        .command(
            "script.evaluate",
            json!({
                "expression": expression,
                "target": {"context": context, "sandbox": "sandtop"},
                "awaitPromise": false,
                "resultOwnership": "none",
            }),
            COMMAND_WAIT,
        )
        .await
        .map_err(bidi_error)?;
    if result.get("type").and_then(Value::as_str) != Some("success") {
        return Err(ErrorBody::new(
            ErrorCode::BrowserFailed,
            "the page agent failed in this document",
        ));
    }
    let text = result
        .pointer("/result/value")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ErrorBody::new(ErrorCode::BrowserFailed, "the page agent answered no text")
        })?;
    serde_json::from_str(text)
        .map_err(|_| ErrorBody::new(ErrorCode::BrowserFailed, "the page agent answered bad JSON"))
}

/// The top-level browsing contexts (tabs), in the browser's order.
pub(super) async fn contexts(bidi: &Bidi) -> Result<Vec<(String, String)>, ErrorBody> {
    let tree = bidi
        .command(
            "browsingContext.getTree",
            json!({"maxDepth": 0}),
            COMMAND_WAIT,
        )
        .await
        .map_err(bidi_error)?;
    let list = tree
        .get("contexts")
        .and_then(Value::as_array)
        .ok_or_else(|| ErrorBody::new(ErrorCode::BrowserFailed, "the browser sent no tab list"))?;
    Ok(list
        .iter()
        .filter_map(|c| {
            Some((
                c.get("context")?.as_str()?.to_string(),
                c.get("url")?.as_str()?.to_string(),
            ))
        })
        .collect())
}

/// Every tab with its title and whether it is the one shown.
pub async fn state(bidi: &Bidi) -> Result<BrowserState, ErrorBody> {
    let mut tabs = Vec::new();
    for (id, url) in contexts(bidi).await? {
        let (title, truncated, visible) = match agent(bidi, &id, json!({"op": "tab"})).await {
            Ok(v) => (
                v["title"].as_str().unwrap_or_default().to_string(),
                v["title_truncated"].as_bool().unwrap_or(false),
                v["visible"].as_bool().unwrap_or(false),
            ),
            // A document the agent cannot run in (a privileged page): no
            // title, and it is not known to be the shown one.
            Err(e) if e.code == ErrorCode::BrowserFailed => (String::new(), false, false),
            Err(e) => return Err(e),
        };
        tabs.push((
            BrowserTab {
                id,
                title,
                url: cap_url(url),
                active: false,
                title_truncated: truncated,
            },
            visible,
        ));
    }
    // Exactly one active tab: the shown one (the first shown, should a
    // window manager show two), else the last.
    let active = tabs
        .iter()
        .position(|(_, v)| *v)
        .or(tabs.len().checked_sub(1));
    Ok(BrowserState {
        tabs: tabs
            .into_iter()
            .enumerate()
            .map(|(i, (mut t, _))| {
                t.active = Some(i) == active;
                t
            })
            .collect(),
    })
}

fn cap_url(mut url: String) -> String {
    if url.len() > wire::MAX_URL_BYTES {
        let mut end = wire::MAX_URL_BYTES;
        while !url.is_char_boundary(end) {
            end -= 1;
        }
        url.truncate(end);
    }
    url
}

/// The context a call acts on: the named tab, which must exist, or the
/// active one.
pub(super) async fn target_tab(bidi: &Bidi, tab_id: Option<&str>) -> Result<String, ErrorBody> {
    match tab_id {
        Some(id) => {
            if contexts(bidi).await?.iter().any(|(c, _)| c == id) {
                Ok(id.to_string())
            } else {
                Err(ErrorBody::new(
                    ErrorCode::NoSuchTab,
                    "no open tab has this id",
                ))
            }
        }
        None => {
            let s = state(bidi).await?;
            s.tabs
                .into_iter()
                .find(|t| t.active)
                .map(|t| t.id)
                .ok_or_else(|| ErrorBody::new(ErrorCode::NoSuchTab, "the browser has no tab open"))
        }
    }
}

/// Input goes to the shown tab: show the target first.
pub(super) async fn activate(bidi: &Bidi, context: &str) -> Result<(), ErrorBody> {
    bidi.command(
        "browsingContext.activate",
        json!({"context": context}),
        COMMAND_WAIT,
    )
    .await
    .map_err(bidi_error)?;
    Ok(())
}
