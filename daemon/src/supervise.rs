//! Supervision of the display: start Xvfb (`-nolisten tcp`) and a window
//! manager, or attach to a display someone else runs; watch them; restart
//! what dies; report health.
//!
//! 1. [`start_xvfb`] launches Xvfb with `-displayfd`, so readiness is the
//!    server itself saying "listening on :N", not a guessed sleep.
//! 2. A monitor thread keeps its own X connection and does a round trip
//!    every [`PING_EVERY`]; health is "X alive" only while the last good
//!    round trip is fresher than [`STALE_AFTER`], so a dead *or* hung server
//!    turns health bad within 2 s (H2). It also checks the window manager
//!    through `_NET_SUPPORTING_WM_CHECK`, which is what a WM really
//!    advertises, and that its event loop answers ([`crate::wm_check`]),
//!    in both spawned and attached modes (H1). Until the window manager
//!    has answered, the monitor also wakes on the property changes that
//!    tell it has (the check on the root, the answer on its own window),
//!    so readiness follows the WM within a round trip, not a round.
//! 3. [`Supervisor::run`] waits on the children: Xvfb exiting (or hanging
//!    past [`HUNG_AFTER`]) restarts it on the same display number, then the
//!    window manager, then tells the desktop task to reconnect.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sandtop_protocol::Size;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use crate::desktop::{DesktopHandle, Job};
use crate::ratelimit::LogLimiter;
use crate::wm_check::WmCheck;

/// Round trip interval of the monitor.
pub const PING_EVERY: Duration = Duration::from_millis(250);
/// While waiting for the window manager, the shortest pause between two
/// rounds (they are woken by its property changes).
pub const EVENT_PAUSE: Duration = Duration::from_millis(2);
/// Health turns bad when the last good round trip is older than this.
pub const STALE_AFTER: Duration = Duration::from_millis(1500);
/// A spawned Xvfb that has not answered for this long is killed and restarted.
pub const HUNG_AFTER: Duration = Duration::from_secs(5);
/// How long Xvfb may take to come up. Long: in a VM under software
/// emulation (TCG) on a loaded host it took 8.5 s (measured), and the 10 s
/// this once was ended a VM's boot (the daemon exits, the guest's init
/// with it). A Docker guest's start gives up sooner on its own.
pub const XVFB_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Environment variables never handed to children.
pub const SECRET_ENV: &[&str] = &[sandtop_protocol::session::TOKEN_ENV, "OPENAI_API_KEY"];

/// Live facts about the display, written by the monitor and supervisor,
/// read by `/v1/health`.
#[derive(Debug)]
pub struct DisplayHealth {
    start: Instant,
    /// Milliseconds since `start` of the last good round trip; 0 = none.
    last_ok_ms: AtomicU64,
    pub wm_expected: AtomicBool,
    pub wm_alive: AtomicBool,
    pub restarts: AtomicU32,
}

impl Default for DisplayHealth {
    fn default() -> DisplayHealth {
        DisplayHealth {
            start: Instant::now(),
            last_ok_ms: AtomicU64::new(0),
            wm_expected: AtomicBool::new(false),
            wm_alive: AtomicBool::new(false),
            restarts: AtomicU32::new(0),
        }
    }
}

impl DisplayHealth {
    fn now_ms(&self) -> u64 {
        // +1 so that a round trip in the first millisecond is not "none".
        self.start.elapsed().as_millis() as u64 + 1
    }

    pub fn mark_ok(&self) {
        self.last_ok_ms.store(self.now_ms(), Ordering::Release);
    }

    pub fn mark_down(&self) {
        self.last_ok_ms.store(0, Ordering::Release);
    }

    /// Time since the last good round trip, `None` if there was none (or
    /// the connection was lost since).
    pub fn since_ok(&self) -> Option<Duration> {
        match self.last_ok_ms.load(Ordering::Acquire) {
            0 => None,
            t => Some(Duration::from_millis(self.now_ms().saturating_sub(t))),
        }
    }

