//! `host-cli mcp --network ask`: the egress proxy's origin questions go to
//! the person through the client's form-mode elicitation
//! (docs/contract.md rule 64, docs/security.md M8).
//!
//! The seam is the one `host-cli run --network ask` answers through:
//! [`sandtop_egress::service::attach`] with an
//! [`sandtop_egress::service::Attached`] operator. The proxy keeps the
//! decisions (approve and deny last for the guest's session, cancel
//! refuses the waiting requests only) and its timeout; this module only
//! says who is asked and how:
//!
//! - the client of the last tool call, when it declared form elicitation
//!   on a revision where a server may send requests (2025-06-18,
//!   2025-11-25): an `elicitation/create` whose text names the origin
//!   (scheme, host, port: what the proxy parsed) and nothing a page or
//!   the model wrote; only `accept` with `approve: true` approves;
//! - otherwise `host-cli view SESSION`'s buttons (approve, deny, cancel),
//!   when a page of it is open on the guest: the question is the one
//!   `host-cli run` asks there ([`sandtop_agent::approve::ask_origin`]);
//! - otherwise nobody: the origin is denied, and the refusal says how to
//!   allow it (`host-cli mcp --network allow:ORIGIN`, the view).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ProtocolVersion};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde_json::{Value, json};

use sandtop_control::served::{Served, wait_for_viewer};
use sandtop_egress::proxy::Answer;
use sandtop_runfolder::trajectory::{Entry, Recorder};

/// Who may be asked: the client of the latest tool call that can be.
#[derive(Debug, Default)]
pub struct Asker {
    peer: Mutex<Option<Peer<RoleServer>>>,
    /// The latest caller could not be asked (no form elicitation, or
    /// 2026-07-28 where a server sends no requests).
    unable: Mutex<Option<&'static str>>,
}

impl Asker {
    /// Notes the client of a tool call (each call: a client may change).
    pub fn note(&self, ctx: &RequestContext<RoleServer>) {
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| !v.has_initialize() || v >= ProtocolVersion::V_2026_07_28);
        let (peer, unable) = if modern {
            (
                None,
                Some("on MCP 2026-07-28 a server sends no requests outside a call's own round"),
            )
        } else if !super::approval::form_elicitation(ctx) {
            (None, Some("the MCP client declares no form elicitation"))
        } else {
            (Some(ctx.peer.clone()), None)
        };
        *self.peer.lock().unwrap_or_else(|p| p.into_inner()) = peer;
        *self.unable.lock().unwrap_or_else(|p| p.into_inner()) = unable;
    }

    /// Whether the client of the latest call can be asked.
    pub fn can_ask(&self) -> bool {
        self.peer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Asks the person about `origin` through the client.
    pub async fn ask(&self, origin: &str) -> (Answer, Option<String>) {
        let peer = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer else {
            let why = self
                .unable
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or("no MCP client has called a tool yet");
            return (Answer::Deny, Some(refusal(origin, why)));
        };
        match peer.create_elicitation(form(origin)).await {
            Ok(r) => (answer(&r), None),
            Err(e) => (
                Answer::Deny,
                Some(refusal(
                    origin,
                    &format!("the person could not be asked ({e})"),
                )),
            ),
        }
    }
}

/// Why an origin was denied without asking, and how to allow it.
pub fn refusal(origin: &str, why: &str) -> String {
    let o = sandtop_hostkit::term::safe_line(origin);
    format!(
        "host-cli mcp: the guest's request to {o} is denied for this session: {why}. To allow it, \
         use a client with form elicitation, have the person open `host-cli view SESSION` \
         (its buttons answer), or start the server with `host-cli mcp --network allow:{o}`."
    )
}

/// The question: the origin only, and one boolean, false unless set.
pub fn form(origin: &str) -> ElicitRequestParams {
    let message = format!(
        "Sandtop: the guest wants to reach {} (network origin). Allow it for the rest of this \
         session? Decline denies it for the session; cancel refuses this request only. Screen \
         and page content, and the model's words, cannot approve anything.",
        sandtop_hostkit::term::safe_line(origin)
    );
    let schema = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Allow this origin",
                "description": "Set to allow it for this session; leave unset or decline to deny it.",
                "default": false,
            },
        },
        "required": ["approve"],
    }))
    // A fixed schema of the shape the spec allows; tested below.
    .expect("the origin form's schema");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    }
}

/// What the person's answer decides for the proxy.
pub fn answer(r: &ElicitResult) -> Answer {
    match r.action {
        ElicitationAction::Accept
            if r.content.as_ref().and_then(|c| c.get("approve")) == Some(&Value::Bool(true)) =>
        {
            Answer::Approve
        }
        ElicitationAction::Cancel => Answer::Cancel,
        _ => Answer::Deny,
    }
}

