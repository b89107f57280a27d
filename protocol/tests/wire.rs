//! Golden JSON of every action, checked against OpenAI's `ComputerAction`
//! schema, plus the strict/lenient parsing rules.

#![allow(clippy::unwrap_used)]

use sandtop_protocol::{
    Action, BatchRequest, Button, Coord, ErrorBody, ErrorCode, ScreenshotOptions,
};
use sandtop_testkit::openapi;
use serde_json::{Value, json};

fn golden() -> Vec<(Action, Value)> {
    vec![
        (
            Action::Click {
                button: Button::Left,
                x: 10,
                y: 20,
                keys: None,
            },
            json!({"type": "click", "button": "left", "x": 10, "y": 20, "keys": null}),
        ),
        (
            Action::Click {
                button: Button::Back,
                x: 0,
                y: 0,
                keys: Some(vec!["CTRL".into()]),
            },
            json!({"type": "click", "button": "back", "x": 0, "y": 0, "keys": ["CTRL"]}),
        ),
        (
            Action::DoubleClick {
                x: 5,
                y: 6,
                keys: None,
            },
            json!({"type": "double_click", "x": 5, "y": 6, "keys": null}),
        ),
        (
            Action::Drag {
                path: vec![Coord { x: 1, y: 2 }, Coord { x: 3, y: 4 }],
                keys: Some(vec!["shift".into()]),
            },
            json!({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}], "keys": ["shift"]}),
        ),
        (
            Action::Keypress {
                keys: vec!["CTRL".into(), "SHIFT".into(), "T".into()],
            },
            json!({"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]}),
        ),
        (
            Action::Move {
                x: 7,
                y: 8,
                keys: None,
            },
            json!({"type": "move", "x": 7, "y": 8, "keys": null}),
        ),
        (Action::Screenshot {}, json!({"type": "screenshot"})),
        (
            Action::Scroll {
                x: 1,
                y: 2,
                scroll_x: -3,
                scroll_y: 300,
                keys: None,
            },
            json!({"type": "scroll", "x": 1, "y": 2, "scroll_x": -3, "scroll_y": 300, "keys": null}),
        ),
        (
            Action::Type {
                text: "héllo 中\n".into(),
            },
            json!({"type": "type", "text": "héllo 中\n"}),
        ),
        (Action::Wait {}, json!({"type": "wait"})),
    ]
}

#[test]
fn actions_serialize_to_golden_json() {
    for (action, expected) in golden() {
        assert_eq!(
            serde_json::to_value(&action).unwrap(),
            expected,
            "{action:?}"
        );
        let back: Action = serde_json::from_value(expected.clone()).unwrap();
        assert_eq!(back, action);
    }
}

#[test]
fn every_action_kind_is_covered_by_the_golden_set() {
    let kinds: std::collections::BTreeSet<_> = golden().iter().map(|(a, _)| a.kind()).collect();
    let expected = [
        "click",
        "double_click",
        "drag",
        "keypress",
        "move",
        "screenshot",
        "scroll",
        "type",
        "wait",
    ];
    assert_eq!(kinds, expected.into_iter().collect());
}

#[test]
fn serialized_actions_validate_against_openai_computer_action() {
    let spec = openapi::openai_spec();
    let validator = openapi::validator(spec, "ComputerAction");
    let list = openapi::validator(spec, "ComputerActionList");
    let mut all = Vec::new();
    for (action, _) in golden() {
        let v = serde_json::to_value(&action).unwrap();
        let errors = openapi::errors(&validator, &v);
        assert!(errors.is_empty(), "{v} does not validate: {errors:?}");
        all.push(v);
    }
    for button in Button::ALL {
        let v = serde_json::to_value(Action::Click {
            button,
            x: 1,
            y: 1,
            keys: None,
        })
        .unwrap();
        assert!(openapi::errors(&validator, &v).is_empty(), "{v}");
    }
    assert!(openapi::errors(&list, &Value::Array(all)).is_empty());
}

