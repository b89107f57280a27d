//! What a replay fails on (a divergence is not an error: it is the
//! replay's answer, exit 7).

use std::path::PathBuf;

use sandtop_channel::ChannelError;
use sandtop_guest::GuestError;
use sandtop_pool::PoolError;

/// Why a replay could not be made or finished.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The run folder could not be read.
    #[error(transparent)]
    Run(#[from] sandtop_runfolder::Error),
    /// The recording holds an input the replay cannot read back.
    #[error("{what}: {why}")]
    Recorded { what: String, why: String },
    /// The recording holds no input that reached the desktop.
    #[error("{} holds no input that ran: nothing to replay", run.display())]
    Nothing { run: PathBuf },
    /// No guest to replay on (the session named, a pool's or a new one).
    #[error(transparent)]
    Boot(#[from] PoolError),
    /// The guest could not be locked or reached.
    #[error(transparent)]
    Guest(#[from] GuestError),
    /// The guest's daemon refused or failed a request (`doing` says
    /// which).
    #[error("{doing}")]
    Daemon {
        doing: String,
        #[source]
        source: ChannelError,
    },
    /// A screenshot (the replay's or the recording's) is not one the
    /// replay can compare.
    #[error("{what}: {why}")]
    Screenshot { what: String, why: String },
    /// The output folder or a file in it could not be written.
    #[error("{doing}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn daemon(doing: impl Into<String>) -> impl FnOnce(ChannelError) -> Error {
        let doing = doing.into();
        move |source| Error::Daemon { doing, source }
    }

    pub(crate) fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let doing = doing.into();
        move |source| Error::Io { doing, source }
    }

    pub(crate) fn screenshot(what: &str, why: impl std::fmt::Display) -> Error {
        Error::Screenshot {
            what: what.to_string(),
            why: why.to_string(),
        }
    }
}
