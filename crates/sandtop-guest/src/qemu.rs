//! The QEMU backend (docs/security.md V1-V8): the guest's root filesystem as a VM, with
//! no network device; the daemon is reached over one virtio-serial port.
//!
//! `make guest-vm` (guest-vm/build.sh) turns the container image into
//! `rootfs.ext4` (attached read-only), `vmlinuz` and `initrd.img` in
//! [`VmImage::dir`]. A session runs two processes of the invoking user,
//! each leading its own process group (started by root, QEMU drops to the
//! guest's uid: [`super::qemu_user`]):
//!
//! - `qemu-system-<arch> -nodefaults -no-user-config -display none -nic
//!   none -sandbox on,...` with the accelerator [`Accel::pick`] chose,
//!   memory and CPUs from [`VmLimits`], the serial console written to
//!   `console.log` (log output only: no getty, no shell), a pid file, and
//!   the virtio-serial port `org.sandtop.link` as the Unix socket
//!   `link.sock` of the session folder, the port `org.sandtop.clock` as
//!   `clock.sock`, a VM generation ID (`vmgenid`) of its own; from a
//!   snapshot, `-incoming fd:0` ([`super::qemu_snapshot`]);
//! - the host end of the link (`host-cli qemu-link`, [`serve_link`]): it
//!   writes the host's time on the clock port, sends the session token
//!   down the link's port (never on a command line, in an environment or
//!   a log), then carries yamux streams
//!   ([`sandtop_vmlink`]): connections to `sandtopd.sock` in the session
//!   folder become streams to the guest's daemon, and the guest's egress
//!   streams reach the session's egress proxy.
//!
//! Inside, guest-vm/init mounts the root read-only and the writable places
//! as size-capped tmpfs, and runs the same entry as the container.
//!
//! Layout: inline tests at the end; what one VM session needs,
//! in order: the image, the accelerator (`Accel::pick` and its KVM probe),
//! the limits, the command line, the `Backend` impl and the link's host
//! end (with the clock it sends). Snapshots are their own module
//! (`qemu_snapshot`). If it grows, it becomes a folder like `docker/`,
//! probe and link first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use sandtop_protocol::session;

use super::qemu_user::RunAs;
use super::snapshot_store::{CANONICAL_DIR, CANONICAL_NAME, FORMAT, FileId, Identity};
use super::{Backend, GuestError, Result, StartRequest};
pub use crate::session::{Accel, QemuRecord};
use crate::session::{BackendRecord, SessionDir, SessionRecord, now_unix};
use sandtop_channel::{Channel, Connect, UnixConnector};
use sandtop_hostkit::secret::Secret;

/// The guest user's uid and gid inside the VM (the image's `user`).
pub const GUEST_ID: u32 = super::ids::GUEST_UID;

/// The virtio-serial port on which the link's host end writes the host's
/// time (seconds since the epoch, one line) as it connects.
pub const CLOCK_PORT_NAME: &str = "org.sandtop.clock";

/// Where `make guest-vm` puts the image unless `SANDTOP_VM_DIR` says.
pub fn default_image_dir() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    data.join("sandtop")
        .join(format!("vm-{}", std::env::consts::ARCH))
}

/// The files `make guest-vm` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmImage {
    pub dir: PathBuf,
}

impl VmImage {
    /// `$SANDTOP_VM_DIR`, else [`default_image_dir`]; every file must be
    /// there.
    pub fn locate() -> Result<VmImage> {
        let dir = std::env::var_os("SANDTOP_VM_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(default_image_dir);
        VmImage::at(dir)
    }

    /// The image in `dir`; every file must be there.
    pub fn at(dir: PathBuf) -> Result<VmImage> {
        let img = VmImage { dir };
        for f in [img.kernel(), img.initrd(), img.rootfs()] {
            if !f.is_file() {
                return Err(GuestError::NoVmImage { missing: f });
            }
        }
        Ok(img)
    }
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }
    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs.ext4")
    }
}

