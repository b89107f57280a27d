//! The egress proxy under abuse from its own guest (docs/security.md
//! N8): the proxy of `host-cli egress-proxy` on
//! loopback, a fake origin, and a client that behaves as a hostile guest
//! would. The sizes are N8's, 100,000 pipelined refused requests
//! and 10,000 connections (`SANDTOP_ABUSE_REFUSED`,
//! `SANDTOP_ABUSE_CONNECTIONS` change them). `cargo test -p host-cli
//! --test egress_abuse -- --nocapture` prints the figures.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use host_cli::egress::limits::Limits;
use host_cli::egress::policy::Policy;
use host_cli::egress::proxy::{self, Proxy, Resolver};
use sandtop_testkit::tls::client_hello;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

fn scale(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= 100)
        .unwrap_or(default)
}

/// The storm holds every connection open at once: the soft limit of open
/// files goes up to what it needs (within the hard limit).
fn raise_open_files(want: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    let hard = l.maximum.unwrap_or(u64::MAX);
    if l.current.is_some_and(|c| c < want) {
        l.current = Some(want.min(hard));
        setrlimit(Resource::Nofile, l).unwrap();
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(
        now >= want,
        "open files: {now}, the test needs {want} (hard limit {hard})"
    );
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// docs/security.md N8: a guest that pipelines 100,000 refused requests and
/// opens 10,000 connections gets a bounded journal
/// (a burst, the rate, and summaries that count the rest exactly), never
/// more than the cap of connections at once, slow headers and idle
/// tunnels closed; allowed traffic still flows during and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abuse_is_bounded_and_allowed_traffic_still_flows() {
    let refused_n = scale("SANDTOP_ABUSE_REFUSED", 100_000);
    let storm_n = scale("SANDTOP_ABUSE_CONNECTIONS", 10_000);
    raise_open_files(storm_n as u64 + 1024);

    // The origin: HTTP gets 200; TLS is echoed until the client goes.
    let ol = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = ol.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = ol.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16384];
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    if buf[0] == 0x16 || buf[0] == b'.' {
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                    return;
                }
            });
        }
    });
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let mut resolver = Resolver::default();
    for n in ["allowed.test", "blocked.test"] {
        resolver.fixed.insert(n.into(), vec![lo]);
    }
    let policy = Policy {
        mode: format!("allow:http://allowed.test:{port},https://allowed.test:{port}")
            .parse()
            .unwrap(),
        allow_private: vec!["127.0.0.0/8".parse().unwrap()],
    };
    let journal = Arc::new(Mutex::new(Vec::<Value>::new()));
    let j = Arc::clone(&journal);
    let limits = Limits {
        max_connections: 32,
        header_timeout: Duration::from_millis(500),
        tunnel_idle: Duration::from_millis(700),
        journal_burst: 20,
        journal_per_sec: 5,
        summary_every: Duration::from_secs(1),
        ..Limits::default()
    };
    let px = Arc::new(
        Proxy::with_limits(
            policy,
            resolver,
            Arc::new(move |v| j.lock().unwrap().push(v)),
            limits,
        )
        .with_host_addresses(Vec::new()),
    );
    let pl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let paddr = pl.local_addr().unwrap();
    tokio::spawn(proxy::serve_tcp(Arc::clone(&px), pl));
    let get = |host: &'static str| async move {
        let mut s = TcpStream::connect(paddr).await.unwrap();
        s.write_all(
            format!(
                "GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).to_string()
    };
    let rss_before = rss_kib();
    let t0 = Instant::now();

    // 1. Refused requests pipelined on one connection, while an allowed
    // request goes through another.
    let flood = tokio::spawn(async move {
        let s = TcpStream::connect(paddr).await.unwrap();
        let (mut rd, mut wr) = s.into_split();
        let w = tokio::spawn(async move {
            let one = format!(
                "GET http://blocked.test:{port}/x HTTP/1.1\r\nHost: blocked.test:{port}\r\n\r\n"
            );
            let batch = one.repeat(100);
            for _ in 0..refused_n / 100 {
                wr.write_all(batch.as_bytes()).await.unwrap();
            }
            wr
        });
        let (mut seen, mut buf, mut tail) = (0usize, vec![0u8; 65536], Vec::new());
        while seen < refused_n {
            let n = tokio::time::timeout(Duration::from_secs(30), rd.read(&mut buf))
                .await
                .expect("the proxy stopped answering")
                .unwrap();
            assert!(n > 0, "closed after {seen} answers");
            tail.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&tail).to_string();
            let done = text.matches("HTTP/1.1 403").count();
            seen += done;
            let keep = text.rfind("HTTP/1.1 403").map(|i| i + 1).unwrap_or(0);
            tail = tail[keep.min(tail.len())..].to_vec();
            if done > 0 {
                // Keep only what follows the last status line seen.
                let t = String::from_utf8_lossy(&tail).to_string();
                tail = t.trim_start_matches("TTP/1.1 403").as_bytes().to_vec();
            }
        }
        drop(w.await.unwrap());
        seen
    });
    let during = get("allowed.test").await;
    assert!(during.starts_with("HTTP/1.1 200"), "{during}");
    assert_eq!(flood.await.unwrap(), refused_n);
    let flood_secs = t0.elapsed().as_secs_f64();

    // 2. A storm of silent connections: never more than the cap at once;
    // the rest closed at once, the capped ones at the header timeout.
    let mut held = Vec::new();
    let mut peak = 0;
    let served_before = px.served_connections();
    for _ in 0..storm_n {
        held.push(TcpStream::connect(paddr).await.unwrap());
        peak = peak.max(px.open_connections());
    }
    let t_storm = Instant::now();
    let reads: Vec<_> = held
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut b = [0u8; 64];
                let r = tokio::time::timeout(Duration::from_secs(3), s.read(&mut b)).await;
                (r.is_ok(), t_storm.elapsed())
            })
        })
        .collect();
    let mut closed_at_once = 0;
    let mut all_closed = true;
    for r in reads {
        let (closed, when) = r.await.unwrap();
        all_closed &= closed;
        if closed && when < Duration::from_millis(300) {
            closed_at_once += 1;
        }
    }
    assert!(peak <= 32, "{peak} connections at once");
    assert!(
        all_closed,
        "a silent connection outlived the header timeout"
    );
    assert!(
        closed_at_once >= storm_n - 32,
        "{closed_at_once} closed at once"
    );
    // The connections given a slot: the first 32, and as the capped ones
    // time out while the storm still connects, the next ones.
    let served = px.served_connections() - served_before;
    let after = get("allowed.test").await;
    assert!(after.starts_with("HTTP/1.1 200"), "{after}");

    // 3. Slow headers: half a request line, then nothing.
    let mut slow = TcpStream::connect(paddr).await.unwrap();
    slow.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let t = Instant::now();
    let mut sink = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(3), slow.read_to_end(&mut sink)).await;
    assert!(r.is_ok(), "slow headers kept their connection");
    let slow_ms = t.elapsed().as_millis();

    // 4. Tunnels: one kept busy outlives the idle limit, an idle one
    // is closed at it.
    let open_tunnel = || async move {
        let mut s = TcpStream::connect(paddr).await.unwrap();
        s.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = vec![0u8; 512];
        let n = s.read(&mut head).await.unwrap();
        assert!(head[..n].starts_with(b"HTTP/1.1 200"));
        let h = client_hello("allowed.test");
        s.write_all(&h).await.unwrap();
        let mut back = vec![0u8; h.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, h);
        s
    };
    let mut busy = open_tunnel().await;
    let mut idle = open_tunnel().await;
    let t = Instant::now();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        busy.write_all(b".").await.unwrap();
        let mut b = [0u8; 1];
        busy.read_exact(&mut b)
            .await
            .expect("the busy tunnel was closed");
    }
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(1), idle.read(&mut b)).await;
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "the idle tunnel is open: {r:?}"
    );
    assert!(t.elapsed() >= Duration::from_millis(700));
    drop(busy);

    // 5. The journal: bounded, and the summaries count every refusal.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    px.flush_journal();
    let entries = journal.lock().unwrap().clone();
    let secs = t0.elapsed().as_secs_f64();
    let summaries: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "egress_summary")
        .collect();
    let singles = entries.len() - summaries.len();
    assert!(
        singles as f64 <= 20.0 + 5.0 * secs + 1.0,
        "{singles} entries in {secs:.1} s"
    );
    let count = |origin: &str| -> u64 {
        let one = entries
            .iter()
            .filter(|e| e["kind"] == "egress" && e["origin"] == origin && e["decision"] == "denied")
            .count() as u64;
        let held: u64 = summaries
            .iter()
            .flat_map(|s| s["by_origin"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["origin"] == origin && e["decision"] == "denied")
            .map(|e| e["count"].as_u64().unwrap())
            .sum();
        one + held
    };
    assert_eq!(
        count(&format!("http://blocked.test:{port}")),
        refused_n as u64
    );
    // Every connection of the storm was either served or refused and
    // journaled (singly or in a summary's count).
    assert_eq!(
        count("") + served,
        storm_n as u64,
        "{served} served, {closed_at_once} closed at once: {:?}",
        summaries.last()
    );
    let rss_after = rss_kib();
    // A gross bound: the proxy keeps nothing per refused request or per
    // closed connection (the journal's bound is checked above).
    assert!(
        rss_after.saturating_sub(rss_before) < 128 * 1024,
        "the process grew from {rss_before} to {rss_after} KiB"
    );
    println!(
        "abuse: {refused_n} refused requests in {flood_secs:.1} s; {storm_n} connections, peak {peak} \
         open, {served} served, {closed_at_once} closed at once; slow headers closed after {slow_ms} ms; \
         journal {} entries ({} summaries) in {secs:.1} s; RSS {rss_before} -> {rss_after} KiB",
        entries.len(),
        summaries.len()
    );
}
