//! A scripted mock of OpenAI's Responses API (`POST /responses`), for the
//! loop tests: loopback only, no network, no key of any value.
//!
//! What it does with every request, in order:
//! 1. records it (body, headers without `Authorization`, whether the bearer
//!    key was the expected one) — nothing is ever dropped from the record;
//! 2. checks the bearer key (401 otherwise);
//! 3. validates the body against `CreateResponse` in
//!    `reference/openai-openapi.yaml` (400 with the errors, which are also
//!    recorded so a test can assert there were none);
//! 4. checks what the real API checks beyond the schema (400/404 like the
//!    API, recorded as problems): `previous_response_id` names a stored
//!    response; every tool call of the previous response (or of a resent
//!    conversation) gets exactly one output, and no output answers an
//!    unknown call; `acknowledged_safety_checks` equal the call's pending
//!    checks; screenshots and input images are real image data URLs;
//!    `computer_use_preview` comes with `truncation: auto`; without storage
//!    a resent reasoning item carries its `encrypted_content`;
//! 5. answers with the next queued [`Reply`]: a whole `Response` (as JSON,
//!    or as server-sent events when the request says `"stream": true`), a
//!    status error, a malformed body, or a stream cut before
//!    `response.completed`. With nothing queued it answers 400 and records
//!    a problem.
//!
//! The fixtures ([`computer_call`], [`usage`], ...) follow the schemas
//! (`ComputerToolCall`, `ResponseUsage`, `ResponseCompletedEvent`, ...);
//! this module's tests validate them against the spec.
//!
//! Layout: fixtures, replies, the record, the API's rules and helpers here,
//! in banner sections; serving (the handler, its decisions, JSON and
//! server-sent events) in `mock_responses/serve.rs`; the tests in
//! `mock_responses/tests.rs`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use serde_json::{Value, json};

use crate::openapi::{errors, openai_spec, validator};

/// OpenAI's spec read with OpenAPI's discriminator semantics.
///
/// A `oneOf` with a `discriminator` picks its alternative by the `type`
/// tag; plain JSON Schema instead demands that exactly one alternative
/// match, which this spec's overlapping alternatives never allow (a user
/// message is both an `EasyInputMessage` and an `InputMessage`, so every
/// real request would fail). Under a discriminator, `oneOf` is therefore
/// read as `anyOf`: the value must be valid under at least one of the
/// alternatives. A `oneOf` without a discriminator stays strict.
pub fn openai_spec_discriminated() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        fn walk(v: &mut Value) {
            match v {
                Value::Object(o) => {
                    if o.contains_key("discriminator")
                        && let Some(alternatives) = o.remove("oneOf")
                    {
                        match o.remove("anyOf") {
                            None => {
                                o.insert("anyOf".into(), alternatives);
                            }
                            Some(any) => {
                                let mut all = match o.remove("allOf") {
                                    Some(Value::Array(a)) => a,
                                    _ => Vec::new(),
                                };
                                all.push(json!({"anyOf": any}));
                                all.push(json!({"anyOf": alternatives}));
                                o.insert("allOf".into(), Value::Array(all));
                            }
                        }
                    }
                    o.values_mut().for_each(walk);
                }
                Value::Array(a) => a.iter_mut().for_each(walk),
                _ => {}
            }
        }
        let mut spec = openai_spec().clone();
        walk(&mut spec);
        spec
    })
}

/// The validator of request bodies: `CreateResponse`, compiled once per
/// test binary from [`openai_spec_discriminated`].
pub fn create_response_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| validator(openai_spec_discriminated(), "CreateResponse"))
}

// ---------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id in the API's style: `{prefix}_` and 48 hex digits.
pub fn new_id(prefix: &str) -> String {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}_{:016x}{:032x}", n, t)
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `click` with the left button.
pub fn click(x: i64, y: i64) -> Value {
    json!({"type": "click", "button": "left", "x": x, "y": y})
}

/// `click` with any button (`left`, `right`, `wheel`, `back`, `forward`).
pub fn click_button(button: &str, x: i64, y: i64) -> Value {
    json!({"type": "click", "button": button, "x": x, "y": y})
}

/// `double_click` (the schema requires `keys`, possibly null).
pub fn double_click(x: i64, y: i64) -> Value {
    json!({"type": "double_click", "x": x, "y": y, "keys": null})
}

/// `move`.
pub fn move_to(x: i64, y: i64) -> Value {
    json!({"type": "move", "x": x, "y": y})
}

/// `scroll` by pixel-like distances.
pub fn scroll(x: i64, y: i64, scroll_x: i64, scroll_y: i64) -> Value {
    json!({"type": "scroll", "x": x, "y": y, "scroll_x": scroll_x, "scroll_y": scroll_y})
}

