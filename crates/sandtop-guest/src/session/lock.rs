//! The run lock of a session: one run (or command that drives the
//! guest) at a time (docs/contract.md rule 16).

use std::os::unix::fs::OpenOptionsExt as _;

use super::{SessionDir, SessionError, io};

/// An exclusive lock on a session for one run; released on drop.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// Takes the session's run lock or explains who holds it.
pub fn lock_session(dir: &SessionDir) -> Result<RunLock, SessionError> {
    try_lock(dir)?.map_err(|holder| SessionError::RunActive {
        name: dir.name.clone(),
        holder,
    })
}

/// The session's lock for one command that touches the desktop (`act`,
/// `screenshot`): refused with a clear message while a run owns the
/// session (one owner per session, docs/contract.md rule 6).
pub fn hold_session(dir: &SessionDir, what: &str) -> Result<RunLock, SessionError> {
    try_lock(dir)?.map_err(|holder| SessionError::InUse {
        name: dir.name.clone(),
        holder,
        what: what.to_string(),
    })
}

/// The pid of the host-cli whose run holds the session, if one does.
pub fn session_holder(dir: &SessionDir) -> Option<String> {
    match try_lock(dir) {
        Ok(Err(holder)) => Some(holder),
        _ => None,
    }
}

/// Takes the session's lock (writing this process's pid into it), or
/// gives the holder's pid.
fn try_lock(dir: &SessionDir) -> Result<Result<RunLock, String>, SessionError> {
    let path = dir.path.join("run.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io("opening", &path))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            let _ = std::fs::write(&path, std::process::id().to_string());
            Ok(Ok(RunLock { _file: file }))
        }
        Err(_) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            Ok(Err(holder.trim().to_string()))
        }
    }
}
