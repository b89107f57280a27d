//! The loop tier (L): host-cli's Responses API computer-tool loop, end to
//! end on loopback. No X server, no Docker, no network.
//!
//! 1. [`Daemon`]: the real `sandtopd` router and desktop task over the fake
//!    driver, served on a Unix socket in a temporary folder; a middleware
//!    records every request that reaches it, and the fake records every
//!    input primitive, so a test sees exactly what reached the "screen".
//! 2. The host reaches it through its real [`Channel`] with the session
//!    token, and reaches the model through the real [`OpenAiModel`] pointed
//!    at [`MockResponses`] (testkit), which validates every request body
//!    against `CreateResponse`, enforces the API's own rules (tool outputs,
//!    acknowledged checks, image URLs, ...) and answers from a script.
//! 3. [`ScriptedOp`] is an operator whose answers are queued and which
//!    records what it was asked and what had reached the daemon by then;
//!    the real [`Approvals`] (no terminal, with or without a policy) is
//!    used too.
//! 4. Tests are named after the docs/security.md property (L1..L7) or the
//!    docs/contract.md rule they pin. Every rig ends with
//!    [`Rig::assert_mock_clean`]: no schema error, no request the real API
//!    would refuse, the daemon token never sent to the model API, and the
//!    API key only ever in the `Authorization` header.

#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use host_cli::agent::approve::{
    ActionRequest, Approvals, CheckRequest, Decision, Operator, Policy, PolicyAnswer, Terminal,
};
use host_cli::agent::diagnostics::{Diagnostic, Diagnostics};
use host_cli::agent::model::{OpenAiModel, RetryPolicy};
use host_cli::agent::progress::Progress;
use host_cli::agent::record::{
    Entry, LedgerState, Recorder, Started, read_trajectory, resume_point,
};
use host_cli::agent::runner::{
    ContextBudget, Ending, Interrupt, OnActionError, Outcome, Resume, RunOptions, Runner,
};
use host_cli::agent::wire::{SafetyCheck, ToolShape};
use host_cli::channel::{Channel, UnixConnector};
use host_cli::secret::Secret;
use sandtop_client::Token;
use sandtop_protocol::{
    Action, Capabilities, Fit, ImageFormat, Info, Limits, PROTOCOL_VERSION, Rect, ScaleMap,
    Screenshot, ScreenshotOptions, Size, limits,
};
use sandtop_testkit::held::{self, Stroke};
use sandtop_testkit::mock_responses::{
    MockResponses, Recorded, Reply, ask_user, click, computer_call, computer_call_checked,
    double_click, drag, function_call, image_urls, keypress, message, move_to,
    png_size_of_data_url, preview_call, reasoning, safety_check, screenshot, scroll, type_text,
    usage, wait,
};
use sandtopd::api::server::{bind_unix, serve};
use sandtopd::driver::fake::{Event, FakeState};
use sandtopd::testing::{FakeDaemon, FakeDesktop, FakeLog, Setup};
use serde_json::{Value, json};

mod browser;
mod budgets;
mod call_shapes;
mod compaction;
mod confirm_actions;
mod confirm_screen;
mod control;
mod conversation;
mod crash_and_resume;
mod daemon_replies;
mod functions;
mod guidance;
mod progress_and_records;
mod retries;
mod safety_checks;
mod screen;
mod secrets;
mod terminal_and_storage;
mod whole_response;

// What several property modules share, from the one that uses it most.
use budgets::slow_drag;
use daemon_replies::{GUEST_INSTRUCTION, Garbage, GarbageDaemon, png_bytes};
use safety_checks::two_checks;

// ---------------------------------------------------------------------
// The daemon: the real router over the fake driver, on a Unix socket
// ---------------------------------------------------------------------

/// The fake screen most tests use (small: PNGs stay small and fast).
const SCREEN: Size = Size::new(320, 200);
/// No run may take longer than this (a hang fails instead of blocking).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// Requests that reached the daemon: (path, JSON body or null).
type DaemonLog = Arc<Mutex<Vec<(String, Value)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn record_daemon(State(log): State<DaemonLog>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 4 * limits::MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    lock(&log).push((parts.uri.path().to_string(), json));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// What the daemon side saw, for the operator's snapshots and assertions.
#[derive(Debug, Clone)]
struct Probe {
    drivers: Arc<Mutex<Vec<FakeLog>>>,
    log: DaemonLog,
}

/// What had reached the daemon at some moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snap {
    /// Input primitives (motion, buttons, keys, characters).
    input: usize,
    /// Screen captures (the first screenshot of a run is one).
    captures: usize,
    /// `POST /v1/actions` requests.
    actions: usize,
}

