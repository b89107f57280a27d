//! A run's folder: what `host-cli run`, the offline exercise and
//! `host-cli mcp` write, and what `report`, `replay` and `--resume` read.
//!
//! - [`trajectory`]: `trajectory.jsonl`, one [`trajectory::Entry`] a line
//!   (the ledger is its `ledger` entries), the [`trajectory::Recorder`]
//!   that appends them and saves the screenshots beside it (0600, never
//!   overwriting), the strict reader and where a resume picks up.
//! - [`items`]: the conversation's items the trajectory records, in the
//!   Responses API's shapes, read leniently and built in one place.
//! - [`outcome`]: how a run ended and what it cost.
//! - [`diagnostics`]: `diagnostics.jsonl`, one record per model request
//!   and per tool call.
//! - [`parts`]: the values entries carry that others use too.
//! - [`read`]: a run folder read into steps, for a report; [`files`]:
//!   its files read as regular files only.
//!
//! - [`Error`]: what writing or reading a folder fails on, each with its
//!   cause kept as its source.
//!
//! Formats are stable: a folder written by an earlier version reads the
//! same (docs/contract.md rule 25 and L7).

pub mod diagnostics;
mod error;
pub mod files;
pub mod items;
pub mod outcome;
pub mod parts;
pub mod read;
pub mod trajectory;

pub use error::{Error, Result};
