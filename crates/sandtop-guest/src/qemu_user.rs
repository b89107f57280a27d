//! Who the VM's QEMU runs as (docs/security.md V7).
//!
//! Started by a user, QEMU runs as that user. Started by root, it must not
//! stay root: a guest that escaped into QEMU would own the host. QEMU then
//! drops to the guest's uid and gid ([`super::ids`], the uid the Docker
//! guest's processes run as, which no host account has) with its own
//! option, `-run-with user=UID:GID` from QEMU 9.1, `-runas UID:GID`
//! before (deprecated in 9.1; QEMU 7.2, Debian 12's, takes the numeric
//! form). QEMU opens everything it needs (the image, `/dev/kvm`, the
//! session's `link.sock`, `console.log` and pid file) as root first, then
//! drops before the guest runs, so those files stay root's in root's 0700
//! session folder: the dropped process keeps the descriptors it holds and
//! can neither reopen nor replace them.
//!
//! QEMU's seccomp option `elevateprivileges=deny` forbids the set*uid
//! calls the drop itself makes (QEMU dies of SIGSYS), so a QEMU that drops
//! runs without it; after the drop it has no capability left, and a
//! set*uid call can only move between its own ids.

use std::path::Path;

use super::ids::{GUEST_GID, GUEST_UID};
use super::{GuestError, Result};

/// QEMU's option for dropping root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropFlag {
    /// `-run-with user=UID:GID` (QEMU 9.1 and later).
    RunWith,
    /// `-runas UID:GID` (before 9.1).
    RunAs,
}

/// The ids QEMU drops to, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub flag: DropFlag,
}

impl RunAs {
    /// The guest's ids, with the option of a QEMU of `version`.
    pub fn guest(version: (u32, u32)) -> RunAs {
        RunAs {
            uid: GUEST_UID,
            gid: GUEST_GID,
            flag: flag_for(version),
        }
    }

    /// QEMU's arguments for the drop.
    pub fn args(&self) -> [String; 2] {
        let ids = format!("{}:{}", self.uid, self.gid);
        match self.flag {
            DropFlag::RunWith => ["-run-with".into(), format!("user={ids}")],
            DropFlag::RunAs => ["-runas".into(), ids],
        }
    }
}

/// The option a QEMU of `version` (major, minor) takes.
pub fn flag_for(version: (u32, u32)) -> DropFlag {
    if version >= (9, 1) {
        DropFlag::RunWith
    } else {
        DropFlag::RunAs
    }
}

/// Major and minor from `qemu-system-* --version`'s first line
/// (`QEMU emulator version 7.2.22 (Debian …)`).
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let rest = text.lines().next()?.split("version ").nth(1)?;
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// How `qemu` must drop root when this process is root; `None` when it
/// is not (QEMU then runs as this user, as every process it starts).
/// Root with a QEMU whose version cannot be told is an error: QEMU is not
/// started as root without a drop.
pub fn for_this_process(qemu: &Path) -> Result<Option<RunAs>> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let out = std::process::Command::new(qemu)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(GuestError::io(format!(
            "running {} --version",
            qemu.display()
        )))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match parse_version(&text) {
        Some(v) if out.status.success() => Ok(Some(RunAs::guest(v))),
        _ => Err(GuestError::QemuVersion {
            program: qemu.display().to_string(),
            said: text
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_drop_option_follows_the_qemu_version() {
        let v = |t: &str| parse_version(t).unwrap();
        assert_eq!(
            v("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright"),
            (7, 2)
        );
        assert_eq!(v("QEMU emulator version 9.1.0"), (9, 1));
        assert_eq!(v("QEMU emulator version 10.0.2 (v10.0.2)"), (10, 0));
        assert_eq!(parse_version("qemu-system-x86_64: unknown option"), None);
        assert_eq!(parse_version(""), None);
        let ids = format!("{GUEST_UID}:{GUEST_GID}");
        assert_eq!(
            RunAs::guest((7, 2)).args(),
            ["-runas".to_string(), ids.clone()]
        );
        assert_eq!(RunAs::guest((9, 0)).flag, DropFlag::RunAs);
        assert_eq!(
            RunAs::guest((9, 1)).args(),
            ["-run-with".to_string(), format!("user={ids}")]
        );
        assert_eq!(RunAs::guest((10, 0)).flag, DropFlag::RunWith);
    }
}
