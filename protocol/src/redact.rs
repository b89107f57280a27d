//! Credential-like text, redacted where guest text is shown to a model or
//! stored: the console lines of `read_diagnostics` (daemon) and tab titles
//! (host, and the Python driver by the same rules, checked against the
//! same vectors: `crates/sandtop-agent/src/browser/toolset/tab_vectors.json`).
//!
//! Redaction is by known shapes, not a guarantee: `password=…`,
//! `token: …` (a key naming a secret, with its value or before the next
//! word), `Bearer …`, `Basic …`, JWTs (`eyJ….….…`) and long runs of token
//! characters (32 or more). Words are split on white space and joined by
//! single spaces.

/// Words that name a secret, alone (`password:`) or with their value
/// (`token=abc`).
pub const SECRET_KEYS: [&str; 10] = [
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "apikey",
    "api_key",
    "authorization",
    "cookie",
    "session",
];

/// What stands for a redacted part.
pub const REDACTED: &str = "[redacted]";

/// `text` with its credential-like parts replaced by [`REDACTED`], words
/// joined by single spaces.
pub fn secrets(text: &str) -> String {
    text.split_whitespace()
        .scan(false, |redact_next, w| {
            let scheme = matches!(w.to_ascii_lowercase().as_str(), "bearer" | "basic");
            let out = if *redact_next && !scheme {
                *redact_next = false;
                REDACTED.to_string()
            } else {
                word(w, redact_next)
            };
            Some(out)
        })
        .collect::<Vec<String>>()
        .join(" ")
}

fn word(w: &str, redact_next: &mut bool) -> String {
    let lower = w.to_ascii_lowercase();
    if lower == "bearer" || lower == "basic" {
        *redact_next = true;
        return w.to_string();
    }
    for sep in ['=', ':'] {
        if let Some((k, v)) = w.split_once(sep) {
            let key = k.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_');
            if SECRET_KEYS
                .iter()
                .any(|s| key.to_ascii_lowercase().contains(s))
            {
                if v.is_empty() {
                    *redact_next = true;
                    return w.to_string();
                }
                return format!("{k}{sep}{REDACTED}");
            }
        }
    }
    // A JWT, or a long run of token characters: a secret more often than not.
    let tokenish = w.len() >= 32
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+/=".contains(c));
    if (lower.starts_with("eyj") && w.matches('.').count() == 2) || tokenish {
        return REDACTED.into();
    }
    w.to_string()
}

/// A character shown visibly instead of acting on the text: C0 controls
/// and DEL as their Unicode control pictures (U+2400..U+2421), C1 controls
/// and the invisible formatting characters (zero-width, bidi overrides and
/// isolates, the byte-order mark, line and paragraph separators) as
/// `<U+XXXX>`.
pub fn visible(c: char) -> Option<String> {
    let n = c as u32;
    match n {
        0x00..=0x1f => char::from_u32(0x2400 + n).map(String::from),
        0x7f => Some("\u{2421}".into()),
        0x80..=0x9f
        | 0x200b..=0x200f
        | 0x2028..=0x202e
        | 0x2060..=0x2064
        | 0x2066..=0x2069
        | 0xfeff => Some(format!("<U+{n:04X}>")),
        _ => None,
    }
}

/// A tab title as a model may see it: control and invisible formatting
/// characters made visible ([`visible`]), credential-like parts redacted
/// ([`secrets`]), then cut to `max` bytes at a character boundary. The
/// flag says whether it was cut.
pub fn title(raw: &str, max: usize) -> (String, bool) {
    let shown: String = raw
        .chars()
        .map(|c| visible(c).unwrap_or_else(|| c.to_string()))
        .collect();
    let mut t = secrets(&shown);
    if t.len() <= max {
        return (t, false);
    }
    let mut end = max;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t.truncate(end);
    (t, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_by_shape() {
        assert_eq!(
            secrets("sending password=hunter2 and token: abc Authorization: Bearer sk-live-123"),
            "sending password=[redacted] and token: [redacted] Authorization: Bearer [redacted]"
        );
        assert_eq!(
            secrets(
                "jwt eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl and key 0123456789abcdef0123456789abcdef"
            ),
            "jwt [redacted] and key [redacted]"
        );
        assert_eq!(secrets("  Inbox  (3) "), "Inbox (3)");
    }

    #[test]
    fn titles_show_controls_and_are_bounded() {
        assert_eq!(
            title("a\u{1b}[2Jb\u{202e}c\u{7f}", 1024),
            ("a\u{241b}[2Jb<U+202E>c\u{2421}".to_string(), false)
        );
        let (t, cut) = title(&"é".repeat(600), 1024);
        assert!(cut && t.len() <= 1024 && t.chars().all(|c| c == 'é'));
    }
}
