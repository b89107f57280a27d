//! `host-cli`: Sandtop's host controller.
//!
//! What it is: the program on the operator's machine that boots isolated
//! guests ([`guest`]), talks to each guest's `sandtopd` over an
//! authenticated channel ([`channel`]), and drives the Responses API
//! computer tool loop with the approvals the contract requires.
//! What it is not: it never runs a shell with model output, never sends the
//! API key into a guest, and never publishes a port.
//!
//! How `host-cli act` flows:
//! 1. [`session`] finds the session's folder and record.
//! 2. [`guest::open_channel`] asks the session's backend for a stream to
//!    the daemon and opens the channel (token, protocol version check).
//! 3. The actions go out once as a `BatchRequest`; the reply is validated
//!    ([`channel::check_screenshot`]) and printed as JSON.

pub use sandtop_hostkit::out;

pub mod cli;
pub mod commands;
pub mod run;

#[cfg(feature = "bench")]
pub use sandtop_bench as bench;
pub use sandtop_channel::{self as channel, image_check};
pub use sandtop_control as control;
pub use sandtop_egress as egress;
pub use sandtop_guest::{self as guest, session};
pub use sandtop_hostkit::secret::SECRET_ENV;
pub use sandtop_hostkit::{chain, secret, signals, term, units};
pub use sandtop_mcp as mcp;
pub use sandtop_replay as replay;
pub use sandtop_report as report;
pub use sandtop_view as view;

/// The loop's pieces under the paths host-cli's modules knew them by
/// before they became crates (`sandtop-agent`, `sandtop-exercise`,
/// `sandtop-runfolder`); it goes once those modules are crates too.
pub mod agent {
    pub use crate::run as cmd;
    pub use sandtop_agent::browser::{grants, toolset as browser};
    pub use sandtop_agent::computer::{preflight, screen_change};
    pub use sandtop_agent::model::{self, scripted};
    pub use sandtop_agent::sign_in::rules as sign_in;
    pub use sandtop_agent::{approve, progress, runner};
    pub use sandtop_exercise as exercise;
    pub use sandtop_runfolder::items as wire;
    pub use sandtop_runfolder::trajectory as record;
    pub use sandtop_runfolder::{diagnostics, outcome};
}
