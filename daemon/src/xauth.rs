//! X access control for a display the daemon starts: an MIT-MAGIC-COOKIE-1
//! cookie private to the session.
//!
//! Without it, Xvfb lets any local account connect to its socket and drive
//! (or read) the desktop. With `sandtopd serve --xvfb --xauth-file PATH`:
//!
//! 1. [`XAuth::create`] draws a 128-bit cookie from the OS and writes it to
//!    PATH (created fresh, mode 0600, never through a symbolic link) as one
//!    Xauthority entry that matches any address and display number;
//! 2. Xvfb starts with `-auth PATH`, so it admits only clients that present
//!    the cookie;
//! 3. the daemon's own connections present it ([`connect`]); the window
//!    manager, and what it launches, find it through `XAUTHORITY=PATH`.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use x11rb::errors::ConnectError;
use x11rb::rust_connection::{DefaultStream, RustConnection};

const MIT_MAGIC_COOKIE: &[u8] = b"MIT-MAGIC-COOKIE-1";
/// Xauthority's family for "any address".
const FAMILY_WILD: u16 = 0xffff;

/// The cookie this process presents to its X server, once set.
static COOKIE: OnceLock<[u8; 16]> = OnceLock::new();

/// A session's X authority file.
pub struct XAuth {
    path: PathBuf,
}

impl std::fmt::Debug for XAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the cookie.
        f.debug_struct("XAuth").field("path", &self.path).finish()
    }
}

impl XAuth {
    /// Draws a cookie, writes `path` (replacing a file left by an earlier
    /// run; a symbolic link there is replaced, not followed) and makes it
    /// the cookie [`connect`] presents. One per process.
    pub fn create(path: &Path) -> std::io::Result<XAuth> {
        let mut cookie = [0u8; 16];
        getrandom::fill(&mut cookie).map_err(std::io::Error::other)?;
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)?;
        f.write_all(&entry(&cookie))?;
        f.sync_all()?;
        COOKIE
            .set(cookie)
            .map_err(|_| std::io::Error::other("the X cookie was already set"))?;
        Ok(XAuth {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One Xauthority entry: family, address, display number, auth name and
/// data, each string as a big-endian u16 length then the bytes. An empty
/// address with the wild family and an empty number match any display.
fn entry(cookie: &[u8; 16]) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 + 2 + 2 + 2 + MIT_MAGIC_COOKIE.len() + 2 + 16);
    v.extend_from_slice(&FAMILY_WILD.to_be_bytes());
    for field in [&b""[..], &b""[..], MIT_MAGIC_COOKIE, &cookie[..]] {
        v.extend_from_slice(&(field.len() as u16).to_be_bytes());
        v.extend_from_slice(field);
    }
    v
}

/// Connects to `display`, presenting this process's cookie when it has
/// one ([`XAuth::create`]); otherwise as any X client does (`XAUTHORITY`).
pub fn connect(display: Option<&str>) -> Result<(RustConnection, usize), ConnectError> {
    let Some(cookie) = COOKIE.get() else {
        return RustConnection::connect(display);
    };
    let parsed = x11rb::reexports::x11rb_protocol::parse_display::parse_display(display)?;
    let screen = usize::from(parsed.screen);
    let mut error = None;
    for addr in parsed.connect_instruction() {
        match DefaultStream::connect(&addr) {
            Ok((stream, _)) => {
                let conn = RustConnection::connect_to_stream_with_auth_info(
                    stream,
                    screen,
                    MIT_MAGIC_COOKIE.to_vec(),
                    cookie.to_vec(),
                )?;
                return Ok((conn, screen));
            }
            Err(e) => error = Some(e),
        }
    }
    Err(error.map_or(
        ConnectError::DisplayParsingError(x11rb::errors::DisplayParsingError::Unknown),
        ConnectError::IoError,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_one_wild_mit_magic_cookie() {
        let e = entry(&[7; 16]);
        assert_eq!(&e[..2], &[0xff, 0xff]);
        assert_eq!(&e[2..6], &[0, 0, 0, 0], "empty address and number");
        assert_eq!(&e[6..8], &[0, 18]);
        assert_eq!(&e[8..26], MIT_MAGIC_COOKIE);
        assert_eq!(&e[26..28], &[0, 16]);
        assert_eq!(&e[28..], &[7; 16]);
    }

    #[test]
    fn debug_never_shows_the_cookie() {
        let x = XAuth {
            path: PathBuf::from("/s/xauthority"),
        };
        assert_eq!(format!("{x:?}"), "XAuth { path: \"/s/xauthority\" }");
    }
}