fn is_input(e: &Event) -> bool {
    matches!(
        e,
        Event::Motion(..) | Event::Button(..) | Event::Key(..) | Event::Char(_)
    )
}

impl Probe {
    fn events(&self) -> Vec<Event> {
        lock(&self.drivers)
            .iter()
            .flat_map(|d| lock(d).events.clone())
            .collect()
    }

    fn input_events(&self) -> Vec<Event> {
        self.events().into_iter().filter(is_input).collect()
    }

    fn captures(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::Capture(_)))
            .count()
    }

    fn requests(&self) -> Vec<(String, Value)> {
        lock(&self.log).clone()
    }

    fn paths(&self) -> Vec<String> {
        self.requests().into_iter().map(|(p, _)| p).collect()
    }

    /// Bodies of `POST /v1/actions`, in order.
    fn act_bodies(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|(p, _)| p == "/v1/actions")
            .map(|(_, b)| b)
            .collect()
    }

    fn snap(&self) -> Snap {
        Snap {
            input: self.input_events().len(),
            captures: self.captures(),
            actions: self.act_bodies().len(),
        }
    }

    fn knobs(&self, f: impl FnOnce(&mut FakeState)) {
        let drivers = lock(&self.drivers);
        f(&mut lock(drivers.last().unwrap()));
    }

    /// Waits until the fake has received nothing new for `quiet`.
    async fn wait_idle(&self, quiet: Duration, within: Duration) {
        let end = Instant::now() + within;
        let mut last = self.events().len();
        let mut since = Instant::now();
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let n = self.events().len();
            if n != last {
                last = n;
                since = Instant::now();
            } else if since.elapsed() >= quiet {
                return;
            }
        }
        panic!("the fake driver never went idle");
    }

    async fn wait_for(&self, what: &str, within: Duration, f: impl Fn(&[Event]) -> bool) {
        let end = Instant::now() + within;
        while !f(&self.events()) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

struct Daemon {
    served: FakeDaemon,
    /// The daemon's token (tests look for it where it must never be).
    token: String,
    probe: Probe,
}

impl Daemon {
    async fn start(screen: Size) -> Daemon {
        Daemon::start_with(screen, None).await
    }

    /// A daemon whose browser calls go to `browser` (none: the daemon has
    /// no browser, as one started without `--browser`).
    async fn start_with(
        screen: Size,
        browser: Option<Arc<dyn sandtopd::browser::Backend>>,
    ) -> Daemon {
        let desktop = FakeDesktop::start_with(
            screen,
            Setup {
                api: Box::new(move |api| match browser {
                    Some(b) => api.with_browser(sandtopd::browser::BrowserService::with_backend(b)),
                    None => api,
                }),
                ..Setup::default()
            },
        );
        let drivers = Arc::clone(&desktop.drivers);
        let log: DaemonLog = Arc::default();
        let layer = axum::middleware::from_fn_with_state(Arc::clone(&log), record_daemon);
        let served = FakeDaemon::serve(desktop, |r| r.layer(layer)).await;
        Daemon {
            token: served.token().to_string(),
            served,
            probe: Probe { drivers, log },
        }
    }

    async fn channel(&self) -> Channel {
        Channel::open(
            Box::new(UnixConnector(self.served.socket().to_path_buf())),
            Secret::new(self.token.clone()),
        )
        .await
        .unwrap()
    }
}

// ---------------------------------------------------------------------
// A scripted operator
// ---------------------------------------------------------------------

/// What the operator was asked, and what had reached the daemon by then.
#[derive(Debug, Clone)]
enum Asked {
    Checks {
        call_id: String,
        checks: Vec<SafetyCheck>,
        actions: Vec<Action>,
        marked: Option<PathBuf>,
        /// Asked again: the marked screenshot of the earlier approval.
        changed_since: Option<PathBuf>,
        at: Snap,
    },
    Confirm {
        call_id: String,
        index: usize,
        of: usize,
        action: Option<Action>,
        /// The marked screen it was asked on, and, asked again, the one
        /// of the earlier answer.
        marked: Option<PathBuf>,
        changed_since: Option<PathBuf>,
        at: Snap,
    },
    Question {
        question: String,
        at: Snap,
    },
}

/// An operator answering from queues; an empty queue denies (and the
/// test sees it in `asked`).
struct ScriptedOp {
    probe: Probe,
    checks: VecDeque<Decision>,
    confirms: VecDeque<Decision>,
    answers: VecDeque<Option<String>>,
    guidance: VecDeque<Vec<String>>,
    /// Where the fake's window is put while each safety-check question is
    /// open (`None`: left where it is).
    windows: VecDeque<Option<(Rect, [u8; 3])>>,
    /// The same while each action confirmation is open.
    confirm_windows: VecDeque<Option<(Rect, [u8; 3])>>,
    asked: Vec<Asked>,
}

impl ScriptedOp {
    fn new(probe: &Probe) -> ScriptedOp {
        ScriptedOp {
            probe: probe.clone(),
            checks: VecDeque::new(),
            confirms: VecDeque::new(),
            answers: VecDeque::new(),
            guidance: VecDeque::new(),
            windows: VecDeque::new(),
            confirm_windows: VecDeque::new(),
            asked: Vec::new(),
        }
    }

    /// Moves the fake's window while each question about checks is open.
    fn windows(mut self, moves: impl IntoIterator<Item = Option<(Rect, [u8; 3])>>) -> ScriptedOp {
        self.windows.extend(moves);
        self
    }

    fn checks(mut self, answers: impl IntoIterator<Item = Decision>) -> ScriptedOp {
        self.checks.extend(answers);
        self
    }

    fn confirms(mut self, answers: impl IntoIterator<Item = Decision>) -> ScriptedOp {
        self.confirms.extend(answers);
        self
    }

    fn answers(mut self, answers: impl IntoIterator<Item = Option<&'static str>>) -> ScriptedOp {
        self.answers
            .extend(answers.into_iter().map(|a| a.map(str::to_string)));
        self
    }

    fn guidance(mut self, turns: impl IntoIterator<Item = Vec<&'static str>>) -> ScriptedOp {
        self.guidance.extend(
            turns
                .into_iter()
                .map(|t| t.into_iter().map(str::to_string).collect()),
        );
        self
    }

    /// The confirmations asked for `for_call`: (index, of, action, when).
    fn confirmations(&self, for_call: &str) -> Vec<(usize, usize, Option<Action>, Snap)> {
        self.asked
            .iter()
            .filter_map(|a| match a {
                Asked::Confirm {
                    call_id,
                    index,
                    of,
                    action,
                    at,
                    ..
                } if call_id == for_call => Some((*index, *of, action.clone(), *at)),
                _ => None,
            })
            .collect()
    }
}

fn deny(why: &str) -> Decision {
    Decision::Deny(why.to_string())
}

impl Operator for ScriptedOp {
    fn approve_checks(&mut self, req: &CheckRequest<'_>) -> Decision {
        self.asked.push(Asked::Checks {
            call_id: req.call_id.to_string(),
            checks: req.checks.to_vec(),
            actions: req.actions.to_vec(),
            marked: req.marked.map(Path::to_path_buf),
            changed_since: req.changed_since.map(Path::to_path_buf),
            at: self.probe.snap(),
        });
        if let Some(Some(w)) = self.windows.pop_front() {
            self.probe.knobs(|s| s.window = Some(w));
        }
        self.checks
            .pop_front()
            .unwrap_or_else(|| deny("the scripted operator has no answer left"))
    }

    fn confirm_action(&mut self, req: &ActionRequest<'_>) -> Decision {
        self.asked.push(Asked::Confirm {
            call_id: req.call_id.to_string(),
            index: req.index,
            of: req.of,
            action: req.action.cloned(),
            marked: req.marked.map(Path::to_path_buf),
            changed_since: req.changed_since.map(Path::to_path_buf),
            at: self.probe.snap(),
        });
        if let Some(Some(w)) = self.confirm_windows.pop_front() {
            self.probe.knobs(|s| s.window = Some(w));
        }
        self.confirms
            .pop_front()
            .unwrap_or_else(|| deny("the scripted operator has no answer left"))
    }

    fn ask(&mut self, question: &str) -> Option<String> {
        self.asked.push(Asked::Question {
            question: question.to_string(),
            at: self.probe.snap(),
        });
        self.answers.pop_front().flatten()
    }

    fn take_guidance(&mut self) -> Vec<String> {
        self.guidance.pop_front().unwrap_or_default()
    }
}

// ---------------------------------------------------------------------
// The rig: daemon + mock + run folders
// ---------------------------------------------------------------------

/// Retries fast enough for tests.
fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base: Duration::from_millis(5),
        cap: Duration::from_millis(40),
    }
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

