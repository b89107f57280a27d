//! The computer tool loop.
//!
//! One step:
//! 1. Build the request: the whole conversation within the context budget
//!    with `store: false` (the default: the runner never enables storage
//!    on its own), or, when the operator asked for server-side storage,
//!    only the new input items (a task, call outputs, guidance) with
//!    `previous_response_id`.
//! 2. Ask the model (retries happen inside the model, never here).
//! 3. Record the response and its usage (docs/contract.md rule 14).
//! 4. Check the whole response before any of it runs ([`preflight`]):
//!    every action of every computer call parses strictly (an unknown
//!    action or field is refused, L2), within limits, inside the last
//!    screenshot, with known key names; then have every pending safety
//!    check of every call approved, or stop with zero daemon calls (rules
//!    10, 12); the approval is bound to the screen the operator saw: a
//!    fresh capture before anything runs, and a call whose targets'
//!    surroundings changed is asked again (rule 12, [`approvals`]). A
//!    refusal is a failed action (step 6).
//! 5. Then each call in order: with `--confirm-actions` have each action
//!    and the final screenshot confirmed (rule 11); write the ledger's
//!    `pending`; send the actions once; record `done`, `failed` or
//!    `unknown`; answer the call with the screenshot and the acknowledged
//!    checks (exactly the pending ones). Answer `ask_user` calls from the
//!    operator; append queued guidance at the end of the turn (rule 19; it
//!    does not reset the budget).
//! 6. A failed action (refused here, or refused or stopped by the daemon)
//!    stops the run, `action_failed`, as the official SDK's runner does;
//!    with `--on-action-error report` the model is told instead (host
//!    words only, never the guest's), the later calls of that response are
//!    skipped and answered as such, and the run goes on.
//! 7. Stop on a final answer (a commentary-only reply is none), the step or
//!    time budget (the last allowed request cannot start new effects, rule
//!    13), Ctrl-C (between operations, rule 15) or a denial.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use sandtop_protocol::{
    Action, BatchRequest, ErrorBody, ImageFormat, Screenshot, ScreenshotOptions,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::approve::{ActionRequest, Decision, Operator};
use super::browser::Toolset;
use super::diagnostics::{Diagnostic, Diagnostics, FileDiagnostics};
use super::model::Model;
pub use super::outcome::{Ending, Outcome, UsageTotals};
use super::preflight::{self, Refusal};
use super::progress::{CallState, Event, Progress, StepCall};
use super::record::{
    Entry, Finished, LedgerState, Recorder, UsageRecord, externalize, strip_images,
};
use super::wire::{self, OutputItem, RequestParts, SafetyCheck, ToolShape};
use crate::channel::{Channel, ChannelError};

mod approvals;
mod browser_calls;
mod file_calls;
mod sign_in_calls;

/// How much history is resent when the server does not store it.
#[derive(Debug, Clone, Copy)]
pub struct ContextBudget {
    /// Most screenshots in one request (the newest are kept).
    pub max_images: usize,
    /// Most bytes of input in one request.
    pub max_bytes: usize,
}

impl Default for ContextBudget {
    fn default() -> ContextBudget {
        ContextBudget {
            max_images: 3,
            max_bytes: 16 * 1024 * 1024,
        }
    }
}

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub task: String,
    pub model: String,
    /// The computer tool's shape (when `computer`).
    pub shape: ToolShape,
    /// Offer the computer tool (`--tool computer|both`). Without it the
    /// model works through the browser tools alone, and is shown no
    /// screenshot of the desktop.
    pub computer: bool,
    /// The browser toolset (`--browser`): members, URL policy, reads to
    /// confirm.
    pub browser: Option<Toolset>,
    pub instructions: Option<String>,
    pub max_steps: u32,
    pub max_duration: Option<Duration>,
    /// Server-side storage (`store: true`, `previous_response_id`), only
    /// when the operator asks (`--store`); false resends the conversation.
    pub store: bool,
    pub stream: bool,
    pub screenshot: ScreenshotOptions,
    pub confirm_actions: bool,
    pub ask_user: bool,
    /// Offer the `request_sign_in` tool ([`super::sign_in`]).
    pub sign_in: bool,
    /// Send a screenshot with the task in the first request (with the
    /// computer tool). The official SDK's runner does not; without it the
    /// model's first action is usually a `screenshot`.
    pub initial_screenshot: bool,
    pub context: ContextBudget,
    /// What a failed action does to the run.
    pub on_action_error: OnActionError,
}

/// What a failed action does to the run (`--on-action-error`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OnActionError {
    /// Stop the run, ending `action_failed` (the official SDK's runner
    /// does the same).
    #[default]
    Stop,
    /// Tell the model what failed, skip the later calls of that response
    /// (telling it which), and go on; failures are still counted.
    Report,
}

/// Ctrl-C, shared with a signal handler.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    flag: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Interrupt {
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves when triggered.
    pub async fn wait(&self) {
        loop {
            let n = self.notify.notified();
            if self.is_set() {
                return;
            }
            n.await;
        }
    }
}

/// Where a resumed run picks up.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    pub previous_response_id: Option<String>,
    pub steps_done: u32,
    pub next_input: Vec<Value>,
    pub conversation: Vec<Value>,
}

/// The loop's parts.
pub struct Runner<'a> {
    model: &'a mut dyn Model,
    channel: &'a mut Channel,
    operator: &'a mut dyn Operator,
    recorder: &'a mut Recorder,
    opts: RunOptions,
    interrupt: Interrupt,
    /// The screenshot the model saw last (its map is the coordinate space
    /// of the next call).
    last_shot: Option<Screenshot>,
    /// When the time budget runs out.
    deadline: Option<Instant>,
    /// The run folder's file of `last_shot`, when it was saved.
    last_file: Option<String>,
    /// Screenshots going out with the next request, as (data URL, file),
    /// so the trajectory can refer to the files instead of the data.
    files: Vec<(String, String)>,
    /// Calls of the current response started and completed.
    turn_attempted: Vec<String>,
    turn_completed: Vec<String>,
    action_failures: u32,
    /// Where progress lines and events go.
    progress: Progress,
    /// The step being reported, until its line is out.
    report: Option<StepReport>,
    /// Where diagnostics records go (an observer: its failures are
    /// ignored).
    diagnostics: Box<dyn Diagnostics + 'a>,
    /// The daemon's timings of the last request of the current call.
    last_timings: Option<sandtop_protocol::Timings>,
    /// The last structured read the model got (its refs' labels and roles
    /// go into approval prompts).
    last_read: Option<Value>,
}

