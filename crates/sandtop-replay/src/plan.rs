//! What a recorded run did, in order, for a replay: the first screen, then
//! each input that reached the desktop (the model's computer calls that
//! ran, the operator's actions) with the screen recorded after it.

use std::path::Path;

use crate::Error;
use sandtop_protocol::{Action, ScaleMap, ScreenshotOptions};
use serde_json::Value;

use sandtop_runfolder::trajectory::{Entry, LedgerState, read_trajectory_timed};

/// One input to replay.
#[derive(Debug, Clone)]
pub struct Input {
    pub step: u32,
    /// The call's id, or `operator` for the operator's actions.
    pub who: String,
    pub actions: Vec<Action>,
    /// The model's coordinate space (its screenshot's map); `None` for
    /// the operator's (screen pixels).
    pub expect: Option<ScaleMap>,
    /// The run folder's screenshot after it, when one was recorded.
    pub after: Option<String>,
    /// When it was sent in the recorded run (ms since the Unix epoch).
    pub at_ms: Option<u64>,
}

impl Input {
    /// Only `wait`s: what the screen shows after it is a matter of time.
    pub fn waits_only(&self) -> bool {
        self.actions.iter().all(|a| a.kind() == "wait")
    }
}

/// A recorded run, as a replay needs it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub screenshot: ScreenshotOptions,
    /// The first screenshot and its map (the screen's size comes from it).
    pub initial: Option<(String, ScaleMap)>,
    /// When the recorded run started (ms since the Unix epoch).
    pub started_ms: Option<u64>,
    pub inputs: Vec<Input>,
}

/// Reads the run folder's trajectory. Calls that did not run (refused,
/// failed, unknown) are not replayed: the plan ends before the first.
/// Browser and file calls are not desktop input and are left out (what
/// they changed on the screen then shows as a divergence).
pub fn plan(run: &Path) -> Result<Plan, Error> {
    let entries = read_trajectory_timed(run)?;
    let mut screenshot = ScreenshotOptions::default();
    let mut initial = None;
    let mut started_ms = None;
    let mut inputs: Vec<Input> = Vec::new();
    let mut pending: Vec<Input> = Vec::new();
    for (e, t) in entries {
        match e {
            Entry::RunStarted(s) => {
                if let Some(o) = s.screenshot {
                    screenshot = o;
                }
                started_ms = started_ms.or(t);
            }
            Entry::Observation {
                step: 0,
                call_id: None,
                file,
                scale_map,
            } if initial.is_none() && inputs.is_empty() => initial = Some((file, scale_map)),
            Entry::Ledger {
                step,
                call_id,
                state: LedgerState::Pending,
                detail,
            } => {
                // Browser and file calls (no actions) are not desktop
                // input: they are not replayed.
                if detail.get("actions").is_none() {
                    continue;
                }
                let actions: Vec<Action> = serde_json::from_value(detail["actions"].clone())
                    .map_err(|e| Error::Recorded {
                        what: format!("the actions of call {call_id} (step {step})"),
                        why: e.to_string(),
                    })?;
                let expect = serde_json::from_value(detail["expect_scale_map"].clone()).ok();
                pending.push(Input {
                    step,
                    who: call_id,
                    actions,
                    expect,
                    after: None,
                    at_ms: t,
                });
            }
            Entry::Ledger {
                call_id,
                state: LedgerState::Done,
                ..
            } => {
                if let Some(i) = pending.iter().position(|p| p.who == call_id) {
                    inputs.push(pending.remove(i));
                }
            }
            Entry::Ledger { call_id, state, .. } => {
                // Failed or unknown: nothing after it is replayed.
                let _ = (call_id, state);
                break;
            }
            Entry::CallOutput { item, .. } => {
                let id = item["call_id"].as_str().unwrap_or_default();
                if let Some(file) = item
                    .pointer("/output/image_url")
                    .and_then(Value::as_str)
                    .and_then(|u| u.strip_prefix(sandtop_runfolder::trajectory::FILE_MARK))
                    && let Some(input) = inputs.iter_mut().rev().find(|i| i.who == id)
                {
                    input.after = Some(file.to_string());
                }
            }
            Entry::OperatorActed {
                step,
                actions,
                ok: true,
                ..
            } => {
                let actions = sandtop_control::line::parse_actions(&actions).map_err(|why| {
                    Error::Recorded {
                        what: format!("the operator's actions at step {step}"),
                        why,
                    }
                })?;
                inputs.push(Input {
                    step,
                    who: "operator".into(),
                    actions,
                    expect: None,
                    after: None,
                    at_ms: t,
                });
            }
            Entry::OperatorGave {
                file: Some(file), ..
            } => {
                if let Some(last) = inputs.last_mut()
                    && last.who == "operator"
                {
                    last.after = Some(file);
                }
            }
            _ => {}
        }
    }
    if inputs.is_empty() {
        return Err(Error::Nothing {
            run: run.to_path_buf(),
        });
    }
    Ok(Plan {
        screenshot,
        initial,
        started_ms,
        inputs,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use sandtop_runfolder::trajectory::{FILE_MARK, Recorder};

    #[test]
    fn computer_calls_that_ran_are_replayed_and_browser_calls_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let mut r = Recorder::create(&run).unwrap();
        r.write(&Entry::RunStarted(Box::default())).unwrap();
        let ledger = |step, id: &str, state, detail| Entry::Ledger {
            step,
            call_id: id.into(),
            state,
            detail,
        };
        let output = |step, id: &str| Entry::CallOutput {
            step,
            item: json!({"type": "computer_call_output", "call_id": id,
                         "output": {"type": "computer_screenshot",
                                    "image_url": format!("{FILE_MARK}step-{step:03}-{id}.png")}}),
        };
        let click = json!({"actions": [{"type": "click", "button": "left", "x": 1, "y": 2}]});
        for e in [
            ledger(1, "c1", LedgerState::Pending, click.clone()),
            ledger(1, "c1", LedgerState::Done, json!({})),
            output(1, "c1"),
            // A browser call: no actions, not desktop input.
            ledger(
                2,
                "b1",
                LedgerState::Pending,
                json!({"browser_member": "click"}),
            ),
            ledger(2, "b1", LedgerState::Done, json!({})),
            ledger(
                3,
                "c2",
                LedgerState::Pending,
                json!({"actions": [{"type": "wait"}]}),
            ),
            ledger(3, "c2", LedgerState::Done, json!({})),
            output(3, "c2"),
            // Failed: the plan ends here.
            ledger(4, "c3", LedgerState::Pending, click.clone()),
            ledger(4, "c3", LedgerState::Failed, json!({})),
            ledger(5, "c4", LedgerState::Pending, click),
        ] {
            r.write(&e).unwrap();
        }
        drop(r);
        let p = plan(&run).unwrap();
        let got: Vec<(u32, &str, Option<&str>, bool)> = p
            .inputs
            .iter()
            .map(|i| (i.step, i.who.as_str(), i.after.as_deref(), i.waits_only()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "c1", Some("step-001-c1.png"), false),
                (3, "c2", Some("step-003-c2.png"), true),
            ]
        );
        // Each with the time it was sent (the trajectory's timestamps).
        assert!(p.started_ms.is_some());
        assert!(
            p.inputs
                .iter()
                .all(|i| i.at_ms.is_some_and(|t| t >= p.started_ms.unwrap())),
            "{:?}",
            p.inputs
        );
    }
}
