//! What reading or writing a run folder can fail on.
//!
//! Each error says what was being done and where in its own message and
//! keeps its cause as its [`std::error::Error::source`]; a caller shows
//! the whole chain (`anyhow`'s `{:#}`, `sandtop_hostkit::chain`).

use crate::files::FileError;

/// A run folder could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or folder could not be created, opened, read, written or
    /// synced: `doing` says which and where ("creating the run folder
    /// /x/y").
    #[error("{doing}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// A line of a trajectory that is JSON but not an entry (an unknown
    /// kind, a misspelt or missing field): `file line N`, the decoder's
    /// complaint as the source.
    #[error("{file} line {line}")]
    Entry {
        file: String,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    /// An entry or record could not be turned into JSON.
    #[error("encoding a record of the run folder")]
    Encode(#[source] serde_json::Error),
    /// A file of the run folder read as regular files only refused it (a
    /// link, a FIFO, too large, not text), or could not read it.
    #[error(transparent)]
    File(#[from] FileError),
    /// A folder that is not a run folder, or a trajectory that is not one
    /// a run wrote: a sentence that names it.
    #[error("{0}")]
    NotARun(String),
}

/// `with_context` for I/O results: the phrase is built only on failure.
pub(crate) trait Doing<T> {
    fn doing<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T> Doing<T> for std::io::Result<T> {
    fn doing<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|source| Error::Io {
            doing: what().into(),
            source,
        })
    }
}

/// What the crate's fallible calls return.
pub type Result<T, E = Error> = std::result::Result<T, E>;
