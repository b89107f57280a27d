//! Removing a folder the guest has written in.
//!
//! A Docker guest writes `guest/` of its session folder as its own uid
//! (`guest::ids::GUEST_UID`, no host account's) and can
//! leave there anything a process can make: directories without read,
//! write or search permission, chains of directories thousands deep,
//! symbolic links to anywhere, FIFOs and sockets. The host must still
//! remove the folder, as root or as the user who started the session.
//! `std::fs::remove_dir_all` fails
//! on the first two: a 0500 directory with a file in it stops it for
//! anyone but root (EACCES), and a chain deeper than RLIMIT_NOFILE stops
//! it for root too (it keeps one descriptor open per level: EMFILE).
//!
//! [`remove_tree`]:
//! - never follows a symbolic link: each directory is opened relative to
//!   its parent's descriptor with `O_NOFOLLOW`; links, like every other
//!   non-directory, are unlinked;
//! - gives a directory it owns `u+rwx` before reading it, through the
//!   `O_PATH` descriptor it opened (`/proc/self/fd/N`), so the mode change
//!   lands on that very directory, never on a path the guest could swap;
//! - keeps at most [`MAX_DEPTH`] directories open: one deeper than that is
//!   first moved up to the top of the tree (`renameat2` with
//!   `RENAME_NOREPLACE`) and removed from there, so a chain of any depth
//!   goes;
//! - goes on past what it cannot remove (a directory of another uid, for
//!   a host user who is neither root nor the guest's uid) and reports
//!   each failure with the owner's uid.
//!
//! Layout: inline tests (they rerun themselves in a child
//! process, as the guest's uid, and `guest`'s tests borrow their helpers);
//! `remove_tree` is one loop over one stack of open directories. If it grows,
//! the tests move to `remove/tests.rs`.

use std::collections::HashSet;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// The most directories [`remove_tree`] keeps open at once.
pub const MAX_DEPTH: usize = 48;

/// How many times the tree may be read again before the removal gives up
/// (only a writer racing the removal needs more than a few).
const MAX_PASSES: u64 = 1_000_000;

/// At most this many failures are described; the rest are counted.
const MAX_REPORTED: usize = 16;

