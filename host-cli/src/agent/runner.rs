//! The computer tool loop.
//!
//! One step:
//! 1. Build the request: the whole conversation within the context budget
//!    with `store: false` (the default: the runner never enables storage
//!    on its own), or, when the operator asked for server-side storage,
//!    only the new input items (a task, call outputs, guidance) with
//!    `previous_response_id`.
//! 2. Ask the model (retries happen inside the model, never here).
//! 3. Record the response and its usage (CONTRACT.md rule 14).
//! 4. For each computer call, in order: read the actions leniently (an
//!    unknown action stops the run, L2); have every pending safety check
//!    approved or stop with zero daemon calls (rules 10, 12); with
//!    `--confirm-actions` have each action and the final screenshot
//!    confirmed (rule 11); write the ledger's `pending`; send the actions
//!    once; record `done`, `failed` or `unknown`; answer the call with the
//!    screenshot and the acknowledged checks (exactly the pending ones).
//! 5. Answer `ask_user` calls from the operator; append queued guidance
//!    at the end of the turn (rule 19; it does not reset the budget).
//! 6. Stop on a final message, the step or time budget (the last allowed
//!    request cannot start new effects, rule 13), Ctrl-C (between
//!    operations, rule 15) or a denial.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use sandtop_protocol::{Action, BatchRequest, ImageFormat, Screenshot, ScreenshotOptions};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::approve::{self, ActionRequest, CheckRequest, Decision, Operator};
use super::model::Model;
use super::record::{LedgerState, Recorder, externalize, strip_images};
use super::wire::{self, OutputItem, RequestParts, SafetyCheck, ToolShape, Usage};
use crate::channel::{Channel, ChannelError};

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
    pub shape: ToolShape,
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
    pub context: ContextBudget,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The model answered without calling tools.
    Finished,
    /// A safety check was not approved.
    Denied,
    /// The operator refused an action or the screenshot.
    Refused,
    /// `max_steps` requests were made.
    StepBudget,
    /// The wall-clock limit passed.
    TimeBudget,
    /// Ctrl-C.
    Interrupted,
    /// Something broke (model, daemon, unknown outcome).
    Failed,
    /// The model ended its turn without a final answer and without a tool
    /// call: only commentary, an unfinished message, or nothing. The
    /// official SDK's runner rejects such a response; so do we.
    NoFinalAnswer,
}

impl Ending {
    pub fn success(self) -> bool {
        self == Ending::Finished
    }
}

/// Usage over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageTotals {
    pub requests: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// Some completed request reported no usage: the sums are a floor.
    pub incomplete: bool,
}

