//! HTML pieces: escaping, the page around the sections, its style.
//!
//! Every string from the run (the model's words, the page's, the guest's,
//! even file names and ids) goes through [`esc`] before it is written.
//! The page loads nothing: its Content-Security-Policy allows only inline
//! style and `data:` images, and it holds no script.

use std::fmt::Write as _;

/// HTML-escapes text for element content and double-quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Controls (but tab and newline) show as U+FFFD: they mean
            // nothing on a page and some break parsers.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The Content-Security-Policy of the page.
pub const CSP: &str = "default-src 'none'; img-src data:; style-src 'unsafe-inline'";

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 1em; color: #1b1b1b; background: #fafafa; }
h1 { font-size: 1.5em; margin: .2em 0; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.6em; }
h3 { font-size: 1em; margin: .8em 0 .3em; }
table { border-collapse: collapse; margin: .4em 0; }
td, th { border: 1px solid #ddd; padding: .2em .5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre, .pre { white-space: pre-wrap; word-break: break-word; background: #fff; border: 1px solid #e3e3e3; padding: .4em .6em; margin: .3em 0; }
.step { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .6em 1em; margin: 1.2em 0; }
.replay { display: flex; gap: 12px; align-items: flex-start; margin: 8px 0; }
.replay > div { flex: 1; min-width: 0; }
.shot { position: relative; display: inline-block; max-width: 100%; line-height: 0; border: 1px solid #999; }
.shot img { display: block; max-width: 100%; height: auto; }
.shot svg { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.muted { color: #666; }
.ok { color: #0a6b2d; font-weight: 600; }
.bad { color: #b00020; font-weight: 600; }
.tag { display: inline-block; border-radius: 3px; padding: 0 .4em; background: #eee; font-size: .9em; }
ol.actions li { margin: .1em 0; }
.ending { font-size: 1.1em; padding: .4em .8em; border-left: 4px solid #888; background: #fff; }
"#;

/// The whole page around `body`.
pub fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 4096);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n",
        esc(title)
    );
    out
}

/// A two-column table of (label, already-escaped HTML) rows.
pub fn facts(rows: &[(&str, String)]) -> String {
    let mut out = String::from("<table>\n");
    for (k, v) in rows {
        let _ = writeln!(out, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
    }
    out.push_str("</table>\n");
    out
}

/// Text in a `<pre>`, escaped.
pub fn pre(text: &str) -> String {
    format!("<pre>{}</pre>\n", esc(text))
}

/// Milliseconds as `1.23 s` or `456 ms`.
pub fn ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} s", v / 1000.0)
    } else {
        format!("{v:.0} ms")
    }
}

/// A Unix time in milliseconds as UTC `YYYY-MM-DD HH:MM:SS.mmm UTC`.
pub fn utc(t_ms: u64) -> String {
    let secs = t_ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        t_ms % 1000
    )
}

/// The most characters of one function call's arguments or output shown.
pub const MAX_ARGS: usize = 2000;

/// A serde enum's name (`step_budget`).
pub fn json_word<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A word coloured by whether it is good news.
pub fn verdict(good: bool, text: &str) -> String {
    format!(
        "<span class=\"{}\">{}</span>",
        if good { "ok" } else { "bad" },
        esc(text)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        assert_eq!(
            esc("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            esc(r#"a "b" 'c' & d"#),
            "a &quot;b&quot; &#39;c&#39; &amp; d"
        );
        assert_eq!(esc("&amp;"), "&amp;amp;", "escaped twice when asked twice");
        assert_eq!(
            esc("x\u{0}y\u{1b}[2Jz\n"),
            "x\u{fffd}y\u{fffd}[2Jz\n",
            "controls are shown as U+FFFD"
        );
        let e = esc("\"><img src=x onerror=alert(1)>");
        assert!(
            !e.contains('<') && !e.contains('>') && !e.contains('"'),
            "{e}"
        );
    }

    #[test]
    fn the_page_has_the_policy_and_escapes_its_title() {
        let p = page("<b>t</b>", "<p>body</p>");
        assert!(
            p.contains("content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\"")
        );
        assert!(p.contains("<title>&lt;b&gt;t&lt;/b&gt;</title>"));
        assert!(!p.contains("<script"));
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14 22:13:20.123 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00.000 UTC");
        assert_eq!(ms(1234.0), "1.23 s");
        assert_eq!(ms(12.4), "12 ms");
    }
}
