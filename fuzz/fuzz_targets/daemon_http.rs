//! The daemon's HTTP handling end to end: the input's bytes are one client's
//! side of a connection (request lines, headers, bodies, pipelined or cut
//! short), served over an in-memory duplex stream by hyper's HTTP/1.1
//! server with the daemon's own settings (`api::server::http1`) and the
//! daemon's real router (`api::router`: the guard — browser headers, Host,
//! bearer token —, the body limits, the strict JSON readers, the handlers,
//! the error normalisation). The desktop task runs with a driver that
//! cannot connect (no X display), so work is answered `display_unavailable`.
//!
//! Input: the first byte picks the mode. Odd: `Authorization: Bearer
//! <token>` and `Host: localhost` are inserted after the first line, so the
//! request reaches past the guard. Even: the rest is sent as it is.
//!
//! Client: writes everything, then shuts its side down as soon as the
//! server waits for more bytes with no request being answered (or with the
//! answer waiting for body bytes: a Content-Length larger than the data),
//! and reads until the server closes.
//!
//! Checks (a panic is a finding):
//! - the connection ends within 200 ms of the client closing its side;
//! - every response begins `HTTP/1.1 ` (`HTTP/1.0 ` to an HTTP/1.0
//!   request: hyper answers in the peer's version) and a 3-digit status,
//!   has a Content-Length and no more body than that; a JSON body is
//!   an `ErrorBody` whose code gives the status, or the health reply;
//! - without the token, nothing is 2xx, and what the router answers is the
//!   guard's refusal or what health (exempt from the token) can say.
#![no_main]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use sandtop_protocol::{ErrorBody, ErrorCode, Health, HealthStatus};
use sandtopd::api::{self, ApiState};
use sandtopd::driver::{Driver, DriverError};
use sandtopd::supervise::DisplayHealth;
use sandtop_client::Token;
use tokio::io::{
    AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, DuplexStream, ReadBuf,
};
use tokio::sync::Notify;

const TOKEN: &str = "5d1e0c8a9b7f4e3d2c1b0a99887766554433221100ffeeddccbbaa9988776655";
/// How long the client waits for the server to go quiet before closing
/// anyway (a safety net: it closes as soon as the server waits on it).
const QUIET_WAIT: Duration = Duration::from_millis(100);
/// How long the connection may stay open after the client closed its side.
const CLOSE_WAIT: Duration = Duration::from_millis(200);

struct Fixture {
    rt: tokio::runtime::Runtime,
    router: Router,
    /// The request head inserted in the authenticated mode.
    auth: Vec<u8>,
    /// DAEMON_HTTP_SHOW set: print each exchange (to read a corpus).
    show: bool,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // No display: every connect fails, as when X is gone.
        let (desktop, _thread) = sandtopd::desktop::spawn(Box::new(|| {
            Err::<Box<dyn Driver>, _>(DriverError::Display("no display in the fuzz target".into()))
        }));
        let token = Token::parse(TOKEN).expect("token");
        let state = Arc::new(ApiState::new(
            desktop,
            token,
            Arc::new(DisplayHealth::default()),
        ));
        let router = api::router(state);
        let auth = format!("Authorization: Bearer {TOKEN}\r\nHost: localhost\r\n").into_bytes();
        let show = std::env::var_os("DAEMON_HTTP_SHOW").is_some();
        Fixture {
            rt,
            router,
            auth,
            show,
        }
    })
}

/// What the client watches on the server's side.
#[derive(Default)]
struct Probe {
    /// The server's last read of the connection found no bytes.
    read_waiting: AtomicBool,
    /// Requests given to the router and not answered yet.
    in_flight: AtomicUsize,
    /// The router's last read of a request body found no bytes.
    body_waiting: AtomicBool,
    /// The connection ended.
    done: AtomicBool,
    notify: Notify,
}

impl Probe {
    fn set(&self, flag: &AtomicBool, value: bool) {
        flag.store(value, Ordering::Relaxed);
        if value {
            self.notify.notify_one();
        }
    }

    /// Whether only more bytes, or their end, can move the server on.
    fn quiet(&self) -> bool {
        self.done.load(Ordering::Relaxed)
            || (self.read_waiting.load(Ordering::Relaxed)
                && (self.in_flight.load(Ordering::Relaxed) == 0
                    || self.body_waiting.load(Ordering::Relaxed)))
    }
}

/// The server's end of the stream, reporting when it waits for bytes.
struct ServerIo {
    io: DuplexStream,
    probe: Arc<Probe>,
}

impl AsyncRead for ServerIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        this.probe.set(&this.probe.read_waiting, r.is_pending());
        r
    }
}

