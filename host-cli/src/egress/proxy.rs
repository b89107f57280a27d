//! The egress proxy: HTTP (absolute-form requests) and CONNECT, on hyper.
//!
//! One connection:
//! 1. Read the request. CONNECT `host:port` is the origin
//!    `https://host:port`; an absolute-form `http://host:port/...` request
//!    is `http://host:port`. Anything else (`https://` without CONNECT,
//!    origin-form requests) is refused.
//! 2. A `Host` header that disagrees with the target is refused.
//! 3. The policy judges the origin: listed, denied, an IP literal, or (in
//!    ask mode) a question to the operator, who answers approve, deny or
//!    cancel (no operator, or no answer in time: deny). Answers last for
//!    the session.
//! 4. The proxy resolves the name itself and judges every address (private
//!    ranges, metadata); it then connects to exactly those addresses.
//! 5. For CONNECT it answers 200, reads the TLS ClientHello and refuses a
//!    server name (SNI) that is not the CONNECT host, then splices bytes.
//!    For HTTP it forwards the request in origin form and streams the
//!    response back.
//!
//! Every decision is reported to the [`Journal`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::policy::{Host, Origin, Policy, Scheme, Verdict, split_host_port};

/// The operator's answer to an origin question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Approve,
    Deny,
    /// Deny, and stop the task.
    Cancel,
}

/// A question for the operator.
#[derive(Debug)]
pub struct Question {
    pub origin: Origin,
    pub reply: oneshot::Sender<Answer>,
}

/// Where decisions are reported (a run's trajectory, the session log).
pub type Journal = Arc<dyn Fn(Value) + Send + Sync>;

/// How names are resolved.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// Fixed answers (`--resolve NAME=IP`), for tests on private networks.
    pub fixed: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    async fn resolve(&self, host: &Host, port: u16) -> Vec<IpAddr> {
        match host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(n) => {
                if let Some(ips) = self.fixed.get(n) {
                    return ips.clone();
                }
                match tokio::time::timeout(
                    Duration::from_secs(5),
                    tokio::net::lookup_host((n.as_str(), port)),
                )
                .await
                {
                    Ok(Ok(addrs)) => {
                        let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                        ips.dedup();
                        ips
                    }
                    _ => Vec::new(),
                }
            }
        }
    }
}

/// How long a connection waits for the operator's answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(120);

