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
//! Size: ~1590 lines, ~245 of them inline tests: one mock in six banner
//! sections (fixtures, replies, the record, serving, the API's rules,
//! helpers). Nothing but convenience keeps it whole; the banners mark the
//! natural split into a `mock_responses/` folder, the tests with it.

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

// ---------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------

fn api_error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    api_error_param(status, kind, code, None, message)
}

fn api_error_param(
    status: StatusCode,
    kind: &str,
    code: Option<&str>,
    param: Option<&str>,
    message: &str,
) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
            .to_string(),
    )
        .into_response()
}

/// What to send, decided under the lock, sent after it.
enum Answer {
    Now(Response),
    Later(Duration, Box<Answer>),
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut answer = decide(&shared, &headers, &body);
    loop {
        match answer {
            Answer::Now(r) => return r,
            Answer::Later(d, next) => {
                tokio::time::sleep(d).await;
                answer = *next;
            }
        }
    }
}

fn decide(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Answer {
    let mut script = shared.lock();
    script.received += 1;
    let n = script.received;
    let raw_body = String::from_utf8_lossy(body).into_owned();
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let mut rec = Recorded {
        n,
        at: Instant::now(),
        body: parsed.clone().unwrap_or(Value::Null),
        raw_body,
        headers: headers
            .iter()
            .filter(|(k, _)| *k != header::AUTHORIZATION)
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        authorized: authorization == format!("Bearer {}", shared.key),
        validation_errors: Vec::new(),
        problems: Vec::new(),
        answer: String::new(),
        response: None,
        authorization,
    };
    if !rec.authorized {
        rec.problems
            .push("the Authorization header is not `Bearer <the key>`".into());
        rec.answer = "status 401".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
        ));
    }
    let Some(req) = parsed else {
        rec.validation_errors
            .push("the request body is not JSON".into());
        rec.answer = "status 400".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "We could not parse the JSON body of your request.",
        ));
    };
    rec.validation_errors = errors(create_response_validator(), &req);
    if !rec.validation_errors.is_empty() {
        let msg = format!("Invalid request: {}", rec.validation_errors[0]);
        rec.answer = "status 400 (schema)".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            &msg,
        ));
    }
    let wants_compaction = req.get("context_management").is_some_and(|c| !c.is_null());
    if script.no_compaction && wants_compaction {
        rec.answer = "status 400 (no compaction for this model)".into();
        script.record(rec);
        return Answer::Now(api_error_param(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("unsupported_parameter"),
            Some("context_management"),
            "Unsupported parameter: 'context_management' is not supported with this model.",
        ));
    }
    let mut refused = api_rules(&req, &script.stored);
    refused.extend(compaction_rules(&req, &script.compactions));
    if let Some((status, _)) = refused.first() {
        let status = *status;
        rec.problems = refused.into_iter().map(|(_, m)| m).collect();
        let msg = rec.problems[0].clone();
        rec.answer = format!("status {status} (api rules)");
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            "invalid_request_error",
            None,
            &msg,
        ));
    }
    let Some(reply) = script.queue.pop_front() else {
        rec.problems
            .push("a request arrived with no reply queued".into());
        rec.answer = "status 400 (nothing queued)".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "mock: no reply queued for this request",
        ));
    };
    let answer = serve(reply, &req, &mut rec, &mut script.stored);
    // The compaction items served, for `compaction_rules` later.
    if let Some(out) = rec.response.as_ref().and_then(|r| r["output"].as_array()) {
        for item in out.iter().filter(|i| i["type"] == "compaction") {
            if let (Some(id), Some(content)) =
                (item["id"].as_str(), item["encrypted_content"].as_str())
            {
                script
                    .compactions
                    .insert(id.to_string(), content.to_string());
            }
        }
    }
    script.record(rec);
    answer
}

