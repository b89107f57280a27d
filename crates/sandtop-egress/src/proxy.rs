//! The egress proxy: HTTP (absolute-form requests) and CONNECT, on hyper.
//!
//! One connection:
//! 1. Read the request. CONNECT `host:port` is the origin
//!    `https://host:port`; an absolute-form `http://host:port/...` request
//!    is `http://host:port`. Anything else (`https://` without CONNECT,
//!    origin-form requests) is refused.
//! 2. More than one `Host` header is refused (400, RFC 9112 §3.2), and so
//!    is a `Host` header that disagrees with the target.
//! 3. The policy judges the origin: listed, denied, an IP literal, or (in
//!    ask mode) a question to the operator, who answers approve, deny or
//!    cancel. Approve and deny last for the session; cancel refuses the
//!    requests waiting on that question only, and the run goes on (seed
//!    004: cancelling an approval request does not cancel the task). No
//!    operator attached: this request is refused. No answer within
//!    [`Limits::ask_timeout`] (120 s): the waiting request is refused, but
//!    the question stays open, and the operator's later answer still lasts
//!    for the session (docs/security.md N9).
//! 4. The proxy resolves the name itself and judges every address (the
//!    refused ranges, this host's own addresses, metadata); it then
//!    connects to exactly those addresses.
//! 5. For CONNECT it answers 200, reads the TLS ClientHello with rustls'
//!    [`Acceptor`] (in pieces of any size, across TLS records) and refuses
//!    a server name (SNI) that is not the CONNECT host, then forwards the
//!    bytes it read, unchanged, and splices.
//!    For HTTP it forwards the request in origin form and streams the
//!    response back.
//!
//! Every decision is reported to the [`Journal`], through a
//! [`JournalGate`] (a burst, then a steady rate, then summaries). At most
//! [`Limits::max_connections`] connections are served at once (one more is
//! closed at once and journaled through the gate), headers must arrive
//! within [`Limits::header_timeout`], and a tunnel idle in both directions
//! for [`Limits::tunnel_idle`] is closed (docs/security.md N8).
//!
//! Layout: tests apart (`proxy/tests.rs`): steps 3 to 5 are methods of one
//! `Proxy` (its decisions and open questions share one lock). Steps 1-2
//! (`request_target`, `host_matches`, ~135 lines) and the ClientHello reader
//! (`HelloReader`, ~90) are the split if it grows.

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
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

use rustls::server::Acceptor;

pub use super::limits::{ASK_TIMEOUT, Journal};
use super::limits::{Counted, JournalGate, Limits};
use super::policy::{Host, Origin, Policy, Scheme, Verdict, host_addresses, split_host_port};

/// The operator's answer to an origin question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Allow the origin for the rest of the session.
    Approve,
    /// Refuse the origin for the rest of the session.
    Deny,
    /// Refuse the requests waiting on this question only: nothing is
    /// remembered, the origin's next request asks again, and the run goes
    /// on (seed 004: cancelling an approval request does not cancel the
    /// task; to stop it, stop the run).
    Cancel,
}

/// How an open question ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Answered(Answer),
    /// The operator went away (the run detached) without answering.
    Gone,
}

/// What the operator decided, and the questions still open. One lock, so
/// a request that finds no decision also finds the question that will
/// make it.
#[derive(Debug, Default)]
struct Decisions {
    /// Origins the operator decided this session.
    decided: Vec<(Origin, bool)>,
    /// Questions asked and not answered yet (each request to the origin
    /// waits on it, rather than asking again), timed out or not.
    open: Vec<(Origin, watch::Receiver<Option<Outcome>>)>,
}

/// A question for the operator.
#[derive(Debug)]
pub struct Question {
    pub origin: Origin,
    pub reply: oneshot::Sender<Answer>,
}

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

