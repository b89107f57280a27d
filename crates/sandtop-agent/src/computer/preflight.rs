//! Checking a computer call on the host before anything of its response
//! runs (issue 11, items 8 and 16).
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

/// Checks one call's actions; returns them parsed when every one passes.
/// `map` is the ScaleMap of the screenshot the model saw last (the space
/// its coordinates are in), when there is one.
pub fn check_call(
    call_id: &str,
    raw: &[Value],
    map: Option<&ScaleMap>,
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
        let action = Action::from_model_value(value)
            .map_err(|e| refuse(Some(i), ErrorCode::InvalidAction, e))?;
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

    #[test]
    fn without_a_screenshot_bounds_are_left_to_the_daemon() {
        let raw = vec![json!({"type": "move", "x": 5000, "y": 5000})];
        assert!(check_call("c", &raw, None).is_ok());
    }
}
