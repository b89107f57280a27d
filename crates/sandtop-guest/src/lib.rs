//! Guests: the backends that run a session's desktop, behind one trait.
//!
//! - [`docker::DockerBackend`] (the default): a hardened container built
//!   from `Dockerfile.guest`, driven through the Docker API (bollard).
//! - [`local::LocalBackend`]: Xvfb and sandtopd as processes on this host,
//!   for development and the x11 tests. It isolates nothing.
//! - [`qemu::QemuBackend`]: the same root filesystem as a QEMU VM (KVM,
//!   HVF or TCG), no network device, the daemon over virtio-serial.
//!
//! A session's lifecycle: `start` claims the session folder, writes the
//! token and the owner (this process, for `gc`), starts the guest and
//! waits until the daemon answers (removing everything it created if that
//! fails); `connector` opens byte streams to the daemon; `stop` ends the
//! guest and removes the folder; [`gc`] removes what a killed host-cli
//! left behind (containers and folders).

pub mod docker;
pub mod doctor;
pub mod error;
pub mod ids;
pub mod limits;
pub mod local;
pub mod options;
pub mod qemu;
pub mod qemu_snapshot;
pub mod qemu_user;
pub mod session;
pub mod snapshot_store;

use std::future::Future;

use sandtop_protocol::{DaemonState, Size};
use serde::Serialize;

pub use self::error::{GuestError, Result};
use crate::session::{BackendKind, SessionDir, SessionRecord, Store};
use sandtop_channel::{Channel, Connect};
use sandtop_hostkit::secret::Secret;

/// What `guest start` asks for.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub name: String,
    pub screen: Size,
    /// The network policy.
    pub network: sandtop_egress::service::EgressConfig,
}

/// A session's state as its backend and its daemon report it
/// (`guest ls`; the JSON output uses the same words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The guest runs and its daemon serves (`/v1/info` says `open`).
    Running,
    /// The guest was told to stop: its daemon refuses new work and is
    /// finishing a call that came earlier (`/v1/info` says `draining`).
    Draining,
    /// The guest was told to stop and nothing is in flight any more: its
    /// daemon says `closed`, or (local guests) its process still runs but
    /// its socket refuses connections, which a daemon does only once it
    /// stopped serving. The guest exits next.
    Closed,
    /// The guest runs but the daemon does not answer (yet), and was not
    /// seen stopping: hung, overloaded, or its display is down.
    Unresponsive,
    /// The guest is gone; the record is stale (`guest gc` removes it).
    Exited,
}

impl State {
    /// The word `guest ls` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Draining => "draining",
            State::Closed => "closed",
            State::Unresponsive => "unresponsive",
            State::Exited => "exited",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session's `guest ls` entry (also `guest start --json` and `guest
/// reset --json`): name, backend, state, screen, and the container or
/// process that runs it.
pub fn ls_entry(rec: &SessionRecord, state: State) -> serde_json::Value {
    use serde_json::json;
    let mut v = json!({
        "name": rec.name,
        "backend": rec.backend(),
        "state": state,
        "screen": rec.screen.to_string(),
        // The screen size under its old name, kept for one release.
        "display": rec.screen.to_string(),
        "created_unix": rec.created_unix,
    });
    if let Some(d) = rec.docker() {
        v["container"] = json!(d.container_name);
        v["container_id"] = json!(d.container_id);
    }
    if let Some(l) = rec.local() {
        v["pid"] = json!(l.pid);
    }
    v
}

/// What asking a live guest's daemon found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `/v1/info` answered with this state (and, when `open`, health
    /// answered too).
    Answered(DaemonState),
    /// Its socket exists and refuses connections: the daemon stopped
    /// listening, which it does only at the end of a stop.
    Refused,
    /// No answer in time, or no way to tell why.
    Silent,
}

/// Whether a booting guest is ready for work: its daemon answers with
/// health `ok` (X up and, when one is expected, the window manager
/// serving). `degraded` is not ready: a window manager still starting
/// loses the keys sent to it (a VM under TCG showed an empty screen after
/// Super+T pressed the moment the backend said ready).
pub fn ready(h: &sandtop_protocol::Health) -> bool {
    h.status == sandtop_protocol::HealthStatus::Ok
}

