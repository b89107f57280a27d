//! The options that say how a guest is booted, shared by every command
//! that boots one (`guest start`, `run`, `exercise`, `bench`, `doctor`):
//! the image, the limits, how long to wait. They live with the backends
//! that read them, not with the command line.

use std::time::Duration;

use clap::Args;

use super::StartRequest;
use super::docker::{self, DockerBackend};
use super::limits::Limits;
use super::qemu::QemuBackend;
use crate::session::{BackendKind, SessionDir, SessionRecord, Store};
use sandtop_hostkit::units;

/// How a guest is booted.
#[derive(Debug, Clone, Args)]
pub struct GuestArgs {
    /// The guest image (docker backend).
    #[arg(long, env = docker::IMAGE_ENV, default_value = docker::DEFAULT_IMAGE)]
    pub image: String,
    /// Memory limit (a VM's memory size); swap is set equal (no swap).
    /// E.g. 2g, 768m.
    #[arg(long, default_value = "2g", value_parser = units::parse_bytes)]
    pub memory: i64,
    /// CPU limit, in CPUs (a VM gets the whole CPUs of it, at least one).
    #[arg(long, default_value = "2", value_parser = units::parse_cpus)]
    pub cpus: i64,
    /// Process/thread limit (docker backend).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(i64).range(64..=65536))]
    pub pids: i64,
    /// How long to wait for the guest's daemon to be ready, e.g. 30s or 2m
    /// (default: 30s for a container, 60s for a VM, 4m for a VM under TCG).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = units::duration_or_seconds_between(Duration::ZERO, Duration::from_secs(3600))
    )]
    pub ready_timeout: Option<Duration>,
}

impl Default for GuestArgs {
    fn default() -> GuestArgs {
        let l = Limits::default();
        GuestArgs {
            image: docker::DEFAULT_IMAGE.to_string(),
            memory: l.memory_bytes,
            cpus: l.nano_cpus,
            pids: l.pids,
            ready_timeout: None,
        }
    }
}

impl GuestArgs {
    /// The limits these options give.
    pub fn limits(&self) -> Limits {
        Limits {
            memory_bytes: self.memory,
            pids: self.pids,
            nano_cpus: self.cpus,
            ..Limits::default()
        }
    }

    /// A Docker backend configured by these options.
    pub async fn docker(&self) -> super::Result<DockerBackend> {
        let b = DockerBackend::connect()
            .await?
            .with_image(self.image.clone())
            .with_limits(self.limits());
        Ok(match self.ready_timeout {
            Some(t) => b.with_ready_timeout(t),
            None => b,
        })
    }

    /// A QEMU backend configured by these options.
    pub fn qemu(&self) -> super::Result<QemuBackend> {
        Ok(QemuBackend::new()?
            .with_limits(&self.limits())
            .with_ready_timeout(self.ready_timeout))
    }
}

/// The options a guest was booted with, as a session keeps them
/// (`start.json` in its folder) so that `guest reset` boots the same
/// configuration again, and as a pool compares a claim's wishes with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartConfig {
    pub image: String,
    pub memory: i64,
    pub cpus: i64,
    pub pids: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_timeout_ms: Option<u64>,
}

/// The file in a session folder holding its [`StartConfig`].
pub const START_CONFIG_FILE: &str = "start.json";

impl GuestArgs {
    /// These options as a session keeps them.
    pub fn config(&self) -> StartConfig {
        StartConfig {
            image: self.image.clone(),
            memory: self.memory,
            cpus: self.cpus,
            pids: self.pids,
            ready_timeout_ms: self
                .ready_timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// The options a session kept.
    pub fn from_config(c: &StartConfig) -> GuestArgs {
        GuestArgs {
            image: c.image.clone(),
            memory: c.memory,
            cpus: c.cpus,
            pids: c.pids,
            ready_timeout: c.ready_timeout_ms.map(Duration::from_millis),
        }
    }
}

/// Writes a session's [`StartConfig`] (`start.json`, host-only: the
/// session folder, never `guest/`).
pub fn save_config(dir: &SessionDir, c: &StartConfig) -> super::Result<()> {
    let path = dir.path.join(START_CONFIG_FILE);
    // A StartConfig always serialises (plain fields).
    let bytes = serde_json::to_vec_pretty(c).unwrap_or_default();
    std::fs::write(&path, bytes).map_err(super::GuestError::io("writing start.json"))
}

/// A session's [`StartConfig`], when it kept one (sessions started
/// before `guest reset` existed did not).
pub fn load_config(dir: &SessionDir) -> Option<StartConfig> {
    let bytes = std::fs::read(dir.path.join(START_CONFIG_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Boots a session on `backend` with these options and keeps them in its
/// folder ([`save_config`]). `labels` are added to a Docker guest's
/// container (a pool's `sandtop.pool`); `pool_marker`, when given, is
/// written into the folder before the guest starts
/// ([`crate::session::pool_member`]).
pub async fn start_configured(
    store: &Store,
    backend: BackendKind,
    args: &GuestArgs,
    req: &StartRequest,
    labels: &[(String, String)],
    pool_marker: Option<&str>,
) -> super::Result<SessionRecord> {
    let rec = match backend {
        BackendKind::Docker => {
            let mut b = args.docker().await?;
            for (k, v) in labels {
                b = b.with_label(k, v);
            }
            super::start_marked(store, &b, req, pool_marker).await?
        }
        BackendKind::Local => {
            super::start_marked(store, &super::local::LocalBackend, req, pool_marker).await?
        }
        BackendKind::Qemu => super::start_marked(store, &args.qemu()?, req, pool_marker).await?,
    };
    let dir = store.get(&rec.name)?;
    if let Err(e) = save_config(&dir, &args.config()) {
        tracing::warn!("session {}: {}", rec.name, e.chain());
    }
    Ok(rec)
}
