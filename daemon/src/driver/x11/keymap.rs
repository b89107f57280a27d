//! Keysym -> keycode, and spare keycodes for everything the layout lacks.
//!
//! Typing must not depend on the keyboard layout. A keysym found on a
//! keycode at level 0 is pressed as is; at level 1 with Shift. Anything
//! else (é on a US map, 中, ✓, emoji) is bound to a *spare* keycode (one
//! the server's map leaves empty) with ChangeKeyboardMapping, then pressed.
//!
//! Spares are recycled least-recently-used, and a spare is only rebound
//! once [`REUSE_GUARD`] has passed since its last press: a client that
//! receives MappingNotify re-reads the map when it next handles a key event,
//! so rebinding a keycode right after its release could make a slow client
//! read the *new* keysym for the old event and type the wrong character.
//! For the same reason bindings are reverted lazily (when the daemon has
//! been idle), never right after the release.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Minimum time between two different bindings of one spare keycode.
pub const REUSE_GUARD: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
struct Slot {
    keycode: u8,
    keysym: Option<u32>,
    last_used: Option<Instant>,
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
    /// `min_keycode..=max_keycode`. Keycodes with no keysym become spares.
    pub fn new(min_keycode: u8, per_keycode: u8, syms: Vec<u32>) -> Keymap {
        let mut map = Keymap {
            min_keycode,
            per_keycode: per_keycode.max(1),
            syms,
            index: HashMap::new(),
            slots: Vec::new(),
        };
        map.reindex();
        map.slots = map
            .keycodes()
            .filter(|&kc| map.syms_of(kc).iter().all(|&s| s == 0))
            .map(|keycode| Slot {
                keycode,
                keysym: None,
                last_used: None,
            })
            .collect();
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

    /// Unbinds every spare; returns the bindings (all NoSymbol) to apply.
    pub fn unbind_all(&mut self) -> Vec<Rebind> {
        let per = usize::from(self.per_keycode);
        self.slots
            .iter_mut()
            .filter(|s| s.keysym.is_some())
            .map(|s| {
                s.keysym = None;
                Rebind {
                    keycode: s.keycode,
                    keysyms: vec![0; per],
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

    // keycodes 8..=12, 2 keysyms each: a/A, b/B, empty, 1/exclam, empty.
    fn sample() -> Keymap {
        Keymap::new(8, 2, vec![0x61, 0x41, 0x62, 0x42, 0, 0, 0x31, 0x21, 0, 0])
    }

    #[test]
    fn finds_levels_and_spares() {
        let m = sample();
        assert_eq!(m.find(0x61), Some((8, false)));
        assert_eq!(m.find(0x41), Some((8, true)));
        assert_eq!(m.find(0x21), Some((11, true)));
        assert_eq!(m.find(0xe9), None);
        assert_eq!(m.spare_count(), 2);
        assert!(m.is_spare(10) && m.is_spare(12) && !m.is_spare(8));
    }

    #[test]
    fn binds_free_spares_first_then_lru_with_guard() {
        let mut m = sample();
        let t0 = Instant::now();
        let r1 = m.bind(0xe9, t0).unwrap();
        assert_eq!(r1.keysyms, vec![0xe9, 0xe9]);
        assert_eq!(r1.wait, Duration::ZERO);
        m.touch(r1.keycode, t0);
        let r2 = m.bind(0x4e2d, t0).unwrap();
        assert_ne!(r1.keycode, r2.keycode);
        m.touch(r2.keycode, t0 + Duration::from_millis(10));
        assert_eq!(m.find(0xe9), Some((r1.keycode, false)));
        // Both spares taken: the least recently used (r1) is recycled, and
        // the guard asks to wait out the rest of REUSE_GUARD.
        let r3 = m.bind(0x2713, t0 + Duration::from_millis(30)).unwrap();
        assert_eq!(r3.keycode, r1.keycode);
        assert_eq!(r3.wait, REUSE_GUARD - Duration::from_millis(30));
        assert_eq!(m.find(0xe9), None);
        assert_eq!(m.unbind_all().len(), 2);
        assert_eq!(m.find(0x2713), None);
    }

    #[test]
    fn no_spares_means_no_binding() {
        let mut m = Keymap::new(8, 1, vec![0x61]);
        assert!(m.bind(0xe9, Instant::now()).is_none());
    }
}
