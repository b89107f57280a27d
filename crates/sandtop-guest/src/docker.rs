//! The Docker backend: one hardened container per session, driven through
//! the Docker Engine API (bollard; no `docker` CLI anywhere in host-cli).
//!
//! How `guest start` flows here:
//! 1. [`DockerBackend::connect`] reaches the engine (`DOCKER_HOST` or the
//!    local socket) and negotiates the API version (the engine on the
//!    build host speaks 1.41; bollard's default is newer).
//! 2. The image must be present (`make guest` builds it offline).
//! 3. The guest runs as [`GUEST_UID`](super::ids::GUEST_UID), a uid no host account has: `start`
//!    refuses when one does ([`check_guest_ids_unused`]). The session folder
//!    gets `guest/` with a copy of the token, which must be writable by
//!    the guest's uid: when host-cli runs as root it is a tmpfs chowned to
//!    it (0700, token 0400); for any other host user `guest/` stays 0700
//!    and that user's, and only the token copy is made 0644, which stays
//!    private because every folder above it (the state directory,
//!    `sessions/`, the session folder) is 0700 and owned by that user;
//!    the guest sees that token, and the egress socket, as single-file
//!    read-only binds in the engine's tmpfs
//!    (`GuestFolder`, docs/security.md
//!    F4; the egress proxy is started first so that its socket exists).
//!    (In that last case the daemon's socket exists only in the guest, so
//!    the channel takes the exec path.) Once the daemon answers, the copy
//!    of the token is removed from `guest/` (emptied first when it is
//!    bound as one file): the daemon read it at its start and nothing in
//!    the guest needs it again.
//! 4. The container is created ([`DockerBackend::create_body`]): the image's
//!    tini as PID 1 (Docker's `init` stays off: it would put a second init
//!    in front of tini), the guest's uid, every capability dropped,
//!    no-new-privileges, Docker's default seccomp profile (never
//!    unconfined), read-only root, size-capped `nosuid,nodev,noexec` tmpfs
//!    on `/tmp` and `/home/user` (everything the guest executes comes from
//!    the image), memory with swap equal to it, pids, CPU and shm limits,
//!    no core dumps, network `none`, no published ports, no devices, and
//!    `/run/sandtop`: as root `guest/`, a tmpfs of its own, 1 MiB, `noexec`
//!    ([`mount_guest_folder`](crate::session::guest_folder::mount_guest_folder));
//!    for any other user the engine's tmpfs of the same bounds with the
//!    token and the egress socket bound in read-only. The environment is
//!    `SANDTOP_SCREEN` and nothing of the host's (no API key, no token).
//!    Labels: `sandtop.session=NAME` and `sandtop.session-dir=FOLDER`, so
//!    that `guest gc` can find the session folder of any container, and
//!    `sandtop.owner-host` / `sandtop.owner-uid`, so that it judges only
//!    containers of this host and user ([`not_ours`]).
//! 5. Start, then wait until the daemon's health is `ok` over the channel
//!    ([`channel`]), at most `ready_timeout`. On failure the tail of the
//!    container's log is shown and the container is removed; Ctrl-C,
//!    SIGTERM and SIGHUP during the start remove it too.
//!
//! A folder this user cannot remove because a guest of the old layout
//! wrote there is emptied as the guest's uid in a throwaway container
//! ([`DockerBackend::empty_as_guest`], `sweep`).
//!
//! `stop` stops with a short grace period and removes the container;
//! `gc_containers` removes containers of this host and user (root: of any
//! user) whose folder is gone, whose starter died before it finished, or
//! whose guest exited; another user's or host's are left alone.

pub mod channel;
mod exec;
mod gc;
mod lifecycle;
mod spec;
mod sweep;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::StopContainerOptionsBuilder;
use serde::Serialize;

use self::channel::{ChannelMode, DockerConnector};
pub use self::exec::{ExecResult, MemoryUse};
pub use self::gc::{host_id, not_ours, session_labels};
use super::ids::check_guest_ids_unused;
use super::limits::Limits;
use super::{Backend, GuestError, Result, StartRequest};
use crate::session::guest_folder::{GuestFolder, prepare_guest_dir};
use crate::session::{SessionDir, SessionRecord};
use sandtop_channel::Connect;
use sandtop_hostkit::secret::Secret;
use sandtop_hostkit::signals::until_interrupted;

