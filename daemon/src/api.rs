//! The HTTP API: `/v1/health`, `/v1/info`, `/v1/actions`, `/v1/screenshot`
//! (described in `daemon/openapi.yaml`).
//!
//! One request's path:
//! 1. hyper reads the head (with a header deadline, `server`);
//! 2. [`guard`] refuses browser-originated requests and foreign Hosts, then
//!    checks the bearer token (everything but health);
//! 3. the body limit refuses oversized bodies before reading them (413);
//! 4. the handler parses strictly (unknown fields are errors), takes the
//!    input gate or answers `busy`, and hands the job to the desktop task;
//! 5. the reply, or an [`ErrorBody`], goes back as JSON. Every failure —
//!    ours, axum's, tower's — leaves as `{code, message}` ([`error`]).
//!
//! Work (actions, screenshots, browser calls) is counted by
//! [`lifecycle`] between step 2 and the reply; once a stop was requested
//! new work is refused with `shutting_down` while reads are still
//! answered, and `/v1/info` reports `draining`, then `closed`.

pub mod error;
mod files;
pub mod guard;
pub mod lifecycle;
pub mod reply;
pub mod server;

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sandtop_protocol::{
    BatchRequest, ErrorBody, ErrorCode, Health, HealthStatus, Info, InfoReply, Limits,
    PROTOCOL_VERSION, ScreenshotOptions, limits, paths,
};
use serde::de::DeserializeOwned;

use crate::browser::BrowserService;
use crate::desktop::{Cancel, DesktopHandle, Job};
use crate::ratelimit::LogLimiter;
use crate::supervise::DisplayHealth;
use error::ApiError;
use lifecycle::Lifecycle;
use sandtop_client::Token;

/// Shared state of the API.
#[derive(Debug)]
pub struct ApiState {
    pub desktop: DesktopHandle,
    /// The session token; empty until it arrives (`--await-token`), and
    /// until then every endpoint but health is refused.
    pub token: Arc<OnceLock<Token>>,
    pub display: Arc<DisplayHealth>,
    pub started: Instant,
    /// Open, draining or closed; the work in flight.
    pub lifecycle: Arc<Lifecycle>,
    pub log_limit: LogLimiter,
    /// Deadline of one input request (`limits::REQUEST_DEADLINE_MS`;
    /// shorter in tests).
    pub deadline: Duration,
    /// Requests in flight, shared by every endpoint but health.
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// The browser driver (none unless the daemon was given `--browser`).
    pub browser: Arc<BrowserService>,
    /// The X display's name, kept current by the supervisor (`/v1/info`).
    pub x_display: Option<crate::supervise::DisplayName>,
    /// The folder `/v1/files/read` reads beneath (`--files-root`); `None`
    /// reads nothing.
    pub files_root: Option<std::path::PathBuf>,
    /// The programs' fake clock (`--fake-clock`, `/v1/clock`).
    pub clock: Option<crate::clock::FakeClock>,
}

impl ApiState {
    pub fn new(desktop: DesktopHandle, token: Token, display: Arc<DisplayHealth>) -> ApiState {
        ApiState::with_token_slot(desktop, Arc::new(OnceLock::from(token)), display)
    }

    /// The state with a token that may come later (`--await-token`).
    pub fn with_token_slot(
        desktop: DesktopHandle,
        token: Arc<OnceLock<Token>>,
        display: Arc<DisplayHealth>,
    ) -> ApiState {
        ApiState {
            lifecycle: Arc::new(Lifecycle::new(Arc::clone(&desktop.gate))),
            desktop,
            token,
            display,
            started: Instant::now(),
            log_limit: LogLimiter::new(20, Duration::from_secs(10)),
            deadline: Duration::from_millis(limits::REQUEST_DEADLINE_MS),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            browser: Arc::new(BrowserService::new(None)),
            x_display: None,
            files_root: None,
            clock: None,
        }
    }

