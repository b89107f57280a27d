//! `upload_file` and `download_file` in the loop ([`crate::agent::grants`]),
//! after the arguments were checked (step 5 of a browser call):
//!
//! 1. the grant must exist for the member's kind and be unused, else the
//!    call is refused (`refused`/`none`) and no one is asked; so is a call
//!    while the active tab's origin is outside the URL policy (docs/contract.md 30);
//! 2. the operator confirms, shown the grant id and the host file or
//!    directory (a browser confirmation never replaces this one: there is
//!    no other);
//! 3. the grant is used up (whatever follows) and its file or directory
//!    checked again (same file, same limits);
//! 4. upload: the file's basename and bytes go to the daemon (`SetFile`),
//!    with the URL policy, which it checks in the document whose file
//!    input it finds, in the same evaluation, and sets them on the page's
//!    one file input; the guest's copy
//!    stays while the page may read it (`cleanup: pending`; it goes with
//!    the browser's profile). Download: the daemon's newest complete
//!    download (`TakeDownload`) is written into the directory as a new
//!    0600 file, then removed from the guest (`RemoveDownload`; `cleanup:
//!    completed`, or `pending` if that failed);
//! 5. the model reads a `BrowserFileOutcome`; only `completed` is `ok`.
//!
//! No host path goes to the guest or the model; the operator's terminal
//! and the trajectory's ledger name the file written.

use std::time::Instant;

use base64::Engine as _;
use sandtop_protocol::{BrowserCall, BrowserOutcome, ErrorCode};
use serde_json::{Value, json};

use super::{Ending, Runner, Stop, halted, ms};
use crate::browser::grants::{
    self, Cleanup, FileEffect, FileOutcome, FileStatus, Grant, GrantKind, MAX_DOWNLOAD_BYTES,
};
use crate::browser::toolset::{self as tools, Prepared};
use crate::progress::CallState;
use sandtop_channel::ChannelError;
use sandtop_runfolder::trajectory::LedgerState;

/// How one sent call ended.
enum Sent {
    Reply(sandtop_protocol::BrowserReply),
    /// The daemon refused it (an error code other than `timeout`).
    Refused(ErrorCode),
    /// No answer, or the daemon's deadline: the effect is unknown.
    Lost(String),
    /// The run stopped while it was in flight.
    Halted(Ending),
}

fn outcome(status: FileStatus, effect: FileEffect, cleanup: Cleanup) -> FileOutcome {
    FileOutcome::new(status, effect, cleanup).unwrap_or_else(FileOutcome::refused)
}

/// The model-facing text of a daemon refusal of a file call.
fn refusal_text(kind: GrantKind, code: ErrorCode) -> &'static str {
    match (kind, code) {
        (GrantKind::Upload, ErrorCode::NotActionable) => {
            "No single file input to take the file: focus the file input, or use a page with exactly one."
        }
        (GrantKind::Download, ErrorCode::NotActionable) => {
            "No finished download to save: start the download first and wait for it to finish."
        }
        (GrantKind::Download, ErrorCode::LimitExceeded) => "The download is larger than allowed.",
        _ => tools::error_text(code),
    }
}

