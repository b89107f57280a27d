use sandtop_testkit::tls::{client_hello_message, handshake_records};
use serde_json::Value;

use super::*;
use crate::policy::NetworkMode;

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

fn hello(sni: Option<&str>) -> Vec<u8> {
    handshake_records(&client_hello_message(sni.as_slice()), &[])
}

/// Feeds `bytes` one at a time; every answer before the last byte
/// must be `Incomplete`.
fn bytewise(bytes: &[u8]) -> Sni {
    let mut r = HelloReader::new();
    for (i, b) in bytes.iter().enumerate() {
        let got = r.push(std::slice::from_ref(b));
        if i + 1 < bytes.len() {
            assert_eq!(got, Sni::Incomplete, "byte {i} of {}", bytes.len());
        } else {
            return got;
        }
    }
    Sni::Incomplete
}

#[test]
fn server_names_are_read_from_the_client_hello() {
    assert_eq!(
        client_hello_sni(&hello(Some("allowed.test"))),
        Sni::Name("allowed.test".into())
    );
    assert_eq!(
        client_hello_sni(&hello(Some("Allowed.TEST"))),
        Sni::Name("allowed.test".into())
    );
    assert_eq!(client_hello_sni(&hello(None)), Sni::Absent);
    // An IP address as a server name is no server name (RFC 6066 §3).
    assert_eq!(client_hello_sni(&hello(Some("10.0.0.1"))), Sni::Absent);
    let h = hello(Some("allowed.test"));
    assert_eq!(client_hello_sni(&h[..10]), Sni::Incomplete);
    assert!(matches!(
        client_hello_sni(b"GET / HTTP/1.1\r\n"),
        Sni::NotTls(_)
    ));
    // Two names (RFC 6066 allows one of each type) and a name that is
    // not a DNS name are refused, not guessed at.
    assert!(matches!(
        client_hello_sni(&handshake_records(
            &client_hello_message(&["allowed.test", "blocked.test"]),
            &[]
        )),
        Sni::NotTls(_)
    ));
    assert!(matches!(
        client_hello_sni(&hello(Some("allowed.test\0.blocked.test"))),
        Sni::NotTls(_)
    ));
}

#[test]
fn a_client_hello_in_one_byte_pieces_and_two_records_is_read() {
    let one = hello(Some("allowed.test"));
    assert_eq!(bytewise(&one), Sni::Name("allowed.test".into()));
    // The handshake message split across two TLS records, at every
    // place, and fed one byte at a time.
    let msg = client_hello_message(&["allowed.test"]);
    for cut in 1..msg.len() {
        let two = handshake_records(&msg, &[cut]);
        assert_eq!(two.len(), one.len() + 5);
        assert_eq!(
            bytewise(&two),
            Sni::Name("allowed.test".into()),
            "cut at {cut}"
        );
    }
    // Three records, and bytes after the hello in the same read.
    let mut three = handshake_records(&msg, &[4, 40]);
    three.extend_from_slice(&[0x14, 3, 3, 0, 1, 1]);
    assert_eq!(client_hello_sni(&three), Sni::Name("allowed.test".into()));
    // Once known, the answer stays.
    let mut r = HelloReader::new();
    assert_eq!(r.push(&one), Sni::Name("allowed.test".into()));
    assert_eq!(r.push(b"more"), Sni::Name("allowed.test".into()));
}

#[test]
fn a_real_client_hello_is_read() {
    use rustls::pki_types::ServerName;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(
        Arc::new(config),
        ServerName::try_from("news.example.test").unwrap(),
    )
    .unwrap();
    let mut bytes = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut bytes).unwrap();
    }
    assert_eq!(bytewise(&bytes), Sni::Name("news.example.test".into()));
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

fn head(method: &str, uri: &str, hosts: &[&str]) -> Result<Target, Refused> {
    let mut headers = http::HeaderMap::new();
    for h in hosts {
        headers.append(header::HOST, h.parse().unwrap());
    }
    let method: Method = method.parse().unwrap();
    request_target(&method, &uri.parse().unwrap(), &headers)
}

#[test]
fn request_heads_are_read_or_refused() {
    let t = head("CONNECT", "a.test:443", &["a.test:443"]).unwrap();
    assert_eq!(
        (t.origin.to_string(), t.path),
        ("https://a.test".into(), None)
    );
    let t = head("GET", "http://a.test/x?y=1", &["a.test"]).unwrap();
    assert_eq!(t.origin.to_string(), "http://a.test");
    assert_eq!(t.path.unwrap().to_string(), "/x?y=1");
    let t = head("POST", "http://[::1]:8080", &[]).unwrap();
    assert_eq!(t.origin.port, 8080);
    assert_eq!(t.path.unwrap().to_string(), "/");

    let refused = |m, u, h: &[&str]| head(m, u, h).unwrap_err();
    // Status, and whether the refusal names an origin (journaled).
    let r = refused("CONNECT", "a.test", &[]);
    assert_eq!((r.status, r.origin), (StatusCode::BAD_REQUEST, None));
    let r = refused("CONNECT", "http://a.test:443/", &[]);
    assert_eq!(r.reason, "CONNECT needs host:port");
    let r = refused("GET", "/only/a/path", &["a.test"]);
    assert_eq!(r.reason, "a proxy request needs an absolute URL");
    let r = refused("GET", "https://a.test/", &[]);
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = refused("GET", "http://user@a.test/", &[]);
    assert!(r.reason.contains("user information"), "{}", r.reason);
    let r = refused("GET", "http://a.test/", &["a.test", "a.test"]);
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.origin.unwrap().to_string(), "http://a.test");
    let r = refused("CONNECT", "a.test:443", &["b.test:443"]);
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A Host without a port means the scheme's default port.
    assert!(head("CONNECT", "a.test:443", &["a.test"]).is_ok());
    let r = refused("CONNECT", "a.test:8443", &["a.test"]);
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}
