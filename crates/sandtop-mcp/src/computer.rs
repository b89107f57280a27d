//! The guest tools, `computer` and `screenshot`.
//!
//! `computer` runs the batch as the loop runs a computer call: strict
//! arguments (a field no tool defines is refused by name), then
//! [`preflight::check_call`] on every action against the ScaleMap of the
//! asked size before anything runs (unknown action fields by name, limits,
//! bounds, key names), then approval for a batch that types or presses
//! keys, then the ledger's `pending`, then one `BatchRequest` with the map
//! it was checked against (`expect_scale_map`: a screen that changed size
//! meanwhile runs nothing). What the model reads of a failure comes from
//! the daemon's code, never its message (the guest's text). A cancelled
//! call (`notifications/cancelled`) drops the request, and the daemon
//! releases every key and button it held.

use base64::Engine as _;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use sandtop_protocol::{
    Action, BatchRequest, ErrorCode, Fit, ScaleMap, Screenshot, ScreenshotOptions, Size,
};
use serde_json::{Map, Value, json};

use super::approval::{self, Question, Verdict};
use super::guests::network_within;
use super::{Confirm, Server, State};
use sandtop_agent::computer::preflight;
use sandtop_channel::{ChannelError, check_screenshot, code_meaning};
use sandtop_runfolder::trajectory::LedgerState;

/// The arguments as an object with only these fields; an unknown one is
/// refused by name.
pub fn fields<'a>(args: &'a Value, allowed: &[&str]) -> Result<&'a Map<String, Value>, String> {
    let obj = args.as_object().ok_or("the arguments must be an object")?;
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "unknown field `{}`, expected one of: {}",
            sandtop_hostkit::term::safe_line(k)
                .chars()
                .take(64)
                .collect::<String>(),
            allowed.join(", ")
        ));
    }
    Ok(obj)
}

fn opt_str<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

/// `size`: `{width, height}`, each 1..=8192.
pub fn opt_size(obj: &Map<String, Value>) -> Result<Option<Size>, String> {
    let Some(v) = obj.get("size").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let o = fields(v, &["width", "height"]).map_err(|e| format!("size: {e}"))?;
    let side = |k: &str| -> Result<u32, String> {
        o.get(k)
            .and_then(Value::as_u64)
            .filter(|n| (1..=8192).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| format!("size: `{k}` must be an integer from 1 to 8192"))
    };
    Ok(Some(Size::new(side("width")?, side("height")?)))
}

/// Whether a batch needs the person's approval under `confirm`.
pub fn needs_approval(actions: &[Action], confirm: Confirm) -> bool {
    confirm == Confirm::All
        || actions
            .iter()
            .any(|a| matches!(a, Action::Type { .. }) || !a.key_names().is_empty())
}

/// The batch as the person sees it: one inert line per action.
pub fn describe(actions: &[Action]) -> String {
    actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                "  {i}: {}",
                sandtop_hostkit::term::safe_line(
                    &serde_json::to_string(a).unwrap_or_else(|_| a.kind().to_string())
                )
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A result with structured content, a text copy of it, and an image.
fn with_image(v: Value, shot: Option<&Screenshot>, error: bool) -> CallToolResult {
    let mut r = if error {
        CallToolResult::structured_error(v)
    } else {
        CallToolResult::structured(v)
    };
    if let Some(s) = shot {
        r.content
            .push(ContentBlock::image(s.data.clone(), s.format.mime()));
    }
    r
}

/// The structured failure of a `computer` call.
fn failure(executed: usize, code: &str, message: &str, index: Option<usize>) -> Value {
    json!({
        "ok": false,
        "executed": executed,
        "error": {"code": code, "message": message, "index": index},
    })
}

fn code_name(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "error".into())
}

impl Server {
    pub(super) async fn guest_start(&self, args: &Value) -> Result<CallToolResult, String> {
        let obj = fields(args, &["name", "screen", "network"])?;
        let name = opt_str(obj, "name")?.map(str::to_string);
        let screen = match opt_str(obj, "screen")? {
            Some(s) => Size::parse(s).map_err(|e| format!("screen: {e}"))?,
            None => Size::new(1280, 800),
        };
        let network = network_within(opt_str(obj, "network")?, &self.cfg.network)?;
        let mut st = self.state.lock().await;
        let row = st
            .guests
            .start(
                (self.cfg.backend, &self.cfg.guest, self.cfg.pool),
                name,
                screen,
                network,
            )
            .await
            .map_err(|e| format!("starting a guest: {}", crate::said(e)))?;
        Ok(CallToolResult::structured(row))
    }

