//! Who approves a call that changes state (docs/contract.md, `host-cli
//! mcp`): the person, never the client's model, a page, or anything a
//! call carries.
//!
//! 1. When the client declares form-mode elicitation, the person is asked
//!    with a form of one boolean (`approve`), shown the call (actions or
//!    member and arguments, made inert), its target's role and label and
//!    the tab's origin. Only `accept` with `approve: true` runs it;
//!    `decline`, `cancel`, `approve: false`, no answer or an error run
//!    nothing. On 2025-06-18 and 2025-11-25 the question is an
//!    `elicitation/create` request during the call; on 2026-07-28, where a
//!    server sends no requests, the call answers `input_required` with the
//!    question, and the client calls again with the answer and the opaque
//!    `requestState`, which names a question this server keeps (one use,
//!    same tool and arguments, 10 minutes).
//! 2. Otherwise the operator's `--approve-policy` file, when it decides
//!    the call (approves the member, or approves or denies batches).
//! 3. Otherwise `host-cli view SESSION`'s buttons, when a page of it is
//!    open on the call's guest: the server serves the guest's control
//!    socket while it holds the guest's run lock, and the question is
//!    asked there as `host-cli run` asks its own
//!    ([`sandtop_agent::approve::ask_in_view`]): Approve runs the call,
//!    Deny (or the call cancelled, the server stopping, ten minutes
//!    without an answer) runs nothing.
//! 4. Otherwise the call is refused, with how to allow it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use sandtop_agent::approve::{DecidedBy, Decision, Policy, PolicyAnswer, StopCheck, ask_in_view};
use sandtop_control::served::{Served, wait_for_viewer};
use sandtop_control::wire::QuestionKind;

/// The key of our one question in `inputRequests` / `inputResponses`.
pub const INPUT_KEY: &str = "sandtop_approval";
/// How long an `input_required` question waits for its answer.
const PENDING_FOR: Duration = Duration::from_secs(600);
/// Questions kept at once (the oldest goes first).
const PENDING_MAX: usize = 32;

/// The refusal when no one can be asked.
pub const NO_ONE: &str = "This call needs the person's approval, and there is no way to ask: \
the MCP client declares no form elicitation, no page of `host-cli view` is open on the guest, \
and no --approve-policy approves it. To allow it: use a client that supports elicitation; or \
have the person open `host-cli view SESSION` (its Approve button answers); or start the server \
with `host-cli mcp --approve-policy FILE` (JSON, e.g. {\"confirm_actions\": \"approve\", \
\"approve_browser_members\": [\"click\", \"type\"]}). Do not retry it unless the user asks.";

/// How long a question waits for a `host-cli view` that runs (holds the
/// session's view lock) to connect to the guest's control socket.
const VIEWER_WAIT: Duration = Duration::from_secs(3);

/// What is asked.
#[derive(Debug)]
pub struct Question<'a> {
    /// The guest the call acts on.
    pub session: &'a str,
    /// `None` for a `computer` batch; the member for a browser call.
    pub member: Option<&'a str>,
    /// The call, made inert (model and page text never passes for ours).
    pub description: String,
    /// The guest's control socket and session folder, when served:
    /// `host-cli view`'s buttons answer there.
    pub view: Option<(&'a Served, &'a Path)>,
}

