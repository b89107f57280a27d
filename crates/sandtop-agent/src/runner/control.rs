//! The run as a viewer sees and steers it (`host-cli view`, docs/contract.md 49-50): the
//! state told at each change, the questions that closed written to the
//! trajectory, and the takeover: when the operator asks for the desktop,
//! the agent pauses at the next step boundary; the operator's actions go
//! through the same checks and the same action API as the model's; when
//! the operator gives the desktop back, the model is told so and shown the
//! screen as it is now. The trajectory records who did what.

use sandtop_protocol::{Action, BatchRequest, ScreenshotOptions};
use serde_json::Value;

use super::step::LoopState;
use super::{Runner, halted};
use sandtop_control::line::parse_actions;
use sandtop_control::served::{OperatorCommand, Served, StateEdit};
use sandtop_control::wire::{LastCall, Phase, UsageSoFar};
use sandtop_runfolder::items as wire;
use sandtop_runfolder::trajectory::Entry;

impl Runner<'_> {
    /// Tells the viewers (when the run serves a control socket).
    pub(super) fn tell(&self, f: impl FnOnce(&mut StateEdit<'_>)) {
        if let Some(c) = &self.control {
            c.update(f);
        }
    }

    /// The usage so far, for the viewers.
    pub(super) fn tell_usage(&self, step: u32, usage: &sandtop_runfolder::outcome::UsageTotals) {
        let u = UsageSoFar {
            requests: u64::from(usage.requests),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens,
        };
        self.tell(|s| {
            s.step(step);
            s.usage(u);
        });
    }

    /// A computer call about to run, with the map of the screenshot its
    /// coordinates refer to (the view marks its targets).
    pub(super) fn tell_call(&self, step: u32, call_id: &str, actions: &[Action]) {
        let (Some(c), Some(shot)) = (&self.control, &self.last_shot) else {
            return;
        };
        let actions: Vec<Value> = actions
            .iter()
            .filter_map(|a| serde_json::to_value(a).ok())
            .collect();
        let call = LastCall {
            step,
            call_id: call_id.to_string(),
            actions,
            scale_map: shot.scale_map,
            state: "pending".into(),
        };
        c.update(|s| s.last_call(call));
    }

    /// Writes the questions that closed since the last time.
    pub(super) fn record_answers(&mut self, step: u32) -> anyhow::Result<()> {
        let Some(c) = &self.control else {
            return Ok(());
        };
        for q in c.take_closed() {
            self.recorder.write(&Entry::Answered {
                step,
                question: q.kind,
                title: q.title,
                by: q.by,
                answer: q.answer,
            })?;
        }
        Ok(())
    }

    /// At a step boundary: when the operator asked for the desktop, hand
    /// it over and serve the operator's input until it is given back (or
    /// the run stops; the loop then ends as it would have).
    pub(super) async fn operator_turn(&mut self, st: &mut LoopState) -> anyhow::Result<()> {
        let Some(c) = self.control.clone() else {
            return Ok(());
        };
        if !c.take_requested() {
            return Ok(());
        }
        self.record_answers(st.step)?;
        c.hand_over();
        self.recorder
            .write(&Entry::OperatorTook { step: st.step })?;
        self.recorder.sync()?;
        let stopped = loop {
            let cmd = tokio::select! {
                cmd = c.next_command() => cmd,
                _ = halted(&self.interrupt, self.deadline) => break true,
            };
            match cmd {
                OperatorCommand::Give => break false,
                OperatorCommand::Act(values) => {
                    if !self.operator_act(&c, st.step, values).await? {
                        break true;
                    }
                }
            }
        };
        let shown = if stopped || !self.opts.computer {
            None
        } else {
            Some(self.operator_screen(st.step).await?)
        };
        if !stopped {
            let note = format!(
                "The operator took control of the desktop after step {} and has given it back. \
                 What is on the screen may have changed{}.",
                st.step,
                if shown.is_some() {
                    "; this is the screen now"
                } else {
                    ""
                }
            );
            let url = shown.as_ref().map(|(_, url)| url.as_str());
            st.next_input.push(wire::user_message(&note, url));
        }
        let file = shown.map(|(file, _)| file);
        self.recorder.write(&Entry::OperatorGave {
            step: st.step,
            file,
        })?;
        self.recorder.sync()?;
        c.hand_back(Phase::Model);
        Ok(())
    }

    /// Runs the operator's actions: checked as the model's, sent once, no
    /// screenshot back (the view watches the screen). `false` when the run
    /// stopped meanwhile.
    async fn operator_act(
        &mut self,
        c: &Served,
        step: u32,
        values: Vec<Value>,
    ) -> anyhow::Result<bool> {
        let (ok, executed, error, go_on) = match parse_actions(&values) {
            Err(e) => (false, 0, Some(e), true),
            Ok(actions) => {
                let mut req = BatchRequest::new(actions, ScreenshotOptions::default());
                req.final_screenshot = false;
                tokio::select! {
                    r = self.channel.act(&req) => match r {
                        Ok(r) => (true, r.executed, None, true),
                        // Host words: the daemon's message is the guest's.
                        Err(e) => (false, 0, Some(sandtop_hostkit::term::safe_line(&e.to_string())), true),
                    },
                    _ = halted(&self.interrupt, self.deadline) => {
                        (false, 0, Some("the run stopped".into()), false)
                    }
                }
            }
        };
        self.recorder.write(&Entry::OperatorActed {
            step,
            actions: values,
            ok,
            executed,
            error: error.clone(),
        })?;
        c.acted(ok, executed, error);
        Ok(go_on)
    }

    /// The screen after the operator's turn: saved and recorded as an
    /// observation; its map is the coordinate space of the model's next
    /// call. Returns its file and data URL (which goes to the model).
    async fn operator_screen(&mut self, step: u32) -> anyhow::Result<(String, String)> {
        let shot = self.screenshot_now().await?;
        let file = self.save_shot(step, "operator", &shot)?;
        self.recorder.write(&Entry::Observation {
            step,
            call_id: None,
            file: file.clone(),
            scale_map: shot.scale_map,
        })?;
        let url = shot.data_url();
        self.files.push((url.clone(), file.clone()));
        self.last_shot = Some(shot);
        self.last_file = Some(file.clone());
        Ok((file, url))
    }
}
