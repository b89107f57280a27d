//! Removing what a guest wrote on the host when this user cannot (docs/security.md
//! F4): a session folder made by a host-cli from before the engine's
//! tmpfs layout ([`GuestFolder::EngineTmpfs`](crate::session::guest_folder::GuestFolder))
//! and run as a user who is not root had its `guest/` folder open to the
//! guest, which may have left there files and folders of its uid that
//! this user can neither remove nor change. A throwaway container of the
//! guest image, as the guest's uid, with no network, no capabilities, a
//! read-only root and only that folder bound, empties it; the caller then
//! removes the rest as usual.

use std::path::Path;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountType,
};
use bollard::query_parameters::{CreateContainerOptionsBuilder, WaitContainerOptionsBuilder};
use futures_util::StreamExt as _;

use super::DockerBackend;
use crate::ids::guest_user;
use crate::{GuestError, Result};

/// Where the folder is bound in the throwaway container.
const TARGET: &str = "/sweep";
/// How long the throwaway container may take.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The throwaway container's command: every entry of the folder made
/// writable by its owner (the guest's uid: a 0500 folder of the guest's
/// stops `rm` otherwise), then removed. Links are never followed (`chmod
/// -R` leaves them, `find -delete` removes the link); inside the container
/// a link could only lead into the container's own files anyway.
const SCRIPT: &str = "chmod -R u+rwx /sweep 2>/dev/null; find /sweep -mindepth 1 -delete";

impl DockerBackend {
    /// Empties `folder` (a real folder, never a link) as the guest's uid
    /// through a throwaway container of this backend's image (see the
    /// module docs); the container is removed whatever happens.
    pub async fn empty_as_guest(&self, folder: &Path, session: &str) -> Result<()> {
        let meta = std::fs::symlink_metadata(folder)
            .map_err(GuestError::io(format!("reading {}", folder.display())))?;
        if !meta.is_dir() {
            return Err(GuestError::io(format!("emptying {}", folder.display()))(
                std::io::Error::other("not a folder"),
            ));
        }
        let body = ContainerCreateBody {
            image: Some(self.image.clone()),
            user: Some(guest_user()),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), SCRIPT.into()]),
            cmd: Some(Vec::new()),
            env: Some(Vec::new()),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges:true".into()]),
                readonly_rootfs: Some(true),
                privileged: Some(false),
                memory: Some(64 * 1024 * 1024),
                pids_limit: Some(32),
                mounts: Some(vec![Mount {
                    typ: Some(MountType::BIND),
                    source: Some(folder.to_string_lossy().into_owned()),
                    target: Some(TARGET.into()),
                    read_only: Some(false),
                    bind_options: Some(MountBindOptions {
                        propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                auto_remove: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = format!(
            "sandtop-sweep-{}-{}",
            session
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .take(40)
                .collect::<String>(),
            std::process::id()
        );
        let id = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(GuestError::docker(format!("creating the container {name}")))?
            .id;
        let ran = tokio::time::timeout(SWEEP_TIMEOUT, async {
            self.docker
                .start_container(&id, None)
                .await
                .map_err(GuestError::docker(format!("starting the container {name}")))?;
            let mut wait = self.docker.wait_container(
                &id,
                Some(
                    WaitContainerOptionsBuilder::new()
                        .condition("not-running")
                        .build(),
                ),
            );
            // A non-zero exit comes as an error; `find` failing on one
            // entry is judged by what is left, below.
            let _ = wait.next().await;
            Ok::<(), GuestError>(())
        })
        .await;
        let removed = self.remove(&id).await;
        match ran {
            Ok(r) => r?,
            Err(_) => {
                return Err(GuestError::io(format!("emptying {}", folder.display()))(
                    std::io::Error::other(format!(
                        "the container {name} did not finish within {SWEEP_TIMEOUT:?}"
                    )),
                ));
            }
        }
        removed
    }
}
