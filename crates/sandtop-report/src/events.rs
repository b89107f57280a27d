//! What followed a response: approvals (what was asked, who answered,
//! how), confirmations, the ledger, refusals, questions, sign-ins.

use std::fmt::Write as _;

use serde_json::Value;

use super::html::{MAX_ARGS, esc, json_word, pre, verdict};
use super::image;
use super::load::Run;
use super::overlay::{figure, short};
use sandtop_runfolder::trajectory::{Entry, LedgerState};

/// Approvals, confirmations, the ledger, refusals, questions.
pub fn events(run: &Run, events: &[Entry]) -> String {
    let mut rows = String::new();
    for e in events {
        let (what, detail) = match e {
            Entry::SafetyChecks {
                call_id,
                checks,
                decision,
                by,
                ..
            } => {
                let asked: Vec<String> = checks
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {}: {}",
                            c.id,
                            c.code.as_deref().unwrap_or(""),
                            c.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect();
                (
                    "Safety checks".to_string(),
                    format!(
                        "{}<br>asked: {}<br>{}: {}",
                        tag(call_id),
                        esc(&asked.join("; ")),
                        decided_by(by.as_deref()),
                        verdict(decision.starts_with("approved"), decision)
                    ),
                )
            }
            Entry::ScreenChanged {
                call_id,
                before,
                after,
                changed,
                ..
            } => {
                let mut d = format!(
                    "{}: the screen changed around the call's targets after the approval \
                     ({} region(s)); the operator was asked again, shown both.",
                    tag(call_id),
                    changed.len()
                );
                for f in [before, after] {
                    let name = std::path::Path::new(f)
                        .file_name()
                        .map(|n| n.to_string_lossy().to_string())
                        .unwrap_or_default();
                    match image::png_file(&run.dir, &name) {
                        Ok(e) => d.push_str(&figure(&e, &name, &[])),
                        Err(err) => {
                            let _ = write!(d, "<br><span class=\"muted\">{}</span>", esc(&err));
                        }
                    }
                }
                ("Screen changed".into(), d)
            }
            Entry::Confirm {
                call_id,
                index,
                approved,
                by,
                ..
            } => (
                "Confirmation".into(),
                format!(
                    "{} {}: {}: {}",
                    tag(call_id),
                    match index {
                        Some(i) => format!("action {}", i + 1),
                        None => "the final screenshot".into(),
                    },
                    decided_by(by.as_deref()),
                    verdict(*approved, if *approved { "approved" } else { "refused" })
                ),
            ),
            Entry::Ledger {
                call_id,
                state,
                detail,
                ..
            } => {
                let extra = match state {
                    LedgerState::Failed | LedgerState::Unknown => {
                        format!(
                            ": {}",
                            esc(&short(
                                &detail
                                    .get("error")
                                    .map(Value::to_string)
                                    .unwrap_or_default(),
                                400
                            ))
                        )
                    }
                    _ => String::new(),
                };
                let good = matches!(state, LedgerState::Done | LedgerState::Pending);
                (
                    "Ledger".into(),
                    format!(
                        "{} {}{extra}",
                        tag(call_id),
                        verdict(good, &json_word(state))
                    ),
                )
            }
            Entry::Refused {
                call_id,
                index,
                code,
                reason,
                ..
            } => (
                "Refused by the host".into(),
                format!(
                    "{}{} <span class=\"bad\">{}</span>: {}",
                    tag(call_id),
                    index
                        .map(|i| format!(" action {}", i + 1))
                        .unwrap_or_default(),
                    esc(&json_word(code)),
                    esc(reason)
                ),
            ),
            Entry::Skipped { call_id, after, .. } => (
                "Skipped".into(),
                format!("{} not run after {} failed", tag(call_id), tag(after)),
            ),
            Entry::BrowserApproval {
                call_id,
                member,
                read,
                decision,
                by,
                ..
            } => (
                "Browser approval".into(),
                format!(
                    "{} {} ({}): {}: {}",
                    tag(call_id),
                    esc(member),
                    if *read { "read" } else { "state-changing" },
                    decided_by(by.as_deref()),
                    verdict(decision.starts_with("approved"), decision)
                ),
            ),
            Entry::AskUser {
                call_id,
                question,
                answered,
                ..
            } => (
                "Question to the operator".into(),
                format!(
                    "{} {}{}",
                    tag(call_id),
                    pre(question),
                    verdict(
                        *answered,
                        if *answered {
                            "answered (on the terminal)"
                        } else {
                            "not answered"
                        }
                    )
                ),
            ),
            Entry::Guidance { text, .. } => ("Operator guidance".into(), pre(text)),
            Entry::SignIn {
                call_id,
                request,
                status,
                source,
                selected_option,
                why,
                ..
            } => (
                "Sign-in request".into(),
                format!(
                    "{} {}{}{}{}{}",
                    tag(call_id),
                    verdict(status == "submitted", status),
                    source
                        .as_ref()
                        .map(|s| format!(", answered from the {}", esc(s)))
                        .unwrap_or_default(),
                    selected_option
                        .as_ref()
                        .map(|o| format!(", option {}", esc(o)))
                        .unwrap_or_default(),
                    why.as_ref()
                        .map(|w| format!(": {}", esc(w)))
                        .unwrap_or_default(),
                    request
                        .as_ref()
                        .map(|r| pre(&short(&r.to_string(), MAX_ARGS)))
                        .unwrap_or_default()
                ),
            ),
            Entry::Answered {
                title, by, answer, ..
            } => (
                "Answered".into(),
                format!(
                    "{}: {} by the {}",
                    esc(title),
                    verdict(answer == "approve" || answer == "text", answer),
                    esc(by)
                ),
            ),
            Entry::OperatorTook { .. } => (
                "Operator".into(),
                "took control of the desktop (the agent paused)".into(),
            ),
            Entry::OperatorActed {
                actions,
                ok,
                executed,
                error,
                ..
            } => (
                "Operator's input".into(),
                format!(
                    "{} {executed} of {} action(s){} {}",
                    verdict(*ok, if *ok { "done" } else { "failed" }),
                    actions.len(),
                    error
                        .as_ref()
                        .map(|e| format!(": {}", esc(e)))
                        .unwrap_or_default(),
                    pre(&short(&Value::Array(actions.clone()).to_string(), MAX_ARGS))
                ),
            ),
            Entry::OperatorGave { file, .. } => (
                "Operator".into(),
                match file {
                    Some(f) => format!("gave the desktop back; the model was shown {}", esc(f)),
                    None => "gave the desktop back".into(),
                },
            ),
            Entry::ModelError { error, .. } => (
                "Model error".into(),
                format!("<span class=\"bad\">{}</span>", esc(error)),
            ),
            Entry::CallOutput { item, .. } if item["type"] == "function_call_output" => (
                "Function output".into(),
                format!(
                    "{} {}",
                    tag(item["call_id"].as_str().unwrap_or("")),
                    pre(&short(
                        item["output"]
                            .as_str()
                            .unwrap_or(&item["output"].to_string()),
                        MAX_ARGS
                    ))
                ),
            ),
            _ => continue,
        };
        let _ = writeln!(rows, "<tr><th>{}</th><td>{detail}</td></tr>", esc(&what));
    }
    if rows.is_empty() {
        return String::new();
    }
    format!("<h3>What followed</h3>\n<table>\n{rows}</table>\n")
}

/// Who answered an approval question, in the report's words (`by` is the
/// trajectory's word; recordings before it was written say nothing).
pub fn decided_by(by: Option<&str>) -> String {
    match by {
        Some("terminal") => "answered by the operator on the terminal".into(),
        Some("view") => "answered by the operator in the live view".into(),
        Some("policy") => "decided by the operator's --approve-policy".into(),
        Some("scripted") => {
            "approved by --approve-scripted-checks (the scripted model's own)".into()
        }
        Some("nobody") => "nobody could answer (denied by default)".into(),
        Some(other) => format!("answered by {}", esc(other)),
        None => "answered by the operator (this recording does not say how)".into(),
    }
}

pub fn tag(s: &str) -> String {
    format!("<span class=\"tag\">{}</span>", esc(s))
}
