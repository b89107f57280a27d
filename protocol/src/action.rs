//! Computer actions, shaped exactly like the Responses API `ComputerAction`.
//!
//! The daemon accepts these strictly (`deny_unknown_fields`): a field it
//! does not know is an error, never silently ignored (docs/contract.md rule 1).
//! The host reads model output with [`Action::from_model_value`], which is
//! as strict about fields (a field the schema does not know is refused,
//! never dropped) and names what is wrong.

use serde::{Deserialize, Serialize};

use crate::limits;

/// A mouse button, as the Responses API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Button {
    Left,
    Right,
    /// The middle button (the wheel pressed down).
    Wheel,
    Back,
    Forward,
}

impl Button {
    /// Every button, for table tests.
    pub const ALL: [Button; 5] = [
        Button::Left,
        Button::Right,
        Button::Wheel,
        Button::Back,
        Button::Forward,
    ];

    /// The X11 core button number: 1 left, 2 middle, 3 right, 8 back, 9 forward.
    pub fn x11_number(self) -> u8 {
        match self {
            Button::Left => 1,
            Button::Wheel => 2,
            Button::Right => 3,
            Button::Back => 8,
            Button::Forward => 9,
        }
    }
}

/// A point in the model's (screenshot) coordinate space.
///
/// Coordinates are `i64` so that any integer a model sends parses and can be
/// rejected with a clear `out_of_bounds` error instead of a type error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coord {
    pub x: i64,
    pub y: i64,
}

/// One computer action. Field names and the `type` tag follow the OpenAPI
/// schemas `ClickParam`, `DoubleClickAction`, `DragParam`, `KeyPressAction`,
/// `MoveParam`, `ScreenshotParam`, `ScrollParam`, `TypeParam`, `WaitParam`.
///
/// `keys` on pointer actions are the keys held while the action runs; the
/// API allows them to be absent or null, and we always write them (null when
/// absent) because `DoubleClickAction` requires the field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    Click {
        button: Button,
        x: i64,
        y: i64,
        #[serde(default)]
        keys: Option<Vec<String>>,
    },
    DoubleClick {
        x: i64,
        y: i64,
        #[serde(default)]
        keys: Option<Vec<String>>,
    },
    Drag {
        path: Vec<Coord>,
        #[serde(default)]
        keys: Option<Vec<String>>,
    },
    Keypress {
        keys: Vec<String>,
    },
    Move {
        x: i64,
        y: i64,
        #[serde(default)]
        keys: Option<Vec<String>>,
    },
    /// Take a screenshot. Inside a batch this captures nothing by itself:
    /// every batch ends with one final screenshot (docs/contract.md rule 2).
    Screenshot {},
    Scroll {
        x: i64,
        y: i64,
        scroll_x: i64,
        scroll_y: i64,
        #[serde(default)]
        keys: Option<Vec<String>>,
    },
    Type {
        text: String,
    },
    /// Wait until the screen settles (X damage quiet), capped.
    Wait {},
    /// Not in the Responses API (the Anthropic computer toolset's
    /// `left_mouse_down`): press `button` where the pointer is and leave it
    /// held after the batch, until a `mouse_up`, a failed batch, the
    /// daemon's stop, or [`limits::HELD_BUTTON_IDLE_MS`] without a request
    /// (docs/contract.md rule 66).
    MouseDown {
        button: Button,
    },
    /// Not in the Responses API (`left_mouse_up`): release `button` where
    /// the pointer is; nothing happens when it is not held.
    MouseUp {
        button: Button,
    },
    /// Not in the Responses API (`hold_key`): press `keys` in order, keep
    /// them down for `duration_ms` (at most [`limits::MAX_HOLD_KEY_MS`]),
    /// release them in reverse.
    HoldKey {
        keys: Vec<String>,
        duration_ms: u64,
    },
}

/// Why an action was refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionRejection {
    /// A coordinate lies outside the screenshot the model saw.
    OutOfBounds {
        x: i64,
        y: i64,
        width: u32,
        height: u32,
    },
    /// A limit from [`crate::limits`] was exceeded.
    Limit(String),
    /// The text holds a character that cannot be typed.
    BadText(String),
    /// Structurally wrong (empty drag path, empty keypress, ...).
    Invalid(String),
}

impl ActionRejection {
    /// The wire code for this refusal (one mapping, for the daemon and for
    /// the host's preflight).
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            ActionRejection::Limit(_) => crate::ErrorCode::LimitExceeded,
            ActionRejection::OutOfBounds { .. } => crate::ErrorCode::OutOfBounds,
            ActionRejection::BadText(_) | ActionRejection::Invalid(_) => {
                crate::ErrorCode::InvalidAction
            }
        }
    }
}

