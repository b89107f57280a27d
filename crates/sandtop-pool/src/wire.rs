//! The pool's control socket: one JSON request per line, one reply per
//! line, unknown fields refused.

use sandtop_egress::service::EgressConfig;
use sandtop_guest::options::StartConfig;
use sandtop_guest::session::BackendKind;
use sandtop_protocol::Size;
use serde::{Deserialize, Serialize};

use crate::PoolConfig;

/// The longest request line the supervisor reads.
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024;
/// The longest reply line a client reads (a status of a full pool with
/// its history fits many times).
pub const MAX_REPLY_BYTES: u64 = 4 * 1024 * 1024;

/// A request to the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Hand a ready guest over as session `name`; wait up to `wait_ms`
    /// for one that is starting. Every part of `want` given must equal the
    /// pool's configuration.
    Claim {
        name: String,
        wait_ms: u64,
        #[serde(default)]
        want: Want,
    },
    // Struct variants, so that unknown fields are refused (serde ignores
    // them beside a unit variant of an internally tagged enum).
    Status {},
    /// Remove the unclaimed guests and end.
    Stop {},
}

/// What a claimer needs the guest to be (`guest reset` gives all of it:
/// a session's own configuration).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Want {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<StartConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<EgressConfig>,
}

impl Want {
    /// Why the pool's guests are not what is wanted, if they are not.
    pub fn mismatch(&self, have: &PoolConfig) -> Option<String> {
        let mut diffs = Vec::new();
        if self.backend.is_some_and(|b| b != have.backend) {
            diffs.push(format!("backend {}", have.backend));
        }
        if self.screen.is_some_and(|s| s != have.screen) {
            diffs.push(format!("screen {}", have.screen));
        }
        if let Some(g) = &self.guest
            && *g != have.guest
        {
            diffs.push(format!(
                "image {}, memory {} MiB, cpus {}, pids {}",
                have.guest.image,
                crate::mib(have.guest.memory),
                have.guest.cpus as f64 / 1e9,
                have.guest.pids
            ));
        }
        if self.network.as_ref().is_some_and(|n| *n != have.network) {
            diffs.push(format!("network {:?}", have.network.mode));
        }
        (!diffs.is_empty()).then(|| {
            format!(
                "the pool's guests differ from what is asked (the pool has {})",
                diffs.join("; ")
            )
        })
    }
}

/// The supervisor's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// The guest `from` is now session `name`.
    Claimed {
        name: String,
        from: String,
        waited_ms: u64,
    },
    /// Why no guest was handed out.
    Refused {
        reason: String,
    },
    Status {
        status: Box<Status>,
    },
    Stopping,
}

/// `pool status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// The supervisor's pid.
    pub pid: u32,
    pub config: PoolConfig,
    pub ready: Vec<Member>,
    pub starting: Vec<Member>,
    /// The latest claims (at most [`HISTORY`]), oldest first.
    pub claimed: Vec<Claimed>,
    /// The latest failed starts and guests lost (at most [`HISTORY`]).
    pub failed: Vec<Failure>,
    /// Ready guests found dead and replaced.
    pub replaced: u32,
    /// Failed starts in a row.
    pub failures_in_a_row: u32,
    /// Why the pool stopped refilling, when it did.
    pub halted: Option<String>,
    pub stopping: bool,
}

/// How many claims and failures `status` keeps.
pub const HISTORY: usize = 32;

/// A pool guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub name: String,
    /// Since when it is starting (or ready).
    pub since_unix: u64,
}

/// A claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claimed {
    /// The pool's name for the guest.
    pub from: String,
    /// The session it became.
    pub name: String,
    pub at_unix: u64,
}

/// A failed start, or a guest lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub name: String,
    pub reason: String,
    pub at_unix: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_strict() {
        let r: Request = serde_json::from_str(r#"{"op":"claim","name":"a","wait_ms":5}"#).unwrap();
        assert_eq!(
            r,
            Request::Claim {
                name: "a".into(),
                wait_ms: 5,
                want: Want::default()
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"status","x":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"steal"}"#).is_err());
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"claim","name":"a","wait_ms":5,"x":1}"#)
                .is_err()
        );
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"stop"}"#).unwrap(),
            Request::Stop {}
        );
        assert_eq!(
            serde_json::to_string(&Request::Status {}).unwrap(),
            r#"{"op":"status"}"#
        );
        let back = serde_json::to_string(&Reply::Stopping).unwrap();
        assert_eq!(back, r#"{"reply":"stopping"}"#);
    }
}
