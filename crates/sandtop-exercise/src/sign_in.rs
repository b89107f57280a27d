//! The browser exercise's sign-in (docs/contract.md rule 47): the demo
//! app's account, provisioned into the guest from the operator's
//! `--credentials` entry for the demo origin (or generated at random), the
//! credentials file the run's operator answers from, and the checks — the
//! demo app's own record shows the session reached the protected page, and
//! neither the password nor the code is in any place the exercise can read
//! (the run folder, the session folder with its egress journal, the
//! container's log).
//!
//! The values reach the guest through `docker exec`'s standard input
//! (`dd of=accounts.json`), never a command line or an environment.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use sandtop_protocol::sign_in::Secret;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::Check;
use super::browser::FORM_ORIGIN;
use sandtop_agent::sign_in::rules::Credentials;

/// Where the demo app reads its accounts (read at each login attempt).
pub const ACCOUNTS_PATH: &str = "/home/user/demo/accounts.json";
/// The demo app's record of sign-in events (never a value).
pub const SIGN_INS_PATH: &str = "/home/user/demo/sign-ins.jsonl";
/// The account's e-mail when none is given.
pub const EXERCISE_EMAIL: &str = "exercise@sandtop.test";

/// The demo account the exercise signs in to.
pub struct Account {
    pub email: Secret,
    pub password: Secret,
    pub code: Secret,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Account(<redacted>)")
    }
}

fn random_hex(bytes: usize) -> anyhow::Result<Secret> {
    let mut b = Zeroizing::new(vec![0u8; bytes]);
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("random bytes: {e}"))?;
    let mut s = String::with_capacity(bytes * 2);
    for x in b.iter() {
        s.push_str(&format!("{x:02x}"));
    }
    Ok(Secret::new(s))
}

impl Account {
    /// A fresh account: a random password and a random six-digit code.
    pub fn generate() -> anyhow::Result<Account> {
        let mut b = Zeroizing::new([0u8; 4]);
        getrandom::fill(&mut *b).map_err(|e| anyhow::anyhow!("random bytes: {e}"))?;
        let n = u32::from_le_bytes(*b) % 1_000_000;
        Ok(Account {
            email: Secret::new(EXERCISE_EMAIL.into()),
            password: random_hex(16)?,
            code: Secret::new(format!("{n:06}")),
        })
    }

    /// The account of the operator's credentials file: its entry for the
    /// demo origin must have `email`, `password` and `code`.
    pub fn from_credentials(c: &Credentials) -> anyhow::Result<Account> {
        let origin = FORM_ORIGIN.parse()?;
        let mut entry = c.entry(&origin)?.ok_or_else(|| {
            anyhow::anyhow!(
                "--credentials {}: no entry for the demo app's origin {FORM_ORIGIN}",
                c.path().display()
            )
        })?;
        let mut take = |k: &str| {
            entry.remove(k).filter(|v| !v.is_empty()).ok_or_else(|| {
                anyhow::anyhow!(
                    "--credentials {}: the entry for {FORM_ORIGIN} needs `email`, `password` and `code` (no `{k}`)",
                    c.path().display()
                )
            })
        };
        Ok(Account {
            email: take("email")?,
            password: take("password")?,
            code: take("code")?,
        })
    }

    /// The demo app's accounts file holding this account alone.
    pub fn accounts_json(&self) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(
            json!([{
                "email": self.email.expose(),
                "password": self.password.expose(),
                "code": self.code.expose(),
            }])
            .to_string()
            .into_bytes(),
        )
    }

    /// What must never appear anywhere but the page and the guest's
    /// accounts file.
    pub fn secrets(&self) -> [&str; 2] {
        [self.password.expose(), self.code.expose()]
    }
}

/// A private folder (0700) with a credentials file (0600) for the
/// exercise's operator; removed when dropped.
#[derive(Debug)]
pub struct TempCredentials {
    dir: PathBuf,
    pub path: PathBuf,
}