    /// X answered recently.
    pub fn x_alive(&self) -> bool {
        self.since_ok().is_some_and(|d| d < STALE_AFTER)
    }

    /// The window manager's state when one is expected.
    pub fn wm(&self) -> Option<bool> {
        self.wm_expected
            .load(Ordering::Acquire)
            .then(|| self.wm_alive.load(Ordering::Acquire))
    }
}

/// The display's current name (`:N`), shared by the supervisor (which may
/// move it on a restart), the monitor and the desktop task.
#[derive(Debug, Clone)]
pub struct DisplayName(Arc<std::sync::Mutex<String>>);

impl DisplayName {
    pub fn new(name: String) -> DisplayName {
        DisplayName(Arc::new(std::sync::Mutex::new(name)))
    }

    pub fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, name: String) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = name;
    }
}

/// How the daemon gets its display.
#[derive(Debug, Clone)]
pub struct DisplayConfig {
    /// `:N`. With `spawn_xvfb` and no display, Xvfb picks a free number.
    pub display: Option<String>,
    /// Start and supervise Xvfb.
    pub spawn_xvfb: bool,
    pub screen: Size,
    pub xvfb: PathBuf,
    /// The window manager's argv (no shell), when one is supervised.
    pub wm: Option<Vec<String>>,
    /// The X authority file Xvfb checks clients against (`-auth`), and
    /// that the window manager is given as `XAUTHORITY` (see [`crate::xauth`]).
    pub xauth: Option<PathBuf>,
    /// The window manager (and what it starts) reads this fake clock.
    pub clock: Option<crate::clock::FakeClock>,
}

fn scrub(cmd: &mut Command) {
    for k in SECRET_ENV {
        cmd.env_remove(k);
    }
}

/// Forwards a child's output lines to the log, rate-limited.
fn forward_lines(name: &'static str, out: impl AsyncRead + Unpin + Send + 'static) {
    tokio::spawn(async move {
        let limit = LogLimiter::new(20, Duration::from_secs(10));
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(suppressed) = limit.allow() {
                tracing::info!(target: "child", child = name, suppressed, "{}", line.chars().take(300).collect::<String>());
            }
        }
    });
}

/// Why the display could not be started.
#[derive(Debug, thiserror::Error)]
pub enum DisplayError {
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("Xvfb exited before it was ready (status {0})")]
    XvfbExited(String),
    #[error("Xvfb was not ready within {0:?}")]
    XvfbTimeout(Duration),
}

