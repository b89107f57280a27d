//! The X11 driver: one pure-Rust connection (x11rb), input through XTEST,
//! capture through MIT-SHM (GetImage when SHM is unavailable), settling on
//! DAMAGE, the pointer image from XFixes.
//!
//! Requests are buffered and flushed once per action; a round trip happens
//! only where ordering must be observed: delivery (see `delivery`) and
//! before settling and capturing.
//!
//! Layout: no inline tests: one `X11Driver` whose methods share its
//! connection, keymap, SHM segment and DAMAGE state: `connect` (the screen
//! and extension checks) and the `Driver` implementation (the wait for a
//! shortcut's reaction included). Delivery, the
//! keymap and SHM are modules already.

mod delivery;
pub mod keymap;
mod shm;

use std::time::{Duration, Instant};

use sandtop_protocol::{Capabilities, ImageFormat as WireFormat, Rect, Size};
use x11rb::connection::{Connection, RequestConnection};
use x11rb::errors::{ConnectionError, ReplyError, ReplyOrIdError};
use x11rb::protocol::Event;
use x11rb::protocol::damage::{self, ConnectionExt as _};
use x11rb::protocol::xfixes::ConnectionExt as _;
use x11rb::protocol::xinput::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{self, ConnectionExt as _, ImageOrder, Mapping, Window};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;
use xkeysym::Keysym;

use self::keymap::Keymap;
use super::{CursorImage, Driver, DriverError, FrameView, Reaction, settle};
use crate::cancel::Cancel;

pub(crate) fn conn_err(e: ConnectionError) -> DriverError {
    DriverError::Display(e.to_string())
}

pub(crate) fn reply_err(e: ReplyError) -> DriverError {
    match e {
        ReplyError::ConnectionError(c) => conn_err(c),
        ReplyError::X11Error(x) => DriverError::Protocol(format!("{:?}", x.error_kind)),
    }
}

fn id_err(e: ReplyOrIdError) -> DriverError {
    match e {
        ReplyOrIdError::ConnectionError(c) => conn_err(c),
        ReplyOrIdError::X11Error(x) => DriverError::Protocol(format!("{:?}", x.error_kind)),
        ReplyOrIdError::IdsExhausted => DriverError::Protocol("X resource ids exhausted".into()),
    }
}

/// The X11 implementation of [`Driver`].
#[derive(Debug)]
pub struct X11Driver {
    conn: RustConnection,
    root: Window,
    keymap: Keymap,
    shift: u8,
    /// Keycodes pressed together with an automatic Shift.
    shifted: Vec<u8>,
    segment: Option<shm::Segment>,
    /// GetImage fallback buffer.
    fallback: Vec<u8>,
    damage: Option<damage::Damage>,
    /// DamageNotify events seen so far, whoever drained them (the live
    /// view's change counter reads it: [`Driver::changes`]).
    damage_seen: u64,
    caps: Capabilities,
    /// What the server's input state must be once our events are processed.
    expected: delivery::Expected,
    /// The master pointer's XInput 2 device id, when XI2 is there: its
    /// button state covers every button (the core mask only 1 to 5).
    xi_pointer: Option<u16>,
    /// The focus window when [`Driver::watch`] was called.
    watched_focus: Option<Window>,
    /// Damage since the last look ([`Driver::react`]).
    reacted: bool,
}

impl X11Driver {
    /// Paints the root window (the desktop's background) one colour,
    /// `0xRRGGBB` (the screen is 24-bit TrueColor, checked at connect).
    /// It lasts as long as the X server; the caller sets it again after a
    /// restart (every connect).
    pub fn set_background(&self, rgb: u32) -> Result<(), DriverError> {
        let aux = xproto::ChangeWindowAttributesAux::new().background_pixel(rgb & 0x00ff_ffff);
        self.conn
            .change_window_attributes(self.root, &aux)
            .map_err(conn_err)?
            .check()
            .map_err(reply_err)?;
        self.conn
            .clear_area(false, self.root, 0, 0, 0, 0)
            .map_err(conn_err)?
            .check()
            .map_err(reply_err)?;
        Ok(())
    }

