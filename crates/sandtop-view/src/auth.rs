//! Who may use a view: one-time login token -> a session cookie, the
//! `Host` header pinned to the loopback address served (DNS rebinding), a
//! WebSocket's `Origin` pinned to the view's own origin.
//!
//! - The printed link carries a one-time token (256 bits). Its first use
//!   sets a cookie `sandtop_view_PORT` (another 256-bit value; HttpOnly,
//!   SameSite=Strict, Path=/) and the token is spent: a copied link that
//!   arrives later is refused. Cookies are shared by every port of a host,
//!   so the name carries the port: two views open in one browser (say a
//!   view-only one beside a full one) keep their own sessions.
//! - Every request must name `127.0.0.1:PORT` exactly in `Host`: a page
//!   on `evil.test` that rebinds its name to 127.0.0.1 sends its own name
//!   and is refused before anything else is read.
//! - A WebSocket upgrade must carry `Origin: http://127.0.0.1:PORT`; the
//!   cookie alone is not enough (a cross-site page cannot send it under
//!   SameSite=Strict, and the Origin check holds even where it could).
//! - A view-only link's cookie gets the screen and the state, never the
//!   controls: the server drops its commands.
//! - The cookie alone is never enough for anything that matters. Cookies
//!   do not isolate ports: the browser sends `sandtop_view_PORT` to every
//!   server on 127.0.0.1, and a program there can replay it with any
//!   `Origin` it likes. So each session also has a page key (another 256
//!   bits) that only the view's own page holds: it is in the body of the
//!   login answer alone (never in a URL, a cookie or any page `/` serves),
//!   the page keeps it in its tab's `sessionStorage` (readable only by
//!   script of this exact origin, port included) and sends it in the
//!   WebSocket handshake (a `Sec-WebSocket-Protocol` entry
//!   `sandtop-key.KEY`) and as the `Sandtop-Page-Key` header of the
//!   snapshot. The WebSocket (frames, the run's state and questions,
//!   answers, takeover, input) and the snapshot need cookie and key of the
//!   same session; `/` and its two static assets need the cookie only
//!   (they hold no secret and no state).

use std::net::SocketAddr;
use std::sync::Mutex;

use http::HeaderMap;
use http::header;
use subtle::ConstantTimeEq as _;
use zeroize::Zeroizing;

use crate::Error;

/// The cookie's name, before `_PORT`.
pub const COOKIE_PREFIX: &str = "sandtop_view";

/// The header that carries the page key on an HTTP request.
pub const PAGE_KEY_HEADER: &str = "sandtop-page-key";

/// The WebSocket subprotocol the page asks for (and the server answers).
pub const WS_PROTOCOL: &str = "sandtop-view";

/// The prefix of the subprotocol entry that carries the page key.
pub const WS_KEY_PREFIX: &str = "sandtop-key.";

/// What a cookie grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The screen, the state, and the controls.
    Control,
    /// The screen and the state only.
    ViewOnly,
}

/// Why a request was refused (the words the browser gets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this view answers only to Host {0}")]
    Host(String),
    #[error("this view accepts WebSocket connections only from its own page ({0})")]
    Origin(String),
    #[error("not signed in to this view: open the link host-cli printed")]
    NoSession,
    #[error("that link was already used or is not this view's")]
    BadToken,
    #[error(
        "only this view's own page may do that: the request carries no page key, or not this \
         session's (the cookie alone is not enough)"
    )]
    NoPageKey,
}

/// A random value as 64 hex digits (256 bits from the OS).
pub fn random_hex() -> Result<String, Error> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(Error::Random)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Compares two secrets in time that depends only on their lengths
/// (`subtle`).
pub fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// One signed-in page: its cookie, its page key, what they grant.
#[derive(Debug)]
struct Session {
    cookie: Zeroizing<String>,
    page_key: Zeroizing<String>,
    grant: Grant,
}

/// What a login hands out: the cookie's value and the page key.
#[derive(Debug)]
pub struct Login {
    pub cookie: Zeroizing<String>,
    pub page_key: Zeroizing<String>,
}

/// The loopback address a local server answers on, and the two checks
/// that pin its requests to it against DNS rebinding: `host-cli view` and
/// `host-cli mcp --http` share them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loopback {
    addr: SocketAddr,
}

