//! Checking a computer call on the host before anything of its response
//! runs (docs/contract.md rule 10a; docs/security.md L2).
//!
//! The daemon checks a batch whole before it runs any of it, but a response
//! can hold several calls: were each checked only when its turn came, a
//! valid `move` would run before an invalid call after it is refused. So
//! the runner checks every call of a response here first, with what the
//! host can know:
//!
//! 1. the schema: every action parses strictly, a field the schema does not
//!    define is refused by name ([`Action::from_model_value`]);
//! 2. the limits that do not depend on the screen (actions per call, text,
//!    keys, drag paths, scroll distances: [`Action::check_limits`]);
//! 3. bounds: every coordinate lies inside the screenshot the model saw,
//!    through the same [`ScaleMap::to_screen`] the daemon uses;
//! 4. key names, with the daemon's own table ([`sandtop_protocol::keys`]).
//!
//! Approvals come after, for every call, still before any effect (the
//! runner asks them). What only the guest can know (the screen changed size
//! meanwhile, a character no keysym types) is still refused by the daemon,
//! before that batch runs.

use sandtop_protocol::{Action, ErrorCode, ScaleMap, keys, limits};
use serde_json::Value;

use super::reads::Read;

/// Why a call was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub call_id: String,
    /// The action at fault, when one is.
    pub index: Option<usize>,
    /// The closest daemon error code, for the record.
    pub code: ErrorCode,
    /// What is wrong, in our words (field and key names quoted from the
    /// model's output, shortened).
    pub reason: String,
    /// The call is a function call (`ask_user`, an unknown function), not
    /// a computer call.
    pub function: bool,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(i) => write!(
                f,
                "{} in action {i} of computer call {}",
                self.reason, self.call_id
            ),
            None if self.function => {
                write!(f, "{} in function call {}", self.reason, self.call_id)
            }
            None => write!(f, "{} in computer call {}", self.reason, self.call_id),
        }
    }
}

/// One checked computer call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Actions for one batch.
    Actions(Vec<Action>),
    /// A read (`reads`): the whole of its call.
    Read(Read),
}

/// Checks one call's actions; returns them parsed when every one passes.
/// `map` is the ScaleMap of the screenshot the model saw last (the space
/// its coordinates are in), when there is one. Only the Responses API's
/// action types are accepted.
pub fn check_call(
    call_id: &str,
    raw: &[Value],
    map: Option<&ScaleMap>,
) -> Result<Vec<Action>, Refusal> {
    check_actions(call_id, raw, map, false)
}

/// [`check_call`] in the vocabulary of a model that has Sandtop's own
/// action types too when `own` ([`Action::own_fields`], and the reads of
/// `reads`: one read is the whole of its call, and a zoom's region lies
/// inside the last screenshot, which it needs).
pub fn check_computer_call(
    call_id: &str,
    raw: &[Value],
    map: Option<&ScaleMap>,
    own: bool,
) -> Result<Checked, Refusal> {
    let refuse = |index: Option<usize>, code: ErrorCode, reason: String| Refusal {
        function: false,
        call_id: call_id.to_string(),
        index,
        code,
        reason,
    };
    if own && let Some(i) = raw.iter().position(|v| Read::from_value(v).is_some()) {
        if raw.len() != 1 {
            return Err(refuse(
                Some(i),
                ErrorCode::InvalidAction,
                "a read (cursor_position, zoom) must be the only action of its call".into(),
            ));
        }
        let read = Read::from_value(&raw[0])
            .expect("a read")
            .map_err(|e| refuse(Some(0), ErrorCode::InvalidAction, e))?;
        if let Read::Zoom { region } = read {
            let Some(map) = map else {
                return Err(refuse(
                    Some(0),
                    ErrorCode::InvalidAction,
                    "zoom: there is no screenshot yet for its region to refer to; take one first"
                        .into(),
                ));
            };
            Read::zoom_options(region, map, sandtop_protocol::ImageFormat::Png)
                .map_err(|e| refuse(Some(0), ErrorCode::OutOfBounds, e))?;
        }
        return Ok(Checked::Read(read));
    }
    check_actions(call_id, raw, map, own).map(Checked::Actions)
}

