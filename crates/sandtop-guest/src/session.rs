//! Sessions on disk.
//!
//! Each session has a private folder (0700) under the state directory
//! (`$SANDTOP_STATE_DIR`, else `$XDG_STATE_HOME/sandtop`, else
//! `~/.local/state/sandtop`) holding its record (`session.json`), its token
//! (`token`, 0600), the pid of the host-cli that created it (`owner`, for
//! `guest gc`) and, for local sessions, the daemon's socket and log.
//! Docker sessions add `guest/`, the one host folder the guest gets
//! (bind-mounted at `/run/sandtop`): a copy of the token and the daemon's
//! socket. The guest can write there, so the host never reads a file from
//! `guest/` (it connects to the socket only after checking it is one, see
//! `guest::docker::channel`); the record and the host's token stay in the
//! host-only parent.
//! Creating the folder is the lock on the name: `mkdir` is atomic, so two
//! `guest start --name x` cannot both win.
//! Removing it copes with whatever the guest left in `guest/` (read-only
//! or unreadable directories, deep chains, links): see [`remove`].

pub mod guest_folder;
pub mod lock;
pub mod pool_member;
mod record;
pub mod remove;

pub use lock::{RunLock, end_run, hold_session, lock_session, session_holder};
pub use record::{
    Accel, BackendKind, BackendRecord, DockerRecord, LocalRecord, QemuRecord, SessionRecord,
};

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use sandtop_protocol::session;

/// What can go wrong with the state directory and its session folders.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "invalid session name `{0}`: use 1-32 characters a-z, 0-9 and `-`, not starting with `-`"
    )]
    BadName(String),
    #[error("a session named `{0}` already exists (host-cli guest ls)")]
    Exists(String),
    #[error("no session named `{0}` (host-cli guest ls lists them)")]
    NotFound(String),
    #[error("the record of session {name} is damaged")]
    Damaged {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("no state directory: set SANDTOP_STATE_DIR or HOME")]
    NoStateDir,
    /// A file operation of the store failed (`what` says which).
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Removing a folder left something behind (listed).
    #[error("removing {}: {left}", path.display())]
    Remove { path: PathBuf, left: String },
    #[error("no random bytes for a session name: {0}")]
    Random(String),
    /// The session folder is not private (0700) or not this user's.
    #[error("the session folder {} must be private (0700) and yours", .0.display())]
    NotPrivate(PathBuf),
    /// The session's token file.
    #[error(transparent)]
    Token(#[from] sandtop_client::TokenError),
    /// Another run holds the session's run lock (docs/contract.md rule 16).
    #[error("another run is active on session {name} (host-cli pid {holder}); one run per session")]
    RunActive { name: String, holder: String },
    /// A command that touches the desktop while a run owns the session
    /// (docs/contract.md rule 6).
    #[error(
        "session {name} is in use by a run (host-cli pid {holder}); `{what}` does not touch a \
         session a run owns. Wait for the run to end, or stop it (Ctrl-C in its terminal)"
    )]
    InUse {
        name: String,
        holder: String,
        what: String,
    },
    /// The run lock names no process (`guest stop --force`, `guest reset
    /// --force`).
    #[error("the run lock of session {0} names no process")]
    NoHolder(String),
    /// The run holding the session could not be sent Ctrl-C's signal.
    #[error("signalling host-cli pid {holder}")]
    Signal {
        holder: String,
        #[source]
        source: rustix::io::Errno,
    },
    /// The run holding the session was sent Ctrl-C's signal and lives on.
    #[error("the run (host-cli pid {0}) did not end within 30 s after Ctrl-C")]
    RunLingers(String),
}

