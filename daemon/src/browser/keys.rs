//! Keys as WebDriver BiDi's input module names them: the named keys of the
//! WebDriver spec's table (Private Use code points) for the names models
//! use, single characters as themselves, and typed text as key pairs.

use serde_json::{Value, json};

/// WebDriver's code for a key name, or the single character itself.
pub(super) fn key_value(name: &str) -> Option<String> {
    let code = match name.to_ascii_lowercase().as_str() {
        "enter" | "return" => '\u{E007}',
        "tab" => '\u{E004}',
        "escape" | "esc" => '\u{E00C}',
        "backspace" => '\u{E003}',
        "delete" | "del" => '\u{E017}',
        "insert" => '\u{E016}',
        "space" | " " => ' ',
        "arrowup" | "up" => '\u{E013}',
        "arrowdown" | "down" => '\u{E015}',
        "arrowleft" | "left" => '\u{E012}',
        "arrowright" | "right" => '\u{E014}',
        "home" => '\u{E011}',
        "end" => '\u{E010}',
        "pageup" => '\u{E00E}',
        "pagedown" => '\u{E00F}',
        "control" | "ctrl" => '\u{E009}',
        "alt" => '\u{E00A}',
        "shift" => '\u{E008}',
        "meta" | "super" | "cmd" | "command" | "win" => '\u{E03D}',
        "f1" => '\u{E031}',
        "f2" => '\u{E032}',
        "f3" => '\u{E033}',
        "f4" => '\u{E034}',
        "f5" => '\u{E035}',
        "f6" => '\u{E036}',
        "f7" => '\u{E037}',
        "f8" => '\u{E038}',
        "f9" => '\u{E039}',
        "f10" => '\u{E03A}',
        "f11" => '\u{E03B}',
        "f12" => '\u{E03C}',
        _ => {
            let mut chars = name.chars();
            let c = chars.next()?;
            if chars.next().is_some() || c.is_control() {
                return None;
            }
            return Some(c.to_string());
        }
    };
    Some(code.to_string())
}

pub(super) fn typed_keys(text: &str) -> Vec<Value> {
    let mut steps = Vec::with_capacity(text.len() * 2);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let value = match c {
            '\r' if chars.peek() == Some(&'\n') => continue,
            '\n' | '\r' => "\u{E007}".to_string(),
            '\t' => "\u{E004}".to_string(),
            c => c.to_string(),
        };
        steps.push(json!({"type": "keyDown", "value": value}));
        steps.push(json!({"type": "keyUp", "value": value}));
    }
    steps
}

/// WebDriver's codes for `keys`, or `unknown_key` naming the first name
/// it does not know.
pub(super) fn key_values(keys: &[String]) -> Result<Vec<String>, sandtop_protocol::ErrorBody> {
    keys.iter()
        .map(|k| {
            key_value(k).ok_or_else(|| {
                sandtop_protocol::ErrorBody::new(
                    sandtop_protocol::ErrorCode::UnknownKey,
                    format!("`keys`: unknown key name {k:?}"),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_map_to_webdriver_codes_or_single_characters() {
        assert_eq!(key_value("Enter").as_deref(), Some("\u{E007}"));
        assert_eq!(key_value("CTRL").as_deref(), Some("\u{E009}"));
        assert_eq!(key_value("a").as_deref(), Some("a"));
        assert_eq!(key_value("é").as_deref(), Some("é"));
        assert_eq!(key_value("NoSuchKey"), None);
        assert_eq!(key_value("\u{7}"), None);
    }

    #[test]
    fn typed_text_becomes_key_pairs_with_newlines_as_enter() {
        let steps = typed_keys("a\r\nb");
        let values: Vec<&str> = steps.iter().map(|s| s["value"].as_str().unwrap()).collect();
        assert_eq!(values, ["a", "a", "\u{E007}", "\u{E007}", "b", "b"]);
    }
}
