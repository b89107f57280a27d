//! The VM guest's channel (docs/architecture.md "A VM guest's channel"): every byte stream between host-cli
//! and a QEMU guest crosses one virtio-serial port, multiplexed by yamux.
//!
//! ```text
//!  host-cli ── session/sandtopd.sock ─┐                 ┌─ /run/sandtop/sandtopd.sock ── sandtopd
//!                                     host link ═ port ═ guest link
//!  egress proxy ── session/egress.sock ┘                 └─ /run/sandtop/egress.sock ── sandtopd's relay
//! ```
//!
//! Both ends run [`bridge`]: connections accepted on a local Unix listener
//! become outbound streams, and inbound streams are connected to a local
//! Unix socket. The host opens the API streams (the guest connects them to
//! sandtopd); the guest opens the egress streams (the host connects them
//! to the session's egress proxy). The guest has no network device: this
//! port is its only way out.
//!
//! Before yamux starts, the host writes one line: the session token
//! ([`write_preamble`], [`read_preamble`]). The guest link writes it into
//! `/run/sandtop/token` (a tmpfs in the VM) for sandtopd; it never appears
//! on QEMU's command line, in an environment or a log.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::poll_fn;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{FuturesAsyncReadCompatExt as _, TokioAsyncReadCompatExt as _};

pub use yamux::Mode;

/// The virtio-serial port's name (QEMU `virtserialport,name=`; in the
/// guest `/sys/class/virtio-ports/vportNpM/name`).
pub const PORT_NAME: &str = "org.sandtop.link";

/// The longest preamble line accepted (a token is 64 hex digits).
pub const MAX_PREAMBLE: usize = 256;

/// A character device (the guest's end of the virtio-serial port) as an
/// async byte stream: opened once, non-blocking; a duplicate of the
/// descriptor (the same open file, not a second open, which the port
/// refuses) serves as the writing half. Both halves are driven by epoll
/// through tokio's pipe types, which accept any non-blocking descriptor.
#[derive(Debug)]
pub struct Port {
    rx: tokio::net::unix::pipe::Receiver,
    tx: tokio::net::unix::pipe::Sender,
}

impl Port {
    /// Opens `path` read-write and non-blocking.
    pub fn open(path: &Path) -> io::Result<Port> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)?;
        let writer = file.try_clone()?;
        Ok(Port {
            rx: tokio::net::unix::pipe::Receiver::from_file_unchecked(file)?,
            tx: tokio::net::unix::pipe::Sender::from_file_unchecked(writer)?,
        })
    }

    /// The `/dev` path of the virtio-serial port called `name`, found
    /// through sysfs (`/sys/class/virtio-ports/*/name`).
    pub fn find(name: &str) -> io::Result<PathBuf> {
        for entry in std::fs::read_dir("/sys/class/virtio-ports")? {
            let entry = entry?;
            let found = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
            if found.trim_end() == name {
                return Ok(Path::new("/dev").join(entry.file_name()));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no virtio-serial port named {name}"),
        ))
    }
}

impl AsyncRead for Port {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.rx).poll_read(cx, buf)
    }
}

impl AsyncWrite for Port {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tx).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tx).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The port stays open: closing the writing half would not tell
        // the host anything (yamux closes its streams itself).
        Poll::Ready(Ok(()))
    }
}

/// Writes the preamble: `secret` and a newline. The secret must be one
/// line of printable ASCII.
pub async fn write_preamble<W: AsyncWrite + Unpin>(w: &mut W, secret: &[u8]) -> io::Result<()> {
    if secret.is_empty()
        || secret.len() >= MAX_PREAMBLE
        || !secret.iter().all(|b| b.is_ascii_graphic())
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the preamble must be one line of printable ASCII",
        ));
    }
    let mut line = Vec::with_capacity(secret.len() + 1);
    line.extend_from_slice(secret);
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

