//! What the members that act share: resolving a ref for an action
//! through the page agent, and performing BiDi input (released
//! afterwards, or held on purpose). Below both `members` and `pointer`.

use sandtop_protocol::ErrorBody;
use serde_json::{Value, json};

use super::bidi::Bidi;
use super::bidi_error;
use super::context::{COMMAND_WAIT, agent};
use super::policy::{Policy, element_error};

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
