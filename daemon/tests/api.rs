//! The api tier: the real router and desktop task over the fake driver, no
//! X server and (but for two tests) no sockets.
//!
//! 1. [`Fx`] builds `sandtopd::api::router` on `desktop::spawn` with a
//!    [`FakeDriver`]; the fake records every primitive it receives, so a
//!    test sees exactly what would have reached X.
//! 2. Every request goes through [`Fx::call`], which checks the reply
//!    against `daemon/openapi.yaml` (success bodies against their schema,
//!    failures against `ErrorBody`, the status against the code) and that no
//!    error body leaks the token, a path or a backtrace (A12).
//! 3. Tests are named after the docs/security.md property (A1..A15) or the
//!    docs/contract.md §1 rule they pin.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt as _;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use sandtop_client::Client;
use sandtop_client::Token;
use sandtop_protocol::{
    Action, BatchRequest, BatchResponse, Button, Capabilities, Coord, DaemonState, ErrorBody,
    ErrorCode, Fit, Health, HealthStatus, ImageFormat, Info, InfoReply, Limits, PROTOCOL_VERSION,
    Rect, ScaleMap, Screenshot, ScreenshotOptions, ScreenshotResponse, Size, Timings,
    check_protocol, limits, paths,
};
use sandtop_testkit::held::{self, Stroke};
use sandtop_testkit::openapi::{daemon_spec, errors, validator};
use sandtopd::api::server::{bind_unix, serve_with};
use sandtopd::api::{ApiState, router};
use sandtopd::driver::Driver;
use sandtopd::driver::fake::{Event, FakeDriver, FakeState};
use sandtopd::supervise::DisplayHealth;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower::ServiceExt as _;

// ---------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------

/// The fake screen most tests use.
const SCREEN: Size = Size::new(1920, 1080);
/// No request of this tier may take longer than this (a hang fails).
const CALL_LIMIT: Duration = Duration::from_secs(20);

type FakeLog = Arc<Mutex<FakeState>>;

/// A router on a desktop task on fake drivers.
struct Fx {
    router: Router,
    api: Arc<ApiState>,
    /// The state of every driver the desktop opened, in order (a fatal
    /// driver error makes it reconnect, which opens a fresh fake).
    drivers: Arc<Mutex<Vec<FakeLog>>>,
    desktop: std::thread::JoinHandle<()>,
}

impl Fx {
    fn new() -> Fx {
        Fx::build(SCREEN, |_| {})
    }

    fn build(screen: Size, tune: impl FnOnce(&mut ApiState)) -> Fx {
        let drivers: Arc<Mutex<Vec<FakeLog>>> = Arc::default();
        let opened = Arc::clone(&drivers);
        let (handle, desktop) = sandtopd::desktop::spawn(Box::new(move || {
            let fake = FakeDriver::new(screen);
            opened.lock().unwrap().push(fake.state());
            Ok(Box::new(fake) as Box<dyn Driver>)
        }));
        let display = Arc::new(DisplayHealth::default());
        display.mark_ok();
        let mut state = ApiState::new(handle, Token::generate().unwrap(), display);
        tune(&mut state);
        let api = Arc::new(state);
        let end = Instant::now() + Duration::from_secs(5);
        let ready = || {
            api.desktop.status.connected.load(Ordering::Acquire)
                && !drivers.lock().unwrap().is_empty()
        };
        while !ready() {
            assert!(Instant::now() < end, "the desktop task never connected");
            std::thread::sleep(Duration::from_millis(2));
        }
        Fx {
            router: router(Arc::clone(&api)),
            api,
            drivers,
            desktop,
        }
    }

    fn token(&self) -> &str {
        self.api.token.expose()
    }

    /// The driver the desktop uses now.
    fn fake(&self) -> FakeLog {
        Arc::clone(self.drivers.lock().unwrap().last().unwrap())
    }

    fn knobs(&self, f: impl FnOnce(&mut FakeState)) {
        f(&mut self.fake().lock().unwrap());
    }

    /// Every primitive every driver received, in order.
    fn events(&self) -> Vec<Event> {
        let drivers = self.drivers.lock().unwrap();
        drivers
            .iter()
            .flat_map(|d| d.lock().unwrap().events.clone())
            .collect()
    }

    /// The events so far, forgetting them.
    fn take_events(&self) -> Vec<Event> {
        let drivers = self.drivers.lock().unwrap();
        drivers
            .iter()
            .flat_map(|d| std::mem::take(&mut d.lock().unwrap().events))
            .collect()
    }

    fn authed(&self, method: Method, uri: &str) -> http::request::Builder {
        bare(method, uri).header(header::AUTHORIZATION, format!("Bearer {}", self.token()))
    }

    fn get(&self, uri: &str) -> Request<Body> {
        self.authed(Method::GET, uri).body(Body::empty()).unwrap()
    }

