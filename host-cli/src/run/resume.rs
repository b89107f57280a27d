//! What the operator is told to resume a run whose last action has an
//! unknown outcome.

use super::*;

/// Whether `call_id` answers a function call (a browser call) of the
/// conversation, rather than a computer call.
pub(super) fn is_function_call(conversation: &[serde_json::Value], call_id: &str) -> bool {
    conversation
        .iter()
        .any(|i| i["type"] == "function_call" && i["call_id"] == call_id)
}

/// Whether the unsettled `call_id` of the run in `run` is a `run_script`
/// call (its ledger names the member): a script whose outcome is unknown.
pub(crate) fn script_in_doubt(run: &std::path::Path, call_id: &str) -> bool {
    record::read_trajectory(run).is_ok_and(|entries| {
        entries.iter().any(|e| {
            matches!(e, Entry::Ledger { call_id: c, detail, .. }
                if c == call_id && detail["browser_member"] == "run_script")
        })
    })
}

/// What the operator is told when a run ends with an action of unknown
/// outcome: the guest stays, and how to resume.
pub fn resume_hint(
    session: &str,
    run: &std::path::Path,
    step: u32,
    call: &str,
    booted: bool,
) -> String {
    let run = term::safe_line(&run.display().to_string());
    let session = term::safe_line(session);
    let call = term::safe_line(call);
    let kept = if booted {
        format!(
            "host-cli: keeping session {session}, which this run booted: the outcome of computer \
             call {call} (step {step}) is unknown, and only its screen can tell.\n"
        )
    } else {
        format!(
            "host-cli: the outcome of computer call {call} (step {step}) on session {session} is \
             unknown.\n"
        )
    };
    format!(
        "{kept}host-cli: look at the screen (host-cli screenshot --session {session} -o now.png), then resume:\n\
         host-cli:   host-cli run --resume {run} --reconcile done       (its actions took effect)\n\
         host-cli:   host-cli run --resume {run} --reconcile not-done   (they did not)\n\
         host-cli: or remove the guest: host-cli guest stop {session}"
    )
}

// The run's inputs, plus what the caller needs back for the guest (the
// run folder); grouping them would only rename them.
