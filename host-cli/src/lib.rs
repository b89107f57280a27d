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

pub mod agent;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod doctor;
pub mod mcp;
pub mod replay;
pub mod report;
pub mod view;

pub use sandtop_channel::{self as channel, image_check};
pub use sandtop_control as control;
pub use sandtop_egress as egress;
pub use sandtop_guest::{self as guest, session};
pub use sandtop_hostkit::secret::SECRET_ENV;
pub use sandtop_hostkit::{chain, secret, signals, term, units};