    fn post(&self, uri: &str, body: &Value) -> Request<Body> {
        self.authed(Method::POST, uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap()
    }

    /// Sends a request through the router and checks the reply against
    /// the spec (see [`check_reply`]).
    async fn call(&self, req: Request<Body>) -> Reply {
        let path = req.uri().path().to_string();
        let resp = tokio::time::timeout(CALL_LIMIT, self.router.clone().oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer within {CALL_LIMIT:?}"))
            .unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(
            ct.starts_with("application/json"),
            "{path}: {status} answered with content type `{ct}`"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let json = check_reply(&path, status, &body, self.token());
        Reply {
            status,
            headers,
            json,
        }
    }

    /// `POST /v1/actions` with this body.
    async fn batch(&self, body: Value) -> Reply {
        self.call(self.post(paths::ACTIONS, &body)).await
    }

    /// `POST /v1/actions` of these actions in screen space.
    async fn run(&self, actions: Value) -> Reply {
        self.batch(json!({ "actions": actions })).await
    }

    async fn health(&self) -> Reply {
        self.call(
            bare(Method::GET, paths::HEALTH)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    /// Waits until no input request holds the gate (the job is over).
    async fn wait_idle(&self, within: Duration) {
        let end = Instant::now() + within;
        while self.api.desktop.gate.available_permits() == 0 {
            assert!(
                Instant::now() < end,
                "an input job still runs after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the fake has recorded at least `n` events.
    async fn wait_events(&self, n: usize, within: Duration) {
        let end = Instant::now() + within;
        while self.events().len() < n {
            assert!(
                Instant::now() < end,
                "fewer than {n} events after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// A request with the Host header host-cli sends and nothing else.
fn bare(method: Method, uri: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "sandtopd")
}

/// A checked reply.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, brief(&self.json))
    }
}

/// A reply for a failure message: screenshot data elided, at most 800
/// characters.
fn brief(json: &Value) -> String {
    let mut v = json.clone();
    if let Some(data) = v.pointer_mut("/screenshot/data") {
        let n = data.as_str().map_or(0, str::len);
        *data = json!(format!("<{n} base64 characters>"));
    }
    let text = v.to_string();
    match text.char_indices().nth(800) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

impl Reply {
    fn error(&self) -> ErrorBody {
        serde_json::from_value(self.json.clone()).unwrap()
    }

    fn code(&self) -> ErrorCode {
        self.error().code
    }

    fn batch(&self) -> BatchResponse {
        assert_eq!(self.status, StatusCode::OK, "{self}");
        serde_json::from_value(self.json.clone()).unwrap()
    }

    #[track_caller]
    fn assert_ok(&self) {
        assert_eq!(self.status, StatusCode::OK, "{self}");
    }

    #[track_caller]
    fn assert_error(&self, status: u16, code: ErrorCode) {
        assert_eq!(
            (self.status.as_u16(), self.code()),
            (status, code),
            "{self}"
        );
    }
}

// ---------------------------------------------------------------------
// Checking replies against daemon/openapi.yaml
// ---------------------------------------------------------------------

/// The schemas replies and requests are checked against.
const CHECKED_SCHEMAS: &[&str] = &[
    "Health",
    "InfoReply",
    "BatchResponse",
    "ScreenshotResponse",
    "ErrorBody",
    "BatchRequest",
    "ScreenshotOptions",
    "FrameRequest",
    "FrameReply",
    "ReadFileRequest",
    "ReadFileReply",
    "ClockRequest",
    "ClockReply",
];

fn schema(name: &str) -> &'static jsonschema::Validator {
    static COMPILED: OnceLock<HashMap<&'static str, jsonschema::Validator>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            CHECKED_SCHEMAS
                .iter()
                .map(|&n| (n, validator(daemon_spec(), n)))
                .collect()
        })
        .get(name)
        .unwrap_or_else(|| panic!("{name} is not in CHECKED_SCHEMAS"))
}

/// What an error body must never contain (A12), besides the token.
const LEAKS: &[&str] = &[
    "/home",
    "/root",
    "src/",
    ".rs:",
    "panicked",
    "backtrace",
    "RUST_BACKTRACE",
    // The fake's panic payload.
    "driver panicked",
];

/// Checks one reply of `path` against the spec and returns its JSON:
/// 200 against the endpoint's schema, health's 503 against `Health`,
/// everything else against `ErrorBody`, whose code must give the status,
/// and whose text must leak nothing (A12).
fn check_reply(path: &str, status: StatusCode, body: &[u8], token: &str) -> Value {
    let json: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{path}: {status} body is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    });
    let name = match (status.as_u16(), path) {
        (200 | 503, paths::HEALTH) => "Health",
        (200, paths::INFO) => "InfoReply",
        (200, paths::ACTIONS) => "BatchResponse",
        (200, paths::SCREENSHOT) => "ScreenshotResponse",
        (200, paths::FRAME) => "FrameReply",
        (200, paths::FILES_READ) => "ReadFileReply",
        (200, paths::CLOCK) => "ClockReply",
        (200, _) => panic!("{path}: unexpected 200: {}", brief(&json)),
        _ => "ErrorBody",
    };
    let problems = errors(schema(name), &json);
    assert!(
        problems.is_empty(),
        "{path}: {status} body does not match {name}: {problems:?}\n{}",
        brief(&json)
    );
    if name == "ErrorBody" {
        let e: ErrorBody = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(
            status.as_u16(),
            e.code.http_status(),
            "{path}: the status does not follow from the code: {}",
            brief(&json)
        );
        let text = json.to_string();
        assert!(!text.contains(token), "{path}: the token leaked: {text}");
        for leak in LEAKS {
            assert!(!text.contains(leak), "{path}: `{leak}` leaked: {text}");
        }
    }
    json
}

// ---------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------

fn ks(name: &str) -> u32 {
    sandtopd::keys::lookup(name).unwrap().raw()
}

fn kd(name: &str) -> Event {
    Event::Key(ks(name), true)
}

fn ku(name: &str) -> Event {
    Event::Key(ks(name), false)
}

fn bd(b: u8) -> Event {
    Event::Button(b, true)
}

fn bu(b: u8) -> Event {
    Event::Button(b, false)
}

/// Keys and buttons pressed but not released in `events`.
fn still_held(events: &[Event]) -> Vec<Event> {
    held::still_held(events, |e| match *e {
        Event::Key(k, down) => Some(Stroke::Key(k, down)),
        Event::Button(b, down) => Some(Stroke::Button(b, down)),
        _ => None,
    })
}

#[track_caller]
fn assert_nothing_held(events: &[Event]) {
    let held = still_held(events);
    assert!(held.is_empty(), "left held: {held:?} in {events:?}");
}

/// The input events of a batch: asserts the batch ended with one settle
/// and one capture of `region`, and returns what came before.
#[track_caller]
fn input_of(events: &[Event], region: Rect) -> Vec<Event> {
    let n = events.len();
    assert!(n >= 2, "no final screenshot in {events:?}");
    assert_eq!(
        &events[n - 2..],
        &[Event::Settle, Event::Capture(region)],
        "the batch must end with one settle and one capture: {events:?}"
    );
    events[..n - 2].to_vec()
}

fn motions(events: &[Event]) -> Vec<(u32, u32)> {
    events
        .iter()
        .filter_map(|e| match *e {
            Event::Motion(x, y) => Some((x, y)),
            _ => None,
        })
        .collect()
}

fn chars(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Char(_)))
        .count()
}

// ---------------------------------------------------------------------
// Actions
// ---------------------------------------------------------------------

fn click(x: i64, y: i64) -> Value {
    json!({"type": "click", "button": "left", "x": x, "y": y})
}

fn mv(x: i64, y: i64) -> Value {
    json!({"type": "move", "x": x, "y": y})
}

fn type_text(text: &str) -> Value {
    json!({"type": "type", "text": text})
}

/// A drag along `n` points, zig-zagging 3 px so no intermediate motions
/// are needed: `n` motions after the button goes down.
fn zigzag_drag(n: usize, keys: &[&str]) -> Value {
    let path: Vec<Value> = (0..n)
        .map(|i| json!({"x": 100 + (i % 2) * 3, "y": 100 + i % 500}))
        .collect();
    json!({"type": "drag", "path": path, "keys": keys})
}

// ---------------------------------------------------------------------
// The spec itself
// ---------------------------------------------------------------------

fn spec_schema(name: &str) -> &'static Value {
    daemon_spec()
        .pointer(&format!("/components/schemas/{name}"))
        .unwrap_or_else(|| panic!("daemon/openapi.yaml has no schema {name}"))
}

/// The schema `name` lists exactly the fields of `value` (a serialized
/// Rust value with every optional field set), refuses others, and accepts
/// the value.
#[track_caller]
fn assert_schema_fields(name: &str, value: &Value) {
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
        formats: vec![ImageFormat::Png, ImageFormat::Webp],
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
    for ms in [limits::SETTLE_QUIET_MS, limits::SETTLE_CAP_MS] {
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

// ---------------------------------------------------------------------
// A1: the token
// ---------------------------------------------------------------------

#[tokio::test]
async fn a1_missing_or_wrong_token_is_401_with_no_side_effect() {
    let fx = Fx::new();
    let other_session = Token::generate().unwrap();
    let token = fx.token().to_string();
    let mut off_by_one = token.clone();
    off_by_one.replace_range(63.., if token.ends_with('0') { "1" } else { "0" });
    let auths: Vec<Option<String>> = vec![
        None,
        Some(format!("Bearer {}", other_session.expose())),
        Some(format!("Bearer {off_by_one}")),
        Some(format!("Bearer {}", &token[..63])),
        Some(format!("Bearer {token}0")),
        Some(token.clone()),
        Some(format!("Basic {token}")),
        Some("Bearer ".into()),
        Some(String::new()),
    ];
    let batch = serde_json::to_vec(&json!({"actions": [click(10, 10), type_text("x")]})).unwrap();
    let endpoints: [(Method, &str, Option<&[u8]>); 5] = [
        (Method::GET, paths::INFO, None),
        (Method::POST, paths::ACTIONS, Some(batch.as_slice())),
        (Method::POST, paths::SCREENSHOT, None),
        (Method::POST, paths::SCREENSHOT, Some(b"{}".as_slice())),
        (Method::GET, "/v1/does-not-exist", None),
    ];
    for auth in &auths {
        for (method, path, body) in &endpoints {
            let mut req = bare(method.clone(), path);
            if let Some(a) = auth {
                req = req.header(header::AUTHORIZATION, a);
            }
            if body.is_some() {
                req = req.header(header::CONTENT_TYPE, "application/json");
            }
            let body = body.map_or_else(Body::empty, |b| Body::from(b.to_vec()));
            let reply = fx.call(req.body(body).unwrap()).await;
            reply.assert_error(401, ErrorCode::Unauthorized);
            assert_eq!(
                reply.headers.get(header::WWW_AUTHENTICATE).unwrap(),
                "Bearer",
                "{path}"
            );
        }
        // The token in the query string is no token.
        let uri = format!("{}?token={token}", paths::INFO);
        let reply = fx
            .call(bare(Method::GET, &uri).body(Body::empty()).unwrap())
            .await;
        reply.assert_error(401, ErrorCode::Unauthorized);
    }
    assert_eq!(fx.events(), vec![], "a refused request reached the driver");

    // The right token works (so the refusals above were about the token).
    fx.call(fx.get(paths::INFO)).await.assert_ok();
    fx.batch(serde_json::from_slice(&batch).unwrap())
        .await
        .assert_ok();
    assert!(!fx.events().is_empty());
}

#[tokio::test]
async fn a1_health_needs_no_token() {
    let fx = Fx::new();
    fx.api.display.mark_ok();
    let reply = fx.health().await;
    reply.assert_ok();
    let health: Health = serde_json::from_value(reply.json).unwrap();
    assert_eq!(health.status, HealthStatus::Ok);
    assert!(health.x_connected);
    assert_eq!(health.display, Some(SCREEN));
    assert_eq!(health.window_manager, None);
    // With a wrong token it still answers (it ignores the header).
    let req = bare(Method::GET, paths::HEALTH)
        .header(header::AUTHORIZATION, "Bearer nonsense")
        .body(Body::empty())
        .unwrap();
    fx.call(req).await.assert_ok();
}

#[tokio::test]
async fn health_reports_a_dead_display_as_503_down() {
    let fx = Fx::new();
    fx.api.display.mark_down();
    let reply = fx.health().await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let health: Health = serde_json::from_value(reply.json).unwrap();
    assert_eq!(health.status, HealthStatus::Down);
    assert!(!health.x_connected);
    fx.api.display.mark_ok();
    fx.health().await.assert_ok();
}

// ---------------------------------------------------------------------
// A3: browsers and foreign hosts
// ---------------------------------------------------------------------

#[tokio::test]
async fn a3_browser_headers_and_foreign_hosts_are_403_with_no_side_effect() {
    let fx = Fx::new();
    fx.api.display.mark_ok();
    let body = json!({"actions": [click(10, 10)]});
    let browser_headers = [
        ("origin", "http://localhost:8080"),
        ("origin", "null"),
        ("sec-fetch-site", "same-origin"),
        ("sec-fetch-mode", "no-cors"),
        ("sec-fetch-dest", "empty"),
        ("sec-fetch-user", "?1"),
        ("sec-fetch-anything", "x"),
    ];
    for (name, value) in browser_headers {
        // With a valid token and a valid body: still refused.
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut().insert(name, value.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
        let mut req = fx.post(paths::SCREENSHOT, &json!({}));
        req.headers_mut().insert(name, value.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
        // Health too: a web page must not even probe the daemon.
        let req = bare(Method::GET, paths::HEALTH)
            .header(name, value)
            .body(Body::empty())
            .unwrap();
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
    }
    let foreign = [
        "evil.test",
        "localhost.evil.test",
        "evil.test:80",
        "127.0.0.1.nip.io",
        "sandtopd.evil.test:1234",
        "10.0.0.1",
    ];
    for host in foreign {
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut()
            .insert(header::HOST, host.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
        let req = Request::builder()
            .uri(paths::HEALTH)
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
    }
    // Two Host headers, the first allowed: refused, whatever the second.
    for second in ["evil.test", "localhost"] {
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut()
            .append(header::HOST, "localhost".parse().unwrap());
        req.headers_mut()
            .append(header::HOST, second.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
    }
    assert_eq!(fx.events(), vec![], "a refused request reached the driver");

    for host in [
        "localhost:1234",
        "sandtopd",
        "localhost",
        "127.0.0.1:9",
        "[::1]:80",
    ] {
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut()
            .insert(header::HOST, host.parse().unwrap());
        fx.call(req).await.assert_ok();
    }
    assert_eq!(motions(&fx.events()).len(), 5);
}

// ---------------------------------------------------------------------
// A4: bad requests get JSON errors and do not wedge anything
// ---------------------------------------------------------------------

#[tokio::test]
async fn a4_bad_requests_get_json_errors_and_the_next_request_succeeds() {
    let fx = Fx::new();
    let json_req = |method: Method, path: &str, body: &str| {
        fx.authed(method, path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let with_type = |ct: Option<&str>, path: &str, body: &str| {
        let mut r = fx.authed(Method::POST, path);
        if let Some(ct) = ct {
            r = r.header(header::CONTENT_TYPE, ct);
        }
        r.body(Body::from(body.to_string())).unwrap()
    };
    let valid = r#"{"actions":[{"type":"move","x":7,"y":8}]}"#;
    let cases: Vec<(&str, Request<Body>, u16, ErrorCode)> = vec![
        (
            "malformed JSON",
            json_req(Method::POST, paths::ACTIONS, r#"{"actions": [{"type":"#),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "empty JSON body",
            json_req(Method::POST, paths::ACTIONS, ""),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "not an object",
            json_req(Method::POST, paths::ACTIONS, "[1, 2]"),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown top-level field",
            json_req(
                Method::POST,
                paths::ACTIONS,
                r#"{"actions": [], "sudo": true}"#,
            ),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown field inside an action",
            json_req(
                Method::POST,
                paths::ACTIONS,
                r#"{"actions": [{"type":"click","button":"left","x":1,"y":1,"force":true}]}"#,
            ),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown field inside screenshot options",
            json_req(Method::POST, paths::SCREENSHOT, r#"{"quality": 9}"#),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown action type",
            json_req(
                Method::POST,
                paths::ACTIONS,
                r#"{"actions": [{"type":"shell","command":"id"}]}"#,
            ),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "wrong content type",
            with_type(Some("text/plain"), paths::ACTIONS, valid),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "form content type",
            with_type(
                Some("application/x-www-form-urlencoded"),
                paths::ACTIONS,
                valid,
            ),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "no content type",
            with_type(None, paths::ACTIONS, valid),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "screenshot options as text",
            with_type(Some("text/plain"), paths::SCREENSHOT, "{}"),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "GET on actions",
            fx.get(paths::ACTIONS),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "DELETE on info",
            fx.authed(Method::DELETE, paths::INFO)
                .body(Body::empty())
                .unwrap(),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "PUT on screenshot",
            json_req(Method::PUT, paths::SCREENSHOT, "{}"),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "POST on health",
            bare(Method::POST, paths::HEALTH)
                .body(Body::empty())
                .unwrap(),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        ("unknown path", fx.get("/v1/nope"), 404, ErrorCode::NotFound),
        ("root", fx.get("/"), 404, ErrorCode::NotFound),
        (
            "other major version",
            json_req(Method::POST, "/v2/actions", valid),
            404,
            ErrorCode::NotFound,
        ),
        (
            "below an endpoint",
            fx.get("/v1/info/extra"),
            404,
            ErrorCode::NotFound,
        ),
    ];
    for (what, req, status, code) in cases {
        let allow_wanted = match (req.method().clone(), req.uri().path()) {
            (Method::POST, paths::HEALTH) => Some("GET"),
            (_, paths::INFO) => Some("GET"),
            (Method::GET | Method::PUT, paths::ACTIONS | paths::SCREENSHOT) => Some("POST"),
            _ => None,
        };
        fx.take_events();
        let reply = fx.call(req).await;
        assert_eq!(
            (reply.status.as_u16(), reply.code()),
            (status, code),
            "{what}: {}",
            reply
        );
        assert_eq!(fx.events(), vec![], "{what}: reached the driver");
        if status == 405 {
            let allow = reply
                .headers
                .get(header::ALLOW)
                .unwrap_or_else(|| panic!("{what}: 405 without Allow"))
                .to_str()
                .unwrap();
            let wanted = allow_wanted.unwrap();
            assert!(allow.contains(wanted), "{what}: Allow: {allow}");
        }
        // The next valid request is served normally.
        let next = fx.call(json_req(Method::POST, paths::ACTIONS, valid)).await;
        next.assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            vec![Event::Motion(7, 8)],
            "after {what}"
        );
    }
}

// ---------------------------------------------------------------------
// A5: body limits
// ---------------------------------------------------------------------

/// A streamed body of `chunks` chunks of `size` spaces that counts how many
/// chunks were pulled.
fn counted_body(chunks: usize, size: usize) -> (Body, Arc<AtomicUsize>) {
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pulled);
    let stream = futures_util::stream::iter(0..chunks).map(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(Bytes::from(vec![b' '; size]))
    });
    (Body::from_stream(stream), pulled)
}

#[tokio::test]
async fn a5_oversized_body_with_content_length_is_413_before_reading() {
    let fx = Fx::new();
    const CHUNK: usize = 64 * 1024;
    let total = limits::MAX_BODY_BYTES + CHUNK;
    for path in [paths::ACTIONS, paths::SCREENSHOT] {
        let (body, pulled) = counted_body(total / CHUNK, CHUNK);
        let req = fx
            .authed(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, total)
            .body(body)
            .unwrap();
        fx.call(req)
            .await
            .assert_error(413, ErrorCode::PayloadTooLarge);
        assert_eq!(
            pulled.load(Ordering::SeqCst),
            0,
            "{path}: the body was read although Content-Length said it is too big"
        );
        // One byte over, in one piece.
        let mut big = br#"{"actions": []}"#.to_vec();
        big.resize(limits::MAX_BODY_BYTES + 1, b' ');
        let req = fx
            .authed(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, big.len())
            .body(Body::from(big))
            .unwrap();
        fx.call(req)
            .await
            .assert_error(413, ErrorCode::PayloadTooLarge);
    }
    assert_eq!(
        fx.events(),
        vec![],
        "an oversized request reached the driver"
    );

    // Exactly at the limit is fine (the limit is not off by one).
    let mut max = br#"{"actions": [{"type": "move", "x": 3, "y": 4}]}"#.to_vec();
    max.resize(limits::MAX_BODY_BYTES, b' ');
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, max.len())
        .body(Body::from(max))
        .unwrap();
    fx.call(req).await.assert_ok();
    assert_eq!(
        input_of(&fx.events(), Rect::full(SCREEN)),
        vec![Event::Motion(3, 4)]
    );
}

#[tokio::test]
async fn a5_oversized_chunked_body_is_413() {
    let fx = Fx::new();
    const CHUNK: usize = 64 * 1024;
    let chunks = 2 * limits::MAX_BODY_BYTES / CHUNK;
    for path in [paths::ACTIONS, paths::SCREENSHOT] {
        let (body, pulled) = counted_body(chunks, CHUNK);
        let req = fx
            .authed(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap();
        assert!(req.headers().get(header::CONTENT_LENGTH).is_none());
        fx.call(req)
            .await
            .assert_error(413, ErrorCode::PayloadTooLarge);
        let pulled = pulled.load(Ordering::SeqCst);
        assert!(
            pulled <= limits::MAX_BODY_BYTES / CHUNK + 2,
            "{path}: {pulled} of {chunks} chunks were read past the limit"
        );
    }
    assert_eq!(
        fx.events(),
        vec![],
        "an oversized request reached the driver"
    );
    fx.run(json!([mv(1, 2)])).await.assert_ok();
    // A streamed body under the limit is read whole.
    let body = Body::from_stream(futures_util::stream::iter(
        [
            r#"{"actions": "#,
            r#"[{"type": "move", "#,
            r#""x": 5, "y": 6}]}"#,
        ]
        .map(|s| Ok::<_, std::io::Error>(Bytes::from(s))),
    ));
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap();
    fx.call(req).await.assert_ok();
    assert_eq!(motions(&fx.events()), vec![(1, 2), (5, 6)]);
}

// ---------------------------------------------------------------------
// A6: validation before anything runs
// ---------------------------------------------------------------------

#[tokio::test]
async fn a6_out_of_bounds_in_model_space_is_422_with_index() {
    let fx = Fx::new();
    let small = json!({"size": {"width": 1280, "height": 720}});
    // (1300, 100) is a pixel of the 1920x1080 screen, not of the 1280x720 image.
    for (x, y) in [
        (1300, 100),
        (1280, 0),
        (0, 720),
        (-1, 5),
        (5, -1),
        (i64::MAX, 0),
    ] {
        let reply = fx
            .batch(json!({"actions": [mv(10, 10), click(x, y)], "screenshot": small}))
            .await;
        reply.assert_error(422, ErrorCode::OutOfBounds);
        let e = reply.error();
        assert_eq!(
            (e.index, e.executed, e.partial),
            (Some(1), Some(0), Some(false)),
            "({x}, {y})"
        );
        // Drag points and scroll positions are checked the same way.
        let reply = fx
            .batch(json!({"actions": [
                {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": x, "y": y}]}
            ], "screenshot": small}))
            .await;
        reply.assert_error(422, ErrorCode::OutOfBounds);
        assert_eq!(reply.error().index, Some(0));
    }
    // A fitted (contain) image is smaller than the requested size: 1024x576.
    let contain = json!({"size": {"width": 1024, "height": 768}});
    let reply = fx
        .batch(json!({"actions": [click(10, 600)], "screenshot": contain}))
        .await;
    reply.assert_error(422, ErrorCode::OutOfBounds);
    assert_eq!(fx.events(), vec![], "a refused batch reached the driver");
    // The corner pixel of the image is fine.
    fx.batch(json!({"actions": [click(1279, 719)], "screenshot": small}))
        .await
        .assert_ok();
}

#[tokio::test]
async fn a6_one_invalid_action_refuses_the_whole_batch() {
    let fx = Fx::new();
    let long_path: Vec<Value> = (0..=limits::MAX_DRAG_POINTS)
        .map(|i| json!({"x": i % 100, "y": 1}))
        .collect();
    let bad: Vec<(&str, Value, ErrorCode)> = vec![
        (
            "unknown held key",
            json!({"type": "click", "button": "left", "x": 1, "y": 1, "keys": ["HYPERDRIVE"]}),
            ErrorCode::UnknownKey,
        ),
        (
            "unknown chord key",
            json!({"type": "keypress", "keys": ["CTRL", "NOPE"]}),
            ErrorCode::UnknownKey,
        ),
        (
            "a combination as one name",
            json!({"type": "keypress", "keys": ["ctrl+c"]}),
            ErrorCode::UnknownKey,
        ),
        ("NUL in text", type_text("ab\0cd"), ErrorCode::InvalidAction),
        (
            "too long a drag path",
            json!({"type": "drag", "path": long_path}),
            ErrorCode::LimitExceeded,
        ),
        (
            "a drag of one point",
            json!({"type": "drag", "path": [{"x": 1, "y": 1}]}),
            ErrorCode::InvalidAction,
        ),
        (
            "too large a scroll",
            json!({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0,
                   "scroll_y": limits::MAX_SCROLL_DISTANCE + 1}),
            ErrorCode::LimitExceeded,
        ),
        (
            "too long a text",
            type_text(&"a".repeat(limits::MAX_TYPE_CHARS + 1)),
            ErrorCode::LimitExceeded,
        ),
        (
            "too many keys",
            json!({"type": "keypress", "keys": vec!["a"; limits::MAX_KEYS + 1]}),
            ErrorCode::LimitExceeded,
        ),
        (
            "an empty keypress",
            json!({"type": "keypress", "keys": []}),
            ErrorCode::InvalidAction,
        ),
        ("out of bounds", click(1920, 5), ErrorCode::OutOfBounds),
    ];
    for (what, action, code) in bad {
        // Actions 0 and 1 are valid and come first: they must not run either.
        let reply = fx
            .run(json!([mv(10, 10), type_text("hello"), action]))
            .await;
        assert_eq!(
            (reply.status.as_u16(), reply.code()),
            (422, code),
            "{what}: {}",
            reply
        );
        let e = reply.error();
        assert_eq!(
            (e.index, e.executed, e.partial),
            (Some(2), Some(0), Some(false)),
            "{what}"
        );
        assert_eq!(fx.events(), vec![], "{what}: the batch partly ran");
    }
    // Too many actions: no single action is at fault.
    let many = vec![mv(1, 1); limits::MAX_ACTIONS + 1];
    let reply = fx.run(json!(many)).await;
    reply.assert_error(422, ErrorCode::LimitExceeded);
    assert_eq!(
        (reply.error().index, reply.error().executed),
        (None, Some(0))
    );
    assert_eq!(fx.events(), vec![]);
    // The same batch without the bad action runs.
    let reply = fx.run(json!([mv(10, 10), type_text("hello")])).await;
    assert_eq!(reply.batch().executed, 2);
}

#[tokio::test]
async fn a6_stale_scale_map_and_bad_screenshot_options_run_nothing() {
    let fx = Fx::new();
    let stale = ScaleMap::identity(Size::new(1280, 800));
    let reply = fx
        .batch(json!({"actions": [click(5, 5)], "expect_scale_map": stale}))
        .await;
    reply.assert_error(409, ErrorCode::StaleScaleMap);
    assert_eq!(reply.error().executed, Some(0));
    let outside = json!({"region": {"x": 1900, "y": 0, "width": 100, "height": 10}});
    let reply = fx
        .batch(json!({"actions": [click(5, 5)], "screenshot": outside}))
        .await;
    reply.assert_error(400, ErrorCode::BadRequest);
    assert_eq!(reply.error().executed, Some(0));
    let reply = fx.call(fx.post(paths::SCREENSHOT, &outside)).await;
    reply.assert_error(400, ErrorCode::BadRequest);
    assert_eq!(fx.events(), vec![]);
    // The map the daemon itself reports is not stale.
    let shot: ScreenshotResponse = serde_json::from_value(
        fx.call(fx.post(
            paths::SCREENSHOT,
            &json!({"size": {"width": 960, "height": 540}}),
        ))
        .await
        .json,
    )
    .unwrap();
    fx.batch(json!({
        "actions": [click(5, 5)],
        "screenshot": {"size": {"width": 960, "height": 540}},
        "expect_scale_map": shot.screenshot.scale_map,
    }))
    .await
    .assert_ok();
}

// ---------------------------------------------------------------------
// Coordinates (docs/contract.md rule 4)
// ---------------------------------------------------------------------

#[tokio::test]
async fn coordinates_map_through_scale_map_to_screen() {
    let fx = Fx::new();
    let cases: Vec<(Value, Vec<(i64, i64)>)> = vec![
        (
            json!({"size": {"width": 960, "height": 540}}),
            vec![(100, 50), (0, 0), (959, 539), (480, 270)],
        ),
        (json!({}), vec![(0, 0), (1919, 1079), (123, 456)]),
        (
            json!({"size": {"width": 1280, "height": 800}, "fit": "stretch"}),
            vec![(0, 0), (1279, 799), (640, 400), (333, 777)],
        ),
        (
            json!({"size": {"width": 200, "height": 100},
                   "region": {"x": 100, "y": 50, "width": 400, "height": 200}}),
            vec![(0, 0), (199, 99), (100, 50)],
        ),
        (
            json!({"region": {"x": 1000, "y": 500, "width": 300, "height": 200}}),
            vec![(0, 0), (299, 199)],
        ),
    ];
    for (options, points) in cases {
        let opts: ScreenshotOptions = serde_json::from_value(options.clone()).unwrap();
        let map = ScaleMap::fit(SCREEN, opts.region, opts.size, opts.fit).unwrap();
        let actions: Vec<Value> = points.iter().map(|&(x, y)| click(x, y)).collect();
        let reply = fx
            .batch(json!({"actions": actions, "screenshot": options}))
            .await;
        let batch = reply.batch();
        assert_eq!(
            batch.screenshot.as_ref().unwrap().scale_map,
            map,
            "{options}"
        );
        assert_eq!(
            (
                batch.screenshot.as_ref().unwrap().width,
                batch.screenshot.as_ref().unwrap().height
            ),
            (map.image.width, map.image.height)
        );
        assert_eq!(
            png_size(batch.screenshot.as_ref().unwrap()),
            (map.image.width, map.image.height)
        );
        let input = input_of(&fx.take_events(), map.region);
        let want: Vec<(u32, u32)> = points
            .iter()
            .map(|&(x, y)| map.to_screen(x, y).unwrap())
            .collect();
        assert_eq!(motions(&input), want, "{options}");
    }
    // The brief's example, spelled out.
    let reply = fx
        .batch(json!({"actions": [click(100, 50)],
                      "screenshot": {"size": {"width": 960, "height": 540}}}))
        .await;
    reply.assert_ok();
    assert_eq!(fx.take_events()[0], Event::Motion(201, 101));
}

/// Width and height from a PNG's IHDR.
fn png_size(shot: &Screenshot) -> (u32, u32) {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&shot.data)
        .unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

// ---------------------------------------------------------------------
// Semantics of the nine actions (docs/contract.md §1)
// ---------------------------------------------------------------------

#[tokio::test]
async fn held_keys_wrap_pointer_actions_and_release_in_reverse() {
    let fx = Fx::new();
    let keys = ["CTRL", "SHIFT"];
    let down = [kd("CTRL"), kd("SHIFT")];
    let up = [ku("SHIFT"), ku("CTRL")];
    let cases: Vec<(Value, Vec<Event>)> = vec![
        (
            json!({"type": "click", "button": "left", "x": 10, "y": 20, "keys": keys}),
            [
                vec![Event::Motion(10, 20)],
                down.to_vec(),
                vec![bd(1), bu(1)],
                up.to_vec(),
            ]
            .concat(),
        ),
        (
            json!({"type": "double_click", "x": 30, "y": 40, "keys": keys}),
            [
                vec![Event::Motion(30, 40)],
                down.to_vec(),
                vec![bd(1), bu(1), bd(1), bu(1)],
                up.to_vec(),
            ]
            .concat(),
        ),
        (
            json!({"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 10, "y": 5}], "keys": keys}),
            [
                vec![Event::Motion(0, 0)],
                down.to_vec(),
                vec![bd(1), Event::Motion(10, 5), bu(1)],
                up.to_vec(),
            ]
            .concat(),
        ),
        (
            json!({"type": "move", "x": 50, "y": 60, "keys": keys}),
            [down.to_vec(), vec![Event::Motion(50, 60)], up.to_vec()].concat(),
        ),
        (
            json!({"type": "scroll", "x": 70, "y": 80, "scroll_x": 0, "scroll_y": 50, "keys": keys}),
            [
                vec![Event::Motion(70, 80)],
                down.to_vec(),
                vec![bd(5), bu(5)],
                up.to_vec(),
            ]
            .concat(),
        ),
    ];
    for (action, want) in cases {
        fx.run(json!([action])).await.assert_ok();
        let got = input_of(&fx.take_events(), Rect::full(SCREEN));
        assert_eq!(got, want, "{action}");
    }
    // Without keys (absent, null, empty) nothing is pressed but the button.
    for keys in [json!(null), json!([])] {
        fx.run(json!([{"type": "click", "button": "left", "x": 1, "y": 2, "keys": keys}]))
            .await
            .assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            vec![Event::Motion(1, 2), bd(1), bu(1)]
        );
    }
}

#[tokio::test]
async fn click_buttons_map_to_x_buttons() {
    let fx = Fx::new();
    for (name, number) in [
        ("left", 1),
        ("wheel", 2),
        ("right", 3),
        ("back", 8),
        ("forward", 9),
    ] {
        fx.run(json!([{"type": "click", "button": name, "x": 4, "y": 5}]))
            .await
            .assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            vec![Event::Motion(4, 5), bd(number), bu(number)],
            "{name}"
        );
    }
}

/// Checks a drag's motions after the button went down: every path point
/// in order, nothing but motions, consecutive motions at most 16 px apart
/// on each axis.
fn check_drag(input: &[Event], path: &[(u32, u32)], held: &[&str]) {
    let n_held = held.len();
    assert_eq!(input[0], Event::Motion(path[0].0, path[0].1));
    let downs: Vec<Event> = held.iter().map(|k| kd(k)).collect();
    assert_eq!(&input[1..=n_held], &downs[..]);
    assert_eq!(input[n_held + 1], bd(1));
    let tail: Vec<Event> = [vec![bu(1)], held.iter().rev().map(|k| ku(k)).collect()].concat();
    let end = input.len() - tail.len();
    assert_eq!(&input[end..], &tail[..]);
    let moves = &input[n_held + 2..end];
    let pts: Vec<(u32, u32)> = moves
        .iter()
        .map(|e| match *e {
            Event::Motion(x, y) => (x, y),
            ref other => panic!("{other:?} while dragging"),
        })
        .collect();
    // Every path point, in order.
    let mut next = 1;
    for p in &pts {
        if next < path.len() && *p == path[next] {
            next += 1;
        }
    }
    assert_eq!(
        next,
        path.len(),
        "not every path point was visited in order: {pts:?}"
    );
    assert_eq!(pts.last(), path.last());
    let mut prev = path[0];
    for &p in &pts {
        assert!(
            p.0.abs_diff(prev.0) <= 16 && p.1.abs_diff(prev.1) <= 16,
            "a jump from {prev:?} to {p:?}"
        );
        prev = p;
    }
}

#[tokio::test]
async fn drag_visits_every_point_in_order_in_small_steps() {
    let fx = Fx::new();
    let path = [
        (10, 10),
        (200, 10),
        (200, 300),
        (50, 50),
        (51, 51),
        (51, 51),
        (900, 700),
    ];
    let body: Vec<Value> = path.iter().map(|&(x, y)| json!({"x": x, "y": y})).collect();
    fx.run(json!([{"type": "drag", "path": body, "keys": ["ALT"]}]))
        .await
        .assert_ok();
    let input = input_of(&fx.take_events(), Rect::full(SCREEN));
    check_drag(&input, &path, &["ALT"]);
    assert!(
        motions(&input).len() > 40,
        "intermediate motions are missing"
    );
    // Scaled: the path is mapped point by point.
    let map = ScaleMap::fit(SCREEN, None, Some(Size::new(960, 540)), Fit::Contain).unwrap();
    let model = [(10i64, 10i64), (100, 200), (400, 20)];
    let body: Vec<Value> = model
        .iter()
        .map(|&(x, y)| json!({"x": x, "y": y}))
        .collect();
    fx.batch(json!({"actions": [{"type": "drag", "path": body}],
                    "screenshot": {"size": {"width": 960, "height": 540}}}))
        .await
        .assert_ok();
    let screen: Vec<(u32, u32)> = model
        .iter()
        .map(|&(x, y)| map.to_screen(x, y).unwrap())
        .collect();
    check_drag(&input_of(&fx.take_events(), map.region), &screen, &[]);
}

#[tokio::test]
async fn drag_long_segment_moves_at_most_16px_per_motion() {
    let fx = Fx::new();
    let path = [(0, 500), (1919, 500), (0, 0)];
    let body: Vec<Value> = path.iter().map(|&(x, y)| json!({"x": x, "y": y})).collect();
    fx.run(json!([{"type": "drag", "path": body}]))
        .await
        .assert_ok();
    check_drag(&input_of(&fx.take_events(), Rect::full(SCREEN)), &path, &[]);
}

#[tokio::test]
async fn keypress_presses_in_order_and_releases_in_reverse() {
    let fx = Fx::new();
    fx.run(json!([{"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]}]))
        .await
        .assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            kd("CTRL"),
            kd("SHIFT"),
            kd("t"),
            ku("t"),
            ku("SHIFT"),
            ku("CTRL")
        ]
    );
    assert_eq!(
        ks("t"),
        xkeysym::key::t,
        "T is the T key, not a shifted one"
    );
    fx.run(json!([{"type": "keypress", "keys": ["ENTER"]}]))
        .await
        .assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Key(xkeysym::key::Return, true),
            Event::Key(xkeysym::key::Return, false)
        ]
    );
}

#[tokio::test]
async fn scroll_distance_becomes_wheel_clicks() {
    let fx = Fx::new();
    let clicks = |b: u8, n: usize| -> Vec<Event> { (0..n).flat_map(|_| [bd(b), bu(b)]).collect() };
    let cases: Vec<(i64, i64, Vec<Event>)> = vec![
        (0, 300, clicks(5, 6)),
        (-100, 0, clicks(6, 2)),
        (-100, 300, [clicks(5, 6), clicks(6, 2)].concat()),
        (0, -50, clicks(4, 1)),
        (75, 0, clicks(7, 2)),
        (1, -1, [clicks(4, 1), clicks(7, 1)].concat()),
        (0, 0, vec![]),
        (0, 10_000, clicks(5, 200)),
    ];
    for (sx, sy, wheel) in cases {
        fx.run(json!([{"type": "scroll", "x": 100, "y": 200, "scroll_x": sx, "scroll_y": sy}]))
            .await
            .assert_ok();
        let want = [vec![Event::Motion(100, 200)], wheel].concat();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            want,
            "scroll ({sx}, {sy})"
        );
    }
}

/// What typing `text` must send to the driver.
fn typed(text: &str) -> Vec<Event> {
    let ret = [
        Event::Key(xkeysym::key::Return, true),
        Event::Key(xkeysym::key::Return, false),
    ];
    let tab = [
        Event::Key(xkeysym::key::Tab, true),
        Event::Key(xkeysym::key::Tab, false),
    ];
    let mut out = Vec::new();
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\r' => {
                if it.peek() == Some(&'\n') {
                    it.next();
                }
                out.extend(ret.clone());
            }
            '\n' => out.extend(ret.clone()),
            '\t' => out.extend(tab.clone()),
            c => out.push(Event::Char(c)),
        }
    }
    out
}

#[tokio::test]
async fn type_maps_newlines_and_tabs_to_keys() {
    let fx = Fx::new();
    fx.run(json!([type_text("a\r\nb\tc")])).await.assert_ok();
    let r = |down| Event::Key(xkeysym::key::Return, down);
    let t = |down| Event::Key(xkeysym::key::Tab, down);
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Char('a'),
            r(true),
            r(false),
            Event::Char('b'),
            t(true),
            t(false),
            Event::Char('c'),
        ]
    );
    // `\n\r` is two Returns, `\r` alone is one.
    fx.run(json!([type_text("x\n\ry\rz")])).await.assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Char('x'),
            r(true),
            r(false),
            r(true),
            r(false),
            Event::Char('y'),
            r(true),
            r(false),
            Event::Char('z'),
        ]
    );
}

#[tokio::test]
async fn screenshot_action_is_a_noop_and_the_final_screenshot_is_taken_once() {
    let fx = Fx::new();
    let reply = fx
        .run(json!([
            {"type": "screenshot"},
            click(1, 1),
            {"type": "screenshot"},
            {"type": "wait"},
            {"type": "screenshot"}
        ]))
        .await;
    let batch = reply.batch();
    assert_eq!(batch.executed, 5);
    assert!(batch.timings.settled);
    let events = fx.take_events();
    // The wait settles once; the final screenshot settles and captures once.
    assert_eq!(
        events,
        vec![
            Event::Motion(1, 1),
            bd(1),
            bu(1),
            Event::Settle,
            Event::Settle,
            Event::Capture(Rect::full(SCREEN)),
        ]
    );
    // An empty batch only takes the screenshot.
    assert_eq!(fx.run(json!([])).await.batch().executed, 0);
    assert_eq!(
        fx.take_events(),
        vec![Event::Settle, Event::Capture(Rect::full(SCREEN))]
    );
}

#[tokio::test]
async fn screenshot_endpoint_captures_now_with_the_requested_options() {
    let fx = Fx::new();
    // No body, no content type: the defaults.
    let req = fx
        .authed(Method::POST, paths::SCREENSHOT)
        .body(Body::empty())
        .unwrap();
    let shot: ScreenshotResponse = serde_json::from_value(fx.call(req).await.json).unwrap();
    assert_eq!(shot.screenshot.scale_map, ScaleMap::identity(SCREEN));
    assert_eq!(shot.screenshot.format, ImageFormat::Png);
    assert_eq!(png_size(&shot.screenshot), (1920, 1080));
    assert!(!shot.timings.settled, "a lone screenshot does not settle");
    assert_eq!(fx.take_events(), vec![Event::Capture(Rect::full(SCREEN))]);

    let region = Rect {
        x: 100,
        y: 50,
        width: 800,
        height: 400,
    };
    let reply = fx
        .call(fx.post(
            paths::SCREENSHOT,
            &json!({"size": {"width": 400, "height": 400}, "region": region,
                    "format": "webp", "cursor": true}),
        ))
        .await;
    let shot: ScreenshotResponse = serde_json::from_value(reply.json).unwrap();
    assert_eq!(shot.screenshot.format, ImageFormat::Webp);
    assert_eq!((shot.screenshot.width, shot.screenshot.height), (400, 200));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&shot.screenshot.data)
        .unwrap();
    assert_eq!((&bytes[..4], &bytes[8..12]), (&b"RIFF"[..], &b"WEBP"[..]));
    assert_eq!(fx.take_events(), vec![Event::Capture(region)]);
}

// ---------------------------------------------------------------------
// A7: no shell, literal typing
// ---------------------------------------------------------------------

#[tokio::test]
async fn a7_typing_corpus_reaches_the_driver_literally() {
    let fx = Fx::new();
    let corpus = [
        "$(touch /tmp/pwned)",
        "`touch /tmp/pwned`",
        "'single' \"double\" \\\"escaped\\\"",
        "-rf --no-preserve-root",
        "--help",
        "; rm -rf ~ && echo pwned | sh #",
        "${HOME} $PATH %s %n %x {{7*7}}",
        "emoji 😀👍🏽👩‍👩‍👧 ✓",
        "CJK 中文字符 日本語 한국어",
        "line one\nline two\r\nline three\rend",
        "col1\tcol2\t\tcol4",
        "<script>alert(1)</script>",
        "\u{202e}reversed\u{200b}zero-width",
    ];
    for text in corpus {
        fx.run(json!([type_text(text)])).await.assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            typed(text),
            "{text:?}"
        );
    }
    // All of it in one batch, in order.
    let all: Vec<Value> = corpus.iter().map(|t| type_text(t)).collect();
    fx.run(json!(all)).await.assert_ok();
    let want: Vec<Event> = corpus.iter().flat_map(|t| typed(t)).collect();
    assert_eq!(input_of(&fx.take_events(), Rect::full(SCREEN)), want);
}

#[tokio::test]
async fn a7_nul_and_control_characters_are_refused() {
    let fx = Fx::new();
    for text in [
        "\0",
        "abc\0def",
        "bell\u{7}",
        "esc\u{1b}[2J",
        "del\u{7f}",
        "nel\u{85}",
    ] {
        let reply = fx.run(json!([type_text("fine"), type_text(text)])).await;
        reply.assert_error(422, ErrorCode::InvalidAction);
        assert_eq!(reply.error().index, Some(1), "{text:?}");
        assert_eq!(fx.events(), vec![], "{text:?}: something was typed");
    }
}

// ---------------------------------------------------------------------
// A8: one input request at a time
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a8_concurrent_input_is_busy_and_never_interleaves() {
    let fx = Arc::new(Fx::new());
    let text: String = "abcdefghij".repeat(4);
    fx.knobs(|s| s.slow = Some(Duration::from_millis(50)));
    let first = {
        let fx = Arc::clone(&fx);
        let text = text.clone();
        tokio::spawn(async move { fx.run(json!([type_text(&text)])).await })
    };
    fx.wait_events(1, Duration::from_secs(5)).await;

    // While the first runs (40 chars x 50 ms), input and screenshots are
    // busy, at once (not after waiting for the first).
    let asked = Instant::now();
    let second = fx.run(json!([click(5, 5), type_text("zzz")])).await;
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "busy took {:?}",
        asked.elapsed()
    );
    second.assert_error(409, ErrorCode::Busy);
    assert_eq!(second.error().executed, None, "busy means nothing ran");
    let shot = fx.call(fx.post(paths::SCREENSHOT, &json!({}))).await;
    shot.assert_error(409, ErrorCode::Busy);
    let during = fx.events();
    assert!(
        !during.contains(&Event::Capture(Rect::full(SCREEN))),
        "the first request finished before the busy checks; the test proves nothing"
    );
    // Info and health are not input: they answer meanwhile.
    fx.call(fx.get(paths::INFO)).await.assert_ok();