/// The proxy's shared state.
pub struct Proxy {
    pub policy: Policy,
    pub resolver: Resolver,
    /// The operator's decisions and open questions (shared with the task
    /// that waits for each answer).
    decisions: Arc<Mutex<Decisions>>,
    /// Serialises asking, so one origin has one open question.
    asking: tokio::sync::Mutex<()>,
    asker: Mutex<Option<mpsc::Sender<Question>>>,
    journal: Arc<JournalGate>,
    limits: Limits,
    /// Places under [`Limits::max_connections`].
    slots: Arc<tokio::sync::Semaphore>,
    /// Connections given a slot since the start.
    served: std::sync::atomic::AtomicU64,
    /// This host's addresses when fixed (tests); else read at each decision.
    host_addresses: Option<Vec<IpAddr>>,
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
        Proxy::with_limits(policy, resolver, journal, Limits::default())
    }

    /// A proxy with other ceilings than [`Limits::default`] (tests).
    pub fn with_limits(
        policy: Policy,
        resolver: Resolver,
        journal: Journal,
        limits: Limits,
    ) -> Proxy {
        Proxy {
            policy,
            resolver,
            decisions: Arc::default(),
            asking: tokio::sync::Mutex::new(()),
            asker: Mutex::new(None),
            journal: Arc::new(JournalGate::new(journal, limits)),
            limits,
            slots: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
            served: std::sync::atomic::AtomicU64::new(0),
            host_addresses: None,
        }
    }

    /// Connections served now.
    pub fn open_connections(&self) -> usize {
        self.limits.max_connections - self.slots.available_permits()
    }

    /// Connections given a slot (served) since the proxy started; the
    /// others were closed at once as over the cap.
    pub fn served_connections(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Writes the journal's summary of what it held back, if any (tests,
    /// and before the proxy stops).
    pub fn flush_journal(&self) {
        self.journal.flush();
    }

    /// Judges addresses against these host addresses instead of the ones
    /// this machine's interfaces have (tests).
    pub fn with_host_addresses(mut self, addrs: Vec<IpAddr>) -> Proxy {
        self.host_addresses = Some(addrs);
        self
    }

    /// Whether an operator is attached to answer questions.
    pub fn attached(&self) -> bool {
        self.asker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Sets (or clears) where questions go.
    pub fn set_asker(&self, asker: Option<mpsc::Sender<Question>>) {
        *self.asker.lock().unwrap_or_else(|p| p.into_inner()) = asker;
    }

    fn decisions(&self) -> std::sync::MutexGuard<'_, Decisions> {
        self.decisions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The origins the operator decided this session (true: approved).
    pub fn decided(&self) -> Vec<(Origin, bool)> {
        self.decisions().decided.clone()
    }

    /// Origins with a question the operator has not answered yet.
    pub fn open_questions(&self) -> Vec<Origin> {
        self.decisions()
            .open
            .iter()
            .map(|(o, _)| o.clone())
            .collect()
    }

    fn log(&self, origin: &Origin, via: &str, allowed: bool, reason: &str, addrs: &[IpAddr]) {
        self.journal.entry(json!({
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
            verdict = self.ask(origin).await;
        }
        if let Verdict::Deny(reason) = verdict {
            self.log(origin, via, false, &reason, &[]);
            return Err(reason);
        }
        let addrs = self.resolver.resolve(&origin.host, origin.port).await;
        let host = match &self.host_addresses {
            Some(h) => h.clone(),
            None => match host_addresses() {
                Ok(h) => h,
                Err(e) => {
                    // Without them an address of this host could pass.
                    let reason = format!("{origin}: this host's addresses cannot be read ({e})");
                    self.log(origin, via, false, &reason, &addrs);
                    return Err(reason);
                }
            },
        };
        match self.policy.judge_addrs(origin, &addrs, &host) {
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

    /// Asks the attached operator about `origin`, or joins the question
    /// already open for it, and waits up to [`Limits::ask_timeout`] for
    /// the answer. Only the operator's own approve and deny last for the
    /// session: nobody attached refuses this request only, cancel refuses
    /// the requests waiting on the question only, and a timeout refuses
    /// this request but leaves the question open (its late answer is
    /// recorded by [`settle`] when it comes).
    async fn ask(&self, origin: &Origin) -> Verdict {
        let mut open = {
            let _one_at_a_time = self.asking.lock().await;
            // Someone may have answered, or asked, while we waited.
            let (verdict, open) = {
                let d = self.decisions();
                let open = d.open.iter().find(|(o, _)| o == origin);
                (
                    self.policy.judge_origin(origin, &d.decided),
                    open.map(|(_, rx)| rx.clone()),
                )
            };
            if verdict != Verdict::Ask {
                return verdict;
            }
            match open {
                Some(rx) => rx,
                None => match self.pose(origin).await {
                    Some(rx) => rx,
                    None => {
                        // Not remembered: a run that attaches later asks.
                        self.journal.entry(json!({
                            "kind": "egress_answer",
                            "origin": origin.to_string(),
                            "answer": Answer::Deny,
                            "by_operator": false,
                        }));
                        return Verdict::Deny(format!("the operator answered Deny for {origin}"));
                    }
                },
            }
        };
        let timeout = self.limits.ask_timeout;
        let outcome = match tokio::time::timeout(timeout, open.wait_for(Option::is_some)).await {
            Ok(Ok(o)) => (*o).unwrap_or(Outcome::Gone),
            Ok(Err(_)) => Outcome::Gone,
            Err(_) => {
                self.journal.entry(json!({
                    "kind": "egress_answer",
                    "origin": origin.to_string(),
                    "answer": Answer::Deny,
                    "by_operator": false,
                    "timed_out": true,
                    "question_open": true,
                }));
                return Verdict::Deny(format!(
                    "the operator did not answer within {timeout:?} for {origin}; \
                     the question stays open, and a later answer lasts for the session"
                ));
            }
        };
        match outcome {
            Outcome::Answered(Answer::Approve) => Verdict::Allow,
            Outcome::Answered(Answer::Cancel) => Verdict::Deny(format!(
                "the operator answered Cancel for {origin}: this request only \
                 (the origin will be asked about again)"
            )),
            Outcome::Answered(Answer::Deny) => {
                Verdict::Deny(format!("the operator answered Deny for {origin}"))
            }
            Outcome::Gone => Verdict::Deny(format!(
                "the operator went away without answering for {origin}"
            )),
        }
    }

    /// Sends the question to the attached operator and opens it; `None`
    /// when nobody is attached (or the operator is gone).
    async fn pose(&self, origin: &Origin) -> Option<watch::Receiver<Option<Outcome>>> {
        let asker = self
            .asker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let (tx, rx) = oneshot::channel();
        asker
            .send(Question {
                origin: origin.clone(),
                reply: tx,
            })
            .await
            .ok()?;
        let (outcome, waiting) = watch::channel(None);
        self.decisions()
            .open
            .push((origin.clone(), waiting.clone()));
        tokio::spawn(settle(
            rx,
            outcome,
            origin.clone(),
            Arc::clone(&self.decisions),
            Arc::clone(&self.journal),
            self.limits.ask_timeout,
        ));
        Some(waiting)
    }

    /// Handles one request on a client connection.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, hyper::Error> {
        let target = match request_target(req.method(), req.uri(), req.headers()) {
            Ok(t) => t,
            Err(refused) => {
                if let Some(origin) = &refused.origin {
                    self.log(origin, via(req.method()), false, &refused.reason, &[]);
                }
                return Ok(text(refused.status, &refused.reason));
            }
        };
        Ok(match target.path {
            None => self.connect(req, target.origin).await,
            Some(path) => self.forward(req, target.origin, path).await,
        })
    }

    async fn connect(
        self: Arc<Self>,
        req: Request<Incoming>,
        origin: Origin,
    ) -> Response<ProxyBody> {
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
        // The client's first bytes are its ClientHello (in any number of
        // reads and TLS records); its server name must be the CONNECT host.
        // Everything read is forwarded unchanged once it is judged.
        let deadline = tokio::time::Instant::now() + HELLO_TIMEOUT;
        let mut reader = HelloReader::new();
        let mut hello = Vec::with_capacity(2048);
        let sni = loop {
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, client.read(&mut buf))
                .await
                .map_err(|_| format!("no complete TLS ClientHello within {HELLO_TIMEOUT:?}"))?
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the client closed the tunnel".into());
            }
            hello.extend_from_slice(&buf[..n]);
            match reader.push(&buf[..n]) {
                Sni::Incomplete if hello.len() < MAX_HELLO => continue,
                Sni::Incomplete => return Err("an oversized ClientHello".into()),
                other => break other,
            }
        };
        let ok = match (&sni, &origin.host) {
            (Sni::Name(n), Host::Name(h)) => {
                n.strip_suffix('.').unwrap_or(n).eq_ignore_ascii_case(h)
            }
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
        let mut client = Counted::new(client, None);
        let idle = self.limits.tunnel_idle;
        let last = client.idle_clock();
        let watchdog = async move {
            loop {
                let quiet = last.idle_for();
                if quiet >= idle {
                    return;
                }
                tokio::time::sleep(idle - quiet).await;
            }
        };
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut client, &mut server) => {
                r.map(|_| ()).map_err(|e| e.to_string())
            }
            () = watchdog => Err(format!("idle for {idle:?}: closed")),
        }
    }

    async fn forward(
        self: Arc<Self>,
        req: Request<Incoming>,
        origin: Origin,
        path: http::Uri,
    ) -> Response<ProxyBody> {
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
        parts.uri = path;
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
    let _summaries = summaries(&proxy);
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
    let _summaries = summaries(&proxy);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        serve_conn(Arc::clone(&proxy), stream);
    }
}

/// Writes the journal's due summaries every second while serving (ends
/// when the returned guard is dropped).
fn summaries(proxy: &Arc<Proxy>) -> tokio_util_abort::AbortOnDrop {
    let weak = Arc::downgrade(proxy);
    tokio_util_abort::AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match weak.upgrade() {
                Some(p) => p.journal.flush_due(),
                None => return,
            }
        }
    }))
}