    /// Connects to `display` (e.g. `:0`; `None` reads `$DISPLAY`) and
    /// checks what the server offers. XTEST is required; the rest degrade.
    pub fn connect(display: Option<&str>) -> Result<X11Driver, DriverError> {
        let (conn, screen_num) =
            crate::xauth::connect(display).map_err(|e| DriverError::Display(e.to_string()))?;
        let setup = conn.setup();
        let screen = setup
            .roots
            .get(screen_num)
            .ok_or_else(|| DriverError::Display(format!("no screen {screen_num}")))?;
        let root = screen.root;
        // Capture assumes 24/32-bit TrueColor, little-endian: B, G, R, X.
        let depth_ok = screen.root_depth == 24
            && setup
                .pixmap_formats
                .iter()
                .any(|f| f.depth == 24 && f.bits_per_pixel == 32);
        if !depth_ok || setup.image_byte_order != ImageOrder::LSB_FIRST {
            return Err(DriverError::Protocol(format!(
                "unsupported screen format (depth {}, {:?}); run the server at depth 24",
                screen.root_depth, setup.image_byte_order
            )));
        }
        let min = setup.min_keycode;
        let max = setup.max_keycode;

        let has = |name: &'static str| -> Result<bool, DriverError> {
            Ok(conn
                .extension_information(name)
                .map_err(conn_err)?
                .is_some())
        };
        if !has(x11rb::protocol::xtest::X11_EXTENSION_NAME)? {
            return Err(DriverError::MissingExtension("XTEST"));
        }
        conn.xtest_get_version(2, 2)
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;

        let shm_ok = has(x11rb::protocol::shm::X11_EXTENSION_NAME)? && {
            use x11rb::protocol::shm::ConnectionExt as _;
            let v = conn
                .shm_query_version()
                .map_err(conn_err)?
                .reply()
                .map_err(reply_err)?;
            (v.major_version, v.minor_version) >= (1, 2)
        };
        let damage_ok = has(damage::X11_EXTENSION_NAME)?
            && conn
                .damage_query_version(1, 1)
                .map_err(conn_err)?
                .reply()
                .is_ok();
        let xfixes_ok = has(x11rb::protocol::xfixes::X11_EXTENSION_NAME)?
            && conn
                .xfixes_query_version(4, 0)
                .map_err(conn_err)?
                .reply()
                .is_ok();
        let randr_ok = has(x11rb::protocol::randr::X11_EXTENSION_NAME)?;
        let xi_pointer = if has(xinput::X11_EXTENSION_NAME)? {
            let v = conn
                .xinput_xi_query_version(2, 0)
                .map_err(conn_err)?
                .reply()
                .ok();
            match v {
                // The master pointer the core requests (and XTEST's pointer)
                // belong to: the client pointer when one is set, else the
                // first master pointer.
                Some(v) if v.major_version >= 2 => {
                    let client = conn
                        .xinput_xi_get_client_pointer(x11rb::NONE)
                        .map_err(conn_err)?
                        .reply()
                        .ok()
                        .filter(|r| r.set)
                        .map(|r| r.deviceid);
                    match client {
                        Some(id) => Some(id),
                        None => conn
                            // XIAllMasterDevices
                            .xinput_xi_query_device(1u16)
                            .map_err(conn_err)?
                            .reply()
                            .ok()
                            .and_then(|r| {
                                r.infos
                                    .iter()
                                    .find(|d| d.type_ == xinput::DeviceType::MASTER_POINTER)
                                    .map(|d| d.deviceid)
                            }),
                    }
                }
                _ => None,
            }
        } else {
            None
        };

