//! What the members that act share: resolving a ref for an action
//! through the page agent, and performing BiDi input (released
//! afterwards, or held on purpose). Below both `members` and `pointer`.

use sandtop_protocol::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::bidi::Bidi;
use super::bidi_error;
use super::context::{COMMAND_WAIT, agent};
use super::policy::Policy;

/// Resolves `target` in the tab's current document for `need` (pointer,
/// editable, scroll) and returns its viewport point.
pub(super) async fn locate(
    bidi: &Bidi,
    context: &str,
    target: &str,
    need: &str,
) -> Result<(i64, i64), ErrorBody> {
    locate_in(bidi, context, target, need, Policy::NONE).await
}

/// [`locate`], in the same evaluation checking the target's document (and
/// the frames' up to the top one) against the host's URL policy.
pub(super) async fn locate_in(
    bidi: &Bidi,
    context: &str,
    target: &str,
    need: &str,
    policy: Policy<'_>,
) -> Result<(i64, i64), ErrorBody> {
    let v = agent(
        bidi,
        context,
        json!({"op": "locate", "ref": target, "need": need,
               "policy": policy.value(), "expect": policy.expect_value()}),
    )
    .await?;
    element_error(&v)?;
    Ok((v["x"].as_i64().unwrap_or(0), v["y"].as_i64().unwrap_or(0)))
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
        Some("out_of_policy") => Err(super::policy::out_of_policy()),
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

/// Performs `actions` and leaves the input state as they left it (keys
/// held stay held); on failure, releases everything.
pub(super) async fn press(bidi: &Bidi, context: &str, actions: Value) -> Result<(), ErrorBody> {
    let r = send(bidi, context, actions).await;
    if r.is_err() {
        release(bidi, context).await;
    }
    r
}

/// Performs `actions`, then releases everything: whatever happened,
/// nothing stays pressed.
pub(super) async fn perform(bidi: &Bidi, context: &str, actions: Value) -> Result<(), ErrorBody> {
    let r = send(bidi, context, actions).await;
    release(bidi, context).await;
    r
}

async fn send(bidi: &Bidi, context: &str, actions: Value) -> Result<(), ErrorBody> {
    bidi.command(
        "input.performActions",
        json!({"context": context, "actions": actions}),
        COMMAND_WAIT,
    )
    .await
    .map(|_| ())
    .map_err(bidi_error)
}

/// BiDi `input.releaseActions`: keys up, buttons up, in reverse order of
/// pressing (errors ignored: there is nothing left to do about them).
pub(super) async fn release(bidi: &Bidi, context: &str) {
    let _ = bidi
        .command(
            "input.releaseActions",
            json!({"context": context}),
            COMMAND_WAIT,
        )
        .await;
}

/// The tab's viewport size in CSS pixels.
pub(super) async fn viewport(bidi: &Bidi, context: &str) -> Result<(u64, u64), ErrorBody> {
    let v = agent(bidi, context, json!({"op": "tab"})).await?;
    Ok((
        v["width"].as_u64().unwrap_or(0),
        v["height"].as_u64().unwrap_or(0),
    ))
}
