//! The driver: primitive input and capture on one display.
//!
//! [`Driver`] is deliberately small: pointer motion, buttons, keys by
//! keysym, one layout-independent character, sync, settle, capture. The
//! meaning of the nine computer actions (held keys, drag paths, scroll
//! ratios, release on error) lives above it in `desktop::exec`, written
//! once and tested against [`fake::FakeDriver`]. The X11 implementation is
//! [`x11::X11Driver`].

pub mod fake;
pub mod settle;
pub mod x11;

use std::time::Duration;

use sandtop_protocol::{Capabilities, Rect, Size};
use xkeysym::Keysym;

use crate::cancel::{Cancel, Cancelled};

/// What went wrong in the driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The display is gone or never came (connection refused, broken pipe).
    #[error("the X display is not available: {0}")]
    Display(String),
    /// The server refused a request.
    #[error("the X server refused a request: {0}")]
    Protocol(String),
    /// A keysym no keycode can carry, even after remapping.
    #[error("no keycode is free to carry keysym {0:#x}")]
    NoKeycode(u32),
    /// The operation was cancelled (deadline or client gone).
    #[error("cancelled")]
    Cancelled,
    /// A required extension is missing.
    #[error("the X server lacks the {0} extension")]
    MissingExtension(&'static str),
    /// Input sent earlier was not delivered in time: another client holds
    /// a synchronous grab that keeps a device frozen.
    #[error("input not delivered: {0}")]
    InputBlocked(String),
}

impl From<Cancelled> for DriverError {
    fn from(_: Cancelled) -> DriverError {
        DriverError::Cancelled
    }
}

impl DriverError {
    /// Whether the connection is unusable afterwards.
    pub fn is_fatal(&self) -> bool {
        matches!(self, DriverError::Display(_))
    }
}

/// One captured frame, borrowed from the driver: B, G, R, X bytes per
/// pixel (the X byte is not guaranteed to be 0xff), rows `stride` bytes apart.
#[derive(Debug, Clone, Copy)]
pub struct FrameView<'a> {
    pub width: u32,
    pub height: u32,
    pub stride: usize,
    pub data: &'a [u8],
}

/// The pointer's image: premultiplied ARGB (as XFixes gives it), with the
/// hotspot already subtracted from the position (`x`, `y` is the top left
/// corner on the screen; it may be negative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorImage {
    pub x: i32,
    pub y: i32,
    pub width: u32,
    pub height: u32,
    pub argb: Vec<u32>,
}

/// What [`Driver::react`] saw: when the first reaction came and how the
/// wait ended, from the start of the wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reaction {
    /// The first damage or focus change (None: nothing reacted).
    pub first: Option<Duration>,
    /// The last one.
    pub last: Option<Duration>,
    /// Whether the input focus moved to another window.
    pub focus_moved: bool,
    /// The whole wait.
    pub waited: Duration,
    /// Whether it ended quiet (else at the cap).
    pub quiet: bool,
}

/// Primitive operations on one display. Not thread-safe by design: one
/// owner (the desktop task) calls it, so input never interleaves.
pub trait Driver: Send {
    /// The current screen size.
    fn screen_size(&mut self) -> Result<Size, DriverError>;
    /// Moves the pointer to an absolute screen position.
    fn motion(&mut self, x: u32, y: u32) -> Result<(), DriverError>;
    /// Presses or releases an X button (1 left, 2 middle, 3 right, 4/5
    /// wheel up/down, 6/7 wheel left/right, 8 back, 9 forward).
    fn button(&mut self, button: u8, down: bool) -> Result<(), DriverError>;
    /// Presses or releases the key that carries `keysym` (finding or
    /// making a keycode for it).
    fn key(&mut self, keysym: Keysym, down: bool) -> Result<(), DriverError>;
    /// Types one character, whatever the keyboard layout: press and
    /// release of a key that carries it.
    fn type_char(&mut self, c: char) -> Result<(), DriverError>;
    /// Sends buffered requests.
    fn flush(&mut self) -> Result<(), DriverError>;
    /// A round trip: every earlier request has been processed.
    fn sync(&mut self) -> Result<(), DriverError>;
    /// Waits until the server has delivered every input event sent so
    /// far: processed, not queued behind a device another client froze
    /// with a synchronous grab. Fails with [`DriverError::InputBlocked`]
    /// when that takes longer than `deadline`. A round trip when nothing
    /// is grabbed; nothing when nothing was sent since the last call.
    fn deliver(&mut self, deadline: Duration, cancel: &Cancel) -> Result<(), DriverError>;
    /// Waits until the screen has settled by `rule` ([`settle`]: quiet
    /// after the last damage, how long depending on what was drawn since
    /// the last [`Driver::changes`]). Returns whether it went quiet before
    /// the cap.
    fn settle(&mut self, rule: settle::Rule, cancel: &Cancel) -> Result<bool, DriverError>;
    /// Before a shortcut is sent: what happens on the screen and to the
    /// focus from now on is its reaction ([`Driver::react`]).
    fn watch(&mut self) -> Result<(), DriverError>;
    /// After a shortcut: waits until the programs reacted (X damage or a
    /// change of the input focus since [`Driver::watch`]) and then stayed
    /// still (neither) for `quiet`, at most `cap` in all. The caller has
    /// had the shortcut delivered.
    fn react(
        &mut self,
        quiet: Duration,
        cap: Duration,
        cancel: &Cancel,
    ) -> Result<Reaction, DriverError>;
    /// Captures a region of the screen.
    fn capture(&mut self, region: Rect) -> Result<FrameView<'_>, DriverError>;
    /// The pointer image and position, when the server can tell.
    fn cursor(&mut self) -> Result<Option<CursorImage>, DriverError>;
    /// What the display offers.
    fn capabilities(&self) -> Capabilities;
    /// Handles the display's queued events without waiting and returns
    /// how many damage reports were seen so far (monotonic; 0 without
    /// DAMAGE). The live view's change counter follows it.
    fn changes(&mut self) -> Result<u64, DriverError> {
        Ok(0)
    }
    /// A point in the display's history: any change of the screen's
    /// pixels after this call (that is, in any capture that follows it)
    /// shows up as a higher number at the next call. Equal numbers from
    /// two calls prove that nothing was drawn between them. `None` when
    /// the server cannot tell (no DAMAGE): then nothing may be reused.
    fn mark(&mut self) -> Result<Option<u64>, DriverError> {
        Ok(None)
    }
    /// The pointer's position on the screen, when the server can tell
    /// (moving the pointer damages nothing, yet a viewer draws it).
    fn pointer(&mut self) -> Result<Option<(i32, i32)>, DriverError> {
        Ok(None)
    }
    /// Housekeeping while idle (e.g. reverting remapped keycodes).
    fn idle(&mut self) -> Result<(), DriverError> {
        Ok(())
    }
}