/// What the progress line of the current step says.
#[derive(Debug)]
struct StepReport {
    step: u32,
    model_ms: f64,
    calls: Vec<StepCall>,
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// How the run ends, when it ends before the response's calls are done.
type Stop = (Ending, String);

/// One tool call of a response, checked, in the response's order.
#[derive(Debug)]
enum Work {
    Computer {
        call_id: String,
        actions: Vec<Action>,
        checks: Vec<SafetyCheck>,
    },
    Function {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// A call of a browser tool (`browser_<member>`), checked when it runs
    /// (its confirmation shows the state left by the calls before it).
    Browser {
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl Work {
    fn call_id(&self) -> &str {
        match self {
            Work::Computer { call_id, .. }
            | Work::Function { call_id, .. }
            | Work::Browser { call_id, .. } => call_id,
        }
    }

    /// What the progress line names: action kinds, or the function.
    fn kinds(&self) -> Vec<String> {
        match self {
            Work::Computer { actions, .. } => {
                actions.iter().map(|a| a.kind().to_string()).collect()
            }
            Work::Function { name, .. } | Work::Browser { name, .. } => vec![name.clone()],
        }
    }
}

/// Why a response is not run at all.
enum Rejected {
    /// A computer call the model did not finish (not an action failure).
    Unfinished(String),
    /// A call the host refuses (an action failure).
    Refused(Refusal),
}

/// How one computer call ended when it did not complete.
enum CallError {
    /// The run ends.
    Stop(Stop),
    /// The daemon refused or stopped the batch (ledger `failed`); `waited`
    /// is the daemon time spent.
    Failed { body: ErrorBody, waited: f64 },
}

/// What a call skipped after a failure answers.
const SKIPPED: &str = "not run: an earlier call of the same response failed";

/// A placeholder for screenshots dropped from resent history: 1x1 PNG.
const PLACEHOLDER_PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC";

/// The items of a JSON array (what `externalize` and `strip_images` of
/// an array give back).
fn array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        other => vec![other],
    }
}

/// A call id (or other label) as part of a file name of the run folder.
fn safe_name(what: &str) -> String {
    what.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(48)
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Resolves when the run must stop: Ctrl-C or the time budget. Every
/// await on the model or the daemon races against it, so neither can hold
/// the run past its limits (dropping a daemon request cancels it in the
/// daemon, which releases held input). A free function so that it can
/// borrow these two fields while the channel or model is borrowed.
async fn halted(interrupt: &Interrupt, deadline: Option<Instant>) -> Ending {
    let until_deadline = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = interrupt.wait() => Ending::Interrupted,
        () = until_deadline => Ending::TimeBudget,
    }
}

/// Runs an operator prompt (which blocks on the terminal) without
/// stalling other tasks on a multi-threaded runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Where a conversation holds screenshots (data URLs other than the
/// placeholder), oldest first: (item, Some(content index)) for message
/// images, (item, None) for computer call outputs.
fn image_slots(items: &[Value]) -> Vec<(usize, Option<usize>)> {
    let is_data = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_some_and(|u| u.starts_with("data:image/") && u != PLACEHOLDER_PNG)
    };
    let mut slots = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if is_data(item.pointer("/output/image_url")) {
            slots.push((i, None));
        }
        if let Some(parts) = item.get("content").and_then(Value::as_array) {
            for (j, part) in parts.iter().enumerate() {
                if is_data(part.get("image_url")) {
                    slots.push((i, Some(j)));
                }
            }
        }
    }
    slots
}

/// Replaces the screenshot at `slot` by the placeholder; returns how many
/// bytes its URL had.
fn drop_image(items: &mut [Value], (i, part): (usize, Option<usize>)) -> usize {
    let url = match part {
        None => &mut items[i]["output"]["image_url"],
        Some(j) => &mut items[i]["content"][j]["image_url"],
    };
    let len = url.as_str().map_or(0, str::len);
    *url = json!(PLACEHOLDER_PNG);
    len
}

/// Applies the context budget to a conversation that is about to be
/// resent: the oldest screenshots beyond the budget are replaced by a 1x1
/// placeholder, so every call keeps its output (the pairing stays intact)
/// and the newest observation is always kept whole. The size is measured
/// once and then adjusted (a data URL needs no JSON escaping), so the cost
/// grows with the conversation, not with its square.
pub fn apply_budget(items: &mut [Value], budget: ContextBudget) {
    let slots = image_slots(items);
    let mut size = serde_json::to_vec(items).map(|v| v.len()).unwrap_or(0);
    let mut images = slots.len();
    for slot in slots {
        if images <= 1 || (images <= budget.max_images && size <= budget.max_bytes) {
            break;
        }
        let was = drop_image(items, slot);
        size = size + PLACEHOLDER_PNG.len() - was.min(size);
        images -= 1;
    }
}

/// Keeps at most `keep` (at least one) screenshots whole in the history
/// the runner holds: the budget would never resend the older ones, and
/// holding them made memory and step time grow with the run (the soak
/// test found it).
fn forget_old_images(items: &mut [Value], keep: usize) {
    let slots = image_slots(items);
    let n = slots.len().saturating_sub(keep.max(1));
    for slot in slots.into_iter().take(n) {
        drop_image(items, slot);
    }
}

