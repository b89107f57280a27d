//! The egress proxy on loopback: the policy enforced on real HTTP and
//! CONNECT traffic (docs/security.md N2, N3; docs/contract.md rule 21). Names are
//! pinned to 127.0.0.1 with the proxy's fixed resolver, so nothing leaves
//! this machine.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use host_cli::egress::limits::Limits;
use host_cli::egress::policy::{Policy, Verdict};
use host_cli::egress::proxy::{self, Answer, Proxy, Question, Resolver};
use host_cli::egress::service::{self, Attached, Clients};
use sandtop_testkit::tls::{client_hello, client_hello_in_two_records};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A tiny origin server: answers every HTTP request with its Host header,
/// or (for a TLS-looking first byte) echoes what it receives.
async fn origin_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                if n > 0 && buf[0] == 0x16 {
                    let _ = s.write_all(&buf[..n]).await;
                    return;
                }
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let host = req
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("host: ")
                            .or_else(|| l.strip_prefix("Host: "))
                    })
                    .unwrap_or("")
                    .to_string();
                let first = req.lines().next().unwrap_or("").to_string();
                let body = format!("origin saw `{first}` for host {host}");
                let _ = s
                    .write_all(
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                            .as_bytes(),
                    )
                    .await;
            });
        }
    });
    addr
}

struct Fx {
    proxy: SocketAddr,
    origin: SocketAddr,
    journal: Arc<Mutex<Vec<Value>>>,
    state: Arc<Proxy>,
    /// The attached control client (see [`operate`]).
    clients: Clients,
}

async fn fx(mode: &str, allow_private: &[&str]) -> Fx {
    fx_with(mode, allow_private, None).await
}

/// `host`: this host's addresses as the proxy should see them (None: the
/// real ones).
async fn fx_with(mode: &str, allow_private: &[&str], host: Option<Vec<IpAddr>>) -> Fx {
    fx_limits(mode, allow_private, host, Limits::default()).await
}

async fn fx_limits(
    mode: &str,
    allow_private: &[&str],
    host: Option<Vec<IpAddr>>,
    limits: Limits,
) -> Fx {
    let origin = origin_server().await;
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let mut resolver = Resolver::default();
    for name in [
        "allowed.test",
        "blocked.test",
        "allowed.test.evil.test",
        "other.test",
    ] {
        resolver.fixed.insert(name.into(), vec![lo]);
    }
    resolver
        .fixed
        .insert("meta.test".into(), vec!["169.254.169.254".parse().unwrap()]);
    for (name, ip) in [
        // Forms of IPv6 that carry an IPv4 address.
        ("mapped.test", "::ffff:127.0.0.1"),
        ("compat.test", "::127.0.0.1"),
        ("sixtofour.test", "2002:7f00:1::1"),
        ("nat64.test", "64:ff9b::7f00:1"),
        ("teredo.test", "2001:0:808:808::80ff:fffe"),
        ("meta64.test", "64:ff9b::a9fe:a9fe"),
        ("sitelocal.test", "fec0::1"),
        // A global address (never connected to: every test refuses it).
        ("self.test", "93.184.216.34"),
    ] {
        resolver
            .fixed
            .insert(name.into(), vec![ip.parse().unwrap()]);
    }
    let journal = Arc::new(Mutex::new(Vec::new()));
    let j = Arc::clone(&journal);
    let clients: Clients = Arc::default();
    let c = Arc::clone(&clients);
    let policy = Policy {
        mode: mode
            .replace("PORT", &origin.port().to_string())
            .parse()
            .unwrap(),
        allow_private: allow_private.iter().map(|c| c.parse().unwrap()).collect(),
    };
    let mut state = Proxy::with_limits(
        policy,
        resolver,
        Arc::new(move |v| {
            service::forward(&c, &v);
            j.lock().unwrap().push(v);
        }),
        limits,
    );
    if let Some(h) = host {
        state = state.with_host_addresses(h);
    }
    let state = Arc::new(state);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = l.local_addr().unwrap();
    tokio::spawn(proxy::serve_tcp(Arc::clone(&state), l));
    Fx {
        proxy,
        origin,
        journal,
        state,
        clients,
    }
}

/// Sends raw bytes to the proxy and returns everything it answers.
async fn raw(proxy: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_string()
}