/// The proxy's shared state.
pub struct Proxy {
    pub policy: Policy,
    pub resolver: Resolver,
    /// Origins the operator decided this session.
    decided: Mutex<Vec<(Origin, bool)>>,
    /// Serialises questions, so one origin is asked once.
    asking: tokio::sync::Mutex<()>,
    asker: Mutex<Option<mpsc::Sender<Question>>>,
    journal: Journal,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

fn text(status: StatusCode, msg: &str) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(format!("sandtop egress proxy: {msg}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

impl Proxy {
    pub fn new(policy: Policy, resolver: Resolver, journal: Journal) -> Proxy {
        Proxy {
            policy,
            resolver,
            decided: Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
            asker: Mutex::new(None),
            journal,
        }
    }

    /// Sets (or clears) where questions go.
    pub fn set_asker(&self, asker: Option<mpsc::Sender<Question>>) {
        *self.asker.lock().unwrap_or_else(|p| p.into_inner()) = asker;
    }

    fn decided(&self) -> Vec<(Origin, bool)> {
        self.decided
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn log(&self, origin: &Origin, via: &str, allowed: bool, reason: &str, addrs: &[IpAddr]) {
        (self.journal)(json!({
            "kind": "egress",
            "origin": origin.to_string(),
            "via": via,
            "decision": if allowed { "allowed" } else { "denied" },
            "reason": reason,
            "addresses": addrs,
        }));
    }

    /// Decides an origin; on success returns the addresses to connect to.
    async fn decide(&self, origin: &Origin, via: &str) -> Result<Vec<IpAddr>, String> {
        let mut verdict = self.policy.judge_origin(origin, &self.decided());
        if verdict == Verdict::Ask {
            let _one_at_a_time = self.asking.lock().await;
            // Someone may have answered for this origin while we waited.
            verdict = self.policy.judge_origin(origin, &self.decided());
            if verdict == Verdict::Ask {
                let (answer, by_operator) = self.ask(origin).await;
                let allow = answer == Answer::Approve;
                // Only the operator's own answers last for the session: a
                // denial because nobody was attached (or nobody answered in
                // time) must not stop a run that attaches later from asking.
                if by_operator {
                    self.decided
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((origin.clone(), allow));
                }
                (self.journal)(json!({
                    "kind": "egress_answer",
                    "origin": origin.to_string(),
                    "answer": answer,
                    "by_operator": by_operator,
                }));
                verdict = if allow {
                    Verdict::Allow
                } else {
                    Verdict::Deny(format!("the operator answered {answer:?} for {origin}"))
                };
            }
        }
        if let Verdict::Deny(reason) = verdict {
            self.log(origin, via, false, &reason, &[]);
            return Err(reason);
        }
        let addrs = self.resolver.resolve(&origin.host, origin.port).await;
        match self.policy.judge_addrs(origin, &addrs) {
            Verdict::Allow => {
                self.log(origin, via, true, "allowed", &addrs);
                Ok(addrs)
            }
            Verdict::Deny(reason) => {
                self.log(origin, via, false, &reason, &addrs);
                Err(reason)
            }
            // Addresses are never a question.
            Verdict::Ask => Err("refused".into()),
        }
    }

    /// Asks the attached operator; the flag says whether the answer is
    /// theirs (false: nobody attached, gone, or silent past the timeout).
    async fn ask(&self, origin: &Origin) -> (Answer, bool) {
        let asker = self.asker.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(asker) = asker else {
            return (Answer::Deny, false);
        };
        let (tx, rx) = oneshot::channel();
        if asker
            .send(Question {
                origin: origin.clone(),
                reply: tx,
            })
            .await
            .is_err()
        {
            return (Answer::Deny, false);
        }
        match tokio::time::timeout(ASK_TIMEOUT, rx).await {
            Ok(Ok(a)) => (a, true),
            _ => (Answer::Deny, false),
        }
    }

    /// Handles one request on a client connection.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, hyper::Error> {
        if req.method() == Method::CONNECT {
            return Ok(self.connect(req).await);
        }
        Ok(self.forward(req).await)
    }

    async fn connect(self: Arc<Self>, req: Request<Incoming>) -> Response<ProxyBody> {
        let Some(authority) = req.uri().authority().map(|a| a.as_str().to_string()) else {
            return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
        };
        let origin = match target(Scheme::Https, &authority) {
            Ok(o) => o,
            Err(e) => return text(StatusCode::BAD_REQUEST, &e),
        };
        if let Err(e) = host_matches(&req, &origin) {
            self.log(&origin, "connect", false, &e, &[]);
            return text(StatusCode::FORBIDDEN, &e);
        }
        let addrs = match self.decide(&origin, "connect").await {
            Ok(a) => a,
            Err(e) => return text(StatusCode::FORBIDDEN, &e),
        };
        let this = Arc::clone(&self);
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    if let Err(e) = this.tunnel(TokioIo::new(upgraded), &origin, &addrs).await {
                        tracing::info!(origin = %origin, error = %e, "tunnel ended");
                    }
                }
                Err(e) => tracing::info!(error = %e, "CONNECT upgrade failed"),
            }
        });
        Response::new(
            Full::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed(),
        )
    }

    async fn tunnel<S>(
        &self,
        mut client: S,
        origin: &Origin,
        addrs: &[IpAddr],
    ) -> Result<(), String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        // The first TLS record carries the ClientHello; its server name
        // must be the CONNECT host.
        let mut hello = Vec::with_capacity(2048);
        let sni = loop {
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
                .await
                .map_err(|_| "no TLS ClientHello within 10 s".to_string())?
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the client closed the tunnel".into());
            }
            hello.extend_from_slice(&buf[..n]);
            match client_hello_sni(&hello) {
                Sni::Incomplete if hello.len() < 32 * 1024 => continue,
                Sni::Incomplete => return Err("an oversized ClientHello".into()),
                other => break other,
            }
        };
        let ok = match (&sni, &origin.host) {
            (Sni::Name(n), Host::Name(h)) => n.eq_ignore_ascii_case(h),
            (Sni::Absent, Host::Ip(_)) => true,
            _ => false,
        };
        if !ok {
            let reason =
                format!("TLS server name {sni:?} does not match the CONNECT target {origin}");
            self.log(origin, "connect", false, &reason, addrs);
            return Err(reason);
        }
        let mut server = connect_any(addrs, origin.port).await?;
        server.write_all(&hello).await.map_err(|e| e.to_string())?;
        tokio::io::copy_bidirectional(&mut client, &mut server)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn forward(self: Arc<Self>, req: Request<Incoming>) -> Response<ProxyBody> {
        let uri = req.uri().clone();
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "only http:// is forwarded; use CONNECT for https",
                );
            }
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "a proxy request needs an absolute URL",
                );
            }
        }
        let Some(authority) = uri.authority().map(|a| a.as_str().to_string()) else {
            return text(StatusCode::BAD_REQUEST, "no host in the URL");
        };
        let origin = match target(Scheme::Http, &authority) {
            Ok(o) => o,
            Err(e) => return text(StatusCode::BAD_REQUEST, &e),
        };
        if let Err(e) = host_matches(&req, &origin) {
            self.log(&origin, "http", false, &e, &[]);
            return text(StatusCode::FORBIDDEN, &e);
        }
        let addrs = match self.decide(&origin, "http").await {
            Ok(a) => a,
            Err(e) => return text(StatusCode::FORBIDDEN, &e),
        };
        let stream = match connect_any(&addrs, origin.port).await {
            Ok(s) => s,
            Err(e) => return text(StatusCode::BAD_GATEWAY, &e),
        };
        let (mut sender, conn) =
            match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
                Ok(x) => x,
                Err(e) => return text(StatusCode::BAD_GATEWAY, &e.to_string()),
            };
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let (mut parts, body) = req.into_parts();
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        parts.uri = match path.parse() {
            Ok(u) => u,
            Err(_) => return text(StatusCode::BAD_REQUEST, "bad path"),
        };
        for h in [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "upgrade",
        ] {
            parts.headers.remove(h);
        }
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|b| b.boxed()),
            Err(e) => text(StatusCode::BAD_GATEWAY, &e.to_string()),
        }
    }
}

