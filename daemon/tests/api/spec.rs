//! The spec itself: daemon/openapi.yaml against the wire types and the router.

use super::*;

fn spec_schema(name: &str) -> &'static Value {
    daemon_spec()
        .pointer(&format!("/components/schemas/{name}"))
        .unwrap_or_else(|| panic!("daemon/openapi.yaml has no schema {name}"))
}

/// The schema `name` lists exactly the fields of `value` (a serialized
/// Rust value with every optional field set), refuses others, and accepts
/// the value.
#[track_caller]
pub(crate) fn assert_schema_fields(name: &str, value: &Value) {
    let s = spec_schema(name);
    let listed: BTreeSet<&str> = s["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{name} has no properties"))
        .keys()
        .map(String::as_str)
        .collect();
    let fields: BTreeSet<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(listed, fields, "the fields of {name}");
    assert_eq!(
        s["additionalProperties"],
        json!(false),
        "{name}: the Rust type denies unknown fields"
    );
    let v = validator(daemon_spec(), name);
    let problems = errors(&v, value);
    assert!(problems.is_empty(), "{name}: {problems:?}\n{value}");
}

#[test]
fn openapi_schemas_have_exactly_the_fields_of_the_rust_types() {
    let size = Size::new(1920, 1080);
    let map = ScaleMap::fit(size, None, Some(Size::new(960, 540)), Fit::Contain).unwrap();
    let keys = Some(vec!["CTRL".to_string()]);
    let actions = [
        (
            "ClickAction",
            Action::Click {
                button: Button::Right,
                x: 1,
                y: 2,
                keys: keys.clone(),
            },
        ),
        (
            "DoubleClickAction",
            Action::DoubleClick {
                x: 1,
                y: 2,
                keys: keys.clone(),
            },
        ),
        (
            "DragAction",
            Action::Drag {
                path: vec![Coord { x: 1, y: 2 }, Coord { x: 3, y: 4 }],
                keys: keys.clone(),
            },
        ),
        (
            "KeypressAction",
            Action::Keypress {
                keys: vec!["CTRL".into(), "C".into()],
            },
        ),
        (
            "MoveAction",
            Action::Move {
                x: 1,
                y: 2,
                keys: keys.clone(),
            },
        ),
        ("ScreenshotAction", Action::Screenshot {}),
        (
            "ScrollAction",
            Action::Scroll {
                x: 1,
                y: 2,
                scroll_x: -3,
                scroll_y: 300,
                keys: keys.clone(),
            },
        ),
        (
            "TypeAction",
            Action::Type {
                text: "hi\n".into(),
            },
        ),
        ("WaitAction", Action::Wait {}),
        (
            "MouseDownAction",
            Action::MouseDown {
                button: Button::Left,
            },
        ),
        (
            "MouseUpAction",
            Action::MouseUp {
                button: Button::Left,
            },
        ),
        (
            "HoldKeyAction",
            Action::HoldKey {
                keys: vec!["SHIFT".into()],
                duration_ms: 500,
            },
        ),
    ];
    let mapping = &spec_schema("Action")["discriminator"]["mapping"];
    for (name, action) in &actions {
        let value = serde_json::to_value(action).unwrap();
        assert_schema_fields(name, &value);
        assert_eq!(
            mapping[action.kind()],
            json!(format!("#/components/schemas/{name}")),
            "the discriminator maps `{}`",
            action.kind()
        );
        let v = validator(daemon_spec(), "Action");
        assert!(v.is_valid(&value), "Action refuses {value}");
    }
    assert_eq!(
        spec_schema("Action")["oneOf"].as_array().unwrap().len(),
        actions.len()
    );
    for b in Button::ALL {
        let b = serde_json::to_value(b).unwrap();
        assert!(
            spec_schema("Button")["enum"]
                .as_array()
                .unwrap()
                .contains(&b)
        );
    }

    let options = ScreenshotOptions {
        size: Some(Size::new(960, 540)),
        fit: Fit::Stretch,
        region: Some(Rect {
            x: 1,
            y: 2,
            width: 3,
            height: 4,
        }),
        format: ImageFormat::Webp,
        cursor: true,
    };
    assert_schema_fields("ScreenshotOptions", &serde_json::to_value(options).unwrap());
    let request = BatchRequest {
        actions: actions.iter().map(|(_, a)| a.clone()).collect(),
        screenshot: options,
        expect_scale_map: Some(map),
        final_screenshot: false,
    };
    assert_schema_fields("BatchRequest", &serde_json::to_value(&request).unwrap());
    assert_schema_fields("ScaleMap", &serde_json::to_value(map).unwrap());
    assert_schema_fields("Size", &serde_json::to_value(size).unwrap());
    assert_schema_fields("Rect", &serde_json::to_value(map.region).unwrap());
    assert_schema_fields(
        "CursorReply",
        &serde_json::to_value(sandtop_protocol::CursorReply {
            x: 1,
            y: 2,
            scale_map: map,
        })
        .unwrap(),
    );
    assert_schema_fields(
        "Coord",
        &serde_json::to_value(Coord { x: -1, y: 2 }).unwrap(),
    );

    let shot = Screenshot {
        format: ImageFormat::Png,
        width: 960,
        height: 540,
        data: "iVBORw0KGgo=".into(),
        scale_map: map,
    };
    let timings = Timings {
        total_ms: 3.5,
        settled: true,
        // Written only when true: true shows every field.
        reused: true,
        ..Timings::default()
    };
    assert_schema_fields("Screenshot", &serde_json::to_value(&shot).unwrap());
    assert_schema_fields("Timings", &serde_json::to_value(timings).unwrap());
    assert_schema_fields(
        "BatchResponse",
        &serde_json::to_value(BatchResponse {
            executed: 9,
            screenshot: Some(shot.clone()),
            timings,
        })
        .unwrap(),
    );
    assert_schema_fields(
        "ScreenshotResponse",
        &serde_json::to_value(ScreenshotResponse {
            screenshot: shot,
            timings,
        })
        .unwrap(),
    );
    let capabilities = Capabilities {
        xtest: true,
        shm: true,
        damage: true,
        xfixes: false,
        randr: true,
        formats: vec![ImageFormat::Png, ImageFormat::Webp, ImageFormat::Jpeg],
    };
    assert_schema_fields(
        "Capabilities",
        &serde_json::to_value(&capabilities).unwrap(),
    );
    assert_schema_fields("Limits", &serde_json::to_value(Limits::current()).unwrap());
    for state in [
        DaemonState::Open,
        DaemonState::Draining,
        DaemonState::Closed,
    ] {
        assert_schema_fields(
            "InfoReply",
            &serde_json::to_value(InfoReply {
                info: Info {
                    protocol: PROTOCOL_VERSION.into(),
                    daemon_version: "0.1.0".into(),
                    display: Some(size),
                    x_display: Some(":0".into()),
                    capabilities: capabilities.clone(),
                    limits: Limits::current(),
                },
                state,
            })
            .unwrap(),
        );
    }
    assert_eq!(
        spec_schema("DaemonState")["enum"],
        json!(["open", "draining", "closed"]),
        "DaemonState lists the states of protocol/src/api.rs"
    );
    for (status, wm) in [
        (HealthStatus::Ok, None),
        (HealthStatus::Degraded, Some(false)),
        (HealthStatus::Down, Some(true)),
    ] {
        let health = Health {
            status,
            x_connected: status != HealthStatus::Down,
            display: (status != HealthStatus::Down).then_some(size),
            window_manager: wm,
            display_restarts: 2,
            uptime_ms: 1234,
        };
        assert_schema_fields("Health", &serde_json::to_value(&health).unwrap());
    }
    // The browser's types.
    {
        use sandtop_protocol::browser::{
            BrowserImage, BrowserOutcome, BrowserRead, BrowserReply, BrowserState, BrowserTab,
            Omission, ReadElement, ReadOption, ReadRole, ReadScope,
        };
        let tab = BrowserTab {
            id: "t1".into(),
            title: "Title".into(),
            url: "http://127.0.0.1:8080/".into(),
            active: true,
            title_truncated: false,
        };
        assert_schema_fields("BrowserTab", &serde_json::to_value(&tab).unwrap());
        let state = BrowserState { tabs: vec![tab] };
        assert_schema_fields("BrowserState", &serde_json::to_value(&state).unwrap());
        let option = ReadOption {
            label: "Red".into(),
            value: "r".into(),
            selected: Some(true),
        };
        assert_schema_fields("ReadOption", &serde_json::to_value(&option).unwrap());
        let element = ReadElement {
            reference: "ab.1".into(),
            role: ReadRole::Listbox,
            label: "Colour".into(),
            value: Some("r".into()),
            options: Some(vec![option]),
            checked: Some(false),
        };
        assert_schema_fields("ReadElement", &serde_json::to_value(&element).unwrap());
        for outcome in [
            BrowserOutcome::Done,
            BrowserOutcome::Text { text: "ok".into() },
            BrowserOutcome::Read(BrowserRead {
                version: 1,
                text: "t".into(),
                elements: vec![element.clone()],
                omitted: vec![Omission::Private, Omission::NameLimit],
                scopes: None,
            }),
            BrowserOutcome::Read(BrowserRead {
                version: 1,
                text: String::new(),
                elements: vec![element],
                omitted: Vec::new(),
                scopes: Some(vec![ReadScope {
                    reference: "d.s9".into(),
                    label: "Billing".into(),
                }]),
            }),
            BrowserOutcome::Image(BrowserImage {
                png_base64: "iVBORw0KGgo=".into(),
                width: 2,
                height: 3,
            }),
        ] {
            let reply = BrowserReply {
                outcome,
                state: state.clone(),
                elapsed_ms: 4,
            };
            assert_schema_fields("BrowserReply", &serde_json::to_value(&reply).unwrap());
        }
        let v = validator(daemon_spec(), "BrowserCall");
        for call in [
            json!({"member": "click", "tab_id": null, "target": "ab.1"}),
            json!({"member": "zoom", "tab_id": "t1", "region": [0, 0, 5, 5]}),
            json!({"member": "wait_for", "tab_id": null, "text": "x", "timeout_ms": 30000}),
            json!({"member": "new_tab", "url": null}),
        ] {
            let parsed: sandtop_protocol::BrowserCall =
                sandtop_protocol::from_json_objects(call.to_string().as_bytes()).unwrap();
            let back = serde_json::to_value(&parsed).unwrap();
            assert!(
                errors(&v, &back).is_empty(),
                "{back}: {:?}",
                errors(&v, &back)
            );
        }
        assert!(!errors(&v, &json!({"member": "click", "target": "a", "extra": 1})).is_empty());
    }
    let full_error = ErrorBody {
        index: Some(1),
        executed: Some(1),
        partial: Some(true),
        ..ErrorBody::new(ErrorCode::DisplayUnavailable, "x")
    };
    assert_schema_fields("ErrorBody", &serde_json::to_value(&full_error).unwrap());
    let codes: BTreeSet<String> = spec_schema("ErrorCode")["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let ours: BTreeSet<String> = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(
        codes, ours,
        "ErrorCode lists every code of protocol/src/error.rs"
    );
    let table = spec_schema("ErrorCode")["description"].as_str().unwrap();
    for c in ErrorCode::ALL {
        let entry = format!("`{}` {}", c.as_str(), c.http_status());
        assert!(table.contains(&entry), "ErrorCode's table lacks {entry}");
    }
}