impl TempCredentials {
    pub fn write(account: &Account) -> anyhow::Result<TempCredentials> {
        let name = random_hex(8)?;
        let dir = std::env::temp_dir().join(format!("sandtop-exercise-{}", name.expose()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        let guard = TempCredentials {
            path: dir.join("credentials.json"),
            dir,
        };
        let text = Zeroizing::new(
            json!({FORM_ORIGIN: {
                "email": account.email.expose(),
                "password": account.password.expose(),
                "code": account.code.expose(),
            }})
            .to_string(),
        );
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&guard.path)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        Ok(guard)
    }
}

impl Drop for TempCredentials {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Checks the demo app's sign-in record: for the account's e-mail, the
/// password step, then the code step, then the protected page.
pub fn check_signed_in(record: &[u8], email: &str) -> Check {
    let what = format!(
        "the demo app's record shows the sign-in reached the protected page ({SIGN_INS_PATH})"
    );
    let events: Vec<String> = String::from_utf8_lossy(record)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["email"] == email)
        .filter_map(|v| v["event"].as_str().map(str::to_string))
        .collect();
    let at = |e: &str, from: usize| events[from..].iter().position(|x| x == e).map(|i| i + from);
    let ok = at("password_ok", 0)
        .and_then(|p| at("code_ok", p))
        .and_then(|c| at("protected_page", c))
        .is_some();
    Check {
        what,
        ok,
        detail: format!("events for the account: {}", events.join(", ")),
    }
}

/// Searches `places` (what each is, its bytes) for any of `secrets`.
pub fn check_absent(secrets: &[&str], places: &[(String, Vec<u8>)]) -> Check {
    let found: Vec<&str> = places
        .iter()
        .filter(|(_, bytes)| {
            secrets
                .iter()
                .any(|s| !s.is_empty() && bytes.windows(s.len()).any(|w| w == s.as_bytes()))
        })
        .map(|(what, _)| what.as_str())
        .collect();
    Check {
        what: "the password and the code are in none of the run folder, the session folder (egress journal included) or the container's log".into(),
        ok: found.is_empty(),
        detail: if found.is_empty() {
            format!("{} places searched", places.len())
        } else {
            format!("found in: {}", found.join(", "))
        },
    }
}

/// Every regular file under `dir` (links not followed), with its bytes,
/// for [`check_absent`]. Unreadable files are listed as such.
pub fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            let p = e.path();
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file()
                && let Ok(bytes) = std::fs::read(&p)
            {
                out.push((p.display().to_string(), bytes));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_must_show_all_three_steps_in_order() {
        let line = |e: &str, m: &str| {
            format!("{{\"seq\":1,\"received_at\":\"x\",\"event\":\"{e}\",\"email\":\"{m}\"}}\n")
        };
        let good = [
            line("password_wrong", "a@b"),
            line("password_ok", "a@b"),
            line("code_ok", "a@b"),
            line("protected_page", "a@b"),
        ]
        .concat();
        assert!(check_signed_in(good.as_bytes(), "a@b").ok);
        assert!(!check_signed_in(good.as_bytes(), "c@d").ok);
        let no_code = [line("password_ok", "a@b"), line("protected_page", "a@b")].concat();
        assert!(!check_signed_in(no_code.as_bytes(), "a@b").ok);
        let other = [
            line("password_ok", "a@b"),
            line("code_ok", "x@y"),
            line("protected_page", "a@b"),
        ]
        .concat();
        assert!(!check_signed_in(other.as_bytes(), "a@b").ok);
    }

    #[test]
    fn a_secret_anywhere_fails_the_search() {
        let a = Account::generate().unwrap();
        assert_eq!(a.code.expose().len(), 6);
        assert_eq!(a.password.expose().len(), 32);
        let places = vec![
            ("clean".to_string(), b"nothing here".to_vec()),
            (
                "log".to_string(),
                format!("x{}y", a.code.expose()).into_bytes(),
            ),
        ];
        let c = check_absent(&a.secrets(), &places);
        assert!(!c.ok);
        assert!(c.detail.contains("log") && !c.detail.contains("clean"));
        assert!(check_absent(&a.secrets(), &places[..1]).ok);
        assert!(!format!("{a:?}").contains(a.password.expose()));
    }

    #[test]
    fn the_temporary_credentials_file_is_private_and_read_back_exactly() {
        use std::os::unix::fs::PermissionsExt as _;
        let a = Account::generate().unwrap();
        let t = TempCredentials::write(&a).unwrap();
        let mode = std::fs::metadata(&t.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let c = Credentials::open(&t.path).unwrap();
        let back = Account::from_credentials(&c).unwrap();
        assert_eq!(back.password.expose(), a.password.expose());
        assert_eq!(back.code.expose(), a.code.expose());
        let dir = t.path.parent().unwrap().to_path_buf();
        drop(t);
        assert!(!dir.exists());
    }
}
