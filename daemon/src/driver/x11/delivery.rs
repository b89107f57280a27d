//! Knowing that input was delivered before sending more.
//!
//! An X server freezes a device while a client holds a synchronous grab
//! on it: a window manager's click-to-focus grab (openbox, and any
//! click-to-focus manager) activates on the button press and holds the
//! pointer frozen until the manager replays the click. Events injected
//! meanwhile queue inside the server — buttons and motion for the frozen
//! pointer — while the keyboard, not frozen, goes straight through. A
//! batch sent without waiting then has its keys overtake its clicks (the
//! text lands in the window focused before the batch) and its queued
//! clicks replayed at the wrong place (docs/contract.md rule 2a;
//! docs/architecture.md, "Delivery before the next event").
//!
//! The server's own view of the devices tells when everything sent has
//! been processed: it updates a device's button and key state, and the
//! pointer position it reports, only when it processes an event, never
//! while the event sits in a frozen queue. [`Expected`] keeps what that
//! state must be once all our events are processed; [`Observed`] is what
//! one round trip (XIQueryPointer on the master pointer, QueryKeymap) reads
//! back. Only the buttons and keys we touched since the last match are
//! compared, so another client's input never blocks ours.

/// A 256-bit set (keycodes, or button numbers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bits([u8; 32]);

impl Bits {
    pub fn set(&mut self, i: u8, on: bool) {
        let (byte, bit) = (usize::from(i / 8), i % 8);
        if on {
            self.0[byte] |= 1 << bit;
        } else {
            self.0[byte] &= !(1 << bit);
        }
    }

    pub fn get(&self, i: u8) -> bool {
        self.0[usize::from(i / 8)] & (1 << (i % 8)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }

    /// From X's little-endian bit order in bytes (QueryKeymap's `keys`).
    pub fn from_bytes(bytes: &[u8]) -> Bits {
        let mut b = Bits::default();
        for (dst, src) in b.0.iter_mut().zip(bytes) {
            *dst = *src;
        }
        b
    }

    /// From X's button mask in 32-bit words (XIQueryPointer's `buttons`).
    pub fn from_words(words: &[u32]) -> Bits {
        let mut b = Bits::default();
        for (i, w) in words.iter().take(8).enumerate() {
            b.0[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Bits where `self` and `other` differ, among `mask`.
    fn differ_in(&self, other: &Bits, mask: &Bits) -> Option<u8> {
        (0..=255u8).find(|&i| mask.get(i) && self.get(i) != other.get(i))
    }
}

/// What the server's state must be once every event we sent has been
/// processed.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    /// Where the last motion put the pointer (None: no motion since the
    /// last match).
    pub pointer: Option<(i16, i16)>,
    pub buttons: Bits,
    pub buttons_touched: Bits,
    pub keys: Bits,
    pub keys_touched: Bits,
    /// Whether anything was sent since the last match.
    pub dirty: bool,
}

impl Expected {
    pub fn motion(&mut self, x: i16, y: i16) {
        self.pointer = Some((x, y));
        self.dirty = true;
    }

    pub fn button(&mut self, button: u8, down: bool) {
        self.buttons.set(button, down);
        self.buttons_touched.set(button, true);
        self.dirty = true;
    }

    pub fn key(&mut self, keycode: u8, down: bool) {
        self.keys.set(keycode, down);
        self.keys_touched.set(keycode, true);
        self.dirty = true;
    }

    /// Whether a keymap read is needed to check delivery.
    pub fn needs_keys(&self) -> bool {
        !self.keys_touched.is_empty()
    }

    /// Compares with what the server reports; `None` when it matches, else
    /// what still differs (for the error message).
    pub fn mismatch(&self, seen: &Observed) -> Option<String> {
        if let Some((x, y)) = self.pointer
            && (seen.x, seen.y) != (x, y)
        {
            return Some(format!(
                "the pointer is still at {},{} (sent to {x},{y})",
                seen.x, seen.y
            ));
        }
        if let Some(b) = self.buttons.differ_in(&seen.buttons, &self.buttons_touched) {
            let want = if self.buttons.get(b) { "down" } else { "up" };
            return Some(format!("button {b} is not {want} yet"));
        }
        if let Some(keys) = &seen.keys
            && let Some(k) = self.keys.differ_in(keys, &self.keys_touched)
        {
            let want = if self.keys.get(k) { "down" } else { "up" };
            return Some(format!("keycode {k} is not {want} yet"));
        }
        None
    }

    /// Everything sent so far was delivered: start comparing afresh.
    pub fn delivered(&mut self) {
        self.pointer = None;
        self.buttons_touched = Bits::default();
        self.keys_touched = Bits::default();
        self.dirty = false;
    }
}

/// The server's processed state, read in one round trip.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub x: i16,
    pub y: i16,
    pub buttons: Bits,
    /// Only read when keys were touched.
    pub keys: Option<Bits>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_release_is_seen_as_a_button_still_down() {
        let mut e = Expected::default();
        e.motion(10, 20);
        e.button(1, true);
        e.button(1, false);
        let mut frozen = Observed {
            x: 10,
            y: 20,
            ..Observed::default()
        };
        frozen.buttons.set(1, true);
        assert_eq!(
            e.mismatch(&frozen).as_deref(),
            Some("button 1 is not up yet")
        );
        frozen.buttons.set(1, false);
        assert_eq!(e.mismatch(&frozen), None);
    }

    #[test]
    fn a_queued_motion_is_seen_as_the_pointer_elsewhere() {
        let mut e = Expected::default();
        e.motion(300, 40);
        let seen = Observed {
            x: 5,
            y: 40,
            ..Observed::default()
        };
        assert!(e.mismatch(&seen).unwrap().contains("still at 5,40"));
    }

    #[test]
    fn keys_are_compared_only_when_read_and_only_where_touched() {
        let mut e = Expected::default();
        e.key(38, true);
        e.key(38, false);
        e.key(50, true);
        let mut keys = Bits::default();
        keys.set(50, true);
        keys.set(99, true); // another client's key: not ours to wait for
        let mut seen = Observed {
            keys: Some(keys),
            ..Observed::default()
        };
        assert_eq!(e.mismatch(&seen), None);
        keys.set(38, true); // our release still queued
        seen.keys = Some(keys);
        assert_eq!(
            e.mismatch(&seen).as_deref(),
            Some("keycode 38 is not up yet")
        );
        e.delivered();
        assert!(!e.dirty && !e.needs_keys());
        assert_eq!(e.mismatch(&seen), None);
    }

    #[test]
    fn button_words_and_key_bytes_use_x_bit_order() {
        let b = Bits::from_words(&[1 << 1 | 1 << 9, 1]);
        assert!(b.get(1) && b.get(9) && b.get(32) && !b.get(0) && !b.get(2));
        let k = Bits::from_bytes(&[0, 0b100]);
        assert!(k.get(10) && !k.get(9));
    }
}
