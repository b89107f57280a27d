//! Commands in a Docker guest through the engine's exec API (argv lists,
//! never a shell), and a container's memory figures. Host-side tooling
//! only: the exercise reads the apps' records with [`DockerBackend::exec`],
//! `bench` reads [`DockerBackend::memory_use`]; nothing of the model's
//! output ever reaches an exec.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::StatsOptionsBuilder;
use futures_util::StreamExt as _;
use serde::Serialize;
use tokio::io::AsyncWriteExt as _;

use super::DockerBackend;
use crate::ids::guest_user;
use crate::{GuestError, Result};

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

impl DockerBackend {
    /// Runs `argv` in a session's container as the guest user and collects
    /// its output (capped at 16 MiB each) and exit code. `stdin`, when
    /// given, is written and closed.
    pub async fn exec(
        &self,
        container: &str,
        argv: &[&str],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<ExecResult> {
        self.exec_as(container, &guest_user(), argv, stdin, timeout)
            .await
    }

    /// Starts `argv` in a session's container as the guest user, detached
    /// (nothing attached, not waited for), with `env` added to the
    /// image's environment: how a batch task's setup launches a program
    /// on the guest's display. Argv only, never a shell.
    pub async fn exec_detached(&self, container: &str, argv: &[&str], env: &[&str]) -> Result<()> {
        let config = ExecConfig {
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            tty: Some(false),
            user: Some(guest_user()),
            cmd: Some(argv.iter().map(|s| s.to_string()).collect()),
            env: Some(env.iter().map(|s| s.to_string()).collect()),
            privileged: Some(false),
            ..Default::default()
        };
        let what = argv.first().copied().unwrap_or("");
        let exec = self
            .docker
            .create_exec(container, config)
            .await
            .map_err(GuestError::docker(format!("docker exec {what}")))?;
        self.docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: true,
                    tty: false,
                    output_capacity: None,
                }),
            )
            .await
            .map_err(GuestError::docker(format!("starting {what}")))?;
        Ok(())
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
    ) -> Result<ExecResult> {
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
            .map_err(GuestError::docker(format!("docker exec {what}")))?;
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
                .map_err(GuestError::docker(format!("starting {what}")))?;
            let StartExecResults::Attached {
                mut output,
                mut input,
            } = started
            else {
                return Err(GuestError::Unexpected {
                    what: format!("starting {what}"),
                    detail: "the exec started detached",
                });
            };
            if let Some(bytes) = stdin {
                input
                    .write_all(bytes)
                    .await
                    .map_err(GuestError::io(format!("writing to {what}")))?;
                input.shutdown().await.ok();
            }
            drop(input);
            let (mut out, mut err) = (Vec::new(), Vec::new());
            while let Some(item) = output.next().await {
                match item.map_err(GuestError::docker(format!("reading the output of {what}")))? {
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
                let i = self
                    .docker
                    .inspect_exec(&exec.id)
                    .await
                    .map_err(GuestError::docker(format!("inspecting {what}")))?;
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
            .map_err(|_| GuestError::Timeout {
                what: what.to_string(),
                after: timeout,
            })?
    }

    /// One-shot memory and pids figures of a container.
    pub async fn memory_use(&self, container: &str) -> Result<MemoryUse> {
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
            .ok_or_else(|| GuestError::Unexpected {
                what: "reading container stats".into(),
                detail: "the engine sent none",
            })?
            .map_err(GuestError::docker("reading container stats"))?;
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
}
