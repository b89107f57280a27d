//! VM snapshots (docs/contract.md rules 85-88, docs/security.md V8): a VM guest boots once to a saved
//! state, and later VMs start from that state instead of booting.
//!
//! `host-cli guest snapshot` ([`make`]) boots a VM of the configuration
//! asked (memory, CPUs, screen, egress mode) with no link process, so no
//! token ever reaches it. QEMU starts paused with a QMP socket in the
//! snapshot's own session folder; host-cli lets it run and waits for
//! QEMU's `VSERPORT_CHANGE` event of the link's port: the guest's link
//! (`sandtopd vm-link`) opens it only once the desktop it started is
//! healthy (the daemon runs with `--await-token`: no token exists yet),
//! and then waits for the token.
//! The VM is stopped there and written out by QEMU's own migration, to a
//! file host-cli opens and hands over (QMP `getfd` then `migrate fd:`):
//! QEMU's seccomp filter forbids it to spawn a writer, and after dropping
//! root it could not open the file itself. Then QEMU quits.
//!
//! `guest start --backend qemu` (`QemuBackend::snapshot_identity`, then
//! [`super::snapshot_store::find_in`]) uses a snapshot whose
//! [`Identity`] is exactly the one the start would have: the same image
//! files (size, modification time and inode of `vmlinuz`, `initrd.img`,
//! `rootfs.ext4`, and `make guest-vm`'s input hash), the same QEMU binary,
//! and the same QEMU arguments but for the session's paths and name (so
//! the same memory, CPUs, CPU model, accelerator and kernel command line:
//! screen, egress mode, tmpfs sizes). A rebuilt image or another QEMU
//! makes every older snapshot stale: never used, removed by the next
//! `guest snapshot`. The clone's QEMU gets the same arguments as a cold
//! boot plus `-incoming fd:0`, the snapshot file as its standard input:
//! it loads the state and runs on; its own link sends the host's time
//! (marked `snapshot`) and its own token, and the guest goes on from where
//! the snapshot stopped: a root helper sets its clock and waits for its
//! kernel's reseed (below), then the link hands the daemon the token.
//! When QEMU exits before the guest is ready (it could not load the state:
//! a damaged file, a CPU that cannot take it), the start removes the
//! snapshot and boots instead, once (`QemuBackend::start`).
//!
//! What a snapshot holds: the VM's memory and device state at that
//! moment: the kernel after boot (its page cache of the read-only root
//! disk, its random state), the initramfs's mounts, the tmpfs places as
//! the boot left them, and the desktop as it first came up: tini, the
//! root clock helper waiting on the clock port, and the guest user's link,
//! D-Bus, the demo app, Xvfb, openbox, the panel and sandtopd waiting for
//! its token. No token (none was sent) and nothing any session did. The root
//! disk is not in it (it is the read-only image file, which a clone
//! attaches read-only again; no disk is writable, so a clone needs no
//! copy-on-write overlay: its writable places are tmpfs in its own
//! memory, which QEMU loads privately for each clone).
//!
//! Each clone's kernel random state is its own: `-device vmgenid,guid=auto`
//! gives every QEMU process a fresh VM generation ID, which QEMU writes
//! into the restored guest's memory with an ACPI notification; the guest
//! kernel's vmgenid driver (CONFIG_VMGENID, built into Debian's kernel)
//! mixes it in and reseeds its CRNG at once ("random: crng reseeded due to
//! virtual machine fork", on the clone's console). The root helper marks
//! the clock done only once that line is in the kernel's log (else it stops
//! the VM), and the link gives the daemon its token only after that mark,
//! so nothing is served, and nothing is started for a session, before the
//! reseed. Processes already in the snapshot keep their own user-space
//! random state (a Rust HashMap's keys, D-Bus's GUID): the same in every
//! clone; none of them holds a secret.

use std::io::{BufRead as _, Write as _};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::qemu::QemuBackend;
use super::snapshot_store::{
    FORMAT, Identity, LINK_PORT_ID, Meta, SESSION_PREFIX, Snapshot, folder, list, partial_name,
    private, remove, remove_abandoned_partials,
};
use super::{GuestError, Result, StartRequest};
use crate::session::{BackendRecord, QemuRecord, SessionDir, SessionRecord, Store, now_unix};

