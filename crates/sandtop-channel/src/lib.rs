//! The authenticated link to a session's daemon.
//!
//! 1. A [`Connector`] opens a byte stream to the daemon: its Unix socket
//!    (local sessions, and Docker sessions on Linux through the session
//!    folder) or a Docker exec stream relayed by `sandtopd connect`
//!    (portable, works with the guest's network off and on Docker Desktop).
//! 2. HTTP/1.1 runs over that stream; every request carries the session's
//!    bearer token, which never appears in errors or logs.
//! 3. On open, `/v1/info` is read and a different protocol major is
//!    refused with a clear message (A14).
//! 4. Every reply is untrusted (L4): size-capped, parsed strictly, and a
//!    screenshot is checked against the request (format, size, region,
//!    ScaleMap) and its bytes against its declared format and size before
//!    anyone uses it ([`crate::image_check`]).
//! 5. A request is never sent twice: a keep-alive connection that died
//!    while idle is replaced before sending, never after (L5). The HTTP
//!    client and that rule are `sandtop_client`'s, shared with the daemon.

pub mod image_check;

use std::path::PathBuf;
use std::pin::Pin;

use bytes::Bytes;
use http::{Method, StatusCode, header};
use sandtop_protocol::{
    BatchRequest, BatchResponse, DaemonState, ErrorBody, ErrorCode, Health, Info, InfoReply,
    Screenshot, ScreenshotOptions, ScreenshotResponse, check_protocol, paths,
};
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};

use sandtop_hostkit::secret::Secret;

/// A duplex byte stream to the daemon.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A stream being opened.
pub type Connecting<'a> =
    Pin<Box<dyn std::future::Future<Output = Result<Box<dyn Stream>, ChannelError>> + Send + 'a>>;

/// Opens streams to one daemon.
pub trait Connect: Send + Sync + std::fmt::Debug {
    fn connect(&self) -> Connecting<'_>;
}

/// The daemon's Unix socket.
#[derive(Debug, Clone)]
pub struct UnixConnector(pub PathBuf);

impl Connect for UnixConnector {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let s = tokio::net::UnixStream::connect(&self.0)
                .await
                .map_err(|e| ChannelError::connect(self.0.display().to_string(), e))?;
            Ok(Box::new(s) as Box<dyn Stream>)
        })
    }
}

/// Why talking to the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// No stream to the daemon: nothing was sent. `what` names the way
    /// tried (the socket's path, the exec relay); `source`, when there is
    /// one, is why (the Docker engine's error inside the `io::Error` when
    /// it was the engine's), its text the message's end.
    #[error("cannot reach the daemon: {what}{}", tail(source.as_ref()))]
    Connect {
        what: String,
        #[source]
        source: Option<std::io::Error>,
    },
    /// The exchange with the daemon failed (the handshake, the request,
    /// the reply's head, or the request's body before it was sent).
    #[error("HTTP exchange with the daemon failed: {source}")]
    Exchange {
        #[source]
        source: HttpError,
    },
    /// The exchange was abandoned without an error of its own: the run
    /// stopped, or the caller's client cancelled; the text says which.
    #[error("HTTP exchange with the daemon failed: {0}")]
    Http(String),
    /// The daemon answered with an error body. Its `message` is the
    /// guest's text: kept in the body for the record, never displayed.
    #[error("the daemon refused: {}", refusal(.body))]
    Daemon { status: StatusCode, body: ErrorBody },
    /// The reply broke the contract (L4).
    #[error("the daemon's reply is invalid: {0}")]
    BadReply(String),
    #[error(transparent)]
    Version(#[from] sandtop_protocol::VersionError),
}

