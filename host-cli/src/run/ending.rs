//! How a run's end is shown: the summary on stdout and the exit status.

use super::*;

/// The summary a run prints on stdout: JSON, every string in it made
/// inert for the terminal (the message can be the model's answer).
pub fn summary(o: &Outcome, run: &std::path::Path) -> String {
    let overhead_p50 = {
        let mut v = o.overhead_ms.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    serde_json::to_string_pretty(&term::safe_json(&json!({
        "ending": o.ending,
        "message": o.message,
        "steps": o.steps,
        "usage": o.usage,
        "attempted_call_ids": o.attempted_call_ids,
        "completed_call_ids": o.completed_call_ids,
        "action_failures": o.action_failures,
        "loop_overhead_ms_p50": overhead_p50,
        "run_folder": run,
    })))
    .unwrap_or_default()
}

/// Prints the summary: pretty JSON, or, when events go out as JSON
/// lines, the last of them.
pub(super) fn print_outcome(o: &Outcome, run: &std::path::Path, progress: &mut Progress) {
    let s = summary(o, run);
    if progress.json() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&s) {
            progress.summary(&v);
        }
    } else {
        crate::out!("{s}");
    }
}

/// The exit status of a run that ended this way (`--help` lists them).
pub fn exit_status(ending: Ending) -> u8 {
    match ending {
        Ending::Finished => 0,
        Ending::Failed => 1,
        Ending::Denied | Ending::Refused => 3,
        Ending::StepBudget | Ending::TimeBudget => 4,
        Ending::ActionFailed => 5,
        Ending::NoFinalAnswer => 6,
        Ending::Interrupted => 130,
    }
}

pub(super) fn exit_for(ending: Ending) -> ExitCode {
    ExitCode::from(exit_status(ending))
}
