//! The Responses API computer tool loop (docs/contract.md §2).
//!
//! - [`wire`]: request bodies and lenient reading of responses.
//! - [`model`]: the model trait, the OpenAI HTTP client with retries.
//! - [`scripted`]: the offline scripted model (no key).
//! - [`exercise`]: the offline exercise's script and its checks.
//! - [`approve`]: safety-check approvals, action confirmations, ask_user.
//! - [`preflight`]: every call of a response checked before any runs.
//! - [`progress`]: a line per step on stderr, `--events json` on stdout.
//! - [`record`]: the run folder, trajectory, screenshots and ledger.
//! - [`outcome`]: how a run ended and its usage (read by all of these).
//! - [`diagnostics`]: per-request and per-call records, an observer.
//! - [`runner`]: the loop that ties them to a session's channel.

pub mod approve;
pub mod browser;
pub mod cmd;
pub mod exercise;
pub mod grants;
pub mod model;
pub mod preflight;
pub mod progress;
pub mod runner;
pub mod screen_change;
pub mod scripted;
pub mod sign_in;
pub mod wire;

pub use sandtop_runfolder::trajectory as record;
pub use sandtop_runfolder::{diagnostics, outcome};
