//! The opt-in pointer and key members (docs/contract.md rule 39): `click_at`, `drag_path`,
//! `hover_at` at viewport points in CSS pixels, `hold_keys`, and
//! `set_checked` on a ref.
//!
//! Points are checked against the tab's viewport as it is now (a point on
//! or past its right or bottom edge is `out_of_bounds`), then carried out
//! as trusted BiDi input, modifiers held on a key source tick-aligned with
//! the pointer's actions. Whatever happens, [`super::act::perform`]
//! releases the input state afterwards; a call dropped midway (the client
//! went away, the deadline passed) is released at once by a task of the
//! service, and in any case before the service runs its next call
//! ([`super::BrowserService::call_released`]).

use std::time::Duration;

use sandtop_protocol::browser::{Modifier, PathPoint, PointerButton};
use sandtop_protocol::{BrowserCall, BrowserOutcome, ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::act::{locate_in, perform, press, viewport};
use super::bidi::Bidi;
use super::context::{activate, agent, target_tab};
use super::keys::key_values;
use super::policy::element_error;
use super::policy::{Policy, Scope};

/// The pointer source's id, shared with the default members.
const MOUSE: &str = "sandtop-mouse";
const KEYBOARD: &str = "sandtop-keyboard";
/// How long one step of a drag takes: long enough for pages that track
/// `pointermove` to see each point.
const DRAG_STEP: Duration = Duration::from_millis(20);

fn modifier_value(m: Modifier) -> &'static str {
    match m {
        Modifier::Control => "\u{E009}",
        Modifier::Alt => "\u{E00A}",
        Modifier::Meta => "\u{E03D}",
        Modifier::Shift => "\u{E008}",
    }
}

fn button_number(b: PointerButton) -> u8 {
    match b {
        PointerButton::Left => 0,
        PointerButton::Middle => 1,
        PointerButton::Right => 2,
    }
}

/// Refuses a point outside a `w` x `h` viewport, naming the field.
fn inside(what: &str, x: u64, y: u64, (w, h): (u64, u64)) -> Result<(), ErrorBody> {
    if x < w && y < h {
        Ok(())
    } else {
        Err(ErrorBody::new(
            ErrorCode::OutOfBounds,
            format!("{what} ({x}, {y}) lies outside the {w}x{h} viewport"),
        ))
    }
}

/// The sources of one input sequence: `pointer` actions with `keys` held
/// around them (pressed in order before, released in reverse after).
fn with_modifiers(keys: &[Modifier], pointer: Vec<Value>) -> Value {
    let k = keys.len();
    let pause = || json!({"type": "pause"});
    let mut key_steps: Vec<Value> = keys
        .iter()
        .map(|m| json!({"type": "keyDown", "value": modifier_value(*m)}))
        .collect();
    key_steps.extend(std::iter::repeat_with(pause).take(pointer.len()));
    key_steps.extend(
        keys.iter()
            .rev()
            .map(|m| json!({"type": "keyUp", "value": modifier_value(*m)})),
    );
    let mut pointer_steps: Vec<Value> = std::iter::repeat_with(pause).take(k).collect();
    pointer_steps.extend(pointer);
    let mouse = json!({"type": "pointer", "id": MOUSE, "parameters": {"pointerType": "mouse"}, "actions": pointer_steps});
    if k == 0 {
        json!([mouse])
    } else {
        json!([{"type": "key", "id": KEYBOARD, "actions": key_steps}, mouse])
    }
}

fn move_to(x: u64, y: u64, duration: Duration) -> Value {
    json!({"type": "pointerMove", "x": x, "y": y, "origin": "viewport", "duration": duration.as_millis() as u64})
}

/// The pointer actions of `click_count` clicks of `button` at (x, y).
fn clicks(x: u64, y: u64, button: PointerButton, click_count: u8) -> Vec<Value> {
    let b = button_number(button);
    let mut steps = vec![move_to(x, y, Duration::ZERO)];
    for _ in 0..click_count {
        steps.push(json!({"type": "pointerDown", "button": b}));
        steps.push(json!({"type": "pointerUp", "button": b}));
    }
    steps
}

/// The pointer actions of a left-button drag along `path`.
fn drag(path: &[PathPoint]) -> Vec<Value> {
    let mut steps = Vec::with_capacity(path.len() + 2);
    if let Some(first) = path.first() {
        steps.push(move_to(first.x, first.y, Duration::ZERO));
        steps.push(json!({"type": "pointerDown", "button": 0}));
    }
    for p in path.iter().skip(1) {
        steps.push(move_to(p.x, p.y, DRAG_STEP));
    }
    steps.push(json!({"type": "pointerUp", "button": 0}));
    steps
}

