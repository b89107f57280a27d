//! The calls of one response (docs/contract.md rules 9-12): all checked
//! before any runs ([`Runner::check_response`]; a refused one answers the
//! whole response, or stops the run), every safety check approved, then
//! each call run in the response's order; after a failure the later calls
//! are answered as skipped.

use std::time::Instant;

use serde_json::{Value, json};

use super::{Ending, Executed, Rejected, Runner, SKIPPED, StepOutcome, Work, blocking, ms};
use crate::agent::browser::Toolset;
use crate::agent::preflight::{self, Refusal};
use crate::agent::progress::CallState;
use crate::agent::record::Entry;
use crate::agent::runner::OnActionError;
use crate::agent::wire::{self, OutputItem};

/// What answers the calls of one response: the items (the next
/// request's input) and the time spent waiting on the daemon and the
/// operator.
pub(super) struct Answers {
    pub items: Vec<Value>,
    pub waited_ms: f64,
}

impl Runner<'_> {
    /// Handles the tool calls of one response: checks them all, has every
    /// safety check approved, then runs them in order. Returns the items
    /// that answer them and the time spent waiting on the daemon and the
    /// operator, or how the run ends.
    pub(super) async fn turn(
        &mut self,
        step: u32,
        resp: &wire::ModelResponse,
    ) -> anyhow::Result<StepOutcome<Answers>> {
        self.turn_attempted.clear();
        self.turn_completed.clear();
        let work = match self.check_response(resp) {
            Ok(w) => w,
            Err(Rejected::Unfinished(m)) => return Ok(StepOutcome::End(Ending::Failed, m)),
            Err(Rejected::Refused(r)) => return self.refused(step, resp, &r),
        };
        let mut waited = next_or_end!(StepOutcome::from(self.approve_all(step, &work).await?));
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
                    let (item, ok) = next_or_end!(StepOutcome::from(
                        self.browser_call(step, call_id, name, arguments, browser_failed)
                            .await?
                    ));
                    out.push(item);
                    if !ok {
                        browser_failed = true;
                        self.action_failures += 1;
                    }
                    waited += ms(t.elapsed());
                }
                Work::Computer {
                    call_id,
                    actions,
                    checks,
                } => match next_or_end!(self.execute(step, call_id, actions, checks).await?) {
                    Executed::Done(item, t) => {
                        waited += t;
                        out.push(item);
                    }
                    Executed::Failed { body, waited: t } => {
                        waited += t;
                        self.action_failures += 1;
                        if self.opts.on_action_error == OnActionError::Stop {
                            return Ok(StepOutcome::End(
                                Ending::ActionFailed,
                                format!(
                                    "computer call {call_id}: {}; its outcome is recorded as failed",
                                    crate::channel::refusal(&body)
                                ),
                            ));
                        }
                        let t = Instant::now();
                        out.extend(next_or_end!(
                            self.report_failure(
                                step,
                                call_id,
                                checks,
                                actions,
                                &body,
                                &work[n + 1..]
                            )
                            .await?
                        ));
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
                    if name == crate::agent::sign_in::TOOL && self.opts.sign_in {
                        out.push(next_or_end!(StepOutcome::from(
                            self.sign_in_call(step, call_id, arguments).await?
                        )));
                    } else {
                        out.push(self.function_call(step, call_id, name, arguments)?);
                    }
                    if let Some(ending) = self.halt_reason() {
                        return Ok(StepOutcome::End(
                            ending,
                            format!("the run stopped while the operator was asked ({call_id})"),
                        ));
                    }
                    self.turn_completed.push(call_id.clone());
                    self.call_ended(step, call_id, vec![name.clone()], CallState::Answered, 0.0);
                    waited += ms(t.elapsed());
                }
            }
        }
        Ok(StepOutcome::Next(Answers {
            items: out,
            waited_ms: waited,
        }))
    }

    pub(super) fn function_call(
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

    /// What a function call that was not run answers: the browser's own
    /// skipped result for its tools, a plain error for others.
    pub(super) fn skipped_output(&self, call_id: &str, name: &str) -> Value {
        if self.opts.browser.is_some() && Toolset::is_browser_tool(name) {
            crate::agent::browser::output(
                call_id,
                None,
                Err(crate::agent::browser::SKIPPED.into()),
                None,
            )
        } else {
            wire::function_call_output(call_id, &json!({"error": SKIPPED}).to_string())
        }
    }

    /// Checks every call of a response with what the host can know
    /// ([`preflight::check_call`], against the screenshot the model saw),
    /// before any of it runs.
    pub(super) fn check_response(&self, resp: &wire::ModelResponse) -> Result<Vec<Work>, Rejected> {
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
    pub(super) fn refused(
        &mut self,
        step: u32,
        resp: &wire::ModelResponse,
        r: &Refusal,
    ) -> anyhow::Result<StepOutcome<Answers>> {
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
            return Ok(StepOutcome::End(Ending::ActionFailed, stop));
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
            return Ok(StepOutcome::End(
                Ending::ActionFailed,
                format!(
                    "{stop}; the run stops because computer call {c} of that response carries \
                     safety checks nobody approved, which answering it would acknowledge"
                ),
            ));
        }
        let (Some(shot), Some(file)) = (self.last_shot.as_ref(), self.last_file.clone()) else {
            return Ok(StepOutcome::End(Ending::ActionFailed, stop));
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
        Ok(StepOutcome::Next(Answers {
            items: out,
            waited_ms: 0.0,
        }))
    }
}
