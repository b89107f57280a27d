//! The options that say how a guest is booted, shared by every command
//! that boots one (`guest start`, `run`, `exercise`, `bench`, `doctor`):
//! the image, the limits, how long to wait. They live with the backends
//! that read them, not with the command line.

use std::time::Duration;

use clap::Args;

use super::docker::{self, DockerBackend};
use super::limits::Limits;
use super::qemu::QemuBackend;
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