/// `drag` along `path`, holding `keys` (empty: none).
pub fn drag(path: &[(i64, i64)], keys: &[&str]) -> Value {
    let path: Vec<Value> = path.iter().map(|(x, y)| json!({"x": x, "y": y})).collect();
    let mut v = json!({"type": "drag", "path": path});
    if !keys.is_empty() {
        v["keys"] = json!(keys);
    }
    v
}

/// `keypress` of a combination.
pub fn keypress(keys: &[&str]) -> Value {
    json!({"type": "keypress", "keys": keys})
}

/// `type`.
pub fn type_text(text: &str) -> Value {
    json!({"type": "type", "text": text})
}

/// `wait`.
pub fn wait() -> Value {
    json!({"type": "wait"})
}

/// `screenshot`.
pub fn screenshot() -> Value {
    json!({"type": "screenshot"})
}

/// A pending safety check (`ComputerCallSafetyCheckParam`).
pub fn safety_check(id: &str, code: &str, message: &str) -> Value {
    json!({"id": id, "code": code, "message": message})
}

/// A GA computer call with batched `actions[]` (`ComputerToolCall`).
pub fn computer_call(call_id: &str, actions: Vec<Value>) -> Value {
    computer_call_checked(call_id, actions, Vec::new())
}

/// A GA computer call with pending safety checks.
pub fn computer_call_checked(call_id: &str, actions: Vec<Value>, checks: Vec<Value>) -> Value {
    json!({
        "type": "computer_call",
        "id": new_id("cu"),
        "call_id": call_id,
        "actions": actions,
        "pending_safety_checks": checks,
        "status": "completed",
    })
}

/// A preview-shaped computer call: one `action` (`computer_use_preview`).
pub fn preview_call(call_id: &str, action: Value, checks: Vec<Value>) -> Value {
    json!({
        "type": "computer_call",
        "id": new_id("cu"),
        "call_id": call_id,
        "action": action,
        "pending_safety_checks": checks,
        "status": "completed",
    })
}

/// A function call (`FunctionToolCall`); `arguments` is serialized to the
/// JSON string the API sends.
pub fn function_call(call_id: &str, name: &str, arguments: &Value) -> Value {
    json!({
        "type": "function_call",
        "id": new_id("fc"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments.to_string(),
        "status": "completed",
    })
}

/// The model asking the operator a question through `ask_user`.
pub fn ask_user(call_id: &str, question: &str) -> Value {
    function_call(call_id, "ask_user", &json!({"question": question}))
}

/// An assistant message (`OutputMessage` with one `output_text`).
pub fn message(text: &str) -> Value {
    json!({
        "type": "message",
        "id": new_id("msg"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    })
}

/// A reasoning item (`ReasoningItem`) with a summary.
pub fn reasoning(summary: &str) -> Value {
    json!({
        "type": "reasoning",
        "id": new_id("rs"),
        "summary": [{"type": "summary_text", "text": summary}],
    })
}

/// `ResponseUsage` with every detail the schema requires.
pub fn usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": output_tokens / 2},
        "total_tokens": input_tokens + output_tokens,
    })
}

// ---------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------

/// The body of a scripted response: its output items, usage and status.
#[derive(Debug, Clone)]
pub struct Output {
    pub items: Vec<Value>,
    /// `None`: the response carries no `usage` at all.
    pub usage: Option<Value>,
    /// `completed`, `incomplete` or `failed`.
    pub status: String,
    /// A fixed response id (default: a fresh `resp_...`).
    pub id: Option<String>,
}

/// How a stream is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The body ends cleanly after the last `response.output_item.done`.
    Clean,
    /// The connection is aborted mid-body after the last item.
    Abort,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A `Response` built from the request (model, tools, instructions,
    /// `previous_response_id`, `store`, ...) and these items.
    Output(Output),
    /// This exact body (a `Response` object, or anything), served as JSON
    /// with status 200 (or inside `response.completed` when streaming).
    Raw(Value),
    /// An error status with an OpenAI-style error body.
    Status {
        status: u16,
        message: String,
        retry_after: Option<String>,
    },
    /// Status 200 and this text, which is not JSON (or, streaming, SSE
    /// whose data is not JSON).
    Malformed(String),
    /// Streaming: every event up to `response.completed`, which never comes.
    /// Not streaming: the first half of the JSON body.
    Cut(Output, Cut),
    /// Streaming: `response.created`, then an `error` event.
    StreamError(String),
    /// Answer after a delay.
    Delayed(Duration, Box<Reply>),
}