impl Accel {
    /// `hvf` on macOS; on Linux `kvm` when `/dev/kvm` opens read-write
    /// and the guest's own kernel, booted under KVM, prints its first line
    /// (`kvm_probe`); else `tcg` and the reason. A host can expose
    /// `/dev/kvm`, start a paused QEMU with it and even run the BIOS, and
    /// still never get the kernel past its switch to long mode (seen here:
    /// no VT-x exposed to this machine, the VM spun at 100% CPU with an
    /// empty console).
    pub fn pick(qemu: &Path, kernel: &Path, run_as: Option<RunAs>) -> (Accel, Option<String>) {
        if cfg!(target_os = "macos") {
            return (Accel::Hvf, None);
        }
        let tcg = |why: String| {
            (
                Accel::Tcg,
                Some(format!(
                    "{why}: the VM runs under TCG, software emulation, many times slower"
                )),
            )
        };
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
        {
            return tcg(format!("/dev/kvm is not usable ({e})"));
        }
        match kvm_probe(qemu, kernel, run_as) {
            Ok(()) => (Accel::Kvm, None),
            Err(e) => tcg(format!("KVM does not work here ({e})")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Hvf => "hvf",
            Accel::Tcg => "tcg",
        }
    }
}

/// How long the KVM probe waits for the kernel's first line: under a
/// working KVM it comes in well under a second.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(6);

/// Boots `kernel` under KVM (no disk, no initrd, no network, the serial
/// port on a pipe) until it prints `Linux version`, then stops QEMU.
/// Started as root, it drops as the session's QEMU does.
fn kvm_probe(qemu: &Path, kernel: &Path, run_as: Option<RunAs>) -> Result<(), String> {
    use std::io::Read as _;
    let machine = if std::env::consts::ARCH == "aarch64" {
        "virt"
    } else {
        "q35"
    };
    let console = if std::env::consts::ARCH == "aarch64" {
        "console=ttyAMA0 earlycon panic=-1"
    } else {
        "console=ttyS0 earlyprintk=ttyS0 panic=-1"
    };
    let mut child = std::process::Command::new(qemu)
        .args([
            "-accel", "kvm", "-machine", machine, "-cpu", "host", "-m", "256",
        ])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-nic",
            "none",
        ])
        .args(run_as.as_ref().map(RunAs::args).unwrap_or_default())
        .args(["-serial", "stdio", "-no-reboot", "-kernel"])
        .arg(kernel)
        .args(["-append", console])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", qemu.display()))?;
    let mut out = child.stdout.take().ok_or("no pipe from QEMU")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(13).any(|w| w == b"Linux version") {
                let _ = tx.send(());
                return;
            }
            if seen.len() > 1 << 20 {
                break;
            }
        }
    });
    let booted = rx.recv_timeout(KVM_PROBE_TIMEOUT).is_ok();
    let _ = child.kill();
    let done = child.wait_with_output().map_err(|e| e.to_string())?;
    if booted {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&done.stderr);
    match err
        .lines()
        .find(|l| !l.trim().is_empty() && !l.contains("terminating on signal"))
    {
        Some(first) => Err(format!("QEMU's KVM probe failed: {}", first.trim())),
        None => Err(format!(
            "the guest's kernel printed nothing under KVM within {KVM_PROBE_TIMEOUT:?}"
        )),
    }
}

/// The VM's size: the same figures as the Docker guest's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmLimits {
    pub memory_mib: u64,
    pub cpus: u32,
    pub tmp_bytes: u64,
    pub home_bytes: u64,
    pub shm_bytes: u64,
}

impl Default for VmLimits {
    fn default() -> VmLimits {
        VmLimits::from(&super::limits::Limits::default())
    }
}

impl From<&super::limits::Limits> for VmLimits {
    /// A VM of the container's size: its memory, its CPUs rounded down to
    /// whole ones (at least one), the same tmpfs sizes.
    fn from(d: &super::limits::Limits) -> VmLimits {
        VmLimits {
            memory_mib: (d.memory_bytes / (1024 * 1024)) as u64,
            cpus: (d.nano_cpus / 1_000_000_000).max(1) as u32,
            tmp_bytes: d.tmp_bytes as u64,
            home_bytes: d.home_bytes as u64,
            shm_bytes: d.shm_bytes as u64,
        }
    }
}

/// The CPU model: the host's own under a hypervisor; under TCG a model
/// QEMU emulates fully (`SANDTOP_QEMU_CPU` overrides).
pub fn default_cpu(accel: Accel) -> &'static str {
    match accel {
        Accel::Tcg => "max",
        _ => "host",
    }
}

/// How long `start` waits for the daemon: a TCG boot is slow.
pub fn ready_timeout(accel: Accel) -> Duration {
    match accel {
        Accel::Tcg => Duration::from_secs(240),
        _ => Duration::from_secs(60),
    }
}