/// What broke an HTTP exchange with the daemon ([`ChannelError::Exchange`]).
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The connection's handshake, or sending the request and reading
    /// the reply's head.
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    /// The request could not be built.
    #[error(transparent)]
    Request(#[from] http::Error),
    /// The request's body could not be written as JSON.
    #[error(transparent)]
    Body(#[from] serde_json::Error),
}

/// `: CAUSE` when there is a cause.
fn tail(source: Option<&std::io::Error>) -> String {
    source.map(|e| format!(": {e}")).unwrap_or_default()
}

impl ChannelError {
    /// No stream by way of `what`, because of `source`.
    pub fn connect(what: impl Into<String>, source: std::io::Error) -> ChannelError {
        ChannelError::Connect {
            what: what.into(),
            source: Some(source),
        }
    }

    /// The request's body could not be written.
    fn body(e: serde_json::Error) -> ChannelError {
        ChannelError::Exchange { source: e.into() }
    }
}

/// What an error code means, in our words: a closed set of sentences, so
/// that describing a refusal never repeats text the guest chose
/// (docs/contract.md rule 23a: guest text never speaks as the user). Codes this version does not
/// describe get a generic sentence.
pub fn code_meaning(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::InvalidAction => "the action is invalid, or its text cannot be typed",
        ErrorCode::OutOfBounds => "a coordinate lies outside the screenshot",
        ErrorCode::UnknownKey => "a key name is not known",
        ErrorCode::LimitExceeded => {
            "it exceeds a limit (actions per call, path points, scroll distance, text length or keys)"
        }
        ErrorCode::StaleScaleMap => "the screen changed size since the screenshot",
        ErrorCode::Busy => "another input was running on the desktop",
        ErrorCode::Timeout => "it did not finish in time and was stopped",
        ErrorCode::Cancelled => "it was cancelled",
        ErrorCode::DisplayUnavailable => "the display was not available",
        ErrorCode::InputBlocked => {
            "another client kept the pointer or keyboard frozen, so the input was not delivered"
        }
        ErrorCode::ShuttingDown => "the desktop is shutting down",
        ErrorCode::NoSuchFile => "the guest has no such file",
        _ => "the desktop could not carry it out",
    }
}

/// A refusal described from its code and numbers only.
pub fn refusal(body: &ErrorBody) -> String {
    let mut text = format!("{} ({})", body.code, code_meaning(body.code));
    if let Some(i) = body.index {
        text.push_str(&format!(" at action {i}"));
    }
    if let Some(n) = body.executed {
        text.push_str(&format!(", {n} action(s) completed before it"));
    }
    if body.partial == Some(true) {
        text.push_str(", the failing action had started");
    }
    text
}

/// A JSON error from the daemon's reply, without serde's quotes of the
/// reply (unknown variants and field names are the guest's text).
fn json_problem(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "malformed JSON",
        Category::Data => "JSON of the wrong shape",
        Category::Eof => "truncated JSON",
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

impl ChannelError {
    /// Whether the request may have had effects in the guest (it was sent
    /// and no answer says otherwise).
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            ChannelError::Exchange { .. } | ChannelError::Http(_) | ChannelError::BadReply(_)
        )
    }
}

/// Any of our connectors, for the one client.
impl sandtop_client::Connect for Box<dyn Connect + '_> {
    type Stream = Box<dyn Stream>;
    type Error = ChannelError;

    fn connect(
        &self,
    ) -> impl std::future::Future<Output = Result<Box<dyn Stream>, ChannelError>> + Send {
        self.as_ref().connect()
    }
}

impl From<sandtop_client::Error<ChannelError>> for ChannelError {
    fn from(e: sandtop_client::Error<ChannelError>) -> ChannelError {
        use sandtop_client::Error;
        match e {
            Error::Connect(e) => e,
            Error::Handshake(e) | Error::Send(e) => ChannelError::Exchange { source: e.into() },
            Error::Request(e) => ChannelError::Exchange { source: e.into() },
            Error::Body(e) => ChannelError::BadReply(format!("reading the body: {e}")),
        }
    }
}

/// An open channel.
#[derive(Debug)]
pub struct Channel {
    client: sandtop_client::Client<Box<dyn Connect>>,
    token: Secret,
    info: Info,
    state: DaemonState,
}

impl Channel {
    /// Connects, reads `/v1/info` and checks the protocol version.
    pub async fn open(connector: Box<dyn Connect>, token: Secret) -> Result<Channel, ChannelError> {
        let client =
            sandtop_client::Client::open(connector, Some(token.expose().to_string())).await?;
        let mut ch = Channel {
            client,
            token,
            info: placeholder_info(),
            state: DaemonState::Open,
        };
        let reply: InfoReply = ch.get_json(paths::INFO).await?;
        check_protocol(&reply.info.protocol).map_err(ChannelError::Version)?;
        ch.info = reply.info;
        ch.state = reply.state;
        Ok(ch)
    }