/// How a response without tool calls ends the run: with its final answer,
/// or — when it holds none (only commentary, an unfinished message, or
/// nothing at all) — as [`Ending::NoFinalAnswer`].
fn turn_end(resp: &wire::ModelResponse) -> (Ending, String) {
    let mut answers = Vec::new();
    let mut other = Vec::new();
    for item in &resp.items {
        if let OutputItem::Message { text, final_answer } = item {
            if *final_answer {
                answers.push(text.as_str());
            } else if !text.is_empty() {
                other.push(text.as_str());
            }
        }
    }
    if !answers.is_empty() {
        let text: Vec<&str> = answers.into_iter().filter(|t| !t.is_empty()).collect();
        return (Ending::Finished, text.join("\n"));
    }
    let mut message =
        String::from("the model ended its turn without a final answer and without a tool call");
    if let Some(p) = &resp.problem {
        message.push_str(&format!(" (the response is {p})"));
    }
    if !other.is_empty() {
        let said = other.join("\n");
        let said: String = said.chars().take(500).collect();
        message.push_str(&format!("; it said only: {said}"));
    }
    (Ending::NoFinalAnswer, message)
}

/// What the model is told when the daemon refused or stopped a call.
///
/// Composed from host data only (issue 11, item 1): the error code, from
/// the closed [`ErrorCode`](sandtop_protocol::ErrorCode) set, in our own
/// words; the failing action's index and kind, from the actions we sent;
/// and how many ran; with `--on-action-error report`, the ids of the later
/// calls of the response that were skipped. The daemon's `message` is the
/// guest's text and never reaches the model, which reads this as a user
/// message.
pub fn failure_note(
    call_id: &str,
    actions: &[Action],
    body: &ErrorBody,
    skipped: &[String],
) -> String {
    // The numbers come from the guest too: only values that fit the batch
    // we sent are repeated.
    let index = body.index.filter(|i| *i < actions.len());
    let ran = body
        .executed
        .unwrap_or(0)
        .min(index.unwrap_or(actions.len()));
    let what = match index {
        Some(i) => format!(
            "Action {i} ({}) of computer call {call_id}",
            actions[i].kind()
        ),
        None => format!("Computer call {call_id}"),
    };
    let started = if body.partial == Some(true) {
        " That action had already started, so part of it may have taken effect."
    } else {
        ""
    };
    let skipped = if skipped.is_empty() {
        String::new()
    } else {
        format!(
            " The later call(s) of that response were not run: {}.",
            skipped.join(", ")
        )
    };
    format!(
        "{what} could not be carried out: {} (`{}`). {ran} of its {} action(s) ran before it; \
         the rest did not run.{started}{skipped} The screenshot shows the screen now.",
        crate::channel::code_meaning(body.code),
        body.code,
        actions.len(),
    )
}

/// Counts screenshots (data URLs) and bytes of an input list.
pub fn input_cost(items: &[Value]) -> (usize, usize) {
    let s = serde_json::to_string(items).unwrap_or_default();
    (s.matches("data:image/").count(), s.len())
}

