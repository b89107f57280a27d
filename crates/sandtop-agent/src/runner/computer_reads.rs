//! Reads ([`crate::computer::reads`]): a computer call that looks at the
//! screen and changes nothing, recorded in the ledger before and after
//! like any call (under `read`, not `actions`: a replay passes over it),
//! confirmed like a final screenshot with `--confirm-actions` (rule 11:
//! what the model is shown is the operator's to refuse), and answered with
//! what it read: `cursor_position` the pointer in the last screenshot's
//! space as the toolset's text (`X=..,Y=..`), `zoom` the zoomed image.

use std::time::Instant;

use sandtop_protocol::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::confirmations::Confirming;
use super::{Ending, Executed, Runner, Stop, halted, ms};
use crate::computer::reads::{self, Read};
use crate::progress::CallState;
use sandtop_channel::ChannelError;
use sandtop_runfolder::items as wire;
use sandtop_runfolder::trajectory::LedgerState;

impl Runner<'_> {
    /// Runs one checked read: ledger `pending`, the read, then `done` with
    /// the item answering it, or `failed`.
    pub(super) async fn read(
        &mut self,
        step: u32,
        call_id: &str,
        read: &Read,
    ) -> Result<Executed, Stop> {
        let expect = self.last_shot.as_ref().map(|s| s.scale_map);
        let kinds = vec![read.kind().to_string()];
        self.tell_call(step, call_id, &[]);
        self.recorder.ledger(
            step,
            call_id,
            LedgerState::Pending,
            json!({"read": read.to_value(), "expect_scale_map": expect}),
        )?;
        self.turn_attempted.push(call_id.to_string());
        let t = Instant::now();
        if self.opts.confirm_actions {
            match self.confirm_or_end(step, call_id, Confirming::Read).await {
                Err(Stop::End(ending, message)) => {
                    self.call_ended(step, call_id, kinds, CallState::Failed, ms(t.elapsed()));
                    return Err(Stop::End(ending, message));
                }
                r => r?,
            }
        }
        let result = match *read {
            Read::CursorPosition => self.read_cursor(call_id, expect).await,
            Read::Zoom { region } => self.read_zoom(step, call_id, region, expect).await?,
        };
        let waited = ms(t.elapsed());
        match result {
            Ok(item) => {
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Done,
                    json!({"read": read.kind()}),
                )?;
                self.turn_completed.push(call_id.to_string());
                self.call_ended(step, call_id, kinds, CallState::Done, waited);
                Ok(Executed::Done(item, waited))
            }
            Err(ReadFailed::Daemon(body)) => {
                self.recorder
                    .ledger(step, call_id, LedgerState::Failed, json!({"error": body}))?;
                self.call_ended(step, call_id, kinds, CallState::Failed, waited);
                Ok(Executed::Failed { body, waited })
            }
            Err(ReadFailed::Channel(e)) => {
                // A read changes nothing: its outcome is never unknown.
                self.recorder.ledger(
                    step,
                    call_id,
                    LedgerState::Failed,
                    json!({"error": e.to_string()}),
                )?;
                self.call_ended(step, call_id, kinds, CallState::Failed, waited);
                let ending = self.halt_reason().unwrap_or(Ending::Failed);
                Err(Stop::End(
                    ending,
                    format!("computer call {call_id} ({}): {e}", read.kind()),
                ))
            }
        }
    }

    /// `cursor_position`: `POST /v1/cursor` with the run's screenshot
    /// options (the daemon maps the pointer through that screenshot's
    /// ScaleMap), answered as the toolset's text; a screen that changed
    /// size since the last screenshot is `stale_scale_map`.
    async fn read_cursor(
        &mut self,
        call_id: &str,
        expect: Option<sandtop_protocol::ScaleMap>,
    ) -> Result<Value, ReadFailed> {
        let opts = self.opts.screenshot;
        let r = tokio::select! {
            r = self.channel.cursor(&opts) => r.map_err(ReadFailed::from)?,
            ending = halted(&self.interrupt, self.deadline) => {
                return Err(ReadFailed::Channel(ChannelError::Http(format!("stopped ({ending:?}) while reading the pointer"))));
            }
        };
        if expect.is_some_and(|m| m != r.scale_map) {
            return Err(ReadFailed::Daemon(stale()));
        }
        Ok(wire::function_call_output(
            call_id,
            &reads::cursor_text(r.x, r.y),
        ))
    }

    /// `zoom`: `POST /v1/screenshot` of the region mapped to screen pixels,
    /// fitted into the last screenshot's size; answered with the image
    /// (saved in the run folder, referred to by the trajectory).
    async fn read_zoom(
        &mut self,
        step: u32,
        call_id: &str,
        region: [i64; 4],
        expect: Option<sandtop_protocol::ScaleMap>,
    ) -> anyhow::Result<Result<Value, ReadFailed>> {
        let Some(map) = expect else {
            return Ok(Err(ReadFailed::Daemon(ErrorBody::new(
                ErrorCode::InvalidAction,
                "zoom: there is no screenshot for its region to refer to",
            ))));
        };
        let opts = match Read::zoom_options(region, &map, self.opts.screenshot.format) {
            Ok(o) => o,
            Err(e) => {
                return Ok(Err(ReadFailed::Daemon(ErrorBody::new(
                    ErrorCode::OutOfBounds,
                    e,
                ))));
            }
        };
        let r = tokio::select! {
            r = self.channel.screenshot(&opts) => r,
            ending = halted(&self.interrupt, self.deadline) => {
                return Ok(Err(ReadFailed::Channel(ChannelError::Http(format!("stopped ({ending:?}) while zooming")))));
            }
        };
        let shot = match r {
            Ok(r) => r.screenshot,
            Err(e) => return Ok(Err(ReadFailed::from(e))),
        };
        if shot.scale_map.screen != map.screen {
            return Ok(Err(ReadFailed::Daemon(stale())));
        }
        let file = self.save_shot(step, &format!("{call_id}-zoom"), &shot)?;
        let url = shot.data_url();
        let item = wire::computer_call_output(call_id, &url, &[]);
        self.files.push((url, file));
        Ok(Ok(item))
    }
}

/// Why a read did not answer.
enum ReadFailed {
    /// Refused (by the daemon, or by the host in its words).
    Daemon(ErrorBody),
    /// The daemon could not be asked, or did not answer properly.
    Channel(ChannelError),
}

impl From<ChannelError> for ReadFailed {
    fn from(e: ChannelError) -> ReadFailed {
        match e {
            ChannelError::Daemon { body, .. } => ReadFailed::Daemon(body),
            e => ReadFailed::Channel(e),
        }
    }
}

fn stale() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::StaleScaleMap,
        "the screen changed size since the screenshot the read refers to",
    )
}
