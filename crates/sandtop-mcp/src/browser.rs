//! `browser_<member>`: one browser call, in the order of the loop's
//! (agent/runner/browser_calls.rs), with the toolset's own rules
//! ([`sandtop_agent::browser::toolset`]):
//!
//! 1. a member that is not enabled is refused before anything is read;
//! 2. the state before is read (tabs as origins only);
//! 3. the arguments are checked exactly, and a URL against `--url-policy`
//!    by exact origin, before anyone is asked;
//! 4. a state-changing member (every member with `--confirm all`) runs
//!    only after approval ([`super::approval`]), the question showing the
//!    call, the target's role and label from the last read, and the tab's
//!    origin and title;
//! 5. the ledger's `pending`, the call (the ref resolved in the tab's
//!    current document by the daemon), the result validated for its
//!    member and the state after it.
//!
//! Failures are told from the daemon's code only ([`tools::error_text`]).

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use sandtop_protocol::{BrowserOutcome, ErrorCode};
use serde_json::{Value, json};

use super::approval::{self, Question, Verdict};
use super::{Confirm, Server, State};
use sandtop_agent::browser::toolset::{self as tools, Toolset};
use sandtop_channel::ChannelError;
use sandtop_runfolder::trajectory::LedgerState;

/// The structured result `{ok, state, result | error}` and, for
/// screenshot and zoom, the image.
fn answer(
    state: Option<Value>,
    result: Result<Value, String>,
    image: Option<&sandtop_protocol::browser::BrowserImage>,
) -> CallToolResult {
    let ok = result.is_ok();
    let mut v = json!({"ok": ok});
    if let Some(s) = state {
        v["state"] = s;
    }
    match result {
        Ok(r) => v["result"] = r,
        Err(e) => v["error"] = json!(e),
    }
    let mut r = if ok {
        CallToolResult::structured(v)
    } else {
        CallToolResult::structured_error(v)
    };
    if let Some(img) = image {
        r.content
            .push(ContentBlock::image(img.png_base64.clone(), "image/png"));
    }
    r
}

