//! `POST /v1/files/read` (docs/contract.md rule 54): one file of the guest
//! user's, for the host; and `POST /v1/clock` (rule 53), the clock the
//! programs the daemon started read.
//!
//! The file read is served only with `--files-root`; the file is
//! opened beneath that folder with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, so neither `..` nor a link the guest planted
//! leads out of it, and it must be a regular file of at most
//! [`MAX_READ_BYTES`].

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine as _;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use sandtop_protocol::clock::{ClockReply, ClockRequest};
use sandtop_protocol::files::{MAX_READ_BYTES, ReadFileReply, ReadFileRequest};
use sandtop_protocol::{ErrorBody, ErrorCode};

use super::error::ApiError;
use super::{ApiState, json_bytes, parse_json};

fn refuse(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError(ErrorBody::new(code, message))
}

pub(super) async fn read(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ReadFileRequest = parse_json(&headers, &body, None)?;
    let Some(root) = state.files_root.clone() else {
        return Err(refuse(
            ErrorCode::NotFound,
            "this daemon reads no files (started without --files-root)",
        ));
    };
    let rel = request
        .beneath(&root.to_string_lossy())
        .map_err(|m| refuse(ErrorCode::BadRequest, m))?
        .to_string();
    let bytes = tokio::task::spawn_blocking(move || read_beneath(&root, Path::new(&rel)))
        .await
        .map_err(|_| refuse(ErrorCode::Internal, "the read failed"))??;
    json_bytes(serde_json::to_vec(&ReadFileReply {
        size: bytes.len() as u64,
        data: base64::engine::general_purpose::STANDARD.encode(&bytes),
    }))
}

/// `POST /v1/clock`: the wall clock of the programs the daemon started
/// (`--fake-clock`; a replay sets the recorded run's time at each step).
pub(super) async fn clock(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ClockRequest = parse_json(&headers, &body, None)?;
    request
        .check()
        .map_err(|m| refuse(ErrorCode::BadRequest, m))?;
    let Some(clock) = state.clock.clone() else {
        return Err(refuse(
            ErrorCode::NotFound,
            "this daemon keeps no fake clock (started without --fake-clock)",
        ));
    };
    let offset_s = tokio::task::spawn_blocking(move || clock.set(request.unix_ms))
        .await
        .map_err(|_| refuse(ErrorCode::Internal, "setting the clock failed"))?
        .map_err(|e| {
            tracing::warn!(error = %e, "writing the fake clock's file");
            refuse(ErrorCode::Internal, "setting the clock failed")
        })?;
    tracing::info!(offset_s, "the programs' clock was set");
    json_bytes(serde_json::to_vec(&ClockReply { offset_s }))
}

/// Reads `rel` beneath `root`: no symbolic link on the way, no escape, a
/// regular file, at most [`MAX_READ_BYTES`].
pub fn read_beneath(root: &PathBuf, rel: &Path) -> Result<Vec<u8>, ApiError> {
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| refuse(ErrorCode::Internal, "the files root cannot be opened"))?;
    let fd = rustix::fs::openat2(
        &dir,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => {
            refuse(ErrorCode::NoSuchFile, "no such file")
        }
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => refuse(
            ErrorCode::BadRequest,
            "path: crosses a symbolic link or leaves the files root",
        ),
        // A socket (ENXIO) or a part longer than a name may be.
        rustix::io::Errno::NXIO | rustix::io::Errno::NAMETOOLONG => {
            refuse(ErrorCode::BadRequest, "path: not a file that can be read")
        }
        rustix::io::Errno::ACCESS => refuse(ErrorCode::Forbidden, "the file cannot be read"),
        // openat2(2) is Linux 5.6+, and a seccomp filter may refuse it.
        rustix::io::Errno::NOSYS | rustix::io::Errno::PERM => refuse(
            ErrorCode::Internal,
            "openat2 is not available to the daemon, so it reads no files",
        ),
        _ => refuse(ErrorCode::Internal, "the file cannot be opened"),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|_| refuse(ErrorCode::Internal, "fstat failed"))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(refuse(ErrorCode::BadRequest, "path: not a regular file"));
    }
    if stat.st_size as u64 > MAX_READ_BYTES {
        return Err(refuse(
            ErrorCode::LimitExceeded,
            format!("the file is larger than {MAX_READ_BYTES} bytes"),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| refuse(ErrorCode::Internal, "the file cannot be read"))?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        // It grew while being read.
        return Err(refuse(
            ErrorCode::LimitExceeded,
            format!("the file is larger than {MAX_READ_BYTES} bytes"),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<Vec<u8>, ApiError>) -> ErrorCode {
        r.unwrap_err().0.code
    }

    #[test]
    fn reads_regular_files_beneath_the_root_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("home");
        std::fs::create_dir_all(root.join("demo")).unwrap();
        std::fs::write(root.join("demo/s.jsonl"), "{\"a\":1}\n").unwrap();
        std::fs::write(tmp.path().join("secret"), "host").unwrap();
        let rel = |p: &str| PathBuf::from(p);
        assert_eq!(
            read_beneath(&root, &rel("demo/s.jsonl")).unwrap(),
            b"{\"a\":1}\n"
        );
        assert_eq!(
            code(read_beneath(&root, &rel("nope"))),
            ErrorCode::NoSuchFile
        );
        // A link the guest planted, to a file outside or inside: refused.
        std::os::unix::fs::symlink(tmp.path().join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("demo/s.jsonl"), root.join("in")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("up")).unwrap();
        for l in ["out", "in", "up/secret"] {
            assert_eq!(
                code(read_beneath(&root, &rel(l))),
                ErrorCode::BadRequest,
                "{l}"
            );
        }
        assert_eq!(
            code(read_beneath(&root, &rel("../secret"))),
            ErrorCode::BadRequest
        );
        // Not a regular file: a folder, a FIFO (opened without blocking,
        // refused before any read), a socket.
        assert_eq!(
            code(read_beneath(&root, &rel("demo"))),
            ErrorCode::BadRequest
        );
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(
            code(read_beneath(&root, &rel("fifo"))),
            ErrorCode::BadRequest
        );
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        assert_eq!(
            code(read_beneath(&root, &rel("sock"))),
            ErrorCode::BadRequest
        );
        // Too large.
        let big = std::fs::File::create(root.join("big")).unwrap();
        big.set_len(MAX_READ_BYTES + 1).unwrap();
        assert_eq!(
            code(read_beneath(&root, &rel("big"))),
            ErrorCode::LimitExceeded
        );
        big.set_len(MAX_READ_BYTES).unwrap();
        assert_eq!(
            read_beneath(&root, &rel("big")).unwrap().len() as u64,
            MAX_READ_BYTES
        );
    }
}
