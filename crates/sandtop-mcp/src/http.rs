//! `host-cli mcp --http 127.0.0.1:PORT`: the same server over Streamable
//! HTTP, through the SDK's own transport
//! ([`rmcp::transport::StreamableHttpService`]: sessions for 2025-06-18
//! and 2025-11-25, stateless requests for 2026-07-28, SSE for what the
//! server sends during a call).
//!
//! In front of it, before the SDK reads a byte of the body, every request
//! passes three checks (docs/security.md, `host-cli mcp`):
//!
//! 1. `Host` is exactly the address served (the view's check,
//!    [`sandtop_view::auth::Loopback`]): a page whose name was rebound to
//!    127.0.0.1 sends its own name and is refused (DNS rebinding);
//! 2. an `Origin`, when there is one (browsers send it; MCP clients do
//!    not), is exactly the server's own (the view's check again): a page
//!    of any other origin is refused;
//! 3. `Authorization: Bearer TOKEN`, the token made at start (256 bits),
//!    compared in constant time. It is printed once and kept in a 0600
//!    file for the operator's client config; it is removed when the
//!    server exits.
//!
//! The address must be loopback: anything else is refused at start, with
//! why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use zeroize::Zeroizing;

use super::Server;
use sandtop_view::auth::{Loopback, random_hex, same};

/// The endpoint's path.
pub const PATH: &str = "/mcp";

/// `--http`'s value: an IP address and a port, loopback only (port 0: a
/// free one).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s.parse().map_err(|_| {
        format!(
            "`{s}` is not an address and port: use 127.0.0.1:PORT (or [::1]:PORT; port 0 picks a \
             free one)"
        )
    })?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "host-cli mcp serves HTTP on loopback only (127.0.0.1:PORT or [::1]:PORT), not {addr}: \
             anyone who can reach the port could drive the guests. Reach it from elsewhere \
             through your own authenticated tunnel (e.g. ssh -L)."
        ));
    }
    Ok(addr)
}

/// What a request must show.
#[derive(Debug)]
pub struct Gate {
    place: Loopback,
    token: Zeroizing<String>,
}

impl Gate {
    pub fn new(place: Loopback, token: Zeroizing<String>) -> Gate {
        Gate { place, token }
    }

    /// The endpoint's URL.
    pub fn url(&self) -> String {
        format!("{}{PATH}", self.place.origin())
    }

    /// Checks a request's headers (see the module's order); the refusal
    /// is the status and the words the client gets.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
        if self.place.check_host(headers).is_err() {
            return Err((
                StatusCode::FORBIDDEN,
                format!(
                    "host-cli mcp answers only to Host {} (a request naming any other host is \
                     refused: DNS rebinding)",
                    self.place.host()
                ),
            ));
        }
        if headers.contains_key(header::ORIGIN) && self.place.check_origin(headers).is_err() {
            return Err((
                StatusCode::FORBIDDEN,
                format!(
                    "host-cli mcp refuses requests from web pages: an Origin header must be its \
                     own ({}) when there is one",
                    self.place.origin()
                ),
            ));
        }
        let mut auth = headers.get_all(header::AUTHORIZATION).iter();
        let presented = match (auth.next(), auth.next()) {
            (Some(v), None) => v
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim),
            _ => None,
        };
        match presented {
            Some(t) if same(t, &self.token) => Ok(()),
            _ => Err((
                StatusCode::UNAUTHORIZED,
                "host-cli mcp needs `Authorization: Bearer TOKEN`, with the token it printed at \
                 start (also in its token file)"
                    .to_string(),
            )),
        }
    }
}

async fn guard(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    if let Err((status, words)) = gate.check(req.headers()) {
        let mut r = (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            words,
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        return r;
    }
    next.run(req).await
}

/// The default token file: beside the sessions, named by the port.
pub fn default_token_file(root: &Path, addr: SocketAddr) -> PathBuf {
    root.join(format!("mcp-http-{}.token", addr.port()))
}

/// Writes the token to `path`, readable by its owner only: a file left
/// by an earlier server is removed first, and the new one is created
/// exclusively (`O_CREAT|O_EXCL`: a link planted in between is not
/// followed).
fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("replacing {}", path.display())),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing the token file {}", path.display()))?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    Ok(())
}

