//! Guests: the backends that run a session's desktop, behind one trait.
//!
//! - [`docker::DockerBackend`] (the default): a hardened container built
//!   from `Dockerfile.guest`, driven through the Docker API (bollard).
//! - [`local::LocalBackend`]: Xvfb and sandtopd as processes on this host,
//!   for development and the x11 tests. It isolates nothing.
//!
//! A session's lifecycle: `start` claims the session folder, writes the
//! token and the owner (this process, for `gc`), starts the guest and
//! waits until the daemon answers (removing everything it created if that
//! fails); `connector` opens byte streams to the daemon; `stop` ends the
//! guest and removes the folder; [`gc`] removes what a killed host-cli
//! left behind (containers and folders).

pub mod docker;
pub mod local;

use std::future::Future;

use anyhow::Context as _;
use sandtop_protocol::Size;
use serde::Serialize;

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

/// A session's state as its backend sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The guest runs and its daemon answers.
    Running,
    /// The guest runs but the daemon does not answer (yet).
    Unresponsive,
    /// The guest is gone; the record is stale (`guest gc` removes it).
    Exited,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Running => "running",
            State::Unresponsive => "unresponsive",
            State::Exited => "exited",
        })
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
    ) -> impl Future<Output = anyhow::Result<SessionRecord>> + Send;

    /// Stops the guest (the caller removes the folder).
    fn stop(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Opens streams to the session's daemon.
    fn connector(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> impl Future<Output = anyhow::Result<Box<dyn Connect>>> + Send;

    /// Whether the guest still exists.
    fn alive(&self, dir: &SessionDir, rec: &SessionRecord) -> impl Future<Output = bool> + Send;

    /// The tail of the guest's log.
    fn logs(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> impl Future<Output = anyhow::Result<String>> + Send;
}

/// Opens the authenticated channel to a session.
pub async fn open_channel(dir: &SessionDir, rec: &SessionRecord) -> anyhow::Result<Channel> {
    let token = Secret::read(&dir.token_path())?;
    let connector = match rec.backend {
        BackendKind::Local => local::LocalBackend.connector(dir, rec).await?,
        BackendKind::Docker => {
            docker::DockerBackend::connect()
                .await?
                .connector(dir, rec)
                .await?
        }
    };
    Channel::open(connector, token)
        .await
        .with_context(|| format!("opening the channel to session {}", rec.name))
}

/// Running, unresponsive or exited.
pub async fn state(dir: &SessionDir, rec: &SessionRecord) -> State {
    let alive = match rec.backend {
        BackendKind::Local => local::LocalBackend.alive(dir, rec).await,
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
        ch.health().await.ok()
    })
    .await
    .ok()
    .flatten();
    if answered.is_some() {
        State::Running
    } else {
        State::Unresponsive
    }
}

/// Starts a session with `backend`, cleaning up on failure.
pub async fn start<B: Backend>(
    store: &Store,
    backend: &B,
    req: &StartRequest,
) -> anyhow::Result<SessionRecord> {
    let dir = store.create(&req.name)?;
    let prepared = dir
        .write_owner()
        .and_then(|()| Secret::generate_token()?.write_new(&dir.token_path()));
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
            .then_some((docker::GUEST_UID, docker::GUEST_GID));
        match crate::egress::service::start(&paths, &req.network, owner).await {
            Ok(pid) => rec.egress_pid = Some(pid),
            Err(e) => {
                dir.save(&rec)?;
                let _ = stop(store, &dir, &rec).await;
                return Err(e.context("starting the egress proxy"));
            }
        }
    }
    dir.save(&rec)?;
    Ok(rec)
}

/// Stops a session and removes its folder.
pub async fn stop(store: &Store, dir: &SessionDir, rec: &SessionRecord) -> anyhow::Result<()> {
    if let Some(pid) = rec.egress_pid {
        crate::egress::service::stop(pid);
    }
    match rec.backend {
        BackendKind::Local => local::LocalBackend.stop(dir, rec).await?,
        BackendKind::Docker => {
            docker::DockerBackend::connect()
                .await?
                .stop(dir, rec)
                .await?
        }
    }
    store.remove(dir)
}

/// Removes what crashed or killed host-cli processes left behind: Docker
/// containers labelled `sandtop.session` that no live session owns (see
/// [`docker::DockerBackend::gc_containers`]), then session folders whose
/// guest is gone or that have no record and no live creator. Returns one
/// line per removal. When the Docker engine cannot be reached, Docker
/// sessions are left alone (their state is unknown).
pub async fn gc(store: &Store) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let docker = match docker::DockerBackend::connect().await {
        Ok(b) => Some(b),
        Err(e) => {
            done.push(format!(
                "docker containers not checked: {}",
                format!("{e:#}").lines().next().unwrap_or("")
            ));
            None
        }
    };
    if let Some(b) = &docker {
        done.extend(b.gc_containers(store).await?);
    }
    for dir in store.folders()? {
        if !dir.path.exists() {
            continue;
        }
        let why = match dir.load() {
            Ok(rec) => match rec.backend {
                BackendKind::Local => (!local::LocalBackend.alive(&dir, &rec).await)
                    .then_some("its local daemon is gone"),
                BackendKind::Docker => match &docker {
                    Some(b) if !b.alive(&dir, &rec).await => {
                        if let Some(d) = &rec.docker {
                            b.remove(&d.container_id).await?;
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
            store.remove(&dir)?;
            done.push(format!("removed session folder {}: {why}", dir.name));
        }
    }
    Ok(done)
}