/// Compaction's rules beyond the schema: `context_management` entries
/// are of type `compaction` (the only one the API supports), and a
/// compaction item in the input carries the encrypted content the API
/// produced for it, unchanged (items are resent as they came).
pub fn compaction_rules(req: &Value, served: &HashMap<String, String>) -> Vec<(u16, String)> {
    let mut refused = Vec::new();
    if let Some(entries) = req.get("context_management").and_then(Value::as_array) {
        for (i, e) in entries.iter().enumerate() {
            if e["type"] != "compaction" {
                refused.push((
                    400,
                    format!(
                        "Invalid value for 'context_management[{i}].type': only 'compaction' is supported."
                    ),
                ));
            }
        }
    }
    let input = req.get("input").and_then(Value::as_array);
    for (i, item) in input.into_iter().flatten().enumerate() {
        if item["type"] != "compaction" {
            continue;
        }
        let content = item["encrypted_content"].as_str();
        let unchanged = match (item["id"].as_str(), content) {
            (Some(id), Some(c)) => served.get(id).is_some_and(|k| k == c),
            // `CompactionSummaryItemParam`: the id is optional.
            (None, Some(c)) => served.values().any(|k| k == c),
            _ => false,
        };
        match unchanged {
            true => {}
            false => refused.push((
                400,
                format!(
                    "Invalid 'input[{i}]': the compaction item's encrypted_content is not the one the API produced."
                ),
            )),
        }
    }
    refused
}

/// A compaction output item, as the API adds one to a response when it
/// compacted the context (`CompactionBody`).
pub fn compaction(id: &str) -> Value {
    json!({
        "type": "compaction",
        "id": id,
        "encrypted_content": base64::engine::general_purpose::STANDARD
            .encode(format!("compacted context {id}").as_bytes()),
    })
}

fn serve(
    reply: Reply,
    req: &Value,
    rec: &mut Recorded,
    stored: &mut HashMap<String, Vec<Value>>,
) -> Answer {
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    match reply {
        Reply::Delayed(d, inner) => Answer::Later(d, Box::new(serve(*inner, req, rec, stored))),
        Reply::Output(out) => {
            let resp = build_response(req, &out);
            rec.answer = format!("response {}", resp["id"].as_str().unwrap_or("?"));
            if req.get("store").and_then(Value::as_bool) != Some(false)
                && out.status == "completed"
                && let Some(id) = resp["id"].as_str()
            {
                stored.insert(id.to_string(), out.items.clone());
            }
            rec.response = Some(resp.clone());
            Answer::Now(if stream {
                sse(&sse_events(&resp), None)
            } else {
                json_200(resp.to_string())
            })
        }
        Reply::Raw(v) => {
            rec.answer = "raw response".into();
            rec.response = Some(v.clone());
            Answer::Now(if stream {
                let ev = json!({"type": "response.completed", "sequence_number": 0, "response": v});
                sse(&[ev], None)
            } else {
                json_200(v.to_string())
            })
        }
        Reply::Status {
            status,
            message,
            retry_after,
        } => {
            rec.answer = format!("status {status}");
            let (kind, code) = match status {
                429 => ("requests", Some("rate_limit_exceeded")),
                500..=599 => ("server_error", None),
                401 => ("invalid_request_error", Some("invalid_api_key")),
                _ => ("invalid_request_error", None),
            };
            let mut r = api_error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                kind,
                code,
                &message,
            );
            if let Some(after) = retry_after
                && let Ok(v) = after.parse()
            {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            Answer::Now(r)
        }
        Reply::Malformed(text) => {
            rec.answer = "malformed".into();
            Answer::Now(if stream {
                sse_raw(
                    vec![Ok(Bytes::from(format!(
                        "event: response.created\ndata: {text}\n\n"
                    )))],
                    None,
                )
            } else {
                json_200(text)
            })
        }
        Reply::Cut(out, how) => {
            let resp = build_response(req, &out);
            rec.answer = format!("cut {}", resp["id"].as_str().unwrap_or("?"));
            rec.response = Some(resp.clone());
            let abort = (how == Cut::Abort).then_some(());
            Answer::Now(if stream {
                let mut events = sse_events(&resp);
                events.pop();
                sse(&events, abort)
            } else {
                let text = resp.to_string();
                let half = text.len() / 2;
                let mut cut = half;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                match abort {
                    Some(()) => sse_raw(
                        vec![
                            Ok(Bytes::from(text[..cut].to_string())),
                            Err(std::io::Error::other("cut")),
                        ],
                        Some("application/json"),
                    ),
                    None => json_200(text[..cut].to_string()),
                }
            })
        }
        Reply::StreamError(message) => {
            rec.answer = "stream error".into();
            let out = Output {
                items: Vec::new(),
                usage: None,
                status: "in_progress".into(),
                id: None,
            };
            let resp = build_response(req, &out);
            let events = vec![
                json!({"type": "response.created", "sequence_number": 0, "response": resp}),
                json!({"type": "error", "sequence_number": 1, "code": "server_error",
                       "message": message, "param": null}),
            ];
            Answer::Now(sse(&events, None))
        }
    }
}