/// Reads the preamble byte by byte (nothing after the newline is
/// consumed: it belongs to yamux). An end of stream before anything came
/// (the host end of a virtio-serial port not connected yet) is retried
/// every `retry`; one in the middle of the line is an error.
pub async fn read_preamble<R: AsyncRead + Unpin>(
    r: &mut R,
    retry: std::time::Duration,
) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    loop {
        let mut b = [0u8; 1];
        if r.read(&mut b).await? == 0 {
            if line.is_empty() {
                tokio::time::sleep(retry).await;
                continue;
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        match b[0] {
            b'\n' => return Ok(line),
            c if c.is_ascii_graphic() && line.len() < MAX_PREAMBLE => line.push(c),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the preamble is not one short line of printable ASCII",
                ));
            }
        }
    }
}

/// What one end of the link does with streams.
#[derive(Debug, Default)]
pub struct Routes {
    /// Connections accepted here become outbound streams.
    pub listen: Option<UnixListener>,
    /// Inbound streams are connected to this socket (none: refused).
    pub connect: Option<PathBuf>,
}

type Opened = oneshot::Sender<yamux::Result<yamux::Stream>>;

/// Runs the link over `io` until the other end closes it or it fails.
pub async fn bridge<S>(io: S, mode: Mode, routes: Routes) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut config = yamux::Config::default();
    // Screenshots are large: let a stream's window grow to 16 MiB.
    config.set_max_connection_receive_window(Some(256 * 1024 * 1024));
    config.set_max_num_streams(1024);
    let mut conn = yamux::Connection::new(io.compat(), config, mode);
    let (open_tx, mut open_rx) = mpsc::channel::<Opened>(64);
    let accept = routes.listen.map(|l| tokio::spawn(accept_loop(l, open_tx)));
    let connect = routes.connect.map(Arc::new);
    let mut waiting: VecDeque<Opened> = VecDeque::new();
    let result = poll_fn(|cx| {
        while let Poll::Ready(Some(req)) = open_rx.poll_recv(cx) {
            waiting.push_back(req);
        }
        while !waiting.is_empty() {
            match conn.poll_new_outbound(cx) {
                Poll::Ready(r) => {
                    if let Some(tx) = waiting.pop_front() {
                        let _ = tx.send(r);
                    }
                }
                Poll::Pending => break,
            }
        }
        loop {
            match conn.poll_next_inbound(cx) {
                Poll::Ready(Some(Ok(stream))) => {
                    let to = connect.clone();
                    tokio::spawn(async move {
                        let Some(to) = to else {
                            tracing::warn!("an inbound stream with nowhere to go: closed");
                            return;
                        };
                        match UnixStream::connect(to.as_path()).await {
                            Ok(unix) => splice(stream, unix).await,
                            // Expected while the daemon starts (host-cli
                            // polls for it).
                            Err(e) => tracing::debug!(
                                socket = %to.display(), error = %e, "inbound stream not connected"
                            ),
                        }
                    });
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io::Error::other(e))),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    if let Some(a) = accept {
        a.abort();
    }
    result
}

async fn accept_loop(listener: UnixListener, open: mpsc::Sender<Opened>) {
    loop {
        let unix = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (tx, rx) = oneshot::channel();
        if open.send(tx).await.is_err() {
            return;
        }
        tokio::spawn(async move {
            match rx.await {
                Ok(Ok(stream)) => splice(stream, unix).await,
                Ok(Err(e)) => tracing::info!(error = %e, "no outbound stream"),
                Err(_) => {}
            }
        });
    }
}

async fn splice(stream: yamux::Stream, mut unix: UnixStream) {
    let mut stream = stream.compat();
    if let Err(e) = tokio::io::copy_bidirectional(&mut stream, &mut unix).await {
        tracing::debug!(error = %e, "stream ended");
    }
    let _ = unix.shutdown().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    /// Two ends over an in-memory pipe: the host's listener reaches a
    /// guest-side echo server and the guest's listener reaches a host-side
    /// one; many streams at once, each byte-exact.
    #[tokio::test]
    async fn streams_cross_both_ways_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let echo = |path: PathBuf| {
            let l = UnixListener::bind(&path).unwrap();
            tokio::spawn(async move {
                loop {
                    let (mut s, _) = l.accept().await.unwrap();
                    tokio::spawn(async move {
                        let (mut r, mut w) = s.split();
                        tokio::io::copy(&mut r, &mut w).await.unwrap();
                    });
                }
            })
        };
        let _e1 = echo(p("guest-daemon.sock"));
        let _e2 = echo(p("host-egress.sock"));
        let (a, b) = tokio::io::duplex(64 * 1024);
        let host = Routes {
            listen: Some(UnixListener::bind(p("host-api.sock")).unwrap()),
            connect: Some(p("host-egress.sock")),
        };
        let guest = Routes {
            listen: Some(UnixListener::bind(p("guest-egress.sock")).unwrap()),
            connect: Some(p("guest-daemon.sock")),
        };
        tokio::spawn(bridge(a, Mode::Client, host));
        tokio::spawn(bridge(b, Mode::Server, guest));
        let mut tasks = Vec::new();
        for i in 0..40usize {
            let path = if i % 2 == 0 {
                p("host-api.sock")
            } else {
                p("guest-egress.sock")
            };
            tasks.push(tokio::spawn(async move {
                let mut s = UnixStream::connect(path).await.unwrap();
                let data: Vec<u8> = (0..(200_000 + i * 1000))
                    .map(|n| (n * 7 + i) as u8)
                    .collect();
                let (mut r, mut w) = s.split();
                let send = async {
                    w.write_all(&data).await.unwrap();
                    w.shutdown().await.unwrap();
                };
                let mut back = Vec::new();
                let recv = r.read_to_end(&mut back);
                let (_, n) = tokio::join!(send, recv);
                n.unwrap();
                assert_eq!(back, data, "stream {i}");
            }));
        }
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .unwrap()
                .unwrap();
        }
    }

    #[tokio::test]
    async fn the_preamble_is_one_line_and_nothing_more_is_read() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        write_preamble(&mut a, b"abc123").await.unwrap();
        a.write_all(b"after").await.unwrap();
        let line = read_preamble(&mut b, Duration::from_millis(1))
            .await
            .unwrap();
        assert_eq!(line, b"abc123");
        let mut rest = [0u8; 5];
        b.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"after");

        for bad in [&b""[..], b"two words", b"new\nline", &[b'x'; 300]] {
            assert!(write_preamble(&mut a, bad).await.is_err(), "{bad:?}");
        }
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(b"abc\x00\n").await.unwrap();
        let e = read_preamble(&mut b, Duration::from_millis(1))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(b"abc").await.unwrap();
        drop(a);
        let e = read_preamble(&mut b, Duration::from_millis(1))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// A virtio-serial port is a character device; a pseudo-terminal pair
    /// is the nearest thing a test host has: bytes written on one side come
    /// out of the [`Port`] and back.
    #[tokio::test]
    async fn a_port_reads_and_writes_a_character_device() {
        use rustix::termios;
        let master =
            rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY)
                .unwrap();
        rustix::pty::grantpt(&master).unwrap();
        rustix::pty::unlockpt(&master).unwrap();
        let name = rustix::pty::ptsname(&master, Vec::new()).unwrap();
        let path = PathBuf::from(name.to_str().unwrap());
        let mut port = Port::open(&path).unwrap();
        // Raw mode: no echo, no line discipline.
        let mut t = termios::tcgetattr(&port.rx).unwrap();
        t.make_raw();
        termios::tcsetattr(&port.rx, termios::OptionalActions::Now, &t).unwrap();
        let master = std::fs::File::from(master);
        let mut master = tokio::fs::File::from_std(master);
        master.write_all(b"ping").await.unwrap();
        master.flush().await.unwrap();
        let mut got = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), port.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"ping");
        port.write_all(b"pong").await.unwrap();
        let mut back = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), master.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&back, b"pong");
    }
}
