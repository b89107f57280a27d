//! A test X client that records every input event it receives.
//!
//! It maps one override-redirect window over the whole screen, takes the
//! keyboard focus, and logs pointer motion, buttons and keys with their
//! positions, modifier state and keysyms. Keysyms are read the way a real
//! Xlib client reads them: through its own copy of the keyboard map,
//! refreshed on MappingNotify, so a daemon that rebinds keycodes too
//! eagerly is caught typing the wrong character.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use x11rb::connection::Connection as _;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    AtomEnum, ClientMessageEvent, ConnectionExt as _, CreateGCAux, CreateWindowAux, EventMask,
    ImageFormat, InputFocus, KeyButMask, Mapping, PropMode, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    Motion {
        x: i16,
        y: i16,
    },
    Button {
        button: u8,
        down: bool,
        x: i16,
        y: i16,
        /// Modifier and button state at the event (X core `state`).
        state: u16,
        /// Server time (ms).
        time: u32,
    },
    Key {
        keycode: u8,
        down: bool,
        /// The keysym for this keycode and state, as a client reads it.
        keysym: u32,
        /// The keycode's level-0 keysym (the key's "name").
        base: u32,
        state: u16,
    },
}

impl Rec {
    pub fn is_key(&self) -> bool {
        matches!(self, Rec::Key { .. })
    }
}

/// The recording client.
#[derive(Debug)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Rec>>>,
    conn: RustConnection,
    pub window: u32,
    /// The window's top left corner on the screen (root coordinates).
    pub origin: (i16, i16),
    width: u16,
    height: u16,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where the recorder's window lives.
#[derive(Debug, Clone)]
enum Mode {
    /// Override-redirect over the whole screen, focused: no window manager
    /// ever sees it.
    Overlay,
    /// A normal top-level window a window manager manages (frames, focus,
    /// click-to-focus grabs), titled `title`, asking for this geometry;
    /// it does not take the focus itself.
    Managed {
        title: String,
        at: (i16, i16),
        size: (u16, u16),
    },
}

pub(crate) struct Keymap {
    min: u8,
    per: u8,
    syms: Vec<u32>,
}

impl Keymap {
    pub(crate) fn fetch(conn: &RustConnection) -> Keymap {
        let s = conn.setup();
        let (min, max) = (s.min_keycode, s.max_keycode);
        let r = conn
            .get_keyboard_mapping(min, max - min + 1)
            .expect("GetKeyboardMapping")
            .reply()
            .expect("GetKeyboardMapping reply");
        Keymap {
            min,
            per: r.keysyms_per_keycode,
            syms: r.keysyms,
        }
    }

    pub(crate) fn lookup(&self, keycode: u8, shifted: bool) -> (u32, u32) {
        let per = usize::from(self.per);
        let i = usize::from(keycode.saturating_sub(self.min)) * per;
        let row = self.syms.get(i..i + per).unwrap_or(&[]);
        let base = row.first().copied().unwrap_or(0);
        let shifted_sym = row.get(1).copied().unwrap_or(0);
        let sym = if shifted && shifted_sym != 0 {
            shifted_sym
        } else if !shifted && base != 0 {
            base
        } else {
            // Xlib: a keycode with only level 0 yields it for both states
            // (letters are case-converted, which keysym tests handle).
            base.max(shifted_sym)
        };
        (sym, base)
    }
}

const STOP: u32 = 0x5354_4f50; // "STOP"

impl Recorder {
    /// Starts recording on `display`; returns once the window is mapped
    /// and focused.
    pub fn start(display: &str) -> Recorder {
        Recorder::spawn(display, Mode::Overlay)
    }

    /// Starts recording in a normal window that a window manager manages
    /// (see [`crate::wm`]); returns once it is mapped. It does not take
    /// the focus: a test that wants it unfocused maps another window after
    /// it. `origin` tells where the manager placed it.
    pub fn start_managed(display: &str, title: &str, at: (i16, i16), size: (u16, u16)) -> Recorder {
        let mode = Mode::Managed {
            title: title.to_string(),
            at,
            size,
        };
        Recorder::spawn(display, mode)
    }

    fn spawn(display: &str, mode: Mode) -> Recorder {
        let events = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let ev = Arc::clone(&events);
        let d = display.to_string();
        let thread = std::thread::spawn(move || record(&d, &mode, &ev, &ready_tx));
        let (window, width, height) = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the recorder did not start");
        let (conn, screen_num) = RustConnection::connect(Some(display)).expect("second connection");
        let root = conn.setup().roots[screen_num].root;
        let t = conn
            .translate_coordinates(window, root, 0, 0)
            .expect("TranslateCoordinates")
            .reply()
            .expect("TranslateCoordinates reply");
        Recorder {
            events,
            conn,
            window,
            origin: (t.dst_x, t.dst_y),
            width,
            height,
            thread: Some(thread),
        }
    }