    /// The same state setting the programs' clock (`/v1/clock`).
    pub fn with_clock(mut self, clock: crate::clock::FakeClock) -> ApiState {
        self.clock = Some(clock);
        self
    }

    /// The same state reading files beneath `root` for the host
    /// (`/v1/files/read`).
    pub fn with_files_root(mut self, root: std::path::PathBuf) -> ApiState {
        self.files_root = Some(root);
        self
    }

    /// The same state reporting the X display's current name in `/v1/info`.
    pub fn with_x_display(mut self, name: crate::supervise::DisplayName) -> ApiState {
        self.x_display = Some(name);
        self
    }

    /// The same state with a browser driver.
    pub fn with_browser(mut self, browser: BrowserService) -> ApiState {
        self.browser = Arc::new(browser);
        self
    }
}

/// Most requests in flight (all endpoints but health together) before new
/// ones are shed with `overloaded`.
pub const MAX_IN_FLIGHT: usize = 64;

/// Builds the router. Health is exempt from load shedding so it answers
/// under load (A9); the shedding itself is in [`guard`].
pub fn router(state: Arc<ApiState>) -> Router {
    // Work: what may act on the desktop or the browser (a screenshot too:
    // it runs on the desktop task, which stops after the drain).
    let work = Router::new()
        .route(paths::ACTIONS, post(actions))
        .route(paths::SCREENSHOT, post(screenshot))
        .route(paths::FRAME, post(frame))
        .route(paths::CURSOR, post(cursor))
        .route(paths::BROWSER_STATE, post(browser_state))
        .route(paths::BROWSER_CALL, post(browser_call))
        .route(paths::FILES_READ, post(files::read))
        .route(paths::CLOCK, post(files::clock))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            count_work,
        ));
    let protected = Router::new().route(paths::INFO, get(info)).merge(work);
    Router::new()
        .route(paths::HEALTH, get(health))
        .merge(protected)
        .fallback(|| async { ApiError(ErrorBody::new(ErrorCode::NotFound, "no such endpoint")) })
        .layer(DefaultBodyLimit::max(limits::MAX_BODY_BYTES))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            limits::MAX_BODY_BYTES,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard::guard,
        ))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            Duration::from_millis(limits::REQUEST_DEADLINE_MS + 10_000),
        ))
        .layer(axum::middleware::map_response(error::normalize))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panic_response,
        ))
        .with_state(state)
}

async fn health(State(state): State<Arc<ApiState>>) -> Response {
    let x = state.display.x_alive() && state.desktop.status.connected.load(Ordering::Acquire);
    let wm = state.display.wm();
    let status = match (x, wm) {
        (false, _) => HealthStatus::Down,
        (true, Some(false)) => HealthStatus::Degraded,
        (true, _) => HealthStatus::Ok,
    };
    let body = Health {
        status,
        x_connected: x,
        display: *lock(&state.desktop.status.display),
        window_manager: wm,
        display_restarts: state.display.restarts.load(Ordering::Acquire),
        uptime_ms: state.started.elapsed().as_millis() as u64,
    };
    let code = if status == HealthStatus::Down {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(body)).into_response()
}

async fn info(State(state): State<Arc<ApiState>>) -> Response {
    let status = &state.desktop.status;
    let capabilities = lock(&status.capabilities).clone();
    let Some(capabilities) = capabilities else {
        return ApiError(ErrorBody::new(
            ErrorCode::DisplayUnavailable,
            "the display has not been reached yet",
        ))
        .into_response();
    };
    axum::Json(InfoReply {
        info: Info {
            protocol: PROTOCOL_VERSION.to_string(),
            daemon_version: env!("CARGO_PKG_VERSION").to_string(),
            display: *lock(&status.display),
            x_display: state.x_display.as_ref().map(|n| n.get()),
            capabilities,
            limits: Limits::current(),
        },
        state: state.lifecycle.state(),
    })
    .into_response()
}

