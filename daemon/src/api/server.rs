//! Listening and serving: a Unix socket (the default; reached from the host
//! through the session folder or a Docker exec stream) and optionally a
//! loopback TCP port (for VM backends). Never anything but loopback.
//!
//! Each connection is served by hyper's HTTP/1.1 server with a deadline on
//! reading the request head, so a slow client holds only its own
//! connection.
//!
//! Shutdown, within one drain deadline ([`DRAIN_TIMEOUT`]):
//! 1. the stop is requested ([`Lifecycle::stop`]): new work (actions,
//!    screenshots, browser calls) is refused with `shutting_down`, while
//!    the listeners keep accepting so health and info still answer
//!    (`/v1/info` says `draining`);
//! 2. once no work is in flight (`closed`), or at the deadline, the
//!    listeners stop accepting and open connections finish the request
//!    they are on (keep-alive ends) with what is left of the deadline;
//! 3. `serve` returns and the daemon shuts its display down. Its socket
//!    then refuses connections until the daemon exits.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use super::lifecycle::Lifecycle;

/// How long a client may take to send a request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for requests in flight (work, then the
/// connections' last requests), in all.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(8);

/// Why the daemon could not listen.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("another daemon already listens on {0}")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("{addr} is not a loopback address; the daemon never listens beyond loopback")]
    NotLoopback { addr: SocketAddr },
    #[error("cannot listen on {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

/// Binds the Unix socket at `path` (mode 0600), replacing a stale socket
/// left by a dead daemon but never a live one.
pub async fn bind_unix(path: &Path) -> Result<Listener, ListenError> {
    let io = |source| ListenError::Io {
        what: path.display().to_string(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(ListenError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io)?;
        }
        Ok(_) => return Err(ListenError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    // Bound beside it, made 0600, then linked into place: the socket
    // appears at `path` only once it listens, with its final mode. (Bound
    // at `path` itself, it exists between bind(2) and listen(2), and a
    // client that waits for the file can be refused: an x11-tier test
    // was, under load.) link(2) never replaces anything: a daemon that
    // took the path meanwhile makes this one fail (InUse), as bind(2)
    // would have. The staging name is shorter than most socket names,
    // for sun_path's 108 bytes.
    static BINDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = BINDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let staging = path.with_file_name(format!(".{}.{n}", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    let listener = UnixListener::bind(&staging).map_err(io)?;
    let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::hard_link(&staging, path));
    let _ = std::fs::remove_file(&staging);
    match placed {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ListenError::InUse(path.to_path_buf()));
        }
        Err(e) => return Err(io(e)),
    }
    Ok(Listener::Unix(listener, path.to_path_buf()))
}

/// Binds a loopback TCP address.
pub async fn bind_tcp(addr: SocketAddr) -> Result<Listener, ListenError> {
    if !addr.ip().is_loopback() {
        return Err(ListenError::NotLoopback { addr });
    }
    let l = TcpListener::bind(addr)
        .await
        .map_err(|source| ListenError::Io {
            what: addr.to_string(),
            source,
        })?;
    Ok(Listener::Tcp(l))
}

impl Listener {
    /// Where it listens, for the log.
    pub fn describe(&self) -> String {
        match self {
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| "tcp:?".into()),
        }
    }
}

/// The HTTP/1.1 settings every connection is served with (a deadline of
/// `header_timeout` on reading a request head, keep-alive). Public so that
/// the `daemon_http` fuzz target serves the router exactly this way.
pub fn http1(header_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    builder
}

fn serve_conn<IO>(router: &Router, graceful: &GracefulShutdown, header_timeout: Duration, io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router.clone());
    let conn = http1(header_timeout).serve_connection(TokioIo::new(io), service);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    });
}

/// Serves `router` on `listeners` until `shutdown` resolves, then stops
/// accepting and lets open connections finish their request (no work
/// drain: for test daemons that just end).
pub async fn serve(router: Router, listeners: Vec<Listener>, shutdown: impl Future<Output = ()>) {
    serve_with(router, listeners, HEADER_READ_TIMEOUT, None, shutdown).await;
}

/// The daemon's way: serves `router` on `listeners` until `shutdown`
/// resolves, then stops `lifecycle` (the router's, `ApiState::lifecycle`),
/// drains the work in flight while still accepting, and closes (see the
/// module's docs).
pub async fn serve_draining(
    router: Router,
    listeners: Vec<Listener>,
    lifecycle: Arc<Lifecycle>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with(
        router,
        listeners,
        HEADER_READ_TIMEOUT,
        Some(lifecycle),
        shutdown,
    )
    .await;
}

/// [`serve`], or [`serve_draining`] with a `lifecycle`, with another limit
/// on how long a client may take to send a request head (tests use a short
/// one instead of waiting 10 real seconds).
pub async fn serve_with(
    router: Router,
    listeners: Vec<Listener>,
    header_timeout: Duration,
    lifecycle: Option<Arc<Lifecycle>>,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for listener in listeners {
        let router = router.clone();
        let mut stop = stop_rx.clone();
        // Each listener accepts on its own task and watches its own
        // connections; the task hands the watcher back for draining.
        tasks.push(tokio::spawn(async move {
            let graceful = GracefulShutdown::new();
            loop {
                let accepted = tokio::select! {
                    _ = stop.changed() => break,
                    a = accept(&listener) => a,
                };
                match accepted {
                    Ok(Accepted::Unix(s)) => serve_conn(&router, &graceful, header_timeout, s),
                    Ok(Accepted::Tcp(s)) => serve_conn(&router, &graceful, header_timeout, s),
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            graceful
        }));
    }
    shutdown.await;
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    let mut drained = true;
    if let Some(lifecycle) = lifecycle {
        lifecycle.stop();
        tracing::info!(
            work_in_flight = lifecycle.work_in_flight(),
            "stopping: new work is refused; draining the work in flight"
        );
        drained = tokio::time::timeout_at(deadline, lifecycle.drained())
            .await
            .is_ok();
        if !drained {
            tracing::warn!(
                work_in_flight = lifecycle.work_in_flight(),
                "work still in flight after the drain deadline; closing it"
            );
        }
    }
    let _ = stop_tx.send(true);
    let mut watchers = Vec::new();
    for t in tasks {
        if let Ok(g) = t.await {
            watchers.push(g);
        }
    }
    let drain = async {
        for g in watchers {
            g.shutdown().await;
        }
    };
    if tokio::time::timeout_at(deadline, drain).await.is_err() && drained {
        tracing::warn!("requests still in flight after the drain deadline; closing them");
    }
}

enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(l: &Listener) -> std::io::Result<Accepted> {
    match l {
        Listener::Unix(u, _) => u.accept().await.map(|(s, _)| Accepted::Unix(s)),
        Listener::Tcp(t) => t.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            Accepted::Tcp(s)
        }),
    }
}