/// The key actions that press `keys` in order, and those that release
/// them in reverse.
fn hold(keys: &[String]) -> Result<(Value, Value), ErrorBody> {
    let values = key_values(keys)?;
    let down: Vec<Value> = values
        .iter()
        .map(|v| json!({"type": "keyDown", "value": v}))
        .collect();
    let up: Vec<Value> = values
        .iter()
        .rev()
        .map(|v| json!({"type": "keyUp", "value": v}))
        .collect();
    Ok((
        json!([{"type": "key", "id": KEYBOARD, "actions": down}]),
        json!([{"type": "key", "id": KEYBOARD, "actions": up}]),
    ))
}

/// Carries out one of this module's members, on documents of the host's
/// URL policy only (the documents under the points, of the focus, of the
/// target).
pub(super) async fn run(
    bidi: &Bidi,
    call: &BrowserCall,
    policy: Policy<'_>,
) -> Result<BrowserOutcome, ErrorBody> {
    match call {
        BrowserCall::ClickAt {
            tab_id,
            x,
            y,
            button,
            click_count,
            keys,
        } => {
            at_points(
                bidi,
                tab_id.as_deref(),
                &[PathPoint { x: *x, y: *y }],
                policy,
                || with_modifiers(keys, clicks(*x, *y, *button, *click_count)),
            )
            .await
        }
        BrowserCall::DragPath { tab_id, path, keys } => {
            at_points(bidi, tab_id.as_deref(), path, policy, || {
                with_modifiers(keys, drag(path))
            })
            .await
        }
        BrowserCall::HoverAt { tab_id, x, y } => {
            at_points(
                bidi,
                tab_id.as_deref(),
                &[PathPoint { x: *x, y: *y }],
                policy,
                || with_modifiers(&[], vec![move_to(*x, *y, Duration::ZERO)]),
            )
            .await
        }
        BrowserCall::HoldKeys {
            tab_id,
            keys,
            duration_ms,
        } => hold_keys(bidi, tab_id.as_deref(), keys, *duration_ms, policy).await,
        BrowserCall::SetChecked {
            tab_id,
            target,
            checked,
        } => set_checked(bidi, tab_id.as_deref(), target, *checked, policy).await,
        other => Err(ErrorBody::new(
            ErrorCode::Internal,
            format!("{} is not a pointer member", other.member()),
        )),
    }
}

/// Shows the tab, checks every point against its viewport now (and the
/// documents under them against the policy), then performs the actions
/// `actions` builds.
async fn at_points(
    bidi: &Bidi,
    tab_id: Option<&str>,
    points: &[PathPoint],
    policy: Policy<'_>,
    actions: impl FnOnce() -> Value,
) -> Result<BrowserOutcome, ErrorBody> {
    let ctx = target_tab(bidi, tab_id).await?;
    activate(bidi, &ctx).await?;
    let vp = viewport(bidi, &ctx).await?;
    for (i, p) in points.iter().enumerate() {
        let what = if points.len() == 1 {
            "the point".to_string()
        } else {
            format!("point {i} of `path`")
        };
        inside(&what, p.x, p.y, vp)?;
    }
    let at: Vec<[u64; 2]> = points.iter().map(|p| [p.x, p.y]).collect();
    policy.check(bidi, &ctx, Scope::Points(&at)).await?;
    perform(bidi, &ctx, actions()).await?;
    Ok(BrowserOutcome::Done)
}

/// Presses the keys, waits here (not in the browser: BiDi queues a
/// release behind a running `pause`, so a call dropped midway could not
/// cut it short), then releases them. Dropped during the wait, the
/// service releases them at once.
async fn hold_keys(
    bidi: &Bidi,
    tab_id: Option<&str>,
    keys: &[String],
    duration_ms: u32,
    policy: Policy<'_>,
) -> Result<BrowserOutcome, ErrorBody> {
    let (down, up) = hold(keys)?;
    let ctx = target_tab(bidi, tab_id).await?;
    activate(bidi, &ctx).await?;
    policy.check(bidi, &ctx, Scope::Focus).await?;
    press(bidi, &ctx, down).await?;
    tokio::time::sleep(Duration::from_millis(u64::from(duration_ms))).await;
    perform(bidi, &ctx, up).await?;
    Ok(BrowserOutcome::Done)
}