impl Reply {
    /// A completed response with these items and some usage.
    pub fn output(items: Vec<Value>) -> Reply {
        Reply::with_usage(items, Some(usage(1200, 80)))
    }

    /// A completed response with the given usage (`None`: no `usage` field).
    pub fn with_usage(items: Vec<Value>, usage: Option<Value>) -> Reply {
        Reply::Output(Output {
            items,
            usage,
            status: "completed".into(),
            id: None,
        })
    }

    /// A completed response without `usage`.
    pub fn without_usage(items: Vec<Value>) -> Reply {
        Reply::with_usage(items, None)
    }

    /// A final assistant message.
    pub fn done(text: &str) -> Reply {
        Reply::output(vec![message(text)])
    }

    /// An error status with an OpenAI-style body.
    pub fn status(status: u16, message: &str) -> Reply {
        Reply::Status {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 429 with `Retry-After`.
    pub fn rate_limited(retry_after: &str) -> Reply {
        Reply::Status {
            status: 429,
            message: "Rate limit reached for requests. Please try again shortly.".into(),
            retry_after: Some(retry_after.into()),
        }
    }

    /// A 200 whose body is not JSON.
    pub fn malformed() -> Reply {
        Reply::Malformed("{\"id\": \"resp_broken\", \"object\": \"respo".into())
    }

    /// A stream that ends cleanly before `response.completed`.
    pub fn cut(items: Vec<Value>) -> Reply {
        Reply::Cut(
            Output {
                items,
                usage: Some(usage(1200, 80)),
                status: "completed".into(),
                id: None,
            },
            Cut::Clean,
        )
    }

    /// A stream whose connection is aborted before `response.completed`.
    pub fn aborted(items: Vec<Value>) -> Reply {
        match Reply::cut(items) {
            Reply::Cut(o, _) => Reply::Cut(o, Cut::Abort),
            other => other,
        }
    }

    /// This reply, `delay` later.
    pub fn after(self, delay: Duration) -> Reply {
        Reply::Delayed(delay, Box::new(self))
    }
}

// ---------------------------------------------------------------------
// The record
// ---------------------------------------------------------------------

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// 1-based arrival number.
    pub n: usize,
    pub at: Instant,
    /// The body (Null when it was not JSON).
    pub body: Value,
    /// The body as sent.
    pub raw_body: String,
    /// Every header but `Authorization`, names lower-case.
    pub headers: Vec<(String, String)>,
    /// Whether `Authorization` was exactly `Bearer <the key>`.
    pub authorized: bool,
    /// Schema errors against `CreateResponse`.
    pub validation_errors: Vec<String>,
    /// What the real API would have refused beyond the schema.
    pub problems: Vec<String>,
    /// What the mock answered, in words (`response resp_...`, `status 429`).
    pub answer: String,
    /// The full response served (also when it was streamed or cut).
    pub response: Option<Value>,
    authorization: String,
}

impl Recorded {
    /// The request's `input` items (an input string counts as none).
    pub fn input(&self) -> Vec<Value> {
        self.body
            .get("input")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// Items of the input with this `type`.
    pub fn input_of_type(&self, kind: &str) -> Vec<Value> {
        self.input()
            .into_iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some(kind))
            .collect()
    }

    pub fn previous_response_id(&self) -> Option<&str> {
        self.body
            .get("previous_response_id")
            .and_then(Value::as_str)
    }

