//! A driver that records what it is asked to do, for the unit and api
//! tiers: no X server, no sockets.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sandtop_protocol::{Capabilities, ImageFormat, Rect, Size};
use xkeysym::Keysym;

use super::{CursorImage, Driver, DriverError, FrameView, Reaction};
use crate::cancel::Cancel;

/// One primitive the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Motion(u32, u32),
    Button(u8, bool),
    Key(u32, bool),
    Char(char),
    Settle,
    /// Watching for a shortcut's reaction, from before it is sent.
    Watch,
    /// A wait for the reaction to a shortcut.
    React,
    Capture(Rect),
}

/// Knobs and the record, shared between the test and the driver.
#[derive(Debug, Default)]
pub struct FakeState {
    pub events: Vec<Event>,
    /// Fail the n-th input primitive (0-based) with a display error.
    pub fail_at: Option<usize>,
    /// Panic in the n-th input primitive (0-based), to test that a panic
    /// neither kills the daemon nor leaves input held.
    pub panic_at: Option<usize>,
    /// Sleep this long in every input primitive (to hold a request open).
    pub slow: Option<Duration>,
    /// Primitives seen so far.
    pub primitives: usize,
    /// Where `deliver` was called: the number of events recorded before
    /// each call.
    pub delivered_at: Vec<usize>,
    /// Make `deliver` fail as if another client kept input frozen past the
    /// deadline.
    pub blocked: bool,
    /// A window on the screen: a rectangle of one colour (RGB) drawn over
    /// the pattern in every capture from now on; move it to change the
    /// screen between captures.
    pub window: Option<(Rect, [u8; 3])>,
    /// What [`Driver::mark`] answers: a damage count the test bumps when
    /// it changes the screen (None: the fake cannot tell, as a server
    /// without DAMAGE).
    pub damage: Option<u64>,
}

/// The fake driver. Cloning the handle from [`FakeDriver::state`] lets a
/// test look at the record while the daemon owns the driver.
#[derive(Debug)]
pub struct FakeDriver {
    size: Size,
    state: Arc<Mutex<FakeState>>,
    frame: Vec<u8>,
    /// The window drawn into `frame`.
    drawn: Option<(Rect, [u8; 3])>,
}

impl FakeDriver {
    pub fn new(size: Size) -> FakeDriver {
        FakeDriver {
            size,
            state: Arc::default(),
            frame: pattern(size, None),
            drawn: None,
        }
    }

    pub fn state(&self) -> Arc<Mutex<FakeState>> {
        Arc::clone(&self.state)
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn input(&mut self, event: Event) -> Result<(), DriverError> {
        let slow = {
            let mut s = self.lock();
            let n = s.primitives;
            s.primitives += 1;
            if s.panic_at == Some(n) {
                s.panic_at = None;
                drop(s);
                panic!("the fake driver panicked on purpose");
            }
            if s.fail_at == Some(n) {
                return Err(DriverError::Display(
                    "the fake display failed on purpose".into(),
                ));
            }
            s.events.push(event);
            s.slow
        };
        if let Some(d) = slow {
            std::thread::sleep(d);
        }
        Ok(())
    }
}

/// The fake screen: B = x, G = y, R = x ^ y (mod 256), X = 0 (not 0xff,
/// like real servers sometimes send), with `window` drawn over it.
fn pattern(size: Size, window: Option<(Rect, [u8; 3])>) -> Vec<u8> {
    let mut frame = vec![0u8; size.width as usize * size.height as usize * 4];
    for y in 0..size.height {
        for x in 0..size.width {
            let i = (y as usize * size.width as usize + x as usize) * 4;
            let inside = window
                .filter(|(r, _)| x >= r.x && y >= r.y && x < r.x + r.width && y < r.y + r.height);
            let [b, g, r] = match inside {
                Some((_, [r, g, b])) => [b, g, r],
                None => [x as u8, y as u8, (x ^ y) as u8],
            };
            frame[i] = b;
            frame[i + 1] = g;
            frame[i + 2] = r;
            frame[i + 3] = 0;
        }
    }
    frame
}

impl Driver for FakeDriver {
    fn screen_size(&mut self) -> Result<Size, DriverError> {
        Ok(self.size)
    }

    fn motion(&mut self, x: u32, y: u32) -> Result<(), DriverError> {
        self.input(Event::Motion(x, y))
    }

    fn button(&mut self, button: u8, down: bool) -> Result<(), DriverError> {
        self.input(Event::Button(button, down))
    }

    fn key(&mut self, keysym: Keysym, down: bool) -> Result<(), DriverError> {
        self.input(Event::Key(keysym.raw(), down))
    }

    fn type_char(&mut self, c: char) -> Result<(), DriverError> {
        self.input(Event::Char(c))
    }

    fn flush(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    fn sync(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    fn deliver(&mut self, deadline: Duration, cancel: &Cancel) -> Result<(), DriverError> {
        cancel.check()?;
        let mut s = self.lock();
        if s.blocked {
            return Err(DriverError::InputBlocked(format!(
                "the fake pointer stayed frozen for {} ms",
                deadline.as_millis()
            )));
        }
        let n = s.events.len();
        s.delivered_at.push(n);
        Ok(())
    }

    fn settle(&mut self, _rule: super::settle::Rule, cancel: &Cancel) -> Result<bool, DriverError> {
        cancel.check()?;
        self.lock().events.push(Event::Settle);
        Ok(true)
    }

    fn watch(&mut self) -> Result<(), DriverError> {
        self.lock().events.push(Event::Watch);
        Ok(())
    }

    fn react(
        &mut self,
        _quiet: Duration,
        _cap: Duration,
        cancel: &Cancel,
    ) -> Result<Reaction, DriverError> {
        cancel.check()?;
        self.lock().events.push(Event::React);
        Ok(Reaction::default())
    }

    fn capture(&mut self, region: Rect) -> Result<FrameView<'_>, DriverError> {
        let window = {
            let mut s = self.lock();
            s.events.push(Event::Capture(region));
            s.window
        };
        if window != self.drawn {
            self.frame = pattern(self.size, window);
            self.drawn = window;
        }
        let stride = self.size.width as usize * 4;
        let start = region.y as usize * stride + region.x as usize * 4;
        let end = (region.y + region.height - 1) as usize * stride
            + (region.x + region.width) as usize * 4;
        Ok(FrameView {
            width: region.width,
            height: region.height,
            stride,
            data: &self.frame[start..end],
        })
    }

    fn mark(&mut self) -> Result<Option<u64>, DriverError> {
        Ok(self.lock().damage)
    }

    fn cursor(&mut self) -> Result<Option<CursorImage>, DriverError> {
        Ok(Some(CursorImage {
            x: 1,
            y: 1,
            width: 2,
            height: 2,
            argb: vec![0xff00_ff00; 4],
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            xtest: true,
            shm: false,
            damage: false,
            xfixes: false,
            randr: false,
            formats: vec![ImageFormat::Png, ImageFormat::Webp, ImageFormat::Jpeg],
        }
    }
}