/// Sets a checkbox or radio to `checked`: nothing to do when it already
/// is (the ref must still name the original control all the same), else
/// one trusted click on it, and the state read again through the same ref.
async fn set_checked(
    bidi: &Bidi,
    tab_id: Option<&str>,
    target: &str,
    checked: bool,
    policy: Policy<'_>,
) -> Result<BrowserOutcome, ErrorBody> {
    let ctx = target_tab(bidi, tab_id).await?;
    activate(bidi, &ctx).await?;
    let (now, radio) = control_state(bidi, &ctx, target, policy).await?;
    if now == checked {
        return Ok(BrowserOutcome::Done);
    }
    if !checked && radio {
        return Err(ErrorBody::new(
            ErrorCode::NotActionable,
            "a radio button is cleared by choosing another one of its group",
        ));
    }
    let (x, y) = locate_in(bidi, &ctx, target, "pointer", policy).await?;
    let (Ok(x), Ok(y)) = (u64::try_from(x), u64::try_from(y)) else {
        return Err(ErrorBody::new(
            ErrorCode::NotActionable,
            "the control has no point inside the viewport",
        ));
    };
    perform(
        bidi,
        &ctx,
        with_modifiers(&[], clicks(x, y, PointerButton::Left, 1)),
    )
    .await?;
    if control_state(bidi, &ctx, target, Policy::NONE).await?.0 != checked {
        return Err(ErrorBody::new(
            ErrorCode::NotActionable,
            "the control did not take the requested state",
        ));
    }
    Ok(BrowserOutcome::Done)
}

/// The checked state of the control `target` names in the tab's current
/// document, and whether it is a radio (`stale_target` when it names
/// none, `not_actionable` when it is no enabled checkbox or radio).
async fn control_state(
    bidi: &Bidi,
    ctx: &str,
    target: &str,
    policy: Policy<'_>,
) -> Result<(bool, bool), ErrorBody> {
    let v = agent(
        bidi,
        ctx,
        json!({"op": "checked", "ref": target,
               "policy": policy.value(), "expect": policy.expect_value()}),
    )
    .await?;
    element_error(&v)?;
    let checked = v["checked"].as_bool().ok_or_else(|| {
        ErrorBody::new(
            ErrorCode::BrowserFailed,
            "the page agent sent a malformed report",
        )
    })?;
    Ok((checked, v["radio"].as_bool() == Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modifiers_are_held_around_the_pointer_actions_tick_for_tick() {
        let v = with_modifiers(
            &[Modifier::Control, Modifier::Shift],
            clicks(5, 6, PointerButton::Right, 2),
        );
        let keys = v[0]["actions"].as_array().unwrap();
        let mouse = v[1]["actions"].as_array().unwrap();
        // Two presses, five pauses (move, down, up, down, up), two releases
        // in reverse order.
        let kinds: Vec<&str> = keys.iter().map(|a| a["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "keyDown", "keyDown", "pause", "pause", "pause", "pause", "pause", "keyUp", "keyUp"
            ]
        );
        assert_eq!(keys[0]["value"], "\u{E009}");
        assert_eq!(keys[7]["value"], "\u{E008}");
        let kinds: Vec<&str> = mouse.iter().map(|a| a["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "pause",
                "pause",
                "pointerMove",
                "pointerDown",
                "pointerUp",
                "pointerDown",
                "pointerUp"
            ]
        );
        assert_eq!(mouse[3]["button"], 2);
        assert_eq!(v[1]["id"], MOUSE);
    }

    #[test]
    fn without_modifiers_there_is_only_the_pointer() {
        let v = with_modifiers(&[], vec![move_to(1, 2, Duration::ZERO)]);
        assert_eq!(v.as_array().unwrap().len(), 1);
        assert_eq!(v[0]["actions"][0]["x"], 1);
    }

    #[test]
    fn a_drag_presses_at_the_first_point_and_releases_after_the_last() {
        let path = [
            PathPoint { x: 1, y: 1 },
            PathPoint { x: 5, y: 9 },
            PathPoint { x: 7, y: 3 },
        ];
        let steps = drag(&path);
        let kinds: Vec<&str> = steps.iter().map(|a| a["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "pointerMove",
                "pointerDown",
                "pointerMove",
                "pointerMove",
                "pointerUp"
            ]
        );
        assert_eq!(steps[4 - 1]["x"], 7);
    }

    #[test]
    fn points_on_or_past_the_edge_are_out_of_bounds() {
        assert!(inside("p", 0, 0, (800, 600)).is_ok());
        assert!(inside("p", 799, 599, (800, 600)).is_ok());
        for (x, y) in [(800, 0), (0, 600), (u64::MAX, 1)] {
            assert_eq!(
                inside("p", x, y, (800, 600)).unwrap_err().code,
                ErrorCode::OutOfBounds
            );
        }
    }

    #[test]
    fn held_keys_are_pressed_in_order_and_released_in_reverse() {
        let (down, up) = hold(&["Shift".into(), "a".into()]).unwrap();
        let down = down[0]["actions"].as_array().unwrap();
        let up = up[0]["actions"].as_array().unwrap();
        assert_eq!(down[0], json!({"type": "keyDown", "value": "\u{E008}"}));
        assert_eq!(down[1]["value"], "a");
        assert_eq!(up[0], json!({"type": "keyUp", "value": "a"}));
        assert_eq!(up[1]["value"], "\u{E008}");
        assert_eq!(
            hold(&["NoSuchKey".into()]).unwrap_err().code,
            ErrorCode::UnknownKey
        );
    }
}
