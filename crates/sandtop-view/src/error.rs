//! What serving a view fails on.

use std::net::SocketAddr;

use sandtop_channel::ChannelError;
use sandtop_guest::GuestError;

/// Why the view could not be served, or a snapshot not taken.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The session could not be found, locked or reached.
    #[error(transparent)]
    Guest(#[from] GuestError),
    /// The view's lock in the session folder could not be taken.
    #[error(transparent)]
    Control(#[from] sandtop_control::served::SetupError),
    /// Listening or serving failed (`doing` says where).
    #[error("{doing}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// A local server is given an address that is not loopback.
    #[error("this server serves on loopback only, not {0}")]
    NotLoopback(SocketAddr),
    /// The OS gave no random bytes for the view's secrets.
    #[error("no randomness from the OS")]
    Random(#[source] getrandom::Error),
    /// The guest's daemon refused or failed a request.
    #[error(transparent)]
    Daemon(#[from] ChannelError),
    /// The daemon answered a snapshot without an image.
    #[error("the daemon sent no image")]
    NoImage,
}

impl From<sandtop_guest::session::SessionError> for Error {
    fn from(e: sandtop_guest::session::SessionError) -> Error {
        Error::Guest(e.into())
    }
}
