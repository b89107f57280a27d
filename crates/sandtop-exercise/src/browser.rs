//! The browser exercise's script: a model that works through the browser
//! tools only. It decides each step from the tool results in the request
//! (never from pixels), as a model would:
//!
//! 1. navigates outside the URL policy — and expects the refusal, with no
//!    question asked;
//! 2. opens the demo form (inside the policy) and reads its fields;
//! 3. reloads the page and types with a ref of the old page — and expects
//!    `stale_target`, with nothing typed;
//! 4. reads the page again, types the name, email and message into their
//!    fields by ref and clicks Submit (one response, four calls, each
//!    approved on its own);
//! 5. waits for the demo app's answer;
//! 6. with sign-in (not in the benchmark): opens the demo app's login page,
//!    reads it and calls `request_sign_in` for its email and password
//!    inputs (the operator's `--credentials` answers; the values never come
//!    back), clicks Sign in, then does the same for the one-time code and
//!    clicks Verify, and waits for the account page;
//! 7. says it is done.
//!
//! The exercise then checks the demo app's own records (the submission is
//! exactly what was typed: the stale ref typed nothing; the sign-in reached
//! the protected page) and the run's record (the refused navigation was
//! never put to the operator).

use serde_json::{Value, json};

use sandtop_agent::browser::toolset::{NAVIGATION_REFUSED, error_text};
use sandtop_agent::model::scripted::{Script, message};
use sandtop_runfolder::trajectory::{Entry, LedgerState};

use super::{Check, FORM_EMAIL, FORM_MESSAGE, FORM_NAME};

/// The demo app, as the guest's browser reaches it.
pub const FORM_URL: &str = "http://127.0.0.1:8080/";
/// The URL policy of the browser exercise: the demo app's origin alone.
pub const FORM_ORIGIN: &str = "http://127.0.0.1:8080";
/// A navigation the policy refuses (a look-alike of an allowed origin).
pub const OUTSIDE_URL: &str = "http://127.0.0.1.example.test:8080/";
/// The call ids the exercise's checks look for.
pub const OUTSIDE_CALL: &str = "call_browser_outside";
pub const STALE_CALL: &str = "call_browser_stale";
/// The demo app's login page.
pub const LOGIN_URL: &str = "http://127.0.0.1:8080/login";
/// The two sign-in requests of the exercise.
pub const SIGN_IN_PASSWORD_CALL: &str = "call_sign_in_password";
pub const SIGN_IN_CODE_CALL: &str = "call_sign_in_code";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Outside,
    Open,
    Read,
    Reload,
    Stale,
    ReadAgain,
    Fill,
    Wait,
    Login,
    LoginRead,
    SignInPassword,
    ClickSignIn,
    CodeWait,
    CodeRead,
    SignInCode,
    ClickVerify,
    AccountWait,
    Done,
    Over,
}

/// The browser exercise's script.
#[derive(Debug)]
pub struct BrowserScript {
    stage: Stage,
    n: u32,
    /// The ids of the calls of the last response.
    last: Vec<String>,
    /// The Name field's ref before the reload.
    old_name: Option<String>,
    /// Sign in to the demo app after the form.
    sign_in: bool,
    /// The button that submits the sign-in step being filled.
    button: Option<String>,
}

impl BrowserScript {
    /// The script; `sign_in` adds the sign-in stages.
    pub fn new(sign_in: bool) -> BrowserScript {
        BrowserScript {
            stage: Stage::Outside,
            n: 0,
            last: Vec::new(),
            old_name: None,
            sign_in,
            button: None,
        }
    }
}

/// A `request_sign_in` call item of the model.
fn sign_in_call(call_id: &str, fields: Value) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{call_id}"),
        "call_id": call_id,
        "name": sandtop_agent::sign_in::rules::TOOL,
        "arguments": json!({
            "credential_origin": FORM_ORIGIN,
            "reason": "The demo app's account page needs a sign-in.",
            "fields": fields,
            "options": null,
        }).to_string(),
        "status": "completed",
    })
}

