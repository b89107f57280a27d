//! Byte streams to a Docker guest's daemon: the two paths of the channel.
//!
//! - **exec** (portable; works with the guest's network off and on Docker
//!   Desktop): a Docker exec of `sandtopd connect --socket
//!   /run/sandtop/sandtopd.sock`, stdin and stdout attached, no TTY. The
//!   exec's multiplexed output is demultiplexed by bollard; [`ExecStream`]
//!   keeps stdout as the read side and the exec's stdin as the write side,
//!   so HTTP/1.1 runs over it unchanged. Stderr (the relay's own errors) is
//!   kept, capped, for the error message.
//! - **socket** (Linux, faster): the daemon's socket in the session's
//!   `guest/` folder, connected from the host. That folder is writable by
//!   the guest, so the socket is opened `O_PATH | O_NOFOLLOW`, checked to
//!   be a socket, and connected through `/proc/self/fd/N`: a symlink or a
//!   FIFO planted by the guest cannot redirect the host (and its token) to
//!   another host socket. This also sidesteps the 108-byte `sun_path`
//!   limit for deep state directories.
//!
//! [`ChannelMode`] picks: `SANDTOP_CHANNEL=socket|exec` forces one; the
//! default ([`ChannelMode::Auto`]) tries the socket and falls back to exec
//! (e.g. Docker Desktop, or a host user who cannot open the guest's socket).

use std::io;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bytes::Bytes;
use futures_util::Stream as FuturesStream;
use sandtop_protocol::session::{SOCKET_NAME, SOCKET_PATH};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use sandtop_channel::{ChannelError, Connect, Connecting, Stream};

/// The relay run by the exec path.
pub const GUEST_SANDTOPD: &str = "/usr/local/bin/sandtopd";
/// The environment variable that forces a path.
pub const CHANNEL_ENV: &str = "SANDTOP_CHANNEL";

/// Which path the channel takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelMode {
    /// The socket when it can be opened, else exec.
    Auto,
    /// Only the bind-mounted socket.
    Socket,
    /// Only a Docker exec stream.
    Exec,
}

impl ChannelMode {
    /// `SANDTOP_CHANNEL` (`auto`, `socket`, `exec`; unset means auto).
    pub fn from_env() -> crate::Result<ChannelMode> {
        ChannelMode::parse(std::env::var_os(CHANNEL_ENV).as_deref())
    }

    /// A value of `SANDTOP_CHANNEL` (`None`: unset).
    pub fn parse(value: Option<&std::ffi::OsStr>) -> crate::Result<ChannelMode> {
        let Some(v) = value else {
            return Ok(ChannelMode::Auto);
        };
        match v.to_str().map(str::trim) {
            Some("" | "auto") => Ok(ChannelMode::Auto),
            Some("socket") => Ok(ChannelMode::Socket),
            Some("exec") => Ok(ChannelMode::Exec),
            _ => Err(crate::GuestError::BadChannelMode {
                value: v.to_string_lossy().chars().take(20).collect(),
            }),
        }
    }
}

impl std::fmt::Display for ChannelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChannelMode::Auto => "auto",
            ChannelMode::Socket => "socket",
            ChannelMode::Exec => "exec",
        })
    }
}

/// The daemon's socket in a session's `guest/` folder, opened without
/// following links.
#[derive(Debug, Clone)]
pub struct GuestSocketConnector {
    guest_dir: PathBuf,
}

impl GuestSocketConnector {
    pub fn new(guest_dir: PathBuf) -> GuestSocketConnector {
        GuestSocketConnector { guest_dir }
    }

    async fn open(&self) -> io::Result<tokio::net::UnixStream> {
        let fd = open_socket_node(&self.guest_dir)?;
        // The descriptor stays open until the connect returns: the path
        // names that very inode, whatever the guest does to the folder.
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let stream = tokio::net::UnixStream::connect(&path).await;
        drop(fd);
        stream
    }
}

/// Opens `dir/sandtopd.sock` as an `O_PATH` descriptor, refusing symlinks
/// (at the last component; `dir` itself is in a host-only folder) and
/// anything that is not a socket.
fn open_socket_node(dir: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{FileType, Mode, OFlags};
    let d = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd = rustix::fs::openat(
        &d,
        SOCKET_NAME,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::Socket {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{SOCKET_NAME} in the session folder is a {kind:?}, not a socket; refusing it"),
        ));
    }
    Ok(fd)
}