impl Runner<'_> {
    async fn send_file_call(&mut self, call: &BrowserCall) -> Sent {
        let request = match &self.opts.browser {
            Some(toolset) => toolset.request(call.clone()),
            None => sandtop_protocol::BrowserRequest::plain(call.clone()),
        };
        let r = tokio::select! {
            r = self.channel.browser_request(&request) => r,
            ending = halted(&self.interrupt, self.deadline) => return Sent::Halted(ending),
        };
        match r {
            Ok(reply) => Sent::Reply(reply),
            Err(ChannelError::Daemon { body, .. }) if body.code != ErrorCode::Timeout => {
                Sent::Refused(body.code)
            }
            Err(e) => Sent::Lost(e.to_string()),
        }
    }

    /// Steps 1-5 of the module docs for a prepared file call; `before` is
    /// the state read before it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn file_call(
        &mut self,
        step: u32,
        call_id: &str,
        member: &'static str,
        prepared: &Prepared,
        before: Value,
        kinds: Vec<String>,
        started: Instant,
    ) -> Result<(Value, bool), Stop> {
        let Some(toolset) = self.opts.browser.clone() else {
            return Err(Stop::Error(anyhow::anyhow!(
                "a file call without a browser toolset"
            )));
        };
        let Some((kind, id)) = prepared.file.clone() else {
            return Err(Stop::Error(anyhow::anyhow!("a file call without a grant")));
        };
        let grants = toolset.grants().clone();
        // 1. The grant, unused.
        let grant = match grants.peek(kind, &id) {
            Ok(g) => g,
            Err(r) => {
                self.browser_diagnostic(step, call_id, member, "arguments", "refused", started);
                self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
                let out = tools::file_output(
                    call_id,
                    Some(before),
                    FileOutcome::refused(),
                    Some(r.text()),
                );
                return Ok((out, false));
            }
        };
        // A page outside the URL policy gets no file: refused unasked.
        if !toolset.page_allowed(&before, None) {
            self.browser_diagnostic(step, call_id, member, "approval", "out_of_policy", started);
            self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
            let out = tools::file_output(
                call_id,
                Some(before),
                FileOutcome::refused(),
                Some(tools::OUT_OF_POLICY),
            );
            return Ok((out, false));
        }
        // 2. The operator's confirmation, with the host side shown.
        let description = format!(
            "{}\n  {}",
            tools::prompt(prepared, &before, None),
            grant.describe()
        );
        if !self.ask_browser(step, call_id, member, false, &description)? {
            self.show_call(step, call_id, kinds, CallState::Refused, 0.0);
            let out = tools::file_output(
                call_id,
                Some(before),
                FileOutcome::refused(),
                Some(tools::ACTION_REFUSED),
            );
            return Ok((out, false));
        }
        // 3. Used up from here on, then checked again.
        self.recorder.ledger(
            step,
            call_id,
            LedgerState::Pending,
            json!({"browser_member": member, "grant_id": id}),
        )?;
        let t = Instant::now();
        let taken = grants.take(kind, &id).map_err(|r| {
            let text = r.text();
            match r {
                grants::Refusal::Changed(why) => (text, why),
                _ => (text, text.to_string()),
            }
        });
        let ended = match taken {
            Err((text, why)) => {
                tracing::warn!("grant `{}`: {why}", sandtop_hostkit::term::safe_line(&id));
                Ended::refused(text, why)
            }
            Ok(grant) => match kind {
                GrantKind::Upload => self.upload(&grant).await,
                GrantKind::Download => self.download(&grant).await,
            },
        };
        // 4-5. Recorded, then told.
        let daemon_ms = ms(t.elapsed());
        let state = match ended.outcome.status {
            FileStatus::Completed => LedgerState::Done,
            FileStatus::Refused => LedgerState::Failed,
            FileStatus::Unknown | FileStatus::Interrupted => LedgerState::Unknown,
        };
        self.recorder.ledger(
            step,
            call_id,
            state,
            json!({
                "browser_member": member,
                "grant_id": id,
                "file_outcome": ended.outcome.to_value(),
                "why": ended.why,
                "saved_to": ended.saved_to,
            }),
        )?;
        let shown = match ended.outcome.status {
            FileStatus::Completed => CallState::Done,
            FileStatus::Refused => CallState::Failed,
            FileStatus::Unknown | FileStatus::Interrupted => CallState::Unknown,
        };
        let reason = match ended.outcome.status {
            FileStatus::Completed => "completed",
            FileStatus::Refused => "refused",
            FileStatus::Unknown => "unknown",
            FileStatus::Interrupted => "cancelled",
        };
        self.browser_diagnostic(step, call_id, member, "action", reason, t);
        self.show_call(step, call_id, kinds, shown, daemon_ms);
        if let Some(ending) = ended.halted {
            self.recorder.sync()?;
            return Err(Stop::End(
                ending,
                format!(
                    "the run stopped during file call {call_id} ({member}); its outcome is recorded as {}",
                    ended.outcome.to_value()
                ),
            ));
        }
        let after = match ended.state {
            Some(s) => s,
            None => self.browser_state_now(call_id).await?,
        };
        let ok = ended.outcome.ok();
        if ok {
            self.turn_completed.push(call_id.to_string());
        }
        let out = tools::file_output(call_id, Some(after), ended.outcome, ended.error);
        Ok((out, ok))
    }

    async fn upload(&mut self, grant: &Grant) -> Ended {
        let (name, bytes) = match grants::read_upload(grant) {
            Ok(f) => f,
            Err(why) => {
                tracing::warn!(
                    "grant `{}`: {}",
                    sandtop_hostkit::term::safe_line(&grant.id),
                    sandtop_hostkit::term::safe_line(&format!("{} {why}", grant.path.display()))
                );
                return Ended::refused(grants::Refusal::Changed(why.clone()).text(), why);
            }
        };
        let call = BrowserCall::SetFile {
            tab_id: None,
            name,
            content_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
        };
        match self.send_file_call(&call).await {
            Sent::Reply(reply) => match tools::project_state(&reply.state) {
                // The guest's copy stays: the page's File object reads it.
                Ok(s) if reply.outcome == BrowserOutcome::Done => Ended {
                    outcome: outcome(
                        FileStatus::Completed,
                        FileEffect::Completed,
                        Cleanup::Pending,
                    ),
                    state: Some(s),
                    ..Ended::default()
                },
                _ => Ended::unknown("the daemon's reply to set_file is invalid".into()),
            },
            Sent::Refused(code) => Ended::refused(
                refusal_text(GrantKind::Upload, code),
                format!("the daemon refused set_file ({code})"),
            ),
            Sent::Lost(e) => Ended::unknown(e),
            Sent::Halted(ending) => Ended::halted(ending, FileEffect::Unknown, Cleanup::Pending),
        }
    }

    async fn download(&mut self, grant: &Grant) -> Ended {
        let (name, bytes) = match self.send_file_call(&BrowserCall::TakeDownload {}).await {
            Sent::Reply(reply) => match BrowserReplyFile::try_from(&reply) {
                Ok(f) => (f.name, f.bytes),
                Err(()) => {
                    return Ended::refused(
                        "Browser action failed.",
                        "the daemon's reply to take_download is invalid".into(),
                    );
                }
            },
            Sent::Refused(code) => {
                return Ended::refused(
                    refusal_text(GrantKind::Download, code),
                    format!("the daemon refused take_download ({code})"),
                );
            }
            // Taking reads only: nothing changed on either side.
            Sent::Lost(e) => {
                return Ended::refused(
                    tools::error_text(ErrorCode::Timeout),
                    format!("take_download: {e}"),
                );
            }
            Sent::Halted(ending) => {
                return Ended::halted(ending, FileEffect::None, Cleanup::NotStarted);
            }
        };
        let saved = match grants::write_download(grant, &name, &bytes) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(
                    "grant `{}`: {}",
                    sandtop_hostkit::term::safe_line(&grant.id),
                    sandtop_hostkit::term::safe_line(&why)
                );
                return Ended::refused("The download could not be saved on the host.", why);
            }
        };
        eprintln!(
            "host-cli: download grant `{}`: saved {}",
            sandtop_hostkit::term::safe_line(&grant.id),
            sandtop_hostkit::term::safe_line(&saved.display().to_string())
        );
        let cleanup = match self
            .send_file_call(&BrowserCall::RemoveDownload { name })
            .await
        {
            Sent::Reply(_) => Cleanup::Completed,
            _ => Cleanup::Pending,
        };
        Ended {
            outcome: outcome(FileStatus::Completed, FileEffect::Completed, cleanup),
            saved_to: Some(saved.display().to_string()),
            ..Ended::default()
        }
    }
}