    pub(super) async fn guest_stop(&self, args: &Value) -> Result<CallToolResult, String> {
        let obj = fields(args, &["name"])?;
        let name = opt_str(obj, "name")?.ok_or("`name` is required")?;
        let mut st = self.state.lock().await;
        st.guests.stop(name).await?;
        Ok(CallToolResult::structured(
            json!({"name": name, "stopped": true}),
        ))
    }

    pub(super) async fn guest_list(&self, args: &Value) -> Result<CallToolResult, String> {
        fields(args, &[])?;
        let st = self.state.lock().await;
        let rows = st.guests.list().await.map_err(crate::said)?;
        Ok(CallToolResult::structured(json!({"guests": rows})))
    }

    pub(super) async fn screenshot(&self, args: &Value) -> Result<CallToolResult, String> {
        let obj = fields(args, &["session", "size"])?;
        let size = opt_size(obj)?;
        let mut st = self.state.lock().await;
        let State {
            guests, journal, ..
        } = &mut *st;
        let g = guests.resolve(opt_str(obj, "session")?).await?;
        let session = g.rec.name.clone();
        let ch = g.channel().await.map_err(crate::said)?;
        let options = ScreenshotOptions {
            size,
            fit: Fit::Contain,
            ..ScreenshotOptions::default()
        };
        let shot = match ch.screenshot(&options).await {
            Ok(s) => s.screenshot,
            Err(e) => {
                g.channel = None;
                return Err(format!("the screenshot failed: {e}"));
            }
        };
        let png = check_screenshot(&shot).map_err(|e| e.to_string())?;
        let step = journal.step();
        journal
            .observation(step, None, &png, shot.scale_map)
            .map_err(crate::said)?;
        Ok(with_image(
            json!({"session": session, "width": shot.width, "height": shot.height}),
            Some(&shot),
            false,
        ))
    }