    first.await.unwrap().assert_ok();
    fx.knobs(|s| s.slow = None);
    let mut want: Vec<Event> = text.chars().map(Event::Char).collect();
    want.extend([Event::Settle, Event::Capture(Rect::full(SCREEN))]);
    assert_eq!(
        fx.take_events(),
        want,
        "the busy requests' events interleaved"
    );

    // Right after the reply the gate is free again (no stale busy).
    fx.run(json!([click(5, 5)])).await.assert_ok();
    fx.call(fx.post(paths::SCREENSHOT, &json!({})))
        .await
        .assert_ok();
    let events = fx.take_events();
    assert_eq!(events[..3], [Event::Motion(5, 5), bd(1), bu(1)]);
}

// ---------------------------------------------------------------------
// A9: many requests at once
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a9_a_thousand_concurrent_requests_get_json_answers_and_health_answers() {
    let fx = Arc::new(Fx::build(Size::new(320, 240), |_| {}));
    let display = Arc::clone(&fx.api.display);
    let ticker = tokio::spawn(async move {
        loop {
            display.mark_ok();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000usize {
        let fx = Arc::clone(&fx);
        tasks.spawn(async move {
            let req = match i % 4 {
                0 => bare(Method::GET, paths::HEALTH)
                    .body(Body::empty())
                    .unwrap(),
                1 => fx.get(paths::INFO),
                2 => fx.post(paths::SCREENSHOT, &json!({"format": "png"})),
                _ => fx.post(
                    paths::ACTIONS,
                    &json!({"actions": [click((i % 300) as i64, 7), type_text("ok")]}),
                ),
            };
            (i % 4, fx.call(req).await)
        });
    }
    let mut count: HashMap<(usize, u16), usize> = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        let (kind, reply) = done.expect("a request task panicked");
        let status = reply.status.as_u16();
        assert!(
            matches!(status, 200 | 409 | 503),
            "kind {kind}: {status} {}",
            reply
        );
        if status != 200 {
            assert!(
                matches!(reply.code(), ErrorCode::Busy | ErrorCode::Overloaded),
                "{}",
                reply
            );
        }
        *count.entry((kind, status)).or_default() += 1;
    }
    assert_eq!(
        count.get(&(0, 200)),
        Some(&250),
        "health must always answer: {count:?}"
    );
    assert!(!fx.desktop.is_finished(), "the desktop task died");
    // Every batch that ran was whole: nothing left held, input never split.
    let events = fx.take_events();
    assert_nothing_held(&events);
    let captures = events
        .iter()
        .filter(|e| matches!(e, Event::Capture(_)))
        .count();
    let ok = |kind| count.get(&(kind, 200)).copied().unwrap_or(0);
    let ok_input = ok(2) + ok(3);
    assert_eq!(captures, ok_input, "{count:?}");
    for job in events.split_inclusive(|e| matches!(e, Event::Capture(_))) {
        let whole = matches!(
            job,
            [Event::Capture(_)]
                | [
                    Event::Motion(_, 7),
                    Event::Button(1, true),
                    Event::Button(1, false),
                    Event::Char('o'),
                    Event::Char('k'),
                    Event::Settle,
                    Event::Capture(_),
                ]
        );
        assert!(whole, "a split or interleaved job: {job:?}");
    }

    fx.health().await.assert_ok();
    fx.run(json!([click(1, 1)])).await.assert_ok();
    ticker.abort();
}

// ---------------------------------------------------------------------
// A11: panics
// ---------------------------------------------------------------------

#[tokio::test]
async fn a11_a_panic_is_an_internal_error_and_releases_held_input() {
    let fx = Fx::new();
    // Primitives: 0 motion, 1 CTRL down, 2 SHIFT down, 3 button down (panics).
    fx.knobs(|s| s.panic_at = Some(3));
    let reply = fx
        .run(json!([{"type": "click", "button": "left", "x": 10, "y": 10, "keys": ["CTRL", "SHIFT"]}]))
        .await;
    reply.assert_error(500, ErrorCode::Internal);
    assert!(!reply.error().message.contains("fake"), "{reply}");
    assert!(!fx.desktop.is_finished(), "the desktop task died");
    // The daemon goes on: the next request is served normally, and only
    // after the panicking action's keys were released (the desktop task is
    // serial, so this order is deterministic). The wait for the gate works
    // around the stale busy pinned by `a11_after_a_panic_the_reply_comes_last`.
    fx.wait_idle(Duration::from_secs(2)).await;
    fx.run(json!([click(3, 3)])).await.assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Motion(10, 10),
            kd("CTRL"),
            kd("SHIFT"),
            ku("SHIFT"),
            ku("CTRL"),
            Event::Motion(3, 3),
            bd(1),
            bu(1)
        ]
    );
    fx.call(fx.get(paths::INFO)).await.assert_ok();
    // A panic mid-drag: the button comes up too.
    fx.knobs(|s| s.panic_at = Some(s.primitives + 4));
    let reply = fx
        .run(
            json!([{"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 5, "y": 5},
            {"x": 9, "y": 9}], "keys": ["ALT"]}]),
        )
        .await;
    reply.assert_error(500, ErrorCode::Internal);
    fx.wait_idle(Duration::from_secs(2)).await;
    fx.run(json!([])).await.assert_ok();
    let events = fx.take_events();
    assert_nothing_held(&events);
    assert_eq!(
        events[..6],
        [
            Event::Motion(1, 1),
            kd("ALT"),
            bd(1),
            Event::Motion(5, 5),
            bu(1),
            ku("ALT")
        ]
    );
}

