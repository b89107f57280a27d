//! `request_sign_in`: sign-in out of band (docs/contract.md, `host-cli
//! mcp`), with the loop's rules ([`sandtop_agent::sign_in::rules`]) and the
//! daemon's two calls:
//!
//! 1. the arguments are checked exactly (`parse_request`): every field
//!    names a page input by the ref the browser tools gave;
//! 2. the origin must be inside `--url-policy` (when there is one) and be
//!    the active tab's origin, read now;
//! 3. the daemon checks every target (`sign_in_check`: the document that
//!    holds it was loaded from the credential origin, and it is an input
//!    of the field's kind) before anyone is asked;
//! 4. the person answers on a one-time loopback page
//!    ([`super::sign_in_page`]) that the client opens by **URL-mode
//!    elicitation** (2025-11-25: an `elicitation/create` request during
//!    the call; 2026-07-28: an `input_required` round, the page kept
//!    until the client's next call, 10 minutes at most). Form mode is
//!    never used: the values would pass through the client. Without URL
//!    elicitation, an entry of `--credentials FILE` for the exact origin;
//!    otherwise the call is refused, saying how to allow it (stdio owns
//!    the terminal: nobody can be asked there);
//! 5. the values go in by the daemon's `sign_in_fill`, which checks
//!    everything again and types each value into its bound input with the
//!    browser's own key input, never X11 keystrokes (docs/security.md
//!    L14);
//! 6. the client gets `submitted` (with the option chosen), `declined` or
//!    `cancelled`, and nothing else; the run folder gets the request's
//!    shape and the outcome. No value is in any MCP message, log line,
//!    trajectory entry or image sent back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, InputRequest, InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use sandtop_protocol::sign_in::{SignInTarget, SignInValue};
use sandtop_protocol::{BrowserCall, ErrorCode};
use serde_json::{Value, json};

use super::sign_in_page::{self, Page, PageAnswer};
use super::{Server, State};
use sandtop_agent::browser::toolset::{state_url, url_origin};
use sandtop_agent::sign_in::rules::{self as rules, Answer, Request, Status};
use sandtop_channel::ChannelError;

/// The tool's name (the loop's).
pub const TOOL: &str = rules::TOOL;
/// The key of our question in `inputRequests` / `inputResponses`.
pub const INPUT_KEY: &str = "sandtop_sign_in";
/// How long the page waits for the person.
const WAIT_FOR: Duration = Duration::from_secs(600);
/// Sign-ins waiting for their `input_required` answer at once.
const WAITING_MAX: usize = 4;

/// The refusal when nobody can answer.
pub const NO_ONE: &str = "request_sign_in refused: nobody can type the values. The MCP client \
declares no URL-mode elicitation (how Sandtop opens its one-time sign-in page for the person), \
and `host-cli mcp` has no --credentials FILE entry for this origin; it cannot ask on a terminal \
(stdio carries the protocol). Use a client that supports URL elicitation, or start the server \
with `host-cli mcp --credentials FILE` (JSON keyed by exact origin, mode 0600). Never ask the \
user for credentials in the conversation.";

/// The tool's output schema.
pub fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {"enum": ["submitted", "declined", "cancelled"]},
            "selected_option": {"type": "string"},
        },
        "required": ["status"],
    })
}

/// A sign-in whose page is up, waiting for the client's next call
/// (2026-07-28).
#[derive(Debug)]
pub struct Waiting {
    arguments: Value,
    step: u32,
    call_id: String,
    request: Request,
    tab_id: String,
    page: Page,
    at: Instant,
}

/// The sign-ins of `input_required` rounds, by `requestState`.
#[derive(Debug, Default)]
pub struct Waits {
    by_state: BTreeMap<String, Waiting>,
}

impl Waits {
    fn insert(&mut self, w: Waiting) -> anyhow::Result<String> {
        let now = Instant::now();
        self.by_state
            .retain(|_, w| now.duration_since(w.at) < WAIT_FOR);
        while self.by_state.len() >= WAITING_MAX {
            let oldest = self
                .by_state
                .iter()
                .min_by_key(|(_, w)| w.at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.by_state.remove(&k),
                None => break,
            };
        }
        let state = sandtop_view::auth::random_hex()?;
        self.by_state.insert(state.clone(), w);
        Ok(state)
    }