    /// The window's size.
    pub fn size(&self) -> (u16, u16) {
        (self.width, self.height)
    }

    /// Whether the window has the input focus now.
    pub fn has_focus(&self) -> bool {
        self.conn
            .get_input_focus()
            .ok()
            .and_then(|c| c.reply().ok())
            .is_some_and(|r| r.focus == self.window)
    }

    /// A copy of everything recorded so far.
    pub fn events(&self) -> Vec<Rec> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Forgets what was recorded.
    pub fn clear(&self) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Waits until `pred` holds for the recorded events (or the timeout
    /// passes) and returns them.
    pub fn wait_until(&self, timeout: Duration, pred: impl Fn(&[Rec]) -> bool) -> Vec<Rec> {
        let end = Instant::now() + timeout;
        loop {
            let evs = self.events();
            if pred(&evs) || Instant::now() >= end {
                return evs;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until no new event has arrived for `quiet`.
    pub fn wait_quiet(&self, quiet: Duration, timeout: Duration) -> Vec<Rec> {
        let end = Instant::now() + timeout;
        let mut n = usize::MAX;
        let mut since = Instant::now();
        loop {
            let evs = self.events();
            if evs.len() != n {
                n = evs.len();
                since = Instant::now();
            } else if since.elapsed() >= quiet || Instant::now() >= end {
                return evs;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Fills the window with `color(x, y) -> (r, g, b)`.
    pub fn draw(&self, color: impl Fn(u32, u32) -> (u8, u8, u8)) {
        let gc = self.conn.generate_id().expect("gc id");
        self.conn
            .create_gc(gc, self.window, &CreateGCAux::new())
            .expect("create gc");
        let (w, h) = (u32::from(self.width), u32::from(self.height));
        let rows = 32u32;
        let mut y0 = 0;
        while y0 < h {
            let n = rows.min(h - y0);
            let mut data = Vec::with_capacity((w * n * 4) as usize);
            for y in y0..y0 + n {
                for x in 0..w {
                    let (r, g, b) = color(x, y);
                    data.extend_from_slice(&[b, g, r, 0]);
                }
            }
            self.conn
                .put_image(
                    ImageFormat::Z_PIXMAP,
                    self.window,
                    gc,
                    self.width,
                    n as u16,
                    0,
                    y0 as i16,
                    0,
                    24,
                    &data,
                )
                .expect("put image");
            y0 += n;
        }
        self.conn.free_gc(gc).expect("free gc");
        self.conn.sync().expect("sync after drawing");
    }

    /// Keys currently down according to the server (QueryKeymap).
    pub fn keys_down(&self) -> Vec<u8> {
        let r = self
            .conn
            .query_keymap()
            .expect("QueryKeymap")
            .reply()
            .expect("QueryKeymap reply");
        let mut down = Vec::new();
        for (i, byte) in r.keys.iter().enumerate() {
            for bit in 0..8 {
                if byte & (1 << bit) != 0 {
                    down.push((i * 8 + bit) as u8);
                }
            }
        }
        down
    }

    /// Pointer buttons currently down according to the server.
    pub fn buttons_down(&self) -> u16 {
        let root = self.conn.setup().roots[0].root;
        let r = self
            .conn
            .query_pointer(root)
            .expect("QueryPointer")
            .reply()
            .expect("QueryPointer reply");
        u16::from(r.mask)
            & u16::from(
                KeyButMask::BUTTON1
                    | KeyButMask::BUTTON2
                    | KeyButMask::BUTTON3
                    | KeyButMask::BUTTON4
                    | KeyButMask::BUTTON5,
            )
    }

    /// The text the key presses spell, as a client would see it: each
    /// press's keysym as a character (Return is `\n`, Tab is `\t`);
    /// presses of modifiers and keys without a character are skipped.
    pub fn typed_text(events: &[Rec]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                Rec::Key {
                    down: true, keysym, ..
                } => match *keysym {
                    0xff0d => Some('\n'),
                    0xff09 => Some('\t'),
                    k => xkeysym::Keysym::new(k).key_char(),
                },
                _ => None,
            })
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let ev = ClientMessageEvent::new(32, self.window, x11rb::NONE, [STOP, 0, 0, 0, 0]);
        let _ = self
            .conn
            .send_event(false, self.window, EventMask::NO_EVENT, ev);
        let _ = self.conn.flush();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn record(
    display: &str,
    mode: &Mode,
    events: &Mutex<Vec<Rec>>,
    ready: &mpsc::Sender<(u32, u16, u16)>,
) {
    let (conn, screen_num) = RustConnection::connect(Some(display)).expect("recorder connection");
    let screen = &conn.setup().roots[screen_num];
    let root = screen.root;
    let win = conn.generate_id().expect("window id");
    let mask = EventMask::KEY_PRESS
        | EventMask::KEY_RELEASE
        | EventMask::BUTTON_PRESS
        | EventMask::BUTTON_RELEASE
        | EventMask::POINTER_MOTION
        | EventMask::STRUCTURE_NOTIFY;
    let (at, (w, h), override_redirect) = match mode {
        Mode::Overlay => ((0, 0), (screen.width_in_pixels, screen.height_in_pixels), 1),
        Mode::Managed { at, size, .. } => (*at, *size, 0),
    };
    conn.create_window(
        24,
        win,
        root,
        at.0,
        at.1,
        w,
        h,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new()
            .override_redirect(override_redirect)
            .background_pixel(0x0030_5070)
            .event_mask(mask),
    )
    .expect("create window");
    if let Mode::Managed { title, .. } = mode {
        conn.change_property8(
            PropMode::REPLACE,
            win,
            AtomEnum::WM_NAME,
            AtomEnum::STRING,
            title.as_bytes(),
        )
        .expect("WM_NAME");
        // WM_NORMAL_HINTS with USPosition | USSize (flags 1 | 2) and the
        // position and size asked for, so the manager places it there.
        let hints = [3u32, at.0 as u32, at.1 as u32, u32::from(w), u32::from(h)]
            .into_iter()
            .chain(std::iter::repeat_n(0, 13))
            .collect::<Vec<u32>>();
        conn.change_property32(
            PropMode::REPLACE,
            win,
            AtomEnum::WM_NORMAL_HINTS,
            AtomEnum::WM_SIZE_HINTS,
            &hints,
        )
        .expect("WM_NORMAL_HINTS");
    }
    conn.map_window(win).expect("map");
    conn.sync().expect("sync");
    match mode {
        Mode::Overlay => {
            conn.set_input_focus(InputFocus::POINTER_ROOT, win, x11rb::CURRENT_TIME)
                .expect("focus");
            conn.sync().expect("sync");
        }
        Mode::Managed { .. } => {
            // Mapped once the manager has framed and mapped it. A manager
            // still starting up can drop the map request (openbox does,
            // while it adopts the existing windows): ask again.
            let end = Instant::now() + Duration::from_secs(10);
            let mut asked = Instant::now();
            'mapped: loop {
                while let Some(ev) = conn.poll_for_event().expect("recorder: X connection") {
                    if matches!(ev, Event::MapNotify(m) if m.window == win) {
                        break 'mapped;
                    }
                }
                assert!(
                    Instant::now() < end,
                    "recorder: the window manager never mapped the window"
                );
                if asked.elapsed() > Duration::from_millis(500) {
                    conn.map_window(win).expect("map");
                    conn.flush().expect("flush");
                    asked = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let mut keymap = Keymap::fetch(&conn);
    let _ = ready.send((win, w, h));
    loop {
        let Ok(event) = conn.wait_for_event() else {
            return;
        };
        let rec = match event {
            Event::MappingNotify(m) if m.request == Mapping::KEYBOARD => {
                keymap = Keymap::fetch(&conn);
                None
            }
            Event::MotionNotify(m) => Some(Rec::Motion {
                x: m.root_x,
                y: m.root_y,
            }),
            Event::ButtonPress(b) | Event::ButtonRelease(b) => Some(Rec::Button {
                button: b.detail,
                down: b.response_type & 0x7f == x11rb::protocol::xproto::BUTTON_PRESS_EVENT,
                x: b.root_x,
                y: b.root_y,
                state: u16::from(b.state),
                time: b.time,
            }),
            Event::KeyPress(k) | Event::KeyRelease(k) => {
                let state = u16::from(k.state);
                let shifted = state & u16::from(KeyButMask::SHIFT) != 0;
                let (keysym, base) = keymap.lookup(k.detail, shifted);
                Some(Rec::Key {
                    keycode: k.detail,
                    down: k.response_type & 0x7f == x11rb::protocol::xproto::KEY_PRESS_EVENT,
                    keysym,
                    base,
                    state,
                })
            }
            Event::ClientMessage(c) if c.data.as_data32()[0] == STOP => return,
            _ => None,
        };
        if let Some(r) = rec {
            events.lock().unwrap_or_else(|p| p.into_inner()).push(r);
        }
    }
}