type Result<T> = std::result::Result<T, SessionError>;

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SessionError {
    let path = path.to_path_buf();
    move |source| SessionError::Io { what, path, source }
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// A session's folder.
#[derive(Debug, Clone)]
pub struct SessionDir {
    pub name: String,
    pub path: PathBuf,
}

impl SessionDir {
    pub fn record_path(&self) -> PathBuf {
        self.path.join("session.json")
    }
    pub fn token_path(&self) -> PathBuf {
        self.path.join(session::TOKEN_NAME)
    }
    pub fn socket_path(&self) -> PathBuf {
        self.path.join(session::SOCKET_NAME)
    }
    pub fn log_path(&self) -> PathBuf {
        self.path.join("daemon.log")
    }
    /// The folder a Docker guest sees at `/run/sandtop`.
    pub fn guest_path(&self) -> PathBuf {
        self.path.join("guest")
    }
    /// `PID STARTTIME PIDNS` of the host-cli that created the folder (the
    /// PID namespace's inode; older folders have the first two only).
    pub fn owner_path(&self) -> PathBuf {
        self.path.join("owner")
    }

    /// Records this process as the folder's owner (`guest gc` leaves a
    /// folder without a record alone while its owner runs).
    pub fn write_owner(&self) -> Result<()> {
        let me = std::process::id();
        let start = process_start_time(me).unwrap_or(0);
        let ns = pid_namespace().unwrap_or(0);
        std::fs::write(self.owner_path(), format!("{me} {start} {ns}\n"))
            .map_err(io("writing", &self.owner_path()))
    }

    /// Whether the host-cli that created the folder still runs (same pid
    /// and the same start time, so a reused pid does not count).
    pub fn owner_alive(&self) -> bool {
        self.owner_state() == Some(true)
    }

    /// [`SessionDir::owner_alive`], told apart from what this process
    /// cannot know: `Some(true)` it runs; `Some(false)` it is gone (or no
    /// owner is recorded); `None` when it was recorded in another PID
    /// namespace than this process's, where its pid names nothing here
    /// (docs/security.md C14: absence from here is not proof).
    pub fn owner_state(&self) -> Option<bool> {
        let Ok(text) = std::fs::read_to_string(self.owner_path()) else {
            return Some(false);
        };
        let mut it = text.split_whitespace();
        let (Some(Ok(pid)), Some(Ok(start))) = (
            it.next().map(str::parse::<u32>),
            it.next().map(str::parse::<u64>),
        ) else {
            return Some(false);
        };
        if let Some(Ok(ns)) = it.next().map(str::parse::<u64>)
            && ns != 0
            && pid_namespace() != Some(ns)
        {
            return None;
        }
        Some(process_start_time(pid).is_some_and(|s| s == start))
    }

    /// Writes the record (atomically: temp file + rename).
    pub fn save(&self, rec: &SessionRecord) -> Result<()> {
        let tmp = self.path.join("session.json.tmp");
        // A record always serialises: its types have no map with
        // non-string keys and no fallible Serialize.
        let bytes = serde_json::to_vec_pretty(rec).unwrap_or_default();
        std::fs::write(&tmp, bytes).map_err(io("writing", &tmp))?;
        std::fs::rename(&tmp, self.record_path()).map_err(io("replacing", &self.record_path()))
    }

    pub fn load(&self) -> Result<SessionRecord> {
        let bytes =
            std::fs::read(self.record_path()).map_err(io("reading", &self.record_path()))?;
        serde_json::from_slice(&bytes).map_err(|source| SessionError::Damaged {
            name: self.name.clone(),
            source,
        })
    }
}

/// Checks a session name: 1-32 of `a-z`, `0-9`, `-`, starting with a
/// letter or digit (it becomes part of a container name and a path).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(SessionError::BadName(name.chars().take(40).collect()))
    }
}

/// A fresh session name, `s` and 6 hex digits.
pub fn new_name() -> Result<String> {
    let mut b = [0u8; 3];
    getrandom::fill(&mut b).map_err(|e| SessionError::Random(e.to_string()))?;
    Ok(format!("s{:02x}{:02x}{:02x}", b[0], b[1], b[2]))
}

