//! An error and its causes on one line, for the few places that print an
//! error without handing it on (gc reports, leftovers in a message).

/// `a: b: c` for an error `a` caused by `b` caused by `c` (what anyhow's
/// `{:#}` shows, for any error).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