impl std::fmt::Display for ActionRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActionRejection::OutOfBounds {
                x,
                y,
                width,
                height,
            } => write!(
                f,
                "coordinate ({x}, {y}) is outside the {width}x{height} screenshot"
            ),
            ActionRejection::Limit(m)
            | ActionRejection::BadText(m)
            | ActionRejection::Invalid(m) => f.write_str(m),
        }
    }
}

impl Action {
    /// The API's `type` tag of this action.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Click { .. } => "click",
            Action::DoubleClick { .. } => "double_click",
            Action::Drag { .. } => "drag",
            Action::Keypress { .. } => "keypress",
            Action::Move { .. } => "move",
            Action::Screenshot {} => "screenshot",
            Action::Scroll { .. } => "scroll",
            Action::Type { .. } => "type",
            Action::Wait {} => "wait",
            Action::MouseDown { .. } => "mouse_down",
            Action::MouseUp { .. } => "mouse_up",
            Action::HoldKey { .. } => "hold_key",
        }
    }

    /// Whether running this action injects input (everything but
    /// `screenshot` and `wait`).
    pub fn is_input(&self) -> bool {
        !matches!(self, Action::Screenshot {} | Action::Wait {})
    }

    /// Every point this action touches, in model space.
    pub fn points(&self) -> Vec<Coord> {
        match self {
            Action::Click { x, y, .. }
            | Action::DoubleClick { x, y, .. }
            | Action::Move { x, y, .. }
            | Action::Scroll { x, y, .. } => vec![Coord { x: *x, y: *y }],
            Action::Drag { path, .. } => path.clone(),
            _ => Vec::new(),
        }
    }

    /// Key names this action presses (held keys or the chord).
    pub fn key_names(&self) -> &[String] {
        match self {
            Action::Keypress { keys } | Action::HoldKey { keys, .. } => keys,
            Action::Click { keys, .. }
            | Action::DoubleClick { keys, .. }
            | Action::Drag { keys, .. }
            | Action::Move { keys, .. }
            | Action::Scroll { keys, .. } => keys.as_deref().unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Checks the limits that do not depend on the screen: path length,
    /// scroll distance, text length and content, number and length of key
    /// names. Coordinates are checked against a [`crate::ScaleMap`] and key
    /// names against the daemon's key table elsewhere.
    pub fn check_limits(&self) -> Result<(), ActionRejection> {
        let keys = self.key_names();
        if keys.len() > limits::MAX_KEYS {
            return Err(ActionRejection::Limit(format!(
                "{} keys given, at most {} allowed",
                keys.len(),
                limits::MAX_KEYS
            )));
        }
        if let Some(long) = keys.iter().find(|k| k.len() > limits::MAX_KEY_NAME_BYTES) {
            return Err(ActionRejection::Limit(format!(
                "a key name of {} bytes, at most {} allowed",
                long.len(),
                limits::MAX_KEY_NAME_BYTES
            )));
        }
        match self {
            Action::Keypress { keys } if keys.is_empty() => Err(ActionRejection::Invalid(
                "keypress needs at least one key".into(),
            )),
            Action::Drag { path, .. } if path.len() < 2 => Err(ActionRejection::Invalid(format!(
                "drag needs a path of at least 2 points, got {}",
                path.len()
            ))),
            Action::Drag { path, .. } if path.len() > limits::MAX_DRAG_POINTS => {
                Err(ActionRejection::Limit(format!(
                    "drag path of {} points, at most {} allowed",
                    path.len(),
                    limits::MAX_DRAG_POINTS
                )))
            }
            Action::Scroll {
                scroll_x, scroll_y, ..
            } if scroll_x.unsigned_abs() > limits::MAX_SCROLL_DISTANCE
                || scroll_y.unsigned_abs() > limits::MAX_SCROLL_DISTANCE =>
            {
                Err(ActionRejection::Limit(format!(
                    "scroll distance ({scroll_x}, {scroll_y}) exceeds {} per axis",
                    limits::MAX_SCROLL_DISTANCE
                )))
            }
            Action::Type { text } => check_text(text),
            Action::HoldKey { keys, .. } if keys.is_empty() => Err(ActionRejection::Invalid(
                "hold_key needs at least one key".into(),
            )),
            Action::HoldKey { duration_ms, .. } if *duration_ms > limits::MAX_HOLD_KEY_MS => {
                Err(ActionRejection::Limit(format!(
                    "hold_key of {duration_ms} ms, at most {} allowed",
                    limits::MAX_HOLD_KEY_MS
                )))
            }
            _ => Ok(()),
        }
    }

    /// The fields OpenAI's schema defines for an action type
    /// (`ClickParam`, `DragParam`, ...; a test checks them against
    /// `reference/openai-openapi.yaml`), or `None` for a type it does not
    /// define.
    pub fn schema_fields(kind: &str) -> Option<&'static [&'static str]> {
        Some(match kind {
            "click" => &["type", "button", "x", "y", "keys"],
            "double_click" | "move" => &["type", "x", "y", "keys"],
            "drag" => &["type", "path", "keys"],
            "keypress" => &["type", "keys"],
            "scroll" => &["type", "x", "y", "scroll_x", "scroll_y", "keys"],
            "type" => &["type", "text"],
            "screenshot" | "wait" => &["type"],
            _ => return None,
        })
    }

    /// The fields of Sandtop's own action types, outside the Responses
    /// API (docs/contract.md rule 66): what the Anthropic computer
    /// toolset's `left_mouse_down`, `left_mouse_up` and `hold_key` run as.
    /// `None` for any other type.
    pub fn own_fields(kind: &str) -> Option<&'static [&'static str]> {
        Some(match kind {
            "mouse_down" | "mouse_up" => &["type", "button"],
            "hold_key" => &["type", "keys", "duration_ms"],
            _ => return None,
        })
    }

    /// Parses one action from model output. A field the schema does not
    /// define (on the action or on a drag point) is refused by name, never
    /// dropped: running the action without it could do something else
    /// than the model meant (docs/contract.md rule 1). Missing or mistyped
    /// fields are errors too. Only the Responses API's types are accepted
    /// ([`Action::schema_fields`]): an OpenAI model cannot ask for
    /// Sandtop's own.
    pub fn from_model_value(value: &serde_json::Value) -> Result<Action, crate::Invalid> {
        Action::from_model_value_with(value, false)
    }

    /// [`Action::from_model_value`], accepting Sandtop's own action types
    /// ([`Action::own_fields`]) too when `own` (a model whose tools have
    /// members that run as them: the Anthropic computer toolset).
    pub fn from_model_value_with(
        value: &serde_json::Value,
        own: bool,
    ) -> Result<Action, crate::Invalid> {
        let obj = value
            .as_object()
            .ok_or_else(|| "an action must be a JSON object".to_string())?;
        let kind = obj
            .get("type")
            .and_then(|t| t.as_str())
            .ok_or_else(|| "an action needs a string `type`".to_string())?;
        let known = Action::schema_fields(kind)
            .or_else(|| if own { Action::own_fields(kind) } else { None });
        let Some(known) = known else {
            return Err(crate::invalid!(
                "unknown action type `{}`",
                truncate(kind, 40)
            ));
        };
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(crate::invalid!("unknown field `{}`", truncate(k, 40)));
        }
        if let Some(serde_json::Value::Array(points)) = obj.get("path") {
            for (j, p) in points.iter().enumerate() {
                if let Some(k) = p
                    .as_object()
                    .and_then(|o| o.keys().find(|k| *k != "x" && *k != "y"))
                {
                    return Err(crate::invalid!(
                        "unknown field `{}` in drag path point {j}",
                        truncate(k, 40)
                    ));
                }
            }
        }
        serde_json::from_value(value.clone())
            .map_err(|e| crate::invalid!("invalid `{kind}` action: {e}"))
    }
}

/// Checks text for `type`: bounded length, no NUL, no control characters
/// other than newline, carriage return and tab.
pub fn check_text(text: &str) -> Result<(), ActionRejection> {
    let chars = text.chars().count();
    if chars > limits::MAX_TYPE_CHARS {
        return Err(ActionRejection::Limit(format!(
            "text of {chars} characters, at most {} allowed per type action",
            limits::MAX_TYPE_CHARS
        )));
    }
    for (i, c) in text.chars().enumerate() {
        if c == '\0' {
            return Err(ActionRejection::BadText(format!(
                "text holds NUL at character {i}; NUL cannot be typed"
            )));
        }
        if c.is_control() && !matches!(c, '\n' | '\r' | '\t') {
            return Err(ActionRejection::BadText(format!(
                "text holds control character U+{:04X} at character {i}; use keypress for control keys",
                c as u32
            )));
        }
    }
    Ok(())
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
