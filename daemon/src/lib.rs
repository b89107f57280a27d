//! `sandtopd`: the computer driver that runs inside the guest.
//!
//! What it is: the one owner of the guest's X display. It turns Responses
//! API computer actions into XTEST input, captures the screen through
//! MIT-SHM, scales and encodes screenshots with the `ScaleMap` that maps
//! the model's coordinates back, and serves all of it over an
//! authenticated HTTP/1.1 API on a Unix socket. It supervises Xvfb and a
//! window manager, or attaches to a display it is given.
//! What it is not: a VNC server, a shell, or anything the model's text can
//! reach except as literal input events.
//!
//! How one batch flows:
//! 1. `api::server` accepts on the socket; `api::guard` refuses browsers,
//!    foreign Hosts and missing tokens; the body limit refuses big bodies.
//! 2. `api` parses the [`sandtop_protocol::BatchRequest`] strictly, takes
//!    the input gate (else `busy`) and sends a job to the desktop task.
//! 3. `desktop` (one thread, one X connection) plans the batch with
//!    `desktop::exec::plan` — limits, key names, coordinates mapped through
//!    `ScaleMap::to_screen`, all before any input — then runs it.
//! 4. It settles on X damage, captures (`driver::x11`), renders
//!    (`capture`), and replies; held input is always released first.

pub mod api;
#[cfg(feature = "bench")]
pub mod bench;
pub mod browser;
pub mod cancel;
pub mod capture;
pub mod clock;
pub mod desktop;
pub mod driver;
pub mod keys;
pub mod ratelimit;
pub mod relay;
pub mod supervise;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod vm_link;
pub mod wm_check;
pub mod xauth;
