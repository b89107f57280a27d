//! The Docker backend: one hardened container per session, driven through
//! the Docker Engine API (bollard; no `docker` CLI anywhere in host-cli).
//!
//! How `guest start` flows here:
//! 1. [`DockerBackend::connect`] reaches the engine (`DOCKER_HOST` or the
//!    local socket) and negotiates the API version (the engine on the
//!    build host speaks 1.41; bollard's default is newer).
//! 2. The image must be present (`make guest` builds it offline).
//! 3. The guest runs as [`GUEST_UID`], a uid no host account has: `start`
//!    refuses when one does ([`check_guest_ids_unused`]). The session folder
//!    gets `guest/` with a copy of the token, which must be writable by
//!    the guest's uid: when host-cli runs as root it is chowned to it (0700,
//!    token 0400); for any other host user `guest/` is made 0777 and the
//!    token 0644, which stays private because every folder above it (the
//!    state directory, `sessions/`, the session folder) is 0700 and owned
//!    by that user. (In that last case the host cannot open the daemon's
//!    socket, which the daemon creates 0600 as the guest's uid, so the
//!    channel falls back to the exec path.) Once the daemon answers, the
//!    copy of the token is removed from `guest/`: the daemon read it at
//!    its start and nothing in the guest needs it again.
//! 4. The container is created ([`DockerBackend::create_body`]): the image's
//!    tini as PID 1 (Docker's `init` stays off: it would put a second init
//!    in front of tini), the guest's uid, every capability dropped,
//!    no-new-privileges, Docker's default seccomp profile (never
//!    unconfined), read-only root, size-capped `nosuid,nodev,noexec` tmpfs
//!    on `/tmp` and `/home/user` (everything the guest executes comes from
//!    the image), memory with swap equal to it, pids, CPU and shm limits,
//!    no core dumps, network `none`, no published ports, no devices, and
//!    one mount: `guest/` on `/run/sandtop`, which is (as root) a tmpfs of
//!    its own, 1 MiB, `noexec` ([`mount_guest_folder`]). The environment is
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
//! `stop` stops with a short grace period and removes the container;
//! `gc_containers` removes containers of this host and user (root: of any
//! user) whose folder is gone, whose starter died before it finished, or
//! whose guest exited; another user's or host's are left alone.

pub mod channel;

use std::collections::HashMap;
use std::future::Future;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, ExecConfig, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, StatsOptionsBuilder,
    StopContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use serde::Serialize;
use tokio::io::AsyncWriteExt as _;

use self::channel::{ChannelMode, DockerConnector};
use super::{Backend, StartRequest};
use crate::channel::{Channel, Connect};
use crate::secret::Secret;
use crate::session::{BackendKind, DockerRecord, SessionDir, SessionRecord, Store, now_unix};

/// The image `guest start` runs unless told otherwise.
pub const DEFAULT_IMAGE: &str = "sandtop-guest:latest";
/// Overrides [`DEFAULT_IMAGE`].
pub const IMAGE_ENV: &str = "SANDTOP_IMAGE";
/// The guest's desktop user (docs/security.md C1, issue 12 item 1): a
/// high constant that no host account has, so that no host user shares
/// the guest's identity. A host user with the guest's uid could reach
/// everything of a running guest through `/proc/PID/root` (its token,
/// socket and display) without any Docker rights. 2,000,000,000 lies above
/// what `useradd` hands out to accounts (1000-60000) and to `/etc/subuid`
/// (from 100000, at most 600,100,000 by default), outside systemd's
/// reserved ranges (nspawn ends at 1,879,048,191) and below 2^31 (tools
/// that keep uids in a signed int). `guest start` refuses to run when an
/// account, a group or a subordinate range of this host holds it
/// ([`check_guest_ids_unused`]). Dockerfile.guest creates the user with
/// the same numbers (a unit test keeps them equal).
pub const GUEST_UID: u32 = 2_000_000_000;
pub const GUEST_GID: u32 = 2_000_000_000;

/// `uid:gid` of the guest's desktop user, as Docker takes it.
pub fn guest_user() -> String {
    format!("{GUEST_UID}:{GUEST_GID}")
}

/// Why the guest's uid/gid must not be used on a host whose account
/// databases read as given (`/etc/passwd`, `/etc/group`, `/etc/subuid`,
/// `/etc/subgid`), or `None` when nothing there holds them.
pub fn host_id_clash(passwd: &str, group: &str, subuid: &str, subgid: &str) -> Option<String> {
    let field = |line: &str, i: usize| line.split(':').nth(i).map(str::trim).map(str::to_string);
    let rows = |text: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for line in rows(passwd) {
        if field(&line, 2).and_then(|u| u.parse::<u32>().ok()) == Some(GUEST_UID) {
            return Some(format!(
                "the host account `{}` has uid {GUEST_UID} (/etc/passwd)",
                field(&line, 0).unwrap_or_default()
            ));
        }
    }
    for line in rows(group) {
        if field(&line, 2).and_then(|g| g.parse::<u32>().ok()) == Some(GUEST_GID) {
            return Some(format!(
                "the host group `{}` has gid {GUEST_GID} (/etc/group)",
                field(&line, 0).unwrap_or_default()
            ));
        }
    }
    for (text, id, file) in [
        (subuid, GUEST_UID, "/etc/subuid"),
        (subgid, GUEST_GID, "/etc/subgid"),
    ] {
        for line in rows(text) {
            let (Some(Ok(start)), Some(Ok(count))) = (
                field(&line, 1).map(|s| s.parse::<u64>()),
                field(&line, 2).map(|s| s.parse::<u64>()),
            ) else {
                continue;
            };
            if (start..start.saturating_add(count)).contains(&u64::from(id)) {
                return Some(format!(
                    "{id} lies in the subordinate range of `{}` ({file}: {start}, {count} ids)",
                    field(&line, 0).unwrap_or_default()
                ));
            }
        }
    }
    None
}