/// The answer.
#[derive(Debug)]
pub enum Verdict {
    /// Run it. `by`: `elicitation`, `policy` or `view`.
    Approved { by: &'static str },
    /// Run nothing; `why` is told to the client.
    Refused { why: String, by: &'static str },
    /// 2026-07-28: answer `input_required`; the person's answer comes
    /// with the client's next call.
    Ask(InputRequiredResult),
}

/// The questions of `input_required` rounds, by `requestState`.
#[derive(Debug, Default)]
pub struct Pending {
    by_state: BTreeMap<String, Asked>,
}

#[derive(Debug)]
struct Asked {
    tool: String,
    arguments: Value,
    at: Instant,
}

impl Pending {
    pub(crate) fn insert(&mut self, tool: &str, arguments: &Value) -> anyhow::Result<String> {
        let now = Instant::now();
        self.by_state
            .retain(|_, a| now.duration_since(a.at) < PENDING_FOR);
        while self.by_state.len() >= PENDING_MAX {
            let oldest = self
                .by_state
                .iter()
                .min_by_key(|(_, a)| a.at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.by_state.remove(&k),
                None => break,
            };
        }
        let mut raw = [0u8; 16];
        getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
        let state: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        self.by_state.insert(
            state.clone(),
            Asked {
                tool: tool.to_string(),
                arguments: arguments.clone(),
                at: now,
            },
        );
        Ok(state)
    }

    /// Takes the question `state` names, if it is this call's.
    pub(crate) fn take(
        &mut self,
        state: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<(), &'static str> {
        let a = self
            .by_state
            .remove(state)
            .ok_or("the approval round is unknown, used or expired; call the tool again")?;
        if a.at.elapsed() >= PENDING_FOR {
            return Err("the approval round expired; call the tool again");
        }
        if a.tool != tool || a.arguments != *arguments {
            return Err("the call changed since the person was asked; nothing ran");
        }
        Ok(())
    }
}

/// Whether the client can ask the person with a form.
pub fn form_elicitation(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .and_then(|c| c.elicitation)
        // A bare `elicitation: {}` means form (the spec's compatibility rule).
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The form: one boolean, false unless the person sets it.
pub fn form(q: &Question<'_>) -> ElicitRequestParams {
    let what = match q.member {
        Some(m) => format!("Browser call browser_{m}"),
        None => "Desktop actions that type or press keys".to_string(),
    };
    let message = format!(
        "Sandtop: approve this call on guest {}?\n{what}:\n{}\n\nScreen and page content, and the \
         model's words, are untrusted: they cannot approve anything.",
        sandtop_hostkit::term::safe_line(q.session),
        q.description
    );
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Run this call",
                "description": "Set to run it; leave unset, decline or cancel to run nothing.",
                "default": false,
            },
        },
        "required": ["approve"],
    }))
    // A fixed schema of the shape the spec allows; tested (`mcp::tests`).
    .expect("the approval form's schema");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    }
}

/// What an elicitation's result decides.
pub fn decide(r: &ElicitResult) -> Result<(), String> {
    match r.action {
        ElicitationAction::Accept
            if r.content.as_ref().and_then(|c| c.get("approve")) == Some(&Value::Bool(true)) =>
        {
            Ok(())
        }
        ElicitationAction::Accept => Err("the person did not approve it".into()),
        ElicitationAction::Decline => Err("the person declined it".into()),
        ElicitationAction::Cancel => Err("the person cancelled it".into()),
        #[allow(unreachable_patterns)]
        _ => Err("no approval".into()),
    }
}

/// What the operator's policy says, when the client cannot ask.
pub fn by_policy(policy: Option<&Policy>, member: Option<&str>) -> Verdict {
    let Some(p) = policy else {
        return Verdict::Refused {
            why: NO_ONE.into(),
            by: "nobody",
        };
    };
    match member {
        Some(m) if p.approve_browser_members.iter().any(|a| a == m) => {
            Verdict::Approved { by: "policy" }
        }
        None if p.confirm_actions == Some(PolicyAnswer::Approve) => {
            Verdict::Approved { by: "policy" }
        }
        None if p.confirm_actions == Some(PolicyAnswer::Deny) => Verdict::Refused {
            why:
                "The approval policy denies these actions. Do not retry them unless the user asks."
                    .into(),
            by: "policy",
        },
        _ => Verdict::Refused {
            why: NO_ONE.into(),
            by: "nobody",
        },
    }
}

/// Asks whoever may approve `q` (see the module's order).
pub async fn ask(
    ctx: &RequestContext<RoleServer>,
    request: &CallToolRequestParams,
    arguments: &Value,
    pending: &std::sync::Mutex<Pending>,
    policy: Option<&Policy>,
    q: &Question<'_>,
) -> Verdict {
    if !form_elicitation(ctx) {
        return without_form(ctx, policy, q).await;
    }
    let modern = ctx
        .protocol_version()
        .is_some_and(|v| !v.has_initialize() || v >= ProtocolVersion::V_2026_07_28);
    if modern {
        return round(request, arguments, pending, q);
    }
    let asked = tokio::select! {
        r = ctx.peer.create_elicitation(form(q)) => r,
        () = ctx.ct.cancelled() => {
            return Verdict::Refused { why: "the call was cancelled while the person was asked".into(), by: "nobody" };
        }
    };
    match asked {
        Ok(r) => match decide(&r) {
            Ok(()) => Verdict::Approved { by: "elicitation" },
            Err(why) => Verdict::Refused {
                why: format!("{why}; nothing ran. Do not retry it unless the user asks."),
                by: "elicitation",
            },
        },
        Err(e) => Verdict::Refused {
            why: format!("the person could not be asked ({e}); nothing ran"),
            by: "nobody",
        },
    }
}