/// Starts Xvfb and waits until it says which display it listens on.
pub async fn start_xvfb(
    xvfb: &std::path::Path,
    display: Option<&str>,
    screen: Size,
    xauth: Option<&std::path::Path>,
) -> Result<(Child, String), DisplayError> {
    let mut cmd = Command::new(xvfb);
    if let Some(d) = display {
        cmd.arg(d);
    }
    if let Some(a) = xauth {
        // Access control: only clients with the session's cookie.
        cmd.arg("-auth").arg(a);
    }
    cmd.args(["-screen", "0"])
        .arg(format!("{}x{}x24", screen.width, screen.height))
        // No TCP, ever (docs/security.md C10). The abstract-namespace socket
        // stays: `-nolisten local` would leave that name free for another
        // X server in the same network namespace, and clients (which try
        // the abstract name first) would silently reach the wrong display.
        // Keep state across client disconnects; report readiness on stdout.
        .args(["-nolisten", "tcp", "-noreset", "-displayfd", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    scrub(&mut cmd);
    let mut child = cmd.spawn().map_err(|source| DisplayError::Spawn {
        what: format!("{}", xvfb.display()),
        source,
    })?;
    if let Some(err) = child.stderr.take() {
        forward_lines("Xvfb", err);
    }
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| DisplayError::XvfbExited("no stdout".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(XVFB_READY_TIMEOUT, lines.next_line()).await;
    match ready {
        Ok(Ok(Some(n))) if n.trim().parse::<u32>().is_ok() => {
            let name = format!(":{}", n.trim());
            tracing::info!(display = %name, size = %screen, "Xvfb is ready");
            Ok((child, name))
        }
        Ok(_) => {
            let status = child
                .wait()
                .await
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            Err(DisplayError::XvfbExited(status))
        }
        Err(_) => {
            let _ = child.start_kill();
            Err(DisplayError::XvfbTimeout(XVFB_READY_TIMEOUT))
        }
    }
}

/// Starts the window manager on `display`.
pub fn start_wm(
    argv: &[String],
    display: &str,
    xauth: Option<&std::path::Path>,
    clock: Option<&crate::clock::FakeClock>,
) -> Result<Child, DisplayError> {
    let (prog, args) = argv.split_first().ok_or_else(|| DisplayError::Spawn {
        what: "the window manager".into(),
        source: std::io::Error::other("empty command"),
    })?;
    let mut cmd = Command::new(prog);
    cmd.args(args).env("DISPLAY", display);
    if let Some(a) = xauth {
        cmd.env("XAUTHORITY", a);
    }
    if let Some(c) = clock {
        cmd.envs(c.env());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    scrub(&mut cmd);
    let mut child = cmd.spawn().map_err(|source| DisplayError::Spawn {
        what: prog.clone(),
        source,
    })?;
    if let Some(o) = child.stdout.take() {
        forward_lines("wm", o);
    }
    if let Some(e) = child.stderr.take() {
        forward_lines("wm", e);
    }
    Ok(child)
}

/// Starts the monitor thread for `display`. It stops when `stop` is set.
pub fn spawn_monitor(display: DisplayName, health: Arc<DisplayHealth>, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("x-monitor".into())
        .spawn(move || monitor(&display, &health, &stop));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the display monitor");
    }
}

fn monitor(display: &DisplayName, health: &DisplayHealth, stop: &AtomicBool) {
    let mut conn: Option<(RustConnection, WmCheck)> = None;
    while !stop.load(Ordering::Acquire) {
        if conn.is_none() {
            conn = crate::xauth::connect(Some(&display.get()))
                .ok()
                .and_then(|(c, screen)| {
                    let wm = WmCheck::new(&c, screen)?;
                    Some((c, wm))
                });
        }
        let mut waiting_for_wm = false;
        match &mut conn {
            Some((c, wm)) => {
                if c.get_input_focus()
                    .ok()
                    .and_then(|ck| ck.reply().ok())
                    .is_some()
                {
                    health.mark_ok();
                    let present = wm.present(c);
                    let was = health.wm_alive.swap(present, Ordering::AcqRel);
                    if present && !was {
                        // Readiness (health `ok`) from here: a boot's
                        // timeline reads from the log.
                        tracing::info!("the window manager answers");
                    }
                    waiting_for_wm = !present && health.wm_expected.load(Ordering::Acquire);
                } else {
                    health.mark_down();
                    conn = None;
                }
            }
            None => health.mark_down(),
        }
        match &conn {
            Some((c, _)) if waiting_for_wm => wait_for_change(c, PING_EVERY),
            Some((c, _)) => {
                // Property changes are not needed once it answered.
                while let Ok(Some(_)) = c.poll_for_event() {}
                std::thread::sleep(PING_EVERY);
            }
            None => std::thread::sleep(PING_EVERY),
        }
    }
}

/// Waits until an event arrives on `c` (a property change the window
/// manager check selected), at most `limit`; drains what came. At least
/// [`EVENT_PAUSE`] passes, so a burst of changes costs a few rounds.
fn wait_for_change(c: &RustConnection, limit: Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    std::thread::sleep(EVENT_PAUSE);
    let mut seen = false;
    while let Ok(Some(_)) = c.poll_for_event() {
        seen = true;
    }
    if seen {
        return;
    }
    let left = limit.saturating_sub(EVENT_PAUSE);
    let ts = Timespec {
        tv_sec: left.as_secs() as i64,
        tv_nsec: i64::from(left.subsec_nanos()),
    };
    let mut fds = [PollFd::new(c.stream(), PollFlags::IN)];
    let _ = poll(&mut fds, Some(&ts));
    while let Ok(Some(_)) = c.poll_for_event() {}
}

/// Owns the spawned children and restarts them.
#[derive(Debug)]
pub struct Supervisor {
    pub config: DisplayConfig,
    pub display: DisplayName,
    pub xvfb: Option<Child>,
    pub wm: Option<Child>,
    pub health: Arc<DisplayHealth>,
    pub desktop: DesktopHandle,
}

async fn wait_opt(c: &mut Option<Child>) -> std::io::Result<std::process::ExitStatus> {
    match c {
        Some(c) => c.wait().await,
        None => std::future::pending().await,
    }
}

/// Sends SIGTERM, waits up to 2 s, then SIGKILL.
async fn terminate(child: &mut Child) {
    if let Some(pid) = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        if tokio::time::timeout(Duration::from_secs(2), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.kill().await;
}

impl Supervisor {
    /// Watches the children until `stop` flips, restarting what dies.
    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut recent: Vec<Instant> = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                status = wait_opt(&mut self.xvfb) => {
                    self.health.mark_down();
                    tracing::error!(status = ?status.ok(), display = %self.display.get(), "Xvfb exited; restarting it");
                    self.xvfb = None;
                    self.restart_display(&mut recent).await;
                }
                status = wait_opt(&mut self.wm) => {
                    self.wm = None;
                    tracing::warn!(status = ?status.ok(), "the window manager exited; restarting it");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    self.start_wm();
                }
                _ = tick.tick() => {
                    let hung = self.xvfb.is_some()
                        && self.health.since_ok().is_some_and(|d| d > HUNG_AFTER);
                    if hung {
                        tracing::error!("Xvfb stopped answering; killing it");
                        if let Some(x) = self.xvfb.as_mut() {
                            let _ = x.kill().await;
                        }
                    }
                    if self.config.spawn_xvfb && self.xvfb.is_none() {
                        self.restart_display(&mut recent).await;
                    }
                    if self.config.wm.is_some() && self.wm.is_none() && self.health.x_alive() {
                        self.start_wm();
                    }
                }
            }
        }
        if let Some(wm) = self.wm.as_mut() {
            terminate(wm).await;
        }
        if let Some(x) = self.xvfb.as_mut() {
            terminate(x).await;
        }
    }

    fn start_wm(&mut self) {
        if let Some(argv) = &self.config.wm {
            match start_wm(
                argv,
                &self.display.get(),
                self.config.xauth.as_deref(),
                self.config.clock.as_ref(),
            ) {
                Ok(c) => self.wm = Some(c),
                Err(e) => tracing::error!(error = %e, "cannot start the window manager"),
            }
        }
    }

    async fn restart_display(&mut self, recent: &mut Vec<Instant>) {
        recent.retain(|t| t.elapsed() < Duration::from_secs(30));
        if recent.len() >= 5 {
            // Crash loop: slow down rather than spin.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        recent.push(Instant::now());
        if let Some(wm) = self.wm.as_mut() {
            terminate(wm).await;
        }
        self.wm = None;
        // The same display number first, so clients keep their DISPLAY; if
        // something else took it meanwhile, any free number.
        let same = self.display.get();
        let xauth = self.config.xauth.clone();
        let started = match start_xvfb(
            &self.config.xvfb,
            Some(&same),
            self.config.screen,
            xauth.as_deref(),
        )
        .await
        {
            Ok(r) => Ok(r),
            Err(e) => {
                tracing::warn!(error = %e, display = %same, "cannot restart on the same display; picking a free one");
                start_xvfb(
                    &self.config.xvfb,
                    None,
                    self.config.screen,
                    xauth.as_deref(),
                )
                .await
            }
        };
        match started {
            Ok((child, name)) => {
                self.xvfb = Some(child);
                self.display.set(name);
                self.health.restarts.fetch_add(1, Ordering::AcqRel);
                self.start_wm();
                let _ = self.desktop.send(Job::Reconnect);
            }
            Err(e) => {
                // `xvfb` stays empty: the next tick tries again.
                tracing::error!(error = %e, "restarting Xvfb failed; will retry");
            }
        }
    }
}