/// desktop/mod.rs step 4: "releases any held input, drops the permit, then
/// replies, so the next request never sees a stale `busy`". When a job
/// panics, its `reply` sender and then its `permit` are dropped while
/// unwinding out of `Desktop::handle` (locals drop in reverse order:
/// reply before permit), and only afterwards does `recover_after_panic`
/// release the keys. So the 500 can arrive while keys are still held, and a
/// request sent right after it can get a stale 409 `busy`. Racy by nature:
/// each round can pass by luck, 20 rounds fail reliably while the bug is
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a11_after_a_panic_the_reply_comes_last() {
    let rounds = 20;
    let (mut held, mut busy) = (0, 0);
    for _ in 0..rounds {
        let fx = Fx::new();
        fx.knobs(|s| s.panic_at = Some(3));
        let reply = fx
            .run(json!([{"type": "click", "button": "left", "x": 10, "y": 10,
                "keys": ["CTRL", "SHIFT"]}]))
            .await;
        reply.assert_error(500, ErrorCode::Internal);
        // No waiting: the reply must come after the release and the permit.
        if !still_held(&fx.events()).is_empty() {
            held += 1;
        }
        if fx.run(json!([mv(1, 1)])).await.status == StatusCode::CONFLICT {
            busy += 1;
        }
    }
    assert_eq!(
        (held, busy),
        (0, 0),
        "of {rounds} panics: keys still held at the 500 {held} times, \
         the next request busy {busy} times"
    );
}

