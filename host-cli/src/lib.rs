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

/// `println!` for the command's output: a closed stdout ends the output
/// quietly instead of panicking ([`term::print_out`]).
#[macro_export]
macro_rules! out {
    () => {
        $crate::term::print_out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::term::print_out(format_args!($($arg)*))
    };
}

pub mod agent;
#[cfg(feature = "bench")]
pub mod bench;
pub mod chain;
pub mod channel;
pub mod cli;
pub mod control;
pub mod doctor;
pub mod egress;
pub mod guest;
pub mod image_check;
pub mod mcp;
pub mod replay;
pub mod report;
pub mod secret;
pub mod session;
pub mod signals;
pub mod term;
pub mod units;
pub mod view;

/// Environment variables never handed to a guest or a child process.
pub const SECRET_ENV: &[&str] = &["OPENAI_API_KEY", sandtop_protocol::session::TOKEN_ENV];
