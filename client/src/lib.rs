//! `sandtop-client`: the one HTTP/1.1 client of sandtopd's API, and the
//! session token both ends share ([`token`]).
//!
//! What it is: a keep-alive HTTP/1.1 connection (hyper) over any byte
//! stream a [`Connect`] opens — the daemon's Unix socket, a Docker exec
//! stream, a VM link's stream — with the bearer token on every request and
//! replies capped at [`limits::MAX_REPLY_BYTES`]. host-cli's channel and
//! the daemon's own subcommands (`health`, `bench`) and tests use it.
//! What it is not: it reads no reply's meaning; checking replies against
//! the contract is the caller's (host-cli's `channel`).
//!
//! The rule (L5): **a request is never sent twice.** A connection the
//! server closed while idle is replaced *before* sending, when
//! [`SendRequest::ready`] says it is gone; once a request has been handed
//! to a connection, any failure is returned ([`Error::Send`], the outcome
//! unknown) and never retried, since the daemon may already have acted.

pub mod token;

use std::future::Future;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sandtop_protocol::limits;
use tokio::io::{AsyncRead, AsyncWrite};

pub use token::{Token, TokenError};

/// Opens byte streams to one daemon.
pub trait Connect {
    /// The stream HTTP/1.1 runs over.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Why no stream could be opened.
    type Error;
    /// Opens a fresh stream.
    fn connect(&self) -> impl Future<Output = Result<Self::Stream, Self::Error>> + Send;
}

/// The daemon's Unix socket at a path.
#[derive(Debug, Clone)]
pub struct UnixConnector(pub PathBuf);

/// A Unix socket that could not be connected.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to {path}: {source}")]
pub struct UnixConnectError {
    pub path: String,
    pub source: std::io::Error,
}

impl Connect for UnixConnector {
    type Stream = tokio::net::UnixStream;
    type Error = UnixConnectError;

    async fn connect(&self) -> Result<tokio::net::UnixStream, UnixConnectError> {
        tokio::net::UnixStream::connect(&self.0)
            .await
            .map_err(|source| UnixConnectError {
                path: self.0.display().to_string(),
                source,
            })
    }
}

/// Why a request failed. Only [`Error::Send`] and [`Error::Body`] come
/// after the request was handed to the connection.
#[derive(Debug, thiserror::Error)]
pub enum Error<E> {
    /// No stream: nothing was sent.
    #[error("{0}")]
    Connect(E),
    /// The HTTP/1.1 handshake on a fresh stream failed: nothing was sent.
    #[error("HTTP: {0}")]
    Handshake(hyper::Error),
    /// The request could not be built (e.g. an invalid path): nothing was
    /// sent.
    #[error("HTTP: {0}")]
    Request(http::Error),
    /// Sending or reading the reply's head failed: the daemon may have
    /// received the request. Never retried.
    #[error("HTTP: {0}")]
    Send(hyper::Error),
    /// The reply's body could not be read or was larger than
    /// [`limits::MAX_REPLY_BYTES`].
    #[error("HTTP: reading the reply's body: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
}

/// One keep-alive connection to a daemon; requests go out one at a time,
/// in order.
pub struct Client<C: Connect = UnixConnector> {
    connector: C,
    sender: SendRequest<Full<Bytes>>,
    bearer: Option<String>,
}

impl<C: Connect + std::fmt::Debug> std::fmt::Debug for Client<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("connector", &self.connector)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

async fn handshake<C: Connect>(connector: &C) -> Result<SendRequest<Full<Bytes>>, Error<C::Error>> {
    let stream = connector.connect().await.map_err(Error::Connect)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Handshake)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl Client<UnixConnector> {
    /// Connects to the daemon's socket at `path`; `token`, when given, is
    /// sent as the bearer of every request.
    pub async fn connect(
        path: &Path,
        token: Option<String>,
    ) -> Result<Client<UnixConnector>, Error<UnixConnectError>> {
        Client::open(UnixConnector(path.to_path_buf()), token).await
    }
}

impl<C: Connect> Client<C> {
    /// Opens a first connection through `connector`; `bearer`, when given,
    /// is sent as `Authorization: Bearer` on every request.
    pub async fn open(connector: C, bearer: Option<String>) -> Result<Client<C>, Error<C::Error>> {
        let sender = handshake(&connector).await?;
        Ok(Client {
            connector,
            sender,
            bearer,
        })
    }

