//! Build-folder programs run as another uid (docs/security.md C12: the
//! probes run from a copy any uid may execute).
//!
//! Some tests run a program of the build folder (the test binary itself,
//! host-cli) as another uid: a host user who must not reach a guest, the
//! guest's own uid, two users of one engine. That uid cannot execute a
//! file under `target/` when a folder above the checkout is private (mode
//! 0700, as `/root` is, or a `mktemp -d` folder): exec fails with EACCES.
//! [`Runnable`] puts the program where every uid may execute it — a fresh
//! folder of mode 0755 in a temporary directory every uid can search,
//! owned by this process's uid, so the other uid cannot replace it — and
//! removes it when dropped.

use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A program that every uid of this host may execute; removed on drop.
/// Keep it alive until every process started from it has ended.
#[derive(Debug)]
pub struct Runnable {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl Runnable {
    /// `exe` in a fresh 0755 folder: a hard link when `exe` is readable
    /// and executable by everyone and on the same filesystem (no copy of
    /// a large test binary), else a copy of mode 0755.
    pub fn of(exe: &Path) -> io::Result<Self> {
        let base = searchable_temp_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("sandtop-exe-")
            .tempdir_in(&base)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let name = exe
            .file_name()
            .ok_or_else(|| io::Error::other(format!("{} names no file", exe.display())))?;
        let path = dir.path().join(name);
        let everyone_runs = std::fs::metadata(exe)?.mode() & 0o005 == 0o005;
        if !(everyone_runs && std::fs::hard_link(exe, &path).is_ok()) {
            std::fs::copy(exe, &path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Self { dir, path })
    }

    /// The running executable (a test binary re-running itself).
    pub fn current_exe() -> io::Result<Self> {
        Self::of(&std::env::current_exe()?)
    }

    /// Where the program is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder it is in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A command running it as `uid` and `gid` (from root, std's
    /// `CommandExt::uid` also drops the supplementary groups).
    pub fn command_as(&self, uid: u32, gid: u32) -> Command {
        let mut c = Command::new(&self.path);
        c.uid(uid).gid(gid);
        c
    }
}

/// Whether every uid may search `dir` and each folder above it.
pub fn searchable_by_all(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.is_dir() && m.mode() & 0o001 != 0))
}

/// `$TMPDIR` (std's temporary directory) when every uid can search it,
/// else `/tmp` or `/var/tmp`.
fn searchable_temp_dir() -> io::Result<PathBuf> {
    let candidates = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
    ];
    candidates
        .iter()
        .find(|d| searchable_by_all(d))
        .cloned()
        .ok_or_else(|| {
            io::Error::other(format!(
                "no temporary directory every uid can search among {candidates:?}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root: a program in a private folder cannot be run as another
    /// uid (the control: EACCES, what the other-uid tests met from a checkout
    /// under a private folder), its
    /// [`Runnable`] can, and the runnable's folder is gone once dropped.
    #[test]
    fn a_program_in_a_private_folder_runs_as_another_uid_through_its_runnable() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIP root: running a program as another uid needs root");
            return;
        }
        let private = tempfile::tempdir().unwrap();
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let checkout = private.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        std::fs::set_permissions(&checkout, std::fs::Permissions::from_mode(0o755)).unwrap();
        let truth = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|p| p.join("true"))
            .find(|p| p.is_file())
            .expect("`true` is on PATH");
        let exe = checkout.join("true");
        std::fs::copy(&truth, &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let nobody = 65534;
        let direct = Command::new(&exe).uid(nobody).gid(nobody).status();
        assert_eq!(
            direct.as_ref().map_err(io::Error::kind).err(),
            Some(io::ErrorKind::PermissionDenied),
            "the control: {direct:?}"
        );
        let r = Runnable::of(&exe).unwrap();
        assert!(searchable_by_all(r.dir()));
        let m = std::fs::metadata(r.dir()).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o755, 0));
        let st = r.command_as(nobody, nobody).status().unwrap();
        assert!(st.success(), "{st:?}");
        let dir = r.dir().to_path_buf();
        drop(r);
        assert!(!dir.exists(), "{} is left", dir.display());
        assert!(exe.is_file(), "the original is kept");
    }
}