mod tokio_util_abort {
    /// Aborts its task when dropped.
    pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
}

fn serve_conn<S>(proxy: Arc<Proxy>, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(permit) = Arc::clone(&proxy.slots).try_acquire_owned() else {
        // Over the cap: closed at once (dropped), and journaled through
        // the gate, so a storm of them is a summary.
        proxy.journal.entry(json!({
            "kind": "egress",
            "origin": "",
            "via": "connection",
            "decision": "denied",
            "reason": format!(
                "more than {} connections at once",
                proxy.limits.max_connections
            ),
            "addresses": [],
        }));
        return;
    };
    proxy
        .served
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stream = Counted::new(stream, Some(permit));
    tokio::spawn(async move {
        let header_timeout = proxy.limits.header_timeout;
        let svc = hyper::service::service_fn(move |req| Arc::clone(&proxy).handle(req));
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades();
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "proxy connection ended");
        }
    });
}

/// Waits for the operator's answer to one question, however late, and
/// closes it: approve and deny are remembered for the session, cancel and
/// a departed operator are not; the answer is journaled (`late` when it
/// came after the requests' timeout) and handed to the requests still
/// waiting on it.
async fn settle(
    reply: oneshot::Receiver<Answer>,
    outcome: watch::Sender<Option<Outcome>>,
    origin: Origin,
    decisions: Arc<Mutex<Decisions>>,
    journal: Arc<JournalGate>,
    timeout: Duration,
) {
    let asked = tokio::time::Instant::now();
    let got = match reply.await {
        Ok(a) => Outcome::Answered(a),
        Err(_) => Outcome::Gone,
    };
    {
        let mut d = decisions.lock().unwrap_or_else(|p| p.into_inner());
        d.open.retain(|(o, _)| o != &origin);
        if let Outcome::Answered(a @ (Answer::Approve | Answer::Deny)) = got {
            d.decided.push((origin.clone(), a == Answer::Approve));
        }
    }
    let (answer, by_operator) = match got {
        Outcome::Answered(a) => (a, true),
        Outcome::Gone => (Answer::Deny, false),
    };
    journal.entry(json!({
        "kind": "egress_answer",
        "origin": origin.to_string(),
        "answer": answer,
        "by_operator": by_operator,
        "late": asked.elapsed() >= timeout,
    }));
    outcome.send_replace(Some(got));
}