async fn get(f: &Fx, host: &str) -> String {
    let port = f.origin.port();
    raw(
        f.proxy,
        &format!("GET http://{host}:{port}/page?q=1 HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

const ALLOW: &str = "allow:http://allowed.test:PORT,https://allowed.test:PORT";

#[tokio::test]
async fn n2_only_listed_origins_pass_exactly() {
    let f = fx(ALLOW, &["127.0.0.0/8"]).await;
    let ok = get(&f, "allowed.test").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(
        ok.contains("`GET /page?q=1 HTTP/1.1`"),
        "forwarded in origin form: {ok}"
    );
    for bad in ["blocked.test", "allowed.test.evil.test", "other.test"] {
        let r = get(&f, bad).await;
        assert!(r.starts_with("HTTP/1.1 403"), "{bad}: {r}");
    }
    // Another port of the same host is another origin.
    let r = raw(
        f.proxy,
        "GET http://allowed.test:1/ HTTP/1.1\r\nHost: allowed.test:1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    let denied = f
        .journal
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["decision"] == "denied")
        .count();
    assert!(denied >= 4, "every refusal is journalled");
}

#[tokio::test]
async fn n2_ip_literals_and_disagreeing_hosts_are_refused() {
    let f = fx(ALLOW, &["127.0.0.0/8"]).await;
    let port = f.origin.port();
    let r = get(&f, "127.0.0.1").await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("IP literal"),
        "{r}"
    );
    // The Host header names another site than the request line.
    let r = raw(
        f.proxy,
        &format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: blocked.test:{port}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("disagrees"),
        "{r}"
    );
    let r = raw(
        f.proxy,
        &format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: blocked.test:{port}\r\n\r\n"),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    // Origin-form requests are not proxy requests.
    let r = raw(
        f.proxy,
        "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
}

#[tokio::test]
async fn n3_private_addresses_need_an_explicit_range_and_metadata_never_passes() {
    let f = fx(ALLOW, &[]).await;
    let r = get(&f, "allowed.test").await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("non-public"),
        "{r}"
    );
    let f = fx("allow:http://meta.test", &["169.254.0.0/16"]).await;
    let r = raw(
        f.proxy,
        "GET http://meta.test/ HTTP/1.1\r\nHost: meta.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("metadata"),
        "{r}"
    );
}

#[tokio::test]
async fn n3_addresses_carrying_a_refused_ipv4_address_are_refused() {
    // 127.0.0.0/8 and ::/0 listed: only what the IPv6 forms carry can
    // refuse them.
    let f = fx(
        "allow:http://mapped.test,http://compat.test,http://sixtofour.test,http://nat64.test,http://teredo.test,http://meta64.test,http://sitelocal.test",
        &["::/0"],
    )
    .await;
    for (name, carried) in [
        ("mapped.test", "127.0.0.1"),
        ("compat.test", "127.0.0.1"),
        ("sixtofour.test", "127.0.0.1"),
        ("nat64.test", "127.0.0.1"),
        ("teredo.test", "127.0.0.1"),
    ] {
        let r = raw(
            f.proxy,
            &format!("GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(
            r.starts_with("HTTP/1.1 403")
                && r.contains(&format!("which carries the non-public address {carried}")),
            "{name}: {r}"
        );
    }
    let r = raw(
        f.proxy,
        "GET http://meta64.test/ HTTP/1.1\r\nHost: meta64.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("metadata address 169.254.169.254"),
        "{r}"
    );
    // Without ::/0, the site-local range is refused as such.
    let f = fx("allow:http://sitelocal.test", &[]).await;
    let r = raw(
        f.proxy,
        "GET http://sitelocal.test/ HTTP/1.1\r\nHost: sitelocal.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("non-public address fec0::1 (Site-Local"),
        "{r}"
    );
}

#[tokio::test]
async fn n4_an_address_of_this_host_is_refused_even_when_public() {
    // The proxy is told that 93.184.216.34 is one of this host's
    // addresses (as on a server with a public interface).
    let host: Vec<IpAddr> = vec!["93.184.216.34".parse().unwrap()];
    let f = fx_with("allow:http://self.test", &[], Some(host)).await;
    let r = raw(
        f.proxy,
        "GET http://self.test/ HTTP/1.1\r\nHost: self.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 403")
            && r.contains("93.184.216.34")
            && r.contains("an address of this host"),
        "{r}"
    );
    let journalled = f.journal.lock().unwrap().iter().any(|e| {
        e["decision"] == "denied"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("an address of this host"))
    });
    assert!(journalled);
    // With the real interfaces: 127.0.0.1 is one of them, so a listed
    // 127.0.0.0/8 is the only way it passes (the fixture's requests do).
    let real = host_cli::egress::policy::host_addresses().unwrap();
    assert!(real.contains(&"127.0.0.1".parse().unwrap()), "{real:?}");
}

#[tokio::test]
async fn n2_more_than_one_host_header_is_refused() {
    let f = fx(ALLOW, &["127.0.0.0/8"]).await;
    let port = f.origin.port();
    for second in ["allowed.test", "blocked.test"] {
        let r = raw(
            f.proxy,
            &format!("GET http://allowed.test:{port}/two-hosts HTTP/1.1\r\nHost: allowed.test:{port}\r\nHost: {second}:{port}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(
            r.starts_with("HTTP/1.1 400") && r.contains("more than one Host header"),
            "{second}: {r}"
        );
        let r = raw(
            f.proxy,
            &format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\nHost: {second}:{port}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(
            r.starts_with("HTTP/1.1 400") && r.contains("more than one Host header"),
            "{second}: {r}"
        );
    }
    let refusals = f
        .journal
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "more than one Host header")
        .count();
    assert_eq!(refusals, 4, "every refusal is journalled");
    // The control: one Host header passes.
    assert!(get(&f, "allowed.test").await.starts_with("HTTP/1.1 200"));
}

/// CONNECTs, sends a ClientHello naming `sni`, returns what comes back
/// after the proxy's answer.
async fn tunnel(f: &Fx, host: &str, sni: &str) -> (String, Vec<u8>) {
    tunnel_with(f, host, &client_hello(sni), false).await
}

/// CONNECTs and sends `hello` (one byte per write when `bytewise`).
async fn tunnel_with(f: &Fx, host: &str, hello: &[u8], bytewise: bool) -> (String, Vec<u8>) {
    let port = f.origin.port();
    let mut s = TcpStream::connect(f.proxy).await.unwrap();
    s.write_all(
        format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 1024];
    let n = s.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_string();
    if !head.starts_with("HTTP/1.1 200") {
        return (head, Vec::new());
    }
    s.set_nodelay(true).unwrap();
    if bytewise {
        for b in hello {
            s.write_all(std::slice::from_ref(b)).await.unwrap();
            s.flush().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    } else {
        s.write_all(hello).await.unwrap();
    }
    let mut back = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut back)).await;
    (head, back)
}

#[tokio::test]
async fn n2_connect_tunnels_only_to_the_named_server() {
    let f = fx(ALLOW, &["127.0.0.0/8"]).await;
    let (head, back) = tunnel(&f, "allowed.test", "allowed.test").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        back,
        client_hello("allowed.test"),
        "the hello reached the origin and came back"
    );
    // A tunnel to an allowed host whose TLS names another server is cut.
    let (head, back) = tunnel(&f, "allowed.test", "blocked.test").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(back.is_empty(), "bytes flowed for a mismatched SNI");
    let (head, _) = tunnel(&f, "blocked.test", "blocked.test").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let mismatch = f.journal.lock().unwrap().iter().any(|e| {
        e["reason"]
            .as_str()
            .is_some_and(|r| r.contains("TLS server name"))
    });
    assert!(mismatch, "the SNI refusal is journalled");
}

#[tokio::test]
async fn n2_a_client_hello_in_pieces_and_records_is_judged_whole() {
    let f = fx(ALLOW, &["127.0.0.0/8"]).await;
    // One byte per write, the hello split across two TLS records: the
    // proxy reads the server name and forwards exactly what was sent.
    let two = client_hello_in_two_records("allowed.test");
    let (head, back) = tunnel_with(&f, "allowed.test", &two, true).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(back, two, "the hello reached the origin unchanged");
    // The same with another server name is cut, with nothing forwarded.
    let two = client_hello_in_two_records("blocked.test");
    let (head, back) = tunnel_with(&f, "allowed.test", &two, true).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(back.is_empty(), "bytes flowed for a mismatched SNI");
    // Not TLS at all: cut.
    let (_, back) = tunnel_with(&f, "allowed.test", b"GET / HTTP/1.1\r\n\r\n", false).await;
    assert!(back.is_empty());
    let reasons: Vec<String> = f
        .journal
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .filter(|r| r.contains("TLS server name"))
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("blocked.test"), "{reasons:?}");
}

#[tokio::test]
async fn ask_mode_asks_once_per_origin_and_denies_by_default() {
    let f = fx("ask", &["127.0.0.0/8"]).await;
    // No operator attached: deny.
    let r = get(&f, "other.test").await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    // That denial lasts for the session.
    let f = fx("ask", &["127.0.0.0/8"]).await;
    let (tx, mut rx) = mpsc::channel::<Question>(4);
    f.state.set_asker(Some(tx));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let a = Arc::clone(&asked);
    tokio::spawn(async move {
        while let Some(q) = rx.recv().await {
            let answer = if q.origin.to_string().contains("allowed") {
                Answer::Approve
            } else {
                Answer::Deny
            };
            a.lock().unwrap().push(q.origin.to_string());
            let _ = q.reply.send(answer);
        }
    });
    assert!(get(&f, "allowed.test").await.starts_with("HTTP/1.1 200"));
    assert!(get(&f, "allowed.test").await.starts_with("HTTP/1.1 200"));
    assert!(get(&f, "other.test").await.starts_with("HTTP/1.1 403"));
    assert!(get(&f, "other.test").await.starts_with("HTTP/1.1 403"));
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "each origin is asked once: {asked:?}");
    // The policy itself never turned an unlisted origin into Allow.
    let p = Policy {
        mode: "ask".parse().unwrap(),
        allow_private: vec![],
    };
    assert_eq!(
        p.judge_origin(&"https://x.test".parse().unwrap(), &[]),
        Verdict::Ask
    );
}

