//! Secrets (the session token, the API key): kept out of `Debug`, logs and
//! error messages; handed on only through [`Secret::expose`].

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

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

    /// A fresh session token: 256 bits from the OS RNG, hex-encoded.
    pub fn generate_token() -> anyhow::Result<Secret> {
        let mut bytes = [0u8; sandtop_protocol::session::TOKEN_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| anyhow::anyhow!("the OS random number generator failed: {e}"))?;
        Ok(Secret(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Reads a token file.
    pub fn read(path: &Path) -> anyhow::Result<Secret> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the token file {}: {e}", path.display()))?;
        Ok(Secret(text.trim().to_string()))
    }

    /// Writes the secret to a new file, mode 0600 (never over an existing one).
    pub fn write_new(&self, path: &Path) -> anyhow::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        f.write_all(self.0.as_bytes())?;
        f.sync_all()?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_shown() {
        let s = Secret::generate_token().unwrap();
        assert_eq!(s.expose().len(), 64);
        assert!(!format!("{s:?}").contains(s.expose()));
        let msg = format!("failed with token {}", s.expose());
        assert_eq!(s.redact(&msg), "failed with token <redacted>");
    }
}
