//! One `request_sign_in` call in the loop ([`crate::agent::sign_in`]):
//!
//! 1. the arguments are checked exactly ([`sign_in::parse_request`]): every
//!    field names a page input by its ref;
//! 2. the origin must be inside the URL policy (when there is one) and be
//!    the active tab's origin, read from the browser's state now;
//! 3. the daemon checks every target on that tab (`sign_in_check`: the
//!    document that holds it was loaded from the credential origin, and it
//!    is an input of the field's kind) before anyone is asked, a
//!    `--credentials` file included;
//! 4. the operator answers ([`Operator::sign_in`]): a credentials file
//!    entry, the terminal with echo off, or a refusal;
//! 5. the values go in by the daemon's `sign_in_fill`, which checks
//!    everything again first and types each value into its bound input
//!    with the browser's own key input (never X11 keystrokes to whatever
//!    has the focus: docs/security.md L14);
//! 6. the operator is told which origin got which fields
//!    ([`Operator::signed_in`]: the terminal and the view); the model is
//!    told `submitted`, `declined` or `cancelled`; the trajectory gets the
//!    request's shape and the outcome.
//!
//! A refusal goes back as an error naming what is wrong. Nothing is
//! retried: a failed fill is `cancelled`, and the model may ask again.

use std::time::Instant;

use sandtop_protocol::sign_in::{SignInTarget, SignInValue};
use sandtop_protocol::{BrowserCall, ErrorCode};
use serde_json::json;

use super::{Ending, Runner, Stop, halted};
use crate::approve::{SignInPrompt, SignedIn};
use crate::browser::toolset::{self as tools, url_origin};
use crate::sign_in::rules::{self as sign_in, Answer, Request, Status};
use sandtop_channel::ChannelError;
use sandtop_runfolder::diagnostics::Diagnostic;
use sandtop_runfolder::items as wire;
use sandtop_runfolder::trajectory::Entry;

/// What one request leads to, before it is recorded.
struct Ended {
    status: &'static str,
    output: serde_json::Value,
    source: Option<&'static str>,
    option: Option<String>,
    why: Option<String>,
}

impl Ended {
    fn refused(why: String) -> Ended {
        Ended {
            status: "refused",
            output: json!({"error": format!("request_sign_in refused: {why}")}),
            source: None,
            option: None,
            why: Some(why),
        }
    }

    fn answered(
        status: Status,
        source: Option<&'static str>,
        option: Option<String>,
        why: Option<String>,
    ) -> Ended {
        Ended {
            status: status.as_str(),
            output: sign_in::model_output(status, option.as_deref()),
            source,
            option,
            why,
        }
    }
}

