//! Sign-in out of band (seed 004, "authenticated tasks"): the wire types
//! for the two browser calls that put an operator's credentials into a
//! page, [`crate::BrowserCall::SignInCheck`] and
//! [`crate::BrowserCall::SignInFill`].
//!
//! The model names the fields it needs and the element each goes into; it
//! never sees a value. The host checks the request, has the daemon check
//! the targets (`SignInCheck`: the tab is on the credential origin, each
//! ref is a live, enabled input of the right kind), asks the operator, and
//! sends the values once (`SignInFill`), which the daemon checks again
//! before typing them.
//!
//! A value is a [`Secret`]: zeroed when dropped, `<redacted>` in `Debug`,
//! so a log line or an error that formats a call cannot show it.

use serde::{Deserialize, Serialize};

/// Most fields of one sign-in request (the seed's submission limit).
pub const MAX_SIGN_IN_FIELDS: usize = 6;
/// Longest value of one field, in characters (the seed's limit).
pub const MAX_SECRET_CHARS: usize = 16_384;
/// Most bytes of all values of one request (the seed's 120 KiB).
pub const MAX_SECRET_TOTAL_BYTES: usize = 120 * 1024;
/// Longest field or option id, in bytes.
pub const MAX_FIELD_ID_BYTES: usize = 64;
/// Longest origin, in bytes.
pub const MAX_ORIGIN_BYTES: usize = 2048;

/// What a field holds, which also decides the inputs it may go into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// An e-mail address: `<input type=email|text>`.
    Email,
    /// A password: `<input type=password>` only.
    Password,
    /// A one-time code: `<input type=text|tel|number|password>`.
    Code,
    /// Other text (a user name): `<input type=text|email|tel>`.
    Text,
}

impl CredentialKind {
    pub const ALL: [CredentialKind; 4] = [
        CredentialKind::Email,
        CredentialKind::Password,
        CredentialKind::Code,
        CredentialKind::Text,
    ];

    /// The seed's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::Email => "email",
            CredentialKind::Password => "password",
            CredentialKind::Code => "code",
            CredentialKind::Text => "text",
        }
    }

    /// The `<input type>`s a value of this kind may be typed into.
    pub fn input_types(self) -> &'static [&'static str] {
        match self {
            CredentialKind::Email => &["email", "text"],
            CredentialKind::Password => &["password"],
            CredentialKind::Code => &["text", "tel", "number", "password"],
            CredentialKind::Text => &["text", "email", "tel"],
        }
    }
}

/// A credential value. Never printed, zeroed when dropped.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for the one place that types it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many characters it has.
    pub fn chars(&self) -> usize {
        self.0.chars().count()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// One field of a sign-in: the element it goes into (a ref of the latest
/// read) and its kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInTarget {
    pub target: String,
    pub kind: CredentialKind,
}

/// One field with its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInValue {
    pub target: String,
    pub kind: CredentialKind,
    pub value: Secret,
}

/// Checks the common part of both calls: an origin, 1..=6 fields with
/// distinct refs of a bounded size.
pub(crate) fn check_targets<'a>(
    origin: &str,
    targets: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), crate::Invalid> {
    if origin.is_empty() || origin.len() > MAX_ORIGIN_BYTES {
        return Err(crate::invalid!("`origin`: 1 to {MAX_ORIGIN_BYTES} bytes"));
    }
    let n = targets.len();
    if !(1..=MAX_SIGN_IN_FIELDS).contains(&n) {
        return Err(crate::invalid!(
            "`fields`: 1 to {MAX_SIGN_IN_FIELDS} fields, got {n}"
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for t in targets {
        if t.is_empty() || t.len() > crate::limits::MAX_REF_BYTES {
            return Err(crate::invalid!(
                "`fields`: a target is 1 to {} bytes",
                crate::limits::MAX_REF_BYTES
            ));
        }
        if !seen.insert(t) {
            return Err("`fields`: two fields name the same target".into());
        }
    }
    Ok(())
}

/// Checks the values of a fill: none empty, none longer than the seed's
/// limit, all together within [`MAX_SECRET_TOTAL_BYTES`]. The message never
/// quotes a value.
pub(crate) fn check_values(fields: &[SignInValue]) -> Result<(), crate::Invalid> {
    let mut total = 0usize;
    for (i, f) in fields.iter().enumerate() {
        if f.value.is_empty() {
            return Err(crate::invalid!("`fields[{i}].value`: empty"));
        }
        if f.value.chars() > MAX_SECRET_CHARS {
            return Err(crate::invalid!(
                "`fields[{i}].value`: longer than {MAX_SECRET_CHARS} characters"
            ));
        }
        if f.value.expose().chars().any(|c| c.is_control()) {
            return Err(crate::invalid!("`fields[{i}].value`: a control character"));
        }
        total += f.value.expose().len();
    }
    if total > MAX_SECRET_TOTAL_BYTES {
        return Err(crate::invalid!(
            "`fields`: the values exceed {MAX_SECRET_TOTAL_BYTES} bytes together"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_in_debug_and_travels_as_a_plain_string() {
        let v = SignInValue {
            target: "ab.1".into(),
            kind: CredentialKind::Password,
            value: Secret::new("canary-hunter2".into()),
        };
        let shown = format!("{v:?} {:#?}", v);
        assert!(!shown.contains("canary"), "{shown}");
        assert!(shown.contains("<redacted>"));
        let wire = serde_json::to_string(&v).unwrap();
        assert_eq!(
            wire,
            r#"{"target":"ab.1","kind":"password","value":"canary-hunter2"}"#
        );
        let back: SignInValue = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn values_are_checked_without_quoting_them() {
        let field = |s: &str| SignInValue {
            target: "ab.1".into(),
            kind: CredentialKind::Text,
            value: Secret::new(s.into()),
        };
        assert!(check_values(&[field("ok")]).is_ok());
        for (bad, why) in [
            (field(""), "empty"),
            (field(&"é".repeat(MAX_SECRET_CHARS + 1)), "longer than"),
            (field("secret\nline"), "control"),
        ] {
            let e = check_values(&[bad]).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        // Many fields within the per-field limit, over the total.
        let big = "x".repeat(MAX_SECRET_CHARS);
        let many: Vec<_> = (0..8).map(|_| field(&big)).collect();
        assert!(
            check_values(&many)
                .unwrap_err()
                .to_string()
                .contains("together")
        );
    }

    #[test]
    fn targets_are_bounded_and_distinct() {
        assert!(check_targets("http://a.test", ["r.1"].into_iter()).is_ok());
        assert!(
            check_targets("", ["r.1"].into_iter())
                .unwrap_err()
                .to_string()
                .contains("origin")
        );
        assert!(
            check_targets("http://a.test", std::iter::empty())
                .unwrap_err()
                .to_string()
                .contains("1 to 6")
        );
        assert!(
            check_targets("http://a.test", ["r.1", "r.1"].into_iter())
                .unwrap_err()
                .to_string()
                .contains("same target")
        );
        let seven = ["a", "b", "c", "d", "e", "f", "g"];
        assert!(check_targets("http://a.test", seven.into_iter()).is_err());
    }
}