/// Serves the proxy on `listener` until the task is dropped.
pub async fn serve_unix(proxy: Arc<Proxy>, listener: tokio::net::UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        serve_conn(Arc::clone(&proxy), stream);
    }
}

/// Serves the proxy on a loopback TCP listener (tests, local sessions).
pub async fn serve_tcp(proxy: Arc<Proxy>, listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        serve_conn(Arc::clone(&proxy), stream);
    }
}

fn serve_conn<S>(proxy: Arc<Proxy>, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let svc = hyper::service::service_fn(move |req| Arc::clone(&proxy).handle(req));
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades();
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "proxy connection ended");
        }
    });
}

/// The origin a request targets.
fn target(scheme: Scheme, authority: &str) -> Result<Origin, String> {
    let (host, port) = split_host_port(authority).map_err(|e| e.to_string())?;
    let host = Host::parse(host).map_err(|e| e.to_string())?;
    let port = match (scheme, port) {
        (_, Some(p)) => p,
        (Scheme::Http, None) => 80,
        (Scheme::Https, None) => return Err("CONNECT needs an explicit port".into()),
    };
    Ok(Origin { scheme, host, port })
}

/// A Host header, when present, must name the target.
fn host_matches(req: &Request<Incoming>, origin: &Origin) -> Result<(), String> {
    let Some(h) = req.headers().get(header::HOST) else {
        return Ok(());
    };
    let h = h
        .to_str()
        .map_err(|_| "a Host header that is not text".to_string())?;
    let (host, port) = split_host_port(h).map_err(|e| e.to_string())?;
    let host = Host::parse(host).map_err(|e| e.to_string())?;
    let port = port.unwrap_or(origin.scheme.default_port());
    if host == origin.host && port == origin.port {
        Ok(())
    } else {
        Err(format!(
            "the Host header `{h}` disagrees with the target {origin}"
        ))
    }
}

async fn connect_any(addrs: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for ip in addrs {
        let sa = SocketAddr::new(*ip, port);
        match tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(sa)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = format!("{sa}: {e}"),
            Err(_) => last = format!("{sa}: timed out"),
        }
    }
    Err(format!("cannot connect: {last}"))
}

/// The server name of a TLS ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sni {
    Name(String),
    /// A complete ClientHello without a server name.
    Absent,
    /// Not TLS, or malformed.
    NotTls,
    /// More bytes needed.
    Incomplete,
}

