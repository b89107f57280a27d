//! Test support shared by the workspace's test tiers.
//!
//! What it is: loaders for the OpenAPI descriptions we validate against
//! (OpenAI's, vendored in `reference/`, and the daemon's own
//! `daemon/openapi.yaml`), real X servers for the x11 tier ([`xvfb`]) and a window manager on them
//! ([`wm`]), a
//! test X client that records every input event it receives
//! ([`recorder`]), a program that opens a window on a shortcut
//! ([`opener`]), what a record of input events leaves pressed
//! ([`held`]), hand-built TLS ClientHellos for the egress proxy's tests
//! ([`tls`]), the skip policy ([`skip`]), build-folder programs run as
//! another uid ([`other_uid`]), host-cli started without a
//! controlling terminal ([`command`]), the typing corpus the tiers
//! type ([`corpus`]), and the escape sequences a hostile text may hold
//! ([`escapes`]).
//! What it is not: a place for production code; nothing here ships.

pub mod command;
pub mod corpus;
pub mod docker;
pub mod escapes;
pub mod held;
pub mod mock_responses;
pub mod openapi;
pub mod opener;
pub mod other_uid;
pub mod pixels;
pub mod recorder;
pub mod skip;
pub mod tls;
pub mod wm;
pub mod xvfb;