        let km = conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;
        let modifiers = conn
            .get_modifier_mapping()
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?
            .keycodes;
        let keymap = Keymap::new(min, km.keysyms_per_keycode, km.keysyms, &modifiers);
        let shift = keymap
            .find(xkeysym::key::Shift_L)
            .map(|(kc, _)| kc)
            .ok_or_else(|| DriverError::Protocol("the keyboard map has no Shift_L".into()))?;

        let mut driver = X11Driver {
            conn,
            root,
            keymap,
            shift,
            shifted: Vec::new(),
            segment: None,
            fallback: Vec::new(),
            damage: None,
            damage_seen: 0,
            caps: Capabilities {
                xtest: true,
                shm: shm_ok,
                damage: damage_ok,
                xfixes: xfixes_ok,
                randr: randr_ok,
                formats: vec![WireFormat::Png, WireFormat::Webp, WireFormat::Jpeg],
            },
            expected: delivery::Expected::default(),
            xi_pointer,
            watched_focus: None,
            reacted: false,
        };
        if damage_ok {
            let id = driver.conn.generate_id().map_err(id_err)?;
            driver
                .conn
                .damage_create(id, root, damage::ReportLevel::NON_EMPTY)
                .map_err(conn_err)?
                .check()
                .map_err(reply_err)?;
            driver.damage = Some(id);
        }
        if shm_ok {
            let size = driver.screen_size()?;
            match shm::Segment::new(&driver.conn, frame_bytes(size)) {
                Ok(seg) => driver.segment = Some(seg),
                Err(e) => {
                    // A server on another host or in another IPC namespace
                    // cannot map our memfd: fall back to GetImage.
                    tracing::warn!(error = %e, "MIT-SHM attach failed; capturing with GetImage");
                    driver.caps.shm = false;
                }
            }
        }
        tracing::info!(
            spares = driver.keymap.spare_count(),
            shm = driver.caps.shm,
            damage = driver.caps.damage,
            xfixes = driver.caps.xfixes,
            xi2 = driver.xi_pointer.is_some(),
            "connected to the X display"
        );
        Ok(driver)
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), DriverError> {
        self.conn
            .xtest_fake_input(kind, detail, x11rb::CURRENT_TIME, self.root, x, y, 0)
            .map_err(conn_err)?;
        Ok(())
    }

    fn key_event(&mut self, keycode: u8, down: bool) -> Result<(), DriverError> {
        let kind = if down {
            xproto::KEY_PRESS_EVENT
        } else {
            xproto::KEY_RELEASE_EVENT
        };
        self.fake(kind, keycode, 0, 0)?;
        self.expected.key(keycode, down);
        Ok(())
    }

    /// The server's processed input state, in one round trip (both
    /// requests go out before either reply is read).
    fn observe(&mut self) -> Result<delivery::Observed, DriverError> {
        use x11rb::protocol::xproto::KeyButMask;
        enum Ptr<'c> {
            Xi(x11rb::cookie::Cookie<'c, RustConnection, xinput::XIQueryPointerReply>),
            Core(x11rb::cookie::Cookie<'c, RustConnection, xproto::QueryPointerReply>),
        }
        let ptr = match self.xi_pointer {
            Some(dev) => Ptr::Xi(
                self.conn
                    .xinput_xi_query_pointer(self.root, dev)
                    .map_err(conn_err)?,
            ),
            None => Ptr::Core(self.conn.query_pointer(self.root).map_err(conn_err)?),
        };
        let keys = if self.expected.needs_keys() {
            Some(self.conn.query_keymap().map_err(conn_err)?)
        } else {
            None
        };
        let mut seen = delivery::Observed::default();
        match ptr {
            Ptr::Xi(c) => {
                let r = c.reply().map_err(reply_err)?;
                // FP16.16 root coordinates.
                seen.x = (r.root_x >> 16) as i16;
                seen.y = (r.root_y >> 16) as i16;
                seen.buttons = delivery::Bits::from_words(&r.buttons);
            }
            Ptr::Core(c) => {
                let r = c.reply().map_err(reply_err)?;
                seen.x = r.root_x;
                seen.y = r.root_y;
                let mask = u16::from(r.mask);
                let core = [
                    KeyButMask::BUTTON1,
                    KeyButMask::BUTTON2,
                    KeyButMask::BUTTON3,
                    KeyButMask::BUTTON4,
                    KeyButMask::BUTTON5,
                ];
                for (b, m) in (1u8..).zip(core) {
                    seen.buttons.set(b, mask & u16::from(m) != 0);
                }
                // The core mask cannot show buttons 6 and up: take them as
                // delivered (the position and the other buttons still are
                // checked).
                for b in 6..=255u8 {
                    seen.buttons.set(b, self.expected.buttons.get(b));
                }
            }
        }
        if let Some(c) = keys {
            let r = c.reply().map_err(reply_err)?;
            seen.keys = Some(delivery::Bits::from_bytes(&r.keys));
        }
        Ok(seen)
    }

    /// The keycode for `keysym` and whether Shift is needed, binding a
    /// spare keycode when the layout has none.
    fn keycode_for(&mut self, keysym: u32) -> Result<(u8, bool), DriverError> {
        if let Some(found) = self.keymap.find(keysym) {
            return Ok(found);
        }
        let now = Instant::now();
        let rebind = self
            .keymap
            .bind(keysym, now)
            .ok_or(DriverError::NoKeycode(keysym))?;
        if !rebind.wait.is_zero() {
            // Let clients read the old binding first (see keymap docs).
            self.conn.flush().map_err(conn_err)?;
            std::thread::sleep(rebind.wait);
        }
        self.conn
            .change_keyboard_mapping(
                1,
                rebind.keycode,
                self.keymap.per_keycode(),
                &rebind.keysyms,
            )
            .map_err(conn_err)?;
        Ok((rebind.keycode, false))
    }

    fn handle_event(&mut self, event: Event) -> Result<bool, DriverError> {
        match event {
            Event::DamageNotify(_) => {
                self.damage_seen += 1;
                self.reacted = true;
                if let Some(d) = self.damage {
                    self.conn
                        .damage_subtract(d, x11rb::NONE, x11rb::NONE)
                        .map_err(conn_err)?;
                }
                return Ok(true);
            }
            // Our own rebinding of a spare also arrives here; only a change
            // made elsewhere needs the map re-read.
            Event::MappingNotify(ev)
                if ev.request == Mapping::KEYBOARD
                    && !(ev.count == 1 && self.keymap.is_spare(ev.first_keycode)) =>
            {
                let setup = self.conn.setup();
                let (min, max) = (setup.min_keycode, setup.max_keycode);
                let km = self
                    .conn
                    .get_keyboard_mapping(min, max - min + 1)
                    .map_err(conn_err)?
                    .reply()
                    .map_err(reply_err)?;
                self.keymap.replace(min, km.keysyms_per_keycode, km.keysyms);
            }
            Event::Error(e) => {
                tracing::debug!(error = ?e.error_kind, "X error event");
            }
            _ => {}
        }
        Ok(false)
    }

    /// Handles queued events; returns whether any damage was among them.
    fn drain_events(&mut self) -> Result<bool, DriverError> {
        let mut damaged = false;
        while let Some(ev) = self.conn.poll_for_event().map_err(conn_err)? {
            damaged |= self.handle_event(ev)?;
        }
        Ok(damaged)
    }

    /// The window holding the input focus now (one round trip).
    fn focus(&self) -> Result<Window, DriverError> {
        Ok(self
            .conn
            .get_input_focus()
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?
            .focus)
    }

    fn wait_readable(&self, timeout: Duration) -> Result<(), DriverError> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let fd = self.conn.stream();
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(DriverError::Display(format!(
                "poll on the X connection: {e}"
            ))),
        }
    }
}