/// The image `guest start` runs unless told otherwise.
pub const DEFAULT_IMAGE: &str = "sandtop-guest:latest";
/// Overrides [`DEFAULT_IMAGE`].
pub const IMAGE_ENV: &str = "SANDTOP_IMAGE";
/// Every container host-cli creates carries this label (value: session).
pub const LABEL_SESSION: &str = "sandtop.session";
/// The session folder on the host (value: absolute path).
pub const LABEL_SESSION_DIR: &str = "sandtop.session-dir";
/// The host that created the container (value: [`host_id`]).
pub const LABEL_OWNER_HOST: &str = "sandtop.owner-host";
/// The uid of the host user who created the container.
pub const LABEL_OWNER_UID: &str = "sandtop.owner-uid";
/// The image's build-input hash (set by guest-image/build.sh).
pub const LABEL_INPUT_HASH: &str = "sandtop.input-hash";
/// How long `start` waits for the daemon by default.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Seconds between SIGTERM and SIGKILL on stop.
const STOP_GRACE_SECS: i32 = 3;
/// A Docker call on a session of another backend.
const NO_CONTAINER: GuestError = GuestError::NotThisBackend("container");
/// Lines of container log shown when a start fails.
const LOG_TAIL_ON_FAILURE: &str = "30";

/// The Docker backend.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    docker: Docker,
    image: String,
    limits: Limits,
    channel: ChannelMode,
    ready_timeout: Duration,
    /// Labels added to the session's own (a pool's `sandtop.pool`).
    extra_labels: Vec<(String, String)>,
}

/// A pool's guests carry this label (value: the pool's folder), beside
/// the session's: `guest gc` and `docker ps` tell them apart.
pub const LABEL_POOL: &str = "sandtop.pool";

/// What the engine said about itself.
#[derive(Debug, Clone, Serialize)]
pub struct EngineInfo {
    pub server_version: String,
    pub api_version: String,
    /// The API version host-cli uses after negotiation.
    pub client_api: String,
}

/// The guest image, as `docker image inspect` sees it.
#[derive(Debug, Clone, Serialize)]
pub struct ImageInfo {
    pub reference: String,
    pub id: String,
    pub input_hash: Option<String>,
    pub size_bytes: Option<i64>,
    pub created: Option<String>,
}

/// Where the engine is, for messages.
fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string())
}

/// Whether a bollard error is a 404 (or, with `also`, another status).
fn is_status(e: &bollard::errors::Error, codes: &[u16]) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code, .. } if codes.contains(status_code))
}

/// The container name of a session.
pub fn container_name(session: &str) -> String {
    format!("sandtop-{session}")
}

impl DockerBackend {
    /// Connects to the engine (`DOCKER_HOST`, else the local socket) and
    /// negotiates the API version. Image: `$SANDTOP_IMAGE` or the default;
    /// channel: `$SANDTOP_CHANNEL` or auto.
    pub async fn connect() -> Result<DockerBackend> {
        let unreachable = |source| GuestError::EngineUnreachable {
            host: docker_host(),
            source,
        };
        let docker = Docker::connect_with_defaults().map_err(unreachable)?;
        let waited = Duration::from_secs(5);
        let docker = tokio::time::timeout(waited, docker.negotiate_version())
            .await
            .map_err(|_| GuestError::EngineSilent {
                host: docker_host(),
                waited,
            })?
            .map_err(unreachable)?;
        let image = std::env::var(IMAGE_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
        Ok(DockerBackend {
            docker,
            image,
            limits: Limits::default(),
            channel: ChannelMode::from_env()?,
            ready_timeout: READY_TIMEOUT,
            extra_labels: Vec::new(),
        })
    }

    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    pub fn with_channel(mut self, mode: ChannelMode) -> Self {
        self.channel = mode;
        self
    }
    pub fn with_ready_timeout(mut self, t: Duration) -> Self {
        self.ready_timeout = t;
        self
    }
    /// Adds a label to the containers it creates (the session's own
    /// labels cannot be replaced this way).
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.extra_labels.push((key.to_string(), value.to_string()));
        self
    }

    /// The bollard client (tests and `doctor` inspect with it).
    pub fn docker(&self) -> &Docker {
        &self.docker
    }
    pub fn image(&self) -> &str {
        &self.image
    }
    pub fn limits(&self) -> Limits {
        self.limits
    }
    pub fn channel_mode(&self) -> ChannelMode {
        self.channel
    }

    /// The engine's versions.
    pub async fn engine(&self) -> Result<EngineInfo> {
        let v = self
            .docker
            .version()
            .await
            .map_err(GuestError::docker("asking the engine's version"))?;
        Ok(EngineInfo {
            server_version: v.version.unwrap_or_default(),
            api_version: v.api_version.unwrap_or_default(),
            client_api: self.docker.client_version().to_string(),
        })
    }

