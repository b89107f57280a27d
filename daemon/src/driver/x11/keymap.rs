//! Keysym -> keycode, and spare keycodes for everything the layout lacks.
//!
//! Typing must not depend on the keyboard layout. A keysym found on a
//! keycode at level 0 is pressed as is; at level 1 with Shift. Anything
//! else (é on a US map, 中, ✓, emoji) is bound to a *spare* keycode with
//! ChangeKeyboardMapping, then pressed.
//!
//! Spares are the keycodes the map leaves empty plus those that carry only
//! XFree86 vendor keysyms (media and launcher keys no one types with);
//! keycodes in the modifier map are never taken. On Xvfb's default map that
//! is 19 + 95 keycodes, so a batch with up to ~114 distinct foreign
//! characters never rebinds a keycode it already used.
//!
//! Beyond that, spares are recycled least-recently-used, and a spare is
//! only rebound once [`REUSE_GUARD`] has passed since its last press: a
//! client re-reads the map after MappingNotify when it *handles* a key
//! event, so rebinding a keycode right after its release can make a busy
//! client (Firefox was measured to lag past 100 ms) read the *new* keysym
//! for the old event and type the wrong character. For the same reason a
//! binding stays until its spare is needed again or the driver ends (then
//! the keycodes get their original keysyms back), never reverted while a
//! client may still be reading it: reverted 2 s after typing, an xterm in
//! a VM under TCG lost the last foreign characters typed; reverted 30 s
//! after, the revert's MappingNotify storm (openbox re-grabs its keys for
//! each) kept the window manager's click-to-focus grab frozen past the
//! delivery deadline of the next click. A spare left bound costs nothing:
//! only XTEST presses it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Minimum time between two different bindings of one spare keycode.
pub const REUSE_GUARD: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
struct Slot {
    keycode: u8,
    /// What the keycode carried before we took it.
    original: Vec<u32>,
    keysym: Option<u32>,
    last_used: Option<Instant>,
}

/// Keysyms of the XFree86 vendor range (media, launcher, power keys).
fn is_vendor(keysym: u32) -> bool {
    (0x1008_ff00..=0x1008_ffff).contains(&keysym)
}

/// The server's keyboard map as this connection knows it.
#[derive(Debug, Clone)]
pub struct Keymap {
    min_keycode: u8,
    per_keycode: u8,
    /// `per_keycode` keysyms for each keycode from `min_keycode`.
    syms: Vec<u32>,
    /// keysym -> (keycode, needs shift), the lowest level winning.
    index: HashMap<u32, (u8, bool)>,
    slots: Vec<Slot>,
}

/// A binding to apply with ChangeKeyboardMapping: `keysyms` for `keycode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebind {
    pub keycode: u8,
    pub keysyms: Vec<u32>,
    /// Wait this long before applying (the reuse guard).
    pub wait: Duration,
}

impl Keymap {
    /// Builds the map from a GetKeyboardMapping reply covering
    /// `min_keycode..=max_keycode`. Empty keycodes and vendor-only keycodes
    /// not in `modifiers` become spares.
    pub fn new(min_keycode: u8, per_keycode: u8, syms: Vec<u32>, modifiers: &[u8]) -> Keymap {
        let mut map = Keymap {
            min_keycode,
            per_keycode: per_keycode.max(1),
            syms,
            index: HashMap::new(),
            slots: Vec::new(),
        };
        let keycodes: Vec<u8> = map.keycodes().collect();
        map.slots = keycodes
            .into_iter()
            .filter(|kc| !modifiers.contains(kc))
            .filter(|&kc| map.syms_of(kc).iter().all(|&s| s == 0 || is_vendor(s)))
            .map(|keycode| Slot {
                keycode,
                original: map.syms_of(keycode).to_vec(),
                keysym: None,
                last_used: None,
            })
            .collect();
        map.reindex();
        map
    }

    /// Replaces the map after another client changed it, keeping our own
    /// bindings (and not counting their keycodes as the layout's).
    pub fn replace(&mut self, min_keycode: u8, per_keycode: u8, syms: Vec<u32>) {
        self.min_keycode = min_keycode;
        self.per_keycode = per_keycode.max(1);
        self.syms = syms;
        self.reindex();
    }