fn frame_bytes(size: Size) -> usize {
    size.width as usize * size.height as usize * 4
}

impl Driver for X11Driver {
    /// The root window's geometry is the screen size; a RandR resize
    /// changes it, so it is read per request (one round trip) rather than
    /// cached.
    fn screen_size(&mut self) -> Result<Size, DriverError> {
        let g = self
            .conn
            .get_geometry(self.root)
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;
        Ok(Size::new(u32::from(g.width), u32::from(g.height)))
    }

    fn motion(&mut self, x: u32, y: u32) -> Result<(), DriverError> {
        let (x, y) = (clamp_i16(x), clamp_i16(y));
        self.fake(xproto::MOTION_NOTIFY_EVENT, 0, x, y)?;
        self.expected.motion(x, y);
        Ok(())
    }

    fn button(&mut self, button: u8, down: bool) -> Result<(), DriverError> {
        let kind = if down {
            xproto::BUTTON_PRESS_EVENT
        } else {
            xproto::BUTTON_RELEASE_EVENT
        };
        self.fake(kind, button, 0, 0)?;
        self.expected.button(button, down);
        Ok(())
    }

    fn key(&mut self, keysym: Keysym, down: bool) -> Result<(), DriverError> {
        let (keycode, shift) = self.keycode_for(keysym.raw())?;
        if down {
            if shift {
                self.key_event(self.shift, true)?;
                self.shifted.push(keycode);
            }
            self.key_event(keycode, true)?;
            self.keymap.touch(keycode, Instant::now());
        } else {
            self.key_event(keycode, false)?;
            if let Some(i) = self.shifted.iter().position(|&k| k == keycode) {
                self.shifted.remove(i);
                self.key_event(self.shift, false)?;
            }
        }
        Ok(())
    }