/// The state of a session from whether its guest still exists and what
/// its daemon said.
pub fn classify(alive: bool, probe: Probe) -> State {
    if !alive {
        return State::Exited;
    }
    match probe {
        Probe::Answered(DaemonState::Open) => State::Running,
        Probe::Answered(DaemonState::Draining) => State::Draining,
        Probe::Answered(DaemonState::Closed) | Probe::Refused => State::Closed,
        Probe::Silent => State::Unresponsive,
    }
}

/// A way to run guests.
pub trait Backend: Sync {
    /// Starts a guest in the claimed folder `dir`. On error, whatever was
    /// started is gone again (the caller removes the folder).
    fn start(
        &self,
        dir: &SessionDir,
        req: &StartRequest,
    ) -> impl Future<Output = Result<SessionRecord>> + Send;

    /// Stops the guest (the caller removes the folder).
    fn stop(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Opens streams to the session's daemon.
    fn connector(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> impl Future<Output = Result<Box<dyn Connect>>> + Send;

    /// Whether the guest still exists.
    fn alive(&self, dir: &SessionDir, rec: &SessionRecord) -> impl Future<Output = bool> + Send;

    /// The tail of the guest's log.
    fn logs(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> impl Future<Output = Result<String>> + Send;
}

/// Opens the authenticated channel to a session.
pub async fn open_channel(dir: &SessionDir, rec: &SessionRecord) -> Result<Channel> {
    let token = Secret::read(&dir.token_path())?;
    let connector = match rec.backend() {
        BackendKind::Local => local::LocalBackend.connector(dir, rec).await?,
        BackendKind::Qemu => Box::new(sandtop_channel::UnixConnector(dir.socket_path())),
        BackendKind::Docker => {
            docker::DockerBackend::connect()
                .await?
                .connector(dir, rec)
                .await?
        }
    };
    Channel::open(connector, token)
        .await
        .map_err(|source| GuestError::Channel {
            name: rec.name.clone(),
            source,
        })
}

/// Running, draining, closed, unresponsive or exited (see [`State`]).
pub async fn state(dir: &SessionDir, rec: &SessionRecord) -> State {
    let alive = match rec.backend() {
        BackendKind::Local => local::LocalBackend.alive(dir, rec).await,
        BackendKind::Qemu => qemu::alive(dir, rec),
        BackendKind::Docker => match docker::DockerBackend::connect().await {
            Ok(b) => b.alive(dir, rec).await,
            Err(_) => false,
        },
    };
    if !alive {
        return State::Exited;
    }
    let answered = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        let mut ch = open_channel(dir, rec).await.ok()?;
        match ch.daemon_state() {
            DaemonState::Open => ch.health().await.ok().map(|_| DaemonState::Open),
            stopping => Some(stopping),
        }
    })
    .await
    .ok()
    .flatten();
    let probe = match answered {
        Some(s) => Probe::Answered(s),
        None if socket_refuses(dir, rec).await => Probe::Refused,
        None => Probe::Silent,
    };
    classify(true, probe)
}

/// Whether the daemon's socket exists and refuses connections (nobody
/// listens on it). Only for local guests: a Docker guest's socket, seen
/// from the host, may refuse connections while its daemon serves (Docker
/// Desktop), and the container exits right after its daemon closes.
async fn socket_refuses(dir: &SessionDir, rec: &SessionRecord) -> bool {
    match rec.backend() {
        BackendKind::Local => tokio::net::UnixStream::connect(dir.socket_path())
            .await
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused),
        // The host end of the link serves the socket while QEMU runs.
        BackendKind::Docker | BackendKind::Qemu => false,
    }
}

/// The session named, or the only running one (the commands that act on
/// one session: `act`, `screenshot`, `view`).
pub async fn resolve_session(
    store: &Store,
    name: Option<&str>,
) -> Result<(SessionDir, SessionRecord)> {
    if let Some(n) = name {
        let dir = store.get(n)?;
        let rec = dir.load()?;
        return Ok((dir, rec));
    }
    let mut running = Vec::new();
    for (dir, rec) in store.list()? {
        if state(&dir, &rec).await == State::Running {
            running.push((dir, rec));
        }
    }
    match running.len() {
        1 => Ok(running.remove(0)),
        0 => Err(GuestError::NoneRunning),
        _ => Err(GuestError::SeveralRunning {
            names: running.into_iter().map(|(_, r)| r.name).collect(),
        }),
    }
}

/// Starts a session with `backend`, cleaning up on failure.
pub async fn start<B: Backend>(
    store: &Store,
    backend: &B,
    req: &StartRequest,
) -> Result<SessionRecord> {
    start_marked(store, backend, req, None).await
}