/// What [`remove_tree`] could not remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// The first failures, each `path: why`.
    pub failures: Vec<String>,
    /// All failures, described or not.
    pub count: usize,
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} entr{} could not be removed: {}",
            self.count,
            if self.count == 1 { "y" } else { "ies" },
            self.failures.join("; ")
        )?;
        if self.count > self.failures.len() {
            write!(f, "; and {} more", self.count - self.failures.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for Leftovers {}

impl Leftovers {
    fn add(&mut self, path: &Path, why: String) {
        self.count += 1;
        if self.failures.len() < MAX_REPORTED {
            self.failures.push(format!("{}: {why}", path.display()));
        }
    }
}

/// One open directory on the way down.
struct Frame {
    dir: Dir,
    /// Its path below the top, for reports.
    rel: PathBuf,
    /// Its name in the directory above (None for the top).
    name: Option<CString>,
    /// Entries that could not be removed (skipped on later passes).
    failed: HashSet<CString>,
    /// Reading it failed.
    unreadable: bool,
    /// The current pass removed (or moved, or found changed) something.
    progress: bool,
}

impl Frame {
    fn new(dir: Dir, rel: PathBuf, name: Option<CString>) -> Frame {
        Frame {
            dir,
            rel,
            name,
            failed: HashSet::new(),
            unreadable: false,
            progress: false,
        }
    }
}

/// Removes `path` and everything under it without following symbolic
/// links (see the module docs). Returns how many entries were removed
/// (`path` included); `Ok(0)` when `path` does not exist. When something
/// cannot be removed, everything else still is and the error lists what
/// is left.
pub fn remove_tree(path: &Path) -> Result<u64, Leftovers> {
    let mut left = Leftovers::default();
    let top = match open_dir(CWD, path) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(0),
        // A symbolic link or a file in its place: remove that, not what it
        // points to.
        Err(Errno::NOTDIR | Errno::LOOP) => {
            return match rustix::fs::unlinkat(CWD, path, AtFlags::empty()) {
                Ok(()) => Ok(1),
                Err(Errno::NOENT) => Ok(0),
                Err(e) => {
                    left.add(path, e.to_string());
                    Err(left)
                }
            };
        }
        Err(e) => {
            left.add(path, describe(e, None));
            return Err(left);
        }
    };
    let top = match readable(&top).and_then(Dir::new) {
        Ok(d) => d,
        Err(e) => {
            left.add(path, e.to_string());
            return Err(left);
        }
    };
    let mut removed = 0u64;
    let mut passes = 0u64;
    let mut moved = 0u64;
    let mut stack = vec![Frame::new(top, PathBuf::new(), None)];
    loop {
        let depth = stack.len();
        let Some(top) = stack.last_mut() else {
            break;
        };
        let entry = match top.dir.read() {
            Some(Ok(e)) => Some((e.file_name().to_owned(), e.file_type())),
            Some(Err(e)) => {
                left.add(&path.join(&top.rel), format!("reading it: {e}"));
                top.unreadable = true;
                None
            }
            None => None,
        };
        let Some((name, ty)) = entry else {
            // The end of a pass over this directory.
            if top.progress && !top.unreadable {
                if passes < MAX_PASSES {
                    // Read it again until a pass changes nothing.
                    passes += 1;
                    top.progress = false;
                    top.dir.rewind();
                    continue;
                }
                left.add(&path.join(&top.rel), "it keeps changing".into());
                top.unreadable = true;
            }
            let done = stack.pop().expect("the loop holds a frame");
            let stuck = done.unreadable || !done.failed.is_empty();
            let Frame { dir, rel, name, .. } = done;
            drop(dir);
            let Some(parent) = stack.last_mut() else {
                if stuck {
                    return Err(left);
                }
                return match rustix::fs::unlinkat(CWD, path, AtFlags::REMOVEDIR) {
                    Ok(()) => Ok(removed + 1),
                    Err(Errno::NOENT) => Ok(removed),
                    Err(e) => {
                        left.add(path, e.to_string());
                        Err(left)
                    }
                };
            };
            let name = name.expect("only the top has no name");
            if stuck {
                parent.failed.insert(name);
                continue;
            }
            match rustix::fs::unlinkat(fd(&parent.dir), &*name, AtFlags::REMOVEDIR) {
                Ok(()) => {
                    removed += 1;
                    parent.progress = true;
                }
                Err(Errno::NOENT) => parent.progress = true,
                Err(e) => {
                    left.add(&path.join(&rel), e.to_string());
                    parent.failed.insert(name);
                }
            }
            continue;
        };
        if name.to_bytes() == b"." || name.to_bytes() == b".." || top.failed.contains(&name) {
            continue;
        }
        let rel = top.rel.join(OsStr::from_bytes(name.to_bytes()));
        let parent = fd(&top.dir);
        let ty = if ty == FileType::Unknown {
            match rustix::fs::statat(parent, &*name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(Errno::NOENT) => continue,
                Err(e) => {
                    left.add(&path.join(&rel), e.to_string());
                    top.failed.insert(name);
                    continue;
                }
            }
        } else {
            ty
        };
        if ty != FileType::Directory {
            match rustix::fs::unlinkat(parent, &*name, AtFlags::empty()) {
                Ok(()) => {
                    removed += 1;
                    top.progress = true;
                }
                Err(Errno::NOENT) => {}
                // It became a directory meanwhile: look again.
                Err(Errno::ISDIR) => top.progress = true,
                Err(e) => {
                    let owner = rustix::fs::fstat(parent).ok().map(|s| s.st_uid);
                    left.add(&path.join(&rel), describe_in(e, owner));
                    top.failed.insert(name);
                }
            }
            continue;
        }
        let sub = match open_dir(parent, &*name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => continue,
            // A link or a file now: look again.
            Err(Errno::NOTDIR | Errno::LOOP) => {
                top.progress = true;
                continue;
            }
            Err(e) => {
                let owner = rustix::fs::statat(parent, &*name, AtFlags::SYMLINK_NOFOLLOW)
                    .ok()
                    .map(|s| s.st_uid);
                left.add(&path.join(&rel), describe(e, owner));
                top.failed.insert(name);
                continue;
            }
        };
        if depth >= MAX_DEPTH {
            // Too deep to open: move it to the top, whose passes go on
            // until one finds nothing to do.
            drop(sub);
            let to_top = loop {
                moved += 1;
                let to = CString::new(format!(".sandtop-rm-{moved}")).expect("no NUL");
                match rustix::fs::renameat_with(
                    fd(&stack[depth - 1].dir),
                    &*name,
                    fd(&stack[0].dir),
                    &*to,
                    RenameFlags::NOREPLACE,
                ) {
                    Err(Errno::EXIST) => continue,
                    r => break r,
                }
            };
            let top = stack.last_mut().expect("the loop holds a frame");
            match to_top {
                Ok(()) => {
                    top.progress = true;
                    stack[0].progress = true;
                }
                Err(e) => {
                    left.add(&path.join(&rel), format!("moving it up: {e}"));
                    top.failed.insert(name);
                }
            }
            continue;
        }
        let owner = rustix::fs::fstat(&sub).ok().map(|s| s.st_uid);
        match readable(&sub).and_then(Dir::new) {
            Ok(dir) => stack.push(Frame::new(dir, rel, Some(name))),
            Err(e) => {
                left.add(&path.join(&rel), describe(e, owner));
                top.failed.insert(name);
            }
        }
    }
    Err(left)
}

/// A descriptor that reads the directory `fd` (an `O_PATH` one) refers to.
fn readable(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        fd,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn fd(dir: &Dir) -> BorrowedFd<'_> {
    dir.fd().expect("a Dir has a descriptor")
}

/// Opens the directory `name` in `at` without following a link (`O_PATH`:
/// no permission needed) and gives it `u+rwx` if this process owns it.
fn open_dir<P: rustix::path::Arg>(at: impl AsFd, name: P) -> Result<OwnedFd, Errno> {
    let fd = rustix::fs::openat(
        at,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let mode = st.st_mode & 0o7777;
    let me = rustix::process::geteuid();
    if mode & 0o700 != 0o700 && (me.is_root() || st.st_uid == me.as_raw()) {
        // fchmod does not take O_PATH descriptors; the /proc link names
        // the opened directory itself, whatever happens to the path.
        let _ = rustix::fs::chmod(
            format!("/proc/self/fd/{}", fd.as_raw_fd()),
            Mode::from_raw_mode(mode | 0o700),
        );
    }
    Ok(fd)
}

/// An error on an entry of a directory owned by `owner`.
fn describe_in(e: Errno, owner: Option<u32>) -> String {
    match owner {
        Some(uid) if uid != rustix::process::geteuid().as_raw() => {
            format!("{e} (in a directory of uid {uid})")
        }
        _ => e.to_string(),
    }
}

/// An error on an entry owned by `owner`.
fn describe(e: Errno, owner: Option<u32>) -> String {
    match owner {
        Some(uid) if uid != rustix::process::geteuid().as_raw() => {
            format!("{e} (owned by uid {uid})")
        }
        _ => e.to_string(),
    }
}

/// Test support: the name of a test in this crate, for re-running it in a
/// child process.
#[cfg(test)]
pub(crate) fn test_name(module: &str, f: &str) -> String {
    let m = module.split_once("::").map_or(module, |(_, rest)| rest);
    format!("{m}::{f}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _, symlink};

    /// Set in a child run of a test: the folder it works in.
    pub(crate) const CHILD: &str = "SANDTOP_TEST_CHILD_DIR";

    /// The guest's uid (a process of that uid is the case to cover: the
    /// guest's own files, whatever their modes) and another account's.
    pub(crate) const GUEST: u32 = crate::ids::GUEST_UID;
    pub(crate) const OTHER: u32 = crate::ids::GUEST_UID + 1;

    /// Runs test `f` of `module` again in a child process, in `dir`, as
    /// `uid` when given (from root: setuid and setgid, supplementary
    /// groups dropped), from a copy of the test binary that uid may
    /// execute wherever the checkout is (docs/security.md C12). `None` (with the
    /// reason printed) when the child cannot be started as another uid
    /// because this process is not root; as root, that is a failure.
    pub(crate) fn rerun(
        module: &str,
        f: &str,
        dir: &Path,
        uid: Option<u32>,
    ) -> Option<std::process::Output> {
        use sandtop_testkit::other_uid::Runnable;
        let copy;
        let mut cmd = match uid {
            Some(u) => {
                copy = Runnable::current_exe().expect("a copy of the test binary");
                copy.command_as(u, u)
            }
            None => std::process::Command::new(std::env::current_exe().expect("current_exe")),
        };
        cmd.args(["--exact", &test_name(module, f), "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD, dir);
        match cmd.output() {
            Ok(o) => Some(o),
            Err(e) if !rustix::process::geteuid().is_root() => {
                println!("SKIP: cannot run the test binary as uid {uid:?}: {e}");
                None
            }
            Err(e) => panic!("running the test binary as uid {uid:?} as root: {e}"),
        }
    }

    /// Checks a child run: it succeeded and got to its end.
    pub(crate) fn check_child(out: &std::process::Output, dir: &Path) {
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "the child failed:\n{text}");
        assert!(
            dir.join("child-done").exists(),
            "the child did not run the case:\n{text}"
        );
    }

    pub(crate) fn chown_tree(p: &Path, uid: u32) {
        use rustix::fs::{Gid, Uid};
        let (u, g) = (Uid::from_raw(uid), Gid::from_raw(uid));
        rustix::fs::chownat(CWD, p, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW).unwrap();
        if std::fs::symlink_metadata(p).unwrap().is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                chown_tree(&e.unwrap().path(), uid);
            }
        }
    }

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    /// What a hostile guest leaves in its folder: a read-only directory
    /// with a file (what once stopped a removal; docs/security.md F1), directories without read or
    /// search permission, a file with mode 0, a FIFO, symbolic links to a
    /// directory and a file outside, and a chain 200 deep ending in a
    /// read-only directory.
    fn plant(g: &Path, victim: &Path) {
        let d = |p: &Path| std::fs::create_dir(p).unwrap();
        let f = |p: &Path| std::fs::write(p, b"x").unwrap();
        d(&g.join("ro"));
        f(&g.join("ro/file"));
        d(&g.join("ro/sub"));
        f(&g.join("ro/sub/file"));
        symlink(victim, g.join("ro/link")).unwrap();
        mode(&g.join("ro/sub"), 0);
        mode(&g.join("ro"), 0o500);
        d(&g.join("noread"));
        f(&g.join("noread/file"));
        mode(&g.join("noread"), 0o300);
        d(&g.join("nosearch"));
        f(&g.join("nosearch/file"));
        mode(&g.join("nosearch"), 0o600);
        f(&g.join("zero"));
        mode(&g.join("zero"), 0);
        rustix::fs::mknodat(
            CWD,
            g.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        symlink(victim, g.join("link")).unwrap();
        symlink(victim.join("keep"), g.join("file-link")).unwrap();
        let mut at = g.join("chain");
        d(&at);
        for _ in 0..200 {
            at.push("d");
            d(&at);
        }
        f(&at.join("file"));
        mode(&at, 0o500);
    }

    fn victim_is_intact(victim: &Path) {
        assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"keep");
        assert!(victim.join("sub").is_dir());
        let m = std::fs::metadata(victim).unwrap();
        assert_eq!(m.mode() & 0o777, 0o555, "the link's target was chmod-ed");
    }

    #[test]
    fn a_guests_read_only_trap_is_removed_by_the_guests_uid() {
        if let Some(dir) = std::env::var_os(CHILD) {
            trap_case(Path::new(&dir));
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        if rustix::process::geteuid().is_root() {
            // Root ignores modes (nothing here fails for it): run the case
            // as the guest's uid, the host user who shares it.
            chown_tree(tmp.path(), GUEST);
            let f = "a_guests_read_only_trap_is_removed_by_the_guests_uid";
            let Some(out) = rerun(module_path!(), f, tmp.path(), Some(GUEST)) else {
                return;
            };
            check_child(&out, tmp.path());
        } else {
            trap_case(tmp.path());
        }
    }

    fn trap_case(dir: &Path) {
        let victim = dir.join("victim");
        std::fs::create_dir_all(victim.join("sub")).unwrap();
        std::fs::write(victim.join("keep"), b"keep").unwrap();
        mode(&victim, 0o555);
        // The control: the same layout stops std's remove_dir_all.
        let control = dir.join("control");
        std::fs::create_dir(&control).unwrap();
        plant(&control, &victim);
        let e = std::fs::remove_dir_all(&control).unwrap_err();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied,
            "as uid {}: {e}",
            rustix::process::geteuid().as_raw()
        );
        let n = remove_tree(&control).unwrap();
        assert!(!control.exists());
        assert!(n > 200, "{n}");
        victim_is_intact(&victim);
        // Through `guest stop`, on a session folder.
        let store = crate::session::Store::at(dir.join("state")).unwrap();
        let sd = store.create("trap").unwrap();
        std::fs::create_dir(sd.guest_path()).unwrap();
        plant(&sd.guest_path(), &victim);
        let rec = crate::session::SessionRecord {
            name: "trap".into(),
            screen: sandtop_protocol::Size::new(800, 600),
            created_unix: 1,
            // Not a sandtopd: stop finds no daemon to end.
            guest: crate::session::BackendRecord::Local(crate::session::LocalRecord {
                pid: std::process::id() as i32,
            }),
            network: None,
            egress_pid: None,
        };
        sd.save(&rec).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(crate::stop(&store, &sd, &rec)).unwrap();
        assert!(!sd.path.exists(), "the session folder is left");
        victim_is_intact(&victim);
        mode(&victim, 0o755);
        std::fs::write(dir.join("child-done"), b"").unwrap();
    }

    #[test]
    fn a_chain_deeper_than_the_descriptor_limit_is_removed() {
        if let Some(dir) = std::env::var_os(CHILD) {
            chain_case(Path::new(&dir));
            return;
        }
        // In a child process: the case lowers its descriptor limit.
        let tmp = tempfile::tempdir().unwrap();
        let f = "a_chain_deeper_than_the_descriptor_limit_is_removed";
        let Some(out) = rerun(module_path!(), f, tmp.path(), None) else {
            return;
        };
        check_child(&out, tmp.path());
    }

    /// A chain `depth` deep under `top`, built with one descriptor at a
    /// time (no path gets long).
    fn chain(top: &Path, depth: usize) {
        std::fs::create_dir(top).unwrap();
        let mut at =
            rustix::fs::open(top, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&at, c"d", Mode::from_raw_mode(0o700)).unwrap();
            at = rustix::fs::openat(&at, c"d", OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                .unwrap();
        }
        let f = rustix::fs::openat(
            &at,
            c"file",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o600),
        );
        drop(f.unwrap());
    }

    fn chain_case(dir: &Path) {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = 128;
        let hard = getrlimit(Resource::Nofile).maximum;
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(limit),
                maximum: hard,
            },
        )
        .unwrap();
        let depth = 600;
        // The control: std's remove_dir_all runs out of descriptors, as
        // root too.
        let control = dir.join("control");
        chain(&control, depth);
        let e = std::fs::remove_dir_all(&control).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(Errno::MFILE.raw_os_error()), "{e}");
        let removed = remove_tree(&control).unwrap();
        assert_eq!(removed, depth as u64 + 2, "the top, the chain and its file");
        assert!(!control.exists());
        std::fs::write(dir.join("child-done"), b"").unwrap();
    }

    #[test]
    fn what_cannot_be_removed_is_reported_and_the_rest_removed() {
        if let Some(dir) = std::env::var_os(CHILD) {
            stuck_case(Path::new(&dir));
            return;
        }
        if !rustix::process::geteuid().is_root() {
            println!("SKIP: making a directory of another uid needs root");
            return;
        }
        // A directory of another account, in a folder of the guest's uid:
        // the guest's uid cannot empty it.
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        std::fs::create_dir_all(top.join("a/theirs")).unwrap();
        std::fs::write(top.join("a/theirs/file"), b"x").unwrap();
        std::fs::create_dir_all(top.join("b/mine")).unwrap();
        std::fs::write(top.join("b/mine/file"), b"x").unwrap();
        std::fs::write(top.join("c"), b"x").unwrap();
        chown_tree(tmp.path(), GUEST);
        chown_tree(&top.join("a/theirs"), OTHER);
        let f = "what_cannot_be_removed_is_reported_and_the_rest_removed";
        let Some(out) = rerun(module_path!(), f, tmp.path(), Some(GUEST)) else {
            return;
        };
        check_child(&out, tmp.path());
        assert!(top.join("a/theirs/file").exists());
    }

    fn stuck_case(dir: &Path) {
        let top = dir.join("top");
        let left = remove_tree(&top).unwrap_err();
        assert_eq!(left.count, 1, "{left}");
        let msg = left.to_string();
        assert!(
            msg.contains("top/a/theirs/file: ")
                && msg.contains(&format!("in a directory of uid {OTHER}")),
            "{msg}"
        );
        // Everything else is gone.
        assert!(!top.join("b").exists() && !top.join("c").exists());
        let names: Vec<_> = std::fs::read_dir(&top)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a")]);
        std::fs::write(dir.join("child-done"), b"").unwrap();
    }

    #[test]
    fn a_link_or_a_missing_path_at_the_top() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"keep").unwrap();
        let link = tmp.path().join("link");
        symlink(&target, &link).unwrap();
        assert_eq!(remove_tree(&link).unwrap(), 1);
        assert!(std::fs::symlink_metadata(&link).is_err());
        assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"keep");
        assert_eq!(remove_tree(&tmp.path().join("nothing")).unwrap(), 0);
    }
}