impl<'a> Runner<'a> {
    pub fn new(
        model: &'a mut dyn Model,
        channel: &'a mut Channel,
        operator: &'a mut dyn Operator,
        recorder: &'a mut Recorder,
        opts: RunOptions,
        interrupt: Interrupt,
    ) -> Runner<'a> {
        Runner {
            model,
            channel,
            operator,
            opts,
            interrupt,
            last_shot: None,
            last_file: None,
            deadline: None,
            files: Vec::new(),
            turn_attempted: Vec::new(),
            turn_completed: Vec::new(),
            action_failures: 0,
            progress: Progress::silent(),
            report: None,
            diagnostics: Box::new(FileDiagnostics::in_run(recorder.dir())),
            last_timings: None,
            last_read: None,
            recorder,
        }
    }

    /// Sends diagnostics records there (default: `diagnostics.jsonl` in
    /// the run folder).
    pub fn with_diagnostics(mut self, d: Box<dyn Diagnostics + 'a>) -> Runner<'a> {
        self.diagnostics = d;
        self
    }

    /// Hands a record to the diagnostics writer. Its errors and panics
    /// are logged and otherwise ignored: an observer cannot approve
    /// anything or change a result (rule 14).
    fn diagnose(&mut self, d: Diagnostic) {
        let diagnostics = &mut self.diagnostics;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| diagnostics.record(&d))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the diagnostics writer failed: {e:#}"),
            Err(_) => tracing::warn!("the diagnostics writer panicked"),
        }
    }

    /// Shows the run's progress there (the default shows nothing).
    pub fn with_progress(mut self, progress: Progress) -> Runner<'a> {
        self.progress = progress;
        self
    }

    /// Hands the progress sink back (for the summary).
    pub fn into_progress(self) -> Progress {
        self.progress
    }

    /// A tool call of the current step ended: reported as an event, and
    /// kept for the step's line.
    fn call_ended(
        &mut self,
        step: u32,
        call_id: &str,
        kinds: Vec<String>,
        state: CallState,
        daemon_ms: f64,
    ) {
        if matches!(
            state,
            CallState::Done | CallState::Failed | CallState::Unknown
        ) {
            let reason = match state {
                CallState::Done => "done",
                CallState::Failed => "failed",
                _ => "unknown",
            };
            let daemon_timings = self.last_timings.take();
            self.diagnose(Diagnostic {
                api: "computer".into(),
                stage: "action".into(),
                reason: reason.into(),
                call_id: call_id.to_string(),
                member: kinds.join(","),
                duration_ms: daemon_ms,
                usage: None,
                daemon_timings,
                step,
            });
        }
        self.show_call(step, call_id, kinds, state, daemon_ms);
    }

    /// A tool call of the current step ended: the progress event, and the
    /// step line's entry.
    fn show_call(
        &mut self,
        step: u32,
        call_id: &str,
        kinds: Vec<String>,
        state: CallState,
        daemon_ms: f64,
    ) {
        let call = StepCall {
            call_id: call_id.to_string(),
            kinds,
            state,
            daemon_ms,
        };
        self.progress.emit(&Event::Call {
            step,
            call: call.clone(),
        });
        if let Some(r) = self.report.as_mut() {
            r.calls.push(call);
        }
    }

    /// The current step is over: its line and event.
    fn end_step(&mut self) {
        if let Some(r) = self.report.take() {
            // (An empty f64 sum is -0.0: shown as "-0 ms" without the + 0.0.)
            let daemon_ms = r.calls.iter().map(|c| c.daemon_ms).sum::<f64>() + 0.0;
            self.progress.emit(&Event::Step {
                step: r.step,
                max_steps: self.opts.max_steps,
                calls: r.calls,
                model_ms: r.model_ms,
                daemon_ms,
            });
        }
    }

    fn deadline_passed(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Why a daemon request was cut short, if it was.
    fn halt_reason(&self) -> Option<Ending> {
        if self.interrupt.is_set() {
            Some(Ending::Interrupted)
        } else if self.deadline_passed() {
            Some(Ending::TimeBudget)
        } else {
            None
        }
    }

    async fn screenshot_now(&mut self) -> anyhow::Result<Screenshot> {
        let opts = self.opts.screenshot;
        tokio::select! {
            r = self.channel.screenshot(&opts) => Ok(r?.screenshot),
            ending = halted(&self.interrupt, self.deadline) => anyhow::bail!("stopped ({ending:?}) while taking a screenshot"),
        }
    }

    fn save_shot(&mut self, step: u32, what: &str, shot: &Screenshot) -> anyhow::Result<String> {
        let bytes = base64::engine::general_purpose::STANDARD.decode(&shot.data)?;
        let ext = match shot.format {
            ImageFormat::Png => "png",
            ImageFormat::Webp => "webp",
        };
        self.recorder
            .save_image(&format!("step-{step:03}-{}.{ext}", safe_name(what)), &bytes)
    }

    /// Runs the loop from the start (or from `resume`).
    pub async fn run(&mut self, resume: Option<Resume>) -> anyhow::Result<Outcome> {
        let start = Instant::now();
        self.deadline = self.opts.max_duration.map(|d| start + d);
        // A prompt open when the run stops closes at once (issue 11 item 4).
        {
            let (interrupt, deadline) = (self.interrupt.clone(), self.deadline);
            self.operator.on_stop(Arc::new(move || {
                interrupt.is_set() || deadline.is_some_and(|d| Instant::now() >= d)
            }));
        }
        let mut usage = UsageTotals::default();
        let mut overhead = Vec::new();
        let (mut prev_id, mut step, mut next_input, mut conversation) = match resume {
            Some(r) => (
                r.previous_response_id,
                r.steps_done,
                r.next_input,
                r.conversation,
            ),
            None if !self.opts.computer || !self.opts.initial_screenshot => {
                // The browser alone: the model starts from the task and
                // reads the page through its tools. Without the initial
                // screenshot, it asks for one (as with the SDK's runner).
                (
                    None,
                    0,
                    vec![wire::user_message(&self.opts.task, None)],
                    Vec::new(),
                )
            }
            None => {
                let shot = self
                    .screenshot_now()
                    .await
                    .context("the first screenshot")?;
                let file = self.save_shot(0, "initial", &shot)?;
                self.recorder.write(&Entry::Observation {
                    step: 0,
                    call_id: None,
                    file: file.clone(),
                    scale_map: shot.scale_map,
                })?;
                let url = shot.data_url();
                let first = wire::user_message(&self.opts.task, Some(&url));
                self.files.push((url, file.clone()));
                self.last_shot = Some(shot);
                self.last_file = Some(file);
                (None, 0, vec![first], Vec::new())
            }
        };
        if self.last_shot.is_none() && self.opts.computer {
            self.last_shot = Some(self.screenshot_now().await?);
        }
        if self.opts.browser.is_some() {
            // Fails before the first request when the guest has no
            // browser, and starts it (seconds) before the model waits.
            self.browser_ready().await?;
        }
        let mut browser_tools = self
            .opts
            .browser
            .as_ref()
            .map(Toolset::tools)
            .unwrap_or_default();
        if self.opts.sign_in {
            browser_tools.push(super::sign_in::tool());
        }
        self.progress.emit(&Event::Started {
            max_steps: self.opts.max_steps,
            steps_done: step,
        });
        loop {
            if self.interrupt.is_set() {
                return self.finish(
                    Ending::Interrupted,
                    "interrupted (Ctrl-C)".into(),
                    step,
                    usage,
                    overhead,
                );
            }
            if step >= self.opts.max_steps {
                return self.finish(
                    Ending::StepBudget,
                    format!(
                        "the step budget ({} requests) is spent",
                        self.opts.max_steps
                    ),
                    step,
                    usage,
                    overhead,
                );
            }
            if self.deadline_passed() {
                return self.finish(
                    Ending::TimeBudget,
                    "the time budget is spent".into(),
                    step,
                    usage,
                    overhead,
                );
            }
            let t_step = Instant::now();
            // 1. The request.
            let input = if self.opts.store {
                next_input.clone()
            } else {
                let mut all = conversation.clone();
                all.extend(next_input.iter().cloned());
                apply_budget(&mut all, self.opts.context);
                all
            };
            let body = wire::create_request(&RequestParts {
                model: &self.opts.model,
                shape: self.opts.computer.then_some(self.opts.shape),
                browser: &browser_tools,
                display: self
                    .last_shot
                    .as_ref()
                    .map(|s| sandtop_protocol::Size::new(s.width, s.height))
                    .unwrap_or(sandtop_protocol::Size::new(1280, 800)),
                instructions: self.opts.instructions.as_deref(),
                input: &input,
                previous_response_id: if self.opts.store {
                    prev_id.as_deref()
                } else {
                    None
                },
                store: self.opts.store,
                stream: self.opts.stream,
                ask_user: self.opts.ask_user,
            });
            let (images, bytes) = input_cost(&input);
            step += 1;
            self.recorder.write(&Entry::RequestInput {
                step,
                items: array(externalize(&Value::Array(next_input.clone()), &self.files)),
                previous_response_id: prev_id.clone(),
                images,
                bytes,
            })?;
            self.files.clear();
            // 2. The model.
            let reply = tokio::select! {
                r = self.model.create(&body) => r,
                                ending = halted(&self.interrupt, self.deadline) => {
                    let why = match ending {
                        Ending::TimeBudget => "the time budget ran out while the model was answering",
                        _ => "interrupted while the model was answering",
                    };
                    return self.finish(ending, why.into(), step, usage, overhead);
                }
            };
            let (resp, stats) = match reply {
                Ok(r) => r,
                Err(e) => {
                    let msg = format!("{e}");
                    self.recorder.write(&Entry::ModelError {
                        step,
                        error: msg.clone(),
                    })?;
                    return self.finish(Ending::Failed, msg, step, usage, overhead);
                }
            };
            let model_ms = ms(stats.duration);
            self.report = Some(StepReport {
                step,
                model_ms,
                calls: Vec::new(),
            });
            // 3. Record it.
            usage.add(resp.usage);
            self.diagnose(Diagnostic {
                api: "responses".into(),
                stage: "request".into(),
                reason: "completed".into(),
                call_id: resp.id.clone(),
                member: "responses.create".into(),
                duration_ms: model_ms,
                usage: resp.usage,
                daemon_timings: None,
                step,
            });
            self.recorder.write(&Entry::Usage(UsageRecord {
                api: "responses".into(),
                stage: "request".into(),
                reason: "completed".into(),
                usage: resp.usage,
                call_id: resp.id.clone(),
                member: "responses.create".into(),
                duration_ms: model_ms,
                attempts: stats.attempts,
                step,
            }))?;
            self.recorder.write(&Entry::Response {
                step,
                id: resp.id.clone(),
                status: resp.status.clone(),
                output: array(strip_images(&Value::Array(resp.raw_output.clone()))),
            })?;
            conversation.append(&mut next_input);
            conversation.extend(resp.raw_output.iter().cloned());
            forget_old_images(&mut conversation, self.opts.context.max_images);
            prev_id = Some(resp.id.clone());
            if let Some(p) = &resp.problem
                && resp.status == "failed"
            {
                return self.finish(
                    Ending::Failed,
                    format!("the model failed: {p}"),
                    step,
                    usage,
                    overhead,
                );
            }
            let calls = resp
                .items
                .iter()
                .filter(|i| {
                    matches!(
                        i,
                        OutputItem::ComputerCall { .. } | OutputItem::FunctionCall { .. }
                    )
                })
                .count();
            self.progress.emit(&Event::Model {
                step,
                model_ms,
                attempts: stats.attempts,
                calls,
                usage: resp.usage,
            });
            if calls == 0 {
                self.recorder.sync()?;
                overhead.push((ms(t_step.elapsed()) - model_ms).max(0.0));
                let (ending, message) = turn_end(&resp);
                return self.finish(ending, message, step, usage, overhead);
            }
            if step >= self.opts.max_steps {
                // Rule 13: the last allowed request cannot start effects.
                return self.finish(
                    Ending::StepBudget,
                    format!(
                        "the step budget ({} requests) is spent; {calls} tool call(s) of the last response were not run",
                        self.opts.max_steps
                    ),
                    step,
                    usage,
                    overhead,
                );
            }
            // 4-6. The calls: all checked, all approved, then run.
            let (out, waited_ms) = match self.turn(step, &resp).await? {
                Ok(r) => r,
                Err((ending, message)) => {
                    return self.finish(ending, message, step, usage, overhead);
                }
            };
            for o in &out {
                self.recorder.write(&Entry::CallOutput {
                    step,
                    item: externalize(o, &self.files),
                })?;
            }
            next_input.extend(out);
            for g in self.operator.take_guidance() {
                self.recorder.write(&Entry::Guidance {
                    step,
                    text: g.clone(),
                })?;
                next_input.push(wire::user_message(&g, None));
            }
            self.recorder.sync()?;
            self.end_step();
            overhead.push((ms(t_step.elapsed()) - model_ms - waited_ms).max(0.0));
        }
    }

    fn finish(
        &mut self,
        ending: Ending,
        message: String,
        steps: u32,
        usage: UsageTotals,
        overhead_ms: Vec<f64>,
    ) -> anyhow::Result<Outcome> {
        self.end_step();
        self.progress.emit(&Event::Finished { ending, steps });
        self.recorder.write(&Entry::RunFinished(Box::new(Finished {
            ending,
            message: message.clone(),
            steps,
            usage_totals: usage,
            attempted_call_ids: self.turn_attempted.clone(),
            completed_call_ids: self.turn_completed.clone(),
            action_failures: self.action_failures,
        })))?;
        self.recorder.sync()?;
        Ok(Outcome {
            ending,
            message,
            steps,
            usage,
            overhead_ms,
            attempted_call_ids: self.turn_attempted.clone(),
            completed_call_ids: self.turn_completed.clone(),
            action_failures: self.action_failures,
        })
    }

    fn function_call(
        &mut self,
        step: u32,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> anyhow::Result<Value> {
        let output = if name == "ask_user" && self.opts.ask_user {
            let question = serde_json::from_str::<Value>(arguments)
                .ok()
                .and_then(|v| {
                    v.get("question")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_default();
            let answer = if question.trim().is_empty() {
                None
            } else {
                blocking(|| self.operator.ask(&question))
            };
            self.recorder.write(&Entry::AskUser {
                step,
                call_id: call_id.to_string(),
                question: question.clone(),
                answered: answer.is_some(),
            })?;
            match answer {
                Some(a) => json!({"answer": a}).to_string(),
                None => json!({"error": "the operator declined to answer"}).to_string(),
            }
        } else {
            json!({"error": format!("unknown function `{name}`")}).to_string()
        };
        Ok(wire::function_call_output(call_id, &output))
    }

    /// Handles the tool calls of one response: checks them all, has every
    /// safety check approved, then runs them in order. Returns the items
    /// that answer them and the time spent waiting on the daemon and the
    /// operator, or how the run ends.
    async fn turn(
        &mut self,
        step: u32,
        resp: &wire::ModelResponse,
    ) -> anyhow::Result<Result<(Vec<Value>, f64), Stop>> {
        self.turn_attempted.clear();
        self.turn_completed.clear();
        let work = match self.check_response(resp) {
            Ok(w) => w,
            Err(Rejected::Unfinished(m)) => return Ok(Err((Ending::Failed, m))),
            Err(Rejected::Refused(r)) => return self.refused(step, resp, &r),
        };
        let mut waited = match self.approve_all(step, &work).await? {
            Ok(w) => w,
            Err(stop) => return Ok(Err(stop)),
        };
        let mut out = Vec::new();
        // A browser call that did not succeed: the later browser calls of
        // this response are answered as skipped (the seed's toolset).
        let mut browser_failed = false;
        for (n, w) in work.iter().enumerate() {
            match w {
                Work::Browser {
                    call_id,
                    name,
                    arguments,
                } => {
                    let t = Instant::now();
                    match self
                        .browser_call(step, call_id, name, arguments, browser_failed)
                        .await?
                    {
                        Ok((item, ok)) => {
                            out.push(item);
                            if !ok {
                                browser_failed = true;
                                self.action_failures += 1;
                            }
                        }
                        Err(stop) => return Ok(Err(stop)),
                    }
                    waited += ms(t.elapsed());
                }
                Work::Computer {
                    call_id,
                    actions,
                    checks,
                } => match self.execute(step, call_id, actions, checks).await? {
                    Ok((item, t)) => {
                        waited += t;
                        out.push(item);
                    }
                    Err(CallError::Stop(stop)) => return Ok(Err(stop)),
                    Err(CallError::Failed { body, waited: t }) => {
                        waited += t;
                        self.action_failures += 1;
                        if self.opts.on_action_error == OnActionError::Stop {
                            return Ok(Err((
                                Ending::ActionFailed,
                                format!(
                                    "computer call {call_id}: {}; its outcome is recorded as failed",
                                    crate::channel::refusal(&body)
                                ),
                            )));
                        }
                        let t = Instant::now();
                        match self
                            .report_failure(step, call_id, checks, actions, &body, &work[n + 1..])
                            .await?
                        {
                            Ok(items) => out.extend(items),
                            Err(stop) => return Ok(Err(stop)),
                        }
                        waited += ms(t.elapsed());
                        break;
                    }
                },
                Work::Function {
                    call_id,
                    name,
                    arguments,
                } => {
                    let t = Instant::now();
                    self.turn_attempted.push(call_id.clone());
                    if name == super::sign_in::TOOL && self.opts.sign_in {
                        match self.sign_in_call(step, call_id, arguments).await? {
                            Ok(item) => out.push(item),
                            Err(stop) => return Ok(Err(stop)),
                        }
                    } else {
                        out.push(self.function_call(step, call_id, name, arguments)?);
                    }
                    if let Some(ending) = self.halt_reason() {
                        return Ok(Err((
                            ending,
                            format!("the run stopped while the operator was asked ({call_id})"),
                        )));
                    }
                    self.turn_completed.push(call_id.clone());
                    self.call_ended(step, call_id, vec![name.clone()], CallState::Answered, 0.0);
                    waited += ms(t.elapsed());
                }
            }
        }
        Ok(Ok((out, waited)))
    }

    /// What a function call that was not run answers: the browser's own
    /// skipped result for its tools, a plain error for others.
    fn skipped_output(&self, call_id: &str, name: &str) -> Value {
        if self.opts.browser.is_some() && Toolset::is_browser_tool(name) {
            super::browser::output(call_id, None, Err(super::browser::SKIPPED.into()), None)
        } else {
            wire::function_call_output(call_id, &json!({"error": SKIPPED}).to_string())
        }
    }

    /// Checks every call of a response with what the host can know
    /// ([`preflight::check_call`], against the screenshot the model saw),
    /// before any of it runs.
    fn check_response(&self, resp: &wire::ModelResponse) -> Result<Vec<Work>, Rejected> {
        let map = self.last_shot.as_ref().map(|s| s.scale_map);
        let mut work = Vec::new();
        for item in &resp.items {
            match item {
                OutputItem::ComputerCall {
                    call_id,
                    unfinished: Some(status),
                    ..
                } => {
                    return Err(Rejected::Unfinished(format!(
                        "the model's computer call {call_id} is `{status}`, not completed; \
                         nothing of that response was run"
                    )));
                }
                OutputItem::ComputerCall { call_id, .. } if !self.opts.computer => {
                    return Err(Rejected::Refused(Refusal {
                        call_id: call_id.clone(),
                        index: None,
                        code: sandtop_protocol::ErrorCode::InvalidAction,
                        reason: "the computer tool is not offered in this run".into(),
                    }));
                }
                OutputItem::ComputerCall {
                    call_id,
                    actions,
                    pending_safety_checks,
                    unfinished: None,
                } => work.push(Work::Computer {
                    call_id: call_id.clone(),
                    actions: preflight::check_call(call_id, actions, map.as_ref())
                        .map_err(Rejected::Refused)?,
                    checks: pending_safety_checks.clone(),
                }),
                OutputItem::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } if self.opts.browser.is_some() && Toolset::is_browser_tool(name) => {
                    work.push(Work::Browser {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        arguments: arguments.clone(),
                    })
                }
                OutputItem::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } => work.push(Work::Function {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                }),
                _ => {}
            }
        }
        Ok(work)
    }

    /// A call refused before anything of its response ran: the run stops
    /// (`action_failed`), or, reporting, every call of the response is
    /// answered with the screen the model saw, unchanged, and the model is
    /// told what was refused.
    fn refused(
        &mut self,
        step: u32,
        resp: &wire::ModelResponse,
        r: &Refusal,
    ) -> anyhow::Result<Result<(Vec<Value>, f64), Stop>> {
        self.action_failures += 1;
        self.recorder.write(&Entry::Refused {
            step,
            call_id: r.call_id.clone(),
            index: r.index,
            code: r.code,
            reason: r.reason.clone(),
        })?;
        for item in &resp.items {
            let (id, kinds, state) = match item {
                OutputItem::ComputerCall {
                    call_id, actions, ..
                } => (
                    call_id,
                    actions
                        .iter()
                        .map(|a| {
                            a.get("type")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                                .to_string()
                        })
                        .collect(),
                    if *call_id == r.call_id {
                        CallState::Refused
                    } else {
                        CallState::Skipped
                    },
                ),
                OutputItem::FunctionCall { call_id, name, .. } => {
                    (call_id, vec![name.clone()], CallState::Skipped)
                }
                _ => continue,
            };
            self.call_ended(step, id, kinds, state, 0.0);
        }
        let stop = format!("{r}; nothing of that response was run");
        if self.opts.on_action_error == OnActionError::Stop {
            return Ok(Err((Ending::ActionFailed, stop)));
        }
        // Answering a call acknowledges its safety checks, and nobody
        // approved these: such a response cannot be reported honestly.
        if let Some(c) = resp.items.iter().find_map(|i| match i {
            OutputItem::ComputerCall {
                call_id,
                pending_safety_checks,
                ..
            } if !pending_safety_checks.is_empty() => Some(call_id),
            _ => None,
        }) {
            return Ok(Err((
                Ending::ActionFailed,
                format!(
                    "{stop}; the run stops because computer call {c} of that response carries \
                     safety checks nobody approved, which answering it would acknowledge"
                ),
            )));
        }
        let (Some(shot), Some(file)) = (self.last_shot.as_ref(), self.last_file.clone()) else {
            return Ok(Err((Ending::ActionFailed, stop)));
        };
        let url = shot.data_url();
        let mut out = Vec::new();
        for item in &resp.items {
            match item {
                OutputItem::ComputerCall { call_id, .. } => {
                    out.push(wire::computer_call_output(call_id, &url, &[]));
                }
                OutputItem::FunctionCall { call_id, name, .. } => {
                    out.push(self.skipped_output(call_id, name));
                }
                _ => {}
            }
        }
        out.push(wire::user_message(
            &format!(
                "Nothing of your last response was run: {r}. The screenshot shows the screen \
                 as it was, unchanged."
            ),
            None,
        ));
        self.files.push((url, file));
        Ok(Ok((out, 0.0)))
    }

    /// Runs one checked and approved computer call: ledger `pending`, the
    /// batch sent once (or each action after its confirmation), then
    /// `done` with the call's output, `failed` (the daemon refused or
    /// stopped it), or `unknown`.
    async fn execute(
        &mut self,
        step: u32,
        call_id: &str,
        actions: &[Action],
        checks: &[SafetyCheck],
    ) -> anyhow::Result<Result<(Value, f64), CallError>> {
        let expect = self.last_shot.as_ref().map(|s| s.scale_map);
        self.recorder.ledger(
            step,
            call_id,
            LedgerState::Pending,
            json!({"actions": actions, "expect_scale_map": expect}),
        )?;
        self.turn_attempted.push(call_id.to_string());
        // Daemon (and, with confirmations, operator) time is not loop overhead.
        let t_daemon = Instant::now();
        let kinds: Vec<String> = actions.iter().map(|a| a.kind().to_string()).collect();
        let result = if self.opts.confirm_actions {
            match self.run_confirmed(step, call_id, actions, expect).await? {
                Ok(r) => r,
                Err(stop) => {
                    let t = ms(t_daemon.elapsed());
                    self.call_ended(step, call_id, kinds, CallState::Failed, t);
                    return Ok(Err(CallError::Stop(stop)));
                }
            }
        } else {
            let mut req = BatchRequest::new(actions.to_vec(), self.opts.screenshot);
            req.expect_scale_map = expect;
            self.send(req).await
        };
        let waited = ms(t_daemon.elapsed());
        let shot = match result {
            Ok(shot) => {
                // The daemon's own timings stay with the step.
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Done,
                    json!({"executed": actions.len(), "daemon_timings": self.last_timings}),
                )?;
                self.turn_completed.push(call_id.to_string());
                self.call_ended(step, call_id, kinds, CallState::Done, waited);
                shot
            }
            Err(ChannelError::Daemon { body, .. }) => {
                // The body (its message included) is kept for the record;
                // what anyone is told is composed from its code and numbers.
                self.recorder
                    .ledger(step, call_id, LedgerState::Failed, json!({"error": body}))?;
                self.call_ended(step, call_id, kinds, CallState::Failed, waited);
                return Ok(Err(CallError::Failed { body, waited }));
            }
            Err(e) => {
                let halted = self.halt_reason();
                let state = if halted.is_some() || e.outcome_unknown() {
                    LedgerState::Unknown
                } else {
                    LedgerState::Failed
                };
                self.recorder
                    .ledger(step, call_id, state, json!({"error": e.to_string()}))?;
                let shown = if state == LedgerState::Unknown {
                    CallState::Unknown
                } else {
                    CallState::Failed
                };
                self.call_ended(step, call_id, kinds, shown, waited);
                let ending = halted.unwrap_or(Ending::Failed);
                return Ok(Err(CallError::Stop((
                    ending,
                    format!(
                        "computer call {call_id}: {e}; its outcome is recorded as {state:?} (resume with --resume after reconciling)"
                    ),
                ))));
            }
        };
        let file = self.save_shot(step, call_id, &shot)?;
        self.recorder.write(&Entry::Observation {
            step,
            call_id: Some(call_id.to_string()),
            file: file.clone(),
            scale_map: shot.scale_map,
        })?;
        let url = shot.data_url();
        let out = wire::computer_call_output(call_id, &url, checks);
        self.files.push((url, file.clone()));
        self.last_shot = Some(shot);
        self.last_file = Some(file);
        Ok(Ok((out, waited)))
    }

    /// After a failed call, reporting: the screen as it is now answers the
    /// failed call and every later computer call of the response (none of
    /// which runs), later function calls are answered as skipped, and the
    /// model is told what failed and what was skipped, in host words.
    async fn report_failure(
        &mut self,
        step: u32,
        call_id: &str,
        checks: &[SafetyCheck],
        actions: &[Action],
        body: &ErrorBody,
        later: &[Work],
    ) -> anyhow::Result<Result<Vec<Value>, Stop>> {
        let shot = match self.screenshot_now().await {
            Ok(s) => s,
            Err(e) => {
                return Ok(Err((
                    Ending::Failed,
                    format!("after a failed action: {e:#}"),
                )));
            }
        };
        let file = self.save_shot(step, call_id, &shot)?;
        self.recorder.write(&Entry::Observation {
            step,
            call_id: Some(call_id.to_string()),
            file: file.clone(),
            scale_map: shot.scale_map,
        })?;
        let url = shot.data_url();
        let mut out = vec![wire::computer_call_output(call_id, &url, checks)];
        let mut skipped = Vec::new();
        for w in later {
            match w {
                // Their checks were approved before anything ran.
                Work::Computer {
                    call_id, checks, ..
                } => out.push(wire::computer_call_output(call_id, &url, checks)),
                Work::Function { call_id, name, .. } | Work::Browser { call_id, name, .. } => {
                    out.push(self.skipped_output(call_id, name))
                }
            }
            self.recorder.write(&Entry::Skipped {
                step,
                call_id: w.call_id().to_string(),
                after: call_id.to_string(),
            })?;
            self.call_ended(step, w.call_id(), w.kinds(), CallState::Skipped, 0.0);
            skipped.push(w.call_id().to_string());
        }
        out.push(wire::user_message(
            &failure_note(call_id, actions, body, &skipped),
            None,
        ));
        self.files.push((url, file.clone()));
        self.last_shot = Some(shot);
        self.last_file = Some(file);
        Ok(Ok(out))
    }

    /// Sends one batch (with its final screenshot), cancellable.
    async fn send(&mut self, req: BatchRequest) -> Result<Screenshot, ChannelError> {
        let r = tokio::select! {
            r = self.channel.act(&req) => r?,
                        ending = halted(&self.interrupt, self.deadline) => {
                return Err(ChannelError::Http(format!("stopped ({ending:?}) while the actions ran")));
            }
        };
        self.last_timings = Some(r.timings);
        r.screenshot
            .ok_or_else(|| ChannelError::BadReply("the final screenshot is missing".into()))
    }

    /// Runs the actions one at a time, each after the operator confirmed
    /// it, then the final screenshot after it too was confirmed.
    async fn run_confirmed(
        &mut self,
        step: u32,
        call_id: &str,
        actions: &[Action],
        expect: Option<sandtop_protocol::ScaleMap>,
    ) -> anyhow::Result<Result<Result<Screenshot, ChannelError>, Stop>> {
        for (i, a) in actions.iter().enumerate() {
            let d = blocking(|| {
                self.operator.confirm_action(&ActionRequest {
                    call_id,
                    action: Some(a),
                    index: i,
                    of: actions.len(),
                })
            });
            self.recorder.write(&Entry::Confirm {
                step,
                call_id: call_id.to_string(),
                index: Some(i),
                approved: d == Decision::Approve,
            })?;
            if let Some(ending) = self.halt_reason() {
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Failed,
                    json!({"executed": i, "stopped": "during the confirmation"}),
                )?;
                return Ok(Err((
                    ending,
                    format!(
                        "the run stopped while action {i} of {call_id} awaited confirmation; {i} action(s) before it ran"
                    ),
                )));
            }
            if let Decision::Deny(reason) = d {
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Failed,
                    json!({"executed": i, "refused": reason}),
                )?;
                return Ok(Err((
                    Ending::Refused,
                    format!(
                        "the operator refused action {i} of {call_id} ({reason}); {i} action(s) before it ran"
                    ),
                )));
            }
            let mut req = BatchRequest::new(vec![a.clone()], self.opts.screenshot);
            req.expect_scale_map = expect;
            req.final_screenshot = false;
            let r = tokio::select! {
                r = self.channel.act(&req) => r,
                ending = halted(&self.interrupt, self.deadline) => Err(ChannelError::Http(format!("stopped ({ending:?}) while the action ran"))),
            };
            match r {
                // The daemon saw a batch of one: say where it stands in
                // the call.
                Err(ChannelError::Daemon { status, mut body }) => {
                    body.index = Some(i);
                    body.executed = Some(i);
                    return Ok(Ok(Err(ChannelError::Daemon { status, body })));
                }
                Err(e) => return Ok(Ok(Err(e))),
                Ok(r) => self.last_timings = Some(r.timings),
            }
        }
        let d = blocking(|| {
            self.operator.confirm_action(&ActionRequest {
                call_id,
                action: None,
                index: actions.len(),
                of: actions.len(),
            })
        });
        self.recorder.write(&Entry::Confirm {
            step,
            call_id: call_id.to_string(),
            index: None,
            approved: d == Decision::Approve,
        })?;
        if let Some(ending) = self.halt_reason() {
            self.recorder.ledger(
                step,
                call_id,
                LedgerState::Failed,
                json!({"executed": actions.len(), "stopped": "before the final screenshot"}),
            )?;
            return Ok(Err((
                ending,
                format!(
                    "the run stopped while the final screenshot of {call_id} awaited confirmation; all its actions ran"
                ),
            )));
        }
        if let Decision::Deny(reason) = d {
            self.recorder.ledger(
                step,
                call_id,
                LedgerState::Failed,
                json!({"executed": actions.len(), "refused": "final screenshot"}),
            )?;
            return Ok(Err((
                Ending::Refused,
                format!(
                    "the operator refused the final screenshot of {call_id} ({reason}); all its actions ran"
                ),
            )));
        }
        let mut req = BatchRequest::new(Vec::new(), self.opts.screenshot);
        req.expect_scale_map = expect;
        Ok(Ok(self.send(req).await))
    }
}