/// Whether the request answers the sign-in call `call_id` with
/// `{"status": "submitted"}` (and nothing else).
fn sign_in_submitted(request: &Value, call_id: &str) -> Result<(), String> {
    let item = request["input"]
        .as_array()
        .and_then(|input| {
            input
                .iter()
                .rev()
                .find(|i| i["type"] == "function_call_output" && i["call_id"] == call_id)
        })
        .ok_or_else(|| format!("no answer to {call_id}"))?;
    let out: Value = item["output"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or_else(|| format!("{call_id}: the output is not JSON text"))?;
    if out == json!({"status": "submitted"}) {
        Ok(())
    } else {
        Err(format!("{call_id} was answered {out}, not submitted"))
    }
}

/// A function call item of the model.
fn function_call(call_id: &str, member: &str, args: Value) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{call_id}"),
        "call_id": call_id,
        "name": format!("browser_{member}"),
        "arguments": args.to_string(),
        "status": "completed",
    })
}

/// The payload (`{ok, state, result | error}`) answering `call_id` in the
/// request's input.
pub fn payload(request: &Value, call_id: &str) -> Option<Value> {
    let input = request.get("input")?.as_array()?;
    let item = input
        .iter()
        .rev()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call_id)?;
    output_payload(item)
}

/// The ref of the element labelled `label` in a read result.
fn ref_of(read: &Value, label: &str) -> Option<String> {
    read["elements"]
        .as_array()?
        .iter()
        .find(|e| e["label"] == label)?["ref"]
        .as_str()
        .map(str::to_string)
}

impl BrowserScript {
    fn call(&mut self, member: &str, args: Value) -> Value {
        self.n += 1;
        let id = format!("call_browser_{}", self.n);
        self.call_as(&id, member, args)
    }

    fn call_as(&mut self, id: &str, member: &str, args: Value) -> Value {
        self.last.push(id.to_string());
        function_call(id, member, args)
    }
}

/// The payloads answering `ids` in the request, each `ok`.
fn all_ok(request: &Value, ids: &[String]) -> Result<Vec<Value>, String> {
    ids.iter()
        .map(|id| {
            let p = payload(request, id).ok_or_else(|| format!("no answer to {id}"))?;
            if p["ok"] == true {
                Ok(p)
            } else {
                Err(format!("{id} failed: {}", p["error"]))
            }
        })
        .collect()
}

/// The result of the one read among `ids`.
fn read_result(request: &Value, ids: &[String]) -> Result<Value, String> {
    all_ok(request, ids)?
        .into_iter()
        .next()
        .map(|p| p["result"].clone())
        .ok_or_else(|| "no read result".into())
}