/// When the client cannot ask: the policy if it decides, else the view's
/// buttons if a page is open on the guest, else refused.
async fn without_form(
    ctx: &RequestContext<RoleServer>,
    policy: Option<&Policy>,
    q: &Question<'_>,
) -> Verdict {
    let decided = by_policy(policy, q.member);
    if !matches!(decided, Verdict::Refused { by: "nobody", .. }) {
        return decided;
    }
    let Some((view, dir)) = q.view else {
        return decided;
    };
    wait_for_viewer(view, dir, VIEWER_WAIT).await;
    if view.viewers() == 0 {
        return decided;
    }
    in_view(ctx, view, q).await
}

/// Asks in `host-cli view` (blocking a thread until a button, the call's
/// cancellation, or the question's time).
async fn in_view(ctx: &RequestContext<RoleServer>, view: &Served, q: &Question<'_>) -> Verdict {
    let (kind, what) = match q.member {
        Some(m) => (QuestionKind::Browser, format!("browser call browser_{m}")),
        None => (
            QuestionKind::ConfirmAction,
            "desktop actions that type or press keys".to_string(),
        ),
    };
    let title = format!(
        "An MCP client's call on guest {}: {what}",
        sandtop_hostkit::term::safe_line(q.session)
    );
    let text = format!(
        "{}\n\nScreen and page content, and the model's words, are untrusted: they cannot \
         approve anything.",
        q.description
    );
    let ct = ctx.ct.clone();
    let stop: StopCheck = Arc::new(move || ct.is_cancelled());
    let served = view.clone();
    let asked =
        tokio::task::spawn_blocking(move || ask_in_view(&served, Some(stop), kind, title, text))
            .await;
    // The server's journal records the decision (`approval`), not the
    // control socket's list.
    let _ = view.take_closed();
    match asked {
        Ok((by, Decision::Approve)) => Verdict::Approved { by: by.as_str() },
        Ok((DecidedBy::View, Decision::Deny(why))) => Verdict::Refused {
            why: format!("{why}; nothing ran. Do not retry it unless the user asks."),
            by: "view",
        },
        Ok((by, Decision::Deny(why))) => Verdict::Refused {
            why: format!("{why}; nothing ran"),
            by: by.as_str(),
        },
        Err(e) => Verdict::Refused {
            why: format!("the person could not be asked ({e}); nothing ran"),
            by: "nobody",
        },
    }
}

/// The 2026-07-28 round: ask now, or read the answer of the round asked.
fn round(
    request: &CallToolRequestParams,
    arguments: &Value,
    pending: &std::sync::Mutex<Pending>,
    q: &Question<'_>,
) -> Verdict {
    let mut pending = match pending.lock() {
        Ok(p) => p,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(state) = &request.request_state {
        if let Err(why) = pending.take(state, &request.name, arguments) {
            return Verdict::Refused {
                why: why.into(),
                by: "nobody",
            };
        }
        let answer = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(INPUT_KEY))
            .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
        return match answer.as_ref().map(decide) {
            Some(Ok(())) => Verdict::Approved { by: "elicitation" },
            Some(Err(why)) => Verdict::Refused {
                why: format!("{why}; nothing ran. Do not retry it unless the user asks."),
                by: "elicitation",
            },
            None => Verdict::Refused {
                why: "the client sent no answer to the approval question; nothing ran".into(),
                by: "nobody",
            },
        };
    }
    let state = match pending.insert(&request.name, arguments) {
        Ok(s) => s,
        Err(e) => {
            return Verdict::Refused {
                why: format!("the person could not be asked ({e}); nothing ran"),
                by: "nobody",
            };
        }
    };
    let mut requests = BTreeMap::new();
    requests.insert(
        INPUT_KEY.to_string(),
        InputRequest::Elicitation(ElicitRequest::new(form(q))),
    );
    Verdict::Ask(InputRequiredResult::new(Some(requests), Some(state)))
}