impl Store {
    /// Opens (and creates, 0700) the state directory.
    pub fn open() -> Result<Store> {
        let root = if let Some(d) = std::env::var_os("SANDTOP_STATE_DIR") {
            PathBuf::from(d)
        } else if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
            PathBuf::from(d).join("sandtop")
        } else if let Some(h) = std::env::var_os("HOME") {
            PathBuf::from(h).join(".local/state/sandtop")
        } else {
            return Err(SessionError::NoStateDir);
        };
        Store::at(root)
    }

    /// A store rooted at `root`.
    pub fn at(root: PathBuf) -> Result<Store> {
        let sessions = root.join("sessions");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&sessions)
            .map_err(io("creating", &sessions))?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).ok();
        Ok(Store { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir_of(&self, name: &str) -> SessionDir {
        SessionDir {
            name: name.to_string(),
            path: self.root.join("sessions").join(name),
        }
    }

    /// Claims a new session folder; fails if the name is taken.
    pub fn create(&self, name: &str) -> Result<SessionDir> {
        check_name(name)?;
        let dir = self.dir_of(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir.path) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(SessionError::Exists(name.to_string()))
            }
            Err(e) => Err(io("creating", &dir.path)(e)),
        }
    }

    /// An existing session's folder.
    pub fn get(&self, name: &str) -> Result<SessionDir> {
        check_name(name)?;
        let dir = self.dir_of(name);
        if !dir.record_path().exists() {
            return Err(SessionError::NotFound(name.to_string()));
        }
        Ok(dir)
    }

    /// Every session folder with a readable record, by name.
    pub fn list(&self) -> Result<Vec<(SessionDir, SessionRecord)>> {
        let mut out = Vec::new();
        let sessions = self.root.join("sessions");
        for entry in std::fs::read_dir(&sessions).map_err(io("listing", &sessions))? {
            let entry = entry.map_err(io("listing", &sessions))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if check_name(&name).is_err() {
                continue;
            }
            let dir = self.dir_of(&name);
            if let Ok(rec) = dir.load() {
                out.push((dir, rec));
            }
        }
        out.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        Ok(out)
    }

    /// Every session folder, with or without a record (`guest gc`).
    pub fn folders(&self) -> Result<Vec<SessionDir>> {
        let mut out = Vec::new();
        let sessions = self.root.join("sessions");
        for entry in std::fs::read_dir(&sessions).map_err(io("listing", &sessions))? {
            let entry = entry.map_err(io("listing", &sessions))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if check_name(&name).is_ok() && entry.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(self.dir_of(&name));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes a session's folder (token, socket, log and whatever the
    /// guest left in `guest/`), never following a link; on failure, all
    /// it could remove is gone and the error lists what is left.
    pub fn remove(&self, dir: &SessionDir) -> Result<()> {
        let unmounted = guest_folder::unmount_guest_folder(dir);
        let removed = remove::remove_tree(&dir.path);
        let left = match (unmounted, removed) {
            (Ok(()), Ok(_)) => return Ok(()),
            (Ok(()), Err(left)) => left.to_string(),
            (Err(u), Ok(_)) => sandtop_hostkit::chain::chain(&u),
            (Err(u), Err(left)) => format!("{left}; {}", sandtop_hostkit::chain::chain(&u)),
        };
        Err(SessionError::Remove {
            path: dir.path.clone(),
            left,
        })
    }
}

/// This process's PID namespace (the inode of `/proc/self/ns/pid`).
pub fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// A process's start time (clock ticks since boot, field 22 of
/// `/proc/PID/stat`), or `None` when it does not exist.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "s1a2b3", "my-session", "0"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "A", "a b", "a/b", "..", "a_b", &"x".repeat(33)] {
            assert!(
                matches!(check_name(bad), Err(SessionError::BadName(_))),
                "{bad}"
            );
        }
        let n = new_name().unwrap();
        assert!(check_name(&n).is_ok(), "{n}");
    }

    #[test]
    fn create_is_exclusive_and_private() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let d = store.create("one").unwrap();
        let mode = std::fs::metadata(&d.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(matches!(store.create("one"), Err(SessionError::Exists(n)) if n == "one"));
        assert!(matches!(store.create("-x"), Err(SessionError::BadName(_))));
        assert!(matches!(store.get("two"), Err(SessionError::NotFound(n)) if n == "two"));
        let rec = SessionRecord {
            network: None,
            egress_pid: None,
            name: "one".into(),
            screen: sandtop_protocol::Size::new(800, 600),
            created_unix: 1,
            guest: BackendRecord::Local(LocalRecord { pid: 42 }),
        };
        d.save(&rec).unwrap();
        assert_eq!(store.list().unwrap().len(), 1);
        assert_eq!(store.get("one").unwrap().load().unwrap(), rec);
        std::fs::write(d.record_path(), b"{").unwrap();
        assert!(matches!(d.load(), Err(SessionError::Damaged { name, .. }) if name == "one"));
        d.save(&rec).unwrap();
        store.remove(&d).unwrap();
        assert!(matches!(store.get("one"), Err(SessionError::NotFound(_))));
    }

    /// The guest's folder is a tmpfs of its own (docs/security.md F3); removing
    /// the session unmounts it and leaves nothing.
    #[test]
    fn a_mounted_guest_folder_is_unmounted_and_removed() {
        if !rustix::process::geteuid().is_root() {
            println!("SKIP: mounting a tmpfs needs root");
            return;
        }
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let d = store.create("mounted").unwrap();
        std::fs::create_dir(d.guest_path()).unwrap();
        guest_folder::mount_guest_folder(&d.guest_path()).unwrap();
        let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
        assert_ne!(dev(&d.guest_path()), dev(&d.path), "not a mount point");
        std::fs::create_dir(d.guest_path().join("sub")).unwrap();
        std::fs::write(d.guest_path().join("sub/file"), b"x").unwrap();
        let g = d.guest_path().display().to_string();
        let mounted = || {
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .any(|l| l.split(' ').nth(4) == Some(g.as_str()))
        };
        assert!(mounted());
        store.remove(&d).unwrap();
        assert!(!mounted(), "the tmpfs is still mounted");
        assert!(!d.path.exists());
    }

    #[test]
    fn owner_is_this_process_until_it_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let d = store.create("two").unwrap();
        assert!(!d.owner_alive(), "no owner file yet");
        d.write_owner().unwrap();
        assert!(d.owner_alive());
        // Same pid, another start time: a reused pid.
        std::fs::write(d.owner_path(), format!("{} 1\n", std::process::id())).unwrap();
        assert!(!d.owner_alive());
        std::fs::write(d.owner_path(), "garbage").unwrap();
        assert!(!d.owner_alive());
        assert!(process_start_time(std::process::id()).is_some());
        // Recorded in another PID namespace: a pid there proves nothing
        // here, alive or not.
        let ns = pid_namespace().unwrap();
        std::fs::write(d.owner_path(), format!("1 1 {}\n", ns + 1)).unwrap();
        assert_eq!(d.owner_state(), None);
        assert!(!d.owner_alive());
        // An older owner file (no namespace) is judged here as before.
        d.write_owner().unwrap();
        let text = std::fs::read_to_string(d.owner_path()).unwrap();
        assert!(text.trim().ends_with(&ns.to_string()), "{text}");
        let old: Vec<&str> = text.split_whitespace().take(2).collect();
        std::fs::write(d.owner_path(), old.join(" ")).unwrap();
        assert_eq!(d.owner_state(), Some(true));
    }
}