/// Refuses to go on when an account, a group or a subordinate id range of
/// this host holds the guest's uid or gid (read from the files; accounts
/// that only a network directory such as LDAP knows are not seen).
pub fn check_guest_ids_unused() -> anyhow::Result<()> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    match host_id_clash(
        &read("/etc/passwd"),
        &read("/etc/group"),
        &read("/etc/subuid"),
        &read("/etc/subgid"),
    ) {
        None => Ok(()),
        Some(why) => bail!(
            "refusing to start a guest: its processes run as uid/gid {GUEST_UID}, and {why}. \
             That account would reach the guest's token, socket and display through \
             /proc/PID/root. Give the account another id (docs/security.md, C1)"
        ),
    }
}
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
/// Where the session's `guest/` folder appears in the guest.
pub const GUEST_MOUNT: &str = "/run/sandtop";
/// How long `start` waits for the daemon by default.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Seconds between SIGTERM and SIGKILL on stop.
const STOP_GRACE_SECS: i32 = 3;
/// Lines of container log shown when a start fails.
const LOG_TAIL_ON_FAILURE: &str = "30";

/// Resource limits of one guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Memory, and memory plus swap (no swap at all).
    pub memory_bytes: i64,
    pub pids: i64,
    /// CPU in billionths of a CPU.
    pub nano_cpus: i64,
    pub shm_bytes: i64,
    /// tmpfs sizes (they count against the memory limit as they fill).
    pub tmp_bytes: i64,
    pub home_bytes: i64,
}

const MIB: i64 = 1024 * 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: 2048 * MIB,
            pids: 512,
            nano_cpus: 2_000_000_000,
            shm_bytes: 256 * MIB,
            tmp_bytes: 256 * MIB,
            home_bytes: 512 * MIB,
        }
    }
}

/// Parses `512m`, `2g`, `1.5g`, `65536k` or plain bytes.
pub fn parse_bytes(s: &str) -> Result<i64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1024.0),
        Some('m') => (&t[..t.len() - 1], 1024.0 * 1024.0),
        Some('g') => (&t[..t.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 512m or 2g"))?;
    let bytes = v * mult;
    if !(bytes.is_finite() && (4.0 * 1024.0 * 1024.0..1e15).contains(&bytes)) {
        return Err(format!("`{s}`: a size between 4m and 900t, please"));
    }
    Ok(bytes as i64)
}

/// Parses a CPU count such as `1.5` into nano-CPUs.
pub fn parse_cpus(s: &str) -> Result<i64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a CPU count like 1 or 1.5"))?;
    if !(v.is_finite() && (0.01..=1024.0).contains(&v)) {
        return Err(format!("`{s}`: between 0.01 and 1024 CPUs, please"));
    }
    Ok((v * 1e9) as i64)
}

/// The Docker backend.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    docker: Docker,
    image: String,
    limits: Limits,
    channel: ChannelMode,
    ready_timeout: Duration,
}

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

/// The result of a command run in a guest.
#[derive(Debug, Clone)]
pub struct ExecResult {
    pub exit_code: i64,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// A container's memory use.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MemoryUse {
    /// What `docker stats` shows: usage minus inactive page cache.
    pub working_set_bytes: u64,
    /// The cgroup's raw usage (includes all page cache and tmpfs).
    pub usage_bytes: u64,
    pub limit_bytes: u64,
    pub pids: u64,
}

/// Where the engine is, for messages.
fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string())
}

/// This host, for [`LABEL_OWNER_HOST`]: `/etc/machine-id` (one per
/// installation, unlike a host name), else the kernel's host name.
pub fn host_id() -> String {
    let id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let id = id.trim();
    if !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return format!("machine-id:{id}");
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("hostname:{}", name.trim())
}

