//! Key names to X keysyms: which key names a computer action may use.
//!
//! The table lives here, beside the action types, so that the host checks a
//! model's key names by the same rules before anything is sent (a response
//! is checked whole before any of it runs) and the daemon resolves them to
//! keysyms with it. It is a table of names and numbers: no X connection.
//!
//! Models name keys in several dialects: the upper-case forms the computer
//! tool sends (`CTRL`, `ENTER`, `ARROWUP`), DOM `KeyboardEvent.key` values
//! (`Control`, `ArrowUp`, `PageDown`), xdotool names (`ctrl`, `super`,
//! `Page_Up`), X keysym names (`Control_L`, `KP_Enter`, `XF86AudioMute`) and
//! single characters. Lookup is case-insensitive and resolves in this order:
//!
//! 1. the alias table below (lower-cased, `-`/space folded to `_`);
//! 2. a single character: its keysym (letters fold to lower case, so `T` in
//!    `["CTRL", "SHIFT", "T"]` is the T key, not a shifted one);
//! 3. an X keysym name, exact case first, then case-insensitively;
//! 4. otherwise an error that names the key.

use std::collections::HashMap;
use std::sync::OnceLock;

pub use xkeysym::Keysym;

/// A key name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    pub name: String,
    hint: &'static str,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown key `{}`{}", self.name, self.hint)
    }
}

impl std::error::Error for UnknownKey {}

/// Aliases, keyed by the lower-cased name with `-` and ` ` folded to `_`.
const ALIASES: &[(&str, u32)] = &[
    // Modifiers.
    ("ctrl", xkeysym::key::Control_L),
    ("control", xkeysym::key::Control_L),
    ("lctrl", xkeysym::key::Control_L),
    ("rctrl", xkeysym::key::Control_R),
    ("ctrl_l", xkeysym::key::Control_L),
    ("ctrl_r", xkeysym::key::Control_R),
    ("shift", xkeysym::key::Shift_L),
    ("lshift", xkeysym::key::Shift_L),
    ("rshift", xkeysym::key::Shift_R),
    ("alt", xkeysym::key::Alt_L),
    ("lalt", xkeysym::key::Alt_L),
    ("ralt", xkeysym::key::Alt_R),
    ("option", xkeysym::key::Alt_L),
    ("altgr", xkeysym::key::ISO_Level3_Shift),
    ("altgraph", xkeysym::key::ISO_Level3_Shift),
    ("meta", xkeysym::key::Super_L),
    ("cmd", xkeysym::key::Super_L),
    ("command", xkeysym::key::Super_L),
    ("super", xkeysym::key::Super_L),
    ("win", xkeysym::key::Super_L),
    ("windows", xkeysym::key::Super_L),
    ("os", xkeysym::key::Super_L),
    ("capslock", xkeysym::key::Caps_Lock),
    ("numlock", xkeysym::key::Num_Lock),
    ("scrolllock", xkeysym::key::Scroll_Lock),
    // Editing and whitespace.
    ("enter", xkeysym::key::Return),
    ("return", xkeysym::key::Return),
    ("esc", xkeysym::key::Escape),
    ("escape", xkeysym::key::Escape),
    ("tab", xkeysym::key::Tab),
    ("space", xkeysym::key::space),
    ("spacebar", xkeysym::key::space),
    ("backspace", xkeysym::key::BackSpace),
    ("bksp", xkeysym::key::BackSpace),
    ("delete", xkeysym::key::Delete),
    ("del", xkeysym::key::Delete),
    ("insert", xkeysym::key::Insert),
    ("ins", xkeysym::key::Insert),
    // Navigation.
    ("home", xkeysym::key::Home),
    ("end", xkeysym::key::End),
    ("pageup", xkeysym::key::Page_Up),
    ("page_up", xkeysym::key::Page_Up),
    ("pgup", xkeysym::key::Page_Up),
    ("prior", xkeysym::key::Prior),
    ("pagedown", xkeysym::key::Page_Down),
    ("page_down", xkeysym::key::Page_Down),
    ("pgdn", xkeysym::key::Page_Down),
    ("next", xkeysym::key::Next),
    ("up", xkeysym::key::Up),
    ("arrowup", xkeysym::key::Up),
    ("arrow_up", xkeysym::key::Up),
    ("down", xkeysym::key::Down),
    ("arrowdown", xkeysym::key::Down),
    ("arrow_down", xkeysym::key::Down),
    ("left", xkeysym::key::Left),
    ("arrowleft", xkeysym::key::Left),
    ("arrow_left", xkeysym::key::Left),
    ("right", xkeysym::key::Right),
    ("arrowright", xkeysym::key::Right),
    ("arrow_right", xkeysym::key::Right),
    // Misc.
    ("printscreen", xkeysym::key::Print),
    ("print_screen", xkeysym::key::Print),
    ("prtsc", xkeysym::key::Print),
    ("pause", xkeysym::key::Pause),
    ("break", xkeysym::key::Break),
    ("menu", xkeysym::key::Menu),
    ("contextmenu", xkeysym::key::Menu),
    ("apps", xkeysym::key::Menu),
    ("clear", xkeysym::key::Clear),
    ("help", xkeysym::key::Help),
    // DOM media and browser keys.
    ("audiovolumeup", xkeysym::key::XF86_AudioRaiseVolume),
    ("audiovolumedown", xkeysym::key::XF86_AudioLowerVolume),
    ("audiovolumemute", xkeysym::key::XF86_AudioMute),
    ("mediaplaypause", xkeysym::key::XF86_AudioPlay),
    ("mediastop", xkeysym::key::XF86_AudioStop),
    ("mediatracknext", xkeysym::key::XF86_AudioNext),
    ("mediatrackprevious", xkeysym::key::XF86_AudioPrev),
    ("browserback", xkeysym::key::XF86_Back),
    ("browserforward", xkeysym::key::XF86_Forward),
    ("browserrefresh", xkeysym::key::XF86_Reload),
    ("browserhome", xkeysym::key::XF86_HomePage),
    ("browsersearch", xkeysym::key::XF86_Search),
    // Punctuation by name (xdotool and DOM code names).
    ("plus", xkeysym::key::plus),
    ("minus", xkeysym::key::minus),
    ("equal", xkeysym::key::equal),
    ("equals", xkeysym::key::equal),
    ("comma", xkeysym::key::comma),
    ("period", xkeysym::key::period),
    ("dot", xkeysym::key::period),
    ("slash", xkeysym::key::slash),
    ("backslash", xkeysym::key::backslash),
    ("semicolon", xkeysym::key::semicolon),
    ("apostrophe", xkeysym::key::apostrophe),
    ("quote", xkeysym::key::apostrophe),
    ("grave", xkeysym::key::grave),
    ("backquote", xkeysym::key::grave),
    ("bracketleft", xkeysym::key::bracketleft),
    ("bracketright", xkeysym::key::bracketright),
];

