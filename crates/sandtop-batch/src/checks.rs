//! A task's checks: what they read of the guest after the run (files
//! through the daemon's `/v1/files/read`, the browser's tabs and pages
//! through its driver), and the verdicts, pure functions of what was read
//! (unit-tested here). Never a screenshot, never the model's words.

use serde_json::Value;

use sandtop_channel::Channel;
use sandtop_protocol::browser::ReadFilter;
use sandtop_protocol::{BrowserCall, BrowserOutcome, BrowserState};
use sandtop_runfolder::parts::Check;

use crate::task::CheckSpec;

/// Where the demo app keeps its submissions in the guest (JSON lines).
pub const DEMO_STORE: &str = "/home/user/demo/submissions.jsonl";

/// Runs one check against the guest. A read that fails is a failed
/// check saying why (the guest is the only witness).
pub async fn evaluate(channel: &mut Channel, spec: &CheckSpec) -> Check {
    match spec {
        CheckSpec::FileEquals { path, .. }
        | CheckSpec::FileContains { path, .. }
        | CheckSpec::FileJson { path, .. } => match channel.read_file(path).await {
            Ok(bytes) => judge_file(spec, bytes.as_deref()),
            Err(e) => failed(spec, format!("reading {path} in the guest: {e}")),
        },
        CheckSpec::DemoSubmission { .. } => match channel.read_file(DEMO_STORE).await {
            Ok(bytes) => judge_file(spec, bytes.as_deref()),
            Err(e) => failed(spec, format!("reading {DEMO_STORE} in the guest: {e}")),
        },
        CheckSpec::PageText { .. } => {
            let call = BrowserCall::GetPageText { tab_id: None };
            match channel.browser_call(&call).await {
                Ok(r) => judge_page(spec, &r.state, &outcome_text(&r.outcome), &[]),
                Err(e) => failed(spec, format!("reading the page: {e}")),
            }
        }
        CheckSpec::FieldValue { .. } => {
            let call = BrowserCall::ReadPage {
                tab_id: None,
                filter: ReadFilter::Interactive,
            };
            match channel.browser_call(&call).await {
                Ok(r) => {
                    let fields = match &r.outcome {
                        BrowserOutcome::Read(read) => read
                            .elements
                            .iter()
                            .map(|e| (e.label.clone(), e.value.clone().unwrap_or_default()))
                            .collect(),
                        _ => Vec::new(),
                    };
                    judge_page(spec, &r.state, "", &fields)
                }
                Err(e) => failed(spec, format!("reading the page's fields: {e}")),
            }
        }
        CheckSpec::Tabs { .. } | CheckSpec::ActiveUrl { .. } => {
            match channel.browser_state().await {
                Ok(state) => judge_page(spec, &state, "", &[]),
                Err(e) => failed(spec, format!("reading the browser's tabs: {e}")),
            }
        }
    }
}

fn outcome_text(o: &BrowserOutcome) -> String {
    match o {
        BrowserOutcome::Text { text } => text.clone(),
        BrowserOutcome::Read(r) => r.text.clone(),
        _ => String::new(),
    }
}

/// What a check looks at, in words.
pub fn describe(spec: &CheckSpec) -> String {
    match spec {
        CheckSpec::FileEquals { path, .. } => format!("{path} holds the expected text"),
        CheckSpec::FileContains { path, .. } => {
            format!("{path} includes and excludes the given strings")
        }
        CheckSpec::FileJson { path, pointer, .. } => format!("{path}: JSON value at {pointer:?}"),
        CheckSpec::DemoSubmission { .. } => {
            format!("the demo app's last submission ({DEMO_STORE})")
        }
        CheckSpec::PageText { contains } => format!("the active tab's text contains {contains:?}"),
        CheckSpec::FieldValue { label, .. } => format!("the active tab's field {label:?}"),
        CheckSpec::Tabs { .. } => "the browser's tabs".into(),
        CheckSpec::ActiveUrl { .. } => "the active tab's URL".into(),
    }
}

fn verdict(spec: &CheckSpec, ok: bool, detail: String) -> Check {
    Check {
        what: describe(spec),
        ok,
        detail,
    }
}

fn failed(spec: &CheckSpec, detail: String) -> Check {
    verdict(spec, false, detail)
}

