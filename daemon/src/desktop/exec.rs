//! The meaning of the nine actions, on top of the primitive [`Driver`].
//!
//! 1. [`plan`] checks a whole batch before anything runs: limits, key
//!    names, and every coordinate in the model's space through the one
//!    [`ScaleMap::to_screen`]. A refused batch reaches the driver zero times.
//! 2. [`run`] carries the steps out once, in order, stopping at the first
//!    failure, and reports which action failed, how many completed, and
//!    whether the failing one had already injected input.
//! 3. Whatever the outcome (error, deadline, cancellation), every key and
//!    button pressed here is released before `run` returns ([`Input`]).

use std::time::Duration;

use sandtop_protocol::{Action, BatchRequest, ErrorBody, ErrorCode, ScaleMap, Size, limits};
use xkeysym::Keysym;

use super::Cancel;
use crate::driver::{Driver, DriverError};
use crate::keys;

/// An action checked and mapped to screen pixels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Click {
        button: u8,
        at: (u32, u32),
        held: Vec<Keysym>,
    },
    DoubleClick {
        at: (u32, u32),
        held: Vec<Keysym>,
    },
    Drag {
        path: Vec<(u32, u32)>,
        held: Vec<Keysym>,
    },
    Keypress {
        keys: Vec<Keysym>,
    },
    Move {
        at: (u32, u32),
        held: Vec<Keysym>,
    },
    Scroll {
        at: (u32, u32),
        clicks_x: i32,
        clicks_y: i32,
        held: Vec<Keysym>,
    },
    Type {
        text: String,
    },
    Wait,
    Screenshot,
    /// Press a button where the pointer is; it stays held after the batch.
    MouseDown {
        button: u8,
    },
    /// Release a button where the pointer is (nothing when not held).
    MouseUp {
        button: u8,
    },
    /// Keys held down for a while, then released in reverse.
    HoldKey {
        keys: Vec<Keysym>,
        duration: Duration,
    },
}

impl Step {
    /// A keypress a program or the window manager takes as a command
    /// rather than text: one holding Ctrl, Alt, Meta, Super or Hyper
    /// (Shift alone types), or a function key or Menu.
    pub fn is_shortcut(&self) -> bool {
        use xkeysym::key as k;
        let Step::Keypress { keys } = self else {
            return false;
        };
        keys.iter().any(|ks| {
            matches!(
                ks.raw(),
                k::Control_L
                    | k::Control_R
                    | k::Alt_L
                    | k::Alt_R
                    | k::Meta_L
                    | k::Meta_R
                    | k::Super_L
                    | k::Super_R
                    | k::Hyper_L
                    | k::Hyper_R
                    | k::F1..=k::F35 | k::Menu
            )
        })
    }

    /// Keyboard input: typing or a keypress.
    pub fn is_keyboard(&self) -> bool {
        matches!(
            self,
            Step::Keypress { .. } | Step::Type { .. } | Step::HoldKey { .. }
        )
    }
}

/// Largest pointer jump between two motion events of a drag, in pixels.
/// With paths of at most `limits::MAX_DRAG_POINTS` points on screens of at
/// most `limits::MAX_DIMENSION` pixels a drag is bounded anyway, and the
/// deadline is checked at every path point.
pub const DRAG_STEP_PX: u32 = 16;

/// Wheel clicks for a pixel-like scroll distance: one click per
/// [`limits::SCROLL_PIXELS_PER_CLICK`], rounded to nearest, and at least one
/// for any non-zero distance.
pub fn wheel_clicks(distance: i64) -> i32 {
    if distance == 0 {
        return 0;
    }
    let per = limits::SCROLL_PIXELS_PER_CLICK;
    let n = ((distance.unsigned_abs() + per / 2) / per).max(1);
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    if distance < 0 { -n } else { n }
}

fn reject(index: usize, code: ErrorCode, message: impl Into<String>) -> ErrorBody {
    ErrorBody {
        index: Some(index),
        executed: Some(0),
        partial: Some(false),
        ..ErrorBody::new(code, message)
    }
}

fn resolve_keys(index: usize, names: &[String]) -> Result<Vec<Keysym>, ErrorBody> {
    names
        .iter()
        .map(|n| keys::lookup(n).map_err(|e| reject(index, ErrorCode::UnknownKey, e.to_string())))
        .collect()
}

