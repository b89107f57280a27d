//! The safety checks of one response, approved before any call runs, and
//! the approval bound to the screen the operator saw (docs/contract.md
//! rules 10 and 12):
//!
//! 1. every computer call with pending checks is asked about, shown its
//!    actions and the last screenshot with their targets marked; a
//!    denial, or a stop during the question, ends the run with nothing run;
//! 2. then one fresh capture; a call whose targets' surroundings
//!    ([`screen_change`]) changed since the screenshot the operator was
//!    shown is asked again, shown both (the earlier marked image and the
//!    fresh one marked), and the comparison repeats against the screen of
//!    that answer;
//! 3. a screen that keeps changing after [`MAX_ASKED_AGAIN`] answers ends
//!    the run (`denied`) with nothing run.

use std::path::PathBuf;
use std::time::Instant;

use base64::Engine as _;
use sandtop_protocol::{Action, ImageFormat, Screenshot, Size};

use super::{Ending, Runner, Stop, Work, blocking, ms};
use crate::approve::{self, CheckRequest, Decision};
use crate::computer::screen_change::{self, Changed};
use sandtop_channel::image_check;
use sandtop_runfolder::items::SafetyCheck;
use sandtop_runfolder::trajectory::Entry;

/// How many times one response's calls are asked again because the
/// screen changed, before the run stops.
pub const MAX_ASKED_AGAIN: u32 = 3;

/// A call with pending checks, and the marked image it was last asked on.
struct Asked<'w> {
    call_id: &'w str,
    actions: &'w [Action],
    checks: &'w [SafetyCheck],
    marked: Option<PathBuf>,
}