    pub(super) async fn computer(
        &self,
        request: &CallToolRequestParams,
        args: &Value,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, String> {
        let obj = match fields(args, &["session", "actions", "size"]) {
            Ok(o) => o,
            Err(e) => {
                return Ok(with_image(failure(0, "invalid_action", &e, None), None, true).into());
            }
        };
        let raw: Vec<Value> = match obj.get("actions") {
            Some(Value::Array(a)) if !a.is_empty() => a.clone(),
            Some(Value::Array(_)) => {
                return Ok(refused_batch("no actions given", None));
            }
            _ => return Ok(refused_batch("`actions` must be an array of actions", None)),
        };
        let size = match opt_size(obj) {
            Ok(s) => s,
            Err(e) => return Ok(refused_batch(&e, None)),
        };
        let session_arg = opt_str(obj, "session")?;
        let mut st = self.state.lock().await;
        let State {
            guests, journal, ..
        } = &mut *st;
        let g = guests.resolve(session_arg).await?;
        let session = g.rec.name.clone();
        // `host-cli view`'s buttons, when the client cannot ask.
        let view = g.control.clone().map(|c| (c, g.dir.path.clone()));
        let ch = g.channel().await.map_err(crate::said)?;
        let screen = ch
            .info()
            .display
            .ok_or("the guest reported no screen size")?;
        let map = ScaleMap::fit(screen, None, size, Fit::Contain).map_err(|e| e.to_string())?;
        let (step, call_id) = journal
            .begin(json!({"type": "computer_call", "actions": raw, "pending_safety_checks": []}))
            .map_err(crate::said)?;
        let actions = match preflight::check_call(&call_id, &raw, Some(&map)) {
            Ok(a) => a,
            Err(r) => {
                journal
                    .refused(step, &call_id, r.index, r.code, &r.reason)
                    .map_err(crate::said)?;
                let message = match r.index {
                    Some(i) => format!("{} in action {i}; nothing ran", r.reason),
                    None => format!("{}; nothing ran", r.reason),
                };
                return Ok(with_image(
                    failure(0, &code_name(r.code), &message, r.index),
                    None,
                    true,
                )
                .into());
            }
        };
        if needs_approval(&actions, self.cfg.confirm) {
            let q = Question {
                session: &session,
                member: None,
                description: describe(&actions),
                view: view.as_ref().map(|(c, p)| (c, p.as_path())),
            };
            let verdict = approval::ask(
                ctx,
                request,
                args,
                &self.pending,
                self.cfg.policy.as_ref(),
                &q,
            )
            .await;
            match verdict {
                Verdict::Approved { by } => journal.approval(step, &call_id, None, Ok(()), by),
                Verdict::Refused { why, by } => {
                    journal
                        .approval(step, &call_id, None, Err(&why), by)
                        .map_err(crate::said)?;
                    return Ok(
                        with_image(failure(0, "not_approved", &why, None), None, true).into(),
                    );
                }
                Verdict::Ask(r) => return Ok(CallToolResponse::InputRequired(r)),
            }
            .map_err(crate::said)?;
        }
        journal
            .ledger(
                step,
                &call_id,
                LedgerState::Pending,
                json!({"actions": actions.len()}),
            )
            .map_err(crate::said)?;
        let mut req = BatchRequest::new(
            actions,
            ScreenshotOptions {
                size,
                fit: Fit::Contain,
                ..ScreenshotOptions::default()
            },
        );
        req.expect_scale_map = Some(map);
        let r = tokio::select! {
            r = ch.act(&req) => r,
            () = ctx.ct.cancelled() => Err(ChannelError::Http("the call was cancelled by the client".into())),
            () = progress(ctx, "the batch is running") => unreachable!("progress never ends"),
        };
        match r {
            Ok(reply) => {
                let shot = reply
                    .screenshot
                    .ok_or("the daemon sent no final screenshot")?;
                let png = check_screenshot(&shot).map_err(|e| e.to_string())?;
                journal
                    .ledger(
                        step,
                        &call_id,
                        LedgerState::Done,
                        json!({"executed": reply.executed, "daemon_timings": reply.timings}),
                    )
                    .map_err(crate::said)?;
                journal
                    .observation(step, Some(&call_id), &png, shot.scale_map)
                    .map_err(crate::said)?;
                Ok(with_image(
                    json!({
                        "ok": true,
                        "executed": reply.executed,
                        "screenshot": {"width": shot.width, "height": shot.height},
                        "session": session,
                    }),
                    Some(&shot),
                    false,
                )
                .into())
            }
            Err(ChannelError::Daemon { body, .. }) => {
                journal
                    .ledger(step, &call_id, LedgerState::Failed, json!({"error": body}))
                    .map_err(crate::said)?;
                let executed = body.executed.unwrap_or(0);
                // The screen after it, as the model needs to see it.
                let after = ch
                    .screenshot(&ScreenshotOptions {
                        size,
                        fit: Fit::Contain,
                        ..ScreenshotOptions::default()
                    })
                    .await
                    .ok()
                    .map(|s| s.screenshot);
                let message = code_meaning(body.code);
                Ok(with_image(
                    failure(executed, &code_name(body.code), message, body.index),
                    after.as_ref(),
                    true,
                )
                .into())
            }
            Err(e) => {
                let state = if e.outcome_unknown() {
                    LedgerState::Unknown
                } else {
                    LedgerState::Failed
                };
                journal
                    .ledger(step, &call_id, state, json!({"error": e.to_string()}))
                    .map_err(crate::said)?;
                // The connection's state is unknown: a new one next time.
                g.channel = None;
                Ok(with_image(
                    failure(
                        0,
                        "unknown",
                        &format!("{e}; the outcome is {state:?}"),
                        None,
                    ),
                    None,
                    true,
                )
                .into())
            }
        }
    }
}

/// While a call runs: a progress notification every second, when the
/// client asked for them (a `progressToken` in the request's `_meta`).
/// Never ends.
pub async fn progress(ctx: &RequestContext<RoleServer>, what: &str) {
    let Some(token) = ctx.meta.get_progress_token() else {
        return std::future::pending().await;
    };
    let mut n = 0u32;
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        n += 1;
        let p = rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(n))
            .with_message(format!("{what} ({n} s)"));
        // A client that went away gets no more; the call ends on its own.
        let _ = ctx.peer.notify_progress(p).await;
    }
}

fn refused_batch(why: &str, index: Option<usize>) -> CallToolResponse {
    with_image(
        failure(0, "invalid_action", &format!("{why}; nothing ran"), index),
        None,
        true,
    )
    .into()
}

/// Decodes a tool result's image (for tests and the benchmark).
pub fn image_bytes(r: &CallToolResult) -> Option<Vec<u8>> {
    r.content.iter().find_map(|c| {
        let i = c.as_image()?;
        base64::engine::general_purpose::STANDARD
            .decode(&i.data)
            .ok()
    })
}
