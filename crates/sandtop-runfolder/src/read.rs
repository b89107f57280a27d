//! Reading a run folder into steps.
//!
//! The trajectory is read as a regular file ([`crate::files`]) through
//! [`trajectory::parse_trajectory`], strictly (a line its kind does not
//! describe is an error naming the line). Its `t_unix_ms` stamps, which
//! that reader drops, are read from the same lines beside it. Step `n` is request `n`: what the model was shown
//! (the last observation before it), what it answered, what became of its
//! calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Doing as _, Error, Result};
use sandtop_protocol::{ScaleMap, Timings};
use serde_json::Value;

use crate::diagnostics::Diagnostic;
use crate::files;
use crate::parts::Check;
use crate::trajectory::{self, Entry, Finished, Started, UsageRecord};

/// A screenshot of the run folder and the map of its coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct Obs {
    pub file: String,
    pub map: ScaleMap,
    /// The call it answered (none for the first screenshot).
    pub call_id: Option<String>,
}

/// One request and what followed it.
#[derive(Debug, Clone, Default)]
pub struct Step {
    pub n: u32,
    /// The screenshot the model's coordinates refer to.
    pub seen: Option<Obs>,
    /// Images and bytes of the request's input.
    pub input: Option<(usize, usize)>,
    pub usage: Option<UsageRecord>,
    /// (id, status, output items)
    pub response: Option<(String, String, Vec<Value>)>,
    /// Approvals, confirmations, the ledger, refusals, questions, ... in
    /// the order they were written.
    pub events: Vec<Entry>,
    /// The daemon's timings of the step's computer calls that completed.
    pub daemon: Vec<Timings>,
    /// When its request was recorded, and its last entry.
    pub t_start: Option<u64>,
    pub t_last: Option<u64>,
}

/// A run folder, read.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub dir: PathBuf,
    pub started: Option<Started>,
    pub t_first: Option<u64>,
    pub t_last: Option<u64>,
    pub finished: Option<(Finished, Option<u64>)>,
    /// `--resume`: after how many steps each resume continued.
    pub resumed: Vec<u32>,
    pub steps: Vec<Step>,
    /// The last screenshot, when no request was shown it (the screen the
    /// run ended on).
    pub final_screen: Option<Obs>,
    /// Egress decisions the run recorded, with their time.
    pub egress: Vec<(Value, Option<u64>)>,
    /// Origin questions asked on the run's terminal: (origin, answer).
    pub origin_questions: Vec<(String, String)>,
    pub exercise_checks: Vec<Check>,
    /// `diagnostics.jsonl`, when the run wrote one.
    pub diagnostics: Vec<Diagnostic>,
    /// What could not be read but did not stop the report.
    pub warnings: Vec<String>,
}

/// The entries of a trajectory with their `t_unix_ms`, when every line
/// has one.
fn entries_with_times(dir: &Path) -> Result<Vec<(Entry, Option<u64>)>> {
    // Read once, as a regular file (never through a link).
    let text = files::read_regular_text(dir, "trajectory.jsonl")?;
    let path = dir.join("trajectory.jsonl");
    let entries = trajectory::parse_trajectory(text.as_bytes(), &path.display().to_string())?;
    // The same lines `parse_trajectory` took: non-empty, JSON.
    let mut times = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            times.push(v.get("t_unix_ms").and_then(Value::as_u64));
        }
    }
    if times.len() != entries.len() {
        times = vec![None; entries.len()];
    }
    Ok(entries.into_iter().zip(times).collect())
}

