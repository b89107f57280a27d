//! The host's URL policy at execution (docs/contract.md rule 30a): a state-changing
//! member acts only on a document whose origin is in the policy, checked
//! by the page agent in the document itself, not from the tab's URL read
//! earlier.
//!
//! Where the check sits, member by member (see `members`, `pointer`,
//! `files`):
//! - a member with a target: in the same page-agent evaluation that
//!   resolves (and for `type` focuses) the target, on the target's own
//!   document and every frame's document up to the tab's top one; the
//!   BiDi input follows with no other step between;
//! - `type`: again before every chunk of keys, which also requires that
//!   the target still holds the focus;
//! - keys without a target (`key`, `hold_keys`): the documents the focus
//!   goes through (a focused cross-origin frame, whose origin the agent
//!   cannot read, is out of policy);
//! - input at points (`scroll`, `click_at`, `drag_path`, `hover_at`): the
//!   documents under each point, likewise;
//! - `run_script`, `take_download`: the tab's top document;
//! - `set_file`: in the evaluation that finds the file input, whose
//!   element reference then binds `input.setFiles` to that document;
//! - `navigate`, `new_tab`: the document the navigation ended on (a
//!   redirect or the page's own script may have taken it elsewhere).
//!
//! The agent reads a document's origin from its window through the
//! sandbox's Xray view (`window.origin`), which the page cannot redefine.
//! What BiDi cannot close: a navigation that starts in the few
//! milliseconds between the agent's answer and the browser dispatching the
//! input. Nothing here quotes the page.

use sandtop_protocol::browser::{ExpectedPage, ExpectedTarget};
use sandtop_protocol::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::bidi::Bidi;
use super::context::agent;

/// The host's requirements of one call: its origins, or none (no policy:
/// every check passes without asking the page), the target's role and
/// label as the operator approved them (docs/contract.md rule 28a), which the agent
/// compares where it resolves the target (`expect`), and the page the
/// call was approved on (rule 28b: `page`): the tab, compared
/// before the member runs ([`Policy::check_tab`]), the document and the
/// focus, compared by the agent in every [`Policy::check`] evaluation
/// (for points, the focus, the top document), right before the input.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Policy<'a> {
    pub origins: Option<&'a [String]>,
    pub expect: Option<&'a ExpectedTarget>,
    pub page: Option<&'a ExpectedPage>,
}

impl Policy<'_> {
    /// No policy.
    pub const NONE: Policy<'static> = Policy {
        origins: None,
        expect: None,
        page: None,
    };

    /// The document and focus the agent compares, when the host sent any.
    fn page_value(&self) -> Option<Value> {
        let p = self.page?;
        (p.document.is_some() || p.focus.is_some())
            .then(|| json!({"document": p.document, "focus": p.focus}))
    }

    /// The call acts on the tab it was approved on: the named tab is that
    /// one, or (`tab_id` null) the active tab still is (else
    /// `stale_target`, nothing done).
    pub async fn check_tab(&self, bidi: &Bidi, tab_id: Option<&str>) -> Result<(), ErrorBody> {
        let Some(p) = self.page else {
            return Ok(());
        };
        let now = super::context::target_tab(bidi, tab_id).await?;
        if now != p.tab_id {
            return Err(ErrorBody::new(
                ErrorCode::StaleTarget,
                "the tab the call was approved on is no longer the one it would act on; nothing was done",
            ));
        }
        Ok(())
    }

    /// The value the page agent takes as `policy`.
    pub fn value(&self) -> Value {
        json!(self.origins)
    }

    /// The value the page agent takes as `expect`.
    pub fn expect_value(&self) -> Value {
        match self.expect {
            Some(e) => json!({"role": e.role, "label": e.label}),
            None => Value::Null,
        }
    }

    /// Whether there is a policy to check.
    pub fn active(&self) -> bool {
        self.origins.is_some()
    }

    /// Asks the page agent of `ctx` whether acting is allowed now, on
    /// `scope`.
    pub async fn check(&self, bidi: &Bidi, ctx: &str, scope: Scope<'_>) -> Result<(), ErrorBody> {
        let page = self.page_value();
        if !self.active() && page.is_none() {
            return Ok(());
        }
        let mut request = json!({"op": "policy", "policy": self.value(), "page": page});
        match scope {
            Scope::Top => {}
            Scope::Focus => request["focus"] = json!(true),
            Scope::Target(r) => request["ref"] = json!(r),
            Scope::Points(p) => request["points"] = json!(p),
        }
        let v = agent(bidi, ctx, request).await?;
        element_error(&v)
    }

    /// [`Policy::check`] after a navigation: the document it ended on (a
    /// new one by design: the approved page's document is not compared).
    pub async fn check_landed(&self, bidi: &Bidi, ctx: &str) -> Result<(), ErrorBody> {
        let origins_only = Policy {
            page: None,
            ..*self
        };
        origins_only.check(bidi, ctx, Scope::Top).await.map_err(|e| {
            if e.code == ErrorCode::OutOfPolicy {
                ErrorBody::new(
                    ErrorCode::OutOfPolicy,
                    "the navigation ended on a document outside the url policy (a redirect or the page's own navigation)",
                )
            } else {
                e
            }
        })
    }
}

/// What a [`Policy::check`] covers besides the tab's top document.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope<'a> {
    /// The top document only.
    Top,
    /// The documents the keyboard focus goes through.
    Focus,
    /// The document holding this ref, which must hold the focus.
    Target(&'a str),
    /// The documents under these viewport points.
    Points(&'a [[u64; 2]]),
}

/// The error of a document outside the policy.
pub(super) fn out_of_policy() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::OutOfPolicy,
        "the document this call would act on is not of an origin of the url policy; nothing was done",
    )
}

pub(super) fn element_error(v: &Value) -> Result<(), ErrorBody> {
    match v.get("error").and_then(Value::as_str) {
        None => Ok(()),
        Some("stale_target") => Err(ErrorBody::new(
            ErrorCode::StaleTarget,
            "the ref names no attached, visible element of this tab's current document; read the page again",
        )),
        Some("wrong_origin") => Err(ErrorBody::new(
            ErrorCode::InvalidAction,
            "the tab's document (or the element's) was not loaded from the credential origin",
        )),
        Some("out_of_policy") => Err(out_of_policy()),
        Some(_) => {
            let why = match v.get("why").and_then(Value::as_str) {
                Some("disabled") => "the element is disabled",
                Some("not a text field") => "the element is not a text field",
                Some("not a select") | Some("not an enabled select") => {
                    "the element is not an enabled select"
                }
                Some("covered by another element") => "another element covers it",
                Some("did not take focus") => "it did not take the focus",
                Some("lost the focus") => "the target lost the focus before the keys reached it",
                Some("one value for a single select") => "a single select takes one value",
                Some("no such option") => "a value names no enabled option",
                Some("scope ref") => "a scope ref only chooses the root of a scoped read",
                Some("not a scope ref") => "the root must be a scope ref from read_page_scoped",
                Some("wrong kind of field") => {
                    "the element is not an input of the field's kind (a password goes only into type=password)"
                }
                Some("not a checkbox or radio") => {
                    "the element is not an enabled checkbox or radio"
                }
                _ => "the element cannot take this action",
            };
            Err(ErrorBody::new(ErrorCode::NotActionable, why))
        }
    }
}
