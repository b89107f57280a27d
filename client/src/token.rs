//! The per-session bearer token: 256 bits from the OS RNG, hex-encoded.
//! The one definition of its generation, parsing and file, for both ends:
//! the host generates it and writes the session's token file; the daemon
//! reads it from that file or from `SANDTOPD_TOKEN`
//! ([`sandtop_protocol::session::TOKEN_ENV`]) and, with neither, generates
//! one and writes it to the token file, created exclusively with mode
//! 0600. It is compared in constant time and never printed: `Debug`
//! redacts it.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use sandtop_protocol::session::TOKEN_BYTES;
use subtle::ConstantTimeEq as _;

/// A session token.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Why no token could be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    // The io error is part of the message and not also a `source`, so
    // that a chain of causes shows it once.
    #[error("cannot read the token file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("cannot create the token file {path}: {error}")]
    Write { path: String, error: std::io::Error },
    #[error("the token must be {} hex digits (256 bits)", TOKEN_BYTES * 2)]
    Malformed,
    /// The token file does not hold a token (its text is not shown).
    #[error("the token file {path} does not hold {} hex digits (256 bits)", TOKEN_BYTES * 2)]
    MalformedFile { path: String },
    #[error("the OS random number generator failed: {0}")]
    Rng(String),
}

impl Token {
    /// A fresh token from the OS RNG.
    pub fn generate() -> Result<Token, TokenError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| TokenError::Rng(e.to_string()))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Parses a hex token (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<Token, TokenError> {
        let t = text.trim();
        if t.len() == TOKEN_BYTES * 2 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Token(t.to_ascii_lowercase()))
        } else {
            Err(TokenError::Malformed)
        }
    }

    /// Reads and parses the token file at `path`.
    pub fn read(path: &Path) -> Result<Token, TokenError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Token::parse(&text).map_err(|_| TokenError::MalformedFile {
                path: path.display().to_string(),
            }),
            Err(error) => Err(TokenError::Read {
                path: path.display().to_string(),
                error,
            }),
        }
    }

    /// Reads the token from `path`, or, when the file does not exist,
    /// generates one and writes it there (0600, created exclusively).
    pub fn load_or_create(path: &Path) -> Result<Token, TokenError> {
        match Token::read(path) {
            Err(TokenError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                let token = Token::generate()?;
                token.write_new(path)?;
                Ok(token)
            }
            other => other,
        }
    }

    /// Writes the token to a new file `path` (0600, created exclusively,
    /// synced).
    pub fn write_new(&self, path: &Path) -> Result<(), TokenError> {
        let write_err = |error| TokenError::Write {
            path: path.display().to_string(),
            error,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(write_err)?;
        f.write_all(self.0.as_bytes()).map_err(write_err)?;
        f.sync_all().map_err(write_err)
    }

    /// The token's text, for the few places that must hand it on (the
    /// bearer header a client sends, the host's copy for the guest).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header value carries this token, in
    /// constant time (the length, 64, is public).
    pub fn matches_header(&self, header: &[u8]) -> bool {
        let Some(presented) = header.strip_prefix(b"Bearer ") else {
            return false;
        };
        let presented = presented.trim_ascii();
        presented.len() == self.0.len()
            && bool::from(presented.to_ascii_lowercase().ct_eq(self.0.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn generated_tokens_are_256_bit_hex_and_distinct() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.expose(), b.expose());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let t = Token::generate().unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.expose()), "{shown}");
    }

    #[test]
    fn header_matching() {
        let t = Token::generate().unwrap();
        assert!(t.matches_header(format!("Bearer {}", t.expose()).as_bytes()));
        assert!(t.matches_header(format!("Bearer {}", t.expose().to_uppercase()).as_bytes()));
        assert!(!t.matches_header(t.expose().as_bytes()));
        assert!(!t.matches_header(b"Bearer "));
        let mut wrong = t.expose().to_string();
        wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
        assert!(!t.matches_header(format!("Bearer {wrong}").as_bytes()));
        assert!(!t.matches_header(format!("Bearer {}0", t.expose()).as_bytes()));
    }

    #[test]
    fn file_is_created_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let a = Token::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = Token::load_or_create(&path).unwrap();
        assert_eq!(a.expose(), b.expose());
        std::fs::write(&path, "short").unwrap();
        assert!(matches!(
            Token::load_or_create(&path),
            Err(TokenError::MalformedFile { .. })
        ));
        // Reading never creates: a missing file is an error.
        let missing = dir.path().join("missing");
        assert!(matches!(
            Token::read(&missing),
            Err(TokenError::Read { .. })
        ));
        assert!(!missing.exists());
    }

    #[test]
    fn parsing_trims_and_lowercases_and_refuses_the_rest() {
        let hex = "AB".repeat(TOKEN_BYTES);
        let t = Token::parse(&format!("  {hex}\n")).unwrap();
        assert_eq!(t.expose(), "ab".repeat(TOKEN_BYTES));
        assert!(Token::parse(&"ab".repeat(TOKEN_BYTES - 1)).is_err());
        assert!(Token::parse(&format!("{}zz", "ab".repeat(TOKEN_BYTES - 1))).is_err());
        assert!(Token::parse("").is_err());
    }
}
