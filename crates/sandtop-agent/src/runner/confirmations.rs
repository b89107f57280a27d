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

use std::path::PathBuf;
use std::time::Instant;

use sandtop_protocol::{Action, Size};

use super::approvals::MAX_ASKED_AGAIN;
use super::{Ending, Runner, Stop, blocking, ms};
use crate::approve::{ActionRequest, Decision};
use crate::computer::screen_change::{self, Changed};
use sandtop_channel::image_check;
use sandtop_runfolder::trajectory::Entry;

/// How one confirmation ended.
pub(super) enum Confirmed {
    /// Approved on the screen the action will meet.
    Yes,
    /// Refused by the operator (the reason).
    No(String),
    /// The run ends here (stopped during the question, a screen that
    /// kept changing, a capture that failed); the action did not run.
    End(Stop),
}

impl Runner<'_> {
    /// Asks the operator about action `index` of `of` of `call_id` (the
    /// final screenshot when `action` is `None`), bound to the screen
    /// (module docs).
    pub(super) async fn confirm_on_screen(
        &mut self,
        step: u32,
        call_id: &str,
        action: Option<&Action>,
        index: usize,
        of: usize,
    ) -> anyhow::Result<Confirmed> {
        let Some(action) = action else {
            return self.confirm_once(step, call_id, None, index, of, None, None);
        };
        let key = format!("{call_id}-a{index}");
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            Confirmed::End((
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
                        return Ok(Confirmed::End((
                            ending,
                            format!(
                                "the run stopped before action {index} of {call_id} was asked about; it did not run"
                            ),
                        )));
                    }
                    return Ok(failed("the capture to confirm on", &e));
                }
            },
        };
        let actions = std::slice::from_ref(action);
        let mut marked = self.mark(step, &key, actions, Some(&shown), 0);
        match self.confirm_once(step, call_id, Some(action), index, of, marked.clone(), None)? {
            Confirmed::Yes => {}
            other => return Ok(other),
        }
        let mut before = match image_check::decode_screenshot(&shown) {
            Ok(img) => img,
            Err(e) => return Ok(failed("reading the screen it was confirmed on", &e)),
        };
        // 2. The screen now against the one the answer was given on.
        for round in 1..=MAX_ASKED_AGAIN + 1 {
            let t = Instant::now();
            let fresh = match self.screenshot_now().await {
                Ok(s) => s,
                Err(e) => {
                    let ending = self.halt_reason().unwrap_or(Ending::Failed);
                    return Ok(Confirmed::End((
                        ending,
                        format!(
                            "the fresh capture after confirming action {index} of {call_id} failed ({e}); it did not run"
                        ),
                    )));
                }
            };
            let after = match image_check::decode_screenshot(&fresh) {
                Ok(img) => img,
                Err(e) => return Ok(failed("the fresh capture", &e)),
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
                return Ok(Confirmed::End((
                    Ending::Denied,
                    format!(
                        "the screen kept changing around action {index} of {call_id} after {MAX_ASKED_AGAIN} confirmations \
                         (last capture {after_file}); it did not run"
                    ),
                )));
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
            match self.confirm_once(step, call_id, Some(action), index, of, marked.clone(), then)? {
                Confirmed::Yes => {}
                other => return Ok(other),
            }
            shown = fresh;
            shown_file = after_file;
            before = after;
        }
        unreachable!("the last round returns")
    }

    /// One question, recorded; how it ended.
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
    ) -> anyhow::Result<Confirmed> {
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
            return Ok(Confirmed::End((
                ending,
                format!("the run stopped while {what} awaited confirmation"),
            )));
        }
        Ok(match d {
            Decision::Approve => Confirmed::Yes,
            Decision::Deny(reason) => Confirmed::No(reason),
        })
    }
}
