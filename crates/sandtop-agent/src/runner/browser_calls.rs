//! One browser call in the loop, in the order of the seed's toolset:
//!
//! 1. a member that is not enabled is refused, before any state is read or
//!    consent asked;
//! 2. a read named by `--confirm-reads` is asked about first; a refusal
//!    returns the fixed refusal and reads nothing (no content, title or
//!    URL);
//! 3. the state is read (mandatory: a failure stops the run);
//! 4. a call after a failed browser call of the same response is answered
//!    as skipped;
//! 5. the arguments are checked, and a URL against the URL policy, before
//!    any question; so is the tab a member acts on: its origin in the
//!    state must be in the URL policy (a redirect or the page's own
//!    navigation may have left it), else the call is refused unasked;
//!    and so is `run_script` once sign-in values went to a page in this
//!    run (contract rule 41a);
//! 6. a state-changing member runs only after the operator approved it,
//!    shown with the state before and its target as it is now: read again
//!    just before asking (`describe_target`), and refused unasked as
//!    changed when the last read the model saw named it with another role
//!    or label; the role and label shown go with the
//!    call, and the daemon refuses it as stale if they changed meanwhile;
//!    the call is bound to the page it was approved on too
//!    (`expect_page`): the tab (the active one of the state shown, for
//!    `tab_id: null`), and for the members no ref binds (points, keys, the
//!    whole page: `Toolset::binds_document`) its document read just before
//!    asking (`describe_page`), and for `hold_keys` the focus: the daemon
//!    refuses the call as stale if any changed;
//! 7. the daemon carries it out (ledger `pending` first for a
//!    state-changing member), re-resolving the target on the current page
//!    and checking the URL policy (sent with the call) in the document it
//!    acts on, at execution (`out_of_policy`: nothing done there);
//! 8. the result is validated for its member, and the state after it (also
//!    after a failure) goes back with it; an invalid result (a read report
//!    that fails validation, the wrong outcome kind for the member) stops
//!    the run (contract rule 13c), a state-changing call's effect recorded
//!    as unknown.
//!
//! What anyone is told of a failure comes from the daemon's error code,
//! never from its message (the guest's text). Diagnostics carry the
//! member, call id, stage, reason and duration, never page text,
//! arguments or images.

use std::time::Instant;

use anyhow::Context as _;
use base64::Engine as _;
use sandtop_protocol::browser::{ExpectedPage, ExpectedTarget, PageIdentity};
use sandtop_protocol::{BrowserCall, BrowserOutcome, ErrorCode};
use serde_json::{Value, json};

use super::{Ending, Runner, Stop, halted, ms, safe_name};
use crate::approve::{BrowserRequest, Decision};
use crate::browser::toolset::{self as tools, Toolset};
use crate::progress::CallState;
use sandtop_channel::ChannelError;
use sandtop_runfolder::diagnostics::Diagnostic;
use sandtop_runfolder::trajectory::{Entry, LedgerState};