    /// What the daemon said about itself on open.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The daemon's lifecycle state when the channel was opened (`open`,
    /// or `draining`/`closed` after a stop).
    pub fn daemon_state(&self) -> DaemonState {
        self.state
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ChannelError> {
        // Sent at most once; a connection that died while idle is replaced
        // before sending (sandtop_client).
        let resp = self.client.send(method, path, body).await?;
        let status = resp.status();
        let json = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let bytes = resp.into_body();
        if !json {
            return Err(ChannelError::BadReply(format!(
                "status {status} without a JSON body"
            )));
        }
        Ok((status, bytes))
    }

    async fn exchange<T: DeserializeOwned>(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ChannelError> {
        let (status, bytes) = self.send(method, path, body).await?;
        if !status.is_success() {
            let mut body: ErrorBody = serde_json::from_slice(&bytes).map_err(|e| {
                ChannelError::BadReply(format!(
                    "status {status} with an unreadable error ({})",
                    json_problem(&e)
                ))
            })?;
            // The guest is untrusted: it must not be able to make us log or
            // forward the session token by echoing it.
            body.message = self.token.redact(&body.message);
            return Err(ChannelError::Daemon { status, body });
        }
        serde_json::from_slice(&bytes).map_err(|e| ChannelError::BadReply(json_problem(&e)))
    }

    async fn get_json<T: DeserializeOwned>(&mut self, path: &str) -> Result<T, ChannelError> {
        self.exchange(Method::GET, path, None).await
    }

    /// `GET /v1/health`. A daemon whose display is down answers 503 with
    /// a Health body, which is returned like a 200.
    pub async fn health(&mut self) -> Result<Health, ChannelError> {
        let (status, bytes) = self.send(Method::GET, paths::HEALTH, None).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ChannelError::BadReply(format!("health with status {status}: {}", json_problem(&e)))
        })
    }