struct Rig {
    daemon: Daemon,
    mock: MockResponses,
    key: String,
    runs: tempfile::TempDir,
}

/// A finished run.
#[derive(Debug)]
struct Run {
    outcome: Outcome,
    dir: PathBuf,
    /// The trajectory, every line parsed.
    lines: Vec<Value>,
}

impl Run {
    fn of_kind(&self, kind: &str) -> Vec<Value> {
        self.lines
            .iter()
            .filter(|l| l["kind"] == kind)
            .cloned()
            .collect()
    }

    /// The ledger states of one call, in order.
    fn ledger(&self, call_id: &str) -> Vec<String> {
        self.of_kind("ledger")
            .iter()
            .filter(|l| l["call_id"] == call_id)
            .map(|l| l["state"].as_str().unwrap().to_string())
            .collect()
    }

    #[track_caller]
    fn assert_ending(&self, ending: Ending) {
        assert_eq!(
            self.outcome.ending, ending,
            "the run ended {:?}: {}",
            self.outcome.ending, self.outcome.message
        );
    }
}

/// Reads a trajectory: every line complete, JSON, and one typed
/// [`Entry`] (read through `read_trajectory`, which refuses a line its
/// kind does not describe).
fn trajectory(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("trajectory.jsonl")).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the trajectory ends with a torn line"
    );
    let typed = read_trajectory(dir).unwrap();
    assert_eq!(typed.len(), text.lines().count(), "a line is not an entry");
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("trajectory line {} is not JSON ({e}): {l}", i + 1))
        })
        .collect()
}