impl Loopback {
    /// `addr` must be a loopback address (127.0.0.0/8 or ::1).
    pub fn new(addr: SocketAddr) -> Result<Loopback, Error> {
        if !addr.ip().is_loopback() {
            return Err(Error::NotLoopback(addr));
        }
        Ok(Loopback { addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `Host` every request must carry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The server's own origin.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Refuses a request whose `Host` is not exactly ours (one header).
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        match (hosts.next(), hosts.next()) {
            (Some(h), None) if h.as_bytes() == self.host().as_bytes() => Ok(()),
            _ => Err(Refusal::Host(self.host())),
        }
    }

    /// Refuses a request whose `Origin` is not exactly ours (one header;
    /// none is refused too).
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (Some(o), None) if o.as_bytes() == self.origin().as_bytes() => Ok(()),
            _ => Err(Refusal::Origin(self.origin())),
        }
    }
}

/// The view's secrets and its address.
#[derive(Debug)]
pub struct Auth {
    place: Loopback,
    grant: Grant,
    /// The login token, until it is spent.
    login: Mutex<Option<Zeroizing<String>>>,
    /// Sessions handed out (one per login; a login token works once).
    sessions: Mutex<Vec<Session>>,
}

impl Auth {
    /// Secrets for a view served on `addr` (a loopback address); `grant`
    /// is what its link gives.
    pub fn new(addr: SocketAddr, grant: Grant) -> Result<Auth, Error> {
        Ok(Auth {
            place: Loopback::new(addr)?,
            grant,
            login: Mutex::new(Some(Zeroizing::new(random_hex()?))),
            sessions: Mutex::new(Vec::new()),
        })
    }

    /// The link to print (holds the one-time token).
    pub fn link(&self) -> String {
        let login = lock(&self.login);
        format!(
            "http://{}/login?t={}",
            self.place.addr,
            login.as_deref().map_or("", |s| s.as_str())
        )
    }

    /// The `Host` every request must carry.
    pub fn host(&self) -> String {
        self.place.host()
    }

    /// The view's own origin.
    pub fn origin(&self) -> String {
        self.place.origin()
    }

    /// Refuses a request whose `Host` is not exactly ours (one header).
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        self.place.check_host(headers)
    }

    /// Refuses a WebSocket upgrade whose `Origin` is not exactly ours.
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        self.place.check_origin(headers)
    }

    /// Spends the login token: the cookie value to set and the page key
    /// to hand the page, or a refusal.
    pub fn login(&self, token: &str) -> Result<Login, Refusal> {
        let mut login = lock(&self.login);
        match login.as_deref() {
            Some(t) if same(t, token) => {
                *login = None;
                let cookie = Zeroizing::new(random_hex().map_err(|_| Refusal::BadToken)?);
                let page_key = Zeroizing::new(random_hex().map_err(|_| Refusal::BadToken)?);
                lock(&self.sessions).push(Session {
                    cookie: cookie.clone(),
                    page_key: page_key.clone(),
                    grant: self.grant,
                });
                Ok(Login { cookie, page_key })
            }
            _ => Err(Refusal::BadToken),
        }
    }

    /// The name of this view's cookie (`sandtop_view_PORT`).
    pub fn cookie_name(&self) -> String {
        format!("{COOKIE_PREFIX}_{}", self.place.addr.port())
    }

    /// What the request's cookie grants: enough for the page and its
    /// static assets only (see [`Auth::page_session`]).
    pub fn session(&self, headers: &HeaderMap) -> Result<Grant, Refusal> {
        self.with_session(headers, |s| s.grant)
    }

    /// What the request grants when it carries both the cookie and the
    /// page key of one session: the WebSocket and the snapshot. A valid
    /// cookie without its key is [`Refusal::NoPageKey`].
    pub fn page_session(&self, headers: &HeaderMap, key: Option<&str>) -> Result<Grant, Refusal> {
        self.with_session(headers, |s| {
            key.is_some_and(|k| same(&s.page_key, k)).then_some(s.grant)
        })?
        .ok_or(Refusal::NoPageKey)
    }

    /// `f` of the session the request's cookie names.
    fn with_session<T>(
        &self,
        headers: &HeaderMap,
        f: impl FnOnce(&Session) -> T,
    ) -> Result<T, Refusal> {
        let ours = self.cookie_name();
        let sessions = lock(&self.sessions);
        for v in headers.get_all(header::COOKIE) {
            let Ok(v) = v.to_str() else { continue };
            for pair in v.split(';') {
                let Some((name, value)) = pair.trim().split_once('=') else {
                    continue;
                };
                if name != ours {
                    continue;
                }
                if let Some(s) = sessions.iter().find(|s| same(&s.cookie, value)) {
                    return Ok(f(s));
                }
            }
        }
        Err(Refusal::NoSession)
    }

    /// The `Set-Cookie` header value for a new session.
    pub fn set_cookie(&self, value: &str) -> String {
        format!(
            "{}={value}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie_name()
        )
    }
}