/// Reads the run folder `dir`.
pub fn read(dir: &Path) -> Result<Run> {
    let meta = std::fs::metadata(dir).doing(|| format!("no run folder at {}", dir.display()))?;
    if !meta.is_dir() {
        return Err(Error::NotARun(format!(
            "{} is not a folder (give a run folder)",
            dir.display()
        )));
    }
    if std::fs::symlink_metadata(dir.join("trajectory.jsonl")).is_err() {
        return Err(Error::NotARun(format!(
            "{} is not a run folder: it has no trajectory.jsonl",
            dir.display()
        )));
    }
    let entries = entries_with_times(dir)?;
    let mut run = Run {
        dir: dir.to_path_buf(),
        ..Run::default()
    };
    let mut steps: BTreeMap<u32, Step> = BTreeMap::new();
    // The latest observation, and whether a request was shown it.
    let mut last_obs: Option<(Obs, bool)> = None;
    for (entry, t) in entries {
        if t.is_some() {
            run.t_first = run.t_first.or(t);
            run.t_last = t;
        }
        let step_no = step_of(&entry);
        if let Some(n) = step_no
            && n > 0
        {
            let s = steps.entry(n).or_insert_with(|| Step {
                n,
                t_start: t,
                // What the model was shown: the latest screenshot when
                // its request was recorded.
                seen: last_obs.as_mut().map(|(o, used)| {
                    *used = true;
                    o.clone()
                }),
                ..Step::default()
            });
            if t.is_some() {
                s.t_last = t;
            }
        }
        let step = step_no.and_then(|n| steps.get_mut(&n));
        match (entry, step) {
            (Entry::RunStarted(s), _) => run.started = Some(*s),
            (Entry::RunResumed { steps_done }, _) => run.resumed.push(steps_done),
            (Entry::RunFinished(f), _) => run.finished = Some((*f, t)),
            (
                Entry::Observation {
                    file,
                    scale_map,
                    call_id,
                    ..
                },
                _,
            ) => {
                last_obs = Some((
                    Obs {
                        file,
                        map: scale_map,
                        call_id,
                    },
                    false,
                ));
            }
            (Entry::RequestInput { images, bytes, .. }, Some(s)) => s.input = Some((images, bytes)),
            (Entry::Usage(u), Some(s)) => s.usage = Some(u),
            (
                Entry::Response {
                    id, status, output, ..
                },
                Some(s),
            ) => s.response = Some((id, status, output)),
            (Entry::Egress { entry }, _) => run.egress.push((entry, t)),
            (Entry::OriginQuestion { origin, answer }, _) => {
                run.origin_questions.push((origin, answer));
            }
            (Entry::ExerciseChecks { checks }, _) => run.exercise_checks.extend(checks),
            (e @ Entry::Ledger { .. }, Some(s)) => {
                if let Entry::Ledger { detail, .. } = &e
                    && let Some(tm) = detail.get("daemon_timings")
                    && let Ok(tm) = serde_json::from_value::<Timings>(tm.clone())
                {
                    s.daemon.push(tm);
                }
                s.events.push(e);
            }
            (e, Some(s)) => s.events.push(e),
            // A step-0 entry other than an observation (none is written).
            (_, None) => {}
        }
    }
    if run.started.is_none() {
        return Err(Error::NotARun(format!(
            "{} is not a run folder: its trajectory has no run_started entry",
            dir.display()
        )));
    }
    run.final_screen = last_obs.filter(|(_, used)| !used).map(|(o, _)| o);
    run.steps = steps.into_values().collect();
    read_diagnostics(&mut run);
    Ok(run)
}

/// The step an entry belongs to (0: before the first request).
fn step_of(e: &Entry) -> Option<u32> {
    Some(match e {
        // An observation (of any step) is what the next request shows:
        // it is placed by order, not by its step.
        Entry::RequestInput { step, .. }
        | Entry::Response { step, .. }
        | Entry::ModelError { step, .. }
        | Entry::SafetyChecks { step, .. }
        | Entry::ScreenChanged { step, .. }
        | Entry::Confirm { step, .. }
        | Entry::Ledger { step, .. }
        | Entry::CallOutput { step, .. }
        | Entry::Refused { step, .. }
        | Entry::Skipped { step, .. }
        | Entry::BrowserApproval { step, .. }
        | Entry::AskUser { step, .. }
        | Entry::Guidance { step, .. }
        | Entry::SignIn { step, .. }
        | Entry::Answered { step, .. }
        | Entry::OperatorTook { step }
        | Entry::OperatorActed { step, .. }
        | Entry::OperatorGave { step, .. } => *step,
        Entry::Usage(u) => u.step,
        _ => return None,
    })
}

fn read_diagnostics(run: &mut Run) {
    if std::fs::symlink_metadata(run.dir.join("diagnostics.jsonl")).is_err() {
        return;
    }
    let text = match files::read_regular_text(&run.dir, "diagnostics.jsonl") {
        Ok(t) => t,
        Err(e) => {
            run.warnings.push(e.sentence());
            return;
        }
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Diagnostic>(line) {
            Ok(d) => run.diagnostics.push(d),
            Err(e) => run
                .warnings
                .push(format!("diagnostics.jsonl line {}: {e}", i + 1)),
        }
    }
}

/// The egress journal of the run's session (`egress.jsonl` in the session
/// folder): the entries stamped within the run's time, when the run's
/// times are known. Lines that are not JSON objects are skipped.
pub fn session_journal(path: &Path, run: &Run) -> Result<Vec<(Value, Option<u64>)>> {
    let text = std::fs::read_to_string(path).doing(|| format!("reading {}", path.display()))?;
    let window = run.t_first.zip(run.t_last);
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.is_object())
        .map(|v| {
            let t = v.get("t_unix_ms").and_then(Value::as_u64);
            (v, t)
        })
        .filter(|(_, t)| match (window, t) {
            (Some((a, b)), Some(t)) => (a..=b).contains(t),
            _ => true,
        })
        .collect())
}