/// Where a request goes, read from its head alone (no policy, no I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The origin the request targets.
    pub origin: Origin,
    /// For a forwarded `http://` request, the origin-form path sent on;
    /// `None` for CONNECT.
    pub path: Option<http::Uri>,
}

/// A request head refused before the policy is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: StatusCode,
    pub reason: String,
    /// The origin, when the target was read before the refusal (a Host
    /// header that disagrees with it): such refusals are journaled.
    pub origin: Option<Origin>,
}

fn refuse(status: StatusCode, reason: impl Into<String>, origin: Option<&Origin>) -> Refused {
    Refused {
        status,
        reason: reason.into(),
        origin: origin.cloned(),
    }
}

fn via(method: &Method) -> &'static str {
    if method == Method::CONNECT {
        "connect"
    } else {
        "http"
    }
}

/// Steps 1 and 2 of the module doc: the target of a request (CONNECT
/// `host:port`, or an absolute `http://` URL) and its `Host` headers.
/// Pure, so the fuzz target `proxy_head` drives it with any request head.
pub fn request_target(
    method: &Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
) -> Result<Target, Refused> {
    let bad = |reason: &str| refuse(StatusCode::BAD_REQUEST, reason, None);
    let (scheme, path) = if method == Method::CONNECT {
        // A CONNECT target is authority-form only: a path or scheme on it
        // is a different request.
        if uri.scheme().is_some() || uri.path_and_query().is_some() {
            return Err(bad("CONNECT needs host:port"));
        }
        (Scheme::Https, None)
    } else {
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return Err(bad("only http:// is forwarded; use CONNECT for https")),
            None => return Err(bad("a proxy request needs an absolute URL")),
        }
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let path: http::Uri = path.parse().map_err(|_| bad("bad path"))?;
        (Scheme::Http, Some(path))
    };
    let Some(authority) = uri.authority() else {
        return Err(bad(if path.is_none() {
            "CONNECT needs host:port"
        } else {
            "no host in the URL"
        }));
    };
    if authority.as_str().contains('@') {
        return Err(bad("user information in a proxy target is refused"));
    }
    let origin = target(scheme, authority.as_str()).map_err(|e| bad(&e))?;
    host_matches(headers, &origin)?;
    Ok(Target { origin, path })
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

