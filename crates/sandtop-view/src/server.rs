//! The view's HTTP side (axum) and its WebSocket (tokio-tungstenite over
//! hyper's upgrade; no framing of ours).
//!
//! Routes: `/login?t=TOKEN` (spends the token, sets the cookie, answers
//! the page with its page key in it), `/` and its two assets (embedded in
//! the binary), `/ws` (frames and events out, commands in),
//! `/snapshot.png` (a full-resolution PNG on demand). Every request
//! passes [`super::auth`]: the Host first, then the cookie; `/ws` also
//! the Origin and the page key (a subprotocol entry), `/snapshot.png`
//! the page key (a header). Every answer carries a
//! Content-Security-Policy that lets the page load only itself.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::auth::{Auth, Grant, Refusal};
use super::hub::Hub;
use sandtop_control::wire::{Command, Event};

/// The page and its assets.
const INDEX: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const APP_CSS: &str = include_str!("page/app.css");

/// The page's slot for its key: empty in the page `/` serves, filled in
/// the login's answer only.
const KEY_META: &str = "<meta name=\"sandtop-page-key\" content=\"\">";

/// The largest message a page may send (a command; typed text is capped
/// far below by the action limits).
const MAX_PAGE_MESSAGE: usize = 256 * 1024;

/// What the handlers share.
impl std::fmt::Debug for ViewState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewState").finish_non_exhaustive()
    }
}

pub struct ViewState {
    pub auth: Auth,
    pub hub: Arc<Hub>,
    /// Takes a full-resolution PNG of the screen.
    pub snapshot: Box<dyn Fn() -> SnapshotFuture + Send + Sync>,
}

pub type SnapshotFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, crate::Error>> + Send>>;

pub fn router(state: Arc<ViewState>) -> Router {
    Router::new()
        .route("/login", get(login))
        .route("/", get(index))
        .route("/app.js", get(app_js))
        .route("/app.css", get(app_css))
        .route("/ws", get(ws))
        .route("/snapshot.png", get(snapshot))
        .fallback(|| async { plain(StatusCode::NOT_FOUND, "no such page") })
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard,
        ))
        .layer(axum::middleware::map_response(headers))
        .with_state(state)
}

fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text.to_string(),
    )
        .into_response()
}

/// The Host check comes before anything else is read; then the cookie,
/// except for the login itself.
async fn guard(State(s): State<Arc<ViewState>>, req: Request, next: Next) -> Response {
    if let Err(r) = s.auth.check_host(req.headers()) {
        return plain(StatusCode::FORBIDDEN, &r.to_string());
    }
    if req.uri().path() != "/login"
        && let Err(r) = s.auth.session(req.headers())
    {
        return plain(StatusCode::UNAUTHORIZED, &r.to_string());
    }
    next.run(req).await
}

/// Security headers on every answer.
async fn headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[derive(serde::Deserialize)]
struct LoginQuery {
    t: String,
}

async fn login(
    State(s): State<Arc<ViewState>>,
    q: Result<Query<LoginQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = q else {
        return plain(StatusCode::UNAUTHORIZED, "the link has no token");
    };
    match s.auth.login(&q.t) {
        // The page itself, with its key: the only answer that ever holds
        // it (the page keeps it in sessionStorage and shows `/` in the
        // address bar).
        Ok(login) => (
            [
                (header::SET_COOKIE, s.auth.set_cookie(&login.cookie)),
                (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            ],
            page_with_key(&login.page_key),
        )
            .into_response(),
        Err(r) => plain(StatusCode::UNAUTHORIZED, &r.to_string()),
    }
}

/// The page with `key` in its key slot (64 hex digits, from
/// [`super::auth::random_hex`]: nothing to escape).
fn page_with_key(key: &str) -> String {
    debug_assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    INDEX.replacen(
        KEY_META,
        &format!("<meta name=\"sandtop-page-key\" content=\"{key}\">"),
        1,
    )
}

async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn app_css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS).into_response()
}

/// The snapshot: the screen, so the page key is needed (a header the
/// page's own script adds; a cross-origin script cannot without a CORS
/// preflight, which this server never grants).
async fn snapshot(State(s): State<Arc<ViewState>>, headers: HeaderMap) -> Response {
    if let Err(r) = s
        .auth
        .page_session(&headers, super::auth::header_key(&headers))
    {
        return plain(StatusCode::FORBIDDEN, &r.to_string());
    }
    match (s.snapshot)().await {
        Ok(png) => (
            [
                (header::CONTENT_TYPE, "image/png"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"sandtop-snapshot.png\"",
                ),
            ],
            png,
        )
            .into_response(),
        Err(e) => plain(
            StatusCode::BAD_GATEWAY,
            &format!(
                "no snapshot: {}",
                sandtop_hostkit::term::safe_line(&sandtop_hostkit::chain::chain(&e))
            ),
        ),
    }
}