    /// `POST /v1/clock`: the time the guest's programs read (host only;
    /// `None`: the real time). `Ok(None)` when the guest's daemon keeps
    /// no fake clock (an older image, or a session without one).
    pub async fn set_clock(&mut self, unix_ms: Option<u64>) -> Result<Option<i64>, ChannelError> {
        use sandtop_protocol::clock::{ClockReply, ClockRequest};
        let body = serde_json::to_vec(&ClockRequest { unix_ms }).map_err(ChannelError::body)?;
        match self
            .exchange::<ClockReply>(Method::POST, paths::CLOCK, Some(body))
            .await
        {
            Ok(r) => Ok(Some(r.offset_s)),
            Err(ChannelError::Daemon { body, .. }) if body.code == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /v1/files/read`: one file of the guest user's (host only);
    /// `None` when the guest has no such file. The size is checked against
    /// the bytes and the limit; the bytes are the guest's data.
    pub async fn read_file(&mut self, path: &str) -> Result<Option<Vec<u8>>, ChannelError> {
        use base64::Engine as _;
        use sandtop_protocol::files::{MAX_READ_BYTES, ReadFileReply, ReadFileRequest};
        let body = serde_json::to_vec(&ReadFileRequest { path: path.into() })
            .map_err(ChannelError::body)?;
        let r: ReadFileReply = match self
            .exchange(Method::POST, paths::FILES_READ, Some(body))
            .await
        {
            Err(ChannelError::Daemon { body, .. }) if body.code == ErrorCode::NoSuchFile => {
                return Ok(None);
            }
            // A daemon without --files-root, or one older than the
            // endpoint: not "no record", which would fail a good run.
            Err(ChannelError::Daemon { body, .. }) if body.code == ErrorCode::NotFound => {
                return Err(ChannelError::BadReply(
                    "the guest's daemon reads no files (an image older than host-cli? rebuild it: make guest)"
                        .into(),
                ));
            }
            other => other?,
        };
        if r.size > MAX_READ_BYTES || r.data.len() as u64 > MAX_READ_BYTES.div_ceil(3) * 4 {
            return Err(ChannelError::BadReply(format!(
                "a file of {} bytes: more than {MAX_READ_BYTES}",
                r.size
            )));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&r.data)
            .map_err(|_| ChannelError::BadReply("a file's data is not base64".into()))?;
        if bytes.len() as u64 != r.size {
            return Err(ChannelError::BadReply(format!(
                "a file's size says {} bytes, its data holds {}",
                r.size,
                bytes.len()
            )));
        }
        Ok(Some(bytes))
    }

    /// `POST /v1/screenshot`, validated.
    pub async fn screenshot(
        &mut self,
        options: &ScreenshotOptions,
    ) -> Result<ScreenshotResponse, ChannelError> {
        let body = serde_json::to_vec(options).map_err(ChannelError::body)?;
        let r: ScreenshotResponse = self
            .exchange(Method::POST, paths::SCREENSHOT, Some(body))
            .await?;
        check_reply(&r.screenshot, options, None)?;
        Ok(r)
    }

    /// `POST /v1/cursor`: where the pointer is in the space of the
    /// screenshot `options` produce, with that screenshot's map. The
    /// position is checked to lie inside the map's image.
    pub async fn cursor(
        &mut self,
        options: &ScreenshotOptions,
    ) -> Result<sandtop_protocol::CursorReply, ChannelError> {
        let body = serde_json::to_vec(options).map_err(ChannelError::body)?;
        let r: sandtop_protocol::CursorReply = self
            .exchange(Method::POST, paths::CURSOR, Some(body))
            .await?;
        if r.x >= r.scale_map.image.width || r.y >= r.scale_map.image.height {
            return Err(ChannelError::BadReply(format!(
                "the pointer at ({}, {}) lies outside its own {} map",
                r.x, r.y, r.scale_map.image
            )));
        }
        Ok(r)
    }

    /// `POST /v1/frame`: the next live-view frame after `after` (waits up
    /// to the request's `wait_ms` for a change). The image is checked
    /// like a screenshot's (size, ScaleMap, the format's header) and
    /// returned decoded from base64.
    pub async fn frame(
        &mut self,
        request: &sandtop_protocol::frame::FrameRequest,
    ) -> Result<(sandtop_protocol::frame::FrameReply, Option<Vec<u8>>), ChannelError> {
        let body = serde_json::to_vec(request).map_err(ChannelError::body)?;
        let r: sandtop_protocol::frame::FrameReply = self
            .exchange(Method::POST, paths::FRAME, Some(body))
            .await?;
        let bytes = match (&r.image, r.changed) {
            (Some(img), true) => Some(
                crate::image_check::check_frame(img, r.screen).map_err(ChannelError::BadReply)?,
            ),
            (None, false) => None,
            _ => {
                return Err(ChannelError::BadReply(
                    "a frame's `changed` disagrees with its image".into(),
                ));
            }
        };
        Ok((r, bytes))
    }

    /// `POST /v1/browser/state`: the browser's tabs (starts the guest's
    /// browser when it is not running).
    pub async fn browser_state(&mut self) -> Result<sandtop_protocol::BrowserState, ChannelError> {
        self.exchange(Method::POST, paths::BROWSER_STATE, Some(b"{}".to_vec()))
            .await
    }

    /// `POST /v1/browser/call`: one browser member. Sent at most once.
    pub async fn browser_call(
        &mut self,
        call: &sandtop_protocol::BrowserCall,
    ) -> Result<sandtop_protocol::BrowserReply, ChannelError> {
        let body = serde_json::to_vec(call).map_err(ChannelError::body)?;
        self.exchange(Method::POST, paths::BROWSER_CALL, Some(body))
            .await
    }

    /// [`Channel::browser_call`] with the host's requirements (the URL
    /// policy the daemon checks in the document the call acts on).
    pub async fn browser_request(
        &mut self,
        request: &sandtop_protocol::BrowserRequest,
    ) -> Result<sandtop_protocol::BrowserReply, ChannelError> {
        let body = serde_json::to_vec(request).map_err(ChannelError::body)?;
        self.exchange(Method::POST, paths::BROWSER_CALL, Some(body))
            .await
    }

    /// `POST /v1/actions`, validated. Sent at most once.
    pub async fn act(&mut self, request: &BatchRequest) -> Result<BatchResponse, ChannelError> {
        let body = serde_json::to_vec(request).map_err(ChannelError::body)?;
        let r: BatchResponse = self
            .exchange(Method::POST, paths::ACTIONS, Some(body))
            .await?;
        if r.executed != request.actions.len() {
            return Err(ChannelError::BadReply(format!(
                "{} actions sent, the reply says {} ran",
                request.actions.len(),
                r.executed
            )));
        }
        match (&r.screenshot, request.final_screenshot) {
            (Some(s), true) => {
                check_reply(s, &request.screenshot, request.expect_scale_map.as_ref())?;
            }
            (None, false) => {}
            (Some(_), false) => {
                return Err(ChannelError::BadReply(
                    "a screenshot came back though none was asked for".into(),
                ));
            }
            (None, true) => {
                return Err(ChannelError::BadReply(
                    "the final screenshot is missing".into(),
                ));
            }
        }
        Ok(r)
    }
}

fn placeholder_info() -> Info {
    Info {
        protocol: String::new(),
        daemon_version: String::new(),
        display: None,
        x_display: None,
        capabilities: sandtop_protocol::Capabilities {
            xtest: false,
            shm: false,
            damage: false,
            xfixes: false,
            randr: false,
            formats: Vec::new(),
        },
        limits: sandtop_protocol::Limits::current(),
    }
}

/// Checks a screenshot from the daemon on its own: a consistent ScaleMap,
/// image size within limits, base64 no longer than that size allows, and
/// encoded bytes that really are that format at that size (PNG IHDR read
/// by the png crate, WebP RIFF/VP8L header); nothing is decoded. Returns
/// the encoded image. See [`crate::image_check`].
pub fn check_screenshot(s: &Screenshot) -> Result<Vec<u8>, ChannelError> {
    crate::image_check::check_screenshot(s).map_err(ChannelError::BadReply)
}

/// [`check_screenshot`], and the screenshot is what `asked` asked for
/// (format, size, region; `expect_map` when the batch named one), before
/// anything decodes it (docs/contract.md rule 3a).
pub fn check_reply(
    s: &Screenshot,
    asked: &ScreenshotOptions,
    expect_map: Option<&sandtop_protocol::ScaleMap>,
) -> Result<Vec<u8>, ChannelError> {
    crate::image_check::check_reply(s, asked, expect_map).map_err(ChannelError::BadReply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use sandtop_protocol::{ImageFormat, ScaleMap, Size};

    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().unwrap();
        wr.write_image_data(&vec![90u8; (w * h * 3) as usize])
            .unwrap();
        wr.finish().unwrap();
        out
    }

    fn shot(bytes: &[u8], w: u32, h: u32) -> Screenshot {
        Screenshot {
            format: ImageFormat::Png,
            width: w,
            height: h,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            scale_map: ScaleMap::identity(Size::new(w, h)),
        }
    }

    #[test]
    fn connect_and_exchange_errors_keep_their_source_and_their_text() {
        use std::error::Error as _;
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = ChannelError::connect("/s/sandtopd.sock", refused);
        assert_eq!(
            e.to_string(),
            "cannot reach the daemon: /s/sandtopd.sock: refused"
        );
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        assert_eq!(
            sandtop_hostkit::chain::chain(&e),
            "cannot reach the daemon: /s/sandtopd.sock: refused"
        );
        let none = ChannelError::Connect {
            what: "the exec relay started detached".into(),
            source: None,
        };
        assert_eq!(
            none.to_string(),
            "cannot reach the daemon: the exec relay started detached"
        );
        assert!(none.source().is_none());
        let bad = serde_json::from_str::<u8>("x").unwrap_err();
        let text = bad.to_string();
        let e = ChannelError::body(bad);
        assert_eq!(
            e.to_string(),
            format!("HTTP exchange with the daemon failed: {text}")
        );
        assert!(matches!(
            e.source().and_then(|s| s.downcast_ref::<HttpError>()),
            Some(HttpError::Body(_))
        ));
        assert!(e.outcome_unknown());
    }

    #[test]
    fn screenshots_are_checked_against_their_bytes() {
        assert!(check_screenshot(&shot(&png(64, 32), 64, 32)).is_ok());
        // Declared size differs from the image.
        let mut s = shot(&png(64, 32), 64, 32);
        s.width = 65;
        assert!(check_screenshot(&s).is_err());
        let s = shot(&png(64, 33), 64, 32);
        assert!(
            matches!(check_screenshot(&s), Err(ChannelError::BadReply(m)) if m.contains("64x33"))
        );
        // Not a PNG at all.
        assert!(check_screenshot(&shot(b"GIF89a.......................", 64, 32)).is_err());
        let mut s = shot(&png(64, 32), 64, 32);
        s.data = "%%%".into();
        assert!(check_screenshot(&s).is_err());
    }
}