/// Admits a work request and counts it in flight until its reply is made
/// (or the client went away); once a stop was requested, refuses it.
async fn count_work(State(state): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    let Some(_work) = state.lifecycle.begin_work() else {
        return ApiError(ErrorBody::new(
            ErrorCode::ShuttingDown,
            "the daemon is shutting down",
        ))
        .into_response();
    };
    next.run(req).await
}

/// Parses a JSON body strictly. An empty body is `default` when given.
fn parse_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &Bytes,
    default: Option<T>,
) -> Result<T, ApiError> {
    if body.is_empty()
        && let Some(d) = default
    {
        return Ok(d);
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError(ErrorBody::new(
            ErrorCode::UnsupportedMediaType,
            "the body must be JSON (Content-Type: application/json)",
        )));
    }
    sandtop_protocol::from_json_objects(body).map_err(|e| {
        let mut message = e.to_string();
        truncate_at_char(&mut message, 300);
        ApiError(ErrorBody::new(ErrorCode::BadRequest, message))
    })
}

/// Cancels the job if the request future is dropped (client gone).
struct CancelOnDrop(Option<Cancel>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.cancel();
        }
    }
}

/// How long past the job's own deadline the handler waits for the desktop
/// task before giving up on it (an X server that stopped answering).
const REPLY_GRACE: Duration = Duration::from_secs(5);

async fn run_job<T>(
    state: &ApiState,
    make: impl FnOnce(
        Cancel,
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::oneshot::Sender<Result<T, ErrorBody>>,
    ) -> Job,
) -> Result<T, ApiError> {
    let permit = state.desktop.try_acquire().map_err(ApiError)?;
    let cancel = Cancel::new(Instant::now() + state.deadline);
    let (tx, rx) = tokio::sync::oneshot::channel();
    state
        .desktop
        .send(make(cancel.clone(), permit, tx))
        .map_err(ApiError)?;
    let mut guard = CancelOnDrop(Some(cancel));
    let wait = state.deadline + REPLY_GRACE;
    let reply = tokio::time::timeout(wait, rx).await;
    guard.0 = None;
    match reply {
        Ok(Ok(result)) => result.map_err(ApiError),
        Ok(Err(_)) => Err(ApiError(ErrorBody::new(
            ErrorCode::Internal,
            "the desktop task dropped the request",
        ))),
        // No need to cancel the job here: its own deadline (the Cancel's)
        // passed REPLY_GRACE ago, so it stops at its next check.
        Err(_) => Err(ApiError(ErrorBody::new(
            ErrorCode::Timeout,
            "the display did not answer in time; the outcome of the actions is unknown",
        ))),
    }
}

async fn actions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: BatchRequest = parse_json(&headers, &body, None)?;
    let reply = run_job(&state, |cancel, permit, reply| Job::Batch {
        request,
        cancel,
        permit,
        reply,
    })
    .await?;
    json_bytes(reply::batch(&reply))
}

/// A JSON body written by [`reply`].
fn json_bytes(bytes: serde_json::Result<Vec<u8>>) -> Result<Response, ApiError> {
    let bytes = bytes.map_err(|e| ApiError(ErrorBody::new(ErrorCode::Internal, e.to_string())))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response())
}

async fn screenshot(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let options: ScreenshotOptions =
        parse_json(&headers, &body, Some(ScreenshotOptions::default()))?;
    let reply = run_job(&state, |cancel, permit, reply| Job::Screenshot {
        options,
        cancel,
        permit,
        reply,
    })
    .await?;
    json_bytes(reply::screenshot(&reply))
}

