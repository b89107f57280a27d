//! A Docker guest's lifecycle: create and start, wait until its daemon is
//! ready, read its log, remove it (and whatever a failed start created).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use sandtop_protocol::session;

use super::channel::{self, ChannelMode};
use super::{
    DockerBackend, LABEL_SESSION, LABEL_SESSION_DIR, LOG_TAIL_ON_FAILURE, container_name, is_status,
};
use crate::session::guest_folder::GuestFolder;
use crate::session::{BackendRecord, DockerRecord, SessionDir, SessionRecord, now_unix};
use crate::{GuestError, Result, StartRequest};
use sandtop_channel::Channel;
use sandtop_hostkit::secret::Secret;

/// Between two looks at a starting guest's health: a guest is ready
/// ~0.5 s after it was created, and each look costs a connect and one
/// request, so a short pause (readiness seen at most this late).
const READY_POLL: Duration = Duration::from_millis(10);
/// Every this many looks, whether the container still runs (~0.25 s).
const READY_INSPECT_EVERY: u32 = 25;

impl DockerBackend {
    pub(super) async fn start_inner(
        &self,
        dir: &SessionDir,
        req: &StartRequest,
        create_sent: &AtomicBool,
    ) -> Result<SessionRecord> {
        let name = container_name(&req.name);
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        create_sent.store(true, Ordering::Release);
        let created = self
            .docker
            .create_container(Some(options), self.create_body(dir, req))
            .await
            .map_err(|e| {
                if is_status(&e, &[409]) {
                    GuestError::NameTaken { name: name.clone() }
                } else {
                    GuestError::docker(format!("creating the container {name}"))(e)
                }
            })?;
        for w in &created.warnings {
            tracing::warn!(container = %name, "docker: {w}");
        }
        let id = created.id;
        self.docker
            .start_container(&id, None)
            .await
            .map_err(GuestError::docker(format!("starting the container {name}")))?;
        self.wait_ready(dir, &id).await?;
        // The daemon read its token before it answered: the guest's copy
        // goes, so that nothing in the guest holds it (docs/security.md C12).
        // unlink(2) removes a link the guest put there, never its target.
        let copy = dir.guest_path().join(session::TOKEN_NAME);
        if GuestFolder::for_this_process() == GuestFolder::EngineTmpfs {
            // The guest sees this very file through its single-file bind,
            // which an unlink does not end: emptied first. `guest/` is
            // this user's alone here, so no link of the guest's is in the
            // way (O_NOFOLLOW all the same).
            use std::os::unix::fs::OpenOptionsExt as _;
            let emptied = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&copy)
                .and_then(|f| f.set_len(0));
            match emptied {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(GuestError::io(format!("emptying {}", copy.display()))(e)),
            }
        }
        match std::fs::remove_file(&copy) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(GuestError::io(format!("removing {}", copy.display()))(e)),
        }
        Ok(SessionRecord {
            network: None,
            egress_pid: None,
            name: req.name.clone(),
            screen: req.screen,
            created_unix: now_unix(),
            guest: BackendRecord::Docker(DockerRecord {
                container_id: id,
                container_name: name,
                image: self.image.clone(),
            }),
        })
    }

    /// Waits until the daemon's health is `ok` over the channel (H3).
    async fn wait_ready(&self, dir: &SessionDir, id: &str) -> Result<()> {
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
                // The engine's layout keeps the daemon's socket in the
                // guest: exec at once.
                ChannelMode::Auto
                    if GuestFolder::for_this_process() == GuestFolder::EngineTmpfs =>
                {
                    ChannelMode::Exec
                }
                ChannelMode::Auto
                    if begin.elapsed() < Duration::from_secs(3)
                        && !dir.guest_path().join(session::SOCKET_NAME).exists() =>
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
                Ok(Ok(h)) if crate::ready(&h) => return Ok(()),
                Ok(Ok(h)) => {
                    last = format!(
                        "health {:?} (X connected: {}, window manager: {:?})",
                        h.status, h.x_connected, h.window_manager
                    )
                }
                Ok(Err(e)) => last = token.redact(&e.to_string()),
                Err(_) => last = "the health request timed out".to_string(),
            }
            if round.is_multiple_of(READY_INSPECT_EVERY) || Instant::now() >= end {
                let st = self
                    .docker
                    .inspect_container(id, None::<InspectContainerOptions>)
                    .await
                    .map_err(GuestError::docker("inspecting the container"))?
                    .state;
                if st.as_ref().and_then(|s| s.running) != Some(true) {
                    let code = st.as_ref().and_then(|s| s.exit_code).unwrap_or(-1);
                    let oom = st.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
                    return Err(GuestError::ExitedEarly {
                        code,
                        oom,
                        log: self.log_tail(id, LOG_TAIL_ON_FAILURE, &token).await,
                    });
                }
            }
            if Instant::now() >= end {
                return Err(GuestError::NotReady {
                    kind: "guest",
                    waited: self.ready_timeout,
                    last: Some(last),
                    log: self.log_tail(id, LOG_TAIL_ON_FAILURE, &token).await,
                });
            }
            tokio::time::sleep(READY_POLL).await;
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
            Err(e) => format!("  (the log could not be read: {})", e.chain()),
        }
    }

    /// The container's whole log (up to 4 MiB), as `logs` reads it but
    /// without the tail limit: the exercise searches it for secrets.
    pub async fn all_logs(&self, id: &str) -> Result<String> {
        self.logs_text(id, "all").await
    }

    pub(super) async fn logs_text(&self, id: &str, tail: &str) -> Result<String> {
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .follow(false)
            .tail(tail)
            .build();
        let mut stream = self.docker.logs(id, Some(options));
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            let item = item.map_err(GuestError::docker("reading the container log"))?;
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
    pub(super) async fn remove_created(
        &self,
        dir: &SessionDir,
        session: &str,
        create_in_flight: bool,
    ) {
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
                    tracing::warn!("cleaning up after a failed start: {}", e.chain());
                    return;
                }
            }
        }
    }

    async fn containers_of(&self, dir: &SessionDir, session: &str) -> Result<Vec<String>> {
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
            .map_err(GuestError::docker("listing containers"))?;
        Ok(list.into_iter().filter_map(|c| c.id).collect())
    }

    /// Force-removes a container (a missing one is fine).
    pub async fn remove(&self, id: &str) -> Result<()> {
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
            Err(e) => Err(GuestError::docker(format!("removing container {id}"))(e)),
        }
    }

    /// Whether a container exists and runs.
    pub async fn running(&self, id: &str) -> Result<bool> {
        match self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => Ok(c.state.and_then(|s| s.running).unwrap_or(false)),
            Err(e) if is_status(&e, &[404]) => Ok(false),
            Err(e) => Err(GuestError::docker("inspecting the container")(e)),
        }
    }
}