fn check_actions(
    call_id: &str,
    raw: &[Value],
    map: Option<&ScaleMap>,
    own: bool,
) -> Result<Vec<Action>, Refusal> {
    let refuse = |index: Option<usize>, code: ErrorCode, reason: String| Refusal {
        function: false,
        call_id: call_id.to_string(),
        index,
        code,
        reason,
    };
    if raw.len() > limits::MAX_ACTIONS {
        return Err(refuse(
            None,
            ErrorCode::LimitExceeded,
            format!(
                "{} actions in one call, at most {} allowed",
                raw.len(),
                limits::MAX_ACTIONS
            ),
        ));
    }
    let mut actions = Vec::with_capacity(raw.len());
    for (i, value) in raw.iter().enumerate() {
        let action = Action::from_model_value_with(value, own)
            .map_err(|e| refuse(Some(i), ErrorCode::InvalidAction, e.to_string()))?;
        let kind = action.kind();
        action
            .check_limits()
            .map_err(|r| refuse(Some(i), r.code(), format!("{kind}: {r}")))?;
        if let Some(map) = map {
            for p in action.points() {
                map.to_screen(p.x, p.y)
                    .map_err(|e| refuse(Some(i), ErrorCode::OutOfBounds, format!("{kind}: {e}")))?;
            }
        }
        for name in action.key_names() {
            keys::lookup(name)
                .map_err(|e| refuse(Some(i), ErrorCode::UnknownKey, format!("{kind}: {e}")))?;
        }
        actions.push(action);
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::Size;
    use serde_json::json;

    fn map() -> ScaleMap {
        ScaleMap::identity(Size::new(320, 200))
    }

    #[track_caller]
    fn refused(actions: Value) -> Refusal {
        let raw = actions.as_array().unwrap().clone();
        check_call("call_9", &raw, Some(&map())).unwrap_err()
    }

    #[test]
    fn valid_calls_pass_and_come_back_parsed() {
        let raw = vec![
            json!({"type": "move", "x": 0, "y": 0}),
            json!({"type": "click", "button": "left", "x": 319, "y": 199, "keys": ["CTRL"]}),
            json!({"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]}),
            json!({"type": "type", "text": "añ 山"}),
            json!({"type": "wait"}),
        ];
        let actions = check_call("c", &raw, Some(&map())).unwrap();
        assert_eq!(actions.len(), 5);
        assert_eq!(actions[1].kind(), "click");
    }

    #[test]
    fn each_rule_is_checked_and_names_the_action() {
        let r = refused(json!([{"type": "wait"}, {"type": "wait"},
                               {"type": "move", "x": 1, "y": 1, "foo": 1}]));
        assert_eq!(r.index, Some(2));
        assert_eq!(
            r.to_string(),
            "unknown field `foo` in action 2 of computer call call_9"
        );
        let r = refused(json!([{"type": "move", "x": 320, "y": 0}]));
        assert_eq!((r.index, r.code), (Some(0), ErrorCode::OutOfBounds));
        assert!(r.reason.contains("outside"), "{r}");
        let r = refused(json!([{"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 1, "y": -1}]}]));
        assert_eq!(r.code, ErrorCode::OutOfBounds);
        let r = refused(json!([{"type": "keypress", "keys": ["CTRL", "HYPERDRIVE"]}]));
        assert_eq!(r.code, ErrorCode::UnknownKey);
        assert!(r.reason.contains("`HYPERDRIVE`"), "{r}");
        let r = refused(json!([{"type": "click", "button": "left", "x": 1, "y": 1,
                                "keys": ["NOPE"]}]));
        assert_eq!(r.code, ErrorCode::UnknownKey);
        let r = refused(json!([{"type": "type", "text": "a\u{0}b"}]));
        assert_eq!(r.code, ErrorCode::InvalidAction);
        let r = refused(json!([{"type": "scroll", "x": 1, "y": 1, "scroll_x": 0,
                                "scroll_y": 1_000_000_000}]));
        assert_eq!(r.code, ErrorCode::LimitExceeded);
        let many = vec![json!({"type": "wait"}); limits::MAX_ACTIONS + 1];
        let r = check_call("c", &many, Some(&map())).unwrap_err();
        assert_eq!((r.index, r.code), (None, ErrorCode::LimitExceeded));
    }

    /// Sandtop's own types pass only in the vocabulary that has them; a
    /// read is the whole of its call and a zoom's region lies inside the
    /// screenshot.
    #[test]
    fn own_types_and_reads_pass_only_where_offered() {
        let down = vec![json!({"type": "mouse_down", "button": "left"})];
        assert!(check_call("c", &down, Some(&map())).is_err());
        assert!(check_computer_call("c", &down, Some(&map()), false).is_err());
        assert_eq!(
            check_computer_call("c", &down, Some(&map()), true).unwrap(),
            Checked::Actions(vec![Action::MouseDown {
                button: sandtop_protocol::Button::Left
            }])
        );
        let hold = vec![json!({"type": "hold_key", "keys": ["NOPE"], "duration_ms": 10})];
        let r = check_computer_call("c", &hold, Some(&map()), true).unwrap_err();
        assert_eq!(r.code, ErrorCode::UnknownKey);
        let zoom = vec![json!({"type": "zoom", "region": [0, 0, 320, 200]})];
        assert!(check_computer_call("c", &zoom, Some(&map()), false).is_err());
        assert_eq!(
            check_computer_call("c", &zoom, Some(&map()), true).unwrap(),
            Checked::Read(Read::Zoom {
                region: [0, 0, 320, 200]
            })
        );
        let outside = vec![json!({"type": "zoom", "region": [0, 0, 321, 200]})];
        let r = check_computer_call("c", &outside, Some(&map()), true).unwrap_err();
        assert_eq!(r.code, ErrorCode::OutOfBounds);
        assert!(check_computer_call("c", &zoom, None, true).is_err());
        let mixed = vec![json!({"type": "wait"}), json!({"type": "cursor_position"})];
        let r = check_computer_call("c", &mixed, Some(&map()), true).unwrap_err();
        assert_eq!(r.index, Some(1));
        let here = vec![json!({"type": "cursor_position"})];
        assert_eq!(
            check_computer_call("c", &here, None, true).unwrap(),
            Checked::Read(Read::CursorPosition)
        );
    }

    #[test]
    fn without_a_screenshot_bounds_are_left_to_the_daemon() {
        let raw = vec![json!({"type": "move", "x": 5000, "y": 5000})];
        assert!(check_call("c", &raw, None).is_ok());
    }
}