// ---------------------------------------------------------------------
// A12: nothing leaks through error bodies
// ---------------------------------------------------------------------

#[tokio::test]
async fn a12_error_bodies_leak_no_token_path_or_backtrace() {
    // Every reply goes through `check_reply`, which refuses error bodies
    // holding the token, a path, a backtrace or a panic message; this test
    // provokes one of each kind of error.
    let fx = Fx::build(Size::new(640, 480), |s| {
        s.deadline = Duration::from_millis(400);
    });
    let mut bodies = Vec::new();
    let mut keep = |r: Reply, code: ErrorCode| {
        assert_eq!(r.code(), code, "{r}");
        bodies.push(r.json);
    };
    keep(
        fx.call(bare(Method::GET, paths::INFO).body(Body::empty()).unwrap())
            .await,
        ErrorCode::Unauthorized,
    );
    let mut req = fx.get(paths::INFO);
    req.headers_mut()
        .insert(header::ORIGIN, "http://evil.test".parse().unwrap());
    keep(fx.call(req).await, ErrorCode::Forbidden);
    keep(fx.call(fx.get("/v1/x")).await, ErrorCode::NotFound);
    keep(
        fx.call(fx.get(paths::ACTIONS)).await,
        ErrorCode::MethodNotAllowed,
    );
    let mut big = vec![b' '; limits::MAX_BODY_BYTES + 1];
    big[0] = b'{';
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(big))
        .unwrap();
    keep(fx.call(req).await, ErrorCode::PayloadTooLarge);
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .body(Body::from("{}"))
        .unwrap();
    keep(fx.call(req).await, ErrorCode::UnsupportedMediaType);
    keep(fx.batch(json!({"actions": 5})).await, ErrorCode::BadRequest);
    keep(
        fx.run(json!([{"type": "keypress", "keys": ["NOPE"]}]))
            .await,
        ErrorCode::UnknownKey,
    );
    keep(
        fx.batch(json!({"actions": [], "expect_scale_map": ScaleMap::identity(Size::new(10, 10))}))
            .await,
        ErrorCode::StaleScaleMap,
    );
    fx.knobs(|s| s.panic_at = Some(0));
    keep(fx.run(json!([click(1, 1)])).await, ErrorCode::Internal);
    // See `a11_after_a_panic_the_reply_comes_last` for why this wait.
    fx.wait_idle(Duration::from_secs(2)).await;
    fx.knobs(|s| {
        s.fail_at = Some(s.primitives);
    });
    keep(
        fx.run(json!([click(1, 1)])).await,
        ErrorCode::DisplayUnavailable,
    );
    // The fatal error dropped the driver; the next request reconnects (to
    // a fresh fake), whose knobs are set next.
    fx.run(json!([])).await.assert_ok();
    assert_eq!(fx.drivers.lock().unwrap().len(), 2);
    fx.knobs(|s| s.slow = Some(Duration::from_millis(40)));
    keep(
        fx.run(json!([type_text(&"x".repeat(100))])).await,
        ErrorCode::Timeout,
    );
    assert_eq!(bodies.len(), 12);
    for b in &bodies {
        let text = b.to_string();
        assert!(!text.contains(fx.token()), "{text}");
        assert!(!text.contains(&fx.token()[..16]), "{text}");
        for leak in LEAKS {
            assert!(!text.contains(leak), "{text}");
        }
    }
}

