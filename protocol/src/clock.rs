//! `POST /v1/clock`: the wall clock the guest's programs read (a replay
//! shows them the recorded run's time, docs/contract.md rule 53).
//!
//! Host only: no model tool maps to it. The daemon serves it when started
//! with `--fake-clock FILE`: the programs it starts (the window manager,
//! and so the panel and every application launched from it; its own
//! browser) read the time through libfaketime, shifted by the offset the
//! daemon keeps in that file. Monotonic clocks are never shifted.

use serde::{Deserialize, Serialize};

/// The earliest time a request may set: 2000-01-01T00:00:00Z, in ms.
pub const MIN_UNIX_MS: u64 = 946_684_800_000;
/// The latest: 2100-01-01T00:00:00Z, in ms.
pub const MAX_UNIX_MS: u64 = 4_102_444_800_000;

/// `POST /v1/clock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockRequest {
    /// The time the guest's programs are to read now, in ms since the
    /// Unix epoch (it runs on from there); `null`: the real time.
    /// Required (a missing field is refused, not taken as `null`).
    #[serde(deserialize_with = "Option::deserialize")]
    pub unix_ms: Option<u64>,
}

impl ClockRequest {
    /// Refuses a time outside [`MIN_UNIX_MS`]..=[`MAX_UNIX_MS`].
    pub fn check(&self) -> Result<(), crate::Invalid> {
        match self.unix_ms {
            Some(t) if !(MIN_UNIX_MS..=MAX_UNIX_MS).contains(&t) => Err(crate::invalid!(
                "unix_ms: {t} is outside the years 2000 to 2100"
            )),
            _ => Ok(()),
        }
    }
}

/// The reply of `POST /v1/clock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockReply {
    /// The shift now applied to the programs' wall clock, in whole
    /// seconds (0: the real time).
    pub offset_s: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_outside_the_century_are_refused() {
        let req = |t| ClockRequest { unix_ms: t };
        assert!(req(None).check().is_ok());
        assert!(req(Some(MIN_UNIX_MS)).check().is_ok());
        assert!(req(Some(1_764_950_000_000)).check().is_ok());
        assert!(req(Some(MIN_UNIX_MS - 1)).check().is_err());
        assert!(req(Some(MAX_UNIX_MS + 1)).check().is_err());
        assert!(req(Some(0)).check().is_err());
        // Strict: unknown fields refused.
        assert!(serde_json::from_str::<ClockRequest>(r#"{"unix_ms":null,"x":1}"#).is_err());
        assert!(serde_json::from_str::<ClockRequest>(r#"{}"#).is_err());
    }
}