/// A Host header, when present, must be the only one and name the target.
/// Two of them are refused whatever they say: a server behind the origin
/// might read the other one (RFC 9112 §3.2: 400).
fn host_matches(headers: &http::HeaderMap, origin: &Origin) -> Result<(), Refused> {
    let mut all = headers.get_all(header::HOST).iter();
    let Some(h) = all.next() else {
        return Ok(());
    };
    if all.next().is_some() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "more than one Host header",
            Some(origin),
        ));
    }
    let forbid = |e: String| refuse(StatusCode::FORBIDDEN, e, Some(origin));
    let h = h
        .to_str()
        .map_err(|_| forbid("a Host header that is not text".to_string()))?;
    let (host, port) = split_host_port(h).map_err(|e| forbid(e.to_string()))?;
    let host = Host::parse(host).map_err(|e| forbid(e.to_string()))?;
    let port = port.unwrap_or(origin.scheme.default_port());
    if host == origin.host && port == origin.port {
        Ok(())
    } else {
        Err(forbid(format!(
            "the Host header `{h}` disagrees with the target {origin}"
        )))
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

/// How long a tunnel waits for the whole ClientHello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a client may send before its ClientHello is complete (a
/// handshake message is at most 64 KiB, with record headers on top).
pub const MAX_HELLO: usize = 80 * 1024;

/// The server name of a TLS ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sni {
    /// The DNS name it asks for, lower-case.
    Name(String),
    /// A complete ClientHello without a DNS server name (an IP address
    /// there counts as none, RFC 6066 §3).
    Absent,
    /// Not TLS, or a ClientHello rustls refuses (why).
    NotTls(String),
    /// More bytes needed.
    Incomplete,
}

/// Reads a client's first bytes until its ClientHello is complete, with
/// rustls' server-side [`Acceptor`]: the bytes may come in pieces of any
/// size and the ClientHello may span several TLS records. Nothing is
/// answered to the client: the reader only looks.
pub struct HelloReader {
    acceptor: Option<Acceptor>,
    done: Option<Sni>,
}

impl std::fmt::Debug for HelloReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelloReader")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Default for HelloReader {
    fn default() -> Self {
        HelloReader::new()
    }
}

impl HelloReader {
    pub fn new() -> HelloReader {
        HelloReader {
            acceptor: Some(Acceptor::default()),
            done: None,
        }
    }

    /// Takes the next bytes the client sent; says what is known so far
    /// (once known, the answer stays).
    pub fn push(&mut self, mut bytes: &[u8]) -> Sni {
        if let Some(done) = &self.done {
            return done.clone();
        }
        let Some(acceptor) = self.acceptor.as_mut() else {
            return Sni::NotTls("the reader has failed".into());
        };
        while !bytes.is_empty() {
            if let Err(e) = acceptor.read_tls(&mut bytes) {
                return self.finish(Sni::NotTls(e.to_string()));
            }
            match acceptor.accept() {
                Ok(None) => {}
                Ok(Some(accepted)) => {
                    let sni = match accepted.client_hello().server_name() {
                        Some(n) => Sni::Name(n.to_ascii_lowercase()),
                        None => Sni::Absent,
                    };
                    return self.finish(sni);
                }
                Err((e, _alert)) => return self.finish(Sni::NotTls(e.to_string())),
            }
        }
        Sni::Incomplete
    }

    fn finish(&mut self, sni: Sni) -> Sni {
        self.acceptor = None;
        self.done = Some(sni.clone());
        sni
    }
}

/// The server name of a ClientHello given whole.
pub fn client_hello_sni(b: &[u8]) -> Sni {
    HelloReader::new().push(b)
}

#[cfg(test)]
mod tests;
