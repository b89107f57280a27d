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

/// Reads `dir/name`, a regular file of at most [`MAX_FILE_BYTES`]; the
/// error is a sentence for the report.
pub fn read_regular(dir: &Path, name: &str) -> Result<Vec<u8>, String> {
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(&path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                format!(
                    "{name} is a symbolic link: not read (a report reads only the run folder's \
                     own regular files)"
                )
            } else {
                format!("reading {name}: {e}")
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| format!("reading {name}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "{name} is not a regular file: not read (a report reads only the run folder's own \
             regular files)"
        ));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{name} is larger than {} MiB: not read",
            MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {name}: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("{name} grew while it was read: not read"));
    }
    Ok(bytes)
}

/// [`read_regular`] of a text file.
pub fn read_regular_text(dir: &Path, name: &str) -> Result<String, String> {
    String::from_utf8(read_regular(dir, name)?).map_err(|_| format!("{name} is not UTF-8 text"))
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
        assert!(e.contains("link.png is a symbolic link"), "{e}");
        for name in ["folder.png", "fifo.png"] {
            let e = read_regular(d, name).unwrap_err();
            assert!(e.contains("is not a regular file"), "{name}: {e}");
        }
        assert!(read_regular(d, "missing.png").is_err());
    }
}