    /// The guest image, or an error saying how to build it.
    pub async fn image_info(&self) -> Result<ImageInfo> {
        match self.docker.inspect_image(&self.image).await {
            Ok(i) => Ok(ImageInfo {
                reference: self.image.clone(),
                id: i.id.unwrap_or_default(),
                input_hash: i
                    .config
                    .and_then(|c| c.labels)
                    .and_then(|l| l.get(LABEL_INPUT_HASH).cloned()),
                size_bytes: i.size,
                created: i.created.map(|c| c.to_string()),
            }),
            Err(e) if is_status(&e, &[404]) => Err(GuestError::NoImage {
                image: self.image.clone(),
            }),
            Err(e) => Err(GuestError::docker(format!(
                "inspecting the image {}",
                self.image
            ))(e)),
        }
    }

    /// The connector for a session (socket or exec, as configured).
    pub fn connector_for(&self, dir: &SessionDir, container: &str) -> DockerConnector {
        self.connector_with(self.channel, dir, container)
    }

    /// The connector for a session with an explicit path.
    pub fn connector_with(
        &self,
        mode: ChannelMode,
        dir: &SessionDir,
        container: &str,
    ) -> DockerConnector {
        DockerConnector::new(
            mode,
            dir.guest_path(),
            self.docker.clone(),
            container.to_string(),
        )
    }
}

impl Backend for DockerBackend {
    async fn start(&self, dir: &SessionDir, req: &StartRequest) -> Result<SessionRecord> {
        check_guest_ids_unused()?;
        self.image_info().await?;
        prepare_guest_dir(dir)?;
        // The engine's layout binds the egress socket into the guest as a
        // single file, so it must exist before the container is created.
        let egress = if GuestFolder::for_this_process() == GuestFolder::EngineTmpfs
            && req.network.mode.uses_proxy()
        {
            Some(
                crate::start_egress(dir, req)
                    .await
                    .map_err(GuestError::Egress)?,
            )
        } else {
            None
        };
        let create_sent = Arc::new(AtomicBool::new(false));
        let outcome = until_interrupted(self.start_inner(dir, req, &create_sent)).await;
        let sent = create_sent.load(Ordering::Acquire);
        if !matches!(outcome, Ok(Ok(_)))
            && let Some(pid) = egress
        {
            sandtop_egress::service::stop(pid);
        }
        match outcome {
            Ok(Ok(mut rec)) => {
                rec.egress_pid = egress;
                Ok(rec)
            }
            Ok(Err(e)) => {
                if sent {
                    self.remove_created(dir, &req.name, false).await;
                }
                Err(e)
            }
            Err(signal) => {
                if sent {
                    self.remove_created(dir, &req.name, true).await;
                }
                Err(GuestError::Interrupted { signal })
            }
        }
    }

    async fn stop(&self, _dir: &SessionDir, rec: &SessionRecord) -> Result<()> {
        let d = rec.docker().ok_or(NO_CONTAINER)?;
        let stop = self
            .docker
            .stop_container(
                &d.container_id,
                Some(
                    StopContainerOptionsBuilder::new()
                        .t(STOP_GRACE_SECS)
                        .build(),
                ),
            )
            .await;
        match stop {
            Ok(()) => {}
            // 304: already stopped; 404: already gone.
            Err(e) if is_status(&e, &[304, 404]) => {}
            Err(e) => {
                tracing::warn!("stopping {}: {e}; removing it anyway", d.container_name);
            }
        }
        self.remove(&d.container_id).await
    }

    async fn connector(&self, dir: &SessionDir, rec: &SessionRecord) -> Result<Box<dyn Connect>> {
        let d = rec.docker().ok_or(NO_CONTAINER)?;
        Ok(Box::new(self.connector_for(dir, &d.container_id)))
    }

    async fn alive(&self, _dir: &SessionDir, rec: &SessionRecord) -> bool {
        match rec.docker() {
            Some(d) => self.running(&d.container_id).await.unwrap_or(false),
            None => false,
        }
    }

    async fn logs(&self, dir: &SessionDir, rec: &SessionRecord) -> Result<String> {
        let d = rec.docker().ok_or(NO_CONTAINER)?;
        let token = Secret::read(&dir.token_path()).unwrap_or_else(|_| Secret::new(String::new()));
        let text = self.logs_text(&d.container_id, "200").await?;
        Ok(token.redact(&text))
    }
}
