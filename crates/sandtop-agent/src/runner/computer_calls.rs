//! Computer calls: one checked and approved call run as one batch (or
//! action by action, each confirmed), recorded in the ledger before and
//! after (docs/contract.md rules 9 and 16), and what answers a failure.

use std::time::Instant;

use sandtop_protocol::{Action, BatchRequest, ErrorBody, Screenshot};
use serde_json::{Value, json};

use super::confirmations::Confirming;
use super::{Ending, Executed, Runner, Stop, Work, failure_note, halted, ms};
use crate::progress::CallState;
use sandtop_channel::ChannelError;
use sandtop_runfolder::items::{self as wire, SafetyCheck};
use sandtop_runfolder::trajectory::{Entry, LedgerState};

impl Runner<'_> {
    /// Runs one checked and approved computer call: ledger `pending`, the
    /// batch sent once (or each action after its confirmation), then
    /// `done` with the call's output, `failed` (the daemon refused or
    /// stopped it), or `unknown`.
    pub(super) async fn execute(
        &mut self,
        step: u32,
        call_id: &str,
        actions: &[Action],
        checks: &[SafetyCheck],
    ) -> Result<Executed, Stop> {
        let expect = self.last_shot.as_ref().map(|s| s.scale_map);
        self.tell_call(step, call_id, actions);
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
            match self.run_confirmed(step, call_id, actions, expect).await {
                Err(Stop::End(ending, message)) => {
                    let t = ms(t_daemon.elapsed());
                    self.call_ended(step, call_id, kinds, CallState::Failed, t);
                    return Err(Stop::End(ending, message));
                }
                r => r?,
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
                return Ok(Executed::Failed { body, waited });
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
                return Err(Stop::End(
                    ending,
                    format!(
                        "computer call {call_id}: {e}; its outcome is recorded as {state:?} (resume with --resume after reconciling)"
                    ),
                ));
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
        Ok(Executed::Done(out, waited))
    }

    /// After a failed call, reporting: the screen as it is now answers the
    /// failed call and every later computer call of the response (none of
    /// which runs), later function calls are answered as skipped, and the
    /// model is told what failed and what was skipped, in host words.
    pub(super) async fn report_failure(
        &mut self,
        step: u32,
        call_id: &str,
        checks: &[SafetyCheck],
        actions: &[Action],
        body: &ErrorBody,
        later: &[Work],
    ) -> Result<Vec<Value>, Stop> {
        let shot = match self.screenshot_now().await {
            Ok(s) => s,
            Err(e) => {
                return Err(Stop::End(
                    Ending::Failed,
                    format!("after a failed action: {e:#}"),
                ));
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
                Work::Read { call_id, .. } => {
                    out.push(wire::computer_call_output(call_id, &url, &[]))
                }
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
        Ok(out)
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
    /// it on the screen it will meet ([`super::confirmations`]), then the
    /// final screenshot after it too was confirmed. A confirmation not
    /// given ends the run, the call's ledger record `failed`.
    async fn run_confirmed(
        &mut self,
        step: u32,
        call_id: &str,
        actions: &[Action],
        expect: Option<sandtop_protocol::ScaleMap>,
    ) -> Result<Result<Screenshot, ChannelError>, Stop> {
        let of = actions.len();
        for (index, action) in actions.iter().enumerate() {
            // Bound to the screen the operator was shown (rule 12).
            let what = Confirming::Action { action, index, of };
            self.confirm_or_end(step, call_id, what).await?;
            let mut req = BatchRequest::new(vec![action.clone()], self.opts.screenshot);
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
                    body.index = Some(index);
                    body.executed = Some(index);
                    return Ok(Err(ChannelError::Daemon { status, body }));
                }
                Err(e) => return Ok(Err(e)),
                Ok(r) => self.last_timings = Some(r.timings),
            }
        }
        self.confirm_or_end(step, call_id, Confirming::FinalScreenshot { of })
            .await?;
        let mut req = BatchRequest::new(Vec::new(), self.opts.screenshot);
        req.expect_scale_map = expect;
        Ok(self.send(req).await)
    }
}
