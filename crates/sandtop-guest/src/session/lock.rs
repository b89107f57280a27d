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

/// Ends the run holding a session as Ctrl-C does (SIGINT to its host-cli:
/// it stops between operations, records how it ended and releases the
/// session), and waits until that process is gone (`guest stop --force`,
/// `guest reset --force`).
pub async fn end_run(dir: &SessionDir, holder: &str) -> Result<(), SessionError> {
    let pid = holder
        .parse::<i32>()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| SessionError::NoHolder(dir.name.clone()))?;
    eprintln!(
        "host-cli: ending the run on session {} (host-cli pid {holder}) first",
        dir.name
    );
    rustix::process::kill_process(pid, rustix::process::Signal::INT).map_err(|source| {
        SessionError::Signal {
            holder: holder.to_string(),
            source,
        }
    })?;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let gone = !std::path::Path::new(&format!("/proc/{holder}")).exists()
            || std::fs::read_to_string(format!("/proc/{holder}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
        if gone && session_holder(dir).is_none() {
            return Ok(());
        }
        if std::time::Instant::now() > end {
            return Err(SessionError::RunLingers(holder.to_string()));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
