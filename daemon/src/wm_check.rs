//! Whether the window manager is there *and* serving: the monitor's view
//! of the WM (health's `window_manager`).
//!
//! A compliant window manager sets `_NET_SUPPORTING_WM_CHECK` on the root
//! to a window that carries the same property pointing at itself; a dead
//! WM leaves the root property behind, but its window is gone. That check
//! is set early in a WM's start, though: openbox sets it, then loads its
//! theme and menus and grabs its key bindings, and only then runs its
//! event loop. On a fast machine that gap is milliseconds; in a VM under
//! software emulation it is seconds, and a key pressed in it (Super+T) is
//! lost. So when the WM advertises `_NET_REQUEST_FRAME_EXTENTS` (EWMH; a
//! message only its event loop answers, by setting `_NET_FRAME_EXTENTS`
//! on the asking window), the WM counts as present only once it has
//! answered one, sent from an unmapped window of ours. A WM that does not
//! advertise the message is judged by its check alone.

use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{
    AtomEnum, ChangeWindowAttributesAux, ClientMessageEvent, ConnectionExt as _, CreateWindowAux,
    EventMask, WindowClass,
};
use x11rb::rust_connection::RustConnection;

/// The atoms this module reads and sends.
#[derive(Debug, Clone, Copy)]
struct Atoms {
    check: u32,
    supported: u32,
    request: u32,
    extents: u32,
}

/// The monitor's window manager check, kept across its rounds on one X
/// connection (a new connection starts a new one).
#[derive(Debug)]
pub struct WmCheck {
    root: u32,
    atoms: Atoms,
    /// Our unmapped window that asks for frame extents.
    asker: Option<u32>,
    /// The WM's check window that answered (a restarted WM has a new one
    /// and must answer again).
    answered: Option<u32>,
}

impl WmCheck {
    /// Interns the atoms on `c`; `None` when the server does not answer.
    /// Property changes on the root (the WM's check appearing) are
    /// reported to `c` from now on, and on its asking window (the answer):
    /// the monitor wakes on them while it waits for the WM.
    pub fn new(c: &RustConnection, screen: usize) -> Option<WmCheck> {
        let atom = |name: &[u8]| -> Option<u32> {
            Some(c.intern_atom(false, name).ok()?.reply().ok()?.atom)
        };
        let root = c.setup().roots.get(screen)?.root;
        c.change_window_attributes(
            root,
            &ChangeWindowAttributesAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )
        .ok()?;
        Some(WmCheck {
            root,
            atoms: Atoms {
                check: atom(b"_NET_SUPPORTING_WM_CHECK")?,
                supported: atom(b"_NET_SUPPORTED")?,
                request: atom(b"_NET_REQUEST_FRAME_EXTENTS")?,
                extents: atom(b"_NET_FRAME_EXTENTS")?,
            },
            asker: None,
            answered: None,
        })
    }

    /// One round: whether a window manager is present and serving. Cheap
    /// once answered (two property reads); until then it (re)sends its
    /// request each round, so one lost before the WM listened is repeated.
    pub fn present(&mut self, c: &RustConnection) -> bool {
        let Some(wm) = self.wm_window(c) else {
            self.answered = None;
            return false;
        };
        if self.answered == Some(wm) {
            return true;
        }
        if !self.advertises_request(c) {
            self.answered = Some(wm);
            return true;
        }
        let Some(asker) = self.asker(c) else {
            // No window of ours (the server refused one): the check alone.
            return true;
        };
        if self.has_extents(c, asker) {
            let _ = c.delete_property(asker, self.atoms.extents);
            let _ = c.flush();
            self.answered = Some(wm);
            return true;
        }
        let msg = ClientMessageEvent::new(32, asker, self.atoms.request, [0u32; 5]);
        let _ = c.send_event(
            false,
            self.root,
            EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
            msg,
        );
        let _ = c.flush();
        false
    }

    /// The WM's check window, when it points at itself.
    fn wm_window(&self, c: &RustConnection) -> Option<u32> {
        let get = |w: u32| -> Option<u32> {
            c.get_property(false, w, self.atoms.check, AtomEnum::WINDOW, 0, 1)
                .ok()?
                .reply()
                .ok()?
                .value32()?
                .next()
        };
        get(self.root).filter(|w| get(*w) == Some(*w))
    }

    fn advertises_request(&self, c: &RustConnection) -> bool {
        c.get_property(
            false,
            self.root,
            self.atoms.supported,
            AtomEnum::ATOM,
            0,
            4096,
        )
        .ok()
        .and_then(|ck| ck.reply().ok())
        .and_then(|r| r.value32().map(|mut v| v.any(|a| a == self.atoms.request)))
        .unwrap_or(false)
    }

    fn has_extents(&self, c: &RustConnection, w: u32) -> bool {
        c.get_property(false, w, self.atoms.extents, AtomEnum::CARDINAL, 0, 4)
            .ok()
            .and_then(|ck| ck.reply().ok())
            .is_some_and(|r| r.value_len == 4)
    }

    fn asker(&mut self, c: &RustConnection) -> Option<u32> {
        if self.asker.is_none() {
            let w = c.generate_id().ok()?;
            c.create_window(
                0,
                w,
                self.root,
                -10,
                -10,
                1,
                1,
                0,
                WindowClass::INPUT_OUTPUT,
                0,
                &CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
            )
            .ok()?
            .check()
            .ok()?;
            self.asker = Some(w);
        }
        self.asker
    }
}