/// `opts` with `--on-action-error report`: a failed action is told to the
/// model and the run goes on.
fn reporting(mut opts: RunOptions) -> RunOptions {
    opts.on_action_error = OnActionError::Report;
    opts
}

/// `opts` with server-side storage (`--store`), for tests of chaining.
fn stored(mut opts: RunOptions) -> RunOptions {
    opts.store = true;
    opts
}

fn new_key() -> String {
    format!("sk-proj-{}", Token::generate().unwrap().expose())
}

impl Rig {
    async fn new() -> Rig {
        Rig::with_screen(SCREEN).await
    }

    async fn with_screen(screen: Size) -> Rig {
        let key = new_key();
        Rig {
            daemon: Daemon::start(screen).await,
            mock: MockResponses::start(&key).await,
            key,
            runs: tempfile::tempdir().unwrap(),
        }
    }

    fn probe(&self) -> &Probe {
        &self.daemon.probe
    }

    fn opts(&self) -> RunOptions {
        RunOptions {
            task: "Fill in the contact form and submit it.".into(),
            model: "gpt-5.5".into(),
            shape: ToolShape::Computer,
            computer: true,
            browser: None,
            instructions: Some("You operate a Linux desktop through the computer tool.".into()),
            max_steps: 10,
            max_duration: Some(Duration::from_secs(60)),
            // As `host-cli run` by default: nothing stored server-side.
            store: false,
            stream: false,
            screenshot: ScreenshotOptions::default(),
            confirm_actions: false,
            ask_user: true,
            sign_in: false,
            initial_screenshot: true,
            context: ContextBudget::default(),
            compaction: host_cli::agent::runner::Compaction::Off,
            on_action_error: OnActionError::Stop,
        }
    }

    fn model(&self, stream: bool, retry: RetryPolicy) -> OpenAiModel {
        OpenAiModel::with_base_url(
            Secret::new(self.key.clone()),
            &self.mock.base_url(),
            stream,
            retry,
        )
        .unwrap()
    }

    fn new_run_dir(&self) -> PathBuf {
        self.runs
            .path()
            .join(format!("run-{}", RUNS.fetch_add(1, Ordering::Relaxed)))
    }

    async fn run(&self, opts: RunOptions, op: &mut dyn Operator) -> Run {
        self.run_with(opts, op, Interrupt::default(), fast_retry())
            .await
    }

    async fn run_with(
        &self,
        opts: RunOptions,
        op: &mut dyn Operator,
        interrupt: Interrupt,
        retry: RetryPolicy,
    ) -> Run {
        let mut model = self.model(opts.stream, retry);
        let mut channel = self.daemon.channel().await;
        drive(
            &self.new_run_dir(),
            &mut model,
            &mut channel,
            opts,
            op,
            interrupt,
        )
        .await
    }

