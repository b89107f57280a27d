//! Each browser member, carried out with BiDi commands and the page agent.
//!
//! Targets are bound at execution: every member that names a ref asks the
//! page agent to resolve it in the tab's *current* document, where a ref of
//! another document, tab or load, or of an element that was removed or
//! hidden, resolves to nothing (`stale_target`) and nothing is done.
//! Pointer and key input go through BiDi's input module (trusted events at
//! viewport coordinates), never through page scripts; the only DOM write
//! is `select_option`'s, which sets the options and fires `input` and
//! `change` as a user's choice would.

use std::time::{Duration, Instant};

use base64::Engine as _;
use sandtop_protocol::browser::{
    self as wire, BrowserImage, BrowserOutcome, BrowserRead, ReadFilter, ScrollDirection,
};
use sandtop_protocol::{BrowserCall, ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::act::{locate_in, perform, viewport};
use super::bidi::Bidi;
use super::bidi_error;
use super::context::{COMMAND_WAIT, NAVIGATE_WAIT, activate, agent, contexts, target_tab};
use super::keys::{key_values, typed_keys};
use super::policy::element_error;
use super::policy::{Policy, Scope};

/// Shows the tab, resolves `target` for pointer input (attached, visible,
/// not covered, its document in the policy), moves the mouse to it, then
/// performs `then` there.
async fn pointer_at(
    bidi: &Bidi,
    tab_id: Option<&str>,
    target: &str,
    then: &[Value],
    policy: Policy<'_>,
) -> Result<(), ErrorBody> {
    let ctx = target_tab(bidi, tab_id).await?;
    activate(bidi, &ctx).await?;
    let (x, y) = locate_in(bidi, &ctx, target, "pointer", policy).await?;
    let mut steps = vec![json!({"type": "pointerMove", "x": x, "y": y, "origin": "viewport"})];
    steps.extend_from_slice(then);
    perform(
        bidi,
        &ctx,
        json!([{"type": "pointer", "id": "sandtop-mouse", "parameters": {"pointerType": "mouse"}, "actions": steps}]),
    )
    .await
}

/// The document's scroll position.
async fn scroll_position(bidi: &Bidi, context: &str) -> Result<Value, ErrorBody> {
    Ok(agent(bidi, context, json!({"op": "tab"})).await?["scroll"].clone())
}

/// After a wheel: wait until the scroll position moved and held still for
/// two reads in a row (smooth scrolling), at most `SCROLL_SETTLE`.
async fn settle_scroll(bidi: &Bidi, context: &str, before: Value) -> Result<(), ErrorBody> {
    const SCROLL_SETTLE: Duration = Duration::from_millis(1_500);
    let end = Instant::now() + SCROLL_SETTLE;
    let mut last = before.clone();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let now = scroll_position(bidi, context).await?;
        if now != before && now == last {
            break;
        }
        last = now;
    }
    Ok(())
}

async fn capture(
    bidi: &Bidi,
    context: &str,
    clip: Option<[u64; 4]>,
) -> Result<BrowserImage, ErrorBody> {
    let mut params =
        json!({"context": context, "origin": "viewport", "format": {"type": "image/png"}});
    if let Some([l, t, r, b]) = clip {
        params["clip"] = json!({"type": "box", "x": l, "y": t, "width": r - l, "height": b - t});
    }
    let v = bidi
        .command("browsingContext.captureScreenshot", params, COMMAND_WAIT)
        .await
        .map_err(bidi_error)?;
    let data = v
        .get("data")
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorBody::new(ErrorCode::BrowserFailed, "the browser sent no image"))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| ErrorBody::new(ErrorCode::BrowserFailed, "the browser sent bad base64"))?;
    // The PNG signature and IHDR: width and height at bytes 16..24.
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return Err(ErrorBody::new(
            ErrorCode::BrowserFailed,
            "the browser sent no PNG",
        ));
    }
    let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let height = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    Ok(BrowserImage {
        png_base64: data.to_string(),
        width,
        height,
    })
}

fn check_url(url: &str) -> Result<(), ErrorBody> {
    let lower = url.to_ascii_lowercase();
    if url == "about:blank" || lower.starts_with("http://") || lower.starts_with("https://") {
        Ok(())
    } else {
        Err(ErrorBody::new(
            ErrorCode::InvalidAction,
            "`url`: only http, https and about:blank are opened",
        ))
    }
}

async fn navigate(bidi: &Bidi, context: &str, url: &str) -> Result<(), ErrorBody> {
    bidi.command(
        "browsingContext.navigate",
        json!({"context": context, "url": url, "wait": "complete"}),
        NAVIGATE_WAIT,
    )
    .await
    .map_err(|e| match e {
        super::bidi::BidiError::Command { .. } => {
            ErrorBody::new(ErrorCode::BrowserFailed, "the page could not be loaded")
        }
        e => bidi_error(e),
    })?;
    Ok(())
}