/// Eight random bytes in hex.
fn random_hex() -> Result<String> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| GuestError::io("reading random bytes")(std::io::Error::other(e)))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Boots a VM of `req`'s configuration on `b` to the point where it waits
/// for its token, saves it in the store's [`folder`] and ends it. The VM runs as a
/// session (`snapshot-…`, no token) for the time, so `guest gc` removes
/// it after a kill of this command. Replaces the snapshot of the same
/// identity and removes stale ones (of another image or QEMU).
pub fn make(store: &Store, b: &QemuBackend, req: &StartRequest) -> Result<Snapshot> {
    make_until(store, b, req, &Stop::default())
}

/// Stops a [`make_until`] from another thread (a signal's handler): its
/// QEMU is killed, so every wait on it ends, and the snapshot's session
/// and partial files are removed as after any failure.
#[derive(Debug, Default)]
pub struct Stop {
    /// The signal that stopped it, once one has.
    signal: std::sync::OnceLock<&'static str>,
    /// Set (after `signal`) when stopped: with `qemu`, sequentially
    /// consistent, so that a stop and a start cannot both miss the other.
    stopped: std::sync::atomic::AtomicBool,
    /// The QEMU's pid (its process group's) once started; 0 before.
    qemu: std::sync::atomic::AtomicI32,
}

impl Stop {
    /// Stops the snapshot (`signal` names why): now if its QEMU runs,
    /// else before it starts.
    pub fn stop(&self, signal: &'static str) {
        let _ = self.signal.set(signal);
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let pid = self.qemu.load(std::sync::atomic::Ordering::SeqCst);
        if pid > 0 {
            super::qemu::kill_group(pid, rustix::process::Signal::KILL);
        }
    }

    /// The error of a stopped snapshot, when it was stopped.
    fn stopped(&self) -> Option<GuestError> {
        self.stopped
            .load(std::sync::atomic::Ordering::SeqCst)
            .then(|| GuestError::Interrupted {
                signal: self.signal.get().copied().unwrap_or("a signal"),
            })
    }

    /// Records the QEMU started; whether the snapshot was stopped before
    /// (then that QEMU is killed here).
    fn started(&self, pid: i32) -> bool {
        self.qemu.store(pid, std::sync::atomic::Ordering::SeqCst);
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            super::qemu::kill_group(pid, rustix::process::Signal::KILL);
            return true;
        }
        false
    }
}

/// [`make`], which `stop` can end from another thread
/// ([`GuestError::Interrupted`] then, with nothing of it left).
pub fn make_until(
    store: &Store,
    b: &QemuBackend,
    req: &StartRequest,
    stop: &Stop,
) -> Result<Snapshot> {
    let refuse = |why: &str| GuestError::Snapshot {
        why: why.into(),
        qemu_log: String::new(),
        console: String::new(),
    };
    if !super::qemu::supports_vmgenid() {
        return Err(refuse(
            "this machine's QEMU offers no VM generation ID (vmgenid: x86_64 only here), \
             so clones could not be told apart: no snapshots",
        ));
    }
    if b.probe {
        return Err(refuse(
            "SANDTOP_VM_PROBE=1 is set: the probe's facts are printed at boot, which a VM \
             started from a snapshot does not go through, so no start would use this snapshot",
        ));
    }
    let ident = b.snapshot_identity(req)?;
    let folder = folder(&b.image.dir);
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&folder)
            .map_err(GuestError::io(format!("creating {}", folder.display())))?;
    }
    if !private(&folder) {
        return Err(GuestError::io(format!(
            "{} must be this user's and writable by no one else",
            folder.display()
        ))(std::io::ErrorKind::PermissionDenied.into()));
    }
    remove_abandoned_partials(&folder);
    let name = format!("{SESSION_PREFIX}{}", &random_hex()?[..8]);
    let dir = store.create(&name)?;
    let made = make_in(&dir, b, req, ident, &folder, stop);
    let _ = store.remove(&dir);
    let made = match (made, stop.stopped()) {
        (Err(_), Some(e)) => return Err(e),
        (m, _) => m?,
    };
    for old in list(&folder) {
        let stale = old.meta.identity.image != made.meta.identity.image
            || old.meta.identity.input_hash != made.meta.identity.input_hash
            || old.meta.identity.qemu != made.meta.identity.qemu
            || old.meta.identity.format != FORMAT;
        let replaced = old.meta.identity == made.meta.identity;
        if old.meta_path != made.meta_path && (stale || replaced) {
            remove(&old);
        }
    }
    Ok(made)
}

