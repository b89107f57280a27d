//! The calls of one response (docs/contract.md rules 9-12): all checked
//! before any runs ([`Runner::check_response`]; a refused one answers the
//! whole response, or stops the run), every safety check approved, then
//! each call run in the response's order; after a failure the later calls
//! are answered as skipped.

use std::time::Instant;

use serde_json::{Value, json};

use super::{Ending, Executed, Rejected, Runner, SKIPPED, Stop, Work, blocking, ms};
use crate::browser::toolset::Toolset;
use crate::computer::preflight::{self, Checked, Refusal};
use crate::progress::CallState;
use crate::runner::OnActionError;
use sandtop_protocol::Action;
use sandtop_runfolder::items::{self as wire, OutputItem, SafetyCheck};
use sandtop_runfolder::trajectory::Entry;

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
    ) -> Result<Answers, Stop> {
        self.turn_attempted.clear();
        self.turn_completed.clear();
        let work = match self.check_response(resp) {
            Ok(w) => w,
            Err(Rejected::Unfinished(m)) => return Err(Stop::End(Ending::Failed, m)),
            Err(Rejected::Refused(r)) => return self.refused(step, resp, &r),
        };
        let mut waited = self.approve_all(step, &work).await?;
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
                    let (item, ok) = self
                        .browser_call(step, call_id, name, arguments, browser_failed)
                        .await?;
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
                } => {
                    let executed = self.execute(step, call_id, actions, checks).await?;
                    let (items, t, last) = self
                        .answer_executed(call_id, checks, actions, executed, step, &work[n + 1..])
                        .await?;
                    waited += t;
                    out.extend(items);
                    if last {
                        break;
                    }
                }
                Work::Read { call_id, read } => {
                    let executed = self.read(step, call_id, read).await?;
                    let (items, t, last) = self
                        .answer_executed(call_id, &[], &[], executed, step, &work[n + 1..])
                        .await?;
                    waited += t;
                    out.extend(items);
                    if last {
                        break;
                    }
                }
                Work::Function {
                    call_id,
                    name,
                    arguments,
                } => {
                    let t = Instant::now();
                    self.turn_attempted.push(call_id.clone());
                    if name == crate::sign_in::rules::TOOL && self.opts.sign_in {
                        out.push(self.sign_in_call(step, call_id, arguments).await?);
                    } else {
                        out.push(self.function_call(step, call_id, name, arguments)?);
                    }
                    if let Some(ending) = self.halt_reason() {
                        return Err(Stop::End(
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
        Ok(Answers {
            items: out,
            waited_ms: waited,
        })
    }

    /// What a computer call or a read that ran leaves for the model: its
    /// answer; or, when the daemon refused it, the run's end
    /// (`--on-action-error stop`) or the failure reported and the rest of
    /// the response (`later`) skipped: `true`, the turn's last answers.
    async fn answer_executed(
        &mut self,
        call_id: &str,
        checks: &[SafetyCheck],
        actions: &[Action],
        executed: Executed,
        step: u32,
        later: &[Work],
    ) -> Result<(Vec<Value>, f64, bool), Stop> {
        let (body, waited) = match executed {
            Executed::Done(item, t) => return Ok((vec![item], t, false)),
            Executed::Failed { body, waited } => (body, waited),
        };
        self.action_failures += 1;
        if self.opts.on_action_error == OnActionError::Stop {
            return Err(Stop::End(
                Ending::ActionFailed,
                format!(
                    "computer call {call_id}: {}; its outcome is recorded as failed",
                    sandtop_channel::refusal(&body)
                ),
            ));
        }
        let t = Instant::now();
        let items = self
            .report_failure(step, call_id, checks, actions, &body, later)
            .await?;
        Ok((items, waited + ms(t.elapsed()), true))
    }

    pub(super) fn function_call(
        &mut self,
        step: u32,
        call_id: &str,
        name: &str,
        arguments: &str,
    ) -> anyhow::Result<Value> {
        let output = if name == "ask_user" && self.opts.ask_user {
            // Checked before the response ran (`check_response`).
            let question = ask_user_question(arguments).unwrap_or_default();
            let answer = if asks_for_a_credential(&question) {
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
                None if asks_for_a_credential(&question) => json!({"error": if self.opts.sign_in {
                    "ask_user never carries credentials: call request_sign_in, and the operator \
                     enters them into the page without you seeing them"
                } else {
                    "ask_user never carries credentials, and this run offers no sign-in"
                }})
                .to_string(),
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
            crate::browser::toolset::output(
                call_id,
                None,
                Err(crate::browser::toolset::SKIPPED.into()),
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
                        function: false,
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
                } => work.push(
                    match preflight::check_computer_call(
                        call_id,
                        actions,
                        map.as_ref(),
                        self.model.own_actions(),
                    )
                    .map_err(Rejected::Refused)?
                    {
                        // A read carries no safety checks of its own: the
                        // Messages API raises none, and the Responses
                        // vocabulary has no reads.
                        Checked::Read(read) if pending_safety_checks.is_empty() => Work::Read {
                            call_id: call_id.clone(),
                            read,
                        },
                        Checked::Read(_) => {
                            return Err(Rejected::Refused(Refusal {
                                function: false,
                                call_id: call_id.clone(),
                                index: None,
                                code: sandtop_protocol::ErrorCode::InvalidAction,
                                reason: "a read carries pending safety checks".into(),
                            }));
                        }
                        Checked::Actions(actions) => Work::Computer {
                            call_id: call_id.clone(),
                            actions,
                            checks: pending_safety_checks.clone(),
                        },
                    },
                ),
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
                } => {
                    // The seed stops the run on a function the run does not
                    // offer and on `ask_user` arguments that do not parse
                    // (docs/contract.md rule 13b), before anything runs.
                    let refuse = |reason: String| {
                        Rejected::Refused(Refusal {
                            call_id: call_id.clone(),
                            index: None,
                            code: sandtop_protocol::ErrorCode::InvalidAction,
                            reason,
                            function: true,
                        })
                    };
                    if name == "ask_user" && self.opts.ask_user {
                        ask_user_question(arguments).map_err(refuse)?;
                    } else if !(name == crate::sign_in::rules::TOOL && self.opts.sign_in) {
                        return Err(refuse(format!(
                            "{} is not a function this run offers",
                            shown_name(name)
                        )));
                    }
                    work.push(Work::Function {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        arguments: arguments.clone(),
                    })
                }
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
    ) -> Result<Answers, Stop> {
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
            return Err(Stop::End(Ending::ActionFailed, stop));
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
            return Err(Stop::End(
                Ending::ActionFailed,
                format!(
                    "{stop}; the run stops because computer call {c} of that response carries \
                     safety checks nobody approved, which answering it would acknowledge"
                ),
            ));
        }
        let (Some(shot), Some(file)) = (self.last_shot.as_ref(), self.last_file.clone()) else {
            return Err(Stop::End(Ending::ActionFailed, stop));
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
        Ok(Answers {
            items: out,
            waited_ms: 0.0,
        })
    }
}

/// The question of `ask_user`'s arguments: exactly `{"question": string}`,
/// not empty. The error names what is wrong without quoting the model.
fn ask_user_question(arguments: &str) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        question: String,
    }
    let a: Args = serde_json::from_str(arguments).map_err(|e| {
        format!(
            "ask_user's arguments are not {{\"question\": string}} ({})",
            if e.is_syntax() || e.is_eof() {
                "not JSON"
            } else {
                "a missing, unknown or mistyped field"
            }
        )
    })?;
    if a.question.trim().is_empty() {
        return Err("ask_user's question is empty".into());
    }
    Ok(a.question)
}

/// A function name from the model, quoted when it is a plain identifier
/// of a sane length, else described.
fn shown_name(name: &str) -> String {
    if !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        format!("`{name}`")
    } else {
        "the function named in the call".into()
    }
}

/// Whether a question asks the operator for a credential (a password, a
/// one-time code, a key): those never travel through `ask_user`, whose
/// answer the model reads (docs/security.md L14). By words, not a proof:
/// it catches the model's plain request, and the prompt warns the
/// operator besides.
fn asks_for_a_credential(question: &str) -> bool {
    let q = question.to_lowercase();
    let phrase = [
        "password",
        "passwort",
        "contraseña",
        "senha",
        "mot de passe",
        "passcode",
        "passphrase",
        "one-time code",
        "one time code",
        "verification code",
        "security code",
        "two-factor",
        "pin code",
        "api key",
        "secret key",
        "private key",
        "access token",
        "credential",
    ]
    .iter()
    .any(|w| q.contains(w));
    // Short words only as whole words ("otp" is inside "footprint").
    let word = q
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| matches!(w, "otp" | "totp" | "2fa" | "mfa" | "pin"));
    phrase || word
}
