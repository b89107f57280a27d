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
//! 4. Check the whole response before any of it runs (`preflight`):
//!    every action of every computer call parses strictly (an unknown
//!    action or field is refused, L2), within limits, inside the last
//!    screenshot, with known key names; then have every pending safety
//!    check of every call approved, or stop with zero daemon calls (rules
//!    10, 12); the approval is bound to the screen the operator saw: a
//!    fresh capture before anything runs, and a call whose targets'
//!    surroundings changed is asked again (rule 12, `approvals`). A
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
//!
//! Layout: no inline tests; the loop itself is in the ten modules of
//! `runner/`. Here is what they share: the options, `Runner` and its common
//! methods, the types a step passes between them, and the context budget
//! (`apply_budget` and its helpers, which would move first).
//!
//! How the run ends is one value, `Stop`: every part of a step returns
//! `Result<T, Stop>`, and `?` carries an ending (or an error) from where it
//! happens back to [`Runner::run`], which finishes the run with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use sandtop_protocol::{Action, ErrorBody, Screenshot, ScreenshotOptions};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

use sandtop_channel::Channel;
use sandtop_runfolder::diagnostics::{Diagnostic, Diagnostics, FileDiagnostics};
use sandtop_runfolder::items::{self as wire, OutputItem, SafetyCheck, ToolShape};
pub use sandtop_runfolder::outcome::{Ending, Outcome, UsageTotals};
use sandtop_runfolder::trajectory::{Entry, Finished, Recorder};

use crate::approve::Operator;
use crate::browser::toolset::Toolset;
use crate::computer::preflight::Refusal;
use crate::computer::reads::Read;
use crate::model::Model;
use crate::progress::{CallState, Event, Progress, StepCall};

mod approvals;
mod browser_calls;
mod computer_calls;
mod computer_reads;
mod confirmations;
mod control;
mod file_calls;
mod sign_in_calls;
mod step;
mod turn;

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
    /// Responses compaction (`--compaction`): with `auto` the requests ask
    /// the API to compact the context (`context_management`) and the
    /// local context budget is not applied (the seed: choose one, never
    /// both); a model that refuses it gets the local budget instead.
    pub compaction: Compaction,
    /// What a failed action does to the run.
    pub on_action_error: OnActionError,
}

/// Responses compaction (`--compaction`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Compaction {
    /// Ask for `context_management` compaction; when the model refuses it
    /// (a 400 naming `context_management`), the same request goes again
    /// without it and the run keeps the local context budget.
    Auto,
    /// Never ask for it: the local context budget alone.
    #[default]
    Off,
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
    /// What the browser tools keep from one call to the next.
    browser: BrowserMemory,
    /// The run's control socket (`host-cli view`), when served.
    control: Option<sandtop_control::served::Served>,
}

/// What the browser tools (and sign-in) keep from one call to the next.
#[derive(Debug, Default)]
struct BrowserMemory {
    /// The last structured read the model got (its refs' labels and roles
    /// go into approval prompts).
    last_read: Option<Value>,
    /// Sign-in values were sent to a page in this run: `run_script` is
    /// refused from then on (seed: scripts run in a credential-less
    /// session; contract rule 41a).
    signed_in: bool,
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

/// Why the loop does not go on: the run ends here, with its ending and
/// the message the outcome carries; or it fails with an error (nothing is
/// finished: the caller gets the error). Every part of a step returns
/// `Result<T, Stop>`; `?` carries either back to [`Runner::run`], and any
/// error converts into [`Stop::Error`].
#[derive(Debug)]
enum Stop {
    End(Ending, String),
    Error(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Stop {
    fn from(e: E) -> Stop {
        Stop::Error(e.into())
    }
}

/// One tool call of a response, checked, in the response's order.
#[derive(Debug)]
enum Work {
    Computer {
        call_id: String,
        actions: Vec<Action>,
        checks: Vec<SafetyCheck>,
    },
    /// A computer call that reads the screen and changes nothing
    /// ([`crate::computer::reads`]).
    Read { call_id: String, read: Read },
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
            | Work::Read { call_id, .. }
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
            Work::Read { read, .. } => vec![read.kind().to_string()],
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

/// How one computer call that was run ended.
enum Executed {
    /// It ran: the item answering it, and the daemon time spent.
    Done(Value, f64),
    /// The daemon refused or stopped the batch (ledger `failed`); `waited`
    /// is the daemon time spent.
    Failed { body: ErrorBody, waited: f64 },
}

/// What a call skipped after a failure answers.
const SKIPPED: &str = "not run: an earlier call of the same response failed";

/// A placeholder for screenshots dropped from resent history: 1x1 PNG.
pub(crate) const PLACEHOLDER_PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC";

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
fn turn_end(resp: &wire::ModelResponse) -> Stop {
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
        return Stop::End(Ending::Finished, text.join("\n"));
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
    Stop::End(Ending::NoFinalAnswer, message)
}

/// What the model is told when the daemon refused or stopped a call.
///
/// Composed from host data only: the error code, from
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
        sandtop_channel::code_meaning(body.code),
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
            browser: BrowserMemory::default(),
            control: None,
            recorder,
        }
    }

    /// Serves the run's state to viewers and takes their takeover
    /// (`control`); the operator asks its questions there itself.
    pub fn with_control(mut self, control: sandtop_control::served::Served) -> Runner<'a> {
        self.control = Some(control);
        self
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
            Ok(Err(e)) => tracing::warn!(
                "the diagnostics writer failed: {}",
                sandtop_hostkit::chain::chain(&e)
            ),
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
            self.tell(|s| s.last_call_state(call_id, reason));
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

    /// The trajectory's word for who made the operator's last decision.
    fn decided_by(&self) -> Option<String> {
        self.operator.decided_by().map(|b| b.as_str().to_string())
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
        let ext = shot.format.extension();
        Ok(self
            .recorder
            .save_image(&format!("step-{step:03}-{}.{ext}", safe_name(what)), &bytes)?)
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
        self.record_answers(steps)?;
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
}