/// [`start`], writing a pool's mark (`session::pool_member`) into the
/// folder before the guest starts, so that no moment exists where a pool
/// guest runs unmarked.
pub async fn start_marked<B: Backend>(
    store: &Store,
    backend: &B,
    req: &StartRequest,
    pool_marker: Option<&str>,
) -> Result<SessionRecord> {
    let dir = store.create(&req.name)?;
    let prepared = (|| -> Result<()> {
        dir.write_owner()?;
        if let Some(m) = pool_marker {
            session::pool_member::mark(&dir, m)
                .map_err(GuestError::io("writing the pool's mark"))?;
        }
        sandtop_client::Token::generate()?.write_new(&dir.token_path())?;
        Ok(())
    })();
    if let Err(e) = prepared {
        let _ = store.remove(&dir);
        return Err(e);
    }
    let mut rec = match backend.start(&dir, req).await {
        Ok(rec) => rec,
        Err(e) => {
            let _ = store.remove(&dir);
            return Err(e);
        }
    };
    rec.network = (req.network.mode != sandtop_egress::policy::NetworkMode::None)
        .then(|| req.network.clone());
    if req.network.mode.uses_proxy() && rec.egress_pid.is_none() {
        // The guest's relay connects per connection, so the proxy can come
        // up after the container (a backend that binds its socket into the
        // guest started it already).
        match start_egress(&dir, req).await {
            Ok(pid) => rec.egress_pid = Some(pid),
            Err(e) => {
                dir.save(&rec)?;
                let _ = stop(store, &dir, &rec).await;
                return Err(GuestError::Egress(e));
            }
        }
    }
    dir.save(&rec)?;
    Ok(rec)
}

/// Starts a session's egress proxy, listening on `guest/egress.sock`
/// (owned by the guest's uid when host-cli is root); its pid.
pub(crate) async fn start_egress(
    dir: &SessionDir,
    req: &StartRequest,
) -> std::result::Result<i32, sandtop_egress::service::EgressError> {
    let paths = sandtop_egress::service::Paths::new(&dir.path, &dir.guest_path());
    let owner = rustix::process::geteuid()
        .is_root()
        .then_some((ids::GUEST_UID, ids::GUEST_GID));
    sandtop_egress::service::start(&paths, &req.network, owner).await
}

/// Stops a session and removes its folder.
pub async fn stop(store: &Store, dir: &SessionDir, rec: &SessionRecord) -> Result<()> {
    if let Some(pid) = rec.egress_pid {
        sandtop_egress::service::stop(pid);
    }
    match rec.backend() {
        BackendKind::Local => local::LocalBackend.stop(dir, rec).await?,
        BackendKind::Qemu => qemu::stop_processes(dir, rec).await,
        BackendKind::Docker => {
            docker::DockerBackend::connect()
                .await?
                .stop(dir, rec)
                .await?
        }
    }
    store.remove(dir).map_err(GuestError::FolderLeft)
}

/// What `guest gc` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// One line per removal or failure, in order.
    pub lines: Vec<String>,
    /// How many of the lines are failures.
    pub failures: usize,
}

impl GcReport {
    pub fn done(&mut self, line: String) {
        self.lines.push(line);
    }

    pub fn failed(&mut self, line: String) {
        self.lines.push(line);
        self.failures += 1;
    }
}

/// Removes what crashed or killed host-cli processes left behind: Docker
/// containers labelled `sandtop.session` that no live session owns (see
/// [`docker::DockerBackend::gc_containers`]), then session folders whose
/// guest is gone or that have no record and no live creator. Returns one
/// line per removal, and per failure: one folder that cannot be removed
/// (or one container) does not stop the others. When the Docker engine
/// cannot be reached, Docker sessions are left alone (their state is
/// unknown).
pub async fn gc(store: &Store) -> Result<GcReport> {
    let mut report = GcReport::default();
    let docker = match docker::DockerBackend::connect().await {
        Ok(b) => Some(b),
        Err(e) => {
            report.done(format!(
                "docker containers not checked: {}",
                e.chain().lines().next().unwrap_or("")
            ));
            None
        }
    };
    if let Some(b) = &docker {
        b.gc_containers(store, &mut report).await?;
    }
    gc_folders(store, docker.as_ref(), &mut report).await?;
    Ok(report)
}