/// The operator a guest's proxy asks through (one per guest in use).
#[derive(Debug)]
pub struct Operator {
    pub asker: Arc<Asker>,
    pub runtime: tokio::runtime::Handle,
    /// The server session's run folder: questions and the proxy's
    /// decisions go into its trajectory, as a run's do.
    pub run: PathBuf,
    /// The guest's control socket and session folder: `host-cli view`
    /// answers when the client cannot, and shows the decisions.
    pub view: Option<(Served, PathBuf)>,
}

/// How long a question waits for a running `host-cli view` to connect.
const VIEWER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

impl sandtop_egress::service::Attached for Operator {
    fn answer(&mut self, origin: &str) -> Answer {
        // A blocking thread of the attach loop (see `attach`).
        let viewer = match &self.view {
            Some((v, dir)) if !self.asker.can_ask() => {
                self.runtime.block_on(wait_for_viewer(v, dir, VIEWER_WAIT));
                (v.viewers() > 0).then_some(v)
            }
            _ => None,
        };
        let (answer, refused) = match viewer {
            Some(v) => {
                let a = sandtop_agent::approve::ask_origin(None, Some(v), origin);
                // The trajectory's entry is the one written below.
                let _ = v.take_closed();
                (a, None)
            }
            None => self.runtime.block_on(self.asker.ask(origin)),
        };
        if let Some(r) = &refused {
            eprintln!("{r}");
        }
        if let Ok(mut rec) = Recorder::open(&self.run) {
            let _ = rec.write(&Entry::OriginQuestion {
                origin: origin.to_string(),
                answer: serde_json::to_value(answer)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            });
        }
        answer
    }

    fn journal(&mut self, entry: &Value) {
        if let Some((v, _)) = &self.view {
            v.network(entry.clone());
        }
        if let Ok(mut rec) = Recorder::open(&self.run) {
            let _ = rec.write(&Entry::Egress {
                entry: entry.clone(),
            });
        }
    }
}

/// Attaches the person (through `asker`) to a guest's egress proxy, for
/// as long as the returned task runs (aborting it detaches).
pub fn attach(
    control: PathBuf,
    asker: Arc<Asker>,
    run: PathBuf,
    view: Option<(Served, PathBuf)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let op = Operator {
            asker,
            runtime: tokio::runtime::Handle::current(),
            run,
            view,
        };
        let Some(inner) =
            sandtop_egress::service::attach(&control, Box::new(op), Box::new(|| {})).await
        else {
            eprintln!(
                "host-cli mcp: the guest's egress proxy cannot be reached; its questions are refused"
            );
            return;
        };
        // Aborting this task drops the guard, which stops the inner one.
        struct Stop(tokio::task::JoinHandle<()>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let mut stop = Stop(inner);
        let _ = (&mut stop.0).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        serde_json::from_value(json!({
            "action": action,
            "content": content,
        }))
        .unwrap()
    }

    #[test]
    fn only_an_accepted_true_approves() {
        let yes = result(ElicitationAction::Accept, Some(json!({"approve": true})));
        assert_eq!(answer(&yes), Answer::Approve);
        let no = result(ElicitationAction::Accept, Some(json!({"approve": false})));
        assert_eq!(answer(&no), Answer::Deny);
        let text = result(ElicitationAction::Accept, Some(json!({"approve": "true"})));
        assert_eq!(answer(&text), Answer::Deny);
        let none = result(ElicitationAction::Accept, None);
        assert_eq!(answer(&none), Answer::Deny);
        assert_eq!(
            answer(&result(ElicitationAction::Decline, None)),
            Answer::Deny
        );
        assert_eq!(
            answer(&result(ElicitationAction::Cancel, None)),
            Answer::Cancel
        );
    }

    #[test]
    fn the_question_names_the_origin_only_and_defaults_to_no() {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = form("http://10.0.0.5:8080")
        else {
            panic!("not a form");
        };
        assert!(message.contains("http://10.0.0.5:8080"), "{message}");
        let s = serde_json::to_value(&requested_schema).unwrap();
        assert_eq!(s["properties"]["approve"]["type"], "boolean");
        assert_eq!(s["properties"]["approve"]["default"], false);
        // Control characters in what is shown are made inert.
        let ElicitRequestParams::FormElicitationParams { message, .. } =
            form("http://a.test\n\u{1b}[2Jyes")
        else {
            panic!("not a form");
        };
        assert!(
            !message.contains('\n') && !message.contains('\u{1b}'),
            "{message:?}"
        );
    }

    #[tokio::test]
    async fn nobody_to_ask_denies_and_says_how_to_allow_it() {
        let asker = Asker::default();
        let (a, why) = asker.ask("https://example.org").await;
        assert_eq!(a, Answer::Deny);
        let why = why.unwrap();
        assert!(why.contains("--network allow:https://example.org"), "{why}");
    }
}