// ---------------------------------------------------------------------
// A14: protocol version
// ---------------------------------------------------------------------

#[tokio::test]
async fn a14_info_reports_protocol_1_1_and_a_major_mismatch_is_refused_clearly() {
    let fx = Fx::new();
    let reply: InfoReply = serde_json::from_value(fx.call(fx.get(paths::INFO)).await.json).unwrap();
    assert_eq!(reply.state, DaemonState::Open);
    let info = reply.info;
    assert_eq!(info.protocol, "1.1");
    assert_eq!(info.protocol, PROTOCOL_VERSION);
    assert_eq!(info.daemon_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.display, Some(SCREEN));
    assert_eq!(info.limits, Limits::current());
    assert!(info.capabilities.xtest);
    assert!(check_protocol(&info.protocol).is_ok());
    assert!(check_protocol("1.7").is_ok());
    let err = check_protocol("2.0").unwrap_err();
    assert!(
        err.contains("2.0") && err.contains(PROTOCOL_VERSION) && err.contains("major"),
        "unclear: {err}"
    );
    for bad in ["", "one", "v1.0", "-1.0"] {
        let err = check_protocol(bad).unwrap_err();
        assert!(err.contains("unreadable"), "{bad:?}: {err}");
    }
    assert!(check_protocol("0.9").is_err());
}

// ---------------------------------------------------------------------
// A15: held input is released on error, deadline and cancel
// ---------------------------------------------------------------------

#[tokio::test]
async fn a15_a_driver_failure_releases_held_input_and_reports_partial() {
    // Primitives of [move(5,5), click(10,10) holding CTRL, SHIFT]:
    // 0 motion | 1 motion, 2 CTRL down, 3 SHIFT down, 4 button down,
    // 5 button up, 6 SHIFT up, 7 CTRL up.
    let actions = json!([
        mv(5, 5),
        {"type": "click", "button": "left", "x": 10, "y": 10, "keys": ["CTRL", "SHIFT"]}
    ]);
    for fail_at in 2..=7 {
        let fx = Fx::new();
        fx.knobs(|s| s.fail_at = Some(fail_at));
        let reply = fx.run(actions.clone()).await;
        reply.assert_error(503, ErrorCode::DisplayUnavailable);
        let e = reply.error();
        assert_eq!(
            (e.index, e.executed, e.partial),
            (Some(1), Some(1), Some(true)),
            "fail at {fail_at}: {}",
            reply
        );
        let events = fx.take_events();
        assert_nothing_held(&events);
        assert!(
            !events.contains(&Event::Settle),
            "no screenshot after a failure"
        );
        let tail: Vec<Event> = match fail_at {
            2 => vec![Event::Motion(10, 10)],
            3 => vec![kd("CTRL"), ku("CTRL")],
            4 => vec![kd("SHIFT"), ku("SHIFT"), ku("CTRL")],
            // The button went down: it comes up first, then the keys.
            5 => vec![bd(1), bu(1), ku("SHIFT"), ku("CTRL")],
            6 => vec![bu(1), ku("SHIFT"), ku("CTRL")],
            _ => vec![ku("SHIFT"), ku("CTRL")],
        };
        assert!(
            events.ends_with(&tail),
            "fail at {fail_at}: {events:?} should end with {tail:?}"
        );
        // The desktop reconnects and the next request is served.
        fx.run(json!([click(1, 1)])).await.assert_ok();
    }
}