    /// The connector new connections come from.
    pub fn connector(&self) -> &C {
        &self.connector
    }

    /// Sends one request (a JSON body when `json` is given) and reads the
    /// reply, its body capped at [`limits::MAX_REPLY_BYTES`]. Sent at most
    /// once.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<Response<Bytes>, Error<C::Error>> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "sandtopd");
        if let Some(t) = &self.bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let body = match json {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(b))
            }
            None => Full::new(Bytes::new()),
        };
        let req = req.body(body).map_err(Error::Request)?;
        // The server closes idle keep-alive connections. One that is gone
        // before this request was handed to it is replaced: the request
        // has not been sent, so this cannot repeat it.
        if self.sender.ready().await.is_err() {
            self.sender = handshake(&self.connector).await?;
        }
        // From here on, no retry: the daemon may have received it.
        let resp = self.sender.send_request(req).await.map_err(Error::Send)?;
        let (head, body) = resp.into_parts();
        let bytes = Limited::new(body, limits::MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(Error::Body)?
            .to_bytes();
        Ok(Response::from_parts(head, bytes))
    }

    /// [`Client::send`], for callers that need only the status and the
    /// body.
    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), Error<C::Error>> {
        let resp = self.send(method, path, json).await?;
        Ok((resp.status(), resp.into_body()))
    }
}

#[cfg(test)]
mod tests {
    //! The rule, over in-memory streams (the client is generic over them):
    //! a fake daemon that counts the connections and the request heads it
    //! received.

    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};

    /// What the fake daemon does with each request head it receives.
    #[derive(Debug, Clone, Copy)]
    enum Serve {
        /// Answers it, then closes the connection (idle, from the client's
        /// side).
        AnswerThenClose,
        /// Closes the connection without answering.
        CloseWithoutAnswer,
    }

    #[derive(Debug)]
    struct Fake {
        serve: Serve,
        connections: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
    }

    impl Fake {
        fn new(serve: Serve) -> Fake {
            Fake {
                serve,
                connections: Arc::default(),
                requests: Arc::default(),
            }
        }
    }

    impl Connect for Fake {
        type Stream = DuplexStream;
        type Error = std::convert::Infallible;

        async fn connect(&self) -> Result<DuplexStream, std::convert::Infallible> {
            self.connections.fetch_add(1, Ordering::SeqCst);
            let (client, mut server) = tokio::io::duplex(64 * 1024);
            let serve = self.serve;
            let requests = Arc::clone(&self.requests);
            tokio::spawn(async move {
                // One request head (no bodies in these tests).
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match server.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                requests.fetch_add(1, Ordering::SeqCst);
                if let Serve::AnswerThenClose = serve {
                    let _ = server
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                              content-length: 2\r\n\r\n{}",
                        )
                        .await;
                }
                drop(server);
            });
            Ok(client)
        }
    }

    #[tokio::test]
    async fn a_request_the_daemon_received_is_never_sent_again() {
        let fake = Fake::new(Serve::CloseWithoutAnswer);
        let (connections, requests) = (Arc::clone(&fake.connections), Arc::clone(&fake.requests));
        let mut c = Client::open(fake, Some("t".into())).await.unwrap();
        let err = c
            .request(Method::POST, "/v1/actions", Some(b"{}".to_vec()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Send(_)), "{err}");
        // Give a resend every chance to show.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(requests.load(Ordering::SeqCst), 1, "the request was resent");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_closed_while_idle_is_replaced_before_sending() {
        let fake = Fake::new(Serve::AnswerThenClose);
        let (connections, requests) = (Arc::clone(&fake.connections), Arc::clone(&fake.requests));
        let mut c = Client::open(fake, None).await.unwrap();
        let (status, body) = c.request(Method::GET, "/v1/health", None).await.unwrap();
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"{}"[..]));
        // The daemon has closed the idle connection; wait until the client
        // has seen it, so the next request meets a stale connection.
        let t0 = std::time::Instant::now();
        while !c.sender.is_closed() {
            assert!(t0.elapsed() < Duration::from_secs(5), "never closed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (status, _) = c.request(Method::GET, "/v1/health", None).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        assert_eq!(requests.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn debug_never_shows_the_bearer() {
        let fake = Fake::new(Serve::AnswerThenClose);
        let c = Client::open(fake, Some("s3cret-bearer".into()))
            .await
            .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret-bearer"), "{shown}");
    }
}