impl Runner<'_> {
    /// Handles one `request_sign_in` call; returns its output item, or how
    /// the run ends (stopped while asking or filling).
    pub(super) async fn sign_in_call(
        &mut self,
        step: u32,
        call_id: &str,
        arguments: &str,
    ) -> Result<serde_json::Value, Stop> {
        let started = Instant::now();
        let (request, ended) = match sign_in::parse_request(arguments) {
            Err(why) => (None, Ok(Ended::refused(why))),
            Ok(req) => {
                let ended = self.sign_in_checked(call_id, &req).await;
                (Some(req), ended)
            }
        };
        let ended = match ended {
            Err(Stop::End(ending, message)) => {
                self.recorder.write(&Entry::SignIn {
                    step,
                    call_id: call_id.to_string(),
                    request: request.as_ref().map(Request::shape),
                    status: "cancelled".into(),
                    source: None,
                    selected_option: None,
                    why: Some(message.clone()),
                })?;
                self.recorder.sync()?;
                return Err(Stop::End(ending, message));
            }
            ended => ended?,
        };
        self.recorder.write(&Entry::SignIn {
            step,
            call_id: call_id.to_string(),
            request: request.as_ref().map(Request::shape),
            status: ended.status.into(),
            source: ended.source.map(str::to_string),
            selected_option: ended.option.clone(),
            why: ended.why.clone(),
        })?;
        self.recorder.sync()?;
        self.diagnose(Diagnostic {
            api: "sign_in".into(),
            stage: "sign_in".into(),
            reason: ended.status.into(),
            call_id: call_id.to_string(),
            member: sign_in::TOOL.into(),
            duration_ms: super::ms(started.elapsed()),
            usage: None,
            daemon_timings: None,
            step,
        });
        Ok(wire::function_call_output(
            call_id,
            &ended.output.to_string(),
        ))
    }

    /// Steps 2-5 for a request whose arguments are valid.
    async fn sign_in_checked(&mut self, call_id: &str, req: &Request) -> Result<Ended, Stop> {
        if let Some(policy) = self.opts.browser.as_ref().and_then(|b| b.url_policy())
            && !policy.origins().contains(&req.origin)
        {
            return Ok(Ended::refused(format!(
                "`credential_origin` {} is outside the operator's URL policy",
                req.origin
            )));
        }
        if self.opts.browser.is_none() {
            return Ok(Ended::refused(
                "this run has no browser tools: sign-in values go only into page inputs the \
                 browser tools bound, never into whatever has the keyboard focus"
                    .into(),
            ));
        }
        // The active tab, now.
        let state = tokio::select! {
            r = self.channel.browser_state() => r,
            ending = halted(&self.interrupt, self.deadline) => {
                return Err(Stop::End(ending, format!("the run stopped during sign-in request {call_id}")));
            }
        };
        let state = match state {
            Ok(s) => s,
            Err(ChannelError::Daemon { body, .. }) => {
                return Ok(Ended::refused(format!(
                    "the active tab's origin cannot be read ({}), so the credential origin cannot be checked",
                    body.code
                )));
            }
            Err(e) => {
                return Err(Stop::End(
                    Ending::Failed,
                    format!(
                        "sign-in request {call_id}: the browser's state could not be read ({e})"
                    ),
                ));
            }
        };
        let Some(active) = state.tabs.iter().find(|t| t.active) else {
            return Ok(Ended::refused("there is no active tab".into()));
        };
        if url_origin(&active.url).as_ref() != Some(&req.origin) {
            return Ok(Ended::refused(format!(
                "`credential_origin` {} is not the origin of the active tab ({})",
                req.origin,
                tools::state_url(&active.url)
            )));
        }
        let tab_id = active.id.clone();
        let origin = req.origin.to_string();
        if !req.fields.is_empty() {
            let check = BrowserCall::SignInCheck {
                tab_id: Some(tab_id.clone()),
                origin: origin.clone(),
                fields: req
                    .fields
                    .iter()
                    .map(|f| SignInTarget {
                        target: f.target.clone(),
                        kind: f.kind,
                    })
                    .collect(),
            };
            match self.sign_in_daemon(call_id, &check).await? {
                Ok(()) => {}
                Err(why) => return Ok(Ended::refused(why)),
            }
        }
        // The operator.
        let answer = super::blocking(|| {
            self.operator.sign_in(&SignInPrompt {
                call_id,
                request: req,
            })
        });
        if let Some(ending) = self.halt_reason() {
            return Err(Stop::End(
                ending,
                format!(
                    "the run stopped while sign-in request {call_id} was answered; nothing was filled"
                ),
            ));
        }
        let (option, values, source) = match answer {
            Answer::Decline { why } => {
                return Ok(Ended::answered(Status::Declined, None, None, Some(why)));
            }
            Answer::Submit {
                option,
                values,
                source,
            } => (option, values, source),
        };
        if let Err(why) = sign_in::check_answer(req, option.as_deref(), &values) {
            return Ok(Ended::answered(
                Status::Declined,
                Some(source),
                None,
                Some(format!("the answer was not usable: {why}")),
            ));
        }
        if values.is_empty() {
            // A method without fields (the site asks for its own next step).
            return Ok(Ended::answered(
                Status::Submitted,
                Some(source),
                option,
                None,
            ));
        }
        let filled_fields: Vec<&sign_in::Field> = values
            .iter()
            .filter_map(|(id, _)| req.fields.iter().find(|f| &f.id == id))
            .collect();
        let fill = BrowserCall::SignInFill {
            tab_id: Some(tab_id),
            origin,
            fields: values
                .into_iter()
                .filter_map(|(id, value)| {
                    let f = req.fields.iter().find(|f| f.id == id)?;
                    Some(SignInValue {
                        target: f.target.clone(),
                        kind: f.kind,
                        value,
                    })
                })
                .collect(),
        };
        // From here on the page may hold the values: no script runs in
        // this session any more (contract rule 41a).
        self.browser.signed_in = true;
        let filled = self.sign_in_daemon(call_id, &fill).await?;
        drop(fill);
        if filled.is_ok() {
            self.operator.signed_in(&SignedIn {
                call_id,
                origin: &req.origin,
                fields: &filled_fields,
                source,
            });
        }
        Ok(match filled {
            Ok(()) => Ended::answered(Status::Submitted, Some(source), option, None),
            Err(why) => Ended::answered(
                Status::Cancelled,
                Some(source),
                None,
                Some(format!("the values could not go in: {why}")),
            ),
        })
    }

    /// Sends a sign-in call to the daemon. `Ok(Err(why))`: refused in the
    /// guest (`why` from the error code, never the guest's text).
    async fn sign_in_daemon(
        &mut self,
        call_id: &str,
        call: &BrowserCall,
    ) -> Result<Result<(), String>, Stop> {
        let r = tokio::select! {
            r = self.channel.browser_call(call) => r,
            ending = halted(&self.interrupt, self.deadline) => {
                return Err(Stop::End(ending, format!("the run stopped during sign-in request {call_id}; what reached the page is unknown")));
            }
        };
        match r {
            Ok(_) => Ok(Ok(())),
            Err(ChannelError::Daemon { body, .. }) if body.code != ErrorCode::Timeout => {
                Ok(Err(sign_in::daemon_refusal(body.code)))
            }
            Err(e) => Err(Stop::End(
                Ending::Failed,
                format!(
                    "sign-in request {call_id}: the daemon did not answer ({e}); what reached the page is unknown"
                ),
            )),
        }
    }
}
