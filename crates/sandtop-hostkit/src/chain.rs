//! An error and its causes on one line, for the places that print an
//! error without handing it on (gc reports, leftovers in a message, and
//! host-cli's last line).

/// `a: b: c` for an error `a` caused by `b` caused by `c` (what anyhow's
/// `{:#}` shows, for any error), except that a cause whose text its
/// message already ends with (`{what}: {source}` and the source kept, as
/// `ChannelError::Connect` does) is shown once.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.ends_with(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error, bool);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            if self.1 {
                write!(f, "reading x: {}", self.0)
            } else {
                f.write_str("reading x")
            }
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_shows_once() {
        let denied = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        assert_eq!(chain(&Outer(denied(), false)), "reading x: denied");
        // The message quotes its cause already: not twice.
        assert_eq!(chain(&Outer(denied(), true)), "reading x: denied");
    }
}