    fn take(&mut self, state: &str, arguments: &Value) -> Result<Waiting, &'static str> {
        let w = self
            .by_state
            .remove(state)
            .ok_or("the sign-in round is unknown, used or expired; call request_sign_in again")?;
        if w.at.elapsed() >= WAIT_FOR {
            return Err("the sign-in round expired; call request_sign_in again");
        }
        if w.arguments != *arguments {
            return Err("the call changed since the person was asked; nothing was typed");
        }
        Ok(w)
    }
}

/// How a request ended.
struct Ended {
    status: &'static str,
    source: Option<&'static str>,
    option: Option<String>,
    why: Option<String>,
}

impl Ended {
    fn refused(why: impl Into<String>) -> Ended {
        Ended {
            status: "refused",
            source: None,
            option: None,
            why: Some(why.into()),
        }
    }

    fn answered(status: Status, source: Option<&'static str>, why: Option<String>) -> Ended {
        Ended {
            status: status.as_str(),
            source,
            option: None,
            why,
        }
    }
}

/// What the client gets.
fn result(e: &Ended) -> CallToolResult {
    if e.status == "refused" {
        let why = e.why.as_deref().unwrap_or("refused");
        let text = if why.starts_with("request_sign_in refused") {
            why.to_string()
        } else {
            format!("request_sign_in refused: {why}")
        };
        return CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)]);
    }
    let status = match e.status {
        "submitted" => Status::Submitted,
        "cancelled" => Status::Cancelled,
        _ => Status::Declined,
    };
    CallToolResult::structured(rules::model_output(status, e.option.as_deref()))
}

/// Whether the client can open a URL for the person.
pub fn url_elicitation(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some())
}

fn modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| !v.has_initialize() || v >= ProtocolVersion::V_2026_07_28)
}

fn url_question(req: &Request, url: &str, id: String) -> ElicitRequestParams {
    ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: format!(
            "Sandtop: a sign-in to {} is requested. Open this one-time page on this computer and \
             type the values there; they go only into the guest browser's inputs on that origin, \
             never to the assistant.",
            req.origin
        ),
        url: url.to_string(),
        elicitation_id: id,
    }
}

