//! The page key over real sockets (docs/security.md W6): the view's cookie
//! reaches every port of 127.0.0.1, so a program that saw it replays it
//! with a forged `Origin`. The cookie alone gets the page and its static
//! assets, never the WebSocket (frames, state, questions, answers,
//! takeover, input) or the snapshot; the page's own key does.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use super::*;

/// What the fake snapshot answers.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\nnot really a picture";

struct Served {
    addr: SocketAddr,
    commands: mpsc::Receiver<Command>,
    http: reqwest::Client,
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn serve(grant: Grant) -> (Served, String) {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (hub, commands) = Hub::new("t1".into());
    let auth = Auth::new(addr, grant).unwrap();
    let link = auth.link();
    let state = Arc::new(ViewState {
        auth,
        hub: Arc::new(hub),
        snapshot: Box::new(|| Box::pin(async { Ok(PNG.to_vec()) })),
    });
    let app = router(state);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    (
        Served {
            addr,
            commands,
            http,
        },
        link,
    )
}

/// Follows the link as a browser would: the cookie's value and the page
/// key the answer carries.
async fn sign_in(s: &Served, link: &str) -> (String, String) {
    let r = s.http.get(link).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let set = r
        .headers()
        .get(header::SET_COOKIE)
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let cookie = set
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_string();
    let body = r.text().await.unwrap();
    let key = key_in(&body).expect("the login's page carries its key");
    assert_eq!(key.len(), 64);
    assert_ne!(key, cookie);
    (cookie, key)
}

/// The page key in a page's key slot, when it is filled.
fn key_in(page: &str) -> Option<String> {
    let at = page.find("<meta name=\"sandtop-page-key\" content=\"")?;
    let rest = &page[at + "<meta name=\"sandtop-page-key\" content=\"".len()..];
    let key = &rest[..rest.find('"')?];
    (!key.is_empty()).then(|| key.to_string())
}

fn cookie_header(s: &Served, cookie: &str) -> String {
    format!("sandtop_view_{}={cookie}", s.addr.port())
}

/// A WebSocket handshake with the given headers: the socket, or the
/// HTTP status of the refusal.
async fn ws(
    s: &Served,
    cookie: Option<&str>,
    protocols: Option<&str>,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
        tungstenite::handshake::client::Response,
    ),
    u16,
> {
    let mut req = format!("ws://{}/ws", s.addr).into_client_request().unwrap();
    let h = req.headers_mut();
    h.insert(header::ORIGIN, s.origin().parse().unwrap());
    if let Some(c) = cookie {
        h.insert(header::COOKIE, cookie_header(s, c).parse().unwrap());
    }
    if let Some(p) = protocols {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, p.parse().unwrap());
    }
    let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Ok(ok) => Ok(ok),
        Err(tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("handshake: {e}"),
    }
}

#[tokio::test]
async fn the_key_is_in_the_logins_answer_only() {
    let (s, link) = serve(Grant::Control).await;
    let (cookie, key) = sign_in(&s, &link).await;
    let r = s
        .http
        .get(s.url("/"))
        .header(header::COOKIE, cookie_header(&s, &cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let page = r.text().await.unwrap();
    assert!(
        page.contains(KEY_META),
        "the page `/` serves has an empty slot"
    );
    assert_eq!(key_in(&page), None);
    assert!(!page.contains(&key));
    for asset in ["/app.js", "/app.css"] {
        let r = s
            .http
            .get(s.url(asset))
            .header(header::COOKIE, cookie_header(&s, &cookie))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{asset}");
        assert!(!r.text().await.unwrap().contains(&key), "{asset}");
    }
}

#[tokio::test]
async fn the_snapshot_needs_the_cookie_and_the_key() {
    let (s, link) = serve(Grant::Control).await;
    let (cookie, key) = sign_in(&s, &link).await;
    let get = |cookie: Option<&str>, key: Option<&str>| {
        let mut r = s.http.get(s.url("/snapshot.png"));
        if let Some(c) = cookie {
            r = r.header(header::COOKIE, cookie_header(&s, c));
        }
        if let Some(k) = key {
            r = r.header(super::super::auth::PAGE_KEY_HEADER, k);
        }
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
        }
    };
    // The cookie a server on another port saw, replayed.
    let (status, body) = get(Some(&cookie), None).await;
    assert_eq!(status, 403);
    assert!(!body.starts_with(b"\x89PNG"));
    assert!(String::from_utf8_lossy(&body).contains("cookie alone"));
    for wrong in ["f".repeat(64), cookie.clone(), key[..63].to_string()] {
        assert_eq!(get(Some(&cookie), Some(&wrong)).await.0, 403, "{wrong}");
    }
    // The key without the cookie.
    assert_eq!(get(None, Some(&key)).await.0, 401);
    // Both, as the page sends them.
    let (status, body) = get(Some(&cookie), Some(&key)).await;
    assert_eq!(status, 200);
    assert_eq!(body, PNG);
}

#[tokio::test]
async fn the_websocket_needs_the_cookie_and_the_key_and_only_then_takes_commands() {
    let (mut s, link) = serve(Grant::Control).await;
    let (cookie, key) = sign_in(&s, &link).await;
    let offer = |k: &str| format!("sandtop-view, sandtop-key.{k}");
    // The replayed cookie with the view's own Origin forged: no protocol,
    // the protocol without a key, a wrong key, the key without ours.
    assert_eq!(ws(&s, Some(&cookie), None).await.err(), Some(403));
    assert_eq!(
        ws(&s, Some(&cookie), Some("sandtop-view")).await.err(),
        Some(403)
    );
    assert_eq!(
        ws(&s, Some(&cookie), Some(&offer(&"f".repeat(64))))
            .await
            .err(),
        Some(403)
    );
    assert_eq!(
        ws(&s, Some(&cookie), Some(&offer(&cookie))).await.err(),
        Some(403)
    );
    assert_eq!(
        ws(&s, Some(&cookie), Some(&format!("sandtop-key.{key}")))
            .await
            .err(),
        Some(403)
    );
    // The key without the cookie.
    assert_eq!(ws(&s, None, Some(&offer(&key))).await.err(), Some(401));
    assert!(s.commands.try_recv().is_err(), "nothing reached the run");
    // The page's own handshake: the protocol answered is never the key.
    let (mut sock, resp) = ws(&s, Some(&cookie), Some(&offer(&key))).await.unwrap();
    assert_eq!(
        resp.headers()
            .get(header::SEC_WEBSOCKET_PROTOCOL)
            .map(|v| v.to_str().unwrap()),
        Some("sandtop-view")
    );
    let first = sock.next().await.unwrap().unwrap();
    let first: serde_json::Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
    assert_eq!(first["type"], "page");
    assert_eq!(first["view_only"], false);
    sock.send(Message::text(r#"{"type":"take"}"#))
        .await
        .unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), s.commands.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(got, Command::Take {}), "{got:?}");
}