/// X keysym names (`Return`, `XF86AudioMute`, ...) with their keysyms, and
/// a case-folded index for the case-insensitive pass.
struct NameTable {
    exact: HashMap<&'static str, u32>,
    folded: HashMap<String, u32>,
}

fn name_table() -> &'static NameTable {
    static TABLE: OnceLock<NameTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut exact = HashMap::new();
        let mut folded: HashMap<String, u32> = HashMap::new();
        // xkeysym only maps keysym -> name, so walk the ranges where named
        // keysyms live: the legacy 16-bit range, Unicode keysyms and the
        // XFree86 vendor range.
        let ranges = [
            0..=0xffff_u32,
            0x0100_0000..=0x0100_ffff,
            0x1008_fe00..=0x1008_ffff,
        ];
        for raw in ranges.into_iter().flatten() {
            let Some(full) = Keysym::new(raw).name() else {
                continue;
            };
            let name: &'static str = if let Some(rest) = full.strip_prefix("XK_") {
                rest
            } else if let Some(rest) = full.strip_prefix("XF86XK_") {
                // X spells these `XF86AudioMute`; keep the exact spelling
                // findable through the folded index below.
                let spelled = format!("XF86{rest}");
                folded.entry(spelled.to_ascii_lowercase()).or_insert(raw);
                continue;
            } else {
                continue;
            };
            exact.entry(name).or_insert(raw);
            // On a case collision (`Aacute`/`aacute`) keep the lower-case
            // keysym: the unshifted key.
            let key = name.to_ascii_lowercase();
            match folded.get(&key) {
                Some(&old) if name.chars().any(|c| c.is_ascii_uppercase()) && old != raw => {}
                _ => {
                    folded.insert(key, raw);
                }
            }
        }
        NameTable { exact, folded }
    })
}