/// The QEMU backend.
#[derive(Debug, Clone)]
pub struct QemuBackend {
    pub image: VmImage,
    pub accel: Accel,
    pub limits: VmLimits,
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// QEMU's `-cpu` model.
    pub cpu: String,
    /// Print the read-only probe's facts on the console at boot
    /// (`SANDTOP_VM_PROBE=1`; the VM tests read them with `guest logs`).
    pub probe: bool,
    /// How long `start` waits for the daemon (default: by accelerator,
    /// [`ready_timeout`]).
    pub ready_timeout: Option<Duration>,
    /// The ids QEMU drops to when host-cli runs as root.
    pub run_as: Option<RunAs>,
    /// Start from a matching snapshot when there is one
    /// ([`super::qemu_snapshot`]; `SANDTOP_VM_SNAPSHOT=0`: never).
    pub snapshots: bool,
}

/// `qemu-system-<arch>` for this machine.
pub fn qemu_program() -> String {
    format!("qemu-system-{}", std::env::consts::ARCH)
}

impl QemuBackend {
    /// The image from [`VmImage::locate`], the accelerator from
    /// [`Accel::pick`] (its warning printed), the default limits.
    pub fn new() -> Result<QemuBackend> {
        let image = VmImage::locate()?;
        let program = qemu_program();
        let Some(qemu) = super::local::which(&program) else {
            return Err(GuestError::NoQemu { program });
        };
        let run_as = super::qemu_user::for_this_process(&qemu)?;
        let (accel, why) = Accel::pick(&qemu, &image.kernel(), run_as);
        if let Some(why) = why {
            eprintln!("host-cli: {why}");
        }
        Ok(QemuBackend {
            image,
            accel,
            limits: VmLimits::default(),
            qemu,
            probe: std::env::var_os("SANDTOP_VM_PROBE").is_some_and(|v| v == "1"),
            cpu: std::env::var("SANDTOP_QEMU_CPU").unwrap_or_else(|_| default_cpu(accel).into()),
            ready_timeout: None,
            run_as,
            snapshots: super::snapshot_store::enabled_by_env(),
        })
    }

    /// The VM's size from the guest limits (`--memory`, `--cpus`).
    pub fn with_limits(mut self, limits: &super::limits::Limits) -> Self {
        self.limits = VmLimits::from(limits);
        self
    }

    /// How long `start` waits for the daemon; `None`: by accelerator.
    pub fn with_ready_timeout(mut self, t: Option<Duration>) -> Self {
        self.ready_timeout = t;
        self
    }

    /// The identity a start of `req` has: what a snapshot it may use
    /// shares with it (its image files, this QEMU, the same arguments but
    /// for the session's paths and name; `qemu_snapshot`).
    pub fn snapshot_identity(&self, req: &StartRequest) -> Result<Identity> {
        let dir = SessionDir {
            name: CANONICAL_NAME.into(),
            path: PathBuf::from(CANONICAL_DIR),
        };
        let mut canonical = req.clone();
        CANONICAL_NAME.clone_into(&mut canonical.name);
        let image = [
            self.image.kernel(),
            self.image.initrd(),
            self.image.rootfs(),
        ]
        .iter()
        .map(|p| FileId::of(p))
        .collect::<Result<Vec<_>>>()?;
        Ok(Identity {
            format: FORMAT,
            image,
            input_hash: std::fs::read_to_string(self.image.dir.join("input-hash"))
                .ok()
                .map(|s| s.trim().to_string()),
            qemu: FileId::of(&self.qemu)?,
            args: self.args(&dir, &canonical),
        })
    }

    /// The snapshot a start of `req` uses: one of its exact identity,
    /// unless snapshots are off or the boot probe is asked (its facts are
    /// printed at boot, which a clone does not go through).
    fn snapshot_for(&self, req: &StartRequest) -> Option<super::snapshot_store::Snapshot> {
        if !self.snapshots || self.probe || !supports_vmgenid() {
            return None;
        }
        let folder = super::snapshot_store::folder(&self.image.dir);
        match self.snapshot_identity(req) {
            Ok(want) => super::snapshot_store::find_in(&folder, &want),
            Err(e) => {
                eprintln!("host-cli: not using a VM snapshot: {}", e.chain());
                None
            }
        }
    }