/// Parses the server name from the first TLS record.
pub fn client_hello_sni(b: &[u8]) -> Sni {
    if b.is_empty() {
        return Sni::Incomplete;
    }
    if b[0] != 0x16 {
        return Sni::NotTls;
    }
    if b.len() < 5 {
        return Sni::Incomplete;
    }
    let rec_len = usize::from(u16::from_be_bytes([b[3], b[4]]));
    if b.len() < 5 + rec_len {
        return Sni::Incomplete;
    }
    let r = &b[5..5 + rec_len];
    let parse = || -> Option<Sni> {
        if *r.first()? != 0x01 {
            return Some(Sni::NotTls);
        }
        let mut p = 4 + 2 + 32; // handshake header, version, random
        let sid = usize::from(*r.get(p)?);
        p += 1 + sid;
        let cs = usize::from(u16::from_be_bytes([*r.get(p)?, *r.get(p + 1)?]));
        p += 2 + cs;
        let comp = usize::from(*r.get(p)?);
        p += 1 + comp;
        if p == r.len() {
            return Some(Sni::Absent);
        }
        let ext_len = usize::from(u16::from_be_bytes([*r.get(p)?, *r.get(p + 1)?]));
        p += 2;
        let end = (p + ext_len).min(r.len());
        while p + 4 <= end {
            let ty = u16::from_be_bytes([r[p], r[p + 1]]);
            let len = usize::from(u16::from_be_bytes([r[p + 2], r[p + 3]]));
            p += 4;
            if ty == 0 {
                // server_name: list length, then (type, length, name).
                let name_type = *r.get(p + 2)?;
                let n = usize::from(u16::from_be_bytes([*r.get(p + 3)?, *r.get(p + 4)?]));
                let name = r.get(p + 5..p + 5 + n)?;
                if name_type != 0 {
                    return Some(Sni::NotTls);
                }
                return Some(String::from_utf8(name.to_vec()).map_or(Sni::NotTls, Sni::Name));
            }
            p += len;
        }
        Some(Sni::Absent)
    };
    parse().unwrap_or(Sni::NotTls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::policy::NetworkMode;

    #[tokio::test]
    async fn only_the_operators_answers_last_for_the_session() {
        let origin: Origin = "https://news.test".parse().unwrap();
        let ip: IpAddr = "93.184.216.34".parse().unwrap();
        let journal: Arc<Mutex<Vec<Value>>> = Arc::default();
        let j = Arc::clone(&journal);
        let proxy = Proxy::new(
            Policy {
                mode: NetworkMode::Ask { origins: vec![] },
                allow_private: vec![],
            },
            Resolver {
                fixed: HashMap::from([("news.test".to_string(), vec![ip])]),
            },
            Arc::new(move |v| j.lock().unwrap().push(v)),
        );
        // Nobody attached: denied, and not remembered.
        assert!(proxy.decide(&origin, "connect").await.is_err());
        assert!(proxy.decided().is_empty());
        // An operator attaches and approves: asked now, and remembered.
        let (tx, mut rx) = mpsc::channel::<Question>(1);
        proxy.set_asker(Some(tx));
        let operator = tokio::spawn(async move {
            let q = rx.recv().await.unwrap();
            let asked = q.origin.clone();
            q.reply.send(Answer::Approve).unwrap();
            asked
        });
        assert_eq!(proxy.decide(&origin, "connect").await.unwrap(), vec![ip]);
        assert_eq!(operator.await.unwrap(), origin);
        assert_eq!(proxy.decided(), vec![(origin.clone(), true)]);
        // Remembered: the operator is gone and the origin still passes.
        proxy.set_asker(None);
        assert!(proxy.decide(&origin, "connect").await.is_ok());
        let answers: Vec<Value> = journal
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "egress_answer")
            .cloned()
            .collect();
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0]["by_operator"], false);
        assert_eq!(answers[1]["by_operator"], true);
    }

    /// A minimal ClientHello with an optional server name.
    fn hello(sni: Option<&str>) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        let mut ext = Vec::new();
        if let Some(n) = sni {
            let mut sn = vec![0u8];
            sn.extend_from_slice(&(n.len() as u16).to_be_bytes());
            sn.extend_from_slice(n.as_bytes());
            let mut list = (sn.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&sn);
            ext.extend_from_slice(&[0, 0]);
            ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
            ext.extend_from_slice(&list);
        }
        // An unrelated extension first would also be skipped; add one after.
        ext.extend_from_slice(&[0, 0x2b, 0, 3, 2, 3, 4]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8];
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn server_names_are_read_from_the_client_hello() {
        assert_eq!(
            client_hello_sni(&hello(Some("allowed.test"))),
            Sni::Name("allowed.test".into())
        );
        assert_eq!(client_hello_sni(&hello(None)), Sni::Absent);
        let h = hello(Some("allowed.test"));
        assert_eq!(client_hello_sni(&h[..10]), Sni::Incomplete);
        assert_eq!(client_hello_sni(b"GET / HTTP/1.1\r\n"), Sni::NotTls);
    }

    #[test]
    fn targets() {
        assert_eq!(
            target(Scheme::Https, "a.test:443").unwrap().to_string(),
            "https://a.test"
        );
        assert!(target(Scheme::Https, "a.test").is_err());
        assert_eq!(target(Scheme::Http, "a.test").unwrap().port, 80);
        assert!(target(Scheme::Http, "a.test:0").is_err());
    }
}