fn make_in(
    dir: &SessionDir,
    b: &QemuBackend,
    req: &StartRequest,
    identity: Identity,
    folder: &Path,
    stop: &Stop,
) -> Result<Snapshot> {
    dir.write_owner()?;
    let mut r = req.clone();
    r.name.clone_from(&dir.name);
    let qmp_path = dir.path.join("qmp.sock");
    let mut cmd = Command::new(&b.qemu);
    cmd.args(b.args(dir, &r))
        // Paused until host-cli is on QMP: no event is missed.
        .arg("-S")
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", qmp_path.display()))
        // Without the run state in the stream, a clone runs as soon as it
        // has loaded it (with it, a snapshot of a stopped VM loads stopped).
        .args(["-global", "migration.store-global-state=off"]);
    let log = dir.path.join("qemu.log");
    let mut child = super::qemu::spawn(&mut cmd, &log, Stdio::null())?;
    let pid = child.id() as i32;
    if stop.started(pid) {
        let _ = child.wait();
        return Err(stop
            .stopped()
            .unwrap_or(GuestError::Interrupted { signal: "a signal" }));
    }
    let rec = SessionRecord {
        network: None,
        egress_pid: None,
        name: dir.name.clone(),
        screen: req.screen,
        created_unix: now_unix(),
        guest: BackendRecord::Qemu(QemuRecord {
            pid,
            link_pid: pid,
            accel: b.accel,
        }),
    };
    let id = random_hex()?;
    let state_file = format!("{id}.vmstate");
    let partial = folder.join(partial_name(&id, "vmstate"));
    let saved = dir.save(&rec).map_err(GuestError::from).and_then(|()| {
        save(
            b,
            &qmp_path,
            &mut child,
            &partial,
            &dir.path.join("console.log"),
        )
    });
    // However it went, QEMU ends here.
    if matches!(child.try_wait(), Ok(None)) {
        super::qemu::kill_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.wait();
    let (boot, save_time) = match saved {
        Ok(t) => t,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    let state = folder.join(&state_file);
    std::fs::rename(&partial, &state)
        .map_err(GuestError::io(format!("renaming {}", partial.display())))?;
    let meta = Meta {
        identity,
        state_file,
        created_unix: now_unix(),
        bytes: std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0),
        boot_ms: u64::try_from(boot.as_millis()).unwrap_or(u64::MAX),
        save_ms: u64::try_from(save_time.as_millis()).unwrap_or(u64::MAX),
    };
    let meta_path = folder.join(format!("{id}.json"));
    let tmp = folder.join(partial_name(&id, "json"));
    // A Meta always serialises (plain fields).
    let bytes = serde_json::to_vec_pretty(&meta).unwrap_or_default();
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &meta_path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&state);
        return Err(GuestError::io(format!("writing {}", meta_path.display()))(
            e,
        ));
    }
    Ok(Snapshot {
        meta,
        meta_path,
        state,
    })
}