impl UsageTotals {
    pub fn add(&mut self, usage: Option<Usage>) {
        self.requests += 1;
        match usage {
            Some(u) => {
                self.input_tokens += u.input_tokens;
                self.output_tokens += u.output_tokens;
                self.total_tokens += u.total_tokens;
            }
            None => self.incomplete = true,
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub ending: Ending,
    pub message: String,
    pub steps: u32,
    pub usage: UsageTotals,
    /// Per-step loop overhead (ms): step time minus model, daemon and
    /// operator time.
    pub overhead_ms: Vec<f64>,
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
    /// Screenshots going out with the next request, as (data URL, file),
    /// so the trajectory can refer to the files instead of the data.
    files: Vec<(String, String)>,
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

enum Stop {
    Outcome(Ending, String),
}

/// A placeholder for screenshots dropped from resent history: 1x1 PNG.
const PLACEHOLDER_PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC";

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

/// Applies the context budget to a conversation that is about to be
/// resent: the oldest screenshots beyond the budget are replaced by a 1x1
/// placeholder, so every call keeps its output (the pairing stays intact)
/// and the newest observation is always kept whole.
pub fn apply_budget(items: &mut [Value], budget: ContextBudget) {
    // Positions of image URLs, oldest first: (item, Some(content index)) for
    // message images, (item, None) for computer call outputs.
    let mut slots: Vec<(usize, Option<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let is_data = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .is_some_and(|u| u.starts_with("data:image/"))
        };
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
    let size = |items: &[Value]| serde_json::to_vec(items).map(|v| v.len()).unwrap_or(0);
    let mut images = slots.len();
    for (i, part) in slots {
        if images <= 1 || (images <= budget.max_images && size(items) <= budget.max_bytes) {
            break;
        }
        match part {
            None => items[i]["output"]["image_url"] = json!(PLACEHOLDER_PNG),
            Some(j) => items[i]["content"][j]["image_url"] = json!(PLACEHOLDER_PNG),
        }
        images -= 1;
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
/// and how many ran. The daemon's `message` is the guest's text and never
/// reaches the model, which reads this as a user message.
pub fn failure_note(
    call_id: &str,
    actions: &[Action],
    body: &sandtop_protocol::ErrorBody,
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
    format!(
        "{what} could not be carried out: {} (`{}`). {ran} of its {} action(s) ran before it; \
         the rest did not run.{started} The screenshot shows the screen now.",
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
            recorder,
            opts,
            interrupt,
            last_shot: None,
            deadline: None,
            files: Vec::new(),
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
        let safe: String = what
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .take(48)
            .collect();
        self.recorder
            .save_image(&format!("step-{step:03}-{safe}.{ext}"), &bytes)
    }

    /// Runs the loop from the start (or from `resume`).
    pub async fn run(&mut self, resume: Option<Resume>) -> anyhow::Result<Outcome> {
        let start = Instant::now();
        self.deadline = self.opts.max_duration.map(|d| start + d);
        let mut usage = UsageTotals::default();
        let mut overhead = Vec::new();
        let (mut prev_id, mut step, mut next_input, mut conversation) = match resume {
            Some(r) => (
                r.previous_response_id,
                r.steps_done,
                r.next_input,
                r.conversation,
            ),
            None => {
                let shot = self
                    .screenshot_now()
                    .await
                    .context("the first screenshot")?;
                let file = self.save_shot(0, "initial", &shot)?;
                self.recorder.log(
                    "observation",
                    json!({"step": 0, "file": file, "scale_map": shot.scale_map}),
                )?;
                let url = shot.data_url();
                let first = wire::user_message(&self.opts.task, Some(&url));
                self.files.push((url, file));
                self.last_shot = Some(shot);
                (None, 0, vec![first], Vec::new())
            }
        };
        if self.last_shot.is_none() {
            self.last_shot = Some(self.screenshot_now().await?);
        }
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
                shape: self.opts.shape,
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
            self.recorder.log(
                "request_input",
                json!({"step": step, "items": externalize(&Value::Array(next_input.clone()), &self.files),
                       "previous_response_id": prev_id, "images": images, "bytes": bytes}),
            )?;
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
                    self.recorder
                        .log("model_error", json!({"step": step, "error": msg}))?;
                    return self.finish(Ending::Failed, msg, step, usage, overhead);
                }
            };
            let model_ms = ms(stats.duration);
            // 3. Record it.
            usage.add(resp.usage);
            self.recorder.log(
                "usage",
                json!({"api": "responses", "stage": "request", "reason": "completed",
                       "usage": resp.usage, "call_id": resp.id, "member": "responses.create",
                       "duration_ms": model_ms, "attempts": stats.attempts, "step": step}),
            )?;
            self.recorder.log(
                "response",
                json!({"step": step, "id": resp.id, "status": resp.status,
                       "output": strip_images(&Value::Array(resp.raw_output.clone()))}),
            )?;
            conversation.append(&mut next_input);
            conversation.extend(resp.raw_output.iter().cloned());
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
            // 4-5. The calls.
            let mut waited_ms = 0.0;
            for item in &resp.items {
                let out = match item {
                    OutputItem::ComputerCall {
                        call_id,
                        unfinished: Some(status),
                        ..
                    } => {
                        return self.finish(
                            Ending::Failed,
                            format!("the model's computer call {call_id} is `{status}`, not completed; it was not run"),
                            step,
                            usage,
                            overhead,
                        );
                    }
                    OutputItem::ComputerCall {
                        call_id,
                        actions,
                        pending_safety_checks,
                        unfinished: None,
                    } => {
                        match self
                            .computer_call(step, call_id, actions, pending_safety_checks)
                            .await?
                        {
                            Ok((items, w)) => {
                                waited_ms += w;
                                items
                            }
                            Err(Stop::Outcome(ending, message)) => {
                                return self.finish(ending, message, step, usage, overhead);
                            }
                        }
                    }
                    OutputItem::FunctionCall {
                        call_id,
                        name,
                        arguments,
                    } => {
                        let t = Instant::now();
                        let out = self.function_call(step, call_id, name, arguments)?;
                        waited_ms += ms(t.elapsed());
                        vec![out]
                    }
                    _ => continue,
                };
                for o in &out {
                    self.recorder.log(
                        "call_output",
                        json!({"step": step, "item": externalize(o, &self.files)}),
                    )?;
                }
                next_input.extend(out);
            }
            for g in self.operator.take_guidance() {
                self.recorder
                    .log("guidance", json!({"step": step, "text": g}))?;
                next_input.push(wire::user_message(&g, None));
            }
            self.recorder.sync()?;
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
        self.recorder.log(
            "run_finished",
            json!({"ending": ending, "message": message, "steps": steps, "usage_totals": usage}),
        )?;
        self.recorder.sync()?;
        Ok(Outcome {
            ending,
            message,
            steps,
            usage,
            overhead_ms,
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
            self.recorder.log(
                "ask_user",
                json!({"step": step, "call_id": call_id, "question": question, "answered": answer.is_some()}),
            )?;
            match answer {
                Some(a) => json!({"answer": a}).to_string(),
                None => json!({"error": "the operator declined to answer"}).to_string(),
            }
        } else {
            json!({"error": format!("unknown function `{name}`")}).to_string()
        };
        Ok(wire::function_call_output(call_id, &output))
    }

    /// Handles one computer call. The outer `Result` is for recording
    /// failures; the inner one says whether the run continues.
    async fn computer_call(
        &mut self,
        step: u32,
        call_id: &str,
        raw_actions: &[Value],
        checks: &[SafetyCheck],
    ) -> anyhow::Result<Result<(Vec<Value>, f64), Stop>> {
        // Read the actions (lenient about unknown fields, strict about the rest).
        let mut actions = Vec::with_capacity(raw_actions.len());
        for (i, raw) in raw_actions.iter().enumerate() {
            match Action::from_model_value(raw) {
                Ok(a) => actions.push(a),
                Err(e) => {
                    return Ok(Err(Stop::Outcome(
                        Ending::Failed,
                        format!("computer call {call_id}: action {i}: {e}"),
                    )));
                }
            }
        }
        let mut waited = 0.0;
        // Safety checks: all approved, or nothing runs.
        if !checks.is_empty() {
            let marked = match self.last_shot.as_ref() {
                Some(shot) if shot.format == ImageFormat::Png => {
                    let bytes = base64::engine::general_purpose::STANDARD.decode(&shot.data)?;
                    match approve::mark_targets(&bytes, &actions) {
                        Ok(png) => {
                            let path = approve::marked_path(self.recorder.dir(), step, call_id);
                            let name = path
                                .file_name()
                                .map(|n| n.to_string_lossy().to_string())
                                .unwrap_or_default();
                            self.recorder.save_image(&name, &png).ok().map(|_| path)
                        }
                        Err(_) => None,
                    }
                }
                _ => None,
            };
            let t = Instant::now();
            let decision = blocking(|| {
                self.operator.approve_checks(&CheckRequest {
                    call_id,
                    checks,
                    actions: &actions,
                    marked: marked.as_deref(),
                })
            });
            waited += ms(t.elapsed());
            self.recorder.log(
                "safety_checks",
                json!({"step": step, "call_id": call_id, "checks": checks,
                       "decision": match &decision { Decision::Approve => "approved".to_string(), Decision::Deny(r) => format!("denied: {r}") }}),
            )?;
            if let Decision::Deny(reason) = decision {
                self.recorder.sync()?;
                return Ok(Err(Stop::Outcome(
                    Ending::Denied,
                    format!("safety check not approved ({reason}); nothing was run"),
                )));
            }
        }
        // Run, confirming each action first when asked to.
        let expect = self.last_shot.as_ref().map(|s| s.scale_map);
        self.recorder.ledger(
            step,
            call_id,
            LedgerState::Pending,
            json!({"actions": actions, "expect_scale_map": expect}),
        )?;
        // Daemon (and, with confirmations, operator) time is not loop overhead.
        let t_daemon = Instant::now();
        let result = if self.opts.confirm_actions {
            match self.run_confirmed(step, call_id, &actions, expect).await? {
                Ok(r) => r,
                Err(stop) => return Ok(Err(stop)),
            }
        } else {
            let mut req = BatchRequest::new(actions.clone(), self.opts.screenshot);
            req.expect_scale_map = expect;
            self.send(req).await
        };
        waited += ms(t_daemon.elapsed());
        let shot = match result {
            Ok(shot) => {
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Done,
                    json!({"executed": actions.len()}),
                )?;
                shot
            }
            Err(ChannelError::Daemon { body, .. }) => {
                self.recorder
                    .ledger(step, call_id, LedgerState::Failed, json!({"error": body}))?;
                // Tell the model what ran and show it the screen as it is.
                let shot = match self.screenshot_now().await {
                    Ok(s) => s,
                    Err(e) => {
                        return Ok(Err(Stop::Outcome(
                            Ending::Failed,
                            format!("after a failed action: {e:#}"),
                        )));
                    }
                };
                let file = self.save_shot(step, call_id, &shot)?;
                self.recorder.log("observation", json!({"step": step, "call_id": call_id, "file": file, "scale_map": shot.scale_map}))?;
                let note = failure_note(call_id, &actions, &body);
                let url = shot.data_url();
                let out = wire::computer_call_output(call_id, &url, checks);
                self.files.push((url, file));
                self.last_shot = Some(shot);
                return Ok(Ok((vec![out, wire::user_message(&note, None)], waited)));
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
                let ending = halted.unwrap_or(Ending::Failed);
                return Ok(Err(Stop::Outcome(
                    ending,
                    format!(
                        "computer call {call_id}: {e}; its outcome is recorded as {state:?} (resume with --resume after reconciling)"
                    ),
                )));
            }
        };
        let file = self.save_shot(step, call_id, &shot)?;
        self.recorder.log(
            "observation",
            json!({"step": step, "call_id": call_id, "file": file, "scale_map": shot.scale_map}),
        )?;
        let url = shot.data_url();
        let out = wire::computer_call_output(call_id, &url, checks);
        self.files.push((url, file));
        self.last_shot = Some(shot);
        Ok(Ok((vec![out], waited)))
    }

    /// Sends one batch (with its final screenshot), cancellable.
    async fn send(&mut self, req: BatchRequest) -> Result<Screenshot, ChannelError> {
        let r = tokio::select! {
            r = self.channel.act(&req) => r?,
                        ending = halted(&self.interrupt, self.deadline) => {
                return Err(ChannelError::Http(format!("stopped ({ending:?}) while the actions ran")));
            }
        };
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
            self.recorder.log("confirm", json!({"step": step, "call_id": call_id, "index": i, "approved": d == Decision::Approve}))?;
            if let Decision::Deny(reason) = d {
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Failed,
                    json!({"executed": i, "refused": reason}),
                )?;
                return Ok(Err(Stop::Outcome(
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
            if let Err(e) = r {
                return Ok(Ok(Err(e)));
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
        self.recorder.log("confirm", json!({"step": step, "call_id": call_id, "index": "final_screenshot", "approved": d == Decision::Approve}))?;
        if let Decision::Deny(reason) = d {
            self.recorder.ledger(
                step,
                call_id,
                LedgerState::Failed,
                json!({"executed": actions.len(), "refused": "final screenshot"}),
            )?;
            return Ok(Err(Stop::Outcome(
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