/// Checks and maps a batch. `screen` is the screen size now.
pub fn plan(req: &BatchRequest, screen: Size) -> Result<(Vec<Step>, ScaleMap), ErrorBody> {
    let opts = &req.screenshot;
    let map = ScaleMap::fit(screen, opts.region, opts.size, opts.fit).map_err(|e| ErrorBody {
        executed: Some(0),
        ..ErrorBody::new(ErrorCode::BadRequest, format!("screenshot options: {e}"))
    })?;
    if let Some(expected) = &req.expect_scale_map
        && *expected != map
    {
        return Err(ErrorBody {
            executed: Some(0),
            ..ErrorBody::new(
                ErrorCode::StaleScaleMap,
                format!(
                    "the screen is {} now; the coordinates refer to a screenshot of a {} screen \
                     (take a new screenshot)",
                    map.screen, expected.screen
                ),
            )
        });
    }
    if req.actions.len() > limits::MAX_ACTIONS {
        return Err(ErrorBody {
            executed: Some(0),
            ..ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{} actions in one batch, at most {} allowed",
                    req.actions.len(),
                    limits::MAX_ACTIONS
                ),
            )
        });
    }
    let mut steps = Vec::with_capacity(req.actions.len());
    for (i, action) in req.actions.iter().enumerate() {
        action
            .check_limits()
            .map_err(|r| reject(i, r.code(), format!("{}: {r}", action.kind())))?;
        let at = |x: i64, y: i64| {
            map.to_screen(x, y)
                .map_err(|e| reject(i, ErrorCode::OutOfBounds, format!("{}: {e}", action.kind())))
        };
        let held = |k: &Option<Vec<String>>| resolve_keys(i, k.as_deref().unwrap_or(&[]));
        let step = match action {
            Action::Click { button, x, y, keys } => Step::Click {
                button: button.x11_number(),
                at: at(*x, *y)?,
                held: held(keys)?,
            },
            Action::DoubleClick { x, y, keys } => Step::DoubleClick {
                at: at(*x, *y)?,
                held: held(keys)?,
            },
            Action::Drag { path, keys } => Step::Drag {
                path: path
                    .iter()
                    .map(|p| at(p.x, p.y))
                    .collect::<Result<_, _>>()?,
                held: held(keys)?,
            },
            Action::Keypress { keys } => Step::Keypress {
                keys: resolve_keys(i, keys)?,
            },
            Action::Move { x, y, keys } => Step::Move {
                at: at(*x, *y)?,
                held: held(keys)?,
            },
            Action::Scroll {
                x,
                y,
                scroll_x,
                scroll_y,
                keys,
            } => Step::Scroll {
                at: at(*x, *y)?,
                clicks_x: wheel_clicks(*scroll_x),
                clicks_y: wheel_clicks(*scroll_y),
                held: held(keys)?,
            },
            Action::Type { text } => Step::Type { text: text.clone() },
            Action::Wait {} => Step::Wait,
            Action::Screenshot {} => Step::Screenshot,
            Action::MouseDown { button } => Step::MouseDown {
                button: button.x11_number(),
            },
            Action::MouseUp { button } => Step::MouseUp {
                button: button.x11_number(),
            },
            Action::HoldKey { keys, duration_ms } => Step::HoldKey {
                keys: resolve_keys(i, keys)?,
                duration: Duration::from_millis(*duration_ms),
            },
        };
        steps.push(step);
    }
    Ok((steps, map))
}

/// Which device an event went to, for the delivery rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Device {
    Pointer,
    Keyboard,
}

/// Tracks what is held down so it can always be released, and when to
/// wait for delivery.
///
/// The ordering rule (docs/contract.md rule 2a): a later event is never
/// sent while an earlier one may still sit in a frozen queue of the X
/// server (a window manager's click-to-focus grab freezes the pointer from
/// a button press until it replays the click). [`Driver::deliver`] waits
/// until the server has processed everything sent so far, and is called:
/// after every button press and release; after the first motion that
/// follows a press (a drag's path); whenever the next event goes to the
/// other device (pointer after keyboard, keyboard after pointer); and once
/// at the end of a batch. A round trip each, when nothing is grabbed.
#[derive(Debug, Default)]
pub struct Input {
    keys: Vec<Keysym>,
    buttons: Vec<u8>,
    /// Whether the current step has injected anything yet.
    emitted: bool,
    /// The device of the last event sent since the last delivery.
    last: Option<Device>,
    /// A button was pressed since the last delivery.
    pressed: bool,
}