#[test]
fn openapi_paths_statuses_and_limits_match_the_code() {
    let spec = daemon_spec();
    assert_eq!(spec["openapi"].as_str().unwrap(), "3.1.0");
    assert_eq!(spec["info"]["version"].as_str().unwrap(), PROTOCOL_VERSION);
    assert_eq!(spec["security"], json!([{"bearer": []}]));
    let bearer = &spec["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (&bearer["type"], &bearer["scheme"]),
        (&json!("http"), &json!("bearer"))
    );

    let ops: &[(&str, &str, &str, &[&str])] = &[
        (
            paths::HEALTH,
            "get",
            "Health",
            &["200", "403", "405", "500", "503"],
        ),
        (
            paths::INFO,
            "get",
            "InfoReply",
            &["200", "401", "403", "405", "500", "503"],
        ),
        (
            paths::ACTIONS,
            "post",
            "BatchResponse",
            &[
                "200", "400", "401", "403", "405", "409", "413", "415", "422", "499", "500", "503",
                "504",
            ],
        ),
        (
            paths::SCREENSHOT,
            "post",
            "ScreenshotResponse",
            &[
                "200", "400", "401", "403", "405", "409", "413", "415", "499", "500", "503", "504",
            ],
        ),
        (
            paths::FRAME,
            "post",
            "FrameReply",
            &[
                "200", "400", "401", "403", "405", "413", "415", "500", "503", "504",
            ],
        ),
        (
            paths::BROWSER_STATE,
            "post",
            "BrowserState",
            &[
                "200", "400", "401", "403", "405", "409", "413", "415", "500", "502", "503", "504",
            ],
        ),
        (
            paths::BROWSER_CALL,
            "post",
            "BrowserReply",
            &[
                "200", "400", "401", "403", "404", "405", "409", "413", "415", "422", "500", "502",
                "503", "504",
            ],
        ),
        (
            paths::FILES_READ,
            "post",
            "ReadFileReply",
            &[
                "200", "400", "401", "403", "404", "405", "413", "415", "422", "500", "503", "504",
            ],
        ),
        (
            paths::CURSOR,
            "post",
            "CursorReply",
            &[
                "200", "400", "401", "403", "405", "413", "415", "422", "500", "503", "504",
            ],
        ),
        (
            paths::CLOCK,
            "post",
            "ClockReply",
            &[
                "200", "400", "401", "403", "404", "405", "413", "415", "500", "503", "504",
            ],
        ),
    ];
    assert_eq!(spec["paths"].as_object().unwrap().len(), ops.len());
    let resolve = |v: &'static Value| -> &'static Value {
        match v["$ref"].as_str() {
            Some(r) => spec.pointer(r.trim_start_matches('#')).unwrap(),
            None => v,
        }
    };
    for &(path, method, ok, statuses) in ops {
        let item = spec["paths"][path].as_object().unwrap();
        assert_eq!(item.len(), 1, "{path} takes one method");
        let op = &spec["paths"][path][method];
        let responses = op["responses"].as_object().unwrap();
        let listed: BTreeSet<&str> = responses.keys().map(String::as_str).collect();
        let wanted: BTreeSet<&str> = statuses.iter().copied().collect();
        assert_eq!(listed, wanted, "statuses of {method} {path}");
        for (status, r) in responses {
            let r = resolve(r);
            let body = r["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{path} {status} has no JSON body"));
            let want = if status == "200" || (path == paths::HEALTH && status == "503") {
                ok
            } else {
                "ErrorBody"
            };
            assert_eq!(
                body,
                format!("#/components/schemas/{want}"),
                "{path} {status}"
            );
            if status == "405" {
                assert!(r["headers"]["Allow"].is_object(), "{path}: 405 has Allow");
            }
            if status == "401" {
                assert!(r["headers"]["WWW-Authenticate"].is_object());
            }
        }
    }
    assert_eq!(spec["paths"][paths::HEALTH]["get"]["security"], json!([]));
    assert!(spec["paths"][paths::INFO]["get"]["security"].is_null());
    let body_of = |path: &str| &spec["paths"][path]["post"]["requestBody"];
    assert_eq!(body_of(paths::ACTIONS)["required"], json!(true));
    assert_eq!(
        body_of(paths::ACTIONS)["content"]["application/json"]["schema"]["$ref"],
        json!("#/components/schemas/BatchRequest")
    );
    assert_eq!(body_of(paths::SCREENSHOT)["required"], json!(false));
    assert_eq!(
        body_of(paths::SCREENSHOT)["content"]["application/json"]["schema"]["$ref"],
        json!("#/components/schemas/ScreenshotOptions")
    );

    // The numbers in the spec are the numbers in protocol/src/limits.rs.
    assert_eq!(
        spec_schema("Limits")["examples"][0],
        serde_json::to_value(Limits::current()).unwrap()
    );
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));
    let s = spec_schema;
    assert_eq!(
        n(&s("BatchRequest")["properties"]["actions"]["maxItems"]),
        limits::MAX_ACTIONS as u64
    );
    let path = &s("DragAction")["properties"]["path"];
    assert_eq!(n(&path["minItems"]), 2);
    assert_eq!(n(&path["maxItems"]), limits::MAX_DRAG_POINTS as u64);
    assert_eq!(
        n(&s("TypeAction")["properties"]["text"]["maxLength"]),
        limits::MAX_TYPE_CHARS as u64
    );
    let chord = &s("KeypressAction")["properties"]["keys"];
    assert_eq!(n(&chord["minItems"]), 1);
    assert_eq!(n(&chord["maxItems"]), limits::MAX_KEYS as u64);
    assert_eq!(
        n(&s("HeldKeys")["oneOf"][0]["maxItems"]),
        limits::MAX_KEYS as u64
    );
    assert_eq!(
        n(&s("KeyName")["maxLength"]),
        limits::MAX_KEY_NAME_BYTES as u64
    );
    for axis in ["scroll_x", "scroll_y"] {
        let a = &s("ScrollAction")["properties"][axis];
        assert_eq!(n(&a["maximum"]), limits::MAX_SCROLL_DISTANCE);
        assert_eq!(
            a["minimum"].as_i64().unwrap(),
            -(limits::MAX_SCROLL_DISTANCE as i64)
        );
    }
    for side in ["width", "height"] {
        assert_eq!(
            n(&s("Size")["properties"][side]["maximum"]),
            u64::from(limits::MAX_DIMENSION)
        );
    }
    let actions = spec["paths"][paths::ACTIONS]["post"]["description"]
        .as_str()
        .unwrap();
    for ms in [
        limits::SETTLE_QUIET_MS,
        limits::SETTLE_DRAWN_QUIET_MS,
        limits::SETTLE_CAP_MS,
    ] {
        assert!(actions.contains(&format!("{ms} ms")), "settle {ms} ms");
    }
    let wait = s("WaitAction")["description"].as_str().unwrap();
    for ms in [limits::WAIT_QUIET_MS, limits::WAIT_CAP_MS] {
        assert!(wait.contains(&format!("{ms} ms")), "wait {ms} ms");
    }
    let top = spec["info"]["description"].as_str().unwrap();
    assert!(top.contains(&format!("{} bytes", limits::MAX_BODY_BYTES)));
    assert!(top.contains(&format!("{} ms", limits::REQUEST_DEADLINE_MS)));
    assert!(top.contains(&format!("More than {}", sandtopd::api::MAX_IN_FLIGHT)));
}