/// Resolves a key name to a keysym. See the module docs for the order.
pub fn lookup(name: &str) -> Result<Keysym, UnknownKey> {
    let unknown = |hint: &'static str| UnknownKey {
        name: name.chars().take(64).collect(),
        hint,
    };
    if name.is_empty() {
        return Err(unknown(" (an empty key name)"));
    }
    // 2. A single character (checked before trimming: " " is the space key).
    let mut chars = name.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        let c = if c.is_ascii_uppercase() {
            c.to_ascii_lowercase()
        } else {
            c
        };
        let ks = match c {
            '\n' | '\r' => Keysym::Return,
            '\t' => Keysym::Tab,
            c if c.is_control() => Keysym::NoSymbol,
            _ => Keysym::from_char(c),
        };
        return if ks == Keysym::NoSymbol {
            Err(unknown(" (no keysym for this character)"))
        } else {
            Ok(ks)
        };
    }
    let trimmed = name.trim();
    let folded: String = trimmed
        .chars()
        .map(|c| match c {
            '-' | ' ' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    // 1. Aliases, and F1..F35.
    if let Some(&(_, raw)) = ALIASES.iter().find(|(alias, _)| *alias == folded) {
        return Ok(Keysym::new(raw));
    }
    if let Some(n) = folded.strip_prefix('f').and_then(|n| n.parse::<u32>().ok())
        && (1..=35).contains(&n)
    {
        return Ok(Keysym::new(xkeysym::key::F1 + n - 1));
    }
    // 3. X keysym names.
    let table = name_table();
    if let Some(&raw) = table.exact.get(trimmed) {
        return Ok(Keysym::new(raw));
    }
    if let Some(&raw) = table.folded.get(&trimmed.to_ascii_lowercase()) {
        return Ok(Keysym::new(raw));
    }
    if trimmed.contains('+') && trimmed.len() > 1 {
        return Err(unknown(
            " (send each key of a combination as its own element, e.g. [\"CTRL\", \"C\"])",
        ));
    }
    Err(unknown(""))
}

/// Whether a keysym is a modifier (held, not typed).
pub fn is_modifier(ks: Keysym) -> bool {
    ks.is_modifier_key() || ks.raw() == xkeysym::key::ISO_Level3_Shift
}

#[cfg(test)]
mod tests {
    use super::*;
    use xkeysym::key as k;

    #[test]
    fn names_models_send_resolve() {
        let table: &[(&str, u32)] = &[
            ("CTRL", k::Control_L),
            ("ctrl", k::Control_L),
            ("Control", k::Control_L),
            ("control_l", k::Control_L),
            ("Control_R", k::Control_R),
            ("ALT", k::Alt_L),
            ("Alt", k::Alt_L),
            ("SHIFT", k::Shift_L),
            ("Shift", k::Shift_L),
            ("META", k::Super_L),
            ("Meta", k::Super_L),
            ("CMD", k::Super_L),
            ("SUPER", k::Super_L),
            ("super", k::Super_L),
            ("WIN", k::Super_L),
            ("ENTER", k::Return),
            ("Enter", k::Return),
            ("RETURN", k::Return),
            ("Return", k::Return),
            ("ESC", k::Escape),
            ("ESCAPE", k::Escape),
            ("Escape", k::Escape),
            ("TAB", k::Tab),
            ("SPACE", k::space),
            (" ", k::space),
            ("BACKSPACE", k::BackSpace),
            ("Backspace", k::BackSpace),
            ("BackSpace", k::BackSpace),
            ("DELETE", k::Delete),
            ("Delete", k::Delete),
            ("INSERT", k::Insert),
            ("HOME", k::Home),
            ("END", k::End),
            ("PAGEUP", k::Page_Up),
            ("PageUp", k::Page_Up),
            ("Page_Up", k::Page_Up),
            ("PAGEDOWN", k::Page_Down),
            ("PageDown", k::Page_Down),
            ("Page_Down", k::Page_Down),
            ("ARROWUP", k::Up),
            ("ArrowUp", k::Up),
            ("UP", k::Up),
            ("Up", k::Up),
            ("ARROWDOWN", k::Down),
            ("DOWN", k::Down),
            ("ARROWLEFT", k::Left),
            ("ArrowLeft", k::Left),
            ("LEFT", k::Left),
            ("ARROWRIGHT", k::Right),
            ("RIGHT", k::Right),
            ("F1", k::F1),
            ("f5", k::F5),
            ("F12", k::F12),
            ("F24", k::F24),
            ("a", k::a),
            ("A", k::a),
            ("T", k::t),
            ("1", k::_1),
            ("/", k::slash),
            ("+", k::plus),
            ("-", k::minus),
            ("é", k::eacute),
            ("KP_Enter", k::KP_Enter),
            ("kp_enter", k::KP_Enter),
            ("XF86AudioMute", k::XF86_AudioMute),
            ("xf86audiomute", k::XF86_AudioMute),
            ("AudioVolumeUp", k::XF86_AudioRaiseVolume),
            ("Print", k::Print),
            ("PrintScreen", k::Print),
            ("ISO_Left_Tab", k::ISO_Left_Tab),
            ("Menu", k::Menu),
            ("CapsLock", k::Caps_Lock),
            ("Caps_Lock", k::Caps_Lock),
            ("comma", k::comma),
            ("minus", k::minus),
            ("equal", k::equal),
            ("Aacute", k::Aacute),
            ("aacute", k::aacute),
        ];
        for &(name, want) in table {
            let got = lookup(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.raw(), want, "{name}: got {:?}", got.name());
        }
        // F1..F24 all resolve.
        for n in 1..=24 {
            assert_eq!(lookup(&format!("F{n}")).unwrap().raw(), k::F1 + n - 1);
        }
    }

    #[test]
    fn unknown_keys_are_errors_that_name_them() {
        for bad in ["", "NOTAKEY", "F0", "F99", "ctrl+c", "\u{0}"] {
            let err = lookup(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
        assert!(
            lookup("ctrl+c")
                .unwrap_err()
                .to_string()
                .contains("own element")
        );
    }

    #[test]
    fn modifiers_are_recognised() {
        for m in ["CTRL", "ALT", "SHIFT", "META", "AltGr"] {
            assert!(is_modifier(lookup(m).unwrap()), "{m}");
        }
        for m in ["a", "ENTER", "F1"] {
            assert!(!is_modifier(lookup(m).unwrap()), "{m}");
        }
    }
}