#[test]
fn the_schema_check_is_not_vacuous() {
    // The same validator must refuse what the API refuses, or the test
    // above proves nothing.
    let validator = openapi::validator(openapi::openai_spec(), "ComputerAction");
    for bad in [
        json!({"type": "click", "x": 1, "y": 2}),
        json!({"type": "click", "button": "middle", "x": 1, "y": 2}),
        json!({"type": "double_click", "x": 1, "y": 2}),
        json!({"type": "teleport"}),
        json!({"type": "type"}),
    ] {
        assert!(
            !openapi::errors(&validator, &bad).is_empty(),
            "{bad} should be invalid"
        );
    }
}

#[test]
fn strict_parsing_denies_unknown_fields_and_types() {
    for bad in [
        json!({"type": "click", "button": "left", "x": 1, "y": 2, "extra": 1}),
        json!({"type": "wait", "ms": 100}),
        json!({"type": "screenshot", "region": {}}),
        json!({"type": "teleport", "x": 1}),
        json!({"type": "click", "button": "left", "x": 1.5, "y": 2}),
        json!({"type": "drag", "path": [{"x": 1, "y": 2, "z": 3}]}),
    ] {
        assert!(
            serde_json::from_value::<Action>(bad.clone()).is_err(),
            "{bad} should not parse"
        );
    }
    let req = json!({"actions": [], "screenshot": {"format": "png", "quality": 3}});
    assert!(serde_json::from_value::<BatchRequest>(req).is_err());
}