impl Server {
    pub(super) async fn sign_in(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, String> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let mut st = self.state.lock().await;
        // The answer round of 2026-07-28: the page is up already.
        if let Some(state) = &request.request_state {
            let taken = {
                let mut w = self.sign_ins.lock().unwrap_or_else(|p| p.into_inner());
                w.take(state, &args)
            };
            let mut w = match taken {
                Ok(w) => w,
                Err(why) => return Ok(result(&Ended::refused(why)).into()),
            };
            let answer = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(INPUT_KEY))
                .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
            let ended = match answer.map(|a| a.action) {
                Some(ElicitationAction::Accept) => {
                    let answer = wait(&mut w.page, ctx).await;
                    self.fill(&mut st, &w.request, &w.tab_id, answer).await
                }
                Some(_) => Ended::answered(
                    Status::Declined,
                    None,
                    Some("the person declined to open the sign-in page".into()),
                ),
                None => Ended::answered(
                    Status::Declined,
                    None,
                    Some("the client sent no answer to the sign-in question".into()),
                ),
            };
            drop(w.page);
            return self.record(&mut st, w.step, &w.call_id, Some(&w.request), ended);
        }
        let (step, call_id) = st
            .journal
            .begin(json!({"type": "function_call", "name": TOOL, "arguments": args.to_string()}))
            .map_err(crate::said)?;
        let req = match rules::parse_request(&args.to_string()) {
            Ok(r) => r,
            Err(why) => return self.record(&mut st, step, &call_id, None, Ended::refused(why)),
        };
        let tab_id = match self.sign_in_checked(&mut st, &req).await {
            Ok(t) => t,
            Err(why) => {
                return self.record(&mut st, step, &call_id, Some(&req), Ended::refused(why));
            }
        };
        // Who answers.
        if url_elicitation(ctx) {
            let mut page = sign_in_page::start(&req).await.map_err(crate::said)?;
            if modern(ctx) {
                let q = url_question(&req, page.url(), String::new());
                let state = {
                    let mut w = self.sign_ins.lock().unwrap_or_else(|p| p.into_inner());
                    w.insert(Waiting {
                        arguments: args.clone(),
                        step,
                        call_id: call_id.clone(),
                        request: req,
                        tab_id,
                        page,
                        at: Instant::now(),
                    })
                    .map_err(crate::said)?
                };
                let mut requests = BTreeMap::new();
                requests.insert(
                    INPUT_KEY.to_string(),
                    InputRequest::Elicitation(ElicitRequest::new(q)),
                );
                return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                    Some(requests),
                    Some(state),
                )));
            }
            let id = sandtop_view::auth::random_hex().map_err(crate::said)?;
            let q = url_question(&req, page.url(), id);
            let asked = tokio::select! {
                r = ctx.peer.create_elicitation(q) => r.map(|r| r.action).map_err(|e| e.to_string()),
                () = ctx.ct.cancelled() => Err("the call was cancelled".to_string()),
            };
            let ended = match asked {
                Ok(ElicitationAction::Accept) => {
                    let answer = wait(&mut page, ctx).await;
                    self.fill(&mut st, &req, &tab_id, answer).await
                }
                Ok(_) => Ended::answered(
                    Status::Declined,
                    None,
                    Some("the person declined to open the sign-in page".into()),
                ),
                Err(e) => Ended::answered(
                    Status::Declined,
                    None,
                    Some(format!("the person could not be asked ({e})")),
                ),
            };
            drop(page);
            return self.record(&mut st, step, &call_id, Some(&req), ended);
        }
        let answer = match &self.cfg.credentials {
            Some(c) => match c.answer(&req) {
                Ok(Some(a)) => Some(a),
                Ok(None) => None,
                Err(e) => Some(Answer::Decline {
                    why: format!(
                        "the credentials file could not be read ({})",
                        crate::said(e)
                    ),
                }),
            },
            None => None,
        };
        let Some(answer) = answer else {
            return self.record(&mut st, step, &call_id, Some(&req), Ended::refused(NO_ONE));
        };
        let ended = self.fill(&mut st, &req, &tab_id, Ok(answer)).await;
        self.record(&mut st, step, &call_id, Some(&req), ended)
    }

    /// Steps 2 and 3; the active tab's id.
    async fn sign_in_checked(&self, st: &mut State, req: &Request) -> Result<String, String> {
        let Some(browser) = self.cfg.browser.as_ref() else {
            return Err(
                "this server offers no browser tools: sign-in values go only into page \
                        inputs the browser tools bound, never into whatever has the keyboard focus"
                    .into(),
            );
        };
        if let Some(policy) = browser.url_policy()
            && !policy.origins().contains(&req.origin)
        {
            return Err(format!(
                "`credential_origin` {} is outside the operator's URL policy",
                req.origin
            ));
        }
        let g = st.guests.resolve(None).await?;
        let ch = g.channel().await.map_err(crate::said)?;
        let state = match ch.browser_state().await {
            Ok(s) => s,
            Err(ChannelError::Daemon { body, .. }) => {
                return Err(format!(
                    "the active tab's origin cannot be read ({}), so the credential origin cannot be checked",
                    body.code
                ));
            }
            Err(e) => {
                g.channel = None;
                return Err(format!("the browser's state could not be read ({e})"));
            }
        };
        let Some(active) = state.tabs.iter().find(|t| t.active) else {
            return Err("there is no active tab".into());
        };
        if url_origin(&active.url).as_ref() != Some(&req.origin) {
            return Err(format!(
                "`credential_origin` {} is not the origin of the active tab ({})",
                req.origin,
                state_url(&active.url)
            ));
        }
        let tab_id = active.id.clone();
        if !req.fields.is_empty() {
            let check = BrowserCall::SignInCheck {
                tab_id: Some(tab_id.clone()),
                origin: req.origin.to_string(),
                fields: req
                    .fields
                    .iter()
                    .map(|f| SignInTarget {
                        target: f.target.clone(),
                        kind: f.kind,
                    })
                    .collect(),
            };
            match ch.browser_call(&check).await {
                Ok(_) => {}
                Err(ChannelError::Daemon { body, .. }) if body.code != ErrorCode::Timeout => {
                    return Err(rules::daemon_refusal(body.code));
                }
                Err(e) => {
                    g.channel = None;
                    return Err(format!("the daemon did not answer the check ({e})"));
                }
            }
        }
        Ok(tab_id)
    }

    /// Step 5: the answer's values into the bound inputs.
    async fn fill(
        &self,
        st: &mut State,
        req: &Request,
        tab_id: &str,
        answer: Result<Answer, Ended>,
    ) -> Ended {
        let (option, values, source) = match answer {
            Err(ended) => return ended,
            Ok(Answer::Decline { why }) => {
                return Ended::answered(Status::Declined, None, Some(why));
            }
            Ok(Answer::Submit {
                option,
                values,
                source,
            }) => (option, values, source),
        };
        if let Err(why) = rules::check_answer(req, option.as_deref(), &values) {
            return Ended::answered(
                Status::Declined,
                Some(source),
                Some(format!("the answer was not usable: {why}")),
            );
        }
        if values.is_empty() {
            return Ended {
                option,
                ..Ended::answered(Status::Submitted, Some(source), None)
            };
        }
        let fill = BrowserCall::SignInFill {
            tab_id: Some(tab_id.to_string()),
            origin: req.origin.to_string(),
            fields: values
                .into_iter()
                .filter_map(|(id, value)| {
                    let f = req.fields.iter().find(|f| f.id == id)?;
                    Some(SignInValue {
                        target: f.target.clone(),
                        kind: f.kind,
                        value,
                    })
                })
                .collect(),
        };
        let g = match st.guests.resolve(None).await {
            Ok(g) => g,
            Err(why) => {
                return Ended::answered(Status::Cancelled, Some(source), Some(why));
            }
        };
        let r = match g.channel().await {
            Ok(ch) => ch.browser_call(&fill).await,
            Err(e) => {
                return Ended::answered(Status::Cancelled, Some(source), Some(crate::said(e)));
            }
        };
        drop(fill);
        match r {
            Ok(_) => {
                eprintln!(
                    "host-cli mcp: sign-in values ({}) went into the page of {} (from the {source})",
                    req.fields
                        .iter()
                        .map(|f| f.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    req.origin
                );
                Ended {
                    option,
                    ..Ended::answered(Status::Submitted, Some(source), None)
                }
            }
            Err(ChannelError::Daemon { body, .. }) if body.code != ErrorCode::Timeout => {
                Ended::answered(
                    Status::Cancelled,
                    Some(source),
                    Some(format!(
                        "the values could not go in: {}",
                        rules::daemon_refusal(body.code)
                    )),
                )
            }
            Err(e) => {
                g.channel = None;
                Ended::answered(
                    Status::Cancelled,
                    Some(source),
                    Some(format!(
                        "the daemon did not answer ({e}); what reached the page is unknown"
                    )),
                )
            }
        }
    }

    fn record(
        &self,
        st: &mut State,
        step: u32,
        call_id: &str,
        req: Option<&Request>,
        ended: Ended,
    ) -> Result<CallToolResponse, String> {
        st.journal
            .sign_in(
                step,
                call_id,
                req.map(Request::shape),
                ended.status,
                ended.source,
                ended.option.clone(),
                ended.why.clone(),
            )
            .map_err(crate::said)?;
        Ok(result(&ended).into())
    }
}

/// Waits for the person on the page: their answer, or why there is none.
async fn wait(page: &mut Page, ctx: &RequestContext<RoleServer>) -> Result<Answer, Ended> {
    let got = tokio::select! {
        a = page.answer() => a,
        () = ctx.ct.cancelled() => {
            return Err(Ended::answered(Status::Cancelled, Some("page"), Some("the call was cancelled while the page waited".into())));
        }
        () = tokio::time::sleep(WAIT_FOR) => {
            return Err(Ended::answered(Status::Declined, Some("page"), Some("nobody answered on the sign-in page within 10 minutes".into())));
        }
        () = super::computer::progress(ctx, "waiting for the person on the sign-in page") => unreachable!("progress never ends"),
    };
    match got {
        Some(PageAnswer::Submit { option, values }) => Ok(Answer::Submit {
            option,
            values,
            source: "page",
        }),
        Some(PageAnswer::Decline) => Ok(Answer::Decline {
            why: "the person declined on the sign-in page".into(),
        }),
        None => Err(Ended::answered(
            Status::Cancelled,
            Some("page"),
            Some("the sign-in page went away".into()),
        )),
    }
}
