//! The run folder's files, read as regular files only. A run folder from
//! elsewhere (a colleague's, an archive's) could hold a symbolic link
//! named like a screenshot pointing at any image the operator can read,
//! or a FIFO that never ends; the report would embed the one and hang on
//! the other. So each file is opened with `O_NOFOLLOW | O_NONBLOCK` and
//! read only if the opened file is a regular one (checked on the open
//! descriptor, so nothing can be swapped in between), and never beyond a
//! size cap.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The largest file read: the largest reply the host accepts from the
/// daemon (a screenshot is smaller still).
pub const MAX_FILE_BYTES: u64 = sandtop_protocol::limits::MAX_REPLY_BYTES as u64;

/// Why a file of the run folder was not read. Each message names the
/// file and is a sentence a report can show as it is.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(
        "{name} is a symbolic link: not read (a report reads only the run folder's own regular \
         files)"
    )]
    Link { name: String },
    #[error(
        "{name} is not a regular file: not read (a report reads only the run folder's own \
         regular files)"
    )]
    NotRegular { name: String },
    #[error("{name} is larger than {} MiB: not read", MAX_FILE_BYTES / (1024 * 1024))]
    TooLarge { name: String },
    #[error("{name} grew while it was read: not read")]
    Grew { name: String },
    #[error("{name} is not UTF-8 text")]
    NotText { name: String },
    /// Opening or reading it failed (it is missing, unreadable, ...).
    #[error("reading {name}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

impl FileError {
    /// The sentence with its cause (`reading x.png: No such file ...`).
    pub fn sentence(&self) -> String {
        match self {
            FileError::Io { source, .. } => format!("{self}: {source}"),
            other => other.to_string(),
        }
    }
}

/// Reads `dir/name`, a regular file of at most [`MAX_FILE_BYTES`].
pub fn read_regular(dir: &Path, name: &str) -> Result<Vec<u8>, FileError> {
    let path = dir.join(name);
    let io = |source| FileError::Io {
        name: name.to_string(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(&path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                FileError::Link {
                    name: name.to_string(),
                }
            } else {
                io(e)
            }
        })?;
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular {
            name: name.to_string(),
        });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            name: name.to_string(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::Grew {
            name: name.to_string(),
        });
    }
    Ok(bytes)
}

/// [`read_regular`] of a text file.
pub fn read_regular_text(dir: &Path, name: &str) -> Result<String, FileError> {
    String::from_utf8(read_regular(dir, name)?).map_err(|_| FileError::NotText {
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_and_folders_are_refused_files_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("real.png"), b"bytes").unwrap();
        std::os::unix::fs::symlink(d.join("real.png"), d.join("link.png")).unwrap();
        std::fs::create_dir(d.join("folder.png")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("fifo.png"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(read_regular(d, "real.png").unwrap(), b"bytes");
        let e = read_regular(d, "link.png").unwrap_err();
        assert!(matches!(e, FileError::Link { .. }), "{e:?}");
        assert!(e.sentence().contains("link.png is a symbolic link"), "{e}");
        for name in ["folder.png", "fifo.png"] {
            let e = read_regular(d, name).unwrap_err();
            assert!(matches!(e, FileError::NotRegular { .. }), "{e:?}");
            assert!(
                e.sentence().contains("is not a regular file"),
                "{name}: {e}"
            );
        }
        let e = read_regular(d, "missing.png").unwrap_err();
        let sentence = e.sentence();
        assert!(
            sentence.starts_with("reading missing.png: ")
                && std::error::Error::source(&e).is_some(),
            "{sentence}"
        );
    }
}