impl AsyncWrite for ServerIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A request body, reporting when the router waits for its bytes.
struct WatchedBody {
    inner: Incoming,
    probe: Arc<Probe>,
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        this.probe.set(&this.probe.body_waiting, r.is_pending());
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Counts the requests in flight; the router answers them.
struct Answered(Arc<Probe>);

impl Drop for Answered {
    fn drop(&mut self) {
        let p = &self.0;
        p.in_flight.fetch_sub(1, Ordering::Relaxed);
        // The answer is yet to be written: wait for the server's next read.
        p.read_waiting.store(false, Ordering::Relaxed);
        p.body_waiting.store(false, Ordering::Relaxed);
        p.notify.notify_one();
    }
}

#[derive(Clone)]
struct Counted {
    router: Router,
    probe: Arc<Probe>,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<axum::response::Response, Infallible>> + Send>>;

impl tower_service::Service<Request<Incoming>> for Counted {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower_service::Service::<Request<WatchedBody>>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, req: Request<Incoming>) -> BoxFuture {
        let probe = Arc::clone(&self.probe);
        probe.in_flight.fetch_add(1, Ordering::Relaxed);
        probe.body_waiting.store(false, Ordering::Relaxed);
        let req = req.map(|inner| WatchedBody {
            inner,
            probe: Arc::clone(&probe),
        });
        let answer = tower_service::Service::call(&mut self.router, req);
        Box::pin(async move {
            let _answered = Answered(probe);
            answer.await
        })
    }
}

/// Serves one connection; returns what the server wrote.
async fn exchange(router: &Router, request: &[u8]) -> Vec<u8> {
    let (client, server) = tokio::io::duplex(1 << 20);
    let probe = Arc::new(Probe::default());
    let io = ServerIo {
        io: server,
        probe: Arc::clone(&probe),
    };
    let service = TowerToHyperService::new(Counted {
        router: router.clone(),
        probe: Arc::clone(&probe),
    });
    let conn = api::server::http1(api::server::HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    let (mut rd, mut wr) = tokio::io::split(client);
    let closed = Notify::new();
    let serve = async {
        let _ = conn.await;
        probe.set(&probe.done, true);
    };
    let send = async {
        let _ = wr.write_all(request).await;
        if !request.is_empty() {
            // The server has yet to read what was just written.
            probe.read_waiting.store(false, Ordering::Relaxed);
        }
        let quiet = async {
            loop {
                let notified = probe.notify.notified();
                if probe.quiet() {
                    break;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(QUIET_WAIT, quiet).await;
        let _ = wr.shutdown().await;
        closed.notify_one();
    };
    let receive = async {
        let mut out = Vec::new();
        let _ = rd.read_to_end(&mut out).await;
        out
    };
    let all = async { tokio::join!(serve, send, receive).2 };
    tokio::pin!(all);
    // Bounded: after the client closed, the server has CLOSE_WAIT to end.
    tokio::select! {
        out = &mut all => out,
        () = async {
            closed.notified().await;
            tokio::time::sleep(CLOSE_WAIT).await;
        } => panic!("the connection was still open {CLOSE_WAIT:?} after the client closed its side"),
    }
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// What a request without the token may be answered by the router: the
/// guard's refusals, and what health (exempt from the token) can say.
fn allowed_without_token(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::MethodNotAllowed
            | ErrorCode::PayloadTooLarge
    )
}

fn check(out: &[u8], authed: bool) {
    let mut rest = out;
    while !rest.is_empty() {
        let line_ok = rest.len() > 12
            && (rest.starts_with(b"HTTP/1.1 ") || rest.starts_with(b"HTTP/1.0 "))
            && rest[9..12].iter().all(u8::is_ascii_digit)
            && rest[12] == b' ';
        assert!(
            line_ok,
            "not a status line: {:?}",
            String::from_utf8_lossy(&rest[..rest.len().min(64)])
        );
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(rest) {
            Ok(httparse::Status::Complete(n)) => n,
            other => panic!(
                "unreadable response head ({other:?}): {:?}",
                String::from_utf8_lossy(rest)
            ),
        };
        let status = resp.code.expect("status");
        let mut length = 0usize;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .expect("a numeric Content-Length");
            }
            assert!(
                !h.name.eq_ignore_ascii_case("transfer-encoding"),
                "a chunked response"
            );
        }
        rest = &rest[head..];
        // A HEAD reply or a 1xx has no body of its own (a HEAD reply still
        // gives the length); a JSON body never starts like a status line.
        let body = if rest.is_empty() || rest.starts_with(b"HTTP/") {
            &[][..]
        } else {
            assert!(rest.len() >= length, "a truncated response body");
            let (body, after) = rest.split_at(length);
            rest = after;
            body
        };
        if !authed {
            assert!(
                !(200..300).contains(&status),
                "status {status} without the token"
            );
        }
        if body.is_empty() {
            continue;
        }
        if let Ok(e) = serde_json::from_slice::<ErrorBody>(body) {
            assert_eq!(e.code.http_status(), status, "{e:?}");
            assert!(
                authed || allowed_without_token(e.code),
                "{e:?} without the token"
            );
        } else if let Ok(h) = serde_json::from_slice::<Health>(body) {
            // No display: health says so.
            assert_eq!((h.status, status), (HealthStatus::Down, 503), "{h:?}");
        } else {
            panic!(
                "a body that is neither an error nor health: {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, raw)) = data.split_first() else {
        return;
    };
    let fx = fixture();
    let authed = mode & 1 == 1;
    let mut request = Vec::with_capacity(raw.len() + fx.auth.len() + 2);
    if authed {
        match raw.iter().position(|&b| b == b'\n') {
            Some(i) => {
                request.extend_from_slice(&raw[..=i]);
                request.extend_from_slice(&fx.auth);
                request.extend_from_slice(&raw[i + 1..]);
            }
            None => {
                request.extend_from_slice(raw);
                request.extend_from_slice(b"\r\n");
                request.extend_from_slice(&fx.auth);
                request.extend_from_slice(b"\r\n");
            }
        }
    } else {
        request.extend_from_slice(raw);
    }
    // The raw mode may still carry the token only if the input spells it.
    let with_token = authed || contains_ignore_case(raw, TOKEN.as_bytes());
    let out = fx.rt.block_on(exchange(&fx.router, &request));
    if fx.show {
        eprintln!(
            ">>> {}\n<<< {}",
            String::from_utf8_lossy(&request),
            String::from_utf8_lossy(&out)
        );
    }
    check(&out, with_token);
});