/// The page key of an HTTP request (its one `Sandtop-Page-Key` header).
pub fn header_key(headers: &HeaderMap) -> Option<&str> {
    let mut keys = headers.get_all(PAGE_KEY_HEADER).iter();
    match (keys.next(), keys.next()) {
        (Some(k), None) => k.to_str().ok(),
        _ => None,
    }
}

/// The page key of a WebSocket handshake: the one `sandtop-key.KEY`
/// entry of `Sec-WebSocket-Protocol`, offered beside [`WS_PROTOCOL`].
pub fn ws_key(headers: &HeaderMap) -> Option<&str> {
    let mut key = None;
    let mut ours = false;
    for v in headers.get_all(header::SEC_WEBSOCKET_PROTOCOL) {
        let v = v.to_str().ok()?;
        for p in v.split(',').map(str::trim) {
            if p == WS_PROTOCOL {
                ours = true;
            } else if let Some(k) = p.strip_prefix(WS_KEY_PREFIX) {
                if key.is_some() {
                    return None;
                }
                key = Some(k);
            }
        }
    }
    key.filter(|_| ours)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Auth {
        Auth::new("127.0.0.1:4567".parse().unwrap(), Grant::Control).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn only_loopback_is_served() {
        for bad in ["0.0.0.0:1", "192.168.1.2:1", "[::]:1"] {
            let addr: SocketAddr = bad.parse().unwrap();
            match Auth::new(addr, Grant::Control) {
                Err(Error::NotLoopback(a)) => assert_eq!(a, addr),
                other => panic!("{bad}: {:?}", other.map(|_| ())),
            }
        }
        assert!(Auth::new("[::1]:1".parse().unwrap(), Grant::Control).is_ok());
    }

    #[test]
    fn the_host_must_be_the_address_served() {
        let a = auth();
        assert!(
            a.check_host(&headers(&[("host", "127.0.0.1:4567")]))
                .is_ok()
        );
        for bad in [
            "localhost:4567",
            "evil.test:4567",
            "127.0.0.1:4568",
            "127.0.0.1",
        ] {
            assert!(a.check_host(&headers(&[("host", bad)])).is_err(), "{bad}");
        }
        assert!(a.check_host(&headers(&[])).is_err());
        let two = headers(&[("host", "127.0.0.1:4567"), ("host", "evil.test")]);
        assert!(a.check_host(&two).is_err());
    }

    #[test]
    fn a_websocket_origin_must_be_the_views_own() {
        let a = auth();
        assert!(
            a.check_origin(&headers(&[("origin", "http://127.0.0.1:4567")]))
                .is_ok()
        );
        for bad in [
            "http://evil.test",
            "null",
            "https://127.0.0.1:4567",
            "http://127.0.0.1:4567.evil.test",
        ] {
            assert!(
                a.check_origin(&headers(&[("origin", bad)])).is_err(),
                "{bad}"
            );
        }
        assert!(a.check_origin(&headers(&[])).is_err());
    }

    #[test]
    fn the_login_token_works_once_and_its_cookie_opens_the_view() {
        let a = auth();
        let link = a.link();
        let token = link.split("t=").nth(1).unwrap().to_string();
        assert_eq!(token.len(), 64);
        assert_eq!(
            a.login("0".repeat(64).as_str()).unwrap_err(),
            Refusal::BadToken
        );
        let login = a.login(&token).unwrap();
        assert_eq!(a.login(&token).unwrap_err(), Refusal::BadToken, "spent");
        let cookie = login.cookie.as_str();
        assert_eq!(login.page_key.len(), 64);
        assert_ne!(login.page_key.as_str(), cookie);
        let h = headers(&[("cookie", &format!("other=1; sandtop_view_4567={cookie}"))]);
        assert_eq!(a.session(&h), Ok(Grant::Control));
        let h = headers(&[("cookie", &format!("sandtop_view_4567={}", "f".repeat(64)))]);
        assert_eq!(a.session(&h), Err(Refusal::NoSession));
        // The right value under another view's name is not this view's.
        let h = headers(&[("cookie", &format!("sandtop_view_4568={cookie}"))]);
        assert_eq!(a.session(&h), Err(Refusal::NoSession));
        assert_eq!(a.session(&headers(&[])), Err(Refusal::NoSession));
        assert_eq!(
            a.set_cookie(cookie),
            format!("sandtop_view_4567={cookie}; HttpOnly; SameSite=Strict; Path=/")
        );
    }

    #[test]
    fn the_cookie_alone_is_not_a_page_session() {
        let a = auth();
        let token = a.link().split("t=").nth(1).unwrap().to_string();
        let login = a.login(&token).unwrap();
        let (cookie, key) = (login.cookie.as_str(), login.page_key.as_str());
        let with_cookie = headers(&[("cookie", &format!("sandtop_view_4567={cookie}"))]);
        assert_eq!(a.page_session(&with_cookie, Some(key)), Ok(Grant::Control));
        // The cookie a server on another port saw, without the key.
        assert_eq!(a.page_session(&with_cookie, None), Err(Refusal::NoPageKey));
        for wrong in ["", "f", &"f".repeat(64), cookie, &key[..63]] {
            assert_eq!(
                a.page_session(&with_cookie, Some(wrong)),
                Err(Refusal::NoPageKey),
                "{wrong}"
            );
        }
        // The key without the cookie is not a session either.
        assert_eq!(
            a.page_session(&headers(&[]), Some(key)),
            Err(Refusal::NoSession)
        );
        let bad_cookie = headers(&[("cookie", &format!("sandtop_view_4567={key}"))]);
        assert_eq!(
            a.page_session(&bad_cookie, Some(key)),
            Err(Refusal::NoSession)
        );
    }

    #[test]
    fn the_page_key_is_read_from_its_header_and_the_websocket_protocols() {
        let k = "ab".repeat(32);
        assert_eq!(
            header_key(&headers(&[("sandtop-page-key", &k)])),
            Some(k.as_str())
        );
        assert_eq!(header_key(&headers(&[])), None);
        let two = headers(&[("sandtop-page-key", &k), ("sandtop-page-key", "x")]);
        assert_eq!(header_key(&two), None, "two keys are none");
        let offer = format!("sandtop-view, sandtop-key.{k}");
        assert_eq!(
            ws_key(&headers(&[("sec-websocket-protocol", &offer)])),
            Some(k.as_str())
        );
        // Split over two headers, in either order.
        let split = headers(&[
            ("sec-websocket-protocol", &format!("sandtop-key.{k}")),
            ("sec-websocket-protocol", "sandtop-view"),
        ]);
        assert_eq!(ws_key(&split), Some(k.as_str()));
        for bad in [
            format!("sandtop-key.{k}"),
            "sandtop-view".to_string(),
            format!("sandtop-view, sandtop-key.{k}, sandtop-key.{k}"),
            String::new(),
        ] {
            assert_eq!(
                ws_key(&headers(&[("sec-websocket-protocol", &bad)])),
                None,
                "{bad}"
            );
        }
        assert_eq!(ws_key(&headers(&[])), None);
    }

    #[test]
    fn a_view_only_link_grants_view_only() {
        let a = Auth::new("127.0.0.1:4567".parse().unwrap(), Grant::ViewOnly).unwrap();
        let token = a.link().split("t=").nth(1).unwrap().to_string();
        let login = a.login(&token).unwrap();
        let h = headers(&[(
            "cookie",
            &format!("sandtop_view_4567={}", login.cookie.as_str()),
        )]);
        assert_eq!(a.session(&h), Ok(Grant::ViewOnly));
        assert_eq!(
            a.page_session(&h, Some(&login.page_key)),
            Ok(Grant::ViewOnly)
        );
    }
}