fn json_200(text: String) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::HeaderName::from_static("x-request-id"), "req_mock"),
        ],
        text,
    )
        .into_response()
}

fn sse(events: &[Value], abort: Option<()>) -> Response {
    let mut chunks: Vec<Result<Bytes, std::io::Error>> = events
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap_or("message");
            Ok(Bytes::from(format!("event: {kind}\ndata: {e}\n\n")))
        })
        .collect();
    if abort.is_some() {
        chunks.push(Err(std::io::Error::other("the mock aborted the stream")));
    }
    sse_raw(chunks, None)
}

fn sse_raw(chunks: Vec<Result<Bytes, std::io::Error>>, content_type: Option<&str>) -> Response {
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            content_type.unwrap_or("text/event-stream; charset=utf-8"),
        )
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn wants_encrypted_reasoning(req: &Value) -> bool {
    req.get("include")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "reasoning.encrypted_content"))
}

/// The whole `Response` object for `out`, with the request's own fields
/// echoed the way the API echoes them.
pub fn build_response(req: &Value, out: &Output) -> Value {
    let id = out.id.clone().unwrap_or_else(|| new_id("resp"));
    let now = now_unix();
    let encrypted = wants_encrypted_reasoning(req);
    let items: Vec<Value> = out
        .items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            if item["type"] == "reasoning" && item.get("encrypted_content").is_none() {
                item["encrypted_content"] = if encrypted {
                    json!(
                        base64::engine::general_purpose::STANDARD
                            .encode(format!("encrypted reasoning of {}", item["id"]).as_bytes())
                    )
                } else {
                    Value::Null
                };
            }
            item
        })
        .collect();
    let field = |name: &str| req.get(name).cloned().unwrap_or(Value::Null);
    let mut resp = json!({
        "id": id,
        "object": "response",
        "created_at": now,
        "status": out.status,
        "completed_at": if out.status == "completed" { json!(now) } else { Value::Null },
        "error": Value::Null,
        "incomplete_details": Value::Null,
        "instructions": field("instructions"),
        "max_output_tokens": Value::Null,
        "model": req.get("model").cloned().unwrap_or(json!("gpt-5.5")),
        "output": items,
        "parallel_tool_calls": true,
        "previous_response_id": field("previous_response_id"),
        "reasoning": {"effort": "medium", "summary": Value::Null},
        "store": req.get("store").cloned().unwrap_or(json!(true)),
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": req.get("tools").cloned().unwrap_or(json!([])),
        "top_p": 1.0,
        "truncation": req.get("truncation").cloned().unwrap_or(json!("disabled")),
        "metadata": {},
    });
    match out.status.as_str() {
        "incomplete" => {
            resp["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        "failed" => {
            resp["error"] = json!({"code": "server_error", "message": "The model failed to produce a response."});
        }
        _ => {}
    }
    if let Some(u) = &out.usage {
        resp["usage"] = u.clone();
    }
    resp
}