impl Server {
    pub(super) async fn browser(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, String> {
        let Some(toolset) = self.cfg.browser.as_ref() else {
            return Ok(answer(None, Err(tools::DISABLED.into()), None).into());
        };
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        // 1. Not enabled: refused before anything is read or asked.
        let Some(member) = toolset.enabled(&name) else {
            return Ok(answer(None, Err(tools::DISABLED.into()), None).into());
        };
        let mut st = self.state.lock().await;
        let State {
            guests,
            journal,
            last_read,
        } = &mut *st;
        let g = guests.resolve(None).await?;
        let session = g.rec.name.clone();
        // `host-cli view`'s buttons, when the client cannot ask.
        let view = g.control.clone().map(|c| (c, g.dir.path.clone()));
        let ch = g.channel().await.map_err(crate::said)?;
        // 2. The state before.
        let before = match ch.browser_state().await {
            Ok(s) => tools::project_state(&s)?,
            Err(ChannelError::Daemon { body, .. }) => {
                return Err(match body.code {
                    ErrorCode::BrowserUnavailable => {
                        "the guest's browser driver is not available".to_string()
                    }
                    c => tools::error_text(c).to_string(),
                });
            }
            Err(e) => {
                g.channel = None;
                return Err(format!("reading the browser's state: {e}"));
            }
        };
        let (step, call_id) = journal
            .begin(json!({
                "type": "function_call",
                "name": name,
                "arguments": args.to_string(),
            }))
            .map_err(crate::said)?;
        // 3. The arguments, and a URL against the policy, before any question.
        let prepared = match toolset.prepare(&name, &args.to_string()) {
            Ok(p) => p,
            Err(e) => {
                let code = if e == tools::NAVIGATION_REFUSED {
                    ErrorCode::Forbidden
                } else {
                    ErrorCode::InvalidAction
                };
                journal
                    .refused(step, &call_id, None, code, &e)
                    .map_err(crate::said)?;
                return Ok(answer(Some(before), Err(e), None).into());
            }
        };
        if prepared.file.is_some() {
            return Ok(answer(Some(before), Err(tools::DISABLED.into()), None).into());
        }
        // 4. Approval.
        let changes = Toolset::needs_approval(member);
        if changes || self.cfg.confirm == Confirm::All {
            let q = Question {
                session: &session,
                member: Some(member),
                description: tools::prompt(&prepared, &before, last_read.as_ref()),
                view: view.as_ref().map(|(c, p)| (c, p.as_path())),
            };
            let verdict = approval::ask(
                ctx,
                request,
                &args,
                &self.pending,
                self.cfg.policy.as_ref(),
                &q,
            )
            .await;
            match verdict {
                Verdict::Approved { by } => journal
                    .approval(step, &call_id, Some(member), Ok(()), by)
                    .map_err(crate::said)?,
                Verdict::Refused { why, by } => {
                    journal
                        .approval(step, &call_id, Some(member), Err(&why), by)
                        .map_err(crate::said)?;
                    let text = if changes {
                        format!("{} ({why})", tools::ACTION_REFUSED)
                    } else {
                        format!("{} ({why})", tools::READ_REFUSED)
                    };
                    return Ok(answer(Some(before), Err(text), None).into());
                }
                Verdict::Ask(r) => return Ok(CallToolResponse::InputRequired(r)),
            }
        }
        // 5. The call. list_tabs is the state itself.
        let Some(call) = prepared.call else {
            return Ok(answer(Some(before), Ok(Value::Null), None).into());
        };
        if changes {
            journal
                .ledger(
                    step,
                    &call_id,
                    LedgerState::Pending,
                    json!({"browser_member": member}),
                )
                .map_err(crate::said)?;
        }
        // The URL policy goes with the call: the daemon checks it in the
        // document the call acts on (docs/security.md L17).
        let sent = toolset.request(call.clone());
        let r = tokio::select! {
            r = ch.browser_request(&sent) => r,
            () = ctx.ct.cancelled() => Err(ChannelError::Http("the call was cancelled by the client".into())),
            () = super::computer::progress(ctx, "the browser call is running") => unreachable!("progress never ends"),
        };
        let (result, after, image) = match r {
            Ok(reply) => {
                let after = tools::project_state(&reply.state)?;
                let result = tools::result_of(member, &reply.outcome);
                let image = match &reply.outcome {
                    BrowserOutcome::Image(i) if result.is_ok() => Some(i.clone()),
                    _ => None,
                };
                (result, Some(after), image)
            }
            Err(ChannelError::Daemon { body, .. }) if body.code != ErrorCode::Timeout => {
                if changes {
                    journal
                        .ledger(step, &call_id, LedgerState::Failed, json!({"error": body}))
                        .map_err(crate::said)?;
                }
                let after = ch
                    .browser_state()
                    .await
                    .ok()
                    .and_then(|s| tools::project_state(&s).ok());
                let out = answer(after, Err(tools::error_text(body.code).into()), None);
                return Ok(out.into());
            }
            Err(e) => {
                let state = if changes {
                    LedgerState::Unknown
                } else {
                    LedgerState::Failed
                };
                if changes {
                    journal
                        .ledger(step, &call_id, state, json!({"error": e.to_string()}))
                        .map_err(crate::said)?;
                }
                g.channel = None;
                return Ok(answer(
                    None,
                    Err(format!(
                        "Browser call failed: {e}; its outcome is recorded as {state:?}."
                    )),
                    None,
                )
                .into());
            }
        };
        let ok = result.is_ok();
        if changes {
            journal
                .ledger(
                    step,
                    &call_id,
                    if ok {
                        LedgerState::Done
                    } else {
                        LedgerState::Failed
                    },
                    json!({"browser_member": member}),
                )
                .map_err(crate::said)?;
        }
        if ok && matches!(member, "read_page" | "find") {
            *last_read = result.as_ref().ok().cloned();
        }
        journal
            .output(
                step,
                tools::output(&call_id, after.clone(), result.clone(), None),
            )
            .map_err(crate::said)?;
        Ok(answer(after, result, image.as_ref()).into())
    }
}