impl Input {
    /// Whether anything is held.
    pub fn is_clear(&self) -> bool {
        self.keys.is_empty() && self.buttons.is_empty()
    }

    /// Whether `button` is held (a `mouse_down` without its `mouse_up`).
    pub fn holds_button(&self, button: u8) -> bool {
        self.buttons.contains(&button)
    }

    /// Waits until every event sent so far was delivered.
    pub fn deliver(&mut self, d: &mut dyn Driver, cancel: &Cancel) -> Result<(), DriverError> {
        if self.last.is_none() {
            return Ok(());
        }
        d.deliver(Duration::from_millis(limits::INPUT_DELIVERY_MS), cancel)?;
        self.last = None;
        self.pressed = false;
        Ok(())
    }

    /// Before an event to `dev`: the other device's events must have been
    /// delivered first.
    fn to(&mut self, d: &mut dyn Driver, dev: Device, cancel: &Cancel) -> Result<(), DriverError> {
        if self.last.is_some_and(|l| l != dev) {
            self.deliver(d, cancel)?;
        }
        self.last = Some(dev);
        self.emitted = true;
        Ok(())
    }

    fn key_down(
        &mut self,
        d: &mut dyn Driver,
        k: Keysym,
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        self.to(d, Device::Keyboard, cancel)?;
        d.key(k, true)?;
        self.keys.push(k);
        Ok(())
    }

    fn key_up(
        &mut self,
        d: &mut dyn Driver,
        k: Keysym,
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        self.to(d, Device::Keyboard, cancel)?;
        d.key(k, false)?;
        if let Some(i) = self.keys.iter().rposition(|&h| h == k) {
            self.keys.remove(i);
        }
        Ok(())
    }

    /// A key pressed and released (typing: nothing stays held).
    fn key_tap(
        &mut self,
        d: &mut dyn Driver,
        k: Keysym,
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        self.to(d, Device::Keyboard, cancel)?;
        d.key(k, true)?;
        d.key(k, false)
    }

    fn char(&mut self, d: &mut dyn Driver, c: char, cancel: &Cancel) -> Result<(), DriverError> {
        self.to(d, Device::Keyboard, cancel)?;
        d.type_char(c)
    }

    fn button_down(
        &mut self,
        d: &mut dyn Driver,
        b: u8,
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        self.to(d, Device::Pointer, cancel)?;
        d.button(b, true)?;
        self.buttons.push(b);
        self.pressed = true;
        // A press queued behind a device frozen before it (another
        // client's grab) shows as a button still up.
        self.deliver(d, cancel)?;
        self.pressed = true;
        Ok(())
    }

    fn button_up(&mut self, d: &mut dyn Driver, b: u8, cancel: &Cancel) -> Result<(), DriverError> {
        self.to(d, Device::Pointer, cancel)?;
        d.button(b, false)?;
        if let Some(i) = self.buttons.iter().rposition(|&h| h == b) {
            self.buttons.remove(i);
        }
        self.deliver(d, cancel)
    }

    fn click(&mut self, d: &mut dyn Driver, b: u8, cancel: &Cancel) -> Result<(), DriverError> {
        self.button_down(d, b, cancel)?;
        self.button_up(d, b, cancel)
    }

    fn motion(
        &mut self,
        d: &mut dyn Driver,
        (x, y): (u32, u32),
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        self.to(d, Device::Pointer, cancel)?;
        d.motion(x, y)?;
        if self.pressed {
            // A grab activated by the press may have frozen the pointer:
            // a motion queued now would be merged with the next ones.
            self.deliver(d, cancel)?;
        }
        Ok(())
    }

    fn hold(
        &mut self,
        d: &mut dyn Driver,
        keys: &[Keysym],
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        keys.iter().try_for_each(|&k| self.key_down(d, k, cancel))
    }

    fn unhold(
        &mut self,
        d: &mut dyn Driver,
        keys: &[Keysym],
        cancel: &Cancel,
    ) -> Result<(), DriverError> {
        keys.iter()
            .rev()
            .try_for_each(|&k| self.key_up(d, k, cancel))
    }

