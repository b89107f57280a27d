//! The computer-use loop: a model's tool calls carried out on one guest,
//! with the approvals the contract requires (docs/contract.md §2).
//!
//! - [`runner`]: the loop that ties the parts below to a session's
//!   channel ([`runner::Runner`]).
//! - [`model`]: the model trait, the OpenAI Responses client with retries
//!   ([`model::openai`]) and the offline scripted model
//!   ([`model::scripted`]).
//! - The tool families' rules: [`computer`] (every call of a response
//!   checked before any runs, the screen an approval is bound to),
//!   [`browser`] (the browser toolset, file grants), [`sign_in`].
//! - [`approve`]: the operator: safety-check approvals, action and
//!   browser confirmations, sign-in answers, `ask_user`.
//! - [`progress`]: a line per step on stderr, `--events json` on stdout.
//! - [`launch`]: what the commands that start the loop share (the
//!   provider, the operator, the run folder, the control socket, the
//!   summary and exit status).
//!
//! What a run leaves (trajectory, ledger, screenshots, diagnostics) is
//! `sandtop_runfolder`'s format.

pub mod approve;
pub mod browser;
pub mod computer;
pub mod launch;
pub mod model;
pub mod progress;
pub mod runner;
pub mod sign_in;