/// `POST /v1/frame`: waits for a change past `after` (at most `wait_ms`),
/// then captures a frame on the desktop task without the input gate
/// (protocol `frame`). Nothing changed: `changed: false`, no image.
async fn frame(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    use sandtop_protocol::frame::{FrameReply, FrameRequest};
    let request: FrameRequest = parse_json(&headers, &body, None)?;
    request
        .check()
        .map_err(|m| ApiError(ErrorBody::new(ErrorCode::BadRequest, m)))?;
    let frames = &state.desktop.status.frames;
    let seq = frames
        .wait_past(
            request.after,
            Duration::from_millis(u64::from(request.wait_ms)),
        )
        .await;
    // Unchanged: no capture (when the screen's size is unknown, the job
    // below finds out, or says why it cannot).
    let known = *lock(&state.desktop.status.display);
    if seq <= request.after
        && let Some(screen) = known
    {
        return json_bytes(serde_json::to_vec(&FrameReply {
            seq,
            changed: false,
            screen,
            image: None,
        }));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    state
        .desktop
        .send(Job::Frame {
            request,
            seq,
            reply: tx,
        })
        .map_err(ApiError)?;
    read_reply(&state, rx).await
}

/// The reply of a read the desktop task runs without the input gate (a
/// frame, the pointer's position), as JSON, within the deadline.
async fn read_reply<T: serde::Serialize>(
    state: &ApiState,
    rx: tokio::sync::oneshot::Receiver<Result<T, ErrorBody>>,
) -> Result<Response, ApiError> {
    match tokio::time::timeout(state.deadline + REPLY_GRACE, rx).await {
        Ok(Ok(Ok(reply))) => json_bytes(serde_json::to_vec(&reply)),
        Ok(Ok(Err(e))) => Err(ApiError(e)),
        Ok(Err(_)) => Err(ApiError(ErrorBody::new(
            ErrorCode::Internal,
            "the desktop task dropped the request",
        ))),
        Err(_) => Err(ApiError(ErrorBody::new(
            ErrorCode::Timeout,
            "the display did not answer in time",
        ))),
    }
}

/// `POST /v1/cursor`: where the pointer is, in the space of a screenshot
/// taken with the body's options (a read: no input gate, like a frame).
async fn cursor(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let options: ScreenshotOptions =
        parse_json(&headers, &body, Some(ScreenshotOptions::default()))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    state
        .desktop
        .send(Job::Cursor { options, reply: tx })
        .map_err(ApiError)?;
    read_reply(&state, rx).await
}

/// Runs a browser job under the input gate (a browser call and a computer
/// action never interleave; a second one gets `busy`) and the request
/// deadline. The future is dropped when the client goes away.
async fn browser_job<T>(
    state: &ApiState,
    job: impl std::future::Future<Output = Result<T, ErrorBody>>,
) -> Result<T, ApiError> {
    if !state.browser.configured() {
        return Err(ApiError(ErrorBody::new(
            ErrorCode::BrowserUnavailable,
            "this daemon was started without a browser (--browser)",
        )));
    }
    let _permit = state.desktop.try_acquire().map_err(ApiError)?;
    // The first call starts the browser, which may take a while on a
    // loaded host: the deadline counts from when it runs.
    match tokio::time::timeout(state.deadline + REPLY_GRACE, job).await {
        Ok(r) => r.map_err(ApiError),
        Err(_) => Err(ApiError(ErrorBody::new(
            ErrorCode::Timeout,
            "the browser did not answer in time; the outcome of the call is unknown",
        ))),
    }
}

async fn browser_state(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let _: EmptyRequest = parse_json(&headers, &body, Some(EmptyRequest {}))?;
    let browser = Arc::clone(&state.browser);
    let reply = browser_job(&state, async move { browser.state().await }).await?;
    json_bytes(serde_json::to_vec(&reply))
}

async fn browser_call(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: sandtop_protocol::BrowserRequest = parse_json(&headers, &body, None)?;
    request
        .check()
        .map_err(|m| ApiError(ErrorBody::new(ErrorCode::InvalidAction, m)))?;
    let browser = Arc::clone(&state.browser);
    let reply = browser_job(&state, browser.call_released(request)).await?;
    json_bytes(serde_json::to_vec(&reply))
}

/// A body that must be empty or `{}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyRequest {}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