/// The WebSocket upgrade: the Origin must be ours, and the cookie and
/// the page key (a `Sec-WebSocket-Protocol` entry) one session's; the
/// handshake's answer is tungstenite's, the frames are tokio-tungstenite's.
async fn ws(State(s): State<Arc<ViewState>>, mut req: Request) -> Response {
    if let Err(r) = s.auth.check_origin(req.headers()) {
        return plain(StatusCode::FORBIDDEN, &r.to_string());
    }
    let grant = match s
        .auth
        .page_session(req.headers(), super::auth::ws_key(req.headers()))
    {
        Ok(g) => g,
        Err(r @ Refusal::NoPageKey) => return plain(StatusCode::FORBIDDEN, &r.to_string()),
        Err(r) => return plain(StatusCode::UNAUTHORIZED, &r.to_string()),
    };
    let Some(accept) = upgrade_key(req.headers()) else {
        return plain(StatusCode::BAD_REQUEST, "not a WebSocket upgrade");
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let state = Arc::clone(&s);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                let mut config =
                    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default();
                config.max_message_size = Some(MAX_PAGE_MESSAGE);
                config.max_frame_size = Some(MAX_PAGE_MESSAGE);
                let stream = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    io,
                    Role::Server,
                    Some(config),
                )
                .await;
                serve_page(&state.hub, stream, grant).await;
            }
            Err(e) => tracing::debug!(error = %e, "a WebSocket upgrade failed"),
        }
    });
    (
        StatusCode::SWITCHING_PROTOCOLS,
        [
            (header::CONNECTION, HeaderValue::from_static("upgrade")),
            (header::UPGRADE, HeaderValue::from_static("websocket")),
            (
                header::SEC_WEBSOCKET_ACCEPT,
                HeaderValue::from_str(&accept).unwrap_or(HeaderValue::from_static("")),
            ),
            // The protocol the page asked for (never the key entry).
            (
                header::SEC_WEBSOCKET_PROTOCOL,
                HeaderValue::from_static(super::auth::WS_PROTOCOL),
            ),
        ],
    )
        .into_response()
}

/// The accept key of a well-formed upgrade request, or `None`.
fn upgrade_key(h: &HeaderMap) -> Option<String> {
    let has = |name: header::HeaderName, want: &str| {
        h.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(want)))
        })
    };
    if !has(header::CONNECTION, "upgrade") || !has(header::UPGRADE, "websocket") {
        return None;
    }
    if h.get(header::SEC_WEBSOCKET_VERSION)?.as_bytes() != b"13" {
        return None;
    }
    let key = h.get(header::SEC_WEBSOCKET_KEY)?;
    Some(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// One page: the opening state, then frames and events out, commands in.
async fn serve_page<S>(hub: &Hub, ws: tokio_tungstenite::WebSocketStream<S>, grant: Grant)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _client = hub.client();
    let (mut tx, mut rx) = ws.split();
    let mut events = hub.events.subscribe();
    let mut frames = hub.frame.subscribe();
    let hello = serde_json::json!({
        "type": "page",
        "view_only": grant == Grant::ViewOnly,
    });
    for text in std::iter::once(hello.to_string()).chain(hub.opening()) {
        if tx.send(Message::text(text)).await.is_err() {
            return;
        }
    }
    // The newest frame at once, then each new one.
    frames.mark_changed();
    loop {
        tokio::select! {
            changed = frames.changed() => {
                if changed.is_err() {
                    return;
                }
                let frame = frames.borrow_and_update().clone();
                if let Some(f) = frame
                    && (tx.send(Message::text(f.meta())).await.is_err()
                        || tx.send(Message::binary(f.jpeg.clone())).await.is_err())
                {
                    return;
                }
            }
            ev = events.recv() => {
                match ev {
                    Ok(text) => {
                        if tx.send(Message::text(text)).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        // Too slow for the events: start again from the state.
                        for text in hub.opening() {
                            if tx.send(Message::text(text)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(_) => return,
                }
            }
            msg = rx.next() => {
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Binary(_))) => {
                        let _ = tx.send(Message::text(refusal("message", "binary messages are not commands"))).await;
                        continue;
                    }
                    _ => return,
                };
                if grant == Grant::ViewOnly {
                    let _ = tx.send(Message::text(refusal("command", "this is a view-only link"))).await;
                    continue;
                }
                match serde_json::from_str::<Command>(text.as_str()) {
                    Ok(cmd) => {
                        if hub.commands.send(cmd).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Message::text(refusal("command", &format!("not a command: {e}")))).await;
                    }
                }
            }
        }
    }
}

fn refusal(what: &str, why: &str) -> String {
    serde_json::to_string(&Event::Refused {
        what: what.into(),
        why: why.into(),
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod page_key_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_one_empty_key_slot_and_the_login_fills_it() {
        assert_eq!(INDEX.matches(KEY_META).count(), 1);
        let key = "0a".repeat(32);
        let page = page_with_key(&key);
        assert!(!page.contains(KEY_META));
        assert_eq!(page.matches(key.as_str()).count(), 1);
        assert!(page.contains(&format!("content=\"{key}\"")));
    }

    #[test]
    fn an_upgrade_needs_every_header_and_gets_the_rfc_accept_key() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        h.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        // RFC 6455's own example.
        assert_eq!(
            upgrade_key(&h).as_deref(),
            Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        );
        let mut old = h.clone();
        old.insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("8"));
        assert!(upgrade_key(&old).is_none());
        let mut plain = h.clone();
        plain.remove(header::UPGRADE);
        assert!(upgrade_key(&plain).is_none());
    }

    #[test]
    fn the_page_loads_only_itself() {
        // No external origin anywhere in what the page is made of.
        for (name, text) in [("index", INDEX), ("app.js", APP_JS), ("app.css", APP_CSS)] {
            for bad in [
                "http://",
                "https://",
                "//cdn",
                "@import",
                "eval(",
                "innerHTML",
            ] {
                assert!(!text.contains(bad), "{name} contains {bad}");
            }
        }
    }
}