    /// QEMU's arguments for a session (no secret among them).
    pub fn args(&self, dir: &SessionDir, req: &StartRequest) -> Vec<String> {
        let l = &self.limits;
        let p = |f: &str| dir.path.join(f).display().to_string();
        let egress = if req.network.mode.uses_proxy() {
            "proxy"
        } else {
            "direct"
        };
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        push(&[
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-nic",
            "none",
        ]);
        // QEMU's own seccomp filter: no obsolete system calls, no setuid,
        // no fork/exec, no scheduler or resource changes. Started as root,
        // QEMU drops to the guest's ids, which takes the set*uid calls
        // `elevateprivileges=deny` forbids (super::qemu_user).
        match self.run_as {
            None => push(&[
                "-sandbox",
                "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            ]),
            Some(r) => {
                push(&[
                    "-sandbox",
                    "on,obsolete=deny,spawn=deny,resourcecontrol=deny",
                ]);
                let [flag, ids] = r.args();
                push(&[&flag, &ids]);
            }
        }
        let machine = match (std::env::consts::ARCH, self.accel) {
            ("aarch64", _) => format!("virt,accel={}", self.accel.as_str()),
            (_, accel) => format!("q35,accel={}", accel.as_str()),
        };
        push(&["-machine", &machine, "-cpu", &self.cpu]);
        push(&["-m", &l.memory_mib.to_string(), "-smp", &l.cpus.to_string()]);
        push(&[
            "-kernel",
            &self.image.kernel().display().to_string(),
            "-initrd",
            &self.image.initrd().display().to_string(),
        ]);
        let console = if std::env::consts::ARCH == "aarch64" {
            "ttyAMA0"
        } else {
            "ttyS0"
        };
        let mut append = format!(
            "console={console} quiet panic=-1 rdinit=/init sandtop.screen={} \
             sandtop.egress={egress} sandtop.uid={GUEST_ID} sandtop.tmp={} sandtop.home={} \
             sandtop.shm={}",
            req.screen, l.tmp_bytes, l.home_bytes, l.shm_bytes
        );
        if self.probe {
            append.push_str(" sandtop.probe=1");
        }
        push(&["-append", &append]);
        push(&[
            "-drive",
            &format!(
                "file={},format=raw,if=virtio,readonly=on,cache=none,aio=threads",
                self.image.rootfs().display()
            ),
        ]);
        // Entropy from the host: without it a fresh VM's random pool
        // fills slowly, and programs that wait for it stall.
        push(&["-device", "virtio-rng-pci"]);
        // A fresh VM generation ID for every QEMU process: a VM started
        // from a snapshot is told it is a clone, and its kernel reseeds
        // its random state at once (super::qemu_snapshot).
        if supports_vmgenid() {
            push(&["-device", "vmgenid,guid=auto"]);
        }
        push(&["-device", "virtio-serial-pci"]);
        push(&[
            "-chardev",
            &format!("socket,id=link,path={},server=on,wait=off", p("link.sock")),
        ]);
        push(&[
            "-device",
            &format!(
                "virtserialport,id={},chardev=link,name={}",
                super::snapshot_store::LINK_PORT_ID,
                sandtop_vmlink::PORT_NAME
            ),
        ]);
        // The host's time for the guest's PID 1 (root only inside; see
        // guest-vm/sandtop-vm-init): a VM from a snapshot resumes with
        // its clock where the snapshot stopped it.
        push(&[
            "-chardev",
            &format!(
                "socket,id=clock,path={},server=on,wait=off",
                p("clock.sock")
            ),
        ]);
        push(&[
            "-device",
            &format!(
                "virtserialport,id={},chardev=clock,name={CLOCK_PORT_NAME}",
                super::snapshot_store::CLOCK_PORT_ID
            ),
        ]);
        push(&[
            "-chardev",
            &format!("file,id=console,path={}", p("console.log")),
        ]);
        push(&["-serial", "chardev:console"]);
        push(&["-pidfile", &p("qemu.pid")]);
        push(&[
            "-name",
            &format!("sandtop-{},process=sandtop-{}", req.name, req.name),
        ]);
        push(&["-no-reboot"]);
        a
    }
}

/// Whether QEMU offers this machine a VM generation ID (`vmgenid`, an
/// ACPI device: x86's q35). Without it a clone could not be told it is
/// one, so there are no snapshots.
pub fn supports_vmgenid() -> bool {
    std::env::consts::ARCH == "x86_64"
}

fn pid_alive_with(pid: i32, needle: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let needle = needle.as_os_str().as_encoded_bytes();
    cmdline
        .split(|&b| b == 0)
        .any(|arg| arg.windows(needle.len()).any(|w| w == needle))
        && !is_zombie(pid)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

pub(crate) fn kill_group(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(crate) fn spawn(
    cmd: &mut std::process::Command,
    log: &Path,
    stdin: Stdio,
) -> Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    let creating = || GuestError::io(format!("creating {}", log.display()));
    let log = std::fs::File::create(log).map_err(creating())?;
    let stdout = log.try_clone().map_err(creating())?;
    for k in sandtop_hostkit::secret::SECRET_ENV {
        cmd.env_remove(k);
    }
    let child = cmd
        .stdin(stdin)
        .stdout(stdout)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(GuestError::io(format!("starting {:?}", cmd.get_program())))?;
    Ok(child)
}

async fn end(rec: &QemuRecord, dir: &SessionDir, grace: Duration) {
    kill_group(rec.pid, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pid_alive_with(rec.pid, &dir.path.join("link.sock")) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill_group(rec.pid, Signal::KILL);
    kill_group(rec.link_pid, Signal::KILL);
}

impl Backend for QemuBackend {
    async fn start(&self, dir: &SessionDir, req: &StartRequest) -> Result<SessionRecord> {
        if self.run_as.is_some() {
            // QEMU will run as the guest's uid: no host account may have it.
            super::ids::check_guest_ids_unused()?;
        }
        let Some(snapshot) = self.snapshot_for(req) else {
            return self.boot(dir, req, None).await;
        };
        match self.boot(dir, req, Some(&snapshot)).await {
            Ok(rec) => Ok(rec),
            // QEMU could not load the state (a damaged or truncated file,
            // a host whose CPU cannot take it): boot instead, once, and
            // drop the snapshot so that the next start does not try it.
            // The first try's logs stay beside the new ones.
            Err(
                e @ GuestError::VmNotReady {
                    qemu_exited: true, ..
                },
            ) => {
                eprintln!(
                    "host-cli: QEMU exited while loading the VM snapshot {}; removing it and \
                     booting instead (its logs: qemu-snapshot.log, console-snapshot.log)\n{}",
                    snapshot.state.display(),
                    sandtop_hostkit::term::safe(&e.to_string())
                );
                for f in ["qemu", "console", "link"] {
                    let _ = std::fs::rename(
                        dir.path.join(format!("{f}.log")),
                        dir.path.join(format!("{f}-snapshot.log")),
                    );
                }
                super::snapshot_store::remove(&snapshot);
                self.boot(dir, req, None).await
            }
            Err(e) => Err(e),
        }
    }

    async fn stop(&self, dir: &SessionDir, rec: &SessionRecord) -> Result<()> {
        if let Some(q) = rec.qemu() {
            end(q, dir, Duration::from_secs(5)).await;
        }
        Ok(())
    }

    async fn connector(&self, dir: &SessionDir, _rec: &SessionRecord) -> Result<Box<dyn Connect>> {
        Ok(Box::new(UnixConnector(dir.socket_path())))
    }

    async fn alive(&self, dir: &SessionDir, rec: &SessionRecord) -> bool {
        alive(dir, rec)
    }

    async fn logs(&self, dir: &SessionDir, _rec: &SessionRecord) -> Result<String> {
        Ok(console_tail(dir, 200))
    }
}

impl QemuBackend {
    /// One start of the VM: booted, or from `snapshot`.
    async fn boot(
        &self,
        dir: &SessionDir,
        req: &StartRequest,
        snapshot: Option<&super::snapshot_store::Snapshot>,
    ) -> Result<SessionRecord> {
        let mut qemu = std::process::Command::new(&self.qemu);
        qemu.args(self.args(dir, req));
        // From a snapshot: the same machine, its state loaded from
        // standard input (the file, opened here), then it runs on.
        let stdin = match snapshot {
            Some(s) => {
                let f = std::fs::File::open(&s.state)
                    .map_err(GuestError::io(format!("opening {}", s.state.display())))?;
                qemu.args(["-incoming", "fd:0"]);
                eprintln!(
                    "host-cli: starting the VM from its snapshot {} (made {} s ago; \
                     SANDTOP_VM_SNAPSHOT=0 boots instead)",
                    s.state.display(),
                    now_unix().saturating_sub(s.meta.created_unix)
                );
                Stdio::from(f)
            }
            None => Stdio::null(),
        };
        let spawned = Instant::now();
        // Both outlive this command (init reaps them); while it waits
        // for the boot, QEMU's exit is seen through its handle.
        let mut qemu_child = spawn(&mut qemu, &dir.path.join("qemu.log"), stdin)?;
        let pid = qemu_child.id() as i32;
        let exe = std::env::current_exe().map_err(GuestError::io("locating host-cli"))?;
        let mut link = std::process::Command::new(exe);
        link.arg("qemu-link").arg("--dir").arg(&dir.path);
        if snapshot.is_some() {
            link.arg("--from-snapshot");
        }
        if req.network.mode.uses_proxy() {
            // The egress proxy's socket goes where a Docker guest would
            // see it (`guest/egress.sock`); the link connects to it there.
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir.guest_path())
                .map_err(GuestError::io(format!(
                    "creating {}",
                    dir.guest_path().display()
                )))?;
            let paths = sandtop_egress::service::Paths::new(&dir.path, &dir.guest_path());
            link.arg("--egress-socket").arg(&paths.guest_socket);
        }
        // The link waits for QEMU's socket itself.
        let link_pid = spawn(&mut link, &dir.path.join("link.log"), Stdio::null())?.id() as i32;
        let q = QemuRecord {
            pid,
            link_pid,
            accel: self.accel,
        };
        let rec = SessionRecord {
            network: None,
            egress_pid: None,
            name: req.name.clone(),
            screen: req.screen,
            created_unix: now_unix(),
            guest: BackendRecord::Qemu(q.clone()),
        };
        // The record is saved at once: `gc` finds the VM after a kill -9
        // of this command during the boot.
        dir.save(&rec)?;
        let token = Secret::read(&dir.token_path())?;
        let timeout = self
            .ready_timeout
            .unwrap_or_else(|| ready_timeout(self.accel));
        let t0 = Instant::now();
        let mut last = None;
        loop {
            let ready = async {
                let c = UnixConnector(dir.socket_path());
                let mut ch = Channel::open(Box::new(c), token.clone()).await.ok()?;
                ch.health().await.ok()
            };
            let ready = tokio::time::timeout(Duration::from_secs(5), ready)
                .await
                .ok()
                .flatten();
            if ready.as_ref().is_some_and(super::ready) {
                eprintln!(
                    "host-cli: VM ready {:.1} s after QEMU started ({})",
                    spawned.elapsed().as_secs_f64(),
                    if snapshot.is_some() {
                        "from its snapshot"
                    } else {
                        "booted"
                    }
                );
                return Ok(rec);
            }
            last = ready.or(last);
            let qemu_up = matches!(qemu_child.try_wait(), Ok(None));
            if t0.elapsed() > timeout || !qemu_up {
                let why = if let (true, Some(h)) = (qemu_up, &last) {
                    format!(
                        "the daemon's health was still {:?} after {timeout:?} (X connected: {}, \
                         window manager: {:?})",
                        h.status, h.x_connected, h.window_manager
                    )
                } else if qemu_up {
                    format!("the daemon did not answer within {timeout:?}")
                } else {
                    "QEMU exited".to_string()
                };
                let qemu_log = tail(&dir.path.join("qemu.log"), 10);
                let console = tail(&dir.path.join("console.log"), 25);
                let link_log = tail(&dir.path.join("link.log"), 5);
                end(&q, dir, Duration::from_secs(2)).await;
                return Err(GuestError::VmNotReady {
                    why,
                    qemu_exited: !qemu_up,
                    qemu_log,
                    console,
                    link_log,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Whether the session's QEMU still runs (a reused pid does not count).
pub fn alive(dir: &SessionDir, rec: &SessionRecord) -> bool {
    rec.qemu()
        .is_some_and(|q| pid_alive_with(q.pid, &dir.path.join("link.sock")))
}

/// The last `lines` lines of the VM's serial console (`guest logs`).
pub fn console_tail(dir: &SessionDir, lines: usize) -> String {
    tail(&dir.path.join("console.log"), lines)
}

/// Stops a session's processes without the image (gc, stop).
pub async fn stop_processes(dir: &SessionDir, rec: &SessionRecord) {
    if let Some(q) = rec.qemu() {
        end(q, dir, Duration::from_secs(5)).await;
    }
}

/// Options of the hidden `host-cli qemu-link` command.
#[derive(Debug, Clone, clap::Args)]
pub struct LinkArgs {
    /// The session folder (QEMU's `link.sock` and the `token` are in it;
    /// `sandtopd.sock` is served there).
    #[arg(long)]
    pub dir: PathBuf,
    /// The session's egress proxy socket, for the guest's egress streams.
    #[arg(long)]
    pub egress_socket: Option<PathBuf>,
    /// The VM was started from a snapshot: the clock line says so, and
    /// the guest waits for its kernel's reseed before it goes on.
    #[arg(long)]
    pub from_snapshot: bool,
}

/// The host end of the link: waits for QEMU's socket, sends the token,
/// serves `sandtopd.sock` until QEMU closes the port.
pub async fn serve_link(a: LinkArgs) -> Result<()> {
    let link = a.dir.join("link.sock");
    let t0 = Instant::now();
    let mut stream = loop {
        match tokio::net::UnixStream::connect(&link).await {
            Ok(s) => break s,
            Err(e) if t0.elapsed() > Duration::from_secs(30) => {
                let what = format!("QEMU's link socket {} never answered", link.display());
                return Err(GuestError::io(what)(e));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    // The host's time on the clock port, for the guest's PID 1 (a VM
    // from a snapshot resumes with its clock where the snapshot stopped
    // it). Held open, and answering the guest's asks for the time, while
    // the link runs: QEMU passes on what a connected socket sent once the
    // guest opens its port. The guest's
    // link waits for this time before it takes its token, so without it
    // the start fails now rather than when the guest gives up.
    let _clock = send_clock(&a.dir.join("clock.sock"), a.from_snapshot).await?;
    let token = Secret::read(&a.dir.join(session::TOKEN_NAME))?;
    sandtop_vmlink::write_preamble(&mut stream, token.expose().as_bytes())
        .await
        .map_err(GuestError::io("sending the token to the guest"))?;
    drop(token);
    let api = a.dir.join(session::SOCKET_NAME);
    let _ = std::fs::remove_file(&api);
    let listener = {
        // Created 0600: only this user reaches the daemon through it.
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
        let l = tokio::net::UnixListener::bind(&api);
        rustix::process::umask(old);
        l.map_err(GuestError::io(format!("binding {}", api.display())))?
    };
    let routes = sandtop_vmlink::Routes {
        listen: Some(listener),
        connect: a.egress_socket,
    };
    sandtop_vmlink::bridge(stream, sandtop_vmlink::Mode::Client, routes)
        .await
        .map_err(GuestError::io("the link to the guest failed"))?;
    let _ = std::fs::remove_file(&api);
    Ok(())
}

/// Connects to QEMU's clock socket and writes this host's time on it
/// (and ` snapshot` after it for a VM started from one), then answers
/// each line the guest writes back with the host's time at that moment:
/// the first line may wait in QEMU's buffer while a snapshot loads, so
/// the guest's helper asks again once it runs and sets its clock from the
/// answer. The connection is held, and answered, until the returned
/// guard is dropped (while the link runs).
async fn send_clock(path: &Path, from_snapshot: bool) -> Result<ClockPort> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let what = || format!("sending the host's time to the guest on {}", path.display());
    let s = tokio::net::UnixStream::connect(path)
        .await
        .map_err(GuestError::io(what()))?;
    let (read, mut write) = s.into_split();
    let first = clock_line(if from_snapshot { " snapshot" } else { "" });
    write
        .write_all(first.as_bytes())
        .await
        .map_err(GuestError::io(what()))?;
    let answers = tokio::spawn(async move {
        // Whatever the guest writes is only a question, one per newline:
        // read in small chunks and never kept (a guest that writes without
        // end costs this task nothing), never parsed, never logged.
        let mut read = read;
        let mut chunk = [0u8; 64];
        while let Ok(n @ 1..) = read.read(&mut chunk).await {
            for _ in chunk[..n].iter().filter(|b| **b == b'\n') {
                if write.write_all(clock_line("").as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(ClockPort(answers))
}

/// The host's time as the clock port carries it: seconds since the
/// epoch with nanoseconds, then `tail`, then a newline.
fn clock_line(tail: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}{tail}\n", now.as_secs(), now.subsec_nanos())
}

/// The clock port's connection and the task that answers on it; both end
/// when this is dropped.
struct ClockPort(tokio::task::JoinHandle<()>);

impl Drop for ClockPort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn backend(accel: Accel) -> QemuBackend {
        QemuBackend {
            image: VmImage {
                dir: PathBuf::from("/img"),
            },
            accel,
            limits: VmLimits::default(),
            qemu: PathBuf::from("/usr/bin/qemu-system-x86_64"),
            probe: false,
            cpu: default_cpu(accel).into(),
            ready_timeout: None,
            run_as: None,
            snapshots: false,
        }
    }

    fn req(mode: &str) -> StartRequest {
        let mut network = sandtop_egress::service::EgressConfig::none();
        network.mode = mode.parse().unwrap();
        StartRequest {
            name: "s1".into(),
            screen: sandtop_protocol::Size::new(1280, 800),
            network,
        }
    }

    /// The hardening lives in the arguments: no network device, no
    /// defaults, QEMU's own seccomp filter with every deny option, the
    /// root disk read-only, the token nowhere.
    #[test]
    fn qemu_is_started_hardened_and_without_the_token() {
        let dir = SessionDir {
            name: "s1".into(),
            path: PathBuf::from("/state/s1"),
        };
        let a = backend(Accel::Tcg).args(&dir, &req("none"));
        let joined = a.join(" ");
        for must in [
            "-nodefaults",
            "-no-user-config",
            "-display none",
            "-nic none",
            "-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "readonly=on",
            "-no-reboot",
            "-pidfile /state/s1/qemu.pid",
            "sandtop.egress=direct",
            "sandtop.screen=1280x800",
            "accel=tcg",
        ] {
            assert!(joined.contains(must), "missing {must}: {joined}");
        }
        assert!(!joined.contains("token"), "{joined}");
        assert!(!joined.contains("-netdev") && !joined.contains("virtio-net"));
        assert!(!joined.contains("-runas") && !joined.contains("-run-with"));
        let a = backend(Accel::Kvm).args(&dir, &req("allow:https://a.test"));
        let joined = a.join(" ");
        assert!(joined.contains("accel=kvm") && joined.contains("-cpu host"));
        assert!(joined.contains("sandtop.egress=proxy"));
    }

    /// Started as root, QEMU drops to the guest's ids with the option of
    /// its version, and its seccomp filter lets it make that drop.
    #[test]
    fn as_root_qemu_drops_to_the_guests_ids() {
        let dir = SessionDir {
            name: "s1".into(),
            path: PathBuf::from("/state/s1"),
        };
        let ids = format!(
            "{}:{}",
            super::super::ids::GUEST_UID,
            super::super::ids::GUEST_GID
        );
        for (version, want) in [
            ((7, 2), format!("-runas {ids}")),
            ((9, 1), format!("-run-with user={ids}")),
        ] {
            let mut b = backend(Accel::Tcg);
            b.run_as = Some(RunAs::guest(version));
            let joined = b.args(&dir, &req("none")).join(" ");
            assert!(joined.contains(&want), "{want}: {joined}");
            assert!(
                joined.contains("-sandbox on,obsolete=deny,spawn=deny,resourcecontrol=deny "),
                "{joined}"
            );
            assert!(!joined.contains("elevateprivileges"), "{joined}");
        }
    }

    #[test]
    fn a_missing_image_names_the_make_target() {
        let tmp = tempfile::tempdir().unwrap();
        let e = VmImage::at(tmp.path().to_path_buf()).unwrap_err();
        assert!(
            matches!(&e, GuestError::NoVmImage { missing } if missing.ends_with("vmlinuz")),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("make guest-vm") && msg.contains("vmlinuz"),
            "{msg}"
        );
        for f in ["vmlinuz", "initrd.img", "rootfs.ext4"] {
            std::fs::write(tmp.path().join(f), b"x").unwrap();
        }
        assert!(VmImage::at(tmp.path().to_path_buf()).is_ok());
    }

    /// The clock port answers every question line with the host's time
    /// at that moment, not the first line's again; what the guest writes
    /// is never kept, so a line without end costs nothing and gets no
    /// answer until its newline.
    #[tokio::test]
    async fn the_clock_port_answers_each_question_with_the_time_then() {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("clock.sock");
        let qemu = tokio::net::UnixListener::bind(&path).unwrap();
        let (port, guest) = tokio::join!(send_clock(&path, true), qemu.accept());
        let port = port.unwrap();
        let (read, mut write) = guest.unwrap().0.into_split();
        let mut lines = tokio::io::BufReader::new(read).lines();
        let secs = |line: &str| {
            line.split(['.', ' '])
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let first = lines.next_line().await.unwrap().unwrap();
        assert!(first.ends_with(" snapshot"), "{first}");
        let at_first = secs(&first);

        tokio::time::sleep(Duration::from_millis(1100)).await;
        write.write_all(&[b'x'; 100_000]).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(300), lines.next_line()).await;
        assert!(
            early.is_err(),
            "answered before the question's end: {early:?}"
        );
        write.write_all(b"\n").await.unwrap();
        let answer = lines.next_line().await.unwrap().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(!answer.contains(' '), "{answer}");
        assert!(
            secs(&answer) > at_first,
            "{answer} is the first line's time again"
        );
        assert!(now - secs(&answer) <= 1, "{answer} against {now}");

        // Dropped: the answers end and the connection closes.
        drop(port);
        let _ = write.write_all(b"now\n").await;
        let after = tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await;
        assert!(matches!(after, Ok(Ok(None)) | Ok(Err(_))), "{after:?}");
    }
}
