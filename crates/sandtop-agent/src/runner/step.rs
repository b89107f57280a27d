//! The loop (docs/contract.md rules 5-8 and 13): the start (the task with
//! the first screenshot, or a resumed conversation), then one step after
//! another until one ends the run: a budget spent or an interruption
//! before the request, the model's answer with no calls (or a failure),
//! or how the calls of its response ended ([`Runner::turn`]). Each of
//! these is a [`Stop`] that `?` brings back to [`Runner::run`].

use std::time::Instant;

use anyhow::Context as _;
use serde_json::Value;

use super::{
    Compaction, Ending, Outcome, Resume, Runner, StepReport, Stop, UsageTotals, apply_budget,
    array, forget_old_images, halted, input_cost, ms, turn::Answers, turn_end,
};
use crate::browser::toolset::Toolset;
use crate::model::CallStats;
use crate::model::openai::RequestParts;
use crate::progress::Event;
use sandtop_runfolder::diagnostics::Diagnostic;
use sandtop_runfolder::items::{self as wire, OutputItem};
use sandtop_runfolder::trajectory::{Entry, UsageRecord, externalize, strip_images};

/// Where the loop stands between two steps.
pub(super) struct LoopState {
    /// The response the next request follows (when the server stores the
    /// conversation).
    pub(super) prev_id: Option<String>,
    /// Requests sent so far.
    pub(super) step: u32,
    /// What the next request adds to the conversation.
    pub(super) next_input: Vec<Value>,
    /// What was said before `next_input` (resent when the server does not
    /// store it).
    pub(super) conversation: Vec<Value>,
    /// The browser's tools (and sign-in's) offered with every request.
    pub(super) browser_tools: Vec<Value>,
    pub(super) usage: UsageTotals,
    /// Each step's time that was neither the model's nor the daemon's.
    pub(super) overhead: Vec<f64>,
    /// Compaction is asked for (`--compaction auto`, until the model
    /// refused it).
    pub(super) compacting: bool,
}

