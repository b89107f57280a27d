//! `sandtop-protocol`: the wire types shared by `sandtopd` (in the guest)
//! and `host-cli` (on the host).
//!
//! What it is: serde types, limits and error codes, the key-name table
//! ([`keys`]), the names a session's host and daemon share ([`session`]:
//! the socket, the token file, `SANDTOPD_TOKEN`), and the one function
//! that maps model coordinates to screen pixels ([`ScaleMap::to_screen`]).
//! What it is not: no I/O, no async runtime, no X connection.
//!
//! How a batch travels through these types:
//! 1. The model emits Responses API actions; the host parses them with
//!    [`Action::from_model_value`] (a field the schema does not know is
//!    refused, never dropped) and checks every call of a response (limits,
//!    bounds in the last screenshot's map, key names) before any runs.
//! 2. The host sends a [`BatchRequest`]: the actions plus the
//!    [`ScreenshotOptions`] of the screenshot the model saw, which also fix
//!    the coordinate space.
//! 3. The daemon checks every action ([`Action::check_limits`], bounds via
//!    [`ScaleMap::to_screen`], key names) before running any of them, runs
//!    them in order, and answers a [`BatchResponse`] with the final
//!    [`Screenshot`] and its [`ScaleMap`], or an [`ErrorBody`].

/// An [`Invalid`] from a format string.
macro_rules! invalid {
    ($($t:tt)*) => {
        $crate::Invalid::new(format!($($t)*))
    };
}
pub(crate) use invalid;

mod action;
mod api;
pub mod browser;
pub mod clock;
pub mod desktop;
mod error;
pub mod files;
pub mod frame;
pub mod keys;
pub mod limits;
pub mod redact;
mod scale;
pub mod session;
pub mod sign_in;
mod strict;

pub use action::{Action, ActionRejection, Button, Coord, check_text};
pub use api::{
    BatchRequest, BatchResponse, Capabilities, CursorReply, DaemonState, Health, HealthStatus,
    ImageFormat, Info, InfoReply, Limits, PROTOCOL_MAJOR, PROTOCOL_VERSION, Screenshot,
    ScreenshotOptions, ScreenshotResponse, Timings, VersionError, check_protocol, paths,
};
pub use browser::{BrowserCall, BrowserOutcome, BrowserReply, BrowserRequest, BrowserState};
pub use error::{ErrorBody, ErrorCode, Invalid};
pub use scale::{Fit, OutOfBounds, Rect, ScaleError, ScaleMap, Size};
pub use strict::{StrictError, from_json_objects};
