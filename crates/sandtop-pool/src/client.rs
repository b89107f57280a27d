//! The other end of the control socket: claims, status, stop.

use std::time::Duration;

use sandtop_guest::session::{SessionDir, SessionRecord, Store};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

use crate::wire::{MAX_REPLY_BYTES, Reply, Request, Status, Want};
use crate::{PoolError, PoolPaths};

/// How long a claim waits for a guest that is starting, by default.
pub const CLAIM_WAIT: Duration = Duration::from_secs(60);

/// Whether a supervisor answers on the socket.
pub async fn running(paths: &PoolPaths) -> bool {
    UnixStream::connect(paths.socket()).await.is_ok()
}

/// Sends one request and reads its reply (within `timeout`).
pub async fn request(
    paths: &PoolPaths,
    req: &Request,
    timeout: Duration,
) -> Result<Reply, PoolError> {
    let socket = paths.socket();
    let mut stream = match UnixStream::connect(&socket).await {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(PoolError::NotRunning { socket });
        }
        Err(e) => return Err(PoolError::io(format!("connecting to {}", socket.display()))(e)),
    };
    let mut line = serde_json::to_string(req).unwrap_or_default();
    line.push('\n');
    let exchange = async {
        stream.write_all(line.as_bytes()).await?;
        let mut reader = tokio::io::BufReader::new(stream).take(MAX_REPLY_BYTES);
        let mut reply = String::new();
        reader.read_line(&mut reply).await?;
        Ok::<String, std::io::Error>(reply)
    };
    let reply = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| PoolError::Protocol(format!("no answer within {} s", timeout.as_secs())))?
        .map_err(PoolError::io("talking to the pool's supervisor"))?;
    if reply.is_empty() {
        return Err(PoolError::Protocol("it closed the connection".into()));
    }
    serde_json::from_str(reply.trim_end()).map_err(|e| PoolError::Protocol(e.to_string()))
}

/// Claims a ready guest as session `name` (waiting up to `wait` for one
/// that is starting); the session is then the caller's.
pub async fn claim(
    store: &Store,
    name: &str,
    wait: Duration,
    want: Want,
) -> Result<(SessionDir, SessionRecord), PoolError> {
    let paths = PoolPaths::of(store);
    let req = Request::Claim {
        name: name.to_string(),
        wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        want,
    };
    match request(&paths, &req, wait + Duration::from_secs(30)).await? {
        Reply::Claimed { name, .. } => {
            let dir = store.get(&name).map_err(|e| PoolError::Guest(e.into()))?;
            let rec = dir.load().map_err(|e| PoolError::Guest(e.into()))?;
            Ok((dir, rec))
        }
        Reply::Refused { reason } => Err(PoolError::Refused(reason)),
        other => Err(PoolError::Protocol(format!("{other:?}"))),
    }
}

/// The pool's status.
pub async fn status(store: &Store) -> Result<Status, PoolError> {
    match request(
        &PoolPaths::of(store),
        &Request::Status {},
        Duration::from_secs(10),
    )
    .await?
    {
        Reply::Status { status } => Ok(*status),
        other => Err(PoolError::Protocol(format!("{other:?}"))),
    }
}

/// Tells the supervisor to stop and waits (up to `wait`) until it is gone.
pub async fn stop(store: &Store, wait: Duration) -> Result<(), PoolError> {
    let paths = PoolPaths::of(store);
    match request(&paths, &Request::Stop {}, Duration::from_secs(10)).await? {
        Reply::Stopping => {}
        other => return Err(PoolError::Protocol(format!("{other:?}"))),
    }
    let until = std::time::Instant::now() + wait;
    while std::time::Instant::now() < until {
        if !running(&paths).await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(PoolError::Protocol(format!(
        "it was told to stop and still answers after {} s",
        wait.as_secs()
    )))
}
