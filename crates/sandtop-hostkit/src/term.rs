//! Text from outside the host, made safe to print on a terminal.
//!
//! Anything the guest, the model or a web page wrote (ask_user questions,
//! safety-check messages, final answers, error messages, origins, versions,
//! container logs) may hold control and escape sequences: CSI (clear the
//! screen, move the cursor to paint a fake prompt), OSC 52 (write the
//! operator's clipboard), BEL, backspaces and carriage returns (overwrite
//! what was printed), C1 controls (U+0080..U+009F, which some terminals
//! read as ESC-sequences), and bidirectional overrides (show text in
//! another order than it is). [`safe`] is the one place that neutralises
//! them: each such character is replaced by a visible escape (`\x1b`,
//! `\u{202e}`), so nothing is hidden and nothing is interpreted. Every
//! other character, non-ASCII text included, is kept as it is.
//!
//! Newlines are kept by [`safe`] (questions and answers have lines) and
//! escaped by [`safe_line`], for fields that must stay on one line.

use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as it is: every control
/// character (C0 but `\n` and `\t`, DEL, C1) and the invisible format
/// characters that reorder or hide text.
fn dangerous(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        c if c.is_control() => true,
        // Arabic letter mark, LRM/RLM, line and paragraph separators,
        // the embeddings and overrides (LRE..RLO), the isolates
        // (LRI..PDI), zero-width space, word joiner and the invisible
        // operators, deprecated format characters, the BOM, interlinear
        // annotations.
        '\u{061C}'
        | '\u{200B}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}' => true,
        _ => false,
    }
}

fn neutralise(text: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\n' && !keep_newlines {
            out.push_str("\\n");
        } else if dangerous(c) {
            let n = c as u32;
            if n < 0x80 {
                let _ = write!(out, "\\x{n:02x}");
            } else {
                let _ = write!(out, "\\u{{{n:04x}}}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` with every control and escape sequence made visible and inert;
/// line breaks (`\n`) and tabs are kept.
pub fn safe(text: &str) -> String {
    neutralise(text, true)
}

/// Like [`safe`], and line breaks are escaped too: for one-line fields
/// (error messages, origins, codes, versions).
pub fn safe_line(text: &str) -> String {
    neutralise(text, false)
}

/// A JSON value with [`safe`] applied to every string in it (keys too), for
/// summaries printed as JSON: serde_json escapes C0 controls but writes
/// DEL, C1 controls and bidirectional overrides as they are.
pub fn safe_json(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(safe(s)),
        Value::Array(a) => Value::Array(a.iter().map(safe_json).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (safe(k), safe_json(x))).collect()),
        other => other.clone(),
    }
}

/// Whether `text` holds nothing a terminal would interpret (newlines and
/// tabs allowed): what [`safe`] guarantees.
pub fn is_inert(text: &str) -> bool {
    !text.chars().any(dangerous)
}

/// Writes one line of the command's output to stdout (what [`out!`]
/// expands to). A reader that has gone (`host-cli guest ls | head`) is the
/// end of the output, not an error: the rest is dropped and the command
/// finishes, cleanup included. `println!` would panic there ("failed
/// printing to stdout"), since Rust ignores SIGPIPE.
///
/// [`out!`]: crate::out
pub fn print_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("host-cli: cannot write the output: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_escape_sequence_of_the_corpus_is_neutralised() {
        for (name, text) in sandtop_testkit::escapes::corpus() {
            let s = safe(&text);
            assert!(is_inert(&s), "{name}: {s:?}");
            for c in s.chars() {
                assert!(
                    c == '\n' || c == '\t' || !c.is_control(),
                    "{name}: {c:?} survived in {s:?}"
                );
                assert!(
                    !('\u{2000}'..='\u{206f}').contains(&c) || c == '\u{200c}' || c == '\u{200d}',
                    "{name}: {c:?} survived"
                );
            }
            let l = safe_line(&text);
            assert!(!l.contains('\n') && is_inert(&l), "{name}: {l:?}");
            // Nothing vanishes: what was there is shown.
            assert!(s.len() >= text.len(), "{name}");
        }
    }

    #[test]
    fn escapes_are_visible_and_plain_text_is_kept() {
        assert_eq!(safe("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(safe("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(safe("x\u{9b}y"), "x\\u{009b}y");
        assert_eq!(safe("a\rb"), "a\\x0db");
        assert_eq!(safe("two\nlines\tand a tab"), "two\nlines\tand a tab");
        assert_eq!(safe_line("two\nlines"), "two\\nlines");
        let plain = "Zoë Ångström 山田太郎 🙂 👨‍👩‍👧 `$(not a command)` ÷ é";
        assert_eq!(safe(plain), plain);
        assert!(is_inert(plain));
    }

    #[test]
    fn json_summaries_are_cleaned_everywhere() {
        let v = serde_json::json!({"message": "done\u{9b}2J", "list": ["\u{202e}x"],
                                   "k\u{7f}": 1, "n": 2});
        let s = serde_json::to_string(&safe_json(&v)).unwrap();
        assert!(is_inert(&s), "{s}");
        assert!(s.contains("\\\\u{009b}2J"), "{s}");
    }
}