/// Serves `server` on `addr` until SIGINT/SIGTERM/SIGHUP.
pub async fn serve(
    server: Server,
    addr: SocketAddr,
    token_file: Option<PathBuf>,
    root: &Path,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let addr = listener.local_addr()?;
    let place = Loopback::new(addr)?;
    let token = Zeroizing::new(random_hex()?);
    let token_file = token_file.unwrap_or_else(|| default_token_file(root, addr));
    write_token(&token_file, &token)?;
    let gate = Arc::new(Gate::new(place, token.clone()));
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts([place.host()])
        .with_allowed_origins([place.origin()]);
    let stop = config.cancellation_token.clone();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = Router::new()
        .route_service(PATH, service)
        .fallback(|| async { (StatusCode::NOT_FOUND, "the MCP endpoint is /mcp") })
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&gate),
            guard,
        ));
    eprintln!(
        "host-cli mcp: Streamable HTTP at {}\nhost-cli mcp: bearer token (shown once; also in {}, \
         mode 0600): {}",
        gate.url(),
        token_file.display(),
        token.as_str()
    );
    drop(token);
    let served =
        sandtop_hostkit::signals::until_interrupted(axum::serve(listener, app).into_future()).await;
    stop.cancel();
    let _ = std::fs::remove_file(&token_file);
    match served {
        Ok(r) => r.context("serving MCP over HTTP"),
        Err(_signal) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Gate {
        let place = Loopback::new("127.0.0.1:4567".parse().unwrap()).unwrap();
        Gate::new(place, Zeroizing::new("ab".repeat(32)))
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

    const HOST: (&str, &str) = ("host", "127.0.0.1:4567");

    fn bearer(t: &str) -> (String, String) {
        ("authorization".into(), format!("Bearer {t}"))
    }

    fn status(g: &Gate, pairs: &[(&str, &str)]) -> Option<StatusCode> {
        g.check(&headers(pairs)).err().map(|(s, _)| s)
    }

    #[test]
    fn only_a_loopback_address_is_served() {
        assert_eq!(
            parse_addr("127.0.0.1:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert!(parse_addr("[::1]:8123").is_ok());
        for bad in [
            "0.0.0.0:8123",
            "192.168.1.2:8123",
            "[::]:8123",
            "8.8.8.8:80",
        ] {
            let e = parse_addr(bad).unwrap_err();
            assert!(e.contains("loopback only"), "{bad}: {e}");
        }
        for bad in ["localhost:8123", "127.0.0.1", "8123", ""] {
            let e = parse_addr(bad).unwrap_err();
            assert!(e.contains("not an address and port"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_right_token_host_and_origin_pass() {
        let g = gate();
        let (k, v) = bearer(&"ab".repeat(32));
        assert_eq!(status(&g, &[HOST, (&k, &v)]), None);
        let own = ("origin", "http://127.0.0.1:4567");
        assert_eq!(status(&g, &[HOST, own, (&k, &v)]), None);
        assert_eq!(g.url(), "http://127.0.0.1:4567/mcp");
    }

    #[test]
    fn a_wrong_or_missing_token_is_refused() {
        let g = gate();
        for t in [
            "",
            "ab",
            &"ab".repeat(31),
            &"cd".repeat(32),
            &"AB".repeat(32),
        ] {
            let (k, v) = bearer(t);
            assert_eq!(
                status(&g, &[HOST, (&k, &v)]),
                Some(StatusCode::UNAUTHORIZED),
                "{t}"
            );
        }
        assert_eq!(status(&g, &[HOST]), Some(StatusCode::UNAUTHORIZED));
        let basic = ("authorization", "Basic YWI6YWI=");
        assert_eq!(status(&g, &[HOST, basic]), Some(StatusCode::UNAUTHORIZED));
        // Two Authorization headers are none.
        let (k, v) = bearer(&"ab".repeat(32));
        let (k2, v2) = bearer("x");
        assert_eq!(
            status(&g, &[HOST, (&k, &v), (&k2, &v2)]),
            Some(StatusCode::UNAUTHORIZED)
        );
    }

    #[test]
    fn a_foreign_host_or_origin_is_refused_even_with_the_token() {
        let g = gate();
        let (k, v) = bearer(&"ab".repeat(32));
        for host in [
            "evil.test:4567",
            "localhost:4567",
            "127.0.0.1:4568",
            "127.0.0.1",
        ] {
            let (s, words) = g.check(&headers(&[("host", host), (&k, &v)])).unwrap_err();
            assert_eq!(s, StatusCode::FORBIDDEN, "{host}");
            assert!(words.contains("DNS rebinding"), "{words}");
        }
        assert_eq!(status(&g, &[(&k, &v)]), Some(StatusCode::FORBIDDEN));
        for origin in [
            "http://evil.test",
            "null",
            "https://127.0.0.1:4567",
            "http://127.0.0.1:4567.evil.test",
            "http://localhost:4567",
        ] {
            let (s, words) = g
                .check(&headers(&[HOST, ("origin", origin), (&k, &v)]))
                .unwrap_err();
            assert_eq!(s, StatusCode::FORBIDDEN, "{origin}");
            assert!(words.contains("Origin"), "{words}");
        }
    }

    #[test]
    fn the_token_file_is_its_owners_only_and_replaces_an_old_one() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = default_token_file(dir.path(), "127.0.0.1:4567".parse().unwrap());
        assert!(path.ends_with("mcp-http-4567.token"));
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_token(&path, "secret").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret\n");
    }
}
