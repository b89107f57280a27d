//! A warm pool of guests (docs/contract.md rules 71-75).
//!
//! `host-cli pool start` runs a [`supervisor`] that keeps `size` guests of
//! one [`PoolConfig`] ready and starts a replacement for each one claimed
//! or lost. Its guests are ordinary sessions named `pool-XXXXXXXX`, each
//! marked as the pool's (`session::pool_member`: the folder's name and the
//! supervisor's pid, start time and PID namespace) and, for Docker, its
//! container labelled `sandtop.pool=POOL_FOLDER`. A claim ([`client`])
//! asks the supervisor over its control socket (`STATE/pool/control.sock`,
//! 0600 in a 0700 folder, the peer's uid checked) for a ready guest under
//! the claimer's name; the supervisor renames the guest's session folder
//! to that name (`renameat2` with `RENAME_NOREPLACE`, [`transfer`]) while
//! it holds its state's lock, so one guest is handed out once, even
//! without the lock: a folder renamed away cannot be renamed again. From
//! then on it is an ordinary session of the claimer: never returned to
//! the pool, removed after use like any other.
//!
//! When the supervisor is killed, its unclaimed guests keep a mark whose
//! supervisor is gone: `guest gc` removes them (and the next `pool start`
//! does too); a guest that was starting has no record and a dead owner,
//! which gc already removes.

pub mod acquire;
pub mod client;
pub mod command;
pub mod supervisor;
pub mod transfer;
pub mod wire;

use std::path::PathBuf;

use sandtop_egress::service::EgressConfig;
use sandtop_guest::GuestError;
use sandtop_guest::options::StartConfig;
use sandtop_guest::session::{BackendKind, Store};
use sandtop_protocol::Size;
use serde::{Deserialize, Serialize};

/// The most guests one pool keeps.
pub const MAX_SIZE: usize = 64;

/// Where a state directory's pool lives: `STATE/pool/` (0700).
#[derive(Debug, Clone)]
pub struct PoolPaths {
    pub dir: PathBuf,
}

impl PoolPaths {
    pub fn of(store: &Store) -> PoolPaths {
        PoolPaths {
            dir: store.root().join("pool"),
        }
    }
    /// The supervisor's control socket (0600).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("control.sock")
    }
    /// Held (flock) by the running supervisor: one per state directory.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    /// A detached supervisor's log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("pool.log")
    }
}

/// What a pool keeps ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub backend: BackendKind,
    pub screen: Size,
    pub guest: StartConfig,
    pub network: EgressConfig,
    /// How many guests it keeps ready.
    pub size: usize,
    /// The memory the pool was given (bytes): `size` x the guest's limit
    /// must fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<i64>,
    /// Each guest starts its browser before it counts as ready.
    #[serde(default)]
    pub prewarm_browser: bool,
}

impl PoolConfig {
    /// Refuses what the pool cannot keep: a backend other than Docker, a
    /// size out of range, more memory than it was given.
    pub fn check(&self) -> Result<(), PoolError> {
        if self.backend != BackendKind::Docker {
            return Err(PoolError::Backend(self.backend));
        }
        if self.size == 0 || self.size > MAX_SIZE {
            return Err(PoolError::Size(self.size));
        }
        if let Some(budget) = self.memory_budget {
            let needed = self.guest.memory.saturating_mul(self.size as i64);
            if needed > budget {
                return Err(PoolError::OverBudget {
                    size: self.size,
                    per_guest: mib(self.guest.memory),
                    needed: mib(needed),
                    budget: mib(budget),
                });
            }
        }
        Ok(())
    }
}

/// Bytes as MiB, for messages.
pub fn mib(bytes: i64) -> i64 {
    bytes / (1024 * 1024)
}

/// What can go wrong with a pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(
        "no pool is running for this state directory ({} does not answer): start one with \
         `host-cli pool start`",
        socket.display()
    )]
    NotRunning { socket: PathBuf },
    #[error("a pool is already running for this state directory (its lock {} is held)", lock.display())]
    AlreadyRunning { lock: PathBuf },
    #[error(
        "a pool of {size} guests at {per_guest} MiB each needs {needed} MiB, more than the \
         {budget} MiB it was given (--pool-memory): lower --size or the guests' --memory"
    )]
    OverBudget {
        size: usize,
        per_guest: i64,
        needed: i64,
        budget: i64,
    },
    #[error(
        "the pool keeps docker guests only (a {0} guest's processes and paths are tied to its \
         session folder's first name, which a claim changes)"
    )]
    Backend(BackendKind),
    #[error("a pool keeps 1 to {MAX_SIZE} guests, not {0}")]
    Size(usize),
    /// The supervisor's answer to a claim it could not serve.
    #[error("the pool did not hand out a guest: {0}")]
    Refused(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The supervisor's answer was not one of the protocol's.
    #[error("the pool's supervisor answered something unexpected: {0}")]
    Protocol(String),
    #[error(transparent)]
    Guest(#[from] GuestError),
    #[error(transparent)]
    Session(#[from] sandtop_guest::session::SessionError),
}

impl PoolError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PoolError {
        let what = what.into();
        move |source| PoolError::Io { what, source }
    }
}

/// Seconds since the epoch.
pub(crate) fn now_unix() -> u64 {
    sandtop_guest::session::now_unix()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(size: usize, memory: i64, budget: Option<i64>) -> PoolConfig {
        PoolConfig {
            backend: BackendKind::Docker,
            screen: Size::new(1280, 800),
            guest: StartConfig {
                image: "img".into(),
                memory,
                cpus: 2_000_000_000,
                pids: 512,
                ready_timeout_ms: None,
            },
            network: EgressConfig::none(),
            size,
            memory_budget: budget,
            prewarm_browser: false,
        }
    }

    #[test]
    fn the_pool_refuses_to_grow_past_its_memory() {
        let g = 512 * 1024 * 1024;
        assert!(config(4, g, Some(4 * g)).check().is_ok());
        assert!(config(4, g, None).check().is_ok());
        let e = config(5, g, Some(4 * g)).check().unwrap_err().to_string();
        assert!(
            e.contains("5 guests at 512 MiB each needs 2560 MiB, more than the 2048 MiB"),
            "{e}"
        );
        assert!(matches!(
            config(0, g, None).check(),
            Err(PoolError::Size(0))
        ));
        let mut local = config(1, g, None);
        local.backend = BackendKind::Local;
        assert!(matches!(local.check(), Err(PoolError::Backend(_))));
    }
}