impl Script for BrowserScript {
    fn next(&mut self, request: &Value) -> Result<Option<Vec<Value>>, String> {
        // The calls of the previous response, whose answers are in this
        // request.
        let before = std::mem::take(&mut self.last);
        let out = match self.stage {
            Stage::Outside => {
                self.stage = Stage::Open;
                vec![self.call_as(
                    OUTSIDE_CALL,
                    "navigate",
                    json!({"url": OUTSIDE_URL, "tab_id": null}),
                )]
            }
            Stage::Open => {
                let p =
                    payload(request, OUTSIDE_CALL).ok_or("no answer to the outside navigation")?;
                if p["ok"] != false || p["error"] != NAVIGATION_REFUSED {
                    return Err(format!(
                        "the navigation outside the policy was not refused: {p}"
                    ));
                }
                self.stage = Stage::Read;
                vec![self.call("navigate", json!({"url": FORM_URL, "tab_id": null}))]
            }
            Stage::Read => {
                all_ok(request, &before)?;
                self.stage = Stage::Reload;
                vec![self.call(
                    "read_page",
                    json!({"tab_id": null, "filter": "interactive"}),
                )]
            }
            Stage::Reload => {
                let read = read_result(request, &before)?;
                self.old_name =
                    Some(ref_of(&read, "Name").ok_or_else(|| format!("no Name field in {read}"))?);
                self.stage = Stage::Stale;
                vec![self.call("navigate", json!({"url": FORM_URL, "tab_id": null}))]
            }
            Stage::Stale => {
                all_ok(request, &before)?;
                self.stage = Stage::ReadAgain;
                let target = self.old_name.clone();
                vec![self.call_as(
                    STALE_CALL,
                    "type",
                    json!({"text": FORM_NAME, "target": target, "tab_id": null}),
                )]
            }
            Stage::ReadAgain => {
                let p = payload(request, STALE_CALL).ok_or("no answer to the stale call")?;
                let want = error_text(sandtop_protocol::ErrorCode::StaleTarget);
                if p["ok"] != false || p["error"] != want {
                    return Err(format!("the stale ref was not refused as stale: {p}"));
                }
                self.stage = Stage::Fill;
                vec![self.call("read_page", json!({"tab_id": null, "filter": "all"}))]
            }
            Stage::Fill => {
                let read = read_result(request, &before)?;
                let field = |label: &str| {
                    ref_of(&read, label).ok_or_else(|| format!("no {label} field in {read}"))
                };
                let (name, email, msg, submit) = (
                    field("Name")?,
                    field("Email")?,
                    field("Message")?,
                    field("Submit")?,
                );
                self.stage = Stage::Wait;
                vec![
                    self.call(
                        "type",
                        json!({"text": FORM_NAME, "target": name, "tab_id": null}),
                    ),
                    self.call(
                        "type",
                        json!({"text": FORM_EMAIL, "target": email, "tab_id": null}),
                    ),
                    self.call(
                        "type",
                        json!({"text": FORM_MESSAGE, "target": msg, "tab_id": null}),
                    ),
                    self.call("click", json!({"target": submit, "tab_id": null})),
                ]
            }
            Stage::Wait => {
                all_ok(request, &before)?;
                self.stage = if self.sign_in {
                    Stage::Login
                } else {
                    Stage::Done
                };
                vec![self.call(
                    "wait_for",
                    json!({"text": "Saved submission", "timeout_ms": 10000, "tab_id": null}),
                )]
            }
            Stage::Login => {
                all_ok(request, &before)?;
                self.stage = Stage::LoginRead;
                vec![self.call("navigate", json!({"url": LOGIN_URL, "tab_id": null}))]
            }
            Stage::LoginRead => {
                all_ok(request, &before)?;
                self.stage = Stage::SignInPassword;
                vec![self.call(
                    "read_page",
                    json!({"tab_id": null, "filter": "interactive"}),
                )]
            }
            Stage::SignInPassword => {
                let read = read_result(request, &before)?;
                let field = |label: &str| {
                    ref_of(&read, label)
                        .ok_or_else(|| format!("no {label} on the login page: {read}"))
                };
                let (email, password) = (field("Email")?, field("Password")?);
                self.button = Some(field("Sign in")?);
                self.stage = Stage::ClickSignIn;
                self.last.push(SIGN_IN_PASSWORD_CALL.into());
                vec![sign_in_call(
                    SIGN_IN_PASSWORD_CALL,
                    json!([
                        {"id": "email", "label": "Email", "type": "email", "required": true, "target": email},
                        {"id": "password", "label": "Password", "type": "password", "required": true, "target": password},
                    ]),
                )]
            }
            Stage::ClickSignIn => {
                sign_in_submitted(request, SIGN_IN_PASSWORD_CALL)?;
                self.stage = Stage::CodeWait;
                let button = self.button.take();
                vec![self.call("click", json!({"target": button, "tab_id": null}))]
            }
            Stage::CodeWait => {
                all_ok(request, &before)?;
                self.stage = Stage::CodeRead;
                vec![self.call(
                    "wait_for",
                    json!({"text": "Verification code", "timeout_ms": 10000, "tab_id": null}),
                )]
            }
            Stage::CodeRead => {
                all_ok(request, &before)?;
                self.stage = Stage::SignInCode;
                vec![self.call(
                    "read_page",
                    json!({"tab_id": null, "filter": "interactive"}),
                )]
            }
            Stage::SignInCode => {
                let read = read_result(request, &before)?;
                let code = ref_of(&read, "Code")
                    .ok_or_else(|| format!("no Code field on the code page: {read}"))?;
                self.button = Some(
                    ref_of(&read, "Verify")
                        .ok_or_else(|| format!("no Verify button on the code page: {read}"))?,
                );
                self.stage = Stage::ClickVerify;
                self.last.push(SIGN_IN_CODE_CALL.into());
                vec![sign_in_call(
                    SIGN_IN_CODE_CALL,
                    json!([
                        {"id": "code", "label": "Code", "type": "code", "required": true, "target": code},
                    ]),
                )]
            }
            Stage::ClickVerify => {
                sign_in_submitted(request, SIGN_IN_CODE_CALL)?;
                self.stage = Stage::AccountWait;
                let button = self.button.take();
                vec![self.call("click", json!({"target": button, "tab_id": null}))]
            }
            Stage::AccountWait => {
                all_ok(request, &before)?;
                self.stage = Stage::Done;
                vec![self.call(
                    "wait_for",
                    json!({"text": "Signed in as", "timeout_ms": 10000, "tab_id": null}),
                )]
            }
            Stage::Done => {
                all_ok(request, &before)?;
                self.stage = Stage::Over;
                self.n += 1;
                vec![message(
                    self.n,
                    if self.sign_in {
                        "The form is submitted, and the account page is open after the sign-in."
                    } else {
                        "The form is submitted: the demo app saved it."
                    },
                )]
            }
            Stage::Over => return Ok(None),
        };
        Ok(Some(out))
    }
}