impl Connect for GuestSocketConnector {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let s = self.open().await.map_err(|e| {
                ChannelError::connect(self.guest_dir.join(SOCKET_NAME).display().to_string(), e)
            })?;
            Ok(Box::new(s) as Box<dyn Stream>)
        })
    }
}

/// A Docker exec of `sandtopd connect` in one container.
#[derive(Debug, Clone)]
pub struct ExecConnector {
    docker: Docker,
    container: String,
}

impl ExecConnector {
    pub fn new(docker: Docker, container: String) -> ExecConnector {
        ExecConnector { docker, container }
    }

    /// Starts the relay and returns its stream.
    pub async fn open(&self) -> Result<ExecStream, ChannelError> {
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            // The container's own user; said again so that an image
            // change cannot turn the relay into root.
            user: Some(format!(
                "{}:{}",
                crate::ids::GUEST_UID,
                crate::ids::GUEST_GID
            )),
            // Nothing of the host's environment: the exec inherits the
            // container's (scrubbed) one.
            env: None,
            cmd: Some(vec![
                GUEST_SANDTOPD.to_string(),
                "connect".to_string(),
                "--socket".to_string(),
                SOCKET_PATH.to_string(),
            ]),
            privileged: Some(false),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(&self.container, config)
            .await
            .map_err(|e| {
                ChannelError::connect(
                    format!("docker exec in {}", self.container),
                    io::Error::other(e),
                )
            })?;
        let started = self
            .docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    // Initial read buffer: a screenshot reply is ~1 MB.
                    output_capacity: Some(256 * 1024),
                }),
            )
            .await
            .map_err(|e| ChannelError::connect("starting the exec relay", io::Error::other(e)))?;
        match started {
            StartExecResults::Attached { output, input } => Ok(ExecStream {
                output,
                input,
                pending: Bytes::new(),
                stderr: Vec::new(),
                got_stdout: false,
                eof: false,
            }),
            StartExecResults::Detached => Err(ChannelError::Connect {
                what: "the exec relay started detached".to_string(),
                source: None,
            }),
        }
    }
}

impl Connect for ExecConnector {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move { Ok(Box::new(self.open().await?) as Box<dyn Stream>) })
    }
}

type ExecOutput =
    Pin<Box<dyn FuturesStream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// The exec's stdout (read) and stdin (write) as one duplex stream.
pub struct ExecStream {
    output: ExecOutput,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    pending: Bytes,
    stderr: Vec<u8>,
    got_stdout: bool,
    eof: bool,
}

impl std::fmt::Debug for ExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecStream")
            .field("pending", &self.pending.len())
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

/// Most relay stderr kept for an error message.
const MAX_STDERR: usize = 2048;

/// Guest-controlled text made printable and short.
pub fn sanitize(bytes: &[u8], max_chars: usize) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .take(max_chars)
        .collect::<String>()
        .trim()
        .to_string()
}

impl AsyncRead for ExecStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            match this.output.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(
                    LogOutput::StdOut { message } | LogOutput::Console { message },
                ))) => {
                    this.got_stdout = true;
                    this.pending = message;
                }
                Poll::Ready(Some(Ok(LogOutput::StdErr { message }))) => {
                    let room = MAX_STDERR.saturating_sub(this.stderr.len());
                    this.stderr
                        .extend_from_slice(&message[..message.len().min(room)]);
                }
                Poll::Ready(Some(Ok(LogOutput::StdIn { .. }))) => {}
                Poll::Ready(Some(Err(e))) => {
                    this.eof = true;
                    return Poll::Ready(Err(io::Error::other(format!("exec stream: {e}"))));
                }
                Poll::Ready(None) => {
                    this.eof = true;
                    if !this.got_stdout && !this.stderr.is_empty() {
                        // The relay failed before any byte of HTTP: say why.
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            format!(
                                "the relay in the guest said: {}",
                                sanitize(&this.stderr, 300)
                            ),
                        )));
                    }
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl AsyncWrite for ExecStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().input.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().input.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().input.as_mut().poll_shutdown(cx)
    }
}

/// Which path a connector used last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathUsed {
    None,
    Socket,
    Exec,
}

/// Socket first, exec when the socket cannot be opened; or one of them
/// only, as [`ChannelMode`] says.
#[derive(Debug)]
pub struct DockerConnector {
    mode: ChannelMode,
    socket: GuestSocketConnector,
    exec: ExecConnector,
    last: AtomicU8,
}

