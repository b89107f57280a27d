//! The page's diagnostics for `read_diagnostics` (docs/contract.md rule 41): console
//! entries and completed network requests, taken from BiDi events
//! (`log.entryAdded`, `network.responseCompleted`, `network.fetchError`)
//! as they arrive, kept per tab in a bounded history, and filtered before
//! they are stored:
//!
//! - console: level and text only, control characters and runs of white
//!   space collapsed, credential-like parts redacted (`password=`,
//!   `token:`, `Bearer …`, `Basic …`, JWTs, long secrets), cut at
//!   [`MAX_TEXT_BYTES`];
//! - network: method, the URL's scheme, host, port and path (no user
//!   info, query or fragment), status and MIME type; never headers,
//!   cookies or bodies.

use std::collections::VecDeque;

use serde_json::Value;

/// Entries kept per source, across tabs (the oldest go first).
pub const HISTORY: usize = 500;
/// Longest stored console text, in bytes.
pub const MAX_TEXT_BYTES: usize = 512;

/// The two sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Console,
    Network,
}

/// One stored, filtered entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    context: String,
    line: String,
}

/// The bounded history of both sources.
#[derive(Debug, Default)]
pub struct History {
    console: VecDeque<Entry>,
    network: VecDeque<Entry>,
}

impl History {
    /// Takes one BiDi event; ignores those it does not know.
    pub fn event(&mut self, method: &str, params: &Value) {
        let (source, context, line) = match method {
            "log.entryAdded" => {
                let context = params.pointer("/source/context").and_then(Value::as_str);
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                let level = match level {
                    "debug" | "info" | "warn" | "error" => level,
                    _ => "info",
                };
                let text = params.get("text").and_then(Value::as_str).unwrap_or("");
                (
                    Source::Console,
                    context,
                    format!("{level}: {}", console_text(text)),
                )
            }
            "network.responseCompleted" | "network.fetchError" => {
                let context = params.get("context").and_then(Value::as_str);
                let method = params
                    .pointer("/request/method")
                    .and_then(Value::as_str)
                    .filter(|m| m.len() <= 16 && m.bytes().all(|b| b.is_ascii_uppercase()))
                    .unwrap_or("?");
                let url = params
                    .pointer("/request/url")
                    .and_then(Value::as_str)
                    .map(url_without_secrets)
                    .unwrap_or_else(|| "invalid:".into());
                let outcome = if method_is_error(params) {
                    "failed".to_string()
                } else {
                    let status = params
                        .pointer("/response/status")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    let mime = params
                        .pointer("/response/mimeType")
                        .and_then(Value::as_str)
                        .map(|m| {
                            m.split(';')
                                .next()
                                .unwrap_or("")
                                .trim()
                                .chars()
                                .filter(|c| c.is_ascii_alphanumeric() || "/+.-".contains(*c))
                                .take(64)
                                .collect::<String>()
                        })
                        .unwrap_or_default();
                    format!("{status} {mime}").trim_end().to_string()
                };
                (
                    Source::Network,
                    context,
                    format!("{method} {url} {outcome}"),
                )
            }
            _ => return,
        };
        let Some(context) = context else { return };
        let list = match source {
            Source::Console => &mut self.console,
            Source::Network => &mut self.network,
        };
        if list.len() >= HISTORY {
            list.pop_front();
        }
        list.push_back(Entry {
            context: context.to_string(),
            line,
        });
    }

    /// The last `limit` lines of `source` for the tab `context`, oldest
    /// first.
    pub fn lines(&self, source: Source, context: &str, limit: usize) -> Vec<String> {
        let list = match source {
            Source::Console => &self.console,
            Source::Network => &self.network,
        };
        let mut out: Vec<String> = list
            .iter()
            .rev()
            .filter(|e| e.context == context)
            .take(limit)
            .map(|e| e.line.clone())
            .collect();
        out.reverse();
        out
    }
}

fn method_is_error(params: &Value) -> bool {
    params.get("errorText").is_some()
}