/// The text payload of a function call output item.
fn output_payload(item: &Value) -> Option<Value> {
    sandtop_agent::browser::toolset::payload_of(item)
}

/// Checks the run's own record: the navigation outside the policy was
/// refused without a question to the operator and never reached the
/// browser (no ledger entry); the stale call was caught when its target
/// was read again before the question (docs/contract.md rule 28a): answered
/// with the stale error, nobody asked, nothing sent to act (no ledger
/// entry).
pub fn check_refusals(entries: &[Entry]) -> Check {
    let answer = |id: &str| {
        entries.iter().find_map(|e| match e {
            Entry::CallOutput { item, .. } if item["call_id"] == id => output_payload(item),
            _ => None,
        })
    };
    let asked = |id: &str| {
        entries
            .iter()
            .any(|e| matches!(e, Entry::BrowserApproval { call_id, .. } if call_id == id))
    };
    let ledger = |id: &str| -> Vec<LedgerState> {
        entries
            .iter()
            .filter_map(|e| match e {
                Entry::Ledger { call_id, state, .. } if call_id == id => Some(*state),
                _ => None,
            })
            .collect()
    };
    let mut problems = Vec::new();
    match answer(OUTSIDE_CALL) {
        Some(p) if p["ok"] == false && p["error"] == NAVIGATION_REFUSED => {}
        other => problems.push(format!("the outside navigation was answered {other:?}")),
    }
    if asked(OUTSIDE_CALL) {
        problems.push("the operator was asked about the outside navigation".into());
    }
    if !ledger(OUTSIDE_CALL).is_empty() {
        problems.push("the outside navigation reached the browser".into());
    }
    let stale = error_text(sandtop_protocol::ErrorCode::StaleTarget);
    match answer(STALE_CALL) {
        Some(p) if p["ok"] == false && p["error"] == stale => {}
        other => problems.push(format!("the stale call was answered {other:?}")),
    }
    if asked(STALE_CALL) {
        problems.push("the operator was asked about the stale call".into());
    }
    if !ledger(STALE_CALL).is_empty() {
        problems.push(format!(
            "the stale call reached the browser to act (ledger {:?})",
            ledger(STALE_CALL)
        ));
    }
    Check {
        what: "the run refused the outside navigation before any question, and the stale ref in the browser".into(),
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            format!("{OUTSIDE_CALL}: navigation refused, never asked; {STALE_CALL}: stale_target, nothing typed")
        } else {
            problems.join("; ")
        },
    }
}
