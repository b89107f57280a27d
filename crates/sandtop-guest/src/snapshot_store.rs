//! The VM snapshots on disk (docs/contract.md rules 85-88, docs/security.md
//! V8): where they are kept, what identifies them, their descriptions,
//! the one a start may use, and the partial files a killed `guest
//! snapshot` left. The VM backend (`qemu.rs`) reads this store to start a
//! clone; `qemu_snapshot` (above the backend) makes snapshots into it.
//! How a snapshot is made and why a clone is safe: `qemu_snapshot`.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::session::SessionDir;
use crate::{GuestError, Result};

/// Where snapshots are kept, when not in `snapshots/` beside the image.
pub const FOLDER_ENV: &str = "SANDTOP_VM_SNAPSHOTS";
/// `0`: `guest start` never starts a VM from a snapshot.
pub const USE_ENV: &str = "SANDTOP_VM_SNAPSHOT";
/// The link's virtio-serial port's QEMU id.
pub const LINK_PORT_ID: &str = "link";
/// The clock port's QEMU id (the guest's root helper reads the host's
/// time from it when a session's link starts). A snapshot is taken at
/// the link port's (`LINK_PORT_ID`) `VSERPORT_CHANGE`, once the desktop is
/// healthy.
pub const CLOCK_PORT_ID: &str = "clock";
/// The snapshot files' format; a new one makes the old ones stale.
pub(crate) const FORMAT: u32 = 1;
/// The name and folder the identity's arguments are computed for.
pub(crate) const CANONICAL_NAME: &str = "snapshot";
pub(crate) const CANONICAL_DIR: &str = "/sandtop-session";
/// The name of the session a snapshot boots in, before 8 hex digits.
pub(crate) const SESSION_PREFIX: &str = "snapshot-";

/// The folder a VM image's snapshots are kept in: `$SANDTOP_VM_SNAPSHOTS`,
/// else `snapshots/` in the image's folder.
pub fn folder(image_dir: &Path) -> PathBuf {
    std::env::var_os(FOLDER_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| image_dir.join("snapshots"))
}

/// Whether `guest start` may use a snapshot (`SANDTOP_VM_SNAPSHOT=0`: no).
pub fn enabled_by_env() -> bool {
    std::env::var_os(USE_ENV).is_none_or(|v| v != "0")
}

/// A file as it was when the snapshot was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub path: PathBuf,
    pub len: u64,
    pub mtime_s: i64,
    pub mtime_ns: i64,
    pub ino: u64,
}

impl FileId {
    pub fn of(path: &Path) -> Result<FileId> {
        let m = std::fs::metadata(path)
            .map_err(GuestError::io(format!("reading {}", path.display())))?;
        Ok(FileId {
            path: path.to_path_buf(),
            len: m.len(),
            mtime_s: m.mtime(),
            mtime_ns: m.mtime_nsec(),
            ino: m.ino(),
        })
    }
}

/// Everything a clone must share with its snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub format: u32,
    /// `vmlinuz`, `initrd.img`, `rootfs.ext4`.
    pub image: Vec<FileId>,
    /// `input-hash` of `make guest-vm`, when there.
    pub input_hash: Option<String>,
    pub qemu: FileId,
    /// QEMU's arguments for a session at a fixed path and name.
    pub args: Vec<String>,
}

/// A snapshot's description (`ID.json` beside `ID.vmstate`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub identity: Identity,
    /// The state file's name, in the same folder.
    pub state_file: String,
    pub created_unix: u64,
    pub bytes: u64,
    /// From QEMU's start to the guest waiting for its token.
    pub boot_ms: u64,
    /// Writing the state.
    pub save_ms: u64,
}

/// A snapshot on disk.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub meta: Meta,
    pub meta_path: PathBuf,
    pub state: PathBuf,
}

/// A file or folder only this user may change: owned by it, not
/// writable by group or others. A snapshot is the memory a guest starts
/// from; one planted by another account would run in its place.
pub(crate) fn private(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o022 == 0)
}

/// The snapshots in `folder` whose description reads (in no order).
pub fn list(folder: &Path) -> Vec<Snapshot> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let meta: Meta = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            // A plain `*.vmstate` name in this folder, nothing else: a
            // description never points (or makes `remove` delete) outside.
            let plain = Path::new(&meta.state_file)
                .file_name()
                .is_some_and(|n| n == meta.state_file.as_str())
                && meta.state_file.ends_with(".vmstate");
            if !plain {
                return None;
            }
            let state = folder.join(&meta.state_file);
            Some(Snapshot {
                meta,
                meta_path: e.path(),
                state,
            })
        })
        .collect()
}

/// The snapshot of identity `want` in `folder`: its files are there and
/// private to this user.
pub fn find_in(folder: &Path, want: &Identity) -> Option<Snapshot> {
    if !private(folder) {
        return None;
    }
    list(folder).into_iter().find(|s| {
        &s.meta.identity == want && s.state.is_file() && private(&s.state) && private(&s.meta_path)
    })
}

/// Whether `dir` is the session of a `guest snapshot` whose host-cli is
/// gone (killed): named `snapshot-…`, no token (no session ever had one),
/// its creator not running. Nobody will save or stop it: `guest gc` does.
pub fn abandoned(dir: &SessionDir) -> bool {
    dir.name.starts_with(SESSION_PREFIX)
        && !dir.token_path().exists()
        && dir.owner_state() == Some(false)
}

/// Removes a snapshot's files.
pub fn remove(s: &Snapshot) {
    let _ = std::fs::remove_file(&s.state);
    let _ = std::fs::remove_file(&s.meta_path);
}

/// A file being written: `ID.PID.KIND.partial`, PID this process's, so
/// that a later `guest snapshot` can tell one whose writer is gone.
pub(crate) fn partial_name(id: &str, kind: &str) -> String {
    format!("{id}.{}.{kind}.partial", std::process::id())
}

/// The writer's pid of a name [`partial_name`] made.
pub(crate) fn partial_writer(name: &str) -> Option<i32> {
    let mut parts = name.strip_suffix(".partial")?.split('.');
    let (_id, pid, kind) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !matches!(kind, "vmstate" | "json") {
        return None;
    }
    pid.parse().ok()
}

/// Removes the partial files of `guest snapshot`s that are gone (killed
/// before they finished or cleaned up: a state file is hundreds of MiB).
/// One whose writer still runs is left to it.
pub(crate) fn remove_abandoned_partials(folder: &Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(partial_writer) else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid).is_some_and(|p| {
            !matches!(
                rustix::process::test_kill_process(p),
                Err(rustix::io::Errno::SRCH)
            )
        });
        if !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