    fn type_char(&mut self, c: char) -> Result<(), DriverError> {
        let keysym = Keysym::from_char(c);
        if keysym == Keysym::NoSymbol {
            return Err(DriverError::NoKeycode(c as u32));
        }
        let (keycode, shift) = self.keycode_for(keysym.raw())?;
        if shift {
            self.key_event(self.shift, true)?;
        }
        self.key_event(keycode, true)?;
        self.key_event(keycode, false)?;
        if shift {
            self.key_event(self.shift, false)?;
        }
        self.keymap.touch(keycode, Instant::now());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DriverError> {
        self.conn.flush().map_err(conn_err)
    }

    fn sync(&mut self) -> Result<(), DriverError> {
        self.conn
            .get_input_focus()
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;
        Ok(())
    }

    fn deliver(&mut self, deadline: Duration, cancel: &Cancel) -> Result<(), DriverError> {
        if !self.expected.dirty {
            return Ok(());
        }
        let start = Instant::now();
        // Replaying a click takes a window manager well under a
        // millisecond when idle: poll fast first, then back off.
        let mut pause = Duration::from_micros(50);
        loop {
            let seen = self.observe()?;
            let Some(what) = self.expected.mismatch(&seen) else {
                self.expected.delivered();
                return Ok(());
            };
            let waited = start.elapsed();
            if waited >= deadline {
                return Err(DriverError::InputBlocked(format!(
                    "{what} after {} ms; another X client keeps input frozen with a \
                     synchronous grab, so the next event was not sent",
                    waited.as_millis()
                )));
            }
            cancel.check()?;
            std::thread::sleep(pause.min(deadline - waited));
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }

    fn settle(&mut self, rule: settle::Rule, cancel: &Cancel) -> Result<bool, DriverError> {
        if self.damage.is_none() {
            // No DAMAGE: nothing to watch. Do not invent a sleep.
            return Ok(false);
        }
        let start = Instant::now();
        let mut quiet = settle::Quiet::new(rule);
        // Damage queued now was drawn since the last look (the batch's
        // start, `Driver::changes`): the reaction is under way. The
        // region is reset (each DamageNotify does it), so that old
        // damage cannot hide new.
        if self.drain_events()? {
            quiet.drawn_before();
        }
        if let Some(d) = self.damage {
            self.conn
                .damage_subtract(d, x11rb::NONE, x11rb::NONE)
                .map_err(conn_err)?;
        }
        self.conn.flush().map_err(conn_err)?;
        let settled = loop {
            if self.drain_events()? {
                quiet.damage(start.elapsed());
                self.conn.flush().map_err(conn_err)?;
            }
            match quiet.next(start.elapsed()) {
                settle::Next::Settled => break true,
                settle::Next::Capped => break false,
                settle::Next::Wait(w) => {
                    cancel.check()?;
                    self.wait_readable(w.min(Duration::from_millis(20)))?;
                }
            }
        };
        let (first, last, n) = quiet.summary();
        tracing::debug!(
            first_ms = first.map(|t| t.as_secs_f64() * 1e3),
            last_ms = last.map(|t| t.as_secs_f64() * 1e3),
            damages = n,
            waited_ms = start.elapsed().as_secs_f64() * 1e3,
            settled,
            "settled"
        );
        Ok(settled)
    }

    /// Damage (when the server has DAMAGE) and the focus window, read by
    /// GetInputFocus every few milliseconds: a window manager or a program
    /// moving the focus shows there whether or not it draws.
    fn watch(&mut self) -> Result<(), DriverError> {
        // Damage from before the shortcut is not its reaction; damage
        // queued from now on is, even when it comes before `react` (a
        // program answering within the delivery's round trip).
        self.drain_events()?;
        if let Some(d) = self.damage {
            self.conn
                .damage_subtract(d, x11rb::NONE, x11rb::NONE)
                .map_err(conn_err)?;
        }
        self.watched_focus = Some(self.focus()?);
        self.reacted = false;
        Ok(())
    }

    fn react(
        &mut self,
        quiet: Duration,
        cap: Duration,
        cancel: &Cancel,
    ) -> Result<Reaction, DriverError> {
        let start = Instant::now();
        let mut focus = match self.watched_focus.take() {
            Some(f) => f,
            None => self.focus()?,
        };
        let mut seen = Reaction::default();
        loop {
            self.drain_events()?;
            let mut moved = std::mem::take(&mut self.reacted);
            let now_focus = self.focus()?;
            if now_focus != focus {
                focus = now_focus;
                seen.focus_moved = true;
                moved = true;
            }
            let elapsed = start.elapsed();
            if moved {
                seen.first.get_or_insert(elapsed);
                seen.last = Some(elapsed);
                self.conn.flush().map_err(conn_err)?;
            }
            let quiet_for = seen.last.map(|l| elapsed.saturating_sub(l));
            if quiet_for.is_some_and(|q| q >= quiet) || elapsed >= cap {
                seen.waited = elapsed;
                seen.quiet = quiet_for.is_some_and(|q| q >= quiet);
                return Ok(seen);
            }
            cancel.check()?;
            let left = match quiet_for {
                Some(q) => (quiet - q).min(cap - elapsed),
                None => cap - elapsed,
            };
            self.wait_readable(left.min(Duration::from_millis(4)))?;
        }
    }

    fn capture(&mut self, region: Rect) -> Result<FrameView<'_>, DriverError> {
        let rect = (
            clamp_i16(region.x),
            clamp_i16(region.y),
            u16::try_from(region.width).unwrap_or(u16::MAX),
            u16::try_from(region.height).unwrap_or(u16::MAX),
        );
        let need = region.width as usize * region.height as usize * 4;
        if self.caps.shm {
            if self.segment.as_ref().is_some_and(|s| s.len() < need) {
                // The screen grew (RandR): a larger segment.
                if let Some(old) = self.segment.take() {
                    old.detach(&self.conn);
                }
            }
            if self.segment.is_none() {
                self.segment = Some(shm::Segment::new(&self.conn, need)?);
            }
            if let Some(seg) = self.segment.as_mut() {
                let data = seg.image(&self.conn, self.root, rect)?;
                return Ok(FrameView {
                    width: region.width,
                    height: region.height,
                    stride: region.width as usize * 4,
                    data,
                });
            }
        }
        let reply = self
            .conn
            .get_image(
                xproto::ImageFormat::Z_PIXMAP,
                self.root,
                rect.0,
                rect.1,
                rect.2,
                rect.3,
                !0,
            )
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;
        self.fallback = reply.data;
        if self.fallback.len() < need {
            return Err(DriverError::Protocol(format!(
                "GetImage returned {} bytes for a {}x{} region",
                self.fallback.len(),
                region.width,
                region.height
            )));
        }
        Ok(FrameView {
            width: region.width,
            height: region.height,
            stride: region.width as usize * 4,
            data: &self.fallback[..need],
        })
    }

    fn cursor(&mut self) -> Result<Option<CursorImage>, DriverError> {
        if !self.caps.xfixes {
            return Ok(None);
        }
        let c = self
            .conn
            .xfixes_get_cursor_image()
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;
        Ok(Some(CursorImage {
            x: i32::from(c.x) - i32::from(c.xhot),
            y: i32::from(c.y) - i32::from(c.yhot),
            width: u32::from(c.width),
            height: u32::from(c.height),
            argb: c.cursor_image,
        }))
    }

    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
    }

