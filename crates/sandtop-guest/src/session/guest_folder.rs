//! The session folder's `guest/` part: what the guest sees at
//! `/run/sandtop`, always a small tmpfs (docs/security.md
//! F1-F4). As root host-cli mounts that tmpfs on
//! `guest/` itself ([`GuestFolder::HostTmpfs`]); as any other user the
//! engine mounts it inside the container and only the token and the egress
//! socket come from `guest/`, as single-file binds
//! ([`GuestFolder::EngineTmpfs`]), so that nothing the guest writes lands
//! on the host's disk.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use sandtop_client::Token;
use sandtop_protocol::session;

use super::{SessionDir, SessionError, io};
use sandtop_protocol::session::{GUEST_GID, GUEST_UID};

/// The size of the guest's folder, `/run/sandtop` (docs/security.md F3): it
/// holds a 64-byte token and two sockets.
pub const GUEST_FOLDER_BYTES: u64 = 1024 * 1024;
/// Its inodes (the folder itself, the token, the sockets, and room).
pub const GUEST_FOLDER_INODES: u64 = 64;

/// Who makes the guest's `/run/sandtop` a tmpfs, which decides what of
/// the host's `guest/` folder the guest sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestFolder {
    /// host-cli runs as root: it mounts the tmpfs on `guest/`
    /// ([`mount_guest_folder`]), and `guest/` is bind-mounted whole at
    /// `/run/sandtop`; the host reaches the daemon's socket there.
    HostTmpfs,
    /// host-cli runs as another user, who cannot mount: the engine mounts
    /// a tmpfs of the same size, inodes and options at `/run/sandtop`
    /// ([`engine_tmpfs_options`]), and the guest sees of `guest/` only the
    /// token (bound read-only, a single file) and the egress socket (bound
    /// read-only, a single socket; connecting needs no write). `guest/`
    /// itself stays 0700 and the operator's: nothing the guest writes
    /// reaches the host's disk (docs/security.md F4), and the daemon's socket
    /// lives only in the guest (the channel takes the exec path, as it did
    /// for such a user before).
    EngineTmpfs,
}

impl GuestFolder {
    /// The layout for this process: [`GuestFolder::HostTmpfs`] as root.
    pub fn for_this_process() -> GuestFolder {
        if rustix::process::geteuid().is_root() {
            GuestFolder::HostTmpfs
        } else {
            GuestFolder::EngineTmpfs
        }
    }
}

/// The options of the engine's tmpfs at `/run/sandtop`
/// ([`GuestFolder::EngineTmpfs`]): the same bounds as
/// [`mount_guest_folder`]'s, owned by the guest's uid.
pub fn engine_tmpfs_options() -> String {
    format!(
        "rw,nosuid,nodev,noexec,size={GUEST_FOLDER_BYTES},nr_inodes={GUEST_FOLDER_INODES},\
         uid={GUEST_UID},gid={GUEST_GID},mode=0700"
    )
}

/// Mounts a tmpfs of [`GUEST_FOLDER_BYTES`] and [`GUEST_FOLDER_INODES`] on
/// `g`, `nosuid,nodev,noexec`, named `sandtop` (docs/security.md F3): what the
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
/// so that the guest's uid can use it (see the module docs). As root
/// ([`GuestFolder::HostTmpfs`]) the folder is a tmpfs of its own
/// ([`mount_guest_folder`]), chowned to the guest; as another user
/// ([`GuestFolder::EngineTmpfs`]) it stays a 0700 folder of this user and
/// only its token copy is made readable (0644) for the single-file bind.
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
        // Not root and not the guest's uid: the token copy is readable by
        // "others" for its single-file bind; the folder stays 0700 (the
        // guest never sees it), and the 0700 folders above keep other host
        // users out.
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