    /// What every test ends with: the model API saw only valid requests it
    /// would accept, never the daemon token, and the key only where it
    /// belongs.
    #[track_caller]
    fn assert_mock_clean(&self) {
        assert_eq!(self.mock.validation_errors(), Vec::<String>::new());
        assert_eq!(self.mock.problems(), Vec::<String>::new());
        assert_key_only_in_authorization(&self.mock, &self.key);
        assert_eq!(
            self.mock.occurrences(&self.daemon.token),
            Vec::<String>::new(),
            "the daemon token reached the model API"
        );
    }

    fn trajectory_text(&self) -> String {
        let mut all = String::new();
        for entry in walk(self.runs.path()) {
            all.push_str(&String::from_utf8_lossy(&std::fs::read(entry).unwrap()));
        }
        all
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[track_caller]
fn assert_key_only_in_authorization(mock: &MockResponses, key: &str) {
    let found = mock.occurrences(key);
    let n = mock.requests().len();
    let expected: Vec<String> = (1..=n)
        .map(|i| format!("request {i} header authorization"))
        .collect();
    assert_eq!(found, expected, "the API key went somewhere else");
}

fn start_recorder(dir: &Path) -> Recorder {
    let mut rec = Recorder::create(dir).unwrap();
    rec.write(&Entry::RunStarted(Box::new(Started {
        task: "Fill in the contact form and submit it.".into(),
        session: "test".into(),
        ..Started::default()
    })))
    .unwrap();
    rec
}

async fn drive(
    dir: &Path,
    model: &mut OpenAiModel,
    channel: &mut Channel,
    opts: RunOptions,
    op: &mut dyn Operator,
    interrupt: Interrupt,
) -> Run {
    let mut recorder = start_recorder(dir);
    let mut runner = Runner::new(model, channel, op, &mut recorder, opts, interrupt);
    let outcome = tokio::time::timeout(RUN_LIMIT, runner.run(None))
        .await
        .expect("the run hung")
        .unwrap();
    drop(runner);
    drop(recorder);
    Run {
        outcome,
        dir: dir.to_path_buf(),
        lines: trajectory(dir),
    }
}

// ---------------------------------------------------------------------
// Small helpers
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

/// The events of a left click at screen (x, y).
fn clicked(x: u32, y: u32) -> Vec<Event> {
    vec![Event::Motion(x, y), bd(1), bu(1)]
}

/// Keys and buttons pressed but not released in `events`.
fn still_held(events: &[Event]) -> Vec<Event> {
    held::still_held(events, |e| match *e {
        Event::Key(k, down) => Some(Stroke::Key(k, down)),
        Event::Button(b, down) => Some(Stroke::Button(b, down)),
        _ => None,
    })
}

fn motions(events: &[Event]) -> Vec<(u32, u32)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Motion(x, y) => Some((*x, *y)),
            _ => None,
        })
        .collect()
}

fn ids(checks: &[SafetyCheck]) -> Vec<&str> {
    checks.iter().map(|c| c.id.as_str()).collect()
}

/// The one computer_call_output of a request for `call_id`.
#[track_caller]
fn call_output(req: &Recorded, call_id: &str) -> Value {
    let outs: Vec<Value> = req
        .input_of_type("computer_call_output")
        .into_iter()
        .filter(|o| o["call_id"] == call_id)
        .collect();
    assert_eq!(outs.len(), 1, "outputs for {call_id} in request {}", req.n);
    outs[0].clone()
}

/// The parsed `output` of the one function_call_output for `call_id`.
#[track_caller]
fn function_output(req: &Recorded, call_id: &str) -> Value {
    let outs: Vec<Value> = req
        .input_of_type("function_call_output")
        .into_iter()
        .filter(|o| o["call_id"] == call_id)
        .collect();
    assert_eq!(outs.len(), 1, "outputs for {call_id} in request {}", req.n);
    serde_json::from_str(outs[0]["output"].as_str().unwrap()).unwrap()
}

/// Sizes of the screenshots in an input that are real (not the 1x1
/// placeholder the context budget leaves).
fn real_screenshots(items: &[Value], size: Size) -> usize {
    image_urls(&Value::Array(items.to_vec()))
        .iter()
        .filter(|u| png_size_of_data_url(u) == Some((size.width, size.height)))
        .count()
}

/// The text of a user message item.
fn user_text(item: &Value) -> Option<&str> {
    (item["type"] == "message" && item["role"] == "user")
        .then(|| item["content"][0]["text"].as_str())
        .flatten()
}