impl DockerConnector {
    pub fn new(mode: ChannelMode, guest_dir: PathBuf, docker: Docker, container: String) -> Self {
        DockerConnector {
            mode,
            socket: GuestSocketConnector::new(guest_dir),
            exec: ExecConnector::new(docker, container),
            last: AtomicU8::new(0),
        }
    }

    /// The path the last successful connect took.
    pub fn last_path(&self) -> PathUsed {
        match self.last.load(Ordering::Acquire) {
            1 => PathUsed::Socket,
            2 => PathUsed::Exec,
            _ => PathUsed::None,
        }
    }
}

impl Connect for DockerConnector {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let socket_err = match self.mode {
                ChannelMode::Exec => None,
                ChannelMode::Socket | ChannelMode::Auto => match self.socket.connect().await {
                    Ok(s) => {
                        self.last.store(1, Ordering::Release);
                        return Ok(s);
                    }
                    Err(e) if self.mode == ChannelMode::Socket => return Err(e),
                    Err(e) => Some(e),
                },
            };
            match self.exec.connect().await {
                Ok(s) => {
                    if let Some(e) = socket_err {
                        tracing::debug!("socket path unavailable ({e}); using the exec stream");
                    }
                    self.last.store(2, Ordering::Release);
                    Ok(s)
                }
                Err(e) => Err(match socket_err {
                    Some(se) => {
                        ChannelError::connect(format!("{se}; and by exec"), io::Error::other(e))
                    }
                    None => e,
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GuestError;

    #[test]
    fn the_channel_setting_takes_three_words_and_refuses_the_rest() {
        use std::ffi::OsStr;
        let parse = |v: Option<&str>| ChannelMode::parse(v.map(OsStr::new));
        assert_eq!(parse(None).unwrap(), ChannelMode::Auto);
        assert_eq!(parse(Some("")).unwrap(), ChannelMode::Auto);
        assert_eq!(parse(Some(" exec\n")).unwrap(), ChannelMode::Exec);
        assert_eq!(parse(Some("socket")).unwrap(), ChannelMode::Socket);
        let e = parse(Some("tcp://guest:1")).unwrap_err();
        assert!(
            matches!(&e, GuestError::BadChannelMode { value } if value == "tcp://guest:1"),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("not one of auto, socket, exec"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn socket_path_refuses_symlinks_and_non_sockets() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("guest");
        std::fs::create_dir(&dir).unwrap();
        let c = GuestSocketConnector::new(dir.clone());
        // Missing.
        assert!(c.connect().await.is_err());
        // A real socket elsewhere, linked in by "the guest".
        let elsewhere = tmp.path().join("host-service.sock");
        let _l = tokio::net::UnixListener::bind(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join(SOCKET_NAME)).unwrap();
        let err = c.connect().await.err().unwrap().to_string();
        assert!(err.contains("not a socket"), "{err}");
        std::fs::remove_file(dir.join(SOCKET_NAME)).unwrap();
        // A regular file.
        std::fs::write(dir.join(SOCKET_NAME), b"x").unwrap();
        let err = c.connect().await.err().unwrap().to_string();
        assert!(err.contains("not a socket"), "{err}");
        std::fs::remove_file(dir.join(SOCKET_NAME)).unwrap();
        // The real thing works.
        let _l2 = tokio::net::UnixListener::bind(dir.join(SOCKET_NAME)).unwrap();
        assert!(c.connect().await.is_ok());
    }

    #[test]
    fn modes_from_env_strings() {
        // Parsing only; the environment itself is process-global.
        for (s, m) in [
            ("auto", ChannelMode::Auto),
            ("socket", ChannelMode::Socket),
            ("exec", ChannelMode::Exec),
        ] {
            assert_eq!(
                <ChannelMode as clap::ValueEnum>::from_str(s, false).unwrap(),
                m
            );
            assert_eq!(m.to_string(), s);
        }
    }

    #[test]
    fn guest_text_is_made_printable() {
        assert_eq!(sanitize(b"a\x1b[31mb\r\n", 100), "a [31mb");
        assert_eq!(sanitize(&[0xff, b'x'], 100), "\u{fffd}x");
        assert_eq!(sanitize(b"abcdef", 3), "abc");
    }
}