impl Runner<'_> {
    /// Asks the operator about every call's pending safety checks, before
    /// any call of the response runs, and binds the approvals to the
    /// screen (module docs). Returns the time the operator and the
    /// re-check took, or how the run ends.
    pub(super) async fn approve_all(&mut self, step: u32, work: &[Work]) -> Result<f64, Stop> {
        let mut asked: Vec<Asked<'_>> = work
            .iter()
            .filter_map(|w| match w {
                Work::Computer {
                    call_id,
                    actions,
                    checks,
                } if !checks.is_empty() => Some(Asked {
                    call_id,
                    actions,
                    checks,
                    marked: None,
                }),
                _ => None,
            })
            .collect();
        if asked.is_empty() {
            return Ok(0.0);
        }
        let mut waited = 0.0;
        let shown = self.last_shot.clone();
        for a in &mut asked {
            a.marked = self.mark(step, a.call_id, a.actions, shown.as_ref(), 0);
            let t = Instant::now();
            self.ask_checks(step, a, None)?;
            waited += ms(t.elapsed());
        }
        // Without a screenshot (none yet), there is no screen to bind to.
        let Some(mut shown) = shown else {
            return Ok(waited);
        };
        let mut shown_file = self.last_file.clone().unwrap_or_default();
        let mut before = match image_check::decode_screenshot(&shown) {
            Ok(img) => img,
            Err(e) => {
                return Err(Stop::End(
                    Ending::Failed,
                    format!(
                        "the screenshot the safety checks were approved on cannot be compared ({e}); nothing was run"
                    ),
                ));
            }
        };
        for round in 1..=MAX_ASKED_AGAIN + 1 {
            let t = Instant::now();
            let fresh = match self.screenshot_now().await {
                Ok(s) => s,
                Err(e) => {
                    let ending = self.halt_reason().unwrap_or(Ending::Failed);
                    return Err(Stop::End(
                        ending,
                        format!(
                            "the fresh capture before running approved actions failed ({e}); nothing was run"
                        ),
                    ));
                }
            };
            let after = match image_check::decode_screenshot(&fresh) {
                Ok(img) => img,
                Err(e) => {
                    return Err(Stop::End(
                        Ending::Failed,
                        format!(
                            "the fresh capture before running approved actions is unusable ({e}); nothing was run"
                        ),
                    ));
                }
            };
            waited += ms(t.elapsed());
            let size = Size::new(after.width, after.height);
            let moved = fresh.scale_map != shown.scale_map;
            let again: Vec<(usize, Vec<Changed>)> = asked
                .iter()
                .enumerate()
                .filter_map(|(i, a)| {
                    let regions = screen_change::regions(a.actions, size);
                    let c = if moved {
                        regions
                            .into_iter()
                            .map(|region| Changed { region, share: 1.0 })
                            .collect()
                    } else {
                        screen_change::changed(&before, &after, &regions)
                    };
                    (!c.is_empty()).then_some((i, c))
                })
                .collect();
            if again.is_empty() {
                return Ok(waited);
            }
            let after_file = self.save_shot(step, &format!("recheck-{round}"), &fresh)?;
            if round > MAX_ASKED_AGAIN {
                self.recorder.sync()?;
                return Err(Stop::End(
                    Ending::Denied,
                    format!(
                        "the screen kept changing around the targets of {} after {MAX_ASKED_AGAIN} approvals \
                         (last capture {after_file}); nothing was run",
                        asked[again[0].0].call_id
                    ),
                ));
            }
            for (i, changed) in again {
                self.recorder.write(&Entry::ScreenChanged {
                    step,
                    call_id: asked[i].call_id.to_string(),
                    before: shown_file.clone(),
                    after: after_file.clone(),
                    changed,
                })?;
                // The screen the earlier answer was given on: its marked
                // copy, or the plain screenshot when none could be made
                // (so the question always says it is asked again).
                let then = asked[i]
                    .marked
                    .take()
                    .or_else(|| Some(self.recorder.dir().join(&shown_file)));
                asked[i].marked = self.mark(
                    step,
                    asked[i].call_id,
                    asked[i].actions,
                    Some(&fresh),
                    round,
                );
                let t = Instant::now();
                self.ask_checks(step, &asked[i], then.as_deref())?;
                waited += ms(t.elapsed());
            }
            shown = fresh;
            shown_file = after_file;
            before = after;
        }
        unreachable!("the last round returns")
    }

    /// Saves `shot` with the targets of `actions` marked, for the
    /// operator; `None` when there is no PNG screenshot to mark.
    pub(super) fn mark(
        &mut self,
        step: u32,
        call_id: &str,
        actions: &[Action],
        shot: Option<&Screenshot>,
        n: u32,
    ) -> Option<PathBuf> {
        let shot = shot.filter(|s| s.format == ImageFormat::Png)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&shot.data)
            .ok()?;
        let png = approve::mark_targets(&bytes, actions).ok()?;
        let path = approve::marked_path_n(self.recorder.dir(), step, call_id, n);
        let name = path.file_name()?.to_string_lossy().to_string();
        self.recorder.save_image(&name, &png).ok().map(|_| path)
    }

    /// Asks about one call's checks and records the decision; the run ends
    /// when it was denied or the run stopped meanwhile.
    fn ask_checks(
        &mut self,
        step: u32,
        a: &Asked<'_>,
        changed_since: Option<&std::path::Path>,
    ) -> Result<(), Stop> {
        // The view marks the targets of the call being asked about, so that
        // the operator sees what an approval would run.
        self.tell_call(step, a.call_id, a.actions);
        let scripted = self.model.scripted();
        let decision = blocking(|| {
            self.operator.approve_checks(&CheckRequest {
                call_id: a.call_id,
                checks: a.checks,
                actions: a.actions,
                marked: a.marked.as_deref(),
                changed_since,
                scripted,
            })
        });
        self.recorder.write(&Entry::SafetyChecks {
            step,
            call_id: a.call_id.to_string(),
            checks: a.checks.to_vec(),
            decision: match &decision {
                Decision::Approve => "approved".to_string(),
                Decision::Deny(r) => format!("denied: {r}"),
            },
            by: self.decided_by(),
        })?;
        if let Some(ending) = self.halt_reason() {
            self.recorder.sync()?;
            return Err(Stop::End(
                ending,
                format!(
                    "the run stopped while the operator was asked about the safety checks of {}; nothing was run",
                    a.call_id
                ),
            ));
        }
        if let Decision::Deny(reason) = decision {
            // The view stops marking it as about to run.
            self.tell(|s| s.last_call_state(a.call_id, "denied"));
            self.recorder.sync()?;
            return Err(Stop::End(
                Ending::Denied,
                format!("safety check not approved ({reason}); nothing was run"),
            ));
        }
        Ok(())
    }
}