    fn changes(&mut self) -> Result<u64, DriverError> {
        if self.damage.is_some() {
            self.drain_events()?;
            self.conn.flush().map_err(conn_err)?;
        }
        Ok(self.damage_seen)
    }

    /// A round trip first: every DamageNotify the server generated before
    /// it got here has arrived and is counted. Then the damage region is
    /// emptied, in request order before any capture that follows, so that
    /// drawing after this point sends a new DamageNotify (the report level
    /// is NON_EMPTY: an empty region's first damage is always reported)
    /// while drawing before it is in that capture.
    fn mark(&mut self) -> Result<Option<u64>, DriverError> {
        let Some(d) = self.damage else {
            return Ok(None);
        };
        self.sync()?;
        self.drain_events()?;
        self.conn
            .damage_subtract(d, x11rb::NONE, x11rb::NONE)
            .map_err(conn_err)?;
        self.conn.flush().map_err(conn_err)?;
        Ok(Some(self.damage_seen))
    }

    fn pointer(&mut self) -> Result<Option<(i32, i32)>, DriverError> {
        let p = self
            .conn
            .query_pointer(self.root)
            .map_err(conn_err)?
            .reply()
            .map_err(reply_err)?;
        Ok(Some((i32::from(p.root_x), i32::from(p.root_y))))
    }

    /// Reads what the server queued meanwhile. Spare keycodes are not
    /// reverted here: each ChangeKeyboardMapping makes every client
    /// re-read the map (openbox re-grabs its keys), and under TCG that
    /// kept the window manager's click-to-focus grab frozen past the
    /// delivery deadline for the next click (see [`keymap`]).
    fn idle(&mut self) -> Result<(), DriverError> {
        self.drain_events().map(drop)
    }
}

impl Drop for X11Driver {
    fn drop(&mut self) {
        if let Some(seg) = self.segment.take() {
            seg.detach(&self.conn);
        }
        for r in self.keymap.unbind_all() {
            let _ = self.conn.change_keyboard_mapping(
                1,
                r.keycode,
                self.keymap.per_keycode(),
                &r.keysyms,
            );
        }
        let _ = self.conn.flush();
    }
}

fn clamp_i16(v: u32) -> i16 {
    i16::try_from(v).unwrap_or(i16::MAX)
}