/// A URL without user info, query or fragment: `scheme://host[:port]/path`
/// (the path cut at 200 bytes); other schemes as the scheme alone.
fn url_without_secrets(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.split_once(':') {
            Some((s, _)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                format!("{}:", s.to_ascii_lowercase())
            }
            _ => "invalid:".into(),
        };
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = authority.rsplit('@').next().unwrap_or("");
    let mut path: String = path.chars().filter(|c| !c.is_control()).collect::<String>();
    if path.len() > 200 {
        let mut end = 200;
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        path.truncate(end);
        path.push('…');
    }
    format!("{}://{host}{path}", scheme.to_ascii_lowercase())
}

/// Console text, filtered: one line, no control characters, credential-
/// like parts redacted, bounded.
fn console_text(text: &str) -> String {
    let one_line = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>();
    // The redaction rules are shared with the host's tab titles.
    let mut s = sandtop_protocol::redact::secrets(&one_line);
    if s.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn console(h: &mut History, ctx: &str, level: &str, text: &str) {
        h.event(
            "log.entryAdded",
            &json!({"type": "console", "level": level, "text": text, "source": {"context": ctx}}),
        );
    }

    #[test]
    fn console_text_is_one_bounded_line_with_secrets_redacted() {
        let mut h = History::default();
        console(&mut h, "t1", "warn", "login failed\nfor user ann\u{1b}[2J");
        console(
            &mut h,
            "t1",
            "log",
            "sending password=hunter2 and token: abc Authorization: Bearer sk-live-123",
        );
        console(
            &mut h,
            "t1",
            "info",
            "jwt eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl and key 0123456789abcdef0123456789abcdef",
        );
        console(&mut h, "t2", "error", "other tab");
        console(&mut h, "t1", "error", &"x ".repeat(2000));
        let lines = h.lines(Source::Console, "t1", 100);
        assert_eq!(lines[0], "warn: login failed for user ann [2J");
        assert_eq!(
            lines[1],
            "info: sending password=[redacted] and token: [redacted] Authorization: Bearer [redacted]"
        );
        assert_eq!(lines[2], "info: jwt [redacted] and key [redacted]");
        assert!(lines[3].len() <= MAX_TEXT_BYTES + "error: ".len() + 3);
        assert!(!lines.iter().any(|l| l.contains("other tab")));
        assert!(lines.iter().all(|l| !l.contains('\u{1b}')));
        // The last `limit`, oldest first.
        assert_eq!(h.lines(Source::Console, "t1", 1), vec![lines[3].clone()]);
    }

    #[test]
    fn network_lines_carry_no_query_user_info_or_headers() {
        let mut h = History::default();
        h.event(
            "network.responseCompleted",
            &json!({"context": "t1",
                    "request": {"method": "POST", "url": "https://ann:pw@shop.example:8443/pay?card=4111#x",
                                "headers": [{"name": "Cookie", "value": {"type": "string", "value": "sid=1"}}]},
                    "response": {"status": 402, "mimeType": "application/json; charset=utf-8",
                                 "headers": [{"name": "Set-Cookie", "value": {"type": "string", "value": "sid=2"}}]}}),
        );
        h.event(
            "network.fetchError",
            &json!({"context": "t1", "request": {"method": "GET", "url": "http://gone.example/x"}, "errorText": "NS_ERROR"}),
        );
        h.event("network.responseCompleted", &json!({"context": "t1", "request": {"method": "GET", "url": "data:text/plain,secret"}, "response": {"status": 200, "mimeType": "text/plain"}}));
        let lines = h.lines(Source::Network, "t1", 10);
        assert_eq!(
            lines,
            [
                "POST https://shop.example:8443/pay 402 application/json",
                "GET http://gone.example/x failed",
                "GET data: 200 text/plain",
            ]
        );
        let all = lines.join("\n");
        for secret in ["ann", "pw@", "4111", "sid=", "Cookie", "NS_ERROR"] {
            assert!(!all.contains(secret), "{secret} in {all}");
        }
    }

    #[test]
    fn the_history_is_bounded_and_unknown_events_are_ignored() {
        let mut h = History::default();
        for i in 0..(HISTORY + 50) {
            console(&mut h, "t1", "info", &format!("n{i}"));
        }
        h.event("browsingContext.load", &json!({"context": "t1"}));
        let lines = h.lines(Source::Console, "t1", 100);
        assert_eq!(lines.len(), 100);
        assert_eq!(lines[99], format!("info: n{}", HISTORY + 49));
        assert_eq!(h.console.len(), HISTORY);
    }
}
