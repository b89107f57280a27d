//! What bounds the egress proxy against its own guest (docs/security.md N8):
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
//!   question stays open (docs/security.md N9).
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

/// Where the proxy reports its decisions: one JSON value per entry (the
/// session's service appends them to its journal file).
pub type Journal = Arc<dyn Fn(Value) + Send + Sync>;

/// How long a request waits for the operator's answer to its origin
/// question (docs/security.md N9).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(120);

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
            ask_timeout: ASK_TIMEOUT,
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
}