/// Runs the paused VM until its link's port opens, stops it, writes its
/// state to `partial`, quits QEMU. The boot's and the save's durations.
fn save(
    b: &QemuBackend,
    qmp_path: &Path,
    child: &mut Child,
    partial: &Path,
    console: &Path,
) -> Result<(Duration, Duration)> {
    let qemu_log = qmp_path.with_file_name("qemu.log");
    let fail = |why: String| GuestError::Snapshot {
        why,
        qemu_log: super::qemu::tail(&qemu_log, 10),
        console: super::qemu::tail(console, 25),
    };
    let t0 = Instant::now();
    let mut qmp = Qmp::connect(qmp_path, child, t0 + Duration::from_secs(30)).map_err(&fail)?;
    qmp.execute("cont", json!({})).map_err(&fail)?;
    let timeout = b
        .ready_timeout
        .unwrap_or_else(|| super::qemu::ready_timeout(b.accel));
    qmp.wait_event(
        |e| {
            e["event"] == "VSERPORT_CHANGE"
                && e["data"]["id"] == LINK_PORT_ID
                && e["data"]["open"] == true
        },
        child,
        t0 + timeout,
    )
    .map_err(|e| fail(format!("the guest's link never opened its port: {e}")))?;
    let boot = t0.elapsed();
    let t1 = Instant::now();
    qmp.execute("stop", json!({})).map_err(&fail)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(partial)
        .map_err(GuestError::io(format!("creating {}", partial.display())))?;
    qmp.execute_with_fd("getfd", json!({"fdname": "snapshot"}), file.as_fd())
        .map_err(&fail)?;
    drop(file);
    qmp.execute(
        "migrate-set-parameters",
        json!({"max-bandwidth": 8u64 << 30}),
    )
    .map_err(&fail)?;
    qmp.execute("migrate", json!({"uri": "fd:snapshot"}))
        .map_err(&fail)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let r = qmp.execute("query-migrate", json!({})).map_err(&fail)?;
        match r["status"].as_str() {
            Some("completed") => break,
            Some("failed" | "cancelled") => {
                return Err(fail(format!(
                    "QEMU's migration to the file failed: {}",
                    r["error-desc"].as_str().unwrap_or("no reason given")
                )));
            }
            _ if Instant::now() > deadline => {
                return Err(fail("writing the state took over 300 s".into()));
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let _ = qmp.execute("quit", json!({}));
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::File::open(partial)
        .and_then(|f| f.sync_all())
        .map_err(GuestError::io(format!("syncing {}", partial.display())))?;
    Ok((boot, t1.elapsed()))
}

/// A QMP client, just enough for a snapshot: commands, events, one
/// descriptor passed with a command.
struct Qmp {
    stream: UnixStream,
    reader: std::io::BufReader<UnixStream>,
    pending: Vec<u8>,
    events: std::collections::VecDeque<Value>,
}

impl Qmp {
    /// Connects (QEMU creates the socket as it starts), reads the greeting
    /// and leaves negotiation mode.
    fn connect(path: &Path, child: &mut Child, deadline: Instant) -> Result<Qmp, String> {
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) => {
                    if !matches!(child.try_wait(), Ok(None)) {
                        return Err("QEMU exited".into());
                    }
                    if Instant::now() > deadline {
                        return Err(format!("QEMU's QMP socket never answered: {e}"));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| e.to_string())?;
        let reader = std::io::BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let mut q = Qmp {
            stream,
            reader,
            pending: Vec::new(),
            events: Default::default(),
        };
        let hello = q.message(Some(child), deadline)?;
        if hello.get("QMP").is_none() {
            return Err(format!("QEMU's QMP greeting was {hello}"));
        }
        q.execute("qmp_capabilities", json!({}))?;
        Ok(q)
    }

    /// The next message, whole; an error when `child` (when given) exits
    /// or `deadline` passes first.
    fn message(
        &mut self,
        mut child: Option<&mut Child>,
        deadline: Instant,
    ) -> Result<Value, String> {
        loop {
            match self.reader.read_until(b'\n', &mut self.pending) {
                Ok(0) => return Err("QEMU closed its QMP socket".into()),
                Ok(_) if self.pending.ends_with(b"\n") => {
                    let line = std::mem::take(&mut self.pending);
                    return serde_json::from_slice(&line)
                        .map_err(|e| format!("QEMU's QMP sent something else than JSON: {e}"));
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    if let Some(c) = child.as_deref_mut()
                        && !matches!(c.try_wait(), Ok(None))
                    {
                        return Err("QEMU exited".into());
                    }
                    if Instant::now() > deadline {
                        return Err("QEMU's QMP did not answer in time".into());
                    }
                }
                Err(e) => return Err(format!("reading QEMU's QMP socket: {e}")),
            }
        }
    }

    /// The reply to the command just sent (events meanwhile are kept).
    fn reply(&mut self, what: &str) -> Result<Value, String> {
        // The commands here answer at once; QEMU's exit ends the wait.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = self.message(None, deadline)?;
            if m.get("event").is_some() {
                self.events.push_back(m);
            } else if let Some(r) = m.get("return") {
                return Ok(r.clone());
            } else if let Some(e) = m.get("error") {
                return Err(format!(
                    "QEMU refused {what}: {}",
                    e["desc"].as_str().unwrap_or("no reason given")
                ));
            }
        }
    }

    fn line(command: &str, args: &Value) -> Vec<u8> {
        let mut line =
            serde_json::to_vec(&json!({"execute": command, "arguments": args})).unwrap_or_default();
        line.push(b'\n');
        line
    }

    fn execute(&mut self, command: &str, args: Value) -> Result<Value, String> {
        self.stream
            .write_all(&Self::line(command, &args))
            .map_err(|e| format!("writing to QEMU's QMP socket: {e}"))?;
        self.reply(command)
    }

    /// `command` with `fd` passed alongside (SCM_RIGHTS), as `getfd` wants.
    fn execute_with_fd(
        &mut self,
        command: &str,
        args: Value,
        fd: BorrowedFd<'_>,
    ) -> Result<Value, String> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
        let line = Self::line(command, &args);
        let fds = [fd];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err("no room for the descriptor".into());
        }
        let sent = sendmsg(
            &self.stream,
            &[std::io::IoSlice::new(&line)],
            &mut control,
            SendFlags::empty(),
        )
        .map_err(|e| format!("passing the file to QEMU: {e}"))?;
        if sent != line.len() {
            // The descriptor went with the first bytes; the rest follows.
            self.stream
                .write_all(&line[sent..])
                .map_err(|e| format!("writing to QEMU's QMP socket: {e}"))?;
        }
        self.reply(command)
    }

    /// Waits for an event `want` accepts (or QEMU's exit, or `deadline`).
    fn wait_event(
        &mut self,
        want: impl Fn(&Value) -> bool,
        child: &mut Child,
        deadline: Instant,
    ) -> Result<Value, String> {
        while let Some(e) = self.events.pop_front() {
            if want(&e) {
                return Ok(e);
            }
        }
        loop {
            let m = self.message(Some(child), deadline)?;
            if m.get("event").is_some() && want(&m) {
                return Ok(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::qemu::{Accel, VmImage, VmLimits, default_cpu};
    use crate::snapshot_store::partial_writer;
    use std::path::PathBuf;

    /// The store's lookup for a start of `r` on `b`, as the backend does it.
    fn find_in(folder: &Path, b: &QemuBackend, r: &StartRequest) -> Result<Option<Snapshot>> {
        Ok(crate::snapshot_store::find_in(
            folder,
            &b.snapshot_identity(r)?,
        ))
    }

    fn identity(b: &QemuBackend, r: &StartRequest) -> Result<Identity> {
        b.snapshot_identity(r)
    }

    fn backend(dir: &Path) -> QemuBackend {
        for f in ["vmlinuz", "initrd.img", "rootfs.ext4", "qemu"] {
            std::fs::write(dir.join(f), f).unwrap();
        }
        QemuBackend {
            image: VmImage::at(dir.to_path_buf()).unwrap(),
            accel: Accel::Tcg,
            limits: VmLimits::default(),
            qemu: dir.join("qemu"),
            probe: false,
            cpu: default_cpu(Accel::Tcg).into(),
            ready_timeout: None,
            run_as: None,
            snapshots: true,
        }
    }

    fn req(screen: (u32, u32), mode: &str) -> StartRequest {
        let mut network = sandtop_egress::service::EgressConfig::none();
        network.mode = mode.parse().unwrap();
        StartRequest {
            name: "s1".into(),
            screen: sandtop_protocol::Size::new(screen.0, screen.1),
            network,
        }
    }

    /// A snapshot as `make` leaves it, for `b` and `r`.
    fn plant(folder: &Path, b: &QemuBackend, r: &StartRequest, id: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(folder).unwrap();
        std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        let meta = Meta {
            identity: identity(b, r).unwrap(),
            state_file: format!("{id}.vmstate"),
            created_unix: 1,
            bytes: 5,
            boot_ms: 1,
            save_ms: 1,
        };
        for (f, bytes) in [
            (format!("{id}.vmstate"), b"state".to_vec()),
            (format!("{id}.json"), serde_json::to_vec(&meta).unwrap()),
        ] {
            std::fs::write(folder.join(&f), bytes).unwrap();
            std::fs::set_permissions(folder.join(&f), std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        folder.join(format!("{id}.vmstate"))
    }

    /// A description whose state file is not a plain `*.vmstate` name in
    /// its folder (a path, `..`, another suffix) is no snapshot: never
    /// found, so never loaded nor removed through it.
    #[test]
    fn partial_files_of_a_writer_that_is_gone_are_removed_and_no_others() {
        let dir = tempfile::tempdir().unwrap();
        let f = |n: &str| dir.path().join(n);
        let gone = "0123abcd.2147483646.vmstate.partial";
        let gone_json = "0123abcd.2147483646.json.partial";
        let mine = partial_name("4567ef01", "vmstate");
        let others = [
            "0123abcd.vmstate",
            "0123abcd.json",
            "x.2147483646.other.partial",
        ];
        for n in [gone, gone_json, mine.as_str()].iter().chain(others.iter()) {
            std::fs::write(f(n), b"x").unwrap();
        }
        assert_eq!(partial_writer(&mine), Some(std::process::id() as i32));
        remove_abandoned_partials(dir.path());
        assert!(!f(gone).exists() && !f(gone_json).exists());
        assert!(f(&mine).exists(), "a partial whose writer runs was removed");
        for n in others {
            assert!(f(n).exists(), "{n} was removed");
        }
    }

    #[test]
    fn a_description_naming_a_file_elsewhere_is_no_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let b = backend(tmp.path());
        let folder = tmp.path().join("snapshots");
        let r = req((1280, 800), "none");
        plant(&folder, &b, &r, "aa");
        assert_eq!(list(&folder).len(), 1);
        std::fs::write(tmp.path().join("elsewhere.vmstate"), b"x").unwrap();
        for bad in [
            "../elsewhere.vmstate",
            "/etc/passwd",
            "aa.json",
            "sub/aa.vmstate",
        ] {
            let mut meta: Meta =
                serde_json::from_slice(&std::fs::read(folder.join("aa.json")).unwrap()).unwrap();
            meta.state_file = bad.into();
            std::fs::write(folder.join("aa.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
            assert!(list(&folder).is_empty(), "{bad} was taken for a state file");
            assert!(find_in(&folder, &b, &r).unwrap().is_none(), "{bad}");
        }
    }

    /// A start uses a snapshot of its own configuration only: the same
    /// image files, QEMU and arguments (screen, egress mode, memory...),
    /// the session's name and folder aside. A rebuilt image file makes it
    /// stale, and so does a folder or file another account could write.
    #[test]
    fn a_snapshot_serves_only_its_own_image_qemu_and_configuration() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let b = backend(tmp.path());
        let folder = tmp.path().join("snapshots");
        let r = req((1280, 800), "none");
        assert!(find_in(&folder, &b, &r).unwrap().is_none(), "no folder yet");
        let state = plant(&folder, &b, &r, "aa");
        let found = find_in(&folder, &b, &r).unwrap().unwrap();
        assert_eq!(found.state, state);
        // Another session name is the same configuration.
        let mut other_name = r.clone();
        other_name.name = "s2".into();
        assert!(find_in(&folder, &b, &other_name).unwrap().is_some());
        // Another screen, egress mode, memory: not this snapshot.
        assert!(
            find_in(&folder, &b, &req((1024, 768), "none"))
                .unwrap()
                .is_none()
        );
        assert!(
            find_in(&folder, &b, &req((1280, 800), "allow:https://a.test"))
                .unwrap()
                .is_none()
        );
        let mut bigger = b.clone();
        bigger.limits.memory_mib *= 2;
        assert!(find_in(&folder, &bigger, &r).unwrap().is_none());
        // Others' write access: refused.
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(find_in(&folder, &b, &r).unwrap().is_none());
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(find_in(&folder, &b, &r).unwrap().is_none());
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(find_in(&folder, &b, &r).unwrap().is_some());
        // The image rebuilt (a new file in place, as build.sh moves it):
        // stale.
        let rootfs = b.image.rootfs();
        std::fs::write(tmp.path().join("new"), "rootfs, rebuilt").unwrap();
        std::fs::rename(tmp.path().join("new"), &rootfs).unwrap();
        assert!(find_in(&folder, &b, &r).unwrap().is_none());
        // And another QEMU.
        plant(&folder, &b, &r, "bb");
        assert!(find_in(&folder, &b, &r).unwrap().is_some());
        std::fs::write(tmp.path().join("qemu2"), "another qemu").unwrap();
        std::fs::rename(tmp.path().join("qemu2"), &b.qemu).unwrap();
        assert!(find_in(&folder, &b, &r).unwrap().is_none());
    }

    /// Every VM gets a VM generation ID of its own process and the clock
    /// port, a clone the state on its standard input.
    #[test]
    fn every_vm_has_a_fresh_generation_id_and_the_clock_port() {
        let tmp = tempfile::tempdir().unwrap();
        let b = backend(tmp.path());
        let dir = SessionDir {
            name: "s1".into(),
            path: PathBuf::from("/state/s1"),
        };
        let joined = b.args(&dir, &req((1280, 800), "none")).join(" ");
        if crate::qemu::supports_vmgenid() {
            assert!(joined.contains("-device vmgenid,guid=auto"), "{joined}");
        }
        assert!(
            joined
                .contains("-chardev socket,id=clock,path=/state/s1/clock.sock,server=on,wait=off"),
            "{joined}"
        );
        assert!(
            joined.contains("virtserialport,id=clock,chardev=clock,name=org.sandtop.clock"),
            "{joined}"
        );
        assert!(!joined.contains("-incoming"), "{joined}");
    }
}
