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
use sandtopd::driver::fake::{Event, FakeState};
use sandtopd::testing::{FakeDesktop, FakeLog, Setup};
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

    fn build(screen: Size, tune: impl FnOnce(&mut ApiState) + 'static) -> Fx {
        let FakeDesktop {
            api,
            drivers,
            desktop,
        } = FakeDesktop::start_with(
            screen,
            Setup {
                api: Box::new(move |mut state| {
                    tune(&mut state);
                    state
                }),
                ..Setup::default()
            },
        );
        Fx {
            router: router(Arc::clone(&api)),
            api,
            drivers,
            desktop,
        }
    }

    fn token(&self) -> &str {
        self.api.token.get().map_or("<no token yet>", Token::expose)
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

// The properties, one module each; the fixture, the reply checks and the
// helpers above are theirs.
#[path = "api/requests.rs"]
mod requests;
#[path = "api/spec.rs"]
mod spec;
#[path = "api/validation.rs"]
mod validation;
// What two property modules share, from the one that uses it most.
use spec::assert_schema_fields;
use validation::png_size;
#[path = "api/actions.rs"]
mod actions;
#[path = "api/concurrency.rs"]
mod concurrency;
#[path = "api/socket.rs"]
mod socket;

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
