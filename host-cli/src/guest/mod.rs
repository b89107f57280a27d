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
pub mod error;
pub mod ids;
pub mod limits;
pub mod local;
pub mod options;
pub mod qemu;

use std::future::Future;

use sandtop_protocol::{DaemonState, Size};
use serde::Serialize;

pub use self::error::{GuestError, Result};
use crate::channel::{Channel, Connect};
use crate::secret::Secret;
use crate::session::{BackendKind, SessionDir, SessionRecord, Store};

/// What `guest start` asks for.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub name: String,
    pub screen: Size,
    /// The network policy.
    pub network: crate::egress::service::EgressConfig,
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
        BackendKind::Qemu => Box::new(crate::channel::UnixConnector(dir.socket_path())),
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

/// Starts a session with `backend`, cleaning up on failure.
pub async fn start<B: Backend>(
    store: &Store,
    backend: &B,
    req: &StartRequest,
) -> Result<SessionRecord> {
    let dir = store.create(&req.name)?;
    let prepared = (|| -> Result<()> {
        dir.write_owner()?;
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
    rec.network =
        (req.network.mode != crate::egress::policy::NetworkMode::None).then(|| req.network.clone());
    if req.network.mode.uses_proxy() {
        // The guest's relay connects per connection, so the proxy can come
        // up after the container.
        let paths = crate::egress::service::Paths::new(&dir.path, &dir.guest_path());
        let owner = rustix::process::geteuid()
            .is_root()
            .then_some((ids::GUEST_UID, ids::GUEST_GID));
        match crate::egress::service::start(&paths, &req.network, owner).await {
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

/// Stops a session and removes its folder.
pub async fn stop(store: &Store, dir: &SessionDir, rec: &SessionRecord) -> Result<()> {
    if let Some(pid) = rec.egress_pid {
        crate::egress::service::stop(pid);
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
        let why = match dir.load() {
            Ok(rec) => match rec.backend() {
                BackendKind::Local => (!local::LocalBackend.alive(&dir, &rec).await)
                    .then_some("its local daemon is gone"),
                BackendKind::Qemu => {
                    if qemu::alive(&dir, &rec) {
                        None
                    } else {
                        // QEMU is gone; its link process follows it, or
                        // is ended here.
                        qemu::stop_processes(&dir, &rec).await;
                        Some("its VM is gone")
                    }
                }
                BackendKind::Docker => match docker {
                    Some(b) if !b.alive(&dir, &rec).await => {
                        if let Some(d) = rec.docker()
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
                    _ => None,
                },
            },
            Err(_) if dir.owner_alive() => None,
            Err(_) => Some("it has no record and the host-cli that created it is gone"),
        };
        if let Some(why) = why {
            match store.remove(&dir) {
                Ok(()) => report.done(format!("removed session folder {}: {why}", dir.name)),
                Err(e) => report.failed(format!(
                    "could not remove session folder {}: {e:#}",
                    dir.name
                )),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::session::remove::tests::{CHILD, GUEST, OTHER, check_child, chown_tree, rerun};

    fn request(name: &str) -> StartRequest {
        StartRequest {
            name: name.into(),
            screen: Size::new(640, 480),
            network: crate::egress::service::EgressConfig::none(),
        }
    }

    fn docker_record(name: &str) -> SessionRecord {
        SessionRecord {
            name: name.into(),
            screen: Size::new(640, 480),
            created_unix: 1,
            guest: crate::session::BackendRecord::Docker(crate::session::DockerRecord {
                container_id: "c0ffee".into(),
                container_name: format!("sandtop-{name}"),
                image: "sandtop-guest:latest".into(),
            }),
            network: None,
            egress_pid: None,
        }
    }

    /// A backend whose start fails the way a slow guest does.
    struct NeverReady;

    impl Backend for NeverReady {
        async fn start(&self, dir: &SessionDir, _req: &StartRequest) -> Result<SessionRecord> {
            // What a real start leaves in the folder before it fails.
            std::fs::write(dir.log_path(), b"booting").unwrap();
            Err(GuestError::NotReady {
                kind: "guest",
                waited: std::time::Duration::from_secs(1),
                last: None,
                log: "booting".into(),
            })
        }
        async fn stop(&self, _: &SessionDir, _: &SessionRecord) -> Result<()> {
            unreachable!("nothing to stop")
        }
        async fn connector(&self, _: &SessionDir, _: &SessionRecord) -> Result<Box<dyn Connect>> {
            unreachable!("never connected")
        }
        async fn alive(&self, _: &SessionDir, _: &SessionRecord) -> bool {
            false
        }
        async fn logs(&self, _: &SessionDir, _: &SessionRecord) -> Result<String> {
            Ok(String::new())
        }
    }

    #[tokio::test]
    async fn a_failed_start_returns_the_backends_error_and_leaves_no_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("state")).unwrap();
        let e = start(&store, &NeverReady, &request("slow"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, GuestError::NotReady { kind: "guest", .. }),
            "{e:?}"
        );
        assert!(
            matches!(
                store.get("slow"),
                Err(crate::session::SessionError::NotFound(_))
            ),
            "the folder of a failed start is left"
        );
        // A name taken by another session is refused before any backend
        // runs, as the store's own error.
        store.create("taken").unwrap();
        let e = start(&store, &NeverReady, &request("taken"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, GuestError::Session(crate::session::SessionError::Exists(ref n)) if n == "taken"),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn reaching_a_session_whose_daemon_is_gone_is_a_channel_error() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("state")).unwrap();
        let dir = store.create("gone").unwrap();
        sandtop_client::Token::generate()
            .unwrap()
            .write_new(&dir.token_path())
            .unwrap();
        let mut rec = docker_record("gone");
        rec.guest =
            crate::session::BackendRecord::Local(crate::session::LocalRecord { pid: i32::MAX });
        let e = open_channel(&dir, &rec).await.unwrap_err();
        assert!(
            matches!(&e, GuestError::Channel { name, .. } if name == "gone"),
            "{e:?}"
        );
        assert!(
            e.chain()
                .starts_with("opening the channel to session gone: "),
            "{}",
            e.chain()
        );
        // Without its token file, the token is what is missing.
        std::fs::remove_file(dir.token_path()).unwrap();
        let e = open_channel(&dir, &rec).await.unwrap_err();
        assert!(
            matches!(
                e,
                GuestError::Token(sandtop_client::TokenError::Read { .. })
            ),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_backend_refuses_a_record_of_another_backend() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("state")).unwrap();
        let dir = store.create("other").unwrap();
        let e = local::LocalBackend
            .stop(&dir, &docker_record("other"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, GuestError::NotThisBackend("local process")),
            "{e:?}"
        );
    }

    #[test]
    fn a_guest_is_ready_only_when_its_health_is_ok() {
        let health = |status: &str, wm: Option<bool>| -> sandtop_protocol::Health {
            serde_json::from_value(serde_json::json!({
                "status": status, "x_connected": status != "down",
                "display": {"width": 1280, "height": 800},
                "window_manager": wm, "display_restarts": 0, "uptime_ms": 1,
            }))
            .unwrap()
        };
        assert!(ready(&health("ok", Some(true))));
        assert!(ready(&health("ok", None)));
        assert!(!ready(&health("degraded", Some(false))));
        assert!(!ready(&health("down", Some(false))));
    }

    #[test]
    fn states_follow_the_daemons_lifecycle_and_the_guests_existence() {
        let cases = [
            (true, Probe::Answered(DaemonState::Open), "running"),
            (true, Probe::Answered(DaemonState::Draining), "draining"),
            (true, Probe::Answered(DaemonState::Closed), "closed"),
            (true, Probe::Refused, "closed"),
            (true, Probe::Silent, "unresponsive"),
            (false, Probe::Answered(DaemonState::Open), "exited"),
            (false, Probe::Refused, "exited"),
            (false, Probe::Silent, "exited"),
        ];
        for (alive, probe, word) in cases {
            let st = classify(alive, probe);
            assert_eq!(st.to_string(), word, "{alive} {probe:?}");
            // `guest ls --json` uses the same words.
            assert_eq!(serde_json::to_value(st).unwrap(), word, "{alive} {probe:?}");
        }
    }

    #[test]
    fn gc_goes_on_past_a_folder_it_cannot_remove_and_reports_it() {
        if let Some(dir) = std::env::var_os(CHILD) {
            gc_case(Path::new(&dir));
            return;
        }
        if !rustix::process::geteuid().is_root() {
            println!("SKIP: making a directory of another uid needs root");
            return;
        }
        // Three stale folders (no record, no live creator) of the guest's
        // uid; in the first, the guest left a directory of another account
        // with a file, which the guest's uid cannot remove.
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("state")).unwrap();
        for name in ["a-stuck", "b-stale", "c-stale"] {
            let d = store.create(name).unwrap();
            std::fs::create_dir(d.guest_path()).unwrap();
            std::fs::write(d.guest_path().join("file"), b"x").unwrap();
        }
        let theirs = tmp.path().join("state/sessions/a-stuck/guest/theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("file"), b"x").unwrap();
        chown_tree(tmp.path(), GUEST);
        chown_tree(&theirs, OTHER);
        let f = "gc_goes_on_past_a_folder_it_cannot_remove_and_reports_it";
        let Some(out) = rerun(module_path!(), f, tmp.path(), Some(GUEST)) else {
            return;
        };
        check_child(&out, tmp.path());
    }

    fn gc_case(dir: &Path) {
        let store = Store::at(dir.join("state")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut report = GcReport::default();
        rt.block_on(gc_folders(&store, None, &mut report)).unwrap();
        assert_eq!(report.failures, 1, "{report:?}");
        assert_eq!(report.lines.len(), 3, "{report:?}");
        let stuck = &report.lines[0];
        assert!(
            stuck.starts_with("could not remove session folder a-stuck: ")
                && stuck.contains("guest/theirs/file")
                && stuck.contains(&format!("uid {OTHER}")),
            "{stuck}"
        );
        for (line, name) in report.lines[1..].iter().zip(["b-stale", "c-stale"]) {
            assert!(
                line.starts_with(&format!("removed session folder {name}: ")),
                "{line}"
            );
        }
        let left: Vec<String> = store
            .folders()
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(left, vec!["a-stuck".to_string()]);
        // Everything of a-stuck but the other account's directory is gone.
        let a = dir.join("state/sessions/a-stuck");
        let mut rest: Vec<String> = walk(&a);
        rest.sort();
        assert_eq!(
            rest,
            ["guest", "guest/theirs", "guest/theirs/file"],
            "{rest:?}"
        );
        std::fs::write(dir.join("child-done"), b"").unwrap();
    }

    fn walk(top: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![top.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                out.push(p.strip_prefix(top).unwrap().display().to_string());
                if p.is_dir() {
                    todo.push(p);
                }
            }
        }
        out
    }
}