#[tokio::test]
async fn a15_the_deadline_is_504_and_releases_held_input() {
    let fx = Fx::build(SCREEN, |s| s.deadline = Duration::from_millis(400));
    fx.knobs(|s| s.slow = Some(Duration::from_millis(20)));
    let points = 300; // 300 x 20 ms: well past the deadline
    let started = Instant::now();
    let reply = fx.run(json!([zigzag_drag(points, &["SHIFT"])])).await;
    reply.assert_error(504, ErrorCode::Timeout);
    let e = reply.error();
    assert_eq!(
        (e.index, e.executed, e.partial),
        (Some(0), Some(0), Some(true))
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the deadline did not stop the drag"
    );
    let events = fx.take_events();
    assert_nothing_held(&events);
    assert!(events.ends_with(&[bu(1), ku("SHIFT")]), "{events:?}");
    assert!(motions(&events).len() < points, "the drag ran to its end");
    assert!(!events.contains(&Event::Capture(Rect::full(SCREEN))));
    // The next request has its own deadline.
    fx.knobs(|s| s.slow = None);
    fx.run(json!([click(1, 1)])).await.assert_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_a_dropped_request_cancels_and_releases_held_input() {
    let fx = Fx::new();
    fx.knobs(|s| s.slow = Some(Duration::from_millis(20)));

    // Typing 200 characters takes 4 s; the client gives up after 100 ms.
    let text = "y".repeat(200);
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        fx.run(json!([type_text(&text)])),
    )
    .await;
    assert!(gave_up.is_err(), "the request finished within 100 ms");
    fx.wait_idle(Duration::from_secs(2)).await;
    let events = fx.take_events();
    let typed = chars(&events);
    assert!(typed > 0, "typing never started");
    assert!(
        typed < text.len() / 2,
        "typing went on after the client left: {typed} chars"
    );
    assert!(
        !events.contains(&Event::Settle),
        "no screenshot for a gone client"
    );

    // A drag holding keys: the button and the keys come up.
    let points = 300;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        fx.run(json!([zigzag_drag(points, &["CTRL", "ALT"])])),
    )
    .await;
    assert!(gave_up.is_err());
    fx.wait_idle(Duration::from_secs(2)).await;
    let events = fx.take_events();
    assert_nothing_held(&events);
    assert!(
        events.ends_with(&[bu(1), ku("ALT"), ku("CTRL")]),
        "{events:?}"
    );
    assert!(motions(&events).len() < points / 2);

    // Nothing is stuck.
    fx.knobs(|s| s.slow = None);
    fx.run(json!([click(2, 2)])).await.assert_ok();
}

// ---------------------------------------------------------------------
// A10: over a real socket
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a10_slow_clients_are_dropped_without_hurting_others() {
    let fx = Fx::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandtopd.sock");
    let listener = bind_unix(&path).await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is {mode:o}");
    // Bound beside it and renamed into place: nothing else is left.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["sandtopd.sock"]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The head timeout injected short (10 s in production): what is tested
    // is that stalled clients are dropped and others are served meanwhile.
    let header_timeout = Duration::from_millis(800);
    let server = tokio::spawn(serve_with(
        fx.router.clone(),
        vec![listener],
        header_timeout,
        Some(Arc::clone(&fx.api.lifecycle)),
        async move {
            let _ = stopped.await;
        },
    ));
    let err = bind_unix(&path).await.unwrap_err();
    assert!(err.to_string().contains("already listens"), "{err}");

    let display = Arc::clone(&fx.api.display);
    let ticker = tokio::spawn(async move {
        loop {
            display.mark_ok();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    // Clients that send half a request head and stall, and one that sends
    // nothing at all. Each task reports when the server closed it.
    let mut stalled = Vec::new();
    for i in 0..9 {
        let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
        if i > 0 {
            s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: sand")
                .await
                .unwrap();
        }
        stalled.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let mut buf = [0u8; 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return t0.elapsed(),
                    Ok(_) => {}
                }
            }
        }));
    }

    let token = fx.token().to_string();
    let mut client = Client::connect(&path, Some(token.clone())).await.unwrap();
    let limit = header_timeout + Duration::from_secs(5);
    let started = Instant::now();
    let mut served = 0;
    while !stalled.iter().all(|t| t.is_finished()) {
        assert!(
            started.elapsed() < limit,
            "stalled connections still open after {limit:?}"
        );
        let (status, body) = client
            .request(Method::GET, paths::HEALTH, None)
            .await
            .unwrap();
        check_reply(paths::HEALTH, status, &body, &token);
        assert_eq!(status, StatusCode::OK);
        served += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        served >= 2,
        "only {served} health checks while the slow clients stalled"
    );
    for t in stalled {
        let closed_after = t.await.unwrap();
        assert!(closed_after < limit, "closed only after {closed_after:?}");
    }
    // Input over the socket still works, and a fresh client connects.
    let body = serde_json::to_vec(&json!({"actions": [click(9, 9)]})).unwrap();
    let (status, bytes) = client
        .request(Method::POST, paths::ACTIONS, Some(body))
        .await
        .unwrap();
    check_reply(paths::ACTIONS, status, &bytes, &token);
    assert_eq!(status, StatusCode::OK);
    let mut fresh = Client::connect(&path, Some(token.clone())).await.unwrap();
    let (status, bytes) = fresh.request(Method::GET, paths::INFO, None).await.unwrap();
    check_reply(paths::INFO, status, &bytes, &token);
    assert_eq!(status, StatusCode::OK);
    let mut anonymous = Client::connect(&path, None).await.unwrap();
    let (status, bytes) = anonymous
        .request(Method::GET, paths::INFO, None)
        .await
        .unwrap();
    check_reply(paths::INFO, status, &bytes, &token);
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Shutdown drains and returns.
    drop((client, fresh, anonymous));
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(12), server)
        .await
        .expect("serve did not return after shutdown")
        .unwrap();
    ticker.abort();

    // A stale socket (nobody listens) is replaced; a file that is not a
    // socket never is.
    let again = bind_unix(&path).await.unwrap();
    drop(again);
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let err = bind_unix(&file).await.unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

/// `final_screenshot: false` runs the actions and captures nothing; an
/// empty batch then takes the settled screenshot (how a host confirms the
/// screenshot separately, docs/contract.md rule 11).
#[tokio::test]
async fn a_batch_without_final_screenshot_captures_nothing() {
    let fx = Fx::new();
    let r = fx
        .batch(json!({"actions": [click(10, 10)], "final_screenshot": false}))
        .await;
    r.assert_ok();
    let b = r.batch();
    assert_eq!(b.executed, 1);
    assert!(b.screenshot.is_none());
    let evs = fx.take_events();
    assert!(
        !evs.iter()
            .any(|e| matches!(e, Event::Capture(_) | Event::Settle)),
        "{evs:?}"
    );
    assert!(evs.contains(&bd(1)));
    let r = fx.batch(json!({"actions": []})).await;
    r.assert_ok();
    assert!(r.batch().screenshot.is_some());
    let evs = fx.take_events();
    assert_eq!(
        evs.iter()
            .filter(|e| matches!(e, Event::Capture(_)))
            .count(),
        1
    );
    assert!(
        evs.contains(&Event::Settle),
        "the final screenshot settles: {evs:?}"
    );
}

// ---------------------------------------------------------------------
// docs/contract.md rule 7: a stop drains, then closes
// ---------------------------------------------------------------------

/// `GET /v1/info` over `client`, checked against the spec: its state.
async fn info_state(client: &mut Client, token: &str) -> DaemonState {
    let (status, body) = client
        .request(Method::GET, paths::INFO, None)
        .await
        .unwrap();
    let json = check_reply(paths::INFO, status, &body, token);
    assert_eq!(status, StatusCode::OK, "{}", brief(&json));
    serde_json::from_value::<InfoReply>(json).unwrap().state
}

/// After a stop, a call that came earlier finishes with its result while
/// `/v1/info` (on an open connection and on a new one) says `draining` and
/// new work is refused with `shutting_down`; once it is done, `closed`,
/// and the socket stops accepting.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule7_a_stop_reports_draining_while_a_call_is_in_flight_then_closed() {
    let fx = Arc::new(Fx::new());
    let token = fx.token().to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandtopd.sock");
    let listener = bind_unix(&path).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_with(
        fx.router.clone(),
        vec![listener],
        Duration::from_secs(10),
        Some(Arc::clone(&fx.api.lifecycle)),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut watcher = Client::connect(&path, Some(token.clone())).await.unwrap();
    assert_eq!(info_state(&mut watcher, &token).await, DaemonState::Open);

    // A call in flight: 40 characters at 50 ms each.
    fx.knobs(|s| s.slow = Some(Duration::from_millis(50)));
    let text: String = "abcdefghij".repeat(4);
    let call = {
        let (path, token) = (path.clone(), token.clone());
        let body = serde_json::to_vec(&json!({"actions": [type_text(&text)]})).unwrap();
        tokio::spawn(async move {
            let mut c = Client::connect(&path, Some(token)).await.unwrap();
            c.request(Method::POST, paths::ACTIONS, Some(body))
                .await
                .unwrap()
        })
    };
    fx.wait_events(1, Duration::from_secs(5)).await;

    // The stop.
    stop.send(()).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while !fx.api.lifecycle.stopping() {
        assert!(Instant::now() < end, "the server never began the stop");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Draining, on the open connection and on a new one; health answers.
    assert_eq!(
        info_state(&mut watcher, &token).await,
        DaemonState::Draining
    );
    let mut fresh = Client::connect(&path, Some(token.clone())).await.unwrap();
    assert_eq!(info_state(&mut fresh, &token).await, DaemonState::Draining);
    let (status, body) = fresh
        .request(Method::GET, paths::HEALTH, None)
        .await
        .unwrap();
    check_reply(paths::HEALTH, status, &body, &token);
    assert_eq!(status, StatusCode::OK);
    // New work is refused (not `busy`: refused because of the stop), and
    // none of it runs.
    for (p, body) in [
        (
            paths::ACTIONS,
            json!({"actions": [{"type": "keypress", "keys": ["F5"]}]}),
        ),
        (paths::SCREENSHOT, json!({})),
    ] {
        let (status, bytes) = fresh
            .request(Method::POST, p, Some(serde_json::to_vec(&body).unwrap()))
            .await
            .unwrap();
        let json = check_reply(p, status, &bytes, &token);
        let e: ErrorBody = serde_json::from_value(json).unwrap();
        assert_eq!(
            (status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ShuttingDown),
            "{p}"
        );
    }
    assert!(
        !fx.events().contains(&Event::Capture(Rect::full(SCREEN))),
        "the call finished before the draining checks; the test proves nothing"
    );
    assert_eq!(fx.api.lifecycle.state(), DaemonState::Draining);

    // The call finishes with its result.
    let (status, bytes) = tokio::time::timeout(CALL_LIMIT, call)
        .await
        .expect("the call in flight never finished")
        .unwrap();
    check_reply(paths::ACTIONS, status, &bytes, &token);
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    // Closed: the server returns within the drain deadline and its socket
    // refuses connections; info (through the router) says closed.
    drop((watcher, fresh));
    tokio::time::timeout(
        sandtopd::api::server::DRAIN_TIMEOUT + Duration::from_secs(2),
        server,
    )
    .await
    .expect("serve did not return after the drain")
    .unwrap();
    assert_eq!(fx.api.lifecycle.state(), DaemonState::Closed);
    let reply: InfoReply = serde_json::from_value(fx.call(fx.get(paths::INFO)).await.json).unwrap();
    assert_eq!(reply.state, DaemonState::Closed);
    let refused = tokio::net::UnixStream::connect(&path).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    fx.run(json!([click(5, 5)]))
        .await
        .assert_error(503, ErrorCode::ShuttingDown);
    fx.knobs(|s| s.slow = None);
    let mut want: Vec<Event> = text.chars().map(Event::Char).collect();
    want.extend([Event::Settle, Event::Capture(Rect::full(SCREEN))]);
    assert_eq!(fx.take_events(), want, "only the call in flight ran");
}

// ---------------------------------------------------------------------
// A16: load (issue 12 item 9)
// ---------------------------------------------------------------------

/// What one load client sends, and what it must get back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoadKind {
    /// GET /v1/health with the token: 200.
    Health,
    /// GET /v1/info without the token: 401.
    Anonymous,
    /// POST /v1/actions (one click): 200, or 409 `busy` while another
    /// batch runs — never queued behind it.
    Input,
    /// A Content-Length over the body limit: 413 before the body is read.
    Oversized,
    /// The request head dribbled out over ~300 ms, then health: 200.
    Slow,
}

