//! What bounds the egress proxy against its own guest (issue 12 item 3):
//! a guest may send the proxy as much as it likes, so every cost it can
//! cause on the host has a ceiling.
//!
//! - [`Limits::max_connections`]: connections served at once, tunnels
//!   included; one over the cap is closed at once and counted.
//! - [`Limits::header_timeout`]: a request's headers must arrive within it
//!   (hyper's header read timeout), so a slow or silent client does not
//!   keep its connection.
//! - [`Limits::tunnel_idle`]: a CONNECT tunnel with no byte in either
//!   direction for that long is closed.
//! - [`Limits::ask_timeout`]: a request waits that long (120 s) for the
//!   operator's answer to its origin question, then is refused; the
//!   question stays open (issue 11 item 9).
//! - [`JournalGate`]: the journal of decisions takes a burst of entries and
//!   then a steady rate (a token bucket); what is over it is counted by
//!   origin and decision (at most [`SUMMARY_KEYS`] of them, the rest
//!   together) and written as one `egress_summary` entry at most every
//!   [`Limits::summary_every`]. So a guest that pipelines refused requests
//!   costs a few lines per second, never a line (and an fsync) each.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;

use super::proxy::Journal;

/// Origins and decisions counted separately in one summary; the rest are
/// counted together.
pub const SUMMARY_KEYS: usize = 64;

/// The proxy's ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub tunnel_idle: Duration,
    /// Journal entries written at once before the rate applies.
    pub journal_burst: u32,
    /// Journal entries per second after the burst.
    pub journal_per_sec: u32,
    /// The shortest time between two summaries.
    pub summary_every: Duration,
    /// How long a request waits for the operator's answer to its origin
    /// question before it is refused (the question stays open; a later
    /// answer still lasts for the session).
    pub ask_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            tunnel_idle: Duration::from_secs(300),
            journal_burst: 100,
            journal_per_sec: 10,
            summary_every: Duration::from_secs(5),
            ask_timeout: super::proxy::ASK_TIMEOUT,
        }
    }
}

/// The journal behind a token bucket, with summaries of what it held back.
pub struct JournalGate {
    inner: Journal,
    limits: Limits,
    state: Mutex<GateState>,
}

struct GateState {
    tokens: f64,
    refilled: Instant,
    summarised: Instant,
    /// (origin, decision) -> entries held back since the last summary.
    held: BTreeMap<(String, String), u64>,
    /// Held back entries beyond [`SUMMARY_KEYS`] keys.
    other: u64,
}

impl std::fmt::Debug for JournalGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalGate")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl JournalGate {
    pub fn new(inner: Journal, limits: Limits) -> JournalGate {
        let now = Instant::now();
        JournalGate {
            inner,
            limits,
            state: Mutex::new(GateState {
                tokens: f64::from(limits.journal_burst),
                refilled: now,
                summarised: now,
                held: BTreeMap::new(),
                other: 0,
            }),
        }
    }

    /// Writes `v`, or counts it when the bucket is empty.
    pub fn entry(&self, v: Value) {
        let pass = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let add = now.duration_since(st.refilled).as_secs_f64()
                * f64::from(self.limits.journal_per_sec);
            st.tokens = (st.tokens + add).min(f64::from(self.limits.journal_burst));
            st.refilled = now;
            if st.tokens >= 1.0 {
                st.tokens -= 1.0;
                true
            } else {
                let key = (
                    v["origin"].as_str().unwrap_or("").to_string(),
                    v["decision"]
                        .as_str()
                        .or(v["kind"].as_str())
                        .unwrap_or("")
                        .to_string(),
                );
                if st.held.len() < SUMMARY_KEYS || st.held.contains_key(&key) {
                    *st.held.entry(key).or_insert(0) += 1;
                } else {
                    st.other += 1;
                }
                false
            }
        };
        if pass {
            (self.inner)(v);
        } else {
            self.flush_due();
        }
    }

    /// Writes the summary of what was held back, when there is one and
    /// the last summary is old enough.
    pub fn flush_due(&self) {
        let v = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if (st.held.is_empty() && st.other == 0)
                || st.summarised.elapsed() < self.limits.summary_every
            {
                return;
            }
            Self::take(&mut st)
        };
        (self.inner)(v);
    }

    /// Writes the summary now, if anything was held back.
    pub fn flush(&self) {
        let v = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.held.is_empty() && st.other == 0 {
                return;
            }
            Self::take(&mut st)
        };
        (self.inner)(v);
    }

    fn take(st: &mut GateState) -> Value {
        let held = std::mem::take(&mut st.held);
        let other = std::mem::take(&mut st.other);
        let seconds = st.summarised.elapsed().as_secs_f64();
        st.summarised = Instant::now();
        let total: u64 = held.values().sum::<u64>() + other;
        json!({
            "kind": "egress_summary",
            "held_back": total,
            "seconds": (seconds * 10.0).round() / 10.0,
            "by_origin": held
                .into_iter()
                .map(|((origin, decision), count)| json!({
                    "origin": origin,
                    "decision": decision,
                    "count": count,
                }))
                .collect::<Vec<_>>(),
            "others": other,
        })
    }
}