/// The labels of a session's container: the session, its folder, and its
/// owner (this host and this process's effective uid), so that `guest gc`
/// run by anyone else leaves it alone (issue 12 item 5).
pub fn session_labels(session: &str, folder: &Path) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_SESSION.to_string(), session.to_string()),
        (
            LABEL_SESSION_DIR.to_string(),
            folder.to_string_lossy().into_owned(),
        ),
        (LABEL_OWNER_HOST.to_string(), host_id()),
        (
            LABEL_OWNER_UID.to_string(),
            rustix::process::geteuid().as_raw().to_string(),
        ),
    ])
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
    pub async fn connect() -> anyhow::Result<DockerBackend> {
        let docker = Docker::connect_with_defaults()
            .with_context(|| format!("cannot use the Docker engine at {}", docker_host()))?;
        let docker = tokio::time::timeout(Duration::from_secs(5), docker.negotiate_version())
            .await
            .map_err(|_| anyhow::anyhow!("no answer within 5 s"))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .with_context(|| {
                format!(
                    "cannot reach the Docker engine at {} (is dockerd running, and may this user \
                     use it? root or the `docker` group; DOCKER_HOST selects another engine)",
                    docker_host()
                )
            })?;
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
    pub async fn engine(&self) -> anyhow::Result<EngineInfo> {
        let v = self
            .docker
            .version()
            .await
            .context("asking the engine's version")?;
        Ok(EngineInfo {
            server_version: v.version.unwrap_or_default(),
            api_version: v.api_version.unwrap_or_default(),
            client_api: self.docker.client_version().to_string(),
        })
    }

    /// The guest image, or an error saying how to build it.
    pub async fn image_info(&self) -> anyhow::Result<ImageInfo> {
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
            Err(e) if is_status(&e, &[404]) => bail!(
                "the guest image {} is not present: build it with `make guest` \
                 (or guest-image/build.sh), or pick another with --image / {IMAGE_ENV}",
                self.image
            ),
            Err(e) => Err(e).with_context(|| format!("inspecting the image {}", self.image)),
        }
    }

    /// The container's create body: the hardening lives here.
    pub fn create_body(&self, dir: &SessionDir, req: &StartRequest) -> ContainerCreateBody {
        let l = &self.limits;
        let tmpfs = HashMap::from([
            (
                "/tmp".to_string(),
                format!("rw,nosuid,nodev,noexec,size={},mode=1777", l.tmp_bytes),
            ),
            (
                "/home/user".to_string(),
                format!(
                    "rw,nosuid,nodev,noexec,size={},uid={GUEST_UID},gid={GUEST_GID},mode=0700",
                    l.home_bytes
                ),
            ),
        ]);
        let labels = session_labels(&req.name, &dir.path);
        let host_config = HostConfig {
            memory: Some(l.memory_bytes),
            memory_swap: Some(l.memory_bytes),
            pids_limit: Some(l.pids),
            nano_cpus: Some(l.nano_cpus),
            shm_size: Some(l.shm_bytes),
            cap_drop: Some(vec!["ALL".to_string()]),
            cap_add: None,
            // Docker's default seccomp profile stays: only no-new-privileges
            // is added, never seccomp=unconfined.
            security_opt: Some(vec!["no-new-privileges:true".to_string()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            // `none` for every mode but `open`: with `allow` and `ask` the
            // only way out is the egress socket in the session folder.
            network_mode: Some(
                if req.network.mode == crate::egress::policy::NetworkMode::Open {
                    "bridge"
                } else {
                    "none"
                }
                .to_string(),
            ),
            privileged: Some(false),
            publish_all_ports: Some(false),
            port_bindings: None,
            devices: Some(Vec::new()),
            // tini is PID 1 through the image's ENTRYPOINT.
            init: Some(false),
            ipc_mode: Some("private".to_string()),
            ulimits: Some(vec![ResourcesUlimits {
                name: Some("core".to_string()),
                soft: Some(0),
                hard: Some(0),
            }]),
            mounts: Some(vec![Mount {
                typ: Some(MountType::BIND),
                source: Some(dir.guest_path().to_string_lossy().into_owned()),
                target: Some(GUEST_MOUNT.to_string()),
                read_only: Some(false),
                bind_options: Some(MountBindOptions {
                    propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".to_string()),
                config: Some(HashMap::from([
                    ("max-size".to_string(), "5m".to_string()),
                    ("max-file".to_string(), "2".to_string()),
                ])),
            }),
            auto_remove: Some(false),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            user: Some(guest_user()),
            env: Some(vec![
                format!("SANDTOP_SCREEN={}", req.screen),
                // Tells the guest's entry whether programs use the egress
                // proxy (the relay at 127.0.0.1:3128).
                format!(
                    "SANDTOP_EGRESS={}",
                    if req.network.mode.uses_proxy() {
                        "proxy"
                    } else {
                        "direct"
                    }
                ),
            ]),
            labels: Some(labels),
            tty: Some(false),
            open_stdin: Some(false),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            stop_signal: Some("SIGTERM".to_string()),
            stop_timeout: Some(i64::from(STOP_GRACE_SECS)),
            host_config: Some(host_config),
            ..Default::default()
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

    async fn start_inner(
        &self,
        dir: &SessionDir,
        req: &StartRequest,
        create_sent: &AtomicBool,
    ) -> anyhow::Result<SessionRecord> {
        let name = container_name(&req.name);
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        create_sent.store(true, Ordering::Release);
        let created = self
            .docker
            .create_container(Some(options), self.create_body(dir, req))
            .await
            .map_err(|e| {
                if is_status(&e, &[409]) {
                    anyhow::anyhow!(
                        "a container named {name} already exists (another state directory, or \
                         a leftover: `host-cli guest gc`)"
                    )
                } else {
                    anyhow::Error::from(e).context(format!("creating the container {name}"))
                }
            })?;
        for w in &created.warnings {
            tracing::warn!(container = %name, "docker: {w}");
        }
        let id = created.id;
        self.docker
            .start_container(&id, None)
            .await
            .with_context(|| format!("starting the container {name}"))?;
        self.wait_ready(dir, &id).await?;
        // The daemon read its token before it answered: the guest's copy
        // goes, so that nothing in the guest holds it (issue 12 item 1).
        // unlink(2) removes a link the guest put there, never its target.
        let copy = dir.guest_path().join("token");
        match std::fs::remove_file(&copy) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", copy.display())),
        }
        Ok(SessionRecord {
            network: None,
            egress_pid: None,
            name: req.name.clone(),
            backend: BackendKind::Docker,
            screen: req.screen,
            created_unix: now_unix(),
            local: None,
            docker: Some(DockerRecord {
                container_id: id,
                container_name: name,
                image: self.image.clone(),
            }),
            qemu: None,
        })
    }

    /// Waits until the daemon's health is `ok` over the channel (H3).
    async fn wait_ready(&self, dir: &SessionDir, id: &str) -> anyhow::Result<()> {
        let token = Secret::read(&dir.token_path())?;
        let begin = Instant::now();
        let end = begin + self.ready_timeout;
        let mut last;
        let mut round = 0u32;
        loop {
            round += 1;
            // The socket first; in auto mode exec joins in when the socket
            // does not show up on the host (Docker Desktop) or cannot be
            // opened, so that it does not cost an exec per round.
            let mode = match self.channel {
                ChannelMode::Auto
                    if begin.elapsed() < Duration::from_secs(3)
                        && !dir.guest_path().join(channel::SOCKET_NAME).exists() =>
                {
                    ChannelMode::Socket
                }
                m => m,
            };
            let connector = self.connector_with(mode, dir, id);
            let attempt = tokio::time::timeout(Duration::from_secs(3), async {
                let mut ch = Channel::open(Box::new(connector), token.clone()).await?;
                ch.health().await
            })
            .await;
            match attempt {
                Ok(Ok(h)) if super::ready(&h) => return Ok(()),
                Ok(Ok(h)) => {
                    last = format!(
                        "health {:?} (X connected: {}, window manager: {:?})",
                        h.status, h.x_connected, h.window_manager
                    )
                }
                Ok(Err(e)) => last = token.redact(&e.to_string()),
                Err(_) => last = "the health request timed out".to_string(),
            }
            if round.is_multiple_of(5) || Instant::now() >= end {
                let st = self
                    .docker
                    .inspect_container(id, None::<InspectContainerOptions>)
                    .await
                    .context("inspecting the container")?
                    .state;
                if st.as_ref().and_then(|s| s.running) != Some(true) {
                    let code = st.as_ref().and_then(|s| s.exit_code).unwrap_or(-1);
                    let oom = st.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
                    bail!(
                        "the guest exited (status {code}{}) before it was ready; its log ends with:\n{}",
                        if oom { ", killed for memory" } else { "" },
                        self.log_tail(id, LOG_TAIL_ON_FAILURE, &token).await
                    );
                }
            }
            if Instant::now() >= end {
                bail!(
                    "the guest did not become ready within {:?} (last: {last}); its log ends with:\n{}",
                    self.ready_timeout,
                    self.log_tail(id, LOG_TAIL_ON_FAILURE, &token).await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last `lines` of a container's log (stdout and stderr), with the
    /// token redacted and control characters removed.
    pub async fn log_tail(&self, id: &str, lines: &str, token: &Secret) -> String {
        match self.logs_text(id, lines).await {
            Ok(t) if t.trim().is_empty() => "  (empty)".to_string(),
            Ok(t) => token
                .redact(&t)
                .lines()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => format!("  (the log could not be read: {e:#})"),
        }
    }

    /// The container's whole log (up to 4 MiB), as `logs` reads it but
    /// without the tail limit: the exercise searches it for secrets.
    pub async fn all_logs(&self, id: &str) -> anyhow::Result<String> {
        self.logs_text(id, "all").await
    }

    async fn logs_text(&self, id: &str, tail: &str) -> anyhow::Result<String> {
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .follow(false)
            .tail(tail)
            .build();
        let mut stream = self.docker.logs(id, Some(options));
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            let item = item.context("reading the container log")?;
            out.extend_from_slice(item.as_ref());
            if out.len() > 4 * 1024 * 1024 {
                break;
            }
        }
        Ok(channel::sanitize(&out, usize::MAX))
    }

    /// Removes every container of this session that a start may have
    /// created (by label, so a container of another state directory with
    /// the same name is left alone).
    async fn remove_created(&self, dir: &SessionDir, session: &str, create_in_flight: bool) {
        // A create the engine had received when we gave up may land just
        // after the first look: look again briefly.
        let rounds = if create_in_flight { 4 } else { 1 };
        for i in 0..rounds {
            match self.containers_of(dir, session).await {
                Ok(ids) if ids.is_empty() && i + 1 < rounds => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok(ids) => {
                    for id in &ids {
                        let _ = self.remove(id).await;
                    }
                    if !ids.is_empty() || i + 1 == rounds {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!("cleaning up after a failed start: {e:#}");
                    return;
                }
            }
        }
    }

    async fn containers_of(&self, dir: &SessionDir, session: &str) -> anyhow::Result<Vec<String>> {
        let filters = HashMap::from([(
            "label",
            vec![
                format!("{LABEL_SESSION}={session}"),
                format!("{LABEL_SESSION_DIR}={}", dir.path.to_string_lossy()),
            ],
        )]);
        let list = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .context("listing containers")?;
        Ok(list.into_iter().filter_map(|c| c.id).collect())
    }

    /// Force-removes a container (a missing one is fine).
    pub async fn remove(&self, id: &str) -> anyhow::Result<()> {
        match self
            .docker
            .remove_container(
                id,
                Some(
                    RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, &[404]) => Ok(()),
            // 409: removal already in progress.
            Err(e) if is_status(&e, &[409]) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing container {id}")),
        }
    }

    /// Runs `argv` in a session's container as the guest user and collects
    /// its output (capped at 16 MiB each) and exit code. `stdin`, when
    /// given, is written and closed.
    pub async fn exec(
        &self,
        container: &str,
        argv: &[&str],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> anyhow::Result<ExecResult> {
        let user = format!("{GUEST_UID}:{GUEST_GID}");
        self.exec_as(container, &user, argv, stdin, timeout).await
    }

    /// [`DockerBackend::exec`] as another user (`uid:gid`). Root in the
    /// guest has no capabilities either (the container's bounding set is
    /// empty and no-new-privileges holds); the tests use it to walk
    /// folders the guest's uid cannot read.
    pub async fn exec_as(
        &self,
        container: &str,
        user: &str,
        argv: &[&str],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> anyhow::Result<ExecResult> {
        const CAP: usize = 16 * 1024 * 1024;
        let config = ExecConfig {
            attach_stdin: Some(stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            user: Some(user.to_string()),
            cmd: Some(argv.iter().map(|s| s.to_string()).collect()),
            privileged: Some(false),
            ..Default::default()
        };
        let what = argv.first().copied().unwrap_or("");
        let exec = self
            .docker
            .create_exec(container, config)
            .await
            .with_context(|| format!("docker exec {what}"))?;
        let run = async {
            let started = self
                .docker
                .start_exec(
                    &exec.id,
                    Some(StartExecOptions {
                        detach: false,
                        tty: false,
                        output_capacity: None,
                    }),
                )
                .await
                .with_context(|| format!("starting {what}"))?;
            let StartExecResults::Attached {
                mut output,
                mut input,
            } = started
            else {
                bail!("the exec started detached");
            };
            if let Some(bytes) = stdin {
                input
                    .write_all(bytes)
                    .await
                    .context("writing to the exec")?;
                input.shutdown().await.ok();
            }
            drop(input);
            let (mut out, mut err) = (Vec::new(), Vec::new());
            while let Some(item) = output.next().await {
                match item.context("reading the exec's output")? {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        if out.len() < CAP {
                            out.extend_from_slice(&message);
                        }
                    }
                    LogOutput::StdErr { message } => {
                        if err.len() < CAP {
                            err.extend_from_slice(&message);
                        }
                    }
                    LogOutput::StdIn { .. } => {}
                }
            }
            // The stream can end before the engine records the exit code.
            let mut code = None;
            for _ in 0..100 {
                let i = self.docker.inspect_exec(&exec.id).await?;
                if i.running != Some(true) {
                    code = i.exit_code;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(ExecResult {
                exit_code: code.unwrap_or(-1),
                stdout: out,
                stderr: err,
            })
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| anyhow::anyhow!("{what} did not finish within {timeout:?}"))?
    }

    /// One-shot memory and pids figures of a container.
    pub async fn memory_use(&self, container: &str) -> anyhow::Result<MemoryUse> {
        let mut s = self.docker.stats(
            container,
            Some(
                StatsOptionsBuilder::new()
                    .stream(false)
                    .one_shot(true)
                    .build(),
            ),
        );
        let st = s
            .next()
            .await
            .context("no stats from the engine")?
            .context("reading container stats")?;
        let m = st.memory_stats.unwrap_or_default();
        let usage = m.usage.unwrap_or(0);
        let stats = m.stats.unwrap_or_default();
        // cgroup v1: total_inactive_file; v2: inactive_file (docker stats'
        // own arithmetic).
        let inactive = stats
            .get("total_inactive_file")
            .or_else(|| stats.get("inactive_file"))
            .copied()
            .unwrap_or(0);
        Ok(MemoryUse {
            working_set_bytes: usage.saturating_sub(inactive),
            usage_bytes: usage,
            limit_bytes: m.limit.unwrap_or(0),
            pids: st.pids_stats.and_then(|p| p.current).unwrap_or(0),
        })
    }

    /// Removes orphaned session containers of this host and user (see
    /// [`not_ours`]; the others are reported and left alone): no
    /// session-folder label, the folder is gone (not found: a folder that
    /// cannot be read proves nothing), the folder has no record and the
    /// host-cli that created it died (pid and start time in `owner`), the
    /// record names another container, or the guest is no longer running.
    /// Folders are removed only inside `store` (a label names a path but
    /// is not trusted to delete one). Adds one line per removal, and per
    /// failure, to `report` (a failure does not stop the others).
    pub async fn gc_containers(
        &self,
        store: &Store,
        report: &mut super::GcReport,
    ) -> anyhow::Result<()> {
        let filters = HashMap::from([("label", vec![LABEL_SESSION.to_string()])]);
        let list = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .context("listing sandtop containers")?;
        let sessions_root = store.root().join("sessions");
        for c in list {
            let Some(id) = c.id.clone() else { continue };
            let labels = c.labels.clone().unwrap_or_default();
            let session = labels.get(LABEL_SESSION).cloned().unwrap_or_default();
            let running = c.state.as_ref().is_some_and(|s| s.to_string() == "running");
            let folder = labels.get(LABEL_SESSION_DIR).map(PathBuf::from);
            let short = id.chars().take(12).collect::<String>();
            // Labels of another user's container are that user's text.
            let shown = crate::term::safe(&session);
            if let Some(whose) = not_ours(&labels, folder.as_deref(), &sessions_root) {
                report.done(format!(
                    "left container {short} (session {shown}) alone: {whose}"
                ));
                continue;
            }
            let verdict = match &folder {
                None => Some("it has no session-folder label"),
                Some(f) => match std::fs::symlink_metadata(f) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Some("its session folder is gone")
                    }
                    Ok(m) if !m.is_dir() => Some("its session folder is gone"),
                    // Unreadable: nothing is proven, nothing is removed.
                    Err(e) => {
                        report.done(format!(
                            "left container {short} (session {shown}) alone: its session \
                             folder cannot be checked ({e})"
                        ));
                        continue;
                    }
                    Ok(_) => {
                        let dir = SessionDir {
                            name: session.clone(),
                            path: f.clone(),
                        };
                        match dir.load() {
                            Ok(rec) => match rec.docker {
                                Some(d) if d.container_id == id => {
                                    if running {
                                        None
                                    } else {
                                        Some("its guest is not running")
                                    }
                                }
                                _ => Some("its session belongs to another container"),
                            },
                            Err(_) if dir.owner_alive() => None,
                            Err(_) => Some("the host-cli that started it is gone"),
                        }
                    }
                },
            };
            let Some(why) = verdict else { continue };
            if let Err(e) = self.remove(&id).await {
                report.failed(format!(
                    "could not remove container {short} (session {shown}): {e:#}"
                ));
                continue;
            }
            report.done(format!(
                "removed container {short} (session {shown}): {why}"
            ));
            // Its folder too, when it is one of ours and not a live session
            // of another container.
            if let Some(f) = folder
                && f.parent() == Some(sessions_root.as_path())
                && f.is_dir()
            {
                let dir = SessionDir {
                    name: session.clone(),
                    path: f,
                };
                let other_live = dir
                    .load()
                    .ok()
                    .and_then(|r| r.docker)
                    .is_some_and(|d| d.container_id != id);
                if !other_live && !dir.owner_alive() {
                    match store.remove(&dir) {
                        Ok(()) => report.done(format!("removed session folder {shown}")),
                        Err(e) => {
                            report.failed(format!("could not remove session folder {shown}: {e:#}"))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a container exists and runs.
    pub async fn running(&self, id: &str) -> anyhow::Result<bool> {
        match self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => Ok(c.state.and_then(|s| s.running).unwrap_or(false)),
            Err(e) if is_status(&e, &[404]) => Ok(false),
            Err(e) => Err(e).context("inspecting the container"),
        }
    }
}

/// The size of the guest's folder, `/run/sandtop` (issue 12 item 2): it
/// holds a 64-byte token and two sockets.
pub const GUEST_FOLDER_BYTES: u64 = 1024 * 1024;
/// Its inodes (the folder itself, the token, the sockets, and room).
pub const GUEST_FOLDER_INODES: u64 = 64;

/// Mounts a tmpfs of [`GUEST_FOLDER_BYTES`] and [`GUEST_FOLDER_INODES`] on
/// `g`, `nosuid,nodev,noexec`, named `sandtop` (issue 12 item 2): what the
/// guest writes there is bounded and costs the host's disk nothing (its
/// pages are charged to the guest's memory cgroup, the writer), nothing
/// there can be executed, and the guest's `/proc/self/mountinfo` shows the
/// root of that tmpfs (`/`), not the host path of the session folder.
/// Root only; `session::Store::remove` unmounts it.
pub fn mount_guest_folder(g: &Path) -> anyhow::Result<()> {
    use rustix::mount::MountFlags;
    let data = std::ffi::CString::new(format!(
        "size={GUEST_FOLDER_BYTES},nr_inodes={GUEST_FOLDER_INODES},mode=0700"
    ))?;
    rustix::mount::mount(
        "sandtop",
        g,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        data.as_c_str(),
    )
    .with_context(|| format!("mounting a tmpfs on {}", g.display()))
}

/// Why a container is not this caller's to judge, or `None` when it is:
/// its owner labels must name this host and this user (root judges every
/// user's containers of this host: it can read their folders). A container
/// from before the owner labels is judged only when its session folder is
/// in this caller's store. Another host's or another user's live session on
/// a shared engine therefore never counts as orphaned because its folder
/// cannot be seen from here (issue 12 item 5).
pub fn not_ours(
    labels: &HashMap<String, String>,
    folder: Option<&Path>,
    sessions_root: &Path,
) -> Option<String> {
    let (Some(host), Some(uid)) = (labels.get(LABEL_OWNER_HOST), labels.get(LABEL_OWNER_UID))
    else {
        return match folder {
            Some(f) if f.parent() == Some(sessions_root) => None,
            _ => {
                Some("it has no owner labels and its folder is not in this state directory".into())
            }
        };
    };
    if *host != host_id() {
        return Some(format!(
            "it belongs to another host ({})",
            crate::term::safe(host)
        ));
    }
    let me = rustix::process::geteuid();
    if !me.is_root() && *uid != me.as_raw().to_string() {
        return Some(format!("it belongs to uid {}", crate::term::safe(uid)));
    }
    None
}

/// Creates the session's `guest/` folder with a copy of the token, owned
/// so that the guest's uid can use it (see the module docs). As root the
/// folder is a tmpfs of its own ([`mount_guest_folder`]); as another user
/// it is a plain directory (no size cap, exec allowed, its host path
/// visible to the guest: docs/security.md F3 says so).
pub fn prepare_guest_dir(dir: &SessionDir) -> anyhow::Result<PathBuf> {
    use rustix::fs::{Gid, Uid};
    let meta =
        std::fs::metadata(&dir.path).with_context(|| format!("reading {}", dir.path.display()))?;
    let euid = rustix::process::geteuid();
    if meta.mode() & 0o077 != 0 || meta.uid() != euid.as_raw() {
        bail!(
            "the session folder {} must be private (0700) and yours",
            dir.path.display()
        );
    }
    let g = dir.guest_path();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&g)
        .with_context(|| format!("creating {}", g.display()))?;
    if euid.is_root() {
        mount_guest_folder(&g)?;
    } else {
        tracing::warn!(
            "host-cli is not root: the guest's folder {} is a plain directory, without a size \
             cap or noexec (docs/security.md F3)",
            g.display()
        );
    }
    let token = Secret::read(&dir.token_path())?;
    let token_path = g.join("token");
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_path)
            .with_context(|| format!("creating {}", token_path.display()))?;
        f.write_all(token.expose().as_bytes())?;
        f.sync_all()?;
    }
    let set_mode = |p: &Path, m: u32| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
            .with_context(|| format!("chmod {}", p.display()))
    };
    if euid.is_root() {
        let (u, gid) = (Uid::from_raw(GUEST_UID), Gid::from_raw(GUEST_GID));
        rustix::fs::chown(&g, Some(u), Some(gid))
            .with_context(|| format!("chown {} to the guest user", g.display()))?;
        rustix::fs::chown(&token_path, Some(u), Some(gid))
            .with_context(|| format!("chown {}", token_path.display()))?;
        set_mode(&token_path, 0o400)?;
    } else if euid.as_raw() != GUEST_UID {
        // Not root and not the guest's uid: open the folder to "others";
        // the 0700 folders above it keep other host users out.
        set_mode(&g, 0o777)?;
        set_mode(&token_path, 0o644)?;
    }
    Ok(g)
}

/// Runs `f` until it finishes or Ctrl-C / SIGTERM / SIGHUP arrives (then
/// `Err(signal name)`; `f` is dropped).
pub async fn until_interrupted<F: Future>(f: F) -> Result<F::Output, &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return Ok(f.await);
    };
    tokio::select! {
        r = f => Ok(r),
        _ = int.recv() => Err("Ctrl-C"),
        _ = term.recv() => Err("SIGTERM"),
        _ = hup.recv() => Err("SIGHUP"),
    }
}

impl Backend for DockerBackend {
    async fn start(&self, dir: &SessionDir, req: &StartRequest) -> anyhow::Result<SessionRecord> {
        check_guest_ids_unused()?;
        self.image_info().await?;
        prepare_guest_dir(dir)?;
        let create_sent = Arc::new(AtomicBool::new(false));
        let outcome = until_interrupted(self.start_inner(dir, req, &create_sent)).await;
        let sent = create_sent.load(Ordering::Acquire);
        match outcome {
            Ok(Ok(rec)) => Ok(rec),
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
                bail!("interrupted by {signal}: the guest was removed")
            }
        }
    }

    async fn stop(&self, _dir: &SessionDir, rec: &SessionRecord) -> anyhow::Result<()> {
        let d = rec
            .docker
            .as_ref()
            .context("the session record has no container")?;
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

    async fn connector(
        &self,
        dir: &SessionDir,
        rec: &SessionRecord,
    ) -> anyhow::Result<Box<dyn Connect>> {
        let d = rec
            .docker
            .as_ref()
            .context("the session record has no container")?;
        Ok(Box::new(self.connector_for(dir, &d.container_id)))
    }

    async fn alive(&self, _dir: &SessionDir, rec: &SessionRecord) -> bool {
        match &rec.docker {
            Some(d) => self.running(&d.container_id).await.unwrap_or(false),
            None => false,
        }
    }

    async fn logs(&self, dir: &SessionDir, rec: &SessionRecord) -> anyhow::Result<String> {
        let d = rec
            .docker
            .as_ref()
            .context("the session record has no container")?;
        let token = Secret::read(&dir.token_path()).unwrap_or_else(|_| Secret::new(String::new()));
        let text = self.logs_text(&d.container_id, "200").await?;
        Ok(token.redact(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::Size;

    #[test]
    fn sizes_and_cpus() {
        assert_eq!(parse_bytes("512m").unwrap(), 512 * MIB);
        assert_eq!(parse_bytes("2g").unwrap(), 2048 * MIB);
        assert_eq!(parse_bytes("2GB").unwrap(), 2048 * MIB);
        assert_eq!(parse_bytes("1.5g").unwrap(), 1536 * MIB);
        assert!(parse_bytes("1k").is_err(), "below the floor");
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("-1g").is_err());
        assert_eq!(parse_cpus("1.5").unwrap(), 1_500_000_000);
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("NaN").is_err());
    }

    /// The create body, as JSON the engine receives, holds the hardening.
    #[tokio::test]
    async fn create_body_is_hardened() {
        // Never contacted: the body is only built and serialized.
        let docker =
            Docker::connect_with_http("http://127.0.0.1:9", 1, bollard::API_DEFAULT_VERSION)
                .unwrap();
        let b = DockerBackend {
            docker,
            image: "img:test".into(),
            limits: Limits::default(),
            channel: ChannelMode::Auto,
            ready_timeout: READY_TIMEOUT,
        };
        let dir = SessionDir {
            name: "abc".into(),
            path: PathBuf::from("/state/sessions/abc"),
        };
        let req = StartRequest {
            name: "abc".into(),
            screen: Size::new(1024, 768),
            network: crate::egress::service::EgressConfig::none(),
        };
        let v = serde_json::to_value(b.create_body(&dir, &req)).unwrap();
        let h = &v["HostConfig"];
        assert_eq!(v["Image"], "img:test");
        assert_eq!(v["User"], "2000000000:2000000000");
        // Nothing of the host's environment, no secret: only these two.
        assert_eq!(
            v["Env"],
            serde_json::json!(["SANDTOP_SCREEN=1024x768", "SANDTOP_EGRESS=direct"])
        );
        assert_eq!(h["NetworkMode"], "none");
        let mut open = req.clone();
        open.network.mode = crate::egress::policy::NetworkMode::Open;
        let o = serde_json::to_value(b.create_body(&dir, &open)).unwrap();
        assert_eq!(o["HostConfig"]["NetworkMode"], "bridge");
        let mut allow = req.clone();
        allow.network.mode = "allow:https://a.test".parse().unwrap();
        let a = serde_json::to_value(b.create_body(&dir, &allow)).unwrap();
        assert_eq!(
            a["HostConfig"]["NetworkMode"], "none",
            "allow keeps the guest off every network"
        );
        assert_eq!(a["Env"][1], "SANDTOP_EGRESS=proxy");
        assert_eq!(v["Labels"]["sandtop.session"], "abc");
        assert_eq!(v["Labels"]["sandtop.session-dir"], "/state/sessions/abc");
        assert_eq!(v["Labels"]["sandtop.owner-host"], host_id());
        assert_eq!(
            v["Labels"]["sandtop.owner-uid"],
            rustix::process::geteuid().as_raw().to_string()
        );
        assert_eq!(h["CapDrop"], serde_json::json!(["ALL"]));
        assert!(h.get("CapAdd").is_none() || h["CapAdd"].is_null());
        assert_eq!(
            h["SecurityOpt"],
            serde_json::json!(["no-new-privileges:true"])
        );
        assert_eq!(h["ReadonlyRootfs"], true);
        assert_eq!(h["Privileged"], false);
        assert_eq!(h["NetworkMode"], "none");
        assert_eq!(h["Memory"], h["MemorySwap"]);
        assert!(h["PidsLimit"].as_i64().unwrap() > 0);
        assert!(h["NanoCpus"].as_i64().unwrap() > 0);
        assert!(h["ShmSize"].as_i64().unwrap() > 0);
        assert_eq!(h["Devices"], serde_json::json!([]));
        assert!(h.get("PortBindings").is_none() || h["PortBindings"].is_null());
        for (path, opts) in h["Tmpfs"].as_object().unwrap() {
            let opts = opts.as_str().unwrap();
            for want in ["nosuid", "nodev", "noexec", "size="] {
                assert!(opts.contains(want), "{path}: {opts}");
            }
        }
        let mounts = h["Mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0]["Source"], "/state/sessions/abc/guest");
        assert_eq!(mounts[0]["Target"], "/run/sandtop");
        let text = v.to_string();
        assert!(!text.contains("seccomp"), "{text}");
        assert!(!text.contains("OPENAI"), "{text}");
    }

    /// The guest's ids are the ones Dockerfile.guest creates and runs as.
    #[test]
    fn the_image_creates_the_guest_user_with_these_ids() {
        let df = include_str!("../../../Dockerfile.guest");
        assert!(df.contains(&format!("\nUSER {GUEST_UID}:{GUEST_GID}\n")));
        assert!(df.contains(&format!("groupadd --gid {GUEST_GID} user")));
        assert!(df.contains(&format!("useradd --uid {GUEST_UID} --gid {GUEST_GID} ")));
        assert!(df.contains(&format!(
            "install -d -o {GUEST_UID} -g {GUEST_GID} -m 0700 /run/sandtop"
        )));
        const { assert!(GUEST_UID > 1_879_048_191 && GUEST_UID < 1 << 31) };
    }

    /// `guest start` refuses a host where an account, a group or a
    /// subordinate range holds the guest's ids; an ordinary host passes.
    #[test]
    fn a_host_account_with_the_guests_ids_is_refused() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n";
        let group = "root:x:0:\nalice:x:1000:\n";
        let subuid = "alice:100000:65536\n";
        assert_eq!(host_id_clash(passwd, group, subuid, subuid), None);
        assert_eq!(host_id_clash("", "", "", ""), None);
        let clash = host_id_clash(
            &format!("{passwd}guest:x:{GUEST_UID}:5::/:/bin/sh\n"),
            group,
            "",
            "",
        )
        .unwrap();
        assert!(clash.contains("`guest` has uid 2000000000"), "{clash}");
        let clash = host_id_clash(passwd, &format!("{group}g:x:{GUEST_GID}:\n"), "", "").unwrap();
        assert!(clash.contains("group `g`"), "{clash}");
        // A range that ends just before the uid does not clash; one that
        // holds it does, for uids and gids alike.
        let below = format!("bob:{}:1000\n", GUEST_UID - 1000);
        assert_eq!(host_id_clash(passwd, group, &below, &below), None);
        let holds = format!("bob:{}:1001\n", GUEST_UID - 1000);
        assert!(
            host_id_clash(passwd, group, &holds, "")
                .unwrap()
                .contains("/etc/subuid")
        );
        assert!(
            host_id_clash(passwd, group, "", &holds)
                .unwrap()
                .contains("/etc/subgid")
        );
        // This host (the tests run on it) passes.
        check_guest_ids_unused().unwrap();
    }

    /// gc judges only containers of this host and this user (root: of
    /// every user of this host); one from before the owner labels only
    /// when its folder is in this state directory.
    #[test]
    fn gc_judges_only_containers_of_this_host_and_user() {
        let root = Path::new("/state/sessions");
        let folder = root.join("a");
        let mine = session_labels("a", &folder);
        assert!(host_id().starts_with("machine-id:") || host_id().starts_with("hostname:"));
        assert_eq!(not_ours(&mine, Some(&folder), root), None);
        let elsewhere = Path::new("/elsewhere/sessions/a");
        assert_eq!(not_ours(&mine, Some(elsewhere), root), None);
        let mut host = mine.clone();
        host.insert(LABEL_OWNER_HOST.into(), "machine-id:0123".into());
        let why = not_ours(&host, Some(&folder), root).unwrap();
        assert!(why.contains("another host (machine-id:0123)"), "{why}");
        let mut user = mine.clone();
        let other = rustix::process::geteuid().as_raw() + 1;
        user.insert(LABEL_OWNER_UID.into(), other.to_string());
        let why = not_ours(&user, Some(&folder), root);
        if rustix::process::geteuid().is_root() {
            assert_eq!(why, None, "root judges every user's containers");
        } else {
            assert!(why.unwrap().contains(&format!("uid {other}")));
        }
        let mut legacy = mine.clone();
        legacy.remove(LABEL_OWNER_HOST);
        legacy.remove(LABEL_OWNER_UID);
        assert_eq!(not_ours(&legacy, Some(&folder), root), None);
        assert!(not_ours(&legacy, Some(elsewhere), root).is_some());
        assert!(not_ours(&legacy, None, root).is_some());
    }
}
