//! The egress relay: the guest's only way out, when the session has one.
//!
//! The guest has no network interface but loopback. Programs in it use
//! the HTTP proxy at `127.0.0.1:3128`; this relay carries each connection
//! to a Unix socket in the session folder (`/run/sandtop/egress.sock`),
//! where the host's egress proxy decides what may pass. When the session
//! has no egress (network `none`), that socket does not exist and every
//! connection is closed at once.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Where to listen and where to relay to (`ADDR=SOCKET`).
#[derive(Debug, Clone)]
pub struct RelaySpec {
    pub listen: SocketAddr,
    pub socket: PathBuf,
}

impl std::str::FromStr for RelaySpec {
    type Err = String;
    fn from_str(s: &str) -> Result<RelaySpec, String> {
        let (a, p) = s.split_once('=').ok_or_else(|| {
            format!("`{s}`: expected ADDR=SOCKET, e.g. 127.0.0.1:3128=/run/sandtop/egress.sock")
        })?;
        let listen: SocketAddr = a
            .parse()
            .map_err(|_| format!("`{a}` is not an address:port"))?;
        if !listen.ip().is_loopback() {
            return Err(format!(
                "{listen} is not loopback; the relay only listens on loopback"
            ));
        }
        Ok(RelaySpec {
            listen,
            socket: PathBuf::from(p),
        })
    }
}

/// Runs the relay until the task is dropped.
pub async fn run(spec: RelaySpec) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(spec.listen).await?;
    tracing::info!(listen = %spec.listen, to = %spec.socket.display(), "egress relay is listening");
    loop {
        let (mut client, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "relay accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let socket = spec.socket.clone();
        tokio::spawn(async move {
            // No egress for this session: close at once.
            let Ok(mut upstream) = tokio::net::UnixStream::connect(&socket).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[test]
    fn specs() {
        let s: RelaySpec = "127.0.0.1:3128=/run/sandtop/egress.sock".parse().unwrap();
        assert_eq!(s.listen.port(), 3128);
        assert!("0.0.0.0:3128=/x".parse::<RelaySpec>().is_err());
        assert!("127.0.0.1:3128".parse::<RelaySpec>().is_err());
    }

    #[tokio::test]
    async fn relays_to_the_socket_and_closes_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("egress.sock");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let spec: RelaySpec = format!("127.0.0.1:{port}={}", sock.display())
            .parse()
            .unwrap();
        tokio::spawn(run(spec));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        // No socket yet: the connection is closed without data.
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut buf = Vec::new();
        assert_eq!(c.read_to_end(&mut buf).await.unwrap(), 0);
        // With an upstream: bytes go both ways.
        let l = tokio::net::UnixListener::bind(&sock).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&b).await.unwrap();
        });
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hello");
    }
}