fn read_report(v: Value) -> Result<BrowserRead, ErrorBody> {
    let mut r: BrowserRead = serde_json::from_value(json!({
        "version": 1,
        "text": v.get("text").cloned().unwrap_or(json!("")),
        "elements": v.get("elements").cloned().unwrap_or(json!([])),
        "omitted": v.get("omitted").cloned().unwrap_or(json!([])),
        "scopes": v.get("scopes").cloned(),
    }))
    .map_err(|_| {
        ErrorBody::new(
            ErrorCode::BrowserFailed,
            "the page agent sent a malformed report",
        )
    })?;
    r.omitted.dedup();
    Ok(r)
}

/// Runs `source` in the page's own realm (no sandbox: page privileges),
/// awaiting a promise, for at most `timeout_ms`. Only a string result is
/// one; a timeout stops the local wait only (the script may go on), and
/// says so.
async fn run_script(
    bidi: &Bidi,
    context: &str,
    source: &str,
    timeout_ms: u32,
) -> Result<BrowserOutcome, ErrorBody> {
    let wait = Duration::from_millis(u64::from(timeout_ms));
    let r = bidi
        .command(
            "script.evaluate",
            json!({
                "expression": source,
                "target": {"context": context},
                "awaitPromise": true,
                "resultOwnership": "none",
            }),
            wait,
        )
        .await;
    let v = match r {
        Ok(v) => v,
        Err(super::bidi::BidiError::Timeout(_)) => {
            return Err(ErrorBody::new(
                ErrorCode::Timeout,
                format!(
                    "the local wait stopped after {timeout_ms} ms; the script may still be running and its outcome is unknown"
                ),
            ));
        }
        Err(e) => return Err(bidi_error(e)),
    };
    if v.get("type").and_then(Value::as_str) != Some("success") {
        return Err(ErrorBody::new(
            ErrorCode::BrowserFailed,
            "the script threw an exception",
        ));
    }
    let result = &v["result"];
    if result.get("type").and_then(Value::as_str) != Some("string") {
        return Err(ErrorBody::new(
            ErrorCode::InvalidAction,
            "the script's result is not a string",
        ));
    }
    let text = result.get("value").and_then(Value::as_str).unwrap_or("");
    let mut end = text.len().min(wire::MAX_SCRIPT_RESULT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Ok(BrowserOutcome::Text {
        text: text[..end].to_string(),
    })
}

/// Carries out one call; a state-changing member only on documents of
/// the host's URL policy (see `policy`).
pub async fn run(
    bidi: &Bidi,
    call: &BrowserCall,
    policy: Policy<'_>,
) -> Result<BrowserOutcome, ErrorBody> {
    match call {
        BrowserCall::Navigate { tab_id, url } => {
            check_url(url)?;
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            navigate(bidi, &ctx, url).await?;
            policy.check_landed(bidi, &ctx).await?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::ReadPage { tab_id, filter } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let mode = match filter {
                ReadFilter::All => "all",
                ReadFilter::Interactive => "interactive",
            };
            let v = agent(bidi, &ctx, json!({"op": "read", "mode": mode})).await?;
            Ok(BrowserOutcome::Read(read_report(v)?))
        }
        BrowserCall::ReadPageScoped {
            tab_id,
            root,
            depth,
            filter,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let mode = match filter {
                ReadFilter::All => "all",
                ReadFilter::Interactive => "interactive",
            };
            let v = agent(
                bidi,
                &ctx,
                json!({"op": "scoped", "root": root, "depth": depth, "mode": mode}),
            )
            .await?;
            element_error(&v)?;
            let mut r = read_report(v)?;
            r.scopes.get_or_insert_with(Vec::new);
            Ok(BrowserOutcome::Read(r))
        }
        BrowserCall::ReadDiagnostics {
            tab_id,
            source,
            limit,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let source = match source {
                wire::DiagnosticSource::Console => super::diagnostics::Source::Console,
                wire::DiagnosticSource::Network => super::diagnostics::Source::Network,
            };
            let lines = bidi
                .history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .lines(source, &ctx, usize::from(*limit));
            let mut text = lines.join("\n");
            let mut omitted = Vec::new();
            if text.len() > wire::MAX_READ_TEXT_BYTES {
                let mut end = wire::MAX_READ_TEXT_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                omitted.push(wire::Omission::TextLimit);
            }
            Ok(BrowserOutcome::Read(BrowserRead {
                version: 1,
                text,
                elements: Vec::new(),
                omitted,
                scopes: None,
            }))
        }
        BrowserCall::RunScript {
            tab_id,
            source,
            timeout_ms,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            policy.check(bidi, &ctx, Scope::Top).await?;
            run_script(bidi, &ctx, source, *timeout_ms).await
        }
        BrowserCall::GetPageText { tab_id } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let v = agent(bidi, &ctx, json!({"op": "read", "mode": "text"})).await?;
            let mut r = read_report(v)?;
            r.elements.clear();
            Ok(BrowserOutcome::Read(r))
        }
        BrowserCall::Find { tab_id, query } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            if wire::normalize_space(query).is_empty() {
                return Err(ErrorBody::new(ErrorCode::InvalidAction, "`query`: empty"));
            }
            let v = agent(
                bidi,
                &ctx,
                json!({"op": "read", "mode": "find", "query": query}),
            )
            .await?;
            Ok(BrowserOutcome::Read(read_report(v)?))
        }
        BrowserCall::Click { tab_id, target } => {
            pointer_at(
                bidi,
                tab_id.as_deref(),
                target,
                &[
                    json!({"type": "pointerDown", "button": 0}),
                    json!({"type": "pointerUp", "button": 0}),
                ],
                policy,
            )
            .await?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::Hover { tab_id, target } => {
            pointer_at(bidi, tab_id.as_deref(), target, &[], policy).await?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::ScrollTo { tab_id, target } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let v = agent(
                bidi,
                &ctx,
                json!({"op": "locate", "ref": target, "need": "scroll",
                       "policy": policy.value(), "expect": policy.expect_value()}),
            )
            .await?;
            element_error(&v)?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::Type {
            tab_id,
            text,
            target,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            activate(bidi, &ctx).await?;
            if let Some(target) = target {
                // Focus the field and select its content: typing replaces it.
                locate_in(bidi, &ctx, target, "editable", policy).await?;
            }
            let steps = typed_keys(text);
            for (i, chunk) in steps.chunks(2_000).enumerate() {
                // Each chunk goes only where the policy allows: into the
                // target, still focused (the first right after `locate`).
                if i > 0 || target.is_none() {
                    let scope = target.as_deref().map_or(Scope::Focus, Scope::Target);
                    policy.check(bidi, &ctx, scope).await?;
                }
                perform(
                    bidi,
                    &ctx,
                    json!([{"type": "key", "id": "sandtop-keyboard", "actions": chunk}]),
                )
                .await?;
            }
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::Key { tab_id, keys } => {
            let values = key_values(keys)?;
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            activate(bidi, &ctx).await?;
            policy.check(bidi, &ctx, Scope::Focus).await?;
            let mut steps: Vec<Value> = values
                .iter()
                .map(|v| json!({"type": "keyDown", "value": v}))
                .collect();
            steps.extend(
                values
                    .iter()
                    .rev()
                    .map(|v| json!({"type": "keyUp", "value": v})),
            );
            perform(
                bidi,
                &ctx,
                json!([{"type": "key", "id": "sandtop-keyboard", "actions": steps}]),
            )
            .await?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::Scroll {
            tab_id,
            direction,
            amount,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            activate(bidi, &ctx).await?;
            let (w, h) = viewport(bidi, &ctx).await?;
            let before = scroll_position(bidi, &ctx).await?;
            let a = *amount as i64;
            let (dx, dy) = match direction {
                ScrollDirection::Up => (0, -a),
                ScrollDirection::Down => (0, a),
                ScrollDirection::Left => (-a, 0),
                ScrollDirection::Right => (a, 0),
            };
            policy
                .check(bidi, &ctx, Scope::Points(&[[w / 2, h / 2]]))
                .await?;
            perform(
                bidi,
                &ctx,
                json!([{"type": "wheel", "id": "sandtop-wheel", "actions": [
                    {"type": "scroll", "x": w / 2, "y": h / 2, "deltaX": dx, "deltaY": dy, "origin": "viewport"}
                ]}]),
            )
            .await?;
            if *amount > 0 {
                settle_scroll(bidi, &ctx, before).await?;
            }
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::SelectOption {
            tab_id,
            target,
            values,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let v = agent(
                bidi,
                &ctx,
                json!({"op": "select", "ref": target, "values": values,
                       "policy": policy.value(), "expect": policy.expect_value()}),
            )
            .await?;
            element_error(&v)?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::Screenshot { tab_id } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            Ok(BrowserOutcome::Image(capture(bidi, &ctx, None).await?))
        }
        BrowserCall::Zoom { tab_id, region } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let (w, h) = viewport(bidi, &ctx).await?;
            if region[2] > w || region[3] > h {
                return Err(ErrorBody::new(
                    ErrorCode::OutOfBounds,
                    format!("`region`: the viewport is {w}x{h}; the region must lie inside it"),
                ));
            }
            Ok(BrowserOutcome::Image(
                capture(bidi, &ctx, Some(*region)).await?,
            ))
        }
        BrowserCall::NewTab { url } => {
            if let Some(u) = url {
                check_url(u)?;
            }
            if contexts(bidi).await?.len() >= wire::MAX_TABS {
                return Err(ErrorBody::new(
                    ErrorCode::LimitExceeded,
                    format!("at most {} tabs are open at once", wire::MAX_TABS),
                ));
            }
            let v = bidi
                .command(
                    "browsingContext.create",
                    json!({"type": "tab"}),
                    COMMAND_WAIT,
                )
                .await
                .map_err(bidi_error)?;
            let ctx = v
                .get("context")
                .and_then(Value::as_str)
                .ok_or_else(|| ErrorBody::new(ErrorCode::BrowserFailed, "the browser made no tab"))?
                .to_string();
            activate(bidi, &ctx).await?;
            if let Some(u) = url {
                navigate(bidi, &ctx, u).await?;
                policy.check_landed(bidi, &ctx).await?;
            }
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::SwitchTab { tab_id } => {
            let ctx = target_tab(bidi, Some(tab_id)).await?;
            activate(bidi, &ctx).await?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::CloseTab { tab_id } => {
            let all = contexts(bidi).await?;
            if !all.iter().any(|(c, _)| c == tab_id) {
                return Err(ErrorBody::new(
                    ErrorCode::NoSuchTab,
                    "no open tab has this id",
                ));
            }
            if all.len() == 1 {
                return Err(ErrorBody::new(
                    ErrorCode::NotActionable,
                    "the last tab stays open (open another first)",
                ));
            }
            bidi.command(
                "browsingContext.close",
                json!({"context": tab_id, "promptUnload": false}),
                COMMAND_WAIT,
            )
            .await
            .map_err(bidi_error)?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::WaitFor {
            tab_id,
            text,
            timeout_ms,
        } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let end = Instant::now() + Duration::from_millis(u64::from(*timeout_ms));
            loop {
                // A navigation in between makes one evaluation fail: retry.
                if let Ok(v) = agent(bidi, &ctx, json!({"op": "has_text", "text": text})).await
                    && v["found"].as_bool() == Some(true)
                {
                    return Ok(BrowserOutcome::Text {
                        text: "The text is on the page.".into(),
                    });
                }
                if Instant::now() >= end {
                    return Err(ErrorBody::new(
                        ErrorCode::WaitTimedOut,
                        "the text did not appear within the timeout",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        BrowserCall::DescribeTarget { tab_id, target } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let v = agent(bidi, &ctx, json!({"op": "describe", "ref": target})).await?;
            element_error(&v)?;
            Ok(BrowserOutcome::Read(read_report(v)?))
        }
        BrowserCall::DescribePage { tab_id } => {
            let ctx = target_tab(bidi, tab_id.as_deref()).await?;
            let v = agent(bidi, &ctx, json!({"op": "page"})).await?;
            let (Some(document), Some(focus)) = (v["document"].as_str(), v["focus"].as_str())
            else {
                return Err(ErrorBody::new(
                    ErrorCode::BrowserFailed,
                    "the page agent sent a malformed report",
                ));
            };
            Ok(BrowserOutcome::Page(wire::PageIdentity {
                tab_id: ctx,
                document: document.to_string(),
                focus: focus.to_string(),
            }))
        }
        BrowserCall::ClickAt { .. }
        | BrowserCall::DragPath { .. }
        | BrowserCall::HoverAt { .. }
        | BrowserCall::HoldKeys { .. }
        | BrowserCall::SetChecked { .. } => super::pointer::run(bidi, call, policy).await,
        BrowserCall::SignInCheck { .. } | BrowserCall::SignInFill { .. } => {
            super::sign_in::run(bidi, call).await
        }
        BrowserCall::SetFile { .. }
        | BrowserCall::TakeDownload {}
        | BrowserCall::RemoveDownload { .. } => Err(ErrorBody::new(
            ErrorCode::InvalidAction,
            "file calls run with the browser's profile",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_web_urls_are_opened() {
        assert!(check_url("https://example.com/x").is_ok());
        assert!(check_url("HTTP://example.com").is_ok());
        assert!(check_url("about:blank").is_ok());
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "data:text/html,x",
            "about:config",
        ] {
            assert_eq!(
                check_url(bad).unwrap_err().code,
                ErrorCode::InvalidAction,
                "{bad}"
            );
        }
    }
}