/// The folder half of [`gc`]; without `docker`, Docker sessions are left
/// alone.
pub async fn gc_folders(
    store: &Store,
    docker: Option<&docker::DockerBackend>,
    report: &mut GcReport,
) -> Result<()> {
    for dir in store.folders()? {
        if !dir.path.exists() {
            continue;
        }
        // An unclaimed guest of a pool whose supervisor is gone (killed
        // with -9): nobody will hand it out or stop it.
        if session::pool_member::supervisor_alive(&dir) == Some(false)
            && let Ok(rec) = dir.load()
        {
            match stop(store, &dir, &rec).await {
                Ok(()) => report.done(format!(
                    "removed pool guest {}: the pool's supervisor is gone",
                    dir.name
                )),
                Err(e) => report.failed(format!(
                    "could not remove pool guest {}: {}",
                    dir.name,
                    e.chain()
                )),
            }
            continue;
        }
        let why = match dir.load() {
            Ok(rec) => match rec.backend() {
                BackendKind::Local => (!local::LocalBackend.alive(&dir, &rec).await)
                    .then_some("its local daemon is gone"),
                BackendKind::Qemu => {
                    if snapshot_store::abandoned(&dir) {
                        qemu::stop_processes(&dir, &rec).await;
                        Some("a VM snapshot's boot whose host-cli is gone")
                    } else if qemu::alive(&dir, &rec) {
                        None
                    } else {
                        // QEMU is gone; its link process follows it, or
                        // is ended here.
                        qemu::stop_processes(&dir, &rec).await;
                        Some("its VM is gone")
                    }
                }
                BackendKind::Docker => match (docker, rec.docker()) {
                    (None, _) => None,
                    (Some(b), d) => {
                        let running = match d {
                            Some(d) => b.running(&d.container_id).await,
                            None => Ok(false),
                        };
                        match running {
                            Ok(true) => None,
                            // An engine that does not answer proves nothing.
                            Err(e) => {
                                report.done(format!(
                                    "left session folder {} alone: its container cannot be checked ({})",
                                    dir.name,
                                    e.chain().lines().next().unwrap_or("")
                                ));
                                None
                            }
                            Ok(false) => {
                                if let Some(d) = d
                                    && let Err(e) = b.remove(&d.container_id).await
                                {
                                    report.failed(format!(
                                        "could not remove the container of session {}: {}",
                                        dir.name,
                                        e.chain()
                                    ));
                                    continue;
                                }
                                Some("its container is gone")
                            }
                        }
                    }
                },
            },
            // Alive, or not to be told from here (another PID namespace).
            Err(_) if dir.owner_state() != Some(false) => None,
            Err(_) => Some("it has no record and the host-cli that created it is gone"),
        };
        if let Some(why) = why {
            match remove_folder(store, &dir, docker).await {
                Ok(how) => report.done(format!("removed session folder {}: {why}{how}", dir.name)),
                Err(e) => report.failed(format!(
                    "could not remove session folder {}: {e:#}",
                    dir.name
                )),
            }
        }
    }
    Ok(())
}

/// Removes a session folder ([`Store::remove`]); when that fails for a
/// user who is not root and Docker is at hand, what the guest wrote in its
/// `guest/` folder (a folder of a host-cli from before the layout of docs/security.md F4,
/// open to the guest) is emptied as the guest's uid
/// ([`docker::DockerBackend::empty_as_guest`]) and the removal tried again.
/// Ok: how it went, as a suffix of gc's line (empty when plainly removed).
pub(crate) async fn remove_folder(
    store: &Store,
    dir: &SessionDir,
    docker: Option<&docker::DockerBackend>,
) -> std::result::Result<&'static str, session::SessionError> {
    let first = match store.remove(dir) {
        Ok(()) => return Ok(""),
        Err(e) => e,
    };
    let Some(b) = docker.filter(|_| !rustix::process::geteuid().is_root()) else {
        return Err(first);
    };
    let g = dir.guest_path();
    if !std::fs::symlink_metadata(&g).is_ok_and(|m| m.is_dir()) {
        return Err(first);
    }
    if let Err(e) = b.empty_as_guest(&g, &dir.name).await {
        tracing::warn!(
            "emptying {} as the guest's uid: {}",
            g.display(),
            e.chain().lines().next().unwrap_or("")
        );
        return Err(first);
    }
    store.remove(dir).map(
        |()| " (what its guest wrote was removed as the guest's uid, in a throwaway container)",
    )
}

#[cfg(test)]
mod tests;