/// The server-sent events of a response, in order: `response.created`,
/// `response.in_progress`, per item `response.output_item.added` (then the
/// text events of a message) and `response.output_item.done`, and last
/// `response.completed` (`.incomplete`, `.failed`) with the whole response.
pub fn sse_events(resp: &Value) -> Vec<Value> {
    let mut seq = 0u64;
    let mut next = || {
        let s = seq;
        seq += 1;
        s
    };
    let mut start = resp.clone();
    start["status"] = json!("in_progress");
    start["output"] = json!([]);
    start["completed_at"] = Value::Null;
    start["error"] = Value::Null;
    start["incomplete_details"] = Value::Null;
    if let Some(o) = start.as_object_mut() {
        o.remove("usage");
    }
    let mut events = vec![
        json!({"type": "response.created", "sequence_number": next(), "response": start}),
        json!({"type": "response.in_progress", "sequence_number": next(), "response": start}),
    ];
    let items = resp["output"].as_array().cloned().unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        let mut added = item.clone();
        if added.get("status").is_some() {
            added["status"] = json!("in_progress");
        }
        if item["type"] == "message" {
            added["content"] = json!([]);
        }
        events.push(
            json!({"type": "response.output_item.added", "output_index": i,
                           "sequence_number": next(), "item": added}),
        );
        if item["type"] == "message" {
            let item_id = item["id"].clone();
            for (c, part) in item["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let text = part["text"].as_str().unwrap_or("");
                let mut empty = part.clone();
                empty["text"] = json!("");
                events.push(json!({"type": "response.content_part.added", "item_id": item_id,
                    "output_index": i, "content_index": c, "sequence_number": next(), "part": empty}));
                let mid = text
                    .char_indices()
                    .nth(text.chars().count() / 2)
                    .map_or(0, |(b, _)| b);
                for delta in [&text[..mid], &text[mid..]] {
                    events.push(
                        json!({"type": "response.output_text.delta", "item_id": item_id,
                        "output_index": i, "content_index": c, "delta": delta, "logprobs": [],
                        "sequence_number": next()}),
                    );
                }
                events.push(
                    json!({"type": "response.output_text.done", "item_id": item_id,
                    "output_index": i, "content_index": c, "text": text, "logprobs": [],
                    "sequence_number": next()}),
                );
                events.push(json!({"type": "response.content_part.done", "item_id": item_id,
                    "output_index": i, "content_index": c, "sequence_number": next(), "part": part}));
            }
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": i,
                           "sequence_number": next(), "item": item}),
        );
    }
    let last = match resp["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        Some("failed") => "response.failed",
        _ => "response.completed",
    };
    events.push(json!({"type": last, "sequence_number": next(), "response": resp}));
    events
}

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
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn response_validator() -> &'static jsonschema::Validator {
        static V: OnceLock<jsonschema::Validator> = OnceLock::new();
        V.get_or_init(|| validator(openai_spec(), "Response"))
    }

    fn event_validator() -> &'static jsonschema::Validator {
        static V: OnceLock<jsonschema::Validator> = OnceLock::new();
        V.get_or_init(|| validator(openai_spec(), "ResponseStreamEvent"))
    }

    fn request(tools: Value, extra: Value) -> Value {
        let mut r = json!({
            "model": "gpt-5.5",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hello"}]}],
            "tools": tools,
            "store": true,
            "stream": false,
        });
        if let (Some(r), Some(e)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(e.clone());
        }
        r
    }

    fn every_item() -> Vec<Value> {
        vec![
            reasoning("Looking at the form."),
            computer_call_checked(
                "call_1",
                vec![
                    click(1, 2),
                    click_button("right", 3, 4),
                    double_click(5, 6),
                    move_to(7, 8),
                    scroll(9, 10, 0, 300),
                    drag(&[(1, 1), (5, 5)], &["SHIFT"]),
                    keypress(&["CTRL", "L"]),
                    type_text("héllo"),
                    wait(),
                    screenshot(),
                ],
                vec![safety_check(
                    "cu_sc_1",
                    "malicious_instructions",
                    "The page asks to ignore the user.",
                )],
            ),
            preview_call("call_2", click(1, 1), Vec::new()),
            ask_user("call_3", "Which name?"),
            message("Done."),
        ]
    }

    #[test]
    fn fixtures_are_valid_responses() {
        let req = request(json!([{"type": "computer"}]), json!({}));
        for usage in [Some(usage(10, 5)), None] {
            let out = Output {
                items: every_item(),
                usage,
                status: "completed".into(),
                id: None,
            };
            let resp = build_response(&req, &out);
            let errs = errors(response_validator(), &resp);
            assert!(errs.is_empty(), "{errs:#?}");
        }
        for status in ["incomplete", "failed"] {
            let out = Output {
                items: vec![message("partial")],
                usage: Some(usage(1, 1)),
                status: status.into(),
                id: None,
            };
            let errs = errors(response_validator(), &build_response(&req, &out));
            assert!(errs.is_empty(), "{status}: {errs:#?}");
        }
    }

    #[test]
    fn stream_events_are_valid_and_end_with_the_whole_response() {
        let req = request(json!([{"type": "computer"}]), json!({"stream": true}));
        let out = Output {
            items: every_item(),
            usage: Some(usage(10, 5)),
            status: "completed".into(),
            id: None,
        };
        let resp = build_response(&req, &out);
        let events = sse_events(&resp);
        for (i, e) in events.iter().enumerate() {
            let errs = errors(event_validator(), e);
            assert!(errs.is_empty(), "event {i} {}: {errs:#?}", e["type"]);
            assert_eq!(e["sequence_number"], json!(i));
        }
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"], resp);
        let done: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| &e["item"])
            .collect();
        assert_eq!(done.len(), resp["output"].as_array().unwrap().len());
    }

    #[test]
    fn the_validator_accepts_loop_requests_and_refuses_broken_ones() {
        let v = create_response_validator();
        let ok = request(json!([{"type": "computer"}]), json!({}));
        assert!(errors(v, &ok).is_empty(), "{:#?}", errors(v, &ok));
        let preview = request(
            json!([{"type": "computer_use_preview", "display_width": 1280,
                    "display_height": 800, "environment": "linux"}]),
            json!({"truncation": "auto"}),
        );
        assert!(errors(v, &preview).is_empty());
        let bad = request(
            json!([{"type": "computer_use_preview", "display_width": "wide"}]),
            json!({}),
        );
        assert!(!errors(v, &bad).is_empty());
        let bad = request(json!([{"type": "computer"}]), json!({"store": "yes"}));
        assert!(!errors(v, &bad).is_empty());
        // Discriminated unions still check their members.
        let output = |o: Value| request(json!([{"type": "computer"}]), json!({"input": [o]}));
        let good = output(json!({"type": "computer_call_output", "call_id": "c",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA=="},
            "acknowledged_safety_checks": []}));
        assert!(errors(v, &good).is_empty(), "{:#?}", errors(v, &good));
        for broken in [
            json!({"type": "computer_call_output", "call_id": "c"}),
            json!({"type": "computer_call_output", "call_id": "c",
                   "output": {"type": "computer_screenshot"},
                   "acknowledged_safety_checks": [{"code": "no id"}]}),
            json!({"type": "function_call_output", "call_id": "c", "output": 7}),
            json!({"type": "message", "role": "robot", "content": "hi"}),
        ] {
            assert!(!errors(v, &output(broken.clone())).is_empty(), "{broken}");
        }
    }

    #[test]
    fn compaction_rules_catch_altered_items() {
        let served: HashMap<String, String> = [("cmp_1".to_string(), "c0ffee".to_string())].into();
        let req = |items: Vec<Value>, cm: Value| json!({"input": items, "context_management": cm});
        let good = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "c0ffee"});
        let no_id = json!({"type": "compaction", "encrypted_content": "c0ffee"});
        let ok = req(vec![good, no_id], json!([{"type": "compaction"}]));
        assert_eq!(compaction_rules(&ok, &served), vec![]);
        let altered = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "c0ffef"});
        let unknown = json!({"type": "compaction", "id": "cmp_2", "encrypted_content": "c0ffee"});
        let bad = req(vec![altered, unknown], json!([{"type": "truncation"}]));
        assert_eq!(compaction_rules(&bad, &served).len(), 3);
    }

    #[test]
    fn api_rules_catch_what_the_api_refuses() {
        let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC";
        let call = computer_call_checked(
            "call_1",
            vec![click(1, 1)],
            vec![safety_check("sc_1", "sensitive_domain", "m")],
        );
        let mut stored = HashMap::new();
        stored.insert("resp_1".to_string(), vec![call]);
        let output = |acked: Value, url: &str| {
            json!({"type": "computer_call_output", "call_id": "call_1",
                   "output": {"type": "computer_screenshot", "image_url": url},
                   "acknowledged_safety_checks": acked})
        };
        let with = |input: Vec<Value>, extra: Value| {
            request(json!([{"type": "computer"}]), extra)
                .as_object()
                .cloned()
                .map(|mut o| {
                    o.insert("input".into(), json!(input));
                    Value::Object(o)
                })
                .unwrap()
        };
        let good = with(
            vec![output(
                json!([safety_check("sc_1", "sensitive_domain", "m")]),
                png,
            )],
            json!({"previous_response_id": "resp_1"}),
        );
        assert_eq!(api_rules(&good, &stored), vec![]);
        let unacked = with(
            vec![output(json!([]), png)],
            json!({"previous_response_id": "resp_1"}),
        );
        assert_eq!(api_rules(&unacked, &stored).len(), 1);
        let stripped = with(
            vec![output(json!([{"id": "sc_1"}]), "<image 12 bytes>")],
            json!({"previous_response_id": "resp_1"}),
        );
        assert_eq!(api_rules(&stripped, &stored).len(), 1);
        let missing = with(vec![], json!({"previous_response_id": "resp_1"}));
        assert!(api_rules(&missing, &stored)[0].1.contains("No tool output"));
        let unknown = with(vec![], json!({"previous_response_id": "resp_9"}));
        assert!(api_rules(&unknown, &stored)[0].1.contains("not found"));
        let not_stored = with(vec![reasoning("x")], json!({"store": false}));
        assert_eq!(api_rules(&not_stored, &stored)[0].0, 404);
        let preview = request(
            json!([{"type": "computer_use_preview", "display_width": 1, "display_height": 1,
                    "environment": "linux"}]),
            json!({}),
        );
        assert_eq!(api_rules(&preview, &stored).len(), 1);
        assert_eq!(png_size_of_data_url(png), Some((1, 1)));
    }

    #[tokio::test]
    async fn the_server_checks_the_key_and_records_everything() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mock = MockResponses::start("sk-test-key").await;
        assert!(mock.addr().ip().is_loopback());
        mock.push(Reply::done("hi"));
        let body = request(json!([{"type": "computer"}]), json!({})).to_string();
        let send = |auth: &'static str| {
            let body = body.clone();
            let addr = mock.addr();
            async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let req = format!(
                    "POST /responses HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(req.as_bytes()).await.unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).await.unwrap();
                out
            }
        };
        let denied = send("Bearer wrong").await;
        assert!(denied.starts_with("HTTP/1.1 401"), "{denied}");
        let ok = send("Bearer sk-test-key").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("\"output_text\""), "{ok}");
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 2);
        assert!(!reqs[0].authorized && reqs[1].authorized);
        assert!(reqs.iter().all(|r| r.validation_errors.is_empty()));
        assert_eq!(mock.problems().len(), 1, "{:?}", mock.problems());
        assert_eq!(
            mock.occurrences("sk-test-key"),
            vec!["request 2 header authorization"]
        );
        assert!(reqs[1].headers.iter().all(|(k, _)| k != "authorization"));
        mock.stop().await;
    }
}