/// One raw HTTP/1.1 exchange over a fresh connection: (status, body,
/// latency).
async fn load_client(
    path: std::path::PathBuf,
    kind: LoadKind,
    token: String,
) -> (LoadKind, u16, Vec<u8>, Duration) {
    let t0 = Instant::now();
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    let auth = format!("Authorization: Bearer {token}\r\n");
    let head = match kind {
        LoadKind::Health | LoadKind::Slow => {
            format!("GET /v1/health HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
        }
        LoadKind::Anonymous => {
            "GET /v1/info HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".to_string()
        }
        LoadKind::Input => {
            let body = json!({"actions": [click(5, 5)], "final_screenshot": false}).to_string();
            format!(
                "POST /v1/actions HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        LoadKind::Oversized => format!(
            "POST /v1/actions HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{{\"actions\": [",
            limits::MAX_BODY_BYTES * 4
        ),
    };
    if kind == LoadKind::Slow {
        for chunk in head.as_bytes().chunks(head.len().div_ceil(6)) {
            s.write_all(chunk).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    } else {
        s.write_all(head.as_bytes()).await.unwrap();
    }
    let mut reply = Vec::new();
    // The server may close as soon as it answered (an oversized body is
    // never read): a reset after the answer is not a failure.
    let _ = s.read_to_end(&mut reply).await;
    let text = String::from_utf8_lossy(&reply).to_string();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{kind:?}: no HTTP status in {text:?}"));
    let body = match text.find("\r\n\r\n") {
        Some(i) => reply[i + 4..].to_vec(),
        None => Vec::new(),
    };
    (kind, status, body, t0.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// 1,000 concurrent clients on one daemon over its Unix socket —
/// authenticated and not, fast and slow, oversized bodies, input batches
/// racing each other: every client gets its answer, input that finds the
/// desktop busy gets `busy` at once (no batch runs later than its answer:
/// the clicks that reached the driver are exactly the 200s), health keeps
/// being answered throughout, and the daemon serves normally afterwards.
/// The latencies go to stderr for BENCHMARKS.md (not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a16_a_thousand_concurrent_clients_get_answers_and_input_is_never_queued() {
    let fx = Fx::new();
    // Each input primitive takes 2 ms: batches overlap.
    fx.knobs(|s| s.slow = Some(Duration::from_millis(2)));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandtopd.sock");
    let listener = bind_unix(&path).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_with(
        fx.router.clone(),
        vec![listener],
        Duration::from_secs(5),
        Some(Arc::clone(&fx.api.lifecycle)),
        async move {
            let _ = stopped.await;
        },
    ));
    let display = Arc::clone(&fx.api.display);
    let ticker = tokio::spawn(async move {
        loop {
            display.mark_ok();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let token = fx.token().to_string();
    // Health polled on its own connection all through the storm.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (path, token, watching) = (path.clone(), token.clone(), Arc::clone(&watching));
        tokio::spawn(async move {
            let mut client = Client::connect(&path, Some(token)).await.unwrap();
            let mut answered = 0;
            while watching.load(Ordering::Relaxed) {
                let (status, _) = client
                    .request(Method::GET, paths::HEALTH, None)
                    .await
                    .unwrap();
                assert_eq!(status, StatusCode::OK, "health during the load");
                answered += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answered
        })
    };
    let kinds = [
        LoadKind::Health,
        LoadKind::Health,
        LoadKind::Input,
        LoadKind::Anonymous,
        LoadKind::Health,
        LoadKind::Input,
        LoadKind::Oversized,
        LoadKind::Slow,
        LoadKind::Health,
        LoadKind::Anonymous,
    ];
    let started = Instant::now();
    let clients: Vec<_> = (0..1000)
        .map(|i| {
            tokio::spawn(load_client(
                path.clone(),
                kinds[i % kinds.len()],
                token.clone(),
            ))
        })
        .collect();
    let mut results = Vec::new();
    for c in clients {
        results.push(
            tokio::time::timeout(Duration::from_secs(60), c)
                .await
                .expect("a client got no answer within 60 s")
                .unwrap(),
        );
    }
    let wall = started.elapsed();
    watching.store(false, Ordering::Relaxed);
    let health_answers = watcher.await.unwrap();
    assert!(health_answers >= 1);
    assert!(!server.is_finished(), "the server stopped under load");

    let (mut ok_inputs, mut busy_inputs) = (0usize, 0usize);
    let mut latencies: HashMap<&str, Vec<Duration>> = HashMap::new();
    for (kind, status, body, took) in &results {
        let name = match kind {
            LoadKind::Health => "health",
            LoadKind::Anonymous => "anonymous",
            LoadKind::Input => "input",
            LoadKind::Oversized => "oversized",
            LoadKind::Slow => "slow",
        };
        latencies.entry(name).or_default().push(*took);
        match (kind, *status) {
            (LoadKind::Health | LoadKind::Slow, 200) | (LoadKind::Anonymous, 401) => {}
            (LoadKind::Oversized, 413) => {}
            (LoadKind::Input, 200) => ok_inputs += 1,
            (LoadKind::Input, 409) => {
                let e: ErrorBody = serde_json::from_slice(body).unwrap();
                assert_eq!(e.code, ErrorCode::Busy, "{e:?}");
                busy_inputs += 1;
            }
            other => panic!(
                "{other:?}: unexpected answer {}",
                String::from_utf8_lossy(body)
            ),
        }
    }
    assert_eq!(ok_inputs + busy_inputs, 200);
    assert!(ok_inputs >= 1, "no input batch ran at all");
    // Exactly the answered batches reached the driver: nothing queued ran
    // after its client was told `busy`.
    let presses = fx
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Button(1, true)))
        .count();
    assert_eq!(presses, ok_inputs, "clicks that reached the driver");
    eprintln!(
        "a16 load: 1000 clients in {wall:?}; inputs: {ok_inputs} ran, {busy_inputs} busy; \
         health answered {health_answers} times on its own connection meanwhile"
    );
    let mut names: Vec<_> = latencies.keys().copied().collect();
    names.sort();
    for name in names {
        let v = latencies.get_mut(name).unwrap();
        v.sort();
        eprintln!(
            "a16 load: {name:9} n={:4} p50 {:?} p99 {:?} max {:?}",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            v.last().unwrap()
        );
    }
    // Afterwards: a fresh client's input runs.
    fx.knobs(|s| s.slow = None);
    let mut client = Client::connect(&path, Some(token.clone())).await.unwrap();
    let body = serde_json::to_vec(&json!({"actions": [click(7, 7)]})).unwrap();
    let (status, bytes) = client
        .request(Method::POST, paths::ACTIONS, Some(body))
        .await
        .unwrap();
    check_reply(paths::ACTIONS, status, &bytes, &token);
    assert_eq!(status, StatusCode::OK);
    drop(client);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(12), server)
        .await
        .expect("serve did not return after shutdown")
        .unwrap();
    ticker.abort();
}

/// The live view's frames (`/v1/frame`).
#[path = "api/frame.rs"]
mod frame;

/// `/v1/files/read` (rule 54): a file beneath the files root comes back
/// byte-exact; a missing one is 404, a path outside or through a planted
/// link 400, and a daemon without `--files-root` reads nothing.
#[tokio::test]
async fn files_read_serves_only_regular_files_beneath_its_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("home");
    std::fs::create_dir_all(root.join("demo")).unwrap();
    let record = "{\"name\":\"Zoë 山田\"}\n\u{1b}[2J".as_bytes();
    std::fs::write(root.join("demo/s.jsonl"), record).unwrap();
    std::fs::write(tmp.path().join("outside"), "host").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside"), root.join("link")).unwrap();
    let r = root.clone();
    let fx = Fx::build(SCREEN, move |s| s.files_root = Some(r));
    let read = |p: String| fx.call(fx.post(paths::FILES_READ, &json!({ "path": p })));
    let at = |rel: &str| format!("{}/{rel}", root.display());
    let ok = read(at("demo/s.jsonl")).await;
    ok.assert_ok();
    assert_eq!(ok.json["size"], record.len());
    let data = base64::engine::general_purpose::STANDARD
        .decode(ok.json["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(data, record);
    read(at("demo/none"))
        .await
        .assert_error(404, ErrorCode::NoSuchFile);
    read(at("link"))
        .await
        .assert_error(400, ErrorCode::BadRequest);
    read(at("demo/../../outside"))
        .await
        .assert_error(400, ErrorCode::BadRequest);
    read(format!("{}/outside", tmp.path().display()))
        .await
        .assert_error(400, ErrorCode::BadRequest);
    read("demo/s.jsonl".into())
        .await
        .assert_error(400, ErrorCode::BadRequest);
    // Unknown fields are refused like everywhere.
    fx.call(fx.post(
        paths::FILES_READ,
        &json!({"path": at("demo/s.jsonl"), "x": 1}),
    ))
    .await
    .assert_error(400, ErrorCode::BadRequest);
    // Without a files root: nothing is read.
    let plain = Fx::new();
    plain
        .call(plain.post(paths::FILES_READ, &json!({ "path": at("demo/s.jsonl") })))
        .await
        .assert_error(404, ErrorCode::NotFound);
}

#[path = "api/clock.rs"]
mod clock;

#[path = "api/unchanged.rs"]
mod unchanged;