/// A client connection that holds its place under the connection cap for
/// as long as it lives (through hyper's upgrade into a tunnel too), and
/// stamps the time of its last byte in either direction.
pub struct Counted<S> {
    inner: S,
    _permit: Option<OwnedSemaphorePermit>,
    clock: IdleClock,
}

impl<S> std::fmt::Debug for Counted<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("idle_for", &self.clock.idle_for())
            .finish_non_exhaustive()
    }
}

/// When a [`Counted`] stream last moved a byte.
#[derive(Debug, Clone)]
pub struct IdleClock {
    last_ms: Arc<AtomicU64>,
    born: Instant,
}

impl IdleClock {
    fn touch(&self) {
        let ms = self.born.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the last byte (or since the stream began).
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(last)
    }
}

impl<S> Counted<S> {
    /// `permit`: the stream's place under the connection cap, if it holds one.
    pub fn new(inner: S, permit: Option<OwnedSemaphorePermit>) -> Counted<S> {
        Counted {
            inner,
            _permit: permit,
            clock: IdleClock {
                last_ms: Arc::new(AtomicU64::new(0)),
                born: Instant::now(),
            },
        }
    }

    /// Its clock, to watch from elsewhere.
    pub fn idle_clock(&self) -> IdleClock {
        self.clock.clone()
    }

    fn touch(&self) {
        self.clock.touch();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_writes_a_burst_then_the_rate_and_summarises_the_rest() {
        let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
        let s = Arc::clone(&seen);
        let limits = Limits {
            journal_burst: 5,
            journal_per_sec: 1,
            summary_every: Duration::from_secs(3600),
            ..Limits::default()
        };
        let gate = JournalGate::new(Arc::new(move |v| s.lock().unwrap().push(v)), limits);
        for i in 0..1000 {
            gate.entry(json!({"kind": "egress", "origin": format!("http://o{}.test:80", i % 100), "decision": "denied"}));
        }
        let written = seen.lock().unwrap().len();
        assert!((5..=6).contains(&written), "{written}");
        gate.flush();
        let all = seen.lock().unwrap().clone();
        let summary = all.last().unwrap();
        assert_eq!(summary["kind"], "egress_summary");
        let held = summary["held_back"].as_u64().unwrap();
        assert_eq!(held as usize + written, 1000, "{summary}");
        assert_eq!(
            summary["by_origin"].as_array().unwrap().len(),
            SUMMARY_KEYS,
            "{summary}"
        );
        let counted: u64 = summary["by_origin"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["count"].as_u64().unwrap())
            .sum::<u64>()
            + summary["others"].as_u64().unwrap();
        assert_eq!(counted, held);
        // Nothing held back: no summary.
        gate.flush();
        assert_eq!(seen.lock().unwrap().len(), all.len());
    }

    /// A real ClientHello naming `name` (rustls' client).
    fn hello(name: &str) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut conn = rustls::ClientConnection::new(
            Arc::new(config),
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        let mut bytes = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut bytes).unwrap();
        }
        bytes
    }

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Issue 12 item 3: a guest that pipelines thousands of refused
    /// requests and opens hundreds of connections gets a bounded journal
    /// (a burst, the rate, and summaries that count the rest exactly), never
    /// more than the cap of connections at once, slow headers and idle
    /// tunnels closed; allowed traffic still flows during and after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn abuse_is_bounded_and_allowed_traffic_still_flows() {
        use crate::egress::policy::Policy;
        use crate::egress::proxy::{self, Proxy, Resolver};
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio::net::{TcpListener, TcpStream};
        const REFUSED: usize = 5_000;
        const STORM: usize = 300;

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
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
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
                for _ in 0..REFUSED / 100 {
                    wr.write_all(batch.as_bytes()).await.unwrap();
                }
                wr
            });
            let (mut seen, mut buf, mut tail) = (0usize, vec![0u8; 65536], Vec::new());
            while seen < REFUSED {
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
        assert_eq!(flood.await.unwrap(), REFUSED);
        let flood_secs = t0.elapsed().as_secs_f64();

        // 2. A storm of silent connections: never more than the cap at once;
        // the rest closed at once, the capped ones at the header timeout.
        let mut held = Vec::new();
        let mut peak = 0;
        for _ in 0..STORM {
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
            closed_at_once >= STORM - 32,
            "{closed_at_once} closed at once"
        );
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
            let h = hello("allowed.test");
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
                .filter(|e| {
                    e["kind"] == "egress" && e["origin"] == origin && e["decision"] == "denied"
                })
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
            REFUSED as u64
        );
        assert!(count("") >= (STORM - 32) as u64, "refused connections");
        let rss_after = rss_kib();
        println!(
            "abuse: {REFUSED} refused requests in {flood_secs:.1} s; {STORM} connections, peak {peak} \
             open, {closed_at_once} closed at once; slow headers closed after {slow_ms} ms; \
             journal {} entries ({} summaries) in {secs:.1} s; RSS {rss_before} -> {rss_after} KiB",
            entries.len(),
            summaries.len()
        );
    }
}