/// A `TakeDownload` reply: the file's name and bytes, checked.
struct BrowserReplyFile {
    name: String,
    bytes: Vec<u8>,
}

impl TryFrom<&sandtop_protocol::BrowserReply> for BrowserReplyFile {
    type Error = ();
    fn try_from(r: &sandtop_protocol::BrowserReply) -> Result<Self, ()> {
        let BrowserOutcome::File {
            name,
            content_base64,
        } = &r.outcome
        else {
            return Err(());
        };
        if content_base64.len() > sandtop_protocol::browser::base64_len(MAX_DOWNLOAD_BYTES) {
            return Err(());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(content_base64)
            .map_err(|_| ())?;
        Ok(BrowserReplyFile {
            name: name.clone(),
            bytes,
        })
    }
}

/// What a file call came to, before it is recorded.
#[derive(Default)]
struct Ended {
    outcome: FileOutcome,
    /// The model-facing error (fixed text) when not completed.
    error: Option<&'static str>,
    /// The operator's reason (the trajectory).
    why: Option<String>,
    /// The state after, when the reply carried it.
    state: Option<Value>,
    saved_to: Option<String>,
    halted: Option<Ending>,
}

impl Ended {
    fn refused(text: &'static str, why: String) -> Ended {
        Ended {
            outcome: FileOutcome::refused(),
            error: Some(text),
            why: Some(why),
            ..Ended::default()
        }
    }

    fn unknown(why: String) -> Ended {
        Ended {
            outcome: outcome(FileStatus::Unknown, FileEffect::Unknown, Cleanup::Pending),
            error: Some("The browser did not answer; whether the file was transferred is unknown."),
            why: Some(why),
            ..Ended::default()
        }
    }

    fn halted(ending: Ending, effect: FileEffect, cleanup: Cleanup) -> Ended {
        Ended {
            outcome: outcome(FileStatus::Interrupted, effect, cleanup),
            error: Some("The run stopped during the file transfer."),
            why: Some(format!("stopped ({ending:?})")),
            halted: Some(ending),
            ..Ended::default()
        }
    }
}
