//! Strict reading of request bodies.
//!
//! serde's derived `Deserialize` accepts a struct written as a JSON array
//! of its fields in order (`[640, 480]` for a `Size`), which
//! `deny_unknown_fields` does not prevent. The API is objects only, so
//! requests are checked for shape first: arrays are allowed only as the
//! values of the list fields (`actions`, `path`, `keys`, and the browser's
//! `values` and `region`, sign-in's `fields`, the host's `url_policy`),
//! holding objects (actions,
//! points, sign-in fields), strings (key
//! names, option values) or non-negative integers (a zoom region).

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Fields whose value is a list, and what the list holds.
fn list_field(key: &str) -> Option<fn(&Value) -> bool> {
    match key {
        "actions" | "path" | "fields" => Some(Value::is_object),
        "keys" | "values" | "url_policy" => Some(Value::is_string),
        "region" => Some(Value::is_u64),
        _ => None,
    }
}

/// Why a request body was refused.
#[derive(Debug, thiserror::Error)]
pub enum StrictError {
    /// Not JSON at all.
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// JSON, but an array where only objects are allowed, or a list
    /// holding the wrong kind of element (`at`: the path, from `body`).
    #[error("{at}: {what}")]
    Shape { at: String, what: &'static str },
    /// Objects, but not the type's (an unknown or missing field, a value
    /// of the wrong type).
    #[error("{0}")]
    Fields(#[source] serde_json::Error),
}

fn check(value: &Value, at: &str) -> Result<(), StrictError> {
    match value {
        Value::Array(_) => Err(StrictError::Shape {
            at: at.to_string(),
            what: "expected an object, found an array",
        }),
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{at}.{k}");
                match (v, list_field(k)) {
                    (Value::Array(items), Some(element_ok)) => {
                        for (i, item) in items.iter().enumerate() {
                            if !element_ok(item) {
                                return Err(StrictError::Shape {
                                    at: format!("{here}[{i}]"),
                                    what: "wrong element type",
                                });
                            }
                            if item.is_object() {
                                check(item, &format!("{here}[{i}]"))?;
                            }
                        }
                    }
                    (v, _) => check(v, &here)?,
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Parses a request body: JSON objects only (see the module docs), then the
/// type's own strict rules (`deny_unknown_fields`, required fields).
pub fn from_json_objects<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StrictError> {
    let value: Value = serde_json::from_slice(bytes).map_err(StrictError::Json)?;
    check(&value, "body")?;
    serde_json::from_value(value).map_err(StrictError::Fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchRequest, ScreenshotOptions};

    #[test]
    fn arrays_in_place_of_objects_are_refused() {
        for bad in [
            r#"[[]]"#,
            r#"{"actions": [["click", "left", 1, 2, null]]}"#,
            r#"{"actions": [{"type": "drag", "path": [[1, 2], [3, 4]]}]}"#,
            r#"{"actions": [], "screenshot": {"size": [640, 480]}}"#,
            r#"{"actions": [{"type": "keypress", "keys": [["CTRL"]]}]}"#,
        ] {
            let r = from_json_objects::<BatchRequest>(bad.as_bytes());
            assert!(r.is_err(), "{bad} was accepted");
        }
        assert!(from_json_objects::<ScreenshotOptions>(b"[null, null]").is_err());
    }

    #[test]
    fn objects_pass() {
        let ok = r#"{"actions": [{"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}], "keys": ["SHIFT"]}],
                     "screenshot": {"size": {"width": 640, "height": 480}}}"#;
        let r: BatchRequest = from_json_objects(ok.as_bytes()).unwrap();
        assert_eq!(r.actions.len(), 1);
    }

    /// Each refusal says which kind it is, and keeps serde's error as its
    /// source where there is one.
    #[test]
    fn a_refusal_is_typed_and_keeps_its_source() {
        use std::error::Error as _;
        let e = from_json_objects::<BatchRequest>(b"{not json").unwrap_err();
        assert!(matches!(e, StrictError::Json(_)), "{e:?}");
        assert!(e.source().is_some());
        let e = from_json_objects::<BatchRequest>(br#"{"actions": [[1]]}"#).unwrap_err();
        assert!(
            matches!(&e, StrictError::Shape { at, .. } if at == "body.actions[0]"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "body.actions[0]: wrong element type");
        let e = from_json_objects::<BatchRequest>(br#"{"actions": [], "extra": 1}"#).unwrap_err();
        assert!(matches!(e, StrictError::Fields(_)), "{e:?}");
        assert!(e.source().is_some());
        assert!(e.to_string().contains("extra"), "{e}");
    }
}