/// The request schemas accept exactly what the daemon runs: for bodies
/// whose coordinates and capture region lie inside the screen and whose key
/// names exist (what a schema cannot know), schema-valid <=> 200.
#[tokio::test]
async fn openapi_request_schemas_agree_with_the_daemon() {
    let fx = Fx::new();
    let n_waits = |n: usize| json!({"actions": vec![json!({"type": "wait"}); n]});
    let drag = |n: usize| {
        json!({"actions": [{"type": "drag",
            "path": (0..n).map(|i| json!({"x": i % 100, "y": 5})).collect::<Vec<_>>()}]})
    };
    let batches = vec![
        json!({"actions": []}),
        json!({"actions": [click(1, 1)]}),
        json!({"actions": [{"type": "click", "button": "wheel", "x": 1, "y": 1, "keys": null}]}),
        json!({"actions": [{"type": "click", "button": "back", "x": 1, "y": 1, "keys": ["CTRL"]}]}),
        json!({"actions": [{"type": "double_click", "x": 5, "y": 5}]}),
        json!({"actions": [{"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 9, "y": 9}], "keys": []}]}),
        json!({"actions": [{"type": "keypress", "keys": ["a"]}]}),
        json!({"actions": [mv(3, 3), {"type": "screenshot"}, {"type": "wait"}]}),
        json!({"actions": [{"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": -10000}]}),
        json!({"actions": [type_text("hi\r\n\tthere")]}),
        json!({"actions": [type_text(&"x".repeat(limits::MAX_TYPE_CHARS))]}),
        n_waits(limits::MAX_ACTIONS),
        drag(limits::MAX_DRAG_POINTS),
        json!({"actions": [{"type": "keypress", "keys": vec!["a"; limits::MAX_KEYS]}]}),
        json!({"actions": [{"type": "keypress", "keys": ["Control_L"]}]}),
        json!({"actions": [], "screenshot": {}}),
        json!({"actions": [], "screenshot": {"size": null, "region": null, "fit": "stretch",
            "format": "webp", "cursor": true}}),
        json!({"actions": [], "screenshot": {"size": {"width": 640, "height": 480}}}),
        json!({"actions": [], "screenshot": {"region": {"x": 10, "y": 10, "width": 100, "height": 50}}}),
        json!({"actions": [], "expect_scale_map": null}),
        json!({"actions": [], "expect_scale_map": ScaleMap::identity(SCREEN)}),
        // 400: structure.
        json!({}),
        json!({"actions": null}),
        json!({"actions": {}}),
        json!({"actions": [], "bogus": 1}),
        json!({"actions": [{"type": "click", "button": "left", "x": 1, "y": 1, "extra": 1}]}),
        json!({"actions": [{"type": "screenshot", "extra": 1}]}),
        json!({"actions": [{"type": "wait", "ms": 500}]}),
        json!({"actions": [{"type": "launch_missiles"}]}),
        json!({"actions": [{"button": "left", "x": 1, "y": 1}]}),
        json!({"actions": [{"type": "click", "button": "middle", "x": 1, "y": 1}]}),
        json!({"actions": [{"type": "click", "button": "left", "x": "1", "y": 1}]}),
        json!({"actions": [{"type": "click", "button": "left", "x": 1}]}),
        json!({"actions": [{"type": "move", "x": 1, "y": 1, "keys": "CTRL"}]}),
        json!({"actions": [{"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 2, "y": 2, "z": 0}]}]}),
        json!({"actions": [{"type": "scroll", "x": 1, "y": 1, "scroll_x": 0}]}),
        json!({"actions": [{"type": "type"}]}),
        json!({"actions": [], "screenshot": null}),
        json!({"actions": [], "screenshot": {"zoom": 2}}),
        json!({"actions": [], "screenshot": {"format": "jpeg"}}),
        json!({"actions": [], "screenshot": {"fit": "cover"}}),
        json!({"actions": [], "screenshot": {"size": {"width": 640}}}),
        json!({"actions": [], "screenshot": {"size": {"width": 0, "height": 10}}}),
        json!({"actions": [], "screenshot": {"size": {"width": 9000, "height": 10}}}),
        json!({"actions": [], "screenshot": {"region": {"x": 0, "y": 0, "width": 0, "height": 5}}}),
        json!({"actions": [], "expect_scale_map": {"screen": {"width": 1920, "height": 1080}}}),
        // 422: limits the schema states.
        n_waits(limits::MAX_ACTIONS + 1),
        drag(1),
        drag(limits::MAX_DRAG_POINTS + 1),
        json!({"actions": [{"type": "keypress", "keys": []}]}),
        json!({"actions": [{"type": "keypress", "keys": vec!["a"; limits::MAX_KEYS + 1]}]}),
        json!({"actions": [{"type": "move", "x": 1, "y": 1, "keys": vec!["a"; limits::MAX_KEYS + 1]}]}),
        json!({"actions": [{"type": "keypress", "keys": [""]}]}),
        json!({"actions": [{"type": "keypress", "keys": ["a".repeat(limits::MAX_KEY_NAME_BYTES + 1)]}]}),
        json!({"actions": [{"type": "scroll", "x": 1, "y": 1, "scroll_x": 10001, "scroll_y": 0}]}),
        json!({"actions": [{"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": -10001}]}),
        json!({"actions": [type_text(&"x".repeat(limits::MAX_TYPE_CHARS + 1))]}),
        json!({"actions": [type_text("nul\u{0}")]}),
        json!({"actions": [type_text("bell\u{7}")]}),
        json!({"actions": [type_text("escape\u{1b}[2J")]}),
        json!({"actions": [type_text("next line\u{85}")]}),
    ];
    for body in &batches {
        let valid = schema("BatchRequest").is_valid(body);
        let reply = fx.batch(body.clone()).await;
        let shown = brief(body);
        assert!(
            matches!(reply.status.as_u16(), 200 | 400 | 422),
            "{shown}: {reply}"
        );
        assert_eq!(
            valid,
            reply.status == StatusCode::OK,
            "the schema says {} for {shown}, the daemon answered {reply}",
            if valid { "valid" } else { "invalid" },
        );
    }
    let options = [
        json!({}),
        json!({"size": {"width": 640, "height": 480}, "fit": "contain", "cursor": true}),
        json!({"format": "webp"}),
        json!({"zoom": 2}),
        json!({"format": "gif"}),
        json!({"size": {"width": 640, "height": 480, "depth": 8}}),
        json!({"region": {"x": 0, "y": 0, "width": 10}}),
    ];
    for body in &options {
        let valid = schema("ScreenshotOptions").is_valid(body);
        let reply = fx.call(fx.post(paths::SCREENSHOT, body)).await;
        assert_eq!(valid, reply.status == StatusCode::OK, "{body}: {}", reply);
    }
}

/// Every body the daemon reads is a JSON object (the spec says so, and
/// docs/contract.md rule 1 says incompatible input is never silently taken).
/// serde's derived `Deserialize` also takes a struct as an array of its
/// fields in order, so these are read as valid requests today.
#[tokio::test]
async fn a4_structs_are_read_from_json_objects_only() {
    let fx = Fx::new();
    let arrays = [
        (paths::ACTIONS, json!([[]])),
        (
            paths::ACTIONS,
            json!([[{"type": "wait"}], [null, "contain", null, "png", false]]),
        ),
        (
            paths::ACTIONS,
            json!({"actions": [{"type": "drag", "path": [[1, 1], [5, 5]]}]}),
        ),
        (
            paths::ACTIONS,
            json!({"actions": [], "screenshot": {"size": [640, 480]}}),
        ),
        (paths::SCREENSHOT, json!([])),
        (paths::SCREENSHOT, json!([[640, 480]])),
    ];
    let mut accepted = Vec::new();
    for (path, body) in arrays {
        let name = if path == paths::ACTIONS {
            "BatchRequest"
        } else {
            "ScreenshotOptions"
        };
        assert!(!schema(name).is_valid(&body), "the spec refuses {body}");
        let reply = fx.call(fx.post(path, &body)).await;
        if reply.status != StatusCode::BAD_REQUEST {
            accepted.push(format!("{path} {body}: {}", reply.status));
        }
    }
    assert!(accepted.is_empty(), "read as valid: {accepted:#?}");
    assert_eq!(fx.events(), vec![], "an array body reached the driver");
}
