//! Secrets (the session token, the API key): kept out of `Debug`, logs and
//! error messages; handed on only through [`Secret::expose`]. The session
//! token itself (generation, parsing, its file) is `sandtop_client::Token`.

use std::path::Path;

use sandtop_client::{Token, TokenError};

/// Environment variables never handed to a guest or a child process.
pub const SECRET_ENV: &[&str] = &["OPENAI_API_KEY", sandtop_protocol::session::TOKEN_ENV];

/// A secret string.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// Reads a session's token file (parsed as a [`Token`]).
    pub fn read(path: &Path) -> Result<Secret, TokenError> {
        Token::read(path).map(Secret::from)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` (for messages
    /// that might echo it back).
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_string();
        }
        text.replace(&self.0, "<redacted>")
    }
}

impl From<Token> for Secret {
    fn from(t: Token) -> Secret {
        Secret(t.expose().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_shown() {
        let s = Secret::from(Token::generate().unwrap());
        assert_eq!(s.expose().len(), 64);
        assert!(!format!("{s:?}").contains(s.expose()));
        let msg = format!("failed with token {}", s.expose());
        assert_eq!(s.redact(&msg), "failed with token <redacted>");
    }

    #[test]
    fn a_malformed_token_file_is_refused_without_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "hunter2-not-a-token").unwrap();
        let e = Secret::read(&path).unwrap_err();
        assert!(matches!(e, TokenError::MalformedFile { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("token file") && !e.contains("hunter2"), "{e}");
        let t = Token::generate().unwrap();
        std::fs::write(&path, format!("{}\n", t.expose())).unwrap();
        assert_eq!(Secret::read(&path).unwrap().expose(), t.expose());
    }
}