#[test]
fn model_actions_with_fields_the_schema_does_not_know_are_refused_by_name() {
    let err = Action::from_model_value(&json!({
        "type": "click", "button": "right", "x": 3, "y": 4, "future_field": true
    }))
    .unwrap_err();
    assert_eq!(err, "unknown field `future_field`".into());
    let err = Action::from_model_value(
        &json!({"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 2, "y": 2, "t": 0}]}),
    )
    .unwrap_err();
    assert_eq!(err, "unknown field `t` in drag path point 1".into());
    // What the schema defines parses, `keys` included where it belongs.
    let a = Action::from_model_value(
        &json!({"type": "click", "button": "right", "x": 3, "y": 4, "keys": null}),
    )
    .unwrap();
    assert_eq!(
        a,
        Action::Click {
            button: Button::Right,
            x: 3,
            y: 4,
            keys: None
        }
    );
    let err = Action::from_model_value(&json!({"type": "type", "text": "a", "keys": ["CTRL"]}))
        .unwrap_err();
    assert_eq!(err, "unknown field `keys`".into());
    let err = Action::from_model_value(&json!({"type": "click", "x": 3, "y": 4})).unwrap_err();
    assert!(err.to_string().contains("button"), "{err}");
    let err = Action::from_model_value(&json!({"type": "launch_missiles"})).unwrap_err();
    assert!(err.to_string().contains("launch_missiles"), "{err}");
}

#[test]
fn the_fields_the_host_accepts_are_the_schemas() {
    let spec = openapi::openai_spec();
    let schemas = &spec["components"]["schemas"];
    let alternatives = schemas["ComputerAction"]["oneOf"].as_array().unwrap();
    assert_eq!(alternatives.len(), 9);
    for alt in alternatives {
        let name = alt["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
        let schema = &schemas[name];
        let kind = schema["properties"]["type"]["enum"][0]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no type tag"));
        let mut want: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        want.sort_unstable();
        let mut have = Action::schema_fields(kind)
            .unwrap_or_else(|| panic!("`{kind}` ({name}) is not accepted"))
            .to_vec();
        have.sort_unstable();
        assert_eq!(have, want, "{name}");
    }
    let mut point: Vec<&str> = schemas["CoordParam"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    point.sort_unstable();
    assert_eq!(point, ["x", "y"]);
}

#[test]
fn limits_are_checked() {
    use sandtop_protocol::limits;
    assert!(
        Action::Type {
            text: "a\0b".into()
        }
        .check_limits()
        .is_err()
    );
    assert!(
        Action::Type {
            text: "a\u{3}".into()
        }
        .check_limits()
        .is_err()
    );
    assert!(
        Action::Type {
            text: "tab\tnew\nline\r\n".into()
        }
        .check_limits()
        .is_ok()
    );
    let long = "x".repeat(limits::MAX_TYPE_CHARS + 1);
    assert!(Action::Type { text: long }.check_limits().is_err());
    let path = vec![Coord { x: 0, y: 0 }; limits::MAX_DRAG_POINTS + 1];
    assert!(Action::Drag { path, keys: None }.check_limits().is_err());
    assert!(
        Action::Drag {
            path: vec![Coord { x: 0, y: 0 }],
            keys: None
        }
        .check_limits()
        .is_err()
    );
    let d = limits::MAX_SCROLL_DISTANCE as i64 + 1;
    assert!(
        Action::Scroll {
            x: 0,
            y: 0,
            scroll_x: 0,
            scroll_y: -d,
            keys: None
        }
        .check_limits()
        .is_err()
    );
    assert!(Action::Keypress { keys: vec![] }.check_limits().is_err());
    let many = vec!["a".to_string(); limits::MAX_KEYS + 1];
    assert!(Action::Keypress { keys: many }.check_limits().is_err());
}

#[test]
fn error_codes_serialize_as_their_names_and_map_to_http() {
    for code in ErrorCode::ALL {
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        let status = code.http_status();
        assert!((400..600).contains(&status), "{code}: {status}");
    }
    let body = ErrorBody::new(ErrorCode::Busy, "another input call is running");
    assert_eq!(
        serde_json::to_value(&body).unwrap(),
        json!({"code": "busy", "message": "another input call is running"})
    );
}

#[test]
fn screenshot_options_default_to_png_full_screen() {
    let o: ScreenshotOptions = serde_json::from_value(json!({})).unwrap();
    assert_eq!(o, ScreenshotOptions::default());
    assert!(o.size.is_none() && o.region.is_none() && !o.cursor);
}

/// The actions the Anthropic computer toolset needs (docs/contract.md rule
/// 62): strict on the daemon's wire, never accepted from an OpenAI model.
#[test]
fn held_buttons_and_hold_key_are_daemon_actions_a_model_cannot_send() {
    use sandtop_protocol::{ActionRejection, Button, limits};
    for (v, want) in [
        (
            json!({"type": "mouse_down", "button": "left"}),
            Action::MouseDown {
                button: Button::Left,
            },
        ),
        (
            json!({"type": "mouse_up", "button": "right"}),
            Action::MouseUp {
                button: Button::Right,
            },
        ),
        (
            json!({"type": "hold_key", "keys": ["shift"], "duration_ms": 500}),
            Action::HoldKey {
                keys: vec!["shift".into()],
                duration_ms: 500,
            },
        ),
    ] {
        let a: Action = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(a, want);
        assert_eq!(serde_json::to_value(&a).unwrap(), v);
        assert!(a.is_input());
        assert_eq!(Action::schema_fields(a.kind()), None);
        let refused = Action::from_model_value(&v).unwrap_err();
        assert!(
            refused.to_string().contains("unknown action type"),
            "{refused}"
        );
        // Sandtop's own vocabulary (an Anthropic model's) accepts them.
        assert_eq!(Action::from_model_value_with(&v, true).unwrap(), want);
    }
    for extra in [
        json!({"type": "mouse_down", "button": "left", "x": 1}),
        json!({"type": "hold_key", "keys": ["a"], "duration_ms": 5, "repeat": 2}),
    ] {
        let refused = Action::from_model_value_with(&extra, true).unwrap_err();
        assert!(refused.to_string().contains("unknown field"), "{refused}");
        assert!(serde_json::from_value::<Action>(extra).is_err());
    }
    let long = Action::HoldKey {
        keys: vec!["a".into()],
        duration_ms: limits::MAX_HOLD_KEY_MS + 1,
    };
    assert!(matches!(
        long.check_limits(),
        Err(ActionRejection::Limit(_))
    ));
    let none = Action::HoldKey {
        keys: vec![],
        duration_ms: 1,
    };
    assert!(matches!(
        none.check_limits(),
        Err(ActionRejection::Invalid(_))
    ));
    let ok = Action::HoldKey {
        keys: vec!["shift".into(), "a".into()],
        duration_ms: limits::MAX_HOLD_KEY_MS,
    };
    assert_eq!(ok.check_limits(), Ok(()));
    assert_eq!(ok.key_names(), ["shift", "a"]);
}
