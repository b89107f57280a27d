//! The local backend: `sandtopd serve --xvfb` as a process group on this
//! host. No isolation whatsoever (the desktop runs as you, with your
//! network and files); it exists for development and the x11 tests.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::{Backend, GuestError, Result, StartRequest};
use crate::session::{BackendRecord, LocalRecord, SessionDir, SessionRecord, now_unix};
use sandtop_channel::{Channel, Connect, UnixConnector};
use sandtop_hostkit::secret::Secret;

/// How long `start` waits for the daemon to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The local backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalBackend;

/// Finds `sandtopd`: `$SANDTOPD_BIN`, next to this executable, or on PATH.
pub fn sandtopd_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SANDTOPD_BIN") {
        return Ok(PathBuf::from(p));
    }
    if let Ok(me) = std::env::current_exe()
        && let Some(dir) = me.parent()
    {
        let sibling = dir.join("sandtopd");
        if sibling.is_file() {
            return Ok(sibling);
        }
    }
    which("sandtopd").ok_or(GuestError::NoSandtopd)
}

/// A program on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|p| p.join(program))
        .find(|p| p.is_file())
}

fn pid_of(rec: &SessionRecord) -> Result<Pid> {
    rec.local()
        .and_then(|l| Pid::from_raw(l.pid))
        .ok_or(GuestError::NotThisBackend("local process"))
}

/// Whether `pid` is a live sandtopd serving this session's socket (a
/// reused pid belonging to something else does not count).
fn is_our_daemon(pid: Pid, dir: &SessionDir) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())) else {
        return false;
    };
    let socket = dir.socket_path();
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    args.iter().any(|a| a.ends_with(b"sandtopd"))
        && args
            .iter()
            .any(|a| *a == socket.as_os_str().as_encoded_bytes())
}

/// Whether `pid` is a child still between fork and exec: the kernel
/// reports an empty command line until exec has set the new one up, which
/// takes a while for a large binary; a zombie (it exited) has none either.
fn still_starting(pid: Pid) -> bool {
    let raw = pid.as_raw_nonzero();
    let empty = std::fs::read(format!("/proc/{raw}/cmdline")).is_ok_and(|c| c.is_empty());
    let zombie = std::fs::read_to_string(format!("/proc/{raw}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true);
    empty && !zombie
}

/// Ends the process group of `pid`: SIGTERM to the daemon (which stops its
/// Xvfb and window manager), then SIGKILL to the group after `grace`.
async fn terminate_group(pid: Pid, dir: &SessionDir, grace: Duration) {
    let _ = rustix::process::kill_process(pid, Signal::TERM);
    let end = Instant::now() + grace;
    while Instant::now() < end && is_our_daemon(pid, dir) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
}

fn log_tail(dir: &SessionDir, lines: usize) -> String {
    let text = std::fs::read_to_string(dir.log_path()).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Backend for LocalBackend {
    async fn start(&self, dir: &SessionDir, req: &StartRequest) -> Result<SessionRecord> {
        let bin = sandtopd_binary()?;
        let log_err = GuestError::io("creating the daemon log");
        let log = std::fs::File::create(dir.log_path()).map_err(log_err)?;
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("serve")
            .arg("--xvfb")
            .arg("--screen")
            .arg(req.screen.to_string())
            .arg("--socket")
            .arg(dir.socket_path())
            .arg("--token-file")
            .arg(dir.token_path())
            // X access control: only holders of the session's cookie (this
            // file, beside the socket in the 0700 session folder) reach
            // the display; no other local account.
            .arg("--xauth-file")
            .arg(dir.socket_path().with_file_name("xauthority"));
        if which("openbox").is_some() {
            cmd.args(["--wm", "openbox"]);
        } else {
            tracing::warn!("openbox is not installed; the local desktop has no window manager");
        }
        for k in sandtop_hostkit::secret::SECRET_ENV {
            cmd.env_remove(k);
        }
        use std::os::unix::process::CommandExt as _;
        let stdout = log
            .try_clone()
            .map_err(GuestError::io("creating the daemon log"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            // Its own process group: Ctrl-C in this terminal does not
            // reach it, and stop can end the whole group.
            .process_group(0)
            .spawn()
            .map_err(GuestError::io(format!("starting {}", bin.display())))?;
        let pid = Pid::from_child(&child);
        // The daemon outlives this command; it is reaped by init.
        drop(child);
        let rec = SessionRecord {
            network: None,
            egress_pid: None,
            name: req.name.clone(),
            screen: req.screen,
            created_unix: now_unix(),
            guest: BackendRecord::Local(LocalRecord {
                pid: pid.as_raw_nonzero().get(),
            }),
        };
        let token = Secret::read(&dir.token_path())?;
        let end = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = async {
                let c = UnixConnector(dir.socket_path());
                let mut ch = Channel::open(Box::new(c), token.clone()).await.ok()?;
                ch.health().await.ok()
            }
            .await;
            if ready.as_ref().is_some_and(super::ready) {
                return Ok(rec);
            }
            if Instant::now() > end || !(is_our_daemon(pid, dir) || still_starting(pid)) {
                let tail = log_tail(dir, 20);
                terminate_group(pid, dir, Duration::from_secs(2)).await;
                return Err(GuestError::NotReady {
                    kind: "local daemon",
                    waited: READY_TIMEOUT,
                    last: None,
                    log: tail,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop(&self, dir: &SessionDir, rec: &SessionRecord) -> Result<()> {
        let pid = pid_of(rec)?;
        if is_our_daemon(pid, dir) {
            terminate_group(pid, dir, Duration::from_secs(10)).await;
        }
        Ok(())
    }

    async fn connector(&self, dir: &SessionDir, _rec: &SessionRecord) -> Result<Box<dyn Connect>> {
        Ok(Box::new(UnixConnector(dir.socket_path())))
    }

    async fn alive(&self, dir: &SessionDir, rec: &SessionRecord) -> bool {
        pid_of(rec).is_ok_and(|p| is_our_daemon(p, dir))
    }

    async fn logs(&self, dir: &SessionDir, _rec: &SessionRecord) -> Result<String> {
        Ok(log_tail(dir, 200))
    }
}
