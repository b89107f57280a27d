//! What a run shows while it goes (docs/contract.md rule 14a).
//!
//! - A line per step on stderr: the step, each tool call with its action
//!   kinds and how it ended, the model's time and the daemon's time.
//!   `--quiet` silences them.
//! - With `--events json`, one JSON object per event on stdout (a line
//!   each, `event` names the kind), for programs; the run's summary is the
//!   last line, `{"event": "summary", ...}`.
//!
//! Everything printed that came from the model (call ids, function names)
//! goes through [`term::safe_line`] / [`term::safe_json`] first. Writing
//! is best effort: a closed stderr or stdout never changes a run.

use std::io::Write;

use serde::Serialize;

use sandtop_hostkit::term;
use sandtop_runfolder::items::Usage;
use sandtop_runfolder::outcome::Ending;

/// `--events`: the machine-readable event stream on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventsFormat {
    /// One JSON object per line.
    Json,
}

/// How one tool call of a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Every action ran and the screenshot came back.
    Done,
    /// The daemon refused or stopped it.
    Failed,
    /// Sent, no answer: its effects are unknown.
    Unknown,
    /// Refused by the host before anything of its response ran.
    Refused,
    /// Not run: an earlier call of the same response failed.
    Skipped,
    /// A function call answered (ask_user, or an error for an unknown one).
    Answered,
}

/// One tool call in a step's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepCall {
    pub call_id: String,
    /// Action kinds (`click`, `type`, ...) or the function's name.
    pub kinds: Vec<String>,
    pub state: CallState,
    /// Time spent on the daemon for this call (ms), as the host measured it.
    pub daemon_ms: f64,
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run starts (or resumes after `steps_done` steps).
    Started { max_steps: u32, steps_done: u32 },
    /// The model answered request `step`.
    Model {
        step: u32,
        model_ms: f64,
        attempts: u32,
        /// Tool calls in the response.
        calls: usize,
        usage: Option<Usage>,
    },
    /// A tool call of step `step` ended.
    Call {
        step: u32,
        #[serde(flatten)]
        call: StepCall,
    },
    /// Step `step` is over: what it did, and its times.
    Step {
        step: u32,
        max_steps: u32,
        calls: Vec<StepCall>,
        model_ms: f64,
        daemon_ms: f64,
    },
    /// The run ended.
    Finished { ending: Ending, steps: u32 },
}

/// Where a run's progress goes.
pub struct Progress {
    lines: Option<Box<dyn Write + Send>>,
    events: Option<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("lines", &self.lines.is_some())
            .field("events", &self.events.is_some())
            .finish()
    }
}

impl Default for Progress {
    fn default() -> Progress {
        Progress::silent()
    }
}

impl Progress {
    /// Shows nothing (the library's default).
    pub fn silent() -> Progress {
        Progress {
            lines: None,
            events: None,
        }
    }

    /// What `host-cli run` shows: lines on stderr unless `quiet`, events
    /// on stdout with `--events json`.
    pub fn for_cli(quiet: bool, events: Option<EventsFormat>) -> Progress {
        Progress::to(
            (!quiet).then(|| Box::new(std::io::stderr()) as Box<dyn Write + Send>),
            events.map(|_| Box::new(std::io::stdout()) as Box<dyn Write + Send>),
        )
    }

    /// Lines to `lines`, JSON events to `events` (tests use buffers).
    pub fn to(
        lines: Option<Box<dyn Write + Send>>,
        events: Option<Box<dyn Write + Send>>,
    ) -> Progress {
        Progress { lines, events }
    }

    /// Whether events go out as JSON lines (the summary is one then).
    pub fn json(&self) -> bool {
        self.events.is_some()
    }

    /// Reports one event: its JSON line, and a line for people when it is
    /// the end of a step.
    pub fn emit(&mut self, event: &Event) {
        if let Some(out) = self.events.as_mut()
            && let Ok(v) = serde_json::to_value(event)
        {
            let _ = writeln!(out, "{}", term::safe_json(&v));
            let _ = out.flush();
        }
        if let (Some(err), Some(line)) = (self.lines.as_mut(), human(event)) {
            let _ = writeln!(err, "{line}");
            let _ = err.flush();
        }
    }

    /// Writes the run's summary as the last event line.
    pub fn summary(&mut self, summary: &serde_json::Value) {
        if let Some(out) = self.events.as_mut() {
            let mut v = summary.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("event".into(), "summary".into());
            }
            let _ = writeln!(out, "{}", term::safe_json(&v));
            let _ = out.flush();
        }
    }
}

/// The line people see for an event: one per step.
pub fn human(event: &Event) -> Option<String> {
    let Event::Step {
        step,
        max_steps,
        calls,
        model_ms,
        daemon_ms,
    } = event
    else {
        return None;
    };
    let what = if calls.is_empty() {
        "no tool call".to_string()
    } else {
        calls
            .iter()
            .map(|c| {
                let state = match c.state {
                    CallState::Done | CallState::Answered => String::new(),
                    s => format!(
                        " ({})",
                        serde_json::to_value(s)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default()
                    ),
                };
                format!(
                    "{} {}{state}",
                    term::safe_line(&c.call_id),
                    term::safe_line(&c.kinds.join(","))
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Some(format!(
        "host-cli: step {step}/{max_steps}: {what} | model {model_ms:.0} ms | daemon {daemon_ms:.0} ms"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_line_names_the_calls_their_kinds_and_both_times() {
        let e = Event::Step {
            step: 2,
            max_steps: 20,
            calls: vec![
                StepCall {
                    call_id: "call_a".into(),
                    kinds: vec!["click".into(), "type".into()],
                    state: CallState::Done,
                    daemon_ms: 140.2,
                },
                StepCall {
                    call_id: "call_b\x1b[2J".into(),
                    kinds: vec!["move".into()],
                    state: CallState::Skipped,
                    daemon_ms: 0.0,
                },
            ],
            model_ms: 812.4,
            daemon_ms: 140.2,
        };
        let line = human(&e).unwrap();
        assert_eq!(
            line,
            format!(
                "host-cli: step 2/20: call_a click,type; {} move (skipped) | model 812 ms | daemon 140 ms",
                term::safe_line("call_b\x1b[2J")
            )
        );
        assert!(term::is_inert(&line));
        assert_eq!(
            human(&Event::Finished {
                ending: Ending::Finished,
                steps: 1
            }),
            None
        );
    }
}