/// A run's operator, scripted: each origin question takes the next answer
/// from `answers`, waiting for it as long as it takes (a person at a
/// terminal); what the proxy journals lands in `seen` (the trajectory).
struct Scripted {
    answers: std::sync::mpsc::Receiver<Answer>,
    asked: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Attached for Scripted {
    fn answer(&mut self, origin: &str) -> Answer {
        self.asked.lock().unwrap().push(origin.to_string());
        self.answers.recv().unwrap_or(Answer::Deny)
    }

    fn journal(&mut self, entry: &Value) {
        self.seen.lock().unwrap().push(entry.clone());
    }
}

/// An attached run, as `host-cli run` attaches: the proxy's control socket
/// served as `host-cli egress-proxy` serves it, and `service::attach`
/// with a scripted operator.
struct Operator {
    answers: std::sync::mpsc::Sender<Answer>,
    asked: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<Value>>>,
    /// How often `attach` called its `on_cancel` (the run's interrupt).
    cancels: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

async fn operate(f: &Fx) -> Operator {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("egress-control.sock");
    let l = tokio::net::UnixListener::bind(&control).unwrap();
    tokio::spawn(service::serve_control(
        Arc::clone(&f.state),
        l,
        Arc::clone(&f.clients),
    ));
    let (answers, rx) = std::sync::mpsc::channel();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let cancels = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&cancels);
    service::attach(
        &control,
        Box::new(Scripted {
            answers: rx,
            asked: Arc::clone(&asked),
            seen: Arc::clone(&seen),
        }),
        Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    while !f.state.attached() {
        assert!(t0.elapsed() < Duration::from_secs(5), "never attached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Operator {
        answers,
        asked,
        seen,
        cancels,
        _dir: dir,
    }
}

/// The `egress_answer` entries of a journal for `origin`.
fn answers_for(journal: &Mutex<Vec<Value>>, origin: &str) -> Vec<Value> {
    journal
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "egress_answer" && e["origin"] == origin)
        .cloned()
        .collect()
}

/// Waits until `cond` holds (at most 5 s).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(5), "waited for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Seed 004: "cancelling an approval request does not cancel the task".
/// `cancel` refuses that one request: the run is not interrupted, nothing
/// is remembered, and the origin's next request asks again.
#[tokio::test]
async fn origin_cancel_refuses_that_request_only_and_the_run_goes_on() {
    let f = fx("ask", &["127.0.0.0/8"]).await;
    let op = operate(&f).await;
    let origin = format!("http://other.test:{}", f.origin.port());
    op.answers.send(Answer::Cancel).unwrap();
    let r = get(&f, "other.test").await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(
        r.contains(&format!(
            "the operator answered Cancel for {origin}: this request only"
        )),
        "{r}"
    );
    assert_eq!(
        op.cancels.load(Ordering::SeqCst),
        0,
        "cancel stopped the run"
    );
    assert!(f.state.decided().is_empty(), "{:?}", f.state.decided());
    assert!(f.state.open_questions().is_empty());
    // The task goes on: the next request to that origin asks again, and
    // this answer (approve) lasts.
    op.answers.send(Answer::Approve).unwrap();
    let r = get(&f, "other.test").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let r = get(&f, "other.test").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(
        *op.asked.lock().unwrap(),
        vec![origin.clone(), origin.clone()]
    );
    assert_eq!(op.cancels.load(Ordering::SeqCst), 0);
    // Both answers are journaled as the operator's, and reach the run.
    let answers = answers_for(&f.journal, &origin);
    let words: Vec<&Value> = answers.iter().map(|e| &e["answer"]).collect();
    assert_eq!(words, ["cancel", "approve"], "{answers:?}");
    assert!(
        answers.iter().all(|e| e["by_operator"] == true),
        "{answers:?}"
    );
    until("the run's copy of the answers", || {
        answers_for(&op.seen, &origin).len() == 2
    })
    .await;
}

/// A question nobody answers refuses the waiting requests at the timeout
/// (here 400 ms; 120 s by default), but stays open: no second question is
/// put for the origin, and the operator's late answer is journaled and
/// lasts for the session — a late approve lets the next request through
/// without a question, a late deny refuses it without one.
#[tokio::test]
async fn an_unanswered_origin_question_refuses_at_the_timeout_and_a_late_answer_lasts() {
    let timeout = Duration::from_millis(400);
    let f = fx_limits(
        "ask",
        &["127.0.0.0/8"],
        None,
        Limits {
            ask_timeout: timeout,
            ..Limits::default()
        },
    )
    .await;
    let op = operate(&f).await;
    let port = f.origin.port();
    let other = format!("http://other.test:{port}");
    let blocked = format!("http://blocked.test:{port}");
    for _ in 0..2 {
        let t0 = Instant::now();
        let r = get(&f, "other.test").await;
        let took = t0.elapsed();
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        assert!(r.contains("did not answer within 400ms"), "{r}");
        assert!(r.contains("the question stays open"), "{r}");
        assert!(took >= timeout && took < Duration::from_secs(3), "{took:?}");
        // Still one question, still open.
        assert_eq!(*op.asked.lock().unwrap(), vec![other.clone()]);
        assert_eq!(
            f.state
                .open_questions()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![other.clone()]
        );
    }
    let timed_out = answers_for(&f.journal, &other);
    assert_eq!(timed_out.len(), 2, "{timed_out:?}");
    assert!(
        timed_out
            .iter()
            .all(|e| e["timed_out"] == true && e["by_operator"] == false),
        "{timed_out:?}"
    );
    assert!(f.state.decided().is_empty());
    // The operator approves, late: remembered and journaled.
    op.answers.send(Answer::Approve).unwrap();
    until("the late approve", || !f.state.decided().is_empty()).await;
    assert!(f.state.open_questions().is_empty());
    let late = answers_for(&f.journal, &other);
    assert_eq!(late.len(), 3, "{late:?}");
    assert_eq!(late[2]["answer"], "approve");
    assert_eq!(late[2]["by_operator"], true);
    assert_eq!(late[2]["late"], true);
    until("the run's copy of the late answer", || {
        answers_for(&op.seen, &other)
            .iter()
            .any(|e| e["late"] == true && e["answer"] == "approve")
    })
    .await;
    let r = get(&f, "other.test").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(op.asked.lock().unwrap().len(), 1, "asked again");
    // A late deny lasts too.
    let r = get(&f, "blocked.test").await;
    assert!(r.contains("did not answer within 400ms"), "{r}");
    op.answers.send(Answer::Deny).unwrap();
    until("the late deny", || f.state.decided().len() == 2).await;
    let r = get(&f, "blocked.test").await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(
        r.contains("denied by the operator earlier in this session"),
        "{r}"
    );
    assert_eq!(
        *op.asked.lock().unwrap(),
        vec![other.clone(), blocked.clone()]
    );
    assert_eq!(
        f.state.decided(),
        vec![
            (other.parse().unwrap(), true),
            (blocked.parse().unwrap(), false)
        ]
    );
    assert_eq!(op.cancels.load(Ordering::SeqCst), 0);
}

/// A late cancel remembers nothing: the question closes and the origin's
/// next request asks again.
#[tokio::test]
async fn a_late_cancel_closes_the_question_and_the_origin_is_asked_again() {
    let f = fx_limits(
        "ask",
        &["127.0.0.0/8"],
        None,
        Limits {
            ask_timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    )
    .await;
    let op = operate(&f).await;
    let other = format!("http://other.test:{}", f.origin.port());
    let r = get(&f, "other.test").await;
    assert!(r.contains("did not answer within 300ms"), "{r}");
    op.answers.send(Answer::Cancel).unwrap();
    until("the late cancel", || f.state.open_questions().is_empty()).await;
    assert!(f.state.decided().is_empty());
    op.answers.send(Answer::Approve).unwrap();
    let r = get(&f, "other.test").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(*op.asked.lock().unwrap(), vec![other.clone(), other]);
    assert_eq!(op.cancels.load(Ordering::SeqCst), 0);
}