impl Runner<'_> {
    /// Reads the browser's state once before the first request: starts
    /// the guest's browser, and fails the run early when there is none.
    pub(super) async fn browser_ready(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        let r = tokio::select! {
            r = self.channel.browser_state() => r,
            ending = halted(&self.interrupt, self.deadline) => {
                anyhow::bail!("stopped ({ending:?}) while the browser started")
            }
        };
        match r {
            Ok(state) => {
                tools::project_state(&state)
                    .map_err(anyhow::Error::msg)
                    .context("the browser's first state")?;
                tracing::debug!("the browser answered in {:.0} ms", ms(t.elapsed()));
                Ok(())
            }
            Err(ChannelError::Daemon { body, .. }) => anyhow::bail!(
                "the guest's browser driver is not available ({}): {}",
                body.code,
                match body.code {
                    ErrorCode::BrowserUnavailable =>
                        "the guest's sandtopd runs without --browser, or Firefox did not start",
                    _ => tools::error_text(body.code),
                }
            ),
            Err(e) => Err(e).context("reading the browser's state"),
        }
    }

    pub(super) fn browser_diagnostic(
        &mut self,
        step: u32,
        call_id: &str,
        member: &str,
        stage: &str,
        reason: &str,
        started: Instant,
    ) {
        self.diagnose(Diagnostic {
            api: "browser".into(),
            stage: stage.into(),
            reason: reason.into(),
            call_id: call_id.to_string(),
            member: member.to_string(),
            duration_ms: ms(started.elapsed()),
            usage: None,
            daemon_timings: None,
            step,
        });
    }

    /// Asks the operator about one browser call; records the decision.
    /// `Err` when the run stopped during the question.
    pub(super) fn ask_browser(
        &mut self,
        step: u32,
        call_id: &str,
        member: &'static str,
        read: bool,
        description: &str,
    ) -> Result<bool, Stop> {
        let started = Instant::now();
        let scripted = self.model.scripted();
        let decision = super::blocking(|| {
            self.operator.confirm_browser(&BrowserRequest {
                call_id,
                member,
                read,
                description,
                scripted,
            })
        });
        self.recorder.write(&Entry::BrowserApproval {
            step,
            call_id: call_id.to_string(),
            member: member.to_string(),
            read,
            decision: match &decision {
                Decision::Approve => "approved".into(),
                Decision::Deny(r) => format!("refused: {r}"),
            },
            by: self.decided_by(),
        })?;
        if let Some(ending) = self.halt_reason() {
            self.browser_diagnostic(step, call_id, member, "approval", "cancelled", started);
            self.recorder.sync()?;
            return Err(Stop::End(
                ending,
                format!(
                    "the run stopped while browser call {call_id} awaited approval; it did not run"
                ),
            ));
        }
        let approved = decision == Decision::Approve;
        self.browser_diagnostic(
            step,
            call_id,
            member,
            "approval",
            if approved { "completed" } else { "refused" },
            started,
        );
        Ok(approved)
    }

    /// The tabs now, as the model may see them. Mandatory: when it cannot
    /// be read, the run stops.
    pub(super) async fn browser_state_now(&mut self, call_id: &str) -> Result<Value, Stop> {
        let r = tokio::select! {
            r = self.channel.browser_state() => r,
            ending = halted(&self.interrupt, self.deadline) => {
                return Err(Stop::End(ending, format!("the run stopped while the browser's state was read (browser call {call_id})")));
            }
        };
        let failed = |why: String| {
            Stop::End(
                Ending::Failed,
                format!("browser call {call_id}: the browser's state could not be read ({why})"),
            )
        };
        match r {
            Ok(state) => tools::project_state(&state).map_err(failed),
            Err(ChannelError::Daemon { body, .. }) => Err(failed(body.code.to_string())),
            Err(e) => Err(failed(e.to_string())),
        }
    }

    /// Carries out one browser call (see the module's steps). `skip`: an
    /// earlier browser call of this response did not succeed.
    pub(super) async fn browser_call(
        &mut self,
        step: u32,
        call_id: &str,
        name: &str,
        arguments: &str,
        skip: bool,
    ) -> Result<(Value, bool), Stop> {
        let Some(toolset) = self.opts.browser.clone() else {
            return Err(Stop::Error(anyhow::anyhow!(
                "a browser call without a browser toolset"
            )));
        };
        let started = Instant::now();
        self.turn_attempted.push(call_id.to_string());
        let kinds = vec![name.to_string()];
        // 1. Not enabled: refused before anything is read or asked.
        let Some(member) = toolset.enabled(name) else {
            self.browser_diagnostic(step, call_id, name, "arguments", "invalid_input", started);
            self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
            let out = tools::output(call_id, None, Err(tools::DISABLED.into()), None);
            return Ok((out, false));
        };
        // 2. A read to confirm: asked before anything of the page is read.
        if toolset.needs_read_approval(member) {
            let refused = || tools::output(call_id, None, Err(tools::READ_REFUSED.into()), None);
            if skip {
                self.show_call(step, call_id, kinds, CallState::Skipped, 0.0);
                return Ok((refused(), false));
            }
            let prepared = match toolset.prepare(name, arguments) {
                Ok(p) => p,
                Err(_) => {
                    self.browser_diagnostic(
                        step,
                        call_id,
                        member,
                        "arguments",
                        "invalid_input",
                        started,
                    );
                    self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                    return Ok((refused(), false));
                }
            };
            let description = tools::prompt(&prepared, &Value::Null, None);
            if !self.ask_browser(step, call_id, member, true, &description)? {
                self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                return Ok((refused(), false));
            }
        }
        // 3. The state before (mandatory).
        let before = self.browser_state_now(call_id).await?;
        // 4. After a failure in this response: skipped.
        if skip {
            self.show_call(step, call_id, kinds, CallState::Skipped, 0.0);
            let out = tools::output(call_id, Some(before), Err(tools::SKIPPED.into()), None);
            return Ok((out, false));
        }
        // 5. The arguments, and a URL against the policy, before any question.
        let prepared = match toolset.prepare(name, arguments) {
            Ok(p) => p,
            Err(e) => {
                let stage = if e == tools::NAVIGATION_REFUSED {
                    ("approval", "refused")
                } else {
                    ("arguments", "invalid_input")
                };
                self.browser_diagnostic(step, call_id, member, stage.0, stage.1, started);
                self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                return Ok((tools::output(call_id, Some(before), Err(e), None), false));
            }
        };
        // The file members: their grant, confirmation and transfer.
        if prepared.file.is_some() {
            return self
                .file_call(step, call_id, member, &prepared, before, kinds, started)
                .await;
        }
        // 5a. A script after a sign-in: refused before any question.
        if member == "run_script" && self.browser.signed_in {
            self.browser_diagnostic(step, call_id, member, "approval", "refused", started);
            self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
            let out = tools::output(
                call_id,
                Some(before),
                Err(tools::SCRIPT_AFTER_SIGN_IN.into()),
                None,
            );
            return Ok((out, false));
        }
        // 5b. A page outside the URL policy: refused before any question.
        if Toolset::acts_on_page(member)
            && !toolset.page_allowed(
                &before,
                prepared.call.as_ref().and_then(BrowserCall::tab_id),
            )
        {
            self.browser_diagnostic(step, call_id, member, "approval", "out_of_policy", started);
            self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
            let out = tools::output(
                call_id,
                Some(before),
                Err(tools::OUT_OF_POLICY.into()),
                None,
            );
            return Ok((out, false));
        }
        // 6. Approval of a state-changing member, its target read again
        // right before asking.
        let changes = Toolset::needs_approval(member);
        let mut expect = None;
        // The page the approval is bound to: the tab it
        // acts on as the operator is shown it, and for the members no ref
        // binds, its document (and the focus) read just before asking.
        let mut expect_page = prepared.call.as_ref().and_then(|call| {
            Toolset::approved_tab(member, call, &before).map(|tab_id| ExpectedPage {
                tab_id,
                document: None,
                focus: None,
            })
        });
        if let Some(page) = expect_page.as_mut()
            && Toolset::binds_document(member)
        {
            match self.describe_page(call_id, &toolset, &page.tab_id).await? {
                Err(text) => {
                    self.browser_diagnostic(
                        step,
                        call_id,
                        member,
                        "approval",
                        "stale_target",
                        started,
                    );
                    self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                    let out = tools::output(call_id, Some(before), Err(text), None);
                    return Ok((out, false));
                }
                Ok(now) => {
                    page.document = Some(now.document);
                    if Toolset::binds_focus(member) {
                        page.focus = Some(now.focus);
                    }
                }
            }
        }
        if changes {
            let mut shown = None;
            if let Some(target) = prepared.arguments.get("target").and_then(Value::as_str) {
                // The tab as approved (the active one of the state shown).
                let tab_id = expect_page
                    .as_ref()
                    .map(|p| p.tab_id.as_str())
                    .or_else(|| prepared.call.as_ref().and_then(BrowserCall::tab_id));
                match self
                    .describe_target(call_id, &toolset, tab_id, target)
                    .await?
                {
                    Err(text) => {
                        self.browser_diagnostic(
                            step,
                            call_id,
                            member,
                            "approval",
                            "stale_target",
                            started,
                        );
                        self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                        let out = tools::output(call_id, Some(before), Err(text), None);
                        return Ok((out, false));
                    }
                    Ok(el) => {
                        expect = serde_json::from_value::<ExpectedTarget>(
                            json!({"role": el["role"], "label": el["label"]}),
                        )
                        .ok();
                        shown = Some(json!({"elements": [el]}));
                    }
                }
            }
            let description = tools::prompt(&prepared, &before, shown.as_ref());
            if !self.ask_browser(step, call_id, member, false, &description)? {
                self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                let out = tools::output(
                    call_id,
                    Some(before),
                    Err(tools::ACTION_REFUSED.into()),
                    None,
                );
                return Ok((out, false));
            }
        }
        // 7. The call. list_tabs is the state itself.
        let Some(call) = prepared.call else {
            self.turn_completed.push(call_id.to_string());
            self.browser_diagnostic(step, call_id, member, "action", "completed", started);
            self.show_call(step, call_id, kinds, CallState::Done, 0.0);
            return Ok((
                tools::output(call_id, Some(before), Ok(Value::Null), None),
                true,
            ));
        };
        self.run_browser_call(
            step,
            call_id,
            member,
            &call,
            changes,
            kinds,
            (expect, expect_page),
        )
        .await
    }

    /// The page `tab_id` shows now: `Ok(Ok(page))`, or
    /// `Ok(Err(text))` for the model when the tab is gone; `Err` when the
    /// run ends (an invalid answer stops it, rule 13c).
    async fn describe_page(
        &mut self,
        call_id: &str,
        toolset: &Toolset,
        tab_id: &str,
    ) -> Result<Result<PageIdentity, String>, Stop> {
        let request = toolset.request(BrowserCall::DescribePage {
            tab_id: Some(tab_id.to_string()),
        });
        let r = tokio::select! {
            r = self.channel.browser_request(&request) => r,
            ending = halted(&self.interrupt, self.deadline) => {
                return Err(Stop::End(ending, format!("the run stopped while the page of browser call {call_id} was read")));
            }
        };
        match r {
            Ok(reply) => match reply.outcome {
                BrowserOutcome::Page(page)
                    if page.tab_id == tab_id
                        && !page.document.is_empty()
                        && page.document.len() <= sandtop_protocol::limits::MAX_REF_BYTES
                        && !page.focus.is_empty()
                        && page.focus.len() <= sandtop_protocol::limits::MAX_REF_BYTES =>
                {
                    Ok(Ok(page))
                }
                _ => Err(Stop::End(
                    Ending::Failed,
                    format!(
                        "browser call {call_id}: the browser's read of its page is invalid; the run stops before the call"
                    ),
                )),
            },
            Err(ChannelError::Daemon { body, .. }) => Ok(Err(match body.code {
                ErrorCode::NoSuchTab => tools::PAGE_CHANGED.into(),
                code => tools::error_text(code).into(),
            })),
            Err(e) => Err(Stop::End(
                Ending::Failed,
                format!("browser call {call_id}: its page could not be read ({e})"),
            )),
        }
    }

    /// The call's target read again now, in the tab's current document:
    /// `Ok(Ok(element))` to show the operator, or
    /// `Ok(Err(text))` for the model when it is stale or changed since the
    /// last read the model saw; `Err` when the run ends (an invalid answer
    /// stops it).
    async fn describe_target(
        &mut self,
        call_id: &str,
        toolset: &Toolset,
        tab_id: Option<&str>,
        target: &str,
    ) -> Result<Result<Value, String>, Stop> {
        let request = toolset.request(BrowserCall::DescribeTarget {
            tab_id: tab_id.map(str::to_string),
            target: target.to_string(),
        });
        let r = tokio::select! {
            r = self.channel.browser_request(&request) => r,
            ending = halted(&self.interrupt, self.deadline) => {
                return Err(Stop::End(ending, format!("the run stopped while the target of browser call {call_id} was read")));
            }
        };
        // An invalid answer (the wrong outcome kind, a read report that
        // fails validation or lacks the target) stops the run, as any
        // invalid browser result does; nothing was done yet.
        let invalid = || {
            Err(Stop::End(
                Ending::Failed,
                format!(
                    "browser call {call_id}: the browser's read of its target is invalid; the run stops before the call"
                ),
            ))
        };
        match r {
            Ok(reply) => match &reply.outcome {
                BrowserOutcome::Read(read) => {
                    match tools::current_target(read, target, self.browser.last_read.as_ref()) {
                        Err(e) if e != tools::TARGET_CHANGED => invalid(),
                        answer => Ok(answer),
                    }
                }
                _ => invalid(),
            },
            Err(ChannelError::Daemon { body, .. }) => Ok(Err(tools::error_text(body.code).into())),
            Err(e) => Err(Stop::End(
                Ending::Failed,
                format!("browser call {call_id}: its target could not be read again ({e})"),
            )),
        }
    }

    /// Sends one approved call (with the target's role and label, and the
    /// page, as approved: `expect`) and answers it with its result and
    /// the state after it.
    #[allow(clippy::too_many_arguments)]
    async fn run_browser_call(
        &mut self,
        step: u32,
        call_id: &str,
        member: &'static str,
        call: &BrowserCall,
        changes: bool,
        kinds: Vec<String>,
        (expect, expect_page): (Option<ExpectedTarget>, Option<ExpectedPage>),
    ) -> Result<(Value, bool), Stop> {
        if changes {
            self.recorder.ledger(
                step,
                call_id,
                LedgerState::Pending,
                json!({"browser_member": member}),
            )?;
        }
        let mut request = match &self.opts.browser {
            Some(toolset) => toolset.request(call.clone()),
            None => sandtop_protocol::BrowserRequest::plain(call.clone()),
        };
        request.expect = expect;
        request.expect_page = expect_page;
        let t = Instant::now();
        let r = tokio::select! {
            r = self.channel.browser_request(&request) => r,
            ending = halted(&self.interrupt, self.deadline) => {
                Err(ChannelError::Http(format!("stopped ({ending:?}) while the browser call ran")))
            }
        };
        let daemon_ms = ms(t.elapsed());
        let (result, after, image) = match r {
            Ok(reply) => {
                let after = match tools::project_state(&reply.state) {
                    Ok(s) => s,
                    Err(e) => {
                        if changes {
                            self.recorder.ledger(
                                step,
                                call_id,
                                LedgerState::Unknown,
                                json!({"error": "the state after the call is invalid"}),
                            )?;
                        }
                        self.show_call(step, call_id, kinds, CallState::Unknown, daemon_ms);
                        return Err(Stop::End(
                            Ending::Failed,
                            format!(
                                "browser call {call_id}: {e} (after the call; its effect is recorded as unknown)"
                            ),
                        ));
                    }
                };
                let result = match tools::result_of(member, &reply.outcome) {
                    Ok(r) => r,
                    Err(e) => {
                        // An invalid result (a read report that fails
                        // validation, the wrong outcome kind for the
                        // member) stops the run (seed: an invalid result
                        // or state stops it); what a state-changing call
                        // did is unknown.
                        let state = if changes {
                            LedgerState::Unknown
                        } else {
                            LedgerState::Failed
                        };
                        if changes {
                            self.recorder.ledger(
                                step,
                                call_id,
                                state,
                                json!({"error": "the browser's result is invalid"}),
                            )?;
                        }
                        self.browser_diagnostic(
                            step,
                            call_id,
                            member,
                            "action",
                            "invalid_result",
                            t,
                        );
                        self.show_call(
                            step,
                            call_id,
                            kinds,
                            if changes {
                                CallState::Unknown
                            } else {
                                CallState::Failed
                            },
                            daemon_ms,
                        );
                        return Err(Stop::End(
                            Ending::Failed,
                            format!(
                                "browser call {call_id} ({member}): the browser's result is invalid ({e}); the run stops, its outcome is recorded as {state:?}"
                            ),
                        ));
                    }
                };
                let image = match &reply.outcome {
                    BrowserOutcome::Image(i) => Some(i.clone()),
                    _ => None,
                };
                (Ok(result), after, image)
            }
            Err(ChannelError::Daemon { body, .. }) if body.code != ErrorCode::Timeout => {
                // Refused or failed in the guest: nothing, or not all, of it
                // happened; the model reads the state after it.
                if changes {
                    self.recorder.ledger(
                        step,
                        call_id,
                        LedgerState::Failed,
                        json!({"error": body}),
                    )?;
                }
                let after = self.browser_state_now(call_id).await?;
                let reason = match body.code {
                    ErrorCode::StaleTarget => "stale_target",
                    ErrorCode::OutOfPolicy => "out_of_policy",
                    _ => "driver_failed",
                };
                self.browser_diagnostic(step, call_id, member, "action", reason, t);
                self.show_call(step, call_id, kinds, CallState::Failed, daemon_ms);
                let out = tools::output(
                    call_id,
                    Some(after),
                    Err(tools::error_text(body.code).into()),
                    None,
                );
                return Ok((out, false));
            }
            Err(e) => {
                // No answer, or the daemon's deadline: the outcome is
                // unknown, and only the guest can tell.
                let ending = self.halt_reason().unwrap_or(Ending::Failed);
                let state = if changes {
                    LedgerState::Unknown
                } else {
                    LedgerState::Failed
                };
                if changes {
                    self.recorder
                        .ledger(step, call_id, state, json!({"error": e.to_string()}))?;
                }
                self.browser_diagnostic(step, call_id, member, "action", "unknown", t);
                let shown = if changes {
                    CallState::Unknown
                } else {
                    CallState::Failed
                };
                self.show_call(step, call_id, kinds, shown, daemon_ms);
                return Err(Stop::End(
                    ending,
                    format!(
                        "browser call {call_id} ({member}): {e}; its outcome is recorded as {state:?}"
                    ),
                ));
            }
        };
        let ok = result.is_ok();
        if changes {
            self.recorder.ledger(
                step,
                call_id,
                if ok {
                    LedgerState::Done
                } else {
                    LedgerState::Failed
                },
                json!({"browser_member": member}),
            )?;
        }
        if ok && matches!(member, "read_page" | "find") {
            self.browser.last_read = result.as_ref().ok().cloned();
        }
        if ok {
            self.turn_completed.push(call_id.to_string());
        }
        self.browser_diagnostic(
            step,
            call_id,
            member,
            "action",
            if ok { "completed" } else { "driver_failed" },
            t,
        );
        self.show_call(
            step,
            call_id,
            kinds,
            if ok {
                CallState::Done
            } else {
                CallState::Failed
            },
            daemon_ms,
        );
        let out = tools::output(call_id, Some(after), result, image.as_ref());
        if let Some(img) = &image {
            // The trajectory refers to the image's file, not its data.
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&img.png_base64)
                .context("the browser's image is not base64")?;
            let file = self.recorder.save_image(
                &format!("step-{step:03}-{}.png", safe_name(call_id)),
                &bytes,
            )?;
            self.files.push((tools::image_url(img), file));
        }
        Ok((out, ok))
    }
}