    pub fn stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The response id served, if a response was built.
    pub fn response_id(&self) -> Option<String> {
        self.response
            .as_ref()
            .and_then(|r| r.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Where `needle` occurs in this request: `body`, `header NAME`, or
    /// `header authorization`.
    pub fn occurrences(&self, needle: &str) -> Vec<String> {
        let mut at = Vec::new();
        if needle.is_empty() {
            return at;
        }
        if self.raw_body.contains(needle) {
            at.push(format!("request {} body", self.n));
        }
        for (name, value) in &self.headers {
            if value.contains(needle) || name.contains(needle) {
                at.push(format!("request {} header {name}", self.n));
            }
        }
        if self.authorization.contains(needle) {
            at.push(format!("request {} header authorization", self.n));
        }
        at
    }
}

#[derive(Debug, Default)]
struct Script {
    queue: VecDeque<Reply>,
    requests: Vec<Recorded>,
    /// Stored responses (store != false), by id: their output items.
    stored: HashMap<String, Vec<Value>>,
    /// Requests received so far (numbering survives `retain`).
    received: usize,
    /// Keep only the newest this many requests (a soak would otherwise
    /// keep every screenshot it was sent).
    retain: Option<usize>,
    /// The compaction items served, by id: their encrypted content (a
    /// resent one must carry it unchanged).
    compactions: HashMap<String, String>,
    /// The model refuses `context_management` (400 naming it), as a model
    /// without compaction does.
    no_compaction: bool,
}

impl Script {
    fn record(&mut self, rec: Recorded) {
        self.requests.push(rec);
        if let Some(n) = self.retain
            && self.requests.len() > n
        {
            let extra = self.requests.len() - n;
            self.requests.drain(..extra);
        }
    }
}

#[derive(Debug)]
struct Shared {
    key: String,
    script: Mutex<Script>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running mock.
#[derive(Debug)]
pub struct MockResponses {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl MockResponses {
    /// Starts on `127.0.0.1:0`, expecting `Authorization: Bearer {key}`.
    pub async fn start(key: &str) -> MockResponses {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        MockResponses::start_on(addr, key, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("cannot start the mock Responses API: {e}"))
    }

    /// Starts on a given loopback address (to come up on a port a client
    /// already tries, for connection-refused tests) with `replies` queued
    /// before the first connection is accepted.
    pub async fn start_on(
        addr: SocketAddr,
        key: &str,
        replies: Vec<Reply>,
    ) -> std::io::Result<MockResponses> {
        assert!(addr.ip().is_loopback(), "the mock listens on loopback only");
        // Compile the validator before the first request needs it.
        let _ = create_response_validator();
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            key: key.to_string(),
            script: Mutex::new(Script {
                queue: replies.into(),
                ..Script::default()
            }),
        });
        let app = Router::new()
            .route("/responses", post(handle))
            .fallback(|| async {
                api_error(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    None,
                    "Invalid URL: the mock serves POST /responses only",
                )
            })
            .with_state(Arc::clone(&shared));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(MockResponses {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT` (requests go to `{base}/responses`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Queues several replies.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.lock().queue.extend(replies);
    }

    /// From now on, refuse `context_management` as a model without
    /// compaction does: 400, `param: "context_management"`.
    pub fn refuse_compaction(&self) {
        self.shared.lock().no_compaction = true;
    }

    /// Replies not yet used.
    pub fn queued(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Keeps only the newest `n` requests from now on (schema errors and
    /// problems of dropped requests are dropped with them: check them as
    /// you go). For soaks.
    pub fn retain_last(&self, n: usize) {
        self.shared.lock().retain = Some(n);
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// Every schema error of every request, prefixed with its number.
    pub fn validation_errors(&self) -> Vec<String> {
        self.shared
            .lock()
            .requests
            .iter()
            .flat_map(|r| {
                r.validation_errors
                    .iter()
                    .map(move |e| format!("request {}: {e}", r.n))
            })
            .collect()
    }

    /// Every problem (unauthorized, unexpected, refused by the API's own
    /// rules) of every request.
    pub fn problems(&self) -> Vec<String> {
        self.shared
            .lock()
            .requests
            .iter()
            .flat_map(|r| {
                r.problems
                    .iter()
                    .map(move |e| format!("request {}: {e}", r.n))
            })
            .collect()
    }

    /// Where `needle` occurs in any request (bodies and every header,
    /// `Authorization` included).
    pub fn occurrences(&self, needle: &str) -> Vec<String> {
        self.shared
            .lock()
            .requests
            .iter()
            .flat_map(|r| r.occurrences(needle))
            .collect()
    }

    /// Stops serving (connections in flight are closed).
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for MockResponses {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

mod serve;
use serve::*;
pub use serve::{build_response, compaction, compaction_rules, sse_events};

// ---------------------------------------------------------------------
// The API's own rules beyond the schema
// ---------------------------------------------------------------------

fn kind_of(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

fn call_id_of(v: &Value) -> &str {
    v.get("call_id").and_then(Value::as_str).unwrap_or("")
}

fn check_ids(call: &Value, field: &str) -> BTreeSet<String> {
    call.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `url` is an image the API would accept: an http(s) URL, or a
/// base64 data URL of an image type whose bytes decode.
fn acceptable_image_url(url: &str) -> bool {
    if url.starts_with("https://") || url.starts_with("http://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("data:") else {
        return false;
    };
    let Some((mime, data)) = rest.split_once(";base64,") else {
        return false;
    };
    matches!(
        mime,
        "image/png" | "image/jpeg" | "image/webp" | "image/gif"
    ) && !data.is_empty()
        && base64::engine::general_purpose::STANDARD
            .decode(data)
            .is_ok()
}

/// What the real API refuses beyond the schema: (status, message) pairs.
pub fn api_rules(req: &Value, stored: &HashMap<String, Vec<Value>>) -> Vec<(u16, String)> {
    let mut refused = Vec::new();
    let input: Vec<Value> = req
        .get("input")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let store = req.get("store").and_then(Value::as_bool) != Some(false);
    // Calls that need an output in this request.
    let mut calls: Vec<Value> = Vec::new();
    if let Some(prev) = req.get("previous_response_id").and_then(Value::as_str) {
        match stored.get(prev) {
            Some(items) => calls.extend(
                items
                    .iter()
                    .filter(|i| matches!(kind_of(i), "computer_call" | "function_call"))
                    .cloned(),
            ),
            None => refused.push((
                400,
                format!("Previous response with id '{prev}' not found."),
            )),
        }
    }
    calls.extend(
        input
            .iter()
            .filter(|i| matches!(kind_of(i), "computer_call" | "function_call"))
            .cloned(),
    );
    let mut answered: HashMap<String, usize> = HashMap::new();
    for (i, item) in input.iter().enumerate() {
        let kind = kind_of(item);
        if !matches!(kind, "computer_call_output" | "function_call_output") {
            continue;
        }
        let call_id = call_id_of(item);
        let wanted = if kind == "computer_call_output" {
            "computer_call"
        } else {
            "function_call"
        };
        let Some(call) = calls
            .iter()
            .find(|c| kind_of(c) == wanted && call_id_of(c) == call_id)
        else {
            refused.push((
                400,
                format!("No tool call found for {kind} with call_id {call_id} (input[{i}])."),
            ));
            continue;
        };
        *answered.entry(call_id.to_string()).or_default() += 1;
        if kind == "computer_call_output" {
            let pending = check_ids(call, "pending_safety_checks");
            let acked = check_ids(item, "acknowledged_safety_checks");
            if pending != acked {
                refused.push((
                    400,
                    format!(
                        "input[{i}]: acknowledged_safety_checks {acked:?} do not match the pending safety checks {pending:?} of call {call_id}."
                    ),
                ));
            }
            let out = &item["output"];
            let url = out.get("image_url").and_then(Value::as_str);
            let file = out.get("file_id").and_then(Value::as_str);
            match (url, file) {
                (None, None) => refused.push((
                    400,
                    format!("input[{i}].output: a computer_screenshot needs image_url or file_id."),
                )),
                (Some(u), _) if !acceptable_image_url(u) => refused.push((
                    400,
                    format!(
                        "Invalid 'input[{i}].output.image_url': expected an image URL or a base64-encoded image data URL, got `{}`.",
                        u.chars().take(40).collect::<String>()
                    ),
                )),
                _ => {}
            }
        }
    }
    for call in &calls {
        let id = call_id_of(call);
        match answered.get(id).copied().unwrap_or(0) {
            0 => refused.push((
                400,
                format!(
                    "No tool output found for {} call {id}.",
                    kind_of(call).trim_end_matches("_call")
                ),
            )),
            1 => {}
            n => refused.push((400, format!("{n} outputs for call {id}; expected one."))),
        }
    }
    for (i, item) in input.iter().enumerate() {
        if let Some(parts) = item.get("content").and_then(Value::as_array) {
            for (j, p) in parts.iter().enumerate() {
                if kind_of(p) == "input_image"
                    && let Some(u) = p.get("image_url").and_then(Value::as_str)
                    && !acceptable_image_url(u)
                {
                    refused.push((
                        400,
                        format!(
                            "Invalid 'input[{i}].content[{j}].image_url': expected an image URL or a base64-encoded image data URL."
                        ),
                    ));
                }
            }
        }
        if !store
            && kind_of(item) == "reasoning"
            && item
                .get("encrypted_content")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            let id = item.get("id").and_then(Value::as_str).unwrap_or("?");
            refused.push((
                404,
                format!(
                    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."
                ),
            ));
        }
    }
    let preview = req
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| kind_of(t) == "computer_use_preview"));
    if preview && req.get("truncation").and_then(Value::as_str) != Some("auto") {
        refused.push((
            400,
            "The computer_use_preview tool requires `truncation` to be `auto`.".into(),
        ));
    }
    refused
}

// ---------------------------------------------------------------------
// Helpers for assertions
// ---------------------------------------------------------------------

/// The pixel size of a base64 PNG data URL (`None` if it is not one).
pub fn png_size_of_data_url(url: &str) -> Option<(u32, u32)> {
    let data = url.strip_prefix("data:image/png;base64,")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    let reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .ok()?;
    let info = reader.info();
    Some((info.width, info.height))
}

/// Every image data URL in a JSON value, in document order.
pub fn image_urls(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.starts_with("data:image/") => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

#[cfg(test)]
mod tests;