/// Quoted for the detail: at most 200 characters.
fn quote(s: &str) -> String {
    let cut: String = s.chars().take(200).collect();
    if cut.len() < s.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// A file check's verdict on the file's bytes (`None`: no such file).
pub fn judge_file(spec: &CheckSpec, bytes: Option<&[u8]>) -> Check {
    let Some(bytes) = bytes else {
        return failed(spec, "the file does not exist".into());
    };
    let text = String::from_utf8_lossy(bytes);
    match spec {
        CheckSpec::FileEquals {
            text: want,
            ignore_case,
            ignore_blanks,
            ..
        } => {
            let norm = |s: &str| {
                let s: String = if *ignore_blanks {
                    s.split_whitespace().collect()
                } else {
                    s.to_string()
                };
                if *ignore_case { s.to_lowercase() } else { s }
            };
            if norm(&text) == norm(want) {
                verdict(spec, true, format!("{} bytes, as expected", bytes.len()))
            } else {
                failed(
                    spec,
                    format!("the file holds {}, want {}", quote(&text), quote(want)),
                )
            }
        }
        CheckSpec::FileContains {
            include, exclude, ..
        } => {
            let missing: Vec<&String> = include.iter().filter(|s| !text.contains(*s)).collect();
            let present: Vec<&String> = exclude.iter().filter(|s| text.contains(*s)).collect();
            if missing.is_empty() && present.is_empty() {
                verdict(spec, true, format!("{} bytes, as expected", bytes.len()))
            } else {
                failed(
                    spec,
                    format!(
                        "missing {missing:?}, present though excluded {present:?}; the file holds {}",
                        quote(&text)
                    ),
                )
            }
        }
        CheckSpec::FileJson {
            pointer, equals, ..
        } => match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => match v.pointer(pointer) {
                Some(got) if got == equals => verdict(spec, true, format!("{got}")),
                Some(got) => failed(spec, format!("the value is {got}, want {equals}")),
                None => failed(spec, format!("no value at {pointer:?}")),
            },
            Err(e) => failed(spec, format!("not JSON: {e}")),
        },
        CheckSpec::DemoSubmission {
            name,
            email,
            message,
        } => {
            let last = text
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<Value>(l).ok());
            let Some(last) = last else {
                return failed(spec, "no submission is stored".into());
            };
            let mut wrong = Vec::new();
            for (key, want) in [("name", name), ("email", email), ("message", message)] {
                // Browsers submit a textarea's line breaks as CRLF.
                let Some(want) = want else { continue };
                let want = want.replace("\r\n", "\n").replace('\n', "\r\n");
                let got = last.get(key).and_then(Value::as_str).unwrap_or("");
                if got != want {
                    wrong.push(format!("{key} {} (want {})", quote(got), quote(&want)));
                }
            }
            if wrong.is_empty() {
                verdict(spec, true, format!("submission {}", last["seq"]))
            } else {
                failed(
                    spec,
                    format!("the last submission differs: {}", wrong.join(", ")),
                )
            }
        }
        _ => failed(spec, "not a file check".into()),
    }
}

/// A browser check's verdict on the tabs, the active tab's text and its
/// fields (label, value).
pub fn judge_page(
    spec: &CheckSpec,
    state: &BrowserState,
    text: &str,
    fields: &[(String, String)],
) -> Check {
    let active = state.tabs.iter().find(|t| t.active);
    match spec {
        CheckSpec::PageText { contains } => {
            if text.contains(contains.as_str()) {
                verdict(
                    spec,
                    true,
                    format!("found in {} characters", text.chars().count()),
                )
            } else {
                failed(spec, format!("not found; the page reads {}", quote(text)))
            }
        }
        CheckSpec::FieldValue { label, equals } => match fields.iter().find(|(l, _)| l == label) {
            Some((_, v)) if v == equals => verdict(spec, true, format!("value {}", quote(v))),
            Some((_, v)) => failed(spec, format!("value {}, want {}", quote(v), quote(equals))),
            None => failed(
                spec,
                format!(
                    "no field labelled {label:?}; the page has {:?}",
                    fields.iter().map(|(l, _)| l).collect::<Vec<_>>()
                ),
            ),
        },
        CheckSpec::Tabs { count, urls } => {
            let have: Vec<&str> = state.tabs.iter().map(|t| t.url.as_str()).collect();
            let missing: Vec<&String> = urls
                .iter()
                .filter(|u| !have.contains(&u.as_str()))
                .collect();
            let count_ok = count.is_none_or(|n| n == have.len());
            if count_ok && missing.is_empty() {
                verdict(spec, true, format!("{} tabs: {have:?}", have.len()))
            } else {
                failed(
                    spec,
                    format!(
                        "{} tabs {have:?}{}{}",
                        have.len(),
                        count.map(|n| format!(", want {n}")).unwrap_or_default(),
                        if missing.is_empty() {
                            String::new()
                        } else {
                            format!(", none at {missing:?}")
                        }
                    ),
                )
            }
        }
        CheckSpec::ActiveUrl { equals } => match active {
            Some(t) if &t.url == equals => verdict(spec, true, t.url.clone()),
            Some(t) => failed(
                spec,
                format!("the active tab is at {}, want {equals}", t.url),
            ),
            None => failed(spec, "no tab is open".into()),
        },
        _ => failed(spec, "not a browser check".into()),
    }
}

#[cfg(test)]
mod tests;