impl Runner<'_> {
    /// Runs the loop from the start (or from `resume`).
    pub async fn run(&mut self, resume: Option<Resume>) -> anyhow::Result<Outcome> {
        let mut st = self.begin(resume).await?;
        let stop = loop {
            self.operator_turn(&mut st).await?;
            if let Err(stop) = self.budget_left(st.step) {
                break stop;
            }
            if let Err(stop) = self.step(&mut st).await {
                break stop;
            }
        };
        match stop {
            Stop::End(ending, message) => {
                self.finish(ending, message, st.step, st.usage, st.overhead)
            }
            Stop::Error(e) => Err(e),
        }
    }

    /// The state before the first step: the task (with the first
    /// screenshot, unless the model starts from the browser or asks for
    /// one), or the resumed conversation; the browser started.
    async fn begin(&mut self, resume: Option<Resume>) -> anyhow::Result<LoopState> {
        self.deadline = self.opts.max_duration.map(|d| Instant::now() + d);
        // A prompt open when the run stops closes at once.
        {
            let (interrupt, deadline) = (self.interrupt.clone(), self.deadline);
            self.operator.on_stop(std::sync::Arc::new(move || {
                interrupt.is_set() || deadline.is_some_and(|d| Instant::now() >= d)
            }));
        }
        let (prev_id, step, next_input, conversation) = match resume {
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
            browser_tools.push(crate::sign_in::rules::tool());
        }
        self.progress.emit(&Event::Started {
            max_steps: self.opts.max_steps,
            steps_done: step,
        });
        Ok(LoopState {
            prev_id,
            step,
            next_input,
            conversation,
            browser_tools,
            usage: UsageTotals::default(),
            overhead: Vec::new(),
            compacting: self.opts.compaction == Compaction::Auto,
        })
    }

    /// What ends the run before another request: an interruption, the
    /// step budget, the time budget.
    fn budget_left(&self, step: u32) -> Result<(), Stop> {
        if self.interrupt.is_set() {
            Err(Stop::End(
                Ending::Interrupted,
                "interrupted (Ctrl-C)".into(),
            ))
        } else if step >= self.opts.max_steps {
            Err(Stop::End(
                Ending::StepBudget,
                format!(
                    "the step budget ({} requests) is spent",
                    self.opts.max_steps
                ),
            ))
        } else if self.deadline_passed() {
            Err(Stop::End(
                Ending::TimeBudget,
                "the time budget is spent".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// One step: the request, the model's response recorded, then its
    /// calls; their outputs (and the operator's guidance) are the next
    /// request's input.
    async fn step(&mut self, st: &mut LoopState) -> Result<(), Stop> {
        let t_step = Instant::now();
        let (resp, stats) = self.ask_model(st).await?;
        let model_ms = ms(stats.duration);
        let calls = self.take_response(st, &resp, model_ms, stats.attempts)?;
        if calls == 0 {
            self.recorder.sync()?;
            st.overhead.push((ms(t_step.elapsed()) - model_ms).max(0.0));
            return Err(turn_end(&resp));
        }
        if st.step >= self.opts.max_steps {
            // Rule 13: the last allowed request cannot start effects.
            return Err(Stop::End(
                Ending::StepBudget,
                format!(
                    "the step budget ({} requests) is spent; {calls} tool call(s) of the last response were not run",
                    self.opts.max_steps
                ),
            ));
        }
        // 4-6. The calls: all checked, all approved, then run.
        self.tell(|s| s.phase(sandtop_control::wire::Phase::Calls));
        // The questions closed meanwhile are recorded whether the calls
        // went on or ended the run (not when they failed).
        let Answers { items, waited_ms } = match self.turn(st.step, &resp).await {
            Err(Stop::Error(e)) => return Err(Stop::Error(e)),
            turn => {
                self.record_answers(st.step)?;
                turn?
            }
        };
        for o in &items {
            self.recorder.write(&Entry::CallOutput {
                step: st.step,
                item: externalize(o, &self.files),
            })?;
        }
        st.next_input.extend(items);
        for g in self.operator.take_guidance() {
            self.recorder.write(&Entry::Guidance {
                step: st.step,
                text: g.clone(),
            })?;
            st.next_input.push(wire::user_message(&g, None));
        }
        self.recorder.sync()?;
        self.end_step();
        st.overhead
            .push((ms(t_step.elapsed()) - model_ms - waited_ms).max(0.0));
        Ok(())
    }

    /// Steps 1-2: the request (recorded before it is sent), and the model's
    /// answer, cut short by an interruption or the time budget.
    async fn ask_model(
        &mut self,
        st: &mut LoopState,
    ) -> Result<(wire::ModelResponse, CallStats), Stop> {
        let mut input = self.request_input(st);
        let (images, bytes) = input_cost(&input);
        st.step += 1;
        let step = st.step;
        self.tell(|s| {
            s.step(step);
            s.phase(sandtop_control::wire::Phase::Model);
        });
        self.recorder.write(&Entry::RequestInput {
            step,
            items: array(externalize(
                &Value::Array(st.next_input.clone()),
                &self.files,
            )),
            previous_response_id: st.prev_id.clone(),
            images,
            bytes,
        })?;
        self.files.clear();
        loop {
            let body = self.request_body(st, &input);
            let reply = tokio::select! {
                r = self.model.create(&body) => r,
                ending = halted(&self.interrupt, self.deadline) => {
                    let why = match ending {
                        Ending::TimeBudget => "the time budget ran out while the model was answering",
                        _ => "interrupted while the model was answering",
                    };
                    return Err(Stop::End(ending, why.into()));
                }
            };
            match reply {
                Ok(r) => return Ok(r),
                // A model without compaction: the same request again
                // without it (nothing ran in between), and the local
                // context budget from now on.
                Err(e) if st.compacting && e.refuses_compaction() => {
                    tracing::warn!(
                        "the model refuses context_management compaction; using the local context budget"
                    );
                    st.compacting = false;
                    input = self.request_input(st);
                    self.diagnose(Diagnostic {
                        api: "responses".into(),
                        stage: "request".into(),
                        reason: "compaction_unsupported".into(),
                        call_id: String::new(),
                        member: "responses.create".into(),
                        duration_ms: 0.0,
                        usage: None,
                        daemon_timings: None,
                        step,
                    });
                }
                Err(e) => {
                    let msg = format!("{e}");
                    self.recorder.write(&Entry::ModelError {
                        step,
                        error: msg.clone(),
                    })?;
                    return Err(Stop::End(Ending::Failed, msg));
                }
            }
        }
    }

    /// The input of the next request: the new items when the server
    /// stores the conversation; else the whole conversation, from the
    /// newest compaction item on while compacting, within the local
    /// context budget otherwise (never both: the seed).
    fn request_input(&self, st: &LoopState) -> Vec<Value> {
        if self.opts.store {
            return st.next_input.clone();
        }
        let mut all = st.conversation.clone();
        all.extend(st.next_input.iter().cloned());
        if st.compacting {
            wire::compacted_window(&all)
        } else {
            apply_budget(&mut all, self.opts.context);
            all
        }
    }

    /// The next request's body.
    fn request_body(&self, st: &LoopState, input: &[Value]) -> Value {
        crate::model::openai::create_request(&RequestParts {
            model: &self.opts.model,
            shape: self.opts.computer.then_some(self.opts.shape),
            browser: &st.browser_tools,
            display: self
                .last_shot
                .as_ref()
                .map(|s| sandtop_protocol::Size::new(s.width, s.height))
                .unwrap_or(sandtop_protocol::Size::new(1280, 800)),
            instructions: self.opts.instructions.as_deref(),
            input,
            previous_response_id: if self.opts.store {
                st.prev_id.as_deref()
            } else {
                None
            },
            store: self.opts.store,
            stream: self.opts.stream,
            ask_user: self.opts.ask_user,
            compaction: st.compacting,
        })
    }

    /// Step 3: the response recorded (usage, diagnostics, the trajectory) and
    /// added to the conversation; a failed response ends the run.
    /// Returns how many tool calls it holds.
    fn take_response(
        &mut self,
        st: &mut LoopState,
        resp: &wire::ModelResponse,
        model_ms: f64,
        attempts: u32,
    ) -> Result<usize, Stop> {
        let step = st.step;
        self.report = Some(StepReport {
            step,
            model_ms,
            calls: Vec::new(),
        });
        st.usage.add(resp.usage);
        self.tell_usage(step, &st.usage);
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
            attempts,
            step,
        }))?;
        self.recorder.write(&Entry::Response {
            step,
            id: resp.id.clone(),
            status: resp.status.clone(),
            output: array(strip_images(&Value::Array(resp.raw_output.clone()))),
        })?;
        st.conversation.append(&mut st.next_input);
        st.conversation.extend(resp.raw_output.iter().cloned());
        if st.compacting {
            // Only the compacted window is ever resent; the trajectory
            // keeps everything. Images stay as they came (no local budget).
            st.conversation = wire::compacted_window(&st.conversation);
        } else {
            forget_old_images(&mut st.conversation, self.opts.context.max_images);
        }
        st.prev_id = Some(resp.id.clone());
        if let Some(p) = &resp.problem
            && resp.status == "failed"
        {
            return Err(Stop::End(Ending::Failed, format!("the model failed: {p}")));
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
            attempts,
            calls,
            usage: resp.usage,
        });
        Ok(calls)
    }
}
