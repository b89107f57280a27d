//! `--confirm-actions` confirmations bound to the screen, as safety-check
//! approvals are (docs/contract.md rule 12, [`super::approvals`]):
//!
//! 1. action `i` is asked about on the screen it was decided for: the
//!    model's screenshot for the first action, a capture taken right
//!    before the question for a later one (the screen the earlier actions
//!    left), shown with the action's target marked;
//! 2. after an approval, one fresh capture; when the action's
//!    surroundings changed ([`screen_change`]: the 64 x 64 square around
//!    each point, the whole screen for typing and keys) it is asked again,
//!    shown both marked screens, and the comparison repeats against the
//!    screen of that answer;
//! 3. after [`MAX_ASKED_AGAIN`] such questions the run ends `denied` with
//!    the action not run. The final screenshot has no target: it is asked
//!    about alone.
//!
//! A confirmation not given (refused, or the run stopped meanwhile) ends
//! the call and the run in one place, [`Runner::confirm_or_end`]: the
//! call's ledger record `failed` says how far it got.

use std::path::PathBuf;
use std::time::Instant;

use sandtop_protocol::{Action, Size};
use serde_json::{Value, json};

use super::approvals::MAX_ASKED_AGAIN;
use super::{Ending, Runner, Stop, blocking, ms};
use crate::approve::{ActionRequest, Decision};
use crate::computer::screen_change::{self, Changed};
use sandtop_channel::image_check;
use sandtop_runfolder::trajectory::{Entry, LedgerState};

/// How one confirmation was answered (when the run went on).
enum Confirmed {
    /// Approved on the screen the action will meet.
    Yes,
    /// Refused by the operator (the reason).
    No(String),
}

/// What is confirmed: an action of a computer call (`index` of `of`), the
/// final screenshot of one with `of` actions (all of which ran), or a
/// read.
#[derive(Clone, Copy)]
pub(super) enum Confirming<'a> {
    Action {
        action: &'a Action,
        index: usize,
        of: usize,
    },
    FinalScreenshot {
        of: usize,
    },
    Read,
}

impl Confirming<'_> {
    /// The run's ending, its message and the ledger's detail when the
    /// operator refused (`reason`).
    fn refused(self, call_id: &str, reason: String) -> (Ending, String, Value) {
        match self {
            Confirming::Action { index: i, .. } => (
                Ending::Refused,
                format!(
                    "the operator refused action {i} of {call_id} ({reason}); {i} action(s) before it ran"
                ),
                json!({"executed": i, "refused": reason}),
            ),
            Confirming::FinalScreenshot { of } => (
                Ending::Refused,
                format!(
                    "the operator refused the final screenshot of {call_id} ({reason}); all its actions ran"
                ),
                json!({"executed": of, "refused": "final screenshot"}),
            ),
            Confirming::Read => {
                let message = format!("the operator refused the read {call_id} ({reason})");
                let detail = json!({"executed": 0, "refused": message});
                (Ending::Refused, message, detail)
            }
        }
    }

    /// The same when the run stopped instead (`ending`, `message`): during
    /// the question, a screen that kept changing, a capture that failed.
    fn stopped(self, ending: Ending, message: String) -> (Ending, String, Value) {
        match self {
            Confirming::Action { index: i, .. } => {
                let detail = if ending == Ending::Denied {
                    json!({"executed": i, "refused": "the screen kept changing"})
                } else {
                    json!({"executed": i, "stopped": "during the confirmation"})
                };
                (
                    ending,
                    format!("{message}; {i} action(s) before it ran"),
                    detail,
                )
            }
            Confirming::FinalScreenshot { of } => (
                ending,
                format!("{message}; all its actions ran"),
                json!({"executed": of, "stopped": "before the final screenshot"}),
            ),
            Confirming::Read => {
                let detail = json!({"executed": 0, "refused": message});
                (ending, message, detail)
            }
        }
    }
}