    fn keycodes(&self) -> impl Iterator<Item = u8> + '_ {
        let n = self.syms.len() / usize::from(self.per_keycode);
        (0..n).filter_map(move |i| u8::try_from(usize::from(self.min_keycode) + i).ok())
    }

    fn syms_of(&self, keycode: u8) -> &[u32] {
        let per = usize::from(self.per_keycode);
        let i = usize::from(keycode - self.min_keycode) * per;
        &self.syms[i..i + per]
    }

    fn reindex(&mut self) {
        self.index.clear();
        let slots: Vec<u8> = self.slots.iter().map(|s| s.keycode).collect();
        for level in 0..2usize.min(usize::from(self.per_keycode)) {
            for kc in self.keycodes().collect::<Vec<_>>() {
                if slots.contains(&kc) {
                    continue;
                }
                let sym = self.syms_of(kc)[level];
                if sym != 0 {
                    self.index.entry(sym).or_insert((kc, level == 1));
                }
            }
        }
    }

    /// How many spare keycodes there are.
    pub fn spare_count(&self) -> usize {
        self.slots.len()
    }

    /// Whether `keycode` is one of our spares (so a MappingNotify for it
    /// is probably our own doing).
    pub fn is_spare(&self, keycode: u8) -> bool {
        self.slots.iter().any(|s| s.keycode == keycode)
    }

    /// The keycode carrying `keysym` now, and whether Shift is needed.
    pub fn find(&self, keysym: u32) -> Option<(u8, bool)> {
        if let Some(slot) = self.slots.iter().find(|s| s.keysym == Some(keysym)) {
            return Some((slot.keycode, false));
        }
        self.index.get(&keysym).copied()
    }

    /// Records a press of a spare keycode (for the LRU and the guard).
    pub fn touch(&mut self, keycode: u8, now: Instant) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.keycode == keycode) {
            slot.last_used = Some(now);
        }
    }

    /// Picks a spare for `keysym`: a free one first, else the least
    /// recently used. Returns the binding to apply, or `None` when there
    /// are no spares at all.
    pub fn bind(&mut self, keysym: u32, now: Instant) -> Option<Rebind> {
        let per = usize::from(self.per_keycode);
        let slot = self
            .slots
            .iter_mut()
            .min_by_key(|s| (s.keysym.is_some(), s.last_used))?;
        let wait = slot
            .last_used
            .map(|t| REUSE_GUARD.saturating_sub(now.saturating_duration_since(t)))
            .unwrap_or_default();
        slot.keysym = Some(keysym);
        // Level 0 and 1 both carry the keysym, so Shift (or Caps Lock on a
        // letter) cannot change what is typed.
        let mut keysyms = vec![0; per];
        keysyms[0] = keysym;
        if per > 1 {
            keysyms[1] = keysym;
        }
        Some(Rebind {
            keycode: slot.keycode,
            keysyms,
            wait,
        })
    }

    /// Unbinds every spare we bound; returns the bindings that restore the
    /// keycodes' original keysyms.
    pub fn unbind_all(&mut self) -> Vec<Rebind> {
        let per = usize::from(self.per_keycode);
        self.slots
            .iter_mut()
            .filter(|s| s.keysym.is_some())
            .map(|s| {
                s.keysym = None;
                let mut keysyms = s.original.clone();
                keysyms.resize(per, 0);
                Rebind {
                    keycode: s.keycode,
                    keysyms,
                    wait: Duration::ZERO,
                }
            })
            .collect()
    }

    /// Number of keysyms per keycode (for ChangeKeyboardMapping).
    pub fn per_keycode(&self) -> u8 {
        self.per_keycode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // keycodes 8..=14, 2 keysyms each: a/A, b/B, empty, 1/exclam, empty,
    // XF86AudioMute, and an empty keycode that is in the modifier map.
    fn sample() -> Keymap {
        Keymap::new(
            8,
            2,
            vec![
                0x61,
                0x41,
                0x62,
                0x42,
                0,
                0,
                0x31,
                0x21,
                0,
                0,
                0x1008_ff12,
                0,
                0,
                0,
            ],
            &[14],
        )
    }

    #[test]
    fn finds_levels_and_spares() {
        let m = sample();
        assert_eq!(m.find(0x61), Some((8, false)));
        assert_eq!(m.find(0x41), Some((8, true)));
        assert_eq!(m.find(0x21), Some((11, true)));
        assert_eq!(m.find(0xe9), None);
        // The empty keycodes and the vendor key, never the modifier.
        assert_eq!(m.spare_count(), 3);
        assert!(m.is_spare(10) && m.is_spare(12) && m.is_spare(13));
        assert!(!m.is_spare(8) && !m.is_spare(14));
        // A spare's own keysym is not offered for lookup: a press of
        // XF86AudioMute gets a binding like any other foreign keysym.
        assert_eq!(m.find(0x1008_ff12), None);
    }

    #[test]
    fn binds_free_spares_first_then_lru_with_guard() {
        let mut m = sample();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut used = Vec::new();
        for (i, ks) in [0xe9, 0x4e2d, 0x2713].into_iter().enumerate() {
            let r = m.bind(ks, t0).unwrap();
            assert_eq!(r.keysyms, vec![ks, ks]);
            assert_eq!(r.wait, Duration::ZERO, "a free spare needs no wait");
            m.touch(r.keycode, t0 + ms(i as u64 * 10));
            used.push(r.keycode);
        }
        assert_eq!(m.find(0xe9), Some((used[0], false)));
        // All spares taken: the least recently used (the first) is
        // recycled, and the guard asks to wait out the rest of REUSE_GUARD.
        let r = m.bind(0x1f642, t0 + ms(30)).unwrap();
        assert_eq!(r.keycode, used[0]);
        assert_eq!(r.wait, REUSE_GUARD - ms(30));
        assert_eq!(m.find(0xe9), None);
        // Reverting restores what the keycodes carried.
        let reverts = m.unbind_all();
        assert_eq!(reverts.len(), 3);
        let mute = reverts.iter().find(|r| r.keycode == 13).unwrap();
        assert_eq!(mute.keysyms, vec![0x1008_ff12, 0]);
        assert_eq!(m.find(0x2713), None);
    }

    #[test]
    fn no_spares_means_no_binding() {
        let mut m = Keymap::new(8, 1, vec![0x61], &[]);
        assert!(m.bind(0xe9, Instant::now()).is_none());
    }
}
