//! A minimal HTTP/1.1 client over the daemon's Unix socket, for the
//! daemon's own subcommands (`health` for the container HEALTHCHECK,
//! `bench`) and for tests. One keep-alive connection, requests in order;
//! a connection the server closed while idle is replaced before sending
//! (never after: a request is not sent twice).

use std::path::Path;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sandtop_protocol::limits;

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    token: Option<String>,
    path: std::path::PathBuf,
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("HTTP: {0}")]
    Http(String),
}

impl Client {
    /// Connects to the socket at `path`.
    pub async fn connect(path: &Path, token: Option<String>) -> Result<Client, ClientError> {
        let sender = Self::open(path).await?;
        Ok(Client {
            sender,
            token,
            path: path.to_path_buf(),
        })
    }

    async fn open(path: &Path) -> Result<SendRequest<Full<Bytes>>, ClientError> {
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .map_err(|source| ClientError::Connect {
                path: path.display().to_string(),
                source,
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Sends one request; returns the status and the body (capped at
    /// `limits::MAX_REPLY_BYTES`).
    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "sandtopd");
        if let Some(t) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let body = match json {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(b))
            }
            None => Full::new(Bytes::new()),
        };
        let req = req
            .body(body)
            .map_err(|e| ClientError::Http(e.to_string()))?;
        // The server closes idle keep-alive connections; a request that was
        // never sent can safely go out on a new one.
        if self.sender.ready().await.is_err() {
            self.sender = Self::open(&self.path).await?;
        }
        let resp = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), limits::MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?
            .to_bytes();
        Ok((status, body))
    }
}
