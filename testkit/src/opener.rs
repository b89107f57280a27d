//! A test X client that opens a window on a shortcut, like a real program:
//! a browser focusing its address bar, an editor its find bar.
//!
//! Its first window covers the screen and has the focus. On Ctrl+L it is
//! busy for a while (`delay`: a program answering its page first, or
//! building a dialog), then maps a second, smaller window and gives it
//! the focus once mapped. Every key each window receives is recorded, so
//! a test sees where the keys typed after the shortcut landed.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use x11rb::connection::Connection as _;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    ClientMessageEvent, ConnectionExt as _, CreateWindowAux, EventMask, InputFocus, KeyButMask,
    Mapping, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

use crate::recorder::{Keymap, Rec};

const STOP: u32 = 0x5354_4f50; // "STOP"

/// What each window received.
#[derive(Debug, Clone, Default)]
pub struct Opened {
    /// Keys the first window received (the shortcut among them).
    pub first: Vec<Rec>,
    /// Keys the second window received.
    pub second: Vec<Rec>,
    /// When the second window got the focus, after the shortcut's press.
    pub focused_after: Option<Duration>,
}

/// The running client; stopped on drop.
#[derive(Debug)]
pub struct Opener {
    state: Arc<Mutex<Opened>>,
    conn: RustConnection,
    window: u32,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Opener {
    /// Starts on `display`; returns once the first window is mapped and
    /// focused. `delay` is how long it takes between Ctrl+L's press and
    /// mapping the second window.
    pub fn start(display: &str, delay: Duration) -> Opener {
        let state = Arc::new(Mutex::new(Opened::default()));
        let (tx, rx) = mpsc::channel();
        let st = Arc::clone(&state);
        let d = display.to_string();
        let thread = std::thread::spawn(move || run(&d, delay, &st, &tx));
        let window = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the opener did not start");
        let (conn, _) = RustConnection::connect(Some(display)).expect("second connection");
        Opener {
            state,
            conn,
            window,
            thread: Some(thread),
        }
    }

    /// A copy of what was recorded so far.
    pub fn opened(&self) -> Opened {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until `pred` holds (or the timeout passes) and returns the
    /// record.
    pub fn wait_until(&self, timeout: Duration, pred: impl Fn(&Opened) -> bool) -> Opened {
        let end = Instant::now() + timeout;
        loop {
            let o = self.opened();
            if pred(&o) || Instant::now() >= end {
                return o;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Opener {
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

fn window(conn: &RustConnection, at: (i16, i16), size: (u16, u16), color: u32) -> u32 {
    let root = conn.setup().roots[0].root;
    let win = conn.generate_id().expect("window id");
    conn.create_window(
        24,
        win,
        root,
        at.0,
        at.1,
        size.0,
        size.1,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new()
            .override_redirect(1)
            .background_pixel(color)
            .event_mask(
                EventMask::KEY_PRESS | EventMask::KEY_RELEASE | EventMask::STRUCTURE_NOTIFY,
            ),
    )
    .expect("create window");
    win
}

/// Maps `win`, waits until it is mapped, and focuses it; the other
/// events that came meanwhile go to `later`, in order.
fn map_and_focus(conn: &RustConnection, win: u32, later: &mut VecDeque<Event>) {
    conn.map_window(win).expect("map");
    conn.flush().expect("flush");
    loop {
        let ev = conn.wait_for_event().expect("opener: X connection");
        if matches!(ev, Event::MapNotify(m) if m.window == win) {
            break;
        }
        later.push_back(ev);
    }
    conn.set_input_focus(InputFocus::POINTER_ROOT, win, x11rb::CURRENT_TIME)
        .expect("focus");
    conn.flush().expect("flush");
}

fn run(display: &str, delay: Duration, state: &Mutex<Opened>, ready: &mpsc::Sender<u32>) {
    let (conn, screen_num) = RustConnection::connect(Some(display)).expect("opener connection");
    let screen = &conn.setup().roots[screen_num];
    let size = (screen.width_in_pixels, screen.height_in_pixels);
    let first = window(&conn, (0, 0), size, 0x0030_5070);
    let mut later = VecDeque::new();
    map_and_focus(&conn, first, &mut later);
    conn.sync().expect("sync");
    let second = window(&conn, (40, 40), (size.0 / 2, 60), 0x00e0_e0e0);
    let mut keymap = Keymap::fetch(&conn);
    let _ = ready.send(first);
    let mut opened = false;
    loop {
        let event = match later.pop_front() {
            Some(e) => e,
            None => match conn.wait_for_event() {
                Ok(e) => e,
                Err(_) => return,
            },
        };
        match event {
            Event::MappingNotify(m) if m.request == Mapping::KEYBOARD => {
                keymap = Keymap::fetch(&conn);
            }
            Event::KeyPress(k) | Event::KeyRelease(k) => {
                let down = k.response_type & 0x7f == x11rb::protocol::xproto::KEY_PRESS_EVENT;
                let state_bits = u16::from(k.state);
                let shifted = state_bits & u16::from(KeyButMask::SHIFT) != 0;
                let (keysym, base) = keymap.lookup(k.detail, shifted);
                let rec = Rec::Key {
                    keycode: k.detail,
                    down,
                    keysym,
                    base,
                    state: state_bits,
                };
                let to_second = k.event == second;
                {
                    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
                    if to_second {
                        s.second.push(rec);
                    } else {
                        s.first.push(rec);
                    }
                }
                let ctrl = state_bits & u16::from(KeyButMask::CONTROL) != 0;
                if down && ctrl && base == u32::from(b'l') && !opened {
                    opened = true;
                    let t = Instant::now();
                    // Busy: events queue meanwhile, as in a real program.
                    std::thread::sleep(delay);
                    map_and_focus(&conn, second, &mut later);
                    conn.sync().expect("sync");
                    state
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .focused_after = Some(t.elapsed());
                }
            }
            Event::ClientMessage(c) if c.data.as_data32()[0] == STOP => return,
            _ => {}
        }
    }
}
