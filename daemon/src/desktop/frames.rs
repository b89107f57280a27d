//! The live view's frames (`POST /v1/frame`, protocol `frame`): a change
//! counter the desktop task keeps current, and the frame job.
//!
//! - The counter goes up when the X server reports damage, when the
//!   pointer moves and after every input batch. While a viewer waits, the
//!   task looks every [`FRAME_TICK`] (a non-blocking read of the X
//!   connection and one pointer query); with no viewer it keeps its idle
//!   tick and costs nothing more.
//! - Waiters are async ([`FrameSignal::wait_past`]) and never occupy the
//!   desktop thread; only the capture itself runs on it, between input
//!   jobs, without the input gate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sandtop_protocol::frame::{FrameImage, FrameReply, FrameRequest};
use sandtop_protocol::{ErrorBody, ErrorCode, Fit, ScaleMap, Size};
use tokio::sync::watch;

use super::{Desktop, ms};

/// How often the task looks for changes while a viewer waits.
pub const FRAME_TICK: Duration = Duration::from_millis(15);

/// How long after a frame request the desktop task keeps looking for
/// changes every [`FRAME_TICK`] (a viewer asks for the next frame at once).
pub const VIEWER_LINGER: Duration = Duration::from_secs(3);

/// JPEG quality when the request names none.
pub const DEFAULT_QUALITY: u8 = 70;

/// The change counter and its waiters.
#[derive(Debug)]
pub struct FrameSignal {
    seq: watch::Sender<u64>,
    waiters: AtomicUsize,
}

impl Default for FrameSignal {
    fn default() -> FrameSignal {
        FrameSignal {
            seq: watch::Sender::new(1),
            waiters: AtomicUsize::new(0),
        }
    }
}

/// Counts a waiter for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl FrameSignal {
    /// The current change counter (starts at 1: a viewer's first
    /// request, `after: 0`, gets a frame at once).
    pub fn seq(&self) -> u64 {
        *self.seq.borrow()
    }

    /// Something changed.
    pub fn bump(&self) {
        self.seq.send_modify(|s| *s += 1);
    }

    /// Whether a viewer is waiting.
    pub fn waiting(&self) -> bool {
        self.waiters.load(Ordering::Acquire) > 0
    }

    /// Waits until the counter passes `after`, at most `wait`; returns the
    /// counter then.
    pub async fn wait_past(&self, after: u64, wait: Duration) -> u64 {
        let mut rx = self.seq.subscribe();
        if *rx.borrow_and_update() > after || wait.is_zero() {
            return self.seq();
        }
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiters);
        let _ = tokio::time::timeout(wait, rx.wait_for(|s| *s > after)).await;
        self.seq()
    }
}

/// What the task last saw, to tell a change.
#[derive(Debug, Default)]
pub struct Seen {
    damage: u64,
    pointer: Option<(i32, i32)>,
}

impl Desktop {
    /// Looks for damage and pointer motion (cheap: no capture); bumps the
    /// counter on a change. A display error is left for the next job to
    /// meet.
    pub(super) fn watch_changes(&mut self) {
        let Some(driver) = self.driver.as_mut() else {
            return;
        };
        let damage = driver.changes().unwrap_or(self.seen.damage);
        let pointer = driver.pointer().unwrap_or(self.seen.pointer);
        if damage != self.seen.damage || pointer != self.seen.pointer {
            self.seen = Seen { damage, pointer };
            self.status.frames.bump();
        }
    }

    /// Captures a frame: the whole screen with the pointer, scaled down
    /// to `max_width` at most, encoded as asked.
    pub(super) fn frame(&mut self, req: &FrameRequest, seq: u64) -> Result<FrameReply, ErrorBody> {
        let cancel = super::Cancel::new(std::time::Instant::now() + Duration::from_secs(10));
        let (driver, _, _) = self.parts()?;
        let screen = match driver.screen_size() {
            Ok(s) => s,
            Err(e) => return Err(self.driver_error(e, &cancel)),
        };
        let target = req.max_width.filter(|&w| w < screen.width).map(|w| Size {
            width: w,
            height: ((u64::from(screen.height) * u64::from(w) + u64::from(screen.width) / 2)
                / u64::from(screen.width))
            .max(1) as u32,
        });
        let map = ScaleMap::fit(screen, None, target, Fit::Stretch)
            .map_err(|e| ErrorBody::new(ErrorCode::BadRequest, format!("frame size: {e}")))?;
        let (driver, _, _) = self.parts()?;
        let cursor = match driver.cursor() {
            Ok(c) => c,
            Err(e) => return Err(self.driver_error(e, &cancel)),
        };
        let t = std::time::Instant::now();
        let (driver, _, renderer) = self.parts()?;
        let frame = match driver.capture(map.region) {
            Ok(f) => f,
            Err(e) => return Err(self.driver_error(e, &cancel)),
        };
        let capture_ms = ms(t.elapsed());
        let (data, rt) = renderer
            .render_frame(
                frame,
                cursor.as_ref(),
                &map,
                req.format,
                req.quality.unwrap_or(DEFAULT_QUALITY),
            )
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
        Ok(FrameReply {
            seq,
            changed: true,
            screen,
            image: Some(FrameImage {
                format: req.format,
                width: map.image.width,
                height: map.image.height,
                data,
                scale_map: map,
                capture_ms,
                encode_ms: rt.scale_ms + rt.encode_ms,
            }),
        })
    }
}