    /// Releases every held button, then every held key (last pressed
    /// first), and flushes. Carries on past errors so one failure does not
    /// leave the rest held; whatever could not be released stays recorded
    /// so a new connection can release it. It does not wait for delivery:
    /// releases queued behind a frozen device are still processed, in
    /// order, when the device thaws.
    pub fn release_all(&mut self, d: &mut dyn Driver) -> Result<(), DriverError> {
        let mut first_err = None;
        let mut buttons = Vec::new();
        while let Some(b) = self.buttons.pop() {
            if let Err(e) = d.button(b, false) {
                buttons.insert(0, b);
                first_err.get_or_insert(e);
            }
        }
        let mut keys = Vec::new();
        while let Some(k) = self.keys.pop() {
            if let Err(e) = d.key(k, false) {
                keys.insert(0, k);
                first_err.get_or_insert(e);
            }
        }
        self.buttons = buttons;
        self.keys = keys;
        self.last = None;
        self.pressed = false;
        if let Err(e) = d.flush() {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Why a batch stopped.
#[derive(Debug)]
pub struct Failure {
    pub index: usize,
    pub partial: bool,
    pub error: DriverError,
}

/// Runs `steps` in order, once. On failure everything held is released
/// before returning.
pub fn run(
    d: &mut dyn Driver,
    input: &mut Input,
    steps: &[Step],
    cancel: &Cancel,
) -> Result<(), Failure> {
    for (index, step) in steps.iter().enumerate() {
        input.emitted = false;
        let shortcut = step.is_shortcut() && steps.get(index + 1).is_some_and(Step::is_keyboard);
        let result = cancel
            .check()
            .map_err(DriverError::from)
            .and_then(|()| {
                if shortcut {
                    // Earlier input must have landed before the screen
                    // is watched for this shortcut's reaction.
                    input.deliver(d, cancel)?;
                    d.watch()?;
                }
                run_step(d, input, step, cancel)
            })
            .and_then(|()| d.flush());
        // The last step's events are delivered before the batch counts
        // as done (and before anything settles on their effect); keys
        // after a shortcut wait for its reaction.
        let result = result.and_then(|()| {
            if index + 1 == steps.len() {
                input.deliver(d, cancel)
            } else if shortcut {
                after_shortcut(d, input, cancel)
            } else {
                Ok(())
            }
        });
        if let Err(error) = result {
            let partial = input.emitted;
            if let Err(e) = input.release_all(d) {
                tracing::warn!(error = %e, "releasing input after a failed action");
            }
            return Err(Failure {
                index,
                partial,
                error,
            });
        }
    }
    Ok(())
}

/// The rule of docs/contract.md 2b: once the shortcut is delivered, the
/// programs get until they reacted and went still, bounded
/// ([`limits::SHORTCUT_QUIET_MS`], [`limits::SHORTCUT_CAP_MS`]).
fn after_shortcut(
    d: &mut dyn Driver,
    input: &mut Input,
    cancel: &Cancel,
) -> Result<(), DriverError> {
    input.deliver(d, cancel)?;
    let r = d.react(
        Duration::from_millis(limits::SHORTCUT_QUIET_MS),
        Duration::from_millis(limits::SHORTCUT_CAP_MS),
        cancel,
    )?;
    tracing::debug!(
        first_ms = r.first.map(|t| t.as_secs_f64() * 1e3),
        last_ms = r.last.map(|t| t.as_secs_f64() * 1e3),
        focus_moved = r.focus_moved,
        waited_ms = r.waited.as_secs_f64() * 1e3,
        quiet = r.quiet,
        "keys after a shortcut waited for its reaction"
    );
    Ok(())
}

fn run_step(
    d: &mut dyn Driver,
    input: &mut Input,
    step: &Step,
    cancel: &Cancel,
) -> Result<(), DriverError> {
    let c = cancel;
    match step {
        Step::Click { button, at, held } => {
            input.motion(d, *at, c)?;
            input.hold(d, held, c)?;
            input.click(d, *button, c)?;
            input.unhold(d, held, c)
        }
        Step::DoubleClick { at, held } => {
            // Both clicks go out back to back (after the first one's
            // delivery, a round trip when nothing is grabbed), well inside
            // any client's double-click interval (GTK and Qt: 400 ms,
            // xterm: 250 ms).
            input.motion(d, *at, c)?;
            input.hold(d, held, c)?;
            input.click(d, 1, c)?;
            input.click(d, 1, c)?;
            input.unhold(d, held, c)
        }
        Step::Drag { path, held } => {
            // `plan` guarantees at least two points.
            let Some((first, rest)) = path.split_first() else {
                return Ok(());
            };
            input.motion(d, *first, c)?;
            input.hold(d, held, c)?;
            input.button_down(d, 1, c)?;
            let mut from = *first;
            for &to in rest {
                cancel.check()?;
                for p in intermediate(from, to) {
                    input.motion(d, p, c)?;
                }
                input.motion(d, to, c)?;
                d.flush()?;
                from = to;
            }
            input.button_up(d, 1, c)?;
            input.unhold(d, held, c)
        }
        Step::Keypress { keys } => {
            // Press in order, release in reverse.
            input.hold(d, keys, c)?;
            input.unhold(d, keys, c)
        }
        Step::Move { at, held } => {
            input.hold(d, held, c)?;
            input.motion(d, *at, c)?;
            input.unhold(d, held, c)
        }
        Step::Scroll {
            at,
            clicks_x,
            clicks_y,
            held,
        } => {
            input.motion(d, *at, c)?;
            input.hold(d, held, c)?;
            // X buttons: 4 up, 5 down, 6 left, 7 right.
            let v = if *clicks_y < 0 { 4 } else { 5 };
            for _ in 0..clicks_y.unsigned_abs() {
                cancel.check()?;
                input.click(d, v, c)?;
            }
            let h = if *clicks_x < 0 { 6 } else { 7 };
            for _ in 0..clicks_x.unsigned_abs() {
                cancel.check()?;
                input.click(d, h, c)?;
            }
            input.unhold(d, held, c)
        }
        Step::Type { text } => type_text(d, input, text, cancel),
        Step::Wait => {
            input.deliver(d, cancel)?;
            d.sync()?;
            d.settle(crate::driver::settle::Rule::wait(), cancel)
                .map(|_| ())
        }
        Step::Screenshot => Ok(()),
        Step::MouseDown { button } => {
            if input.holds_button(*button) {
                return Ok(());
            }
            input.button_down(d, *button, c)
        }
        Step::MouseUp { button } => {
            if !input.holds_button(*button) {
                return Ok(());
            }
            input.button_up(d, *button, c)
        }
        Step::HoldKey { keys, duration } => {
            input.hold(d, keys, c)?;
            // Delivered before the time starts: the keys are down in the
            // programs for the whole duration.
            input.deliver(d, c)?;
            let end = std::time::Instant::now() + *duration;
            loop {
                cancel.check()?;
                let left = end.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(20)));
            }
            input.unhold(d, keys, c)
        }
    }
}

/// Types text: `\n`, `\r` and `\r\n` are Return, `\t` is Tab, everything
/// else goes through the layout-independent [`Driver::type_char`].
fn type_text(
    d: &mut dyn Driver,
    input: &mut Input,
    text: &str,
    cancel: &Cancel,
) -> Result<(), DriverError> {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        cancel.check()?;
        match c {
            '\r' | '\n' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                input.key_tap(d, Keysym::Return, cancel)?;
            }
            '\t' => input.key_tap(d, Keysym::Tab, cancel)?,
            c => input.char(d, c, cancel)?,
        }
    }
    Ok(())
}

/// Motion points strictly between `from` and `to`, at most
/// [`DRAG_STEP_PX`] apart on either axis.
pub fn intermediate(from: (u32, u32), to: (u32, u32)) -> Vec<(u32, u32)> {
    let dx = i64::from(to.0) - i64::from(from.0);
    let dy = i64::from(to.1) - i64::from(from.1);
    let dist = dx.unsigned_abs().max(dy.unsigned_abs());
    let n = dist.div_ceil(u64::from(DRAG_STEP_PX)) as i64;
    (1..n)
        .map(|i| {
            (
                (i64::from(from.0) + dx * i / n) as u32,
                (i64::from(from.1) + dy * i / n) as u32,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
