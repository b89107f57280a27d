//! The session folder's `guest/` part: the only host folder a guest sees
//! (`/run/sandtop` inside), prepared for the guest's uid, and as root a
//! small tmpfs of its own (issue 12 item 2, docs/security.md F1-F3).

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use sandtop_client::Token;
use sandtop_protocol::session;

use super::{SessionDir, SessionError, io};
use sandtop_protocol::session::{GUEST_GID, GUEST_UID};

/// The size of the guest's folder, `/run/sandtop` (issue 12 item 2): it
/// holds a 64-byte token and two sockets.
pub const GUEST_FOLDER_BYTES: u64 = 1024 * 1024;
/// Its inodes (the folder itself, the token, the sockets, and room).
pub const GUEST_FOLDER_INODES: u64 = 64;

/// Mounts a tmpfs of [`GUEST_FOLDER_BYTES`] and [`GUEST_FOLDER_INODES`] on
/// `g`, `nosuid,nodev,noexec`, named `sandtop` (issue 12 item 2): what the
/// guest writes there is bounded and costs the host's disk nothing (its
/// pages are charged to the guest's memory cgroup, the writer), nothing
/// there can be executed, and the guest's `/proc/self/mountinfo` shows the
/// root of that tmpfs (`/`), not the host path of the session folder.
/// Root only; `session::Store::remove` unmounts it.
pub fn mount_guest_folder(g: &Path) -> Result<(), SessionError> {
    use rustix::mount::MountFlags;
    let data = std::ffi::CString::new(format!(
        "size={GUEST_FOLDER_BYTES},nr_inodes={GUEST_FOLDER_INODES},mode=0700"
    ))
    .map_err(|e| io("mounting a tmpfs on", g)(e.into()))?;
    rustix::mount::mount(
        "sandtop",
        g,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        data.as_c_str(),
    )
    .map_err(errno("mounting a tmpfs on", g))
}

/// A failed system call on `path`.
fn errno(what: &'static str, path: &Path) -> impl FnOnce(rustix::io::Errno) -> SessionError {
    let io = io(what, path);
    move |e| io(e.into())
}

/// Creates the session's `guest/` folder with a copy of the token, owned
/// so that the guest's uid can use it (see the module docs). As root the
/// folder is a tmpfs of its own ([`mount_guest_folder`]); as another user
/// it is a plain directory (no size cap, exec allowed, its host path
/// visible to the guest: docs/security.md F3 says so).
pub fn prepare_guest_dir(dir: &SessionDir) -> Result<PathBuf, SessionError> {
    use rustix::fs::{Gid, Uid};
    let meta = std::fs::metadata(&dir.path).map_err(io("reading", &dir.path))?;
    let euid = rustix::process::geteuid();
    if meta.mode() & 0o077 != 0 || meta.uid() != euid.as_raw() {
        return Err(SessionError::NotPrivate(dir.path.clone()));
    }
    let g = dir.guest_path();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&g)
        .map_err(io("creating", &g))?;
    if euid.is_root() {
        mount_guest_folder(&g)?;
    } else {
        tracing::warn!(
            "host-cli is not root: the guest's folder {} is a plain directory, without a size \
             cap or noexec (docs/security.md F3)",
            g.display()
        );
    }
    let token_path = g.join(session::TOKEN_NAME);
    Token::read(&dir.token_path())?.write_new(&token_path)?;
    let set_mode = |p: &Path, m: u32| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).map_err(io("chmod", p))
    };
    if euid.is_root() {
        let (u, gid) = (Uid::from_raw(GUEST_UID), Gid::from_raw(GUEST_GID));
        rustix::fs::chown(&g, Some(u), Some(gid)).map_err(errno("chown to the guest user", &g))?;
        rustix::fs::chown(&token_path, Some(u), Some(gid))
            .map_err(errno("chown to the guest user", &token_path))?;
        set_mode(&token_path, 0o400)?;
    } else if euid.as_raw() != GUEST_UID {
        // Not root and not the guest's uid: open the folder to "others";
        // the 0700 folders above it keep other host users out.
        set_mode(&g, 0o777)?;
        set_mode(&token_path, 0o644)?;
    }
    Ok(g)
}

/// Unmounts the tmpfs on a session's `guest/` folder, when one is there
/// ([`mount_guest_folder`]; a folder on another device than
/// the session folder is a mount point). Detached, so a guest that still
/// holds a file open there does not stop it; never through a link.
pub fn unmount_guest_folder(dir: &SessionDir) -> Result<(), SessionError> {
    use std::os::unix::fs::MetadataExt as _;
    let g = dir.guest_path();
    let (Ok(top), Ok(inner)) = (
        std::fs::symlink_metadata(&dir.path),
        std::fs::symlink_metadata(&g),
    ) else {
        return Ok(());
    };
    if !inner.is_dir() || inner.dev() == top.dev() {
        return Ok(());
    }
    use rustix::mount::UnmountFlags;
    rustix::mount::unmount(&g, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW)
        .map_err(errno("unmounting the guest's folder", &g))
}
