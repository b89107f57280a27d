//! The egress proxy on loopback: the policy enforced on real HTTP and
//! CONNECT traffic (SECURITY.md N2, N3; CONTRACT.md rule 21). Names are
//! pinned to 127.0.0.1 with the proxy's fixed resolver, so nothing leaves
//! this machine.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use host_cli::egress::policy::{Policy, Verdict};
use host_cli::egress::proxy::{self, Answer, Proxy, Question, Resolver};
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
}

async fn fx(mode: &str, allow_private: &[&str]) -> Fx {
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
    let journal = Arc::new(Mutex::new(Vec::new()));
    let j = Arc::clone(&journal);
    let policy = Policy {
        mode: mode
            .replace("PORT", &origin.port().to_string())
            .parse()
            .unwrap(),
        allow_private: allow_private.iter().map(|c| c.parse().unwrap()).collect(),
    };
    let state = Arc::new(Proxy::new(
        policy,
        resolver,
        Arc::new(move |v| j.lock().unwrap().push(v)),
    ));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = l.local_addr().unwrap();
    tokio::spawn(proxy::serve_tcp(Arc::clone(&state), l));
    Fx {
        proxy,
        origin,
        journal,
        state,
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

fn client_hello(sni: &str) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[9u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    let mut sn = vec![0u8];
    sn.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    sn.extend_from_slice(sni.as_bytes());
    let mut list = (sn.len() as u16).to_be_bytes().to_vec();
    list.extend_from_slice(&sn);
    let mut ext = vec![0, 0];
    ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
    ext.extend_from_slice(&list);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8];
    rec.extend_from_slice(&hs);
    rec
}

/// CONNECTs, sends a ClientHello naming `sni`, returns what comes back
/// after the proxy's answer.
async fn tunnel(f: &Fx, host: &str, sni: &str) -> (String, Vec<u8>) {
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
    let hello = client_hello(sni);
    s.write_all(&hello).await.unwrap();
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