impl Runner<'_> {
    /// Has `what` of `call_id` confirmed, bound to the screen (module
    /// docs). When it is not (refused, or the run stopped meanwhile), the
    /// call's ledger record `failed` says how far it got, and the run
    /// ends.
    pub(super) async fn confirm_or_end(
        &mut self,
        step: u32,
        call_id: &str,
        what: Confirming<'_>,
    ) -> Result<(), Stop> {
        let asked = match what {
            Confirming::Action { action, index, of } => {
                self.confirm_on_screen(step, call_id, Some(action), index, of)
                    .await
            }
            Confirming::FinalScreenshot { of } => {
                self.confirm_on_screen(step, call_id, None, of, of).await
            }
            Confirming::Read => self.confirm_on_screen(step, call_id, None, 0, 0).await,
        };
        let (ending, message, detail) = match asked {
            Ok(Confirmed::Yes) => return Ok(()),
            Ok(Confirmed::No(reason)) => what.refused(call_id, reason),
            Err(Stop::End(ending, message)) => what.stopped(ending, message),
            Err(e) => return Err(e),
        };
        self.recorder
            .ledger(step, call_id, LedgerState::Failed, detail)?;
        Err(Stop::End(ending, message))
    }

    /// Asks the operator about action `index` of `of` of `call_id` (the
    /// final screenshot when `action` is `None`), bound to the screen
    /// (module docs). The run ends when it stops during the question, the
    /// screen keeps changing, or a capture fails; the action did not run.
    async fn confirm_on_screen(
        &mut self,
        step: u32,
        call_id: &str,
        action: Option<&Action>,
        index: usize,
        of: usize,
    ) -> Result<Confirmed, Stop> {
        let Some(action) = action else {
            return self.confirm_once(step, call_id, None, index, of, None, None);
        };
        let key = format!("{call_id}-a{index}");
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            Err(Stop::End(
                Ending::Failed,
                format!("{what} for action {index} of {call_id} failed ({e}); it did not run"),
            ))
        };
        // 1. The screen the action is asked about.
        let (mut shown, mut shown_file) = match (index, &self.last_shot) {
            (0, Some(shot)) => (shot.clone(), self.last_file.clone().unwrap_or_default()),
            _ => match self.screenshot_now().await {
                Ok(shot) => {
                    let file = self.save_shot(step, &format!("confirm-{key}"), &shot)?;
                    (shot, file)
                }
                Err(e) => {
                    if let Some(ending) = self.halt_reason() {
                        return Err(Stop::End(
                            ending,
                            format!(
                                "the run stopped before action {index} of {call_id} was asked about; it did not run"
                            ),
                        ));
                    }
                    return failed("the capture to confirm on", &e);
                }
            },
        };
        let actions = std::slice::from_ref(action);
        let mut marked = self.mark(step, &key, actions, Some(&shown), 0);
        if let no @ Confirmed::No(_) =
            self.confirm_once(step, call_id, Some(action), index, of, marked.clone(), None)?
        {
            return Ok(no);
        }
        let mut before = match image_check::decode_screenshot(&shown) {
            Ok(img) => img,
            Err(e) => return failed("reading the screen it was confirmed on", &e),
        };
        // 2. The screen now against the one the answer was given on.
        for round in 1..=MAX_ASKED_AGAIN + 1 {
            let t = Instant::now();
            let fresh = match self.screenshot_now().await {
                Ok(s) => s,
                Err(e) => {
                    let ending = self.halt_reason().unwrap_or(Ending::Failed);
                    return Err(Stop::End(
                        ending,
                        format!(
                            "the fresh capture after confirming action {index} of {call_id} failed ({e}); it did not run"
                        ),
                    ));
                }
            };
            let after = match image_check::decode_screenshot(&fresh) {
                Ok(img) => img,
                Err(e) => return failed("the fresh capture", &e),
            };
            tracing::debug!("confirmation re-check in {:.0} ms", ms(t.elapsed()));
            let regions = screen_change::regions(actions, Size::new(after.width, after.height));
            let changed: Vec<Changed> = if fresh.scale_map != shown.scale_map {
                regions
                    .into_iter()
                    .map(|region| Changed { region, share: 1.0 })
                    .collect()
            } else {
                screen_change::changed(&before, &after, &regions)
            };
            if changed.is_empty() {
                return Ok(Confirmed::Yes);
            }
            let after_file = self.save_shot(step, &format!("recheck-{key}-{round}"), &fresh)?;
            if round > MAX_ASKED_AGAIN {
                self.recorder.sync()?;
                return Err(Stop::End(
                    Ending::Denied,
                    format!(
                        "the screen kept changing around action {index} of {call_id} after {MAX_ASKED_AGAIN} confirmations \
                         (last capture {after_file}); it did not run"
                    ),
                ));
            }
            self.recorder.write(&Entry::ScreenChanged {
                step,
                call_id: call_id.to_string(),
                before: shown_file.clone(),
                after: after_file.clone(),
                changed,
            })?;
            let then = marked
                .take()
                .or_else(|| Some(self.recorder.dir().join(&shown_file)));
            marked = self.mark(step, &key, actions, Some(&fresh), round);
            if let no @ Confirmed::No(_) =
                self.confirm_once(step, call_id, Some(action), index, of, marked.clone(), then)?
            {
                return Ok(no);
            }
            shown = fresh;
            shown_file = after_file;
            before = after;
        }
        unreachable!("the last round returns")
    }

    /// One question, recorded; how it was answered, or the run's end
    /// when it stopped meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn confirm_once(
        &mut self,
        step: u32,
        call_id: &str,
        action: Option<&Action>,
        index: usize,
        of: usize,
        marked: Option<PathBuf>,
        changed_since: Option<PathBuf>,
    ) -> Result<Confirmed, Stop> {
        let d = blocking(|| {
            self.operator.confirm_action(&ActionRequest {
                call_id,
                action,
                index,
                of,
                marked: marked.as_deref(),
                changed_since: changed_since.as_deref(),
            })
        });
        self.recorder.write(&Entry::Confirm {
            step,
            call_id: call_id.to_string(),
            index: action.map(|_| index),
            approved: d == Decision::Approve,
            by: self.decided_by(),
        })?;
        if let Some(ending) = self.halt_reason() {
            let what = match action {
                Some(_) => format!("action {index} of {call_id}"),
                None => format!("the final screenshot of {call_id}"),
            };
            return Err(Stop::End(
                ending,
                format!("the run stopped while {what} awaited confirmation"),
            ));
        }
        Ok(match d {
            Decision::Approve => Confirmed::Yes,
            Decision::Deny(reason) => Confirmed::No(reason),
        })
    }
}
