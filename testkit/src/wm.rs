//! A window manager for the x11 tier, and finding client windows.
//!
//! Real desktops run a window manager, and a click-to-focus manager grabs
//! the pointer on every press until it has focused the window and replayed
//! the click: tests of input ordering need one. [`Openbox`] runs the
//! system's openbox with its default configuration on a test display.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{AtomEnum, ConnectionExt as _, Window};
use x11rb::rust_connection::RustConnection;

use crate::skip;

/// A running openbox, killed on drop.
#[derive(Debug)]
pub struct Openbox {
    child: Child,
}

impl Openbox {
    /// Starts openbox on `display` and waits until it manages the screen
    /// (it has set `_NET_SUPPORTING_WM_CHECK` on the root window). Returns
    /// `None` after printing why when openbox is missing (or panics when
    /// the x11 tier is required).
    pub fn start(display: &str) -> Option<Openbox> {
        if !skip::have("openbox") {
            skip::skip("x11", "openbox is not installed (make deps installs it)");
            return None;
        }
        let child = Command::new("openbox")
            .env("DISPLAY", display)
            // Its default configuration: no user rc.xml.
            .env("XDG_CONFIG_HOME", "/nonexistent")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning openbox");
        let wm = Openbox { child };
        let (conn, screen) = RustConnection::connect(Some(display)).expect("X connection");
        let root = conn.setup().roots[screen].root;
        let check = intern(&conn, "_NET_SUPPORTING_WM_CHECK");
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let r = conn
                .get_property(false, root, check, AtomEnum::WINDOW, 0, 1)
                .expect("GetProperty")
                .reply()
                .expect("GetProperty reply");
            if r.value_len > 0 {
                return Some(wm);
            }
            assert!(
                Instant::now() < end,
                "openbox did not start managing the screen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Openbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn intern(conn: &RustConnection, name: &str) -> u32 {
    conn.intern_atom(false, name.as_bytes())
        .expect("InternAtom")
        .reply()
        .expect("InternAtom reply")
        .atom
}

/// A client window on the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub window: Window,
    /// Top left corner in root coordinates.
    pub x: i16,
    pub y: i16,
    pub width: u16,
    pub height: u16,
}

impl Found {
    /// The centre, in root coordinates.
    pub fn centre(&self) -> (i32, i32) {
        (
            i32::from(self.x) + i32::from(self.width) / 2,
            i32::from(self.y) + i32::from(self.height) / 2,
        )
    }
}

/// Waits until a viewable window whose WM_NAME or _NET_WM_NAME is exactly
/// `title` exists on `display`, and returns where it is. Panics after
/// `timeout`.
pub fn wait_for_title(display: &str, title: &str, timeout: Duration) -> Found {
    let (conn, screen) = RustConnection::connect(Some(display)).expect("X connection");
    let root = conn.setup().roots[screen].root;
    let net_name = intern(&conn, "_NET_WM_NAME");
    let end = Instant::now() + timeout;
    loop {
        if let Some(f) = find(&conn, root, root, title, net_name) {
            return f;
        }
        assert!(
            Instant::now() < end,
            "no window titled {title:?} appeared within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn find(
    conn: &RustConnection,
    root: Window,
    win: Window,
    title: &str,
    net_name: u32,
) -> Option<Found> {
    let tree = conn.query_tree(win).ok()?.reply().ok()?;
    for child in tree.children {
        let attrs = conn.get_window_attributes(child).ok()?.reply().ok()?;
        if attrs.map_state != x11rb::protocol::xproto::MapState::VIEWABLE {
            continue;
        }
        for prop in [u32::from(AtomEnum::WM_NAME), net_name] {
            let r = conn
                .get_property(false, child, prop, AtomEnum::ANY, 0, 256)
                .ok()?
                .reply()
                .ok()?;
            if r.value == title.as_bytes() {
                let g = conn.get_geometry(child).ok()?.reply().ok()?;
                let t = conn
                    .translate_coordinates(child, root, 0, 0)
                    .ok()?
                    .reply()
                    .ok()?;
                return Some(Found {
                    window: child,
                    x: t.dst_x,
                    y: t.dst_y,
                    width: g.width,
                    height: g.height,
                });
            }
        }
        if let Some(f) = find(conn, root, child, title, net_name) {
            return Some(f);
        }
    }
    None
}

/// The window that has the input focus on `display`.
pub fn focused(display: &str) -> Window {
    let (conn, _) = RustConnection::connect(Some(display)).expect("X connection");
    conn.get_input_focus()
        .expect("GetInputFocus")
        .reply()
        .expect("GetInputFocus reply")
        .focus
}
