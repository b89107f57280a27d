//! A WebDriver BiDi client: commands with ids over one WebSocket
//! (tokio-tungstenite), each answered by the message with its id.
//!
//! One reader task owns the socket's read half and routes every reply to
//! the command waiting for it; the console and network events the session
//! subscribes to go, filtered, into a bounded `History` for
//! `read_diagnostics`; other events are ignored. When the socket ends,
//! every waiting command fails with [`BidiError::Closed`] and later ones
//! fail at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::{Mutex, oneshot};
use tokio_tungstenite::tungstenite::Message;

use super::diagnostics::History;

type Pending = Arc<std::sync::Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>>;
type Sink = futures_util::stream::SplitSink<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Message,
>;

/// Largest BiDi message read (a full-page PNG of an 8K viewport fits).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// What went wrong with one command.
#[derive(Debug, thiserror::Error)]
pub enum BidiError {
    /// The browser answered with an error (`error` is the BiDi code, such
    /// as `no such frame`; the message is the browser's).
    #[error("{error}: {message}")]
    Command { error: String, message: String },
    #[error("the browser did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the connection to the browser is closed")]
    Closed,
    #[error("connecting to the browser: {0}")]
    Connect(String),
}

type Reply = Result<Value, BidiError>;

/// A connected BiDi session.
#[derive(Debug)]
pub struct Bidi {
    sink: Mutex<SinkDebug>,
    pending: Pending,
    /// Console and network diagnostics, filtered and bounded.
    pub history: Arc<std::sync::Mutex<History>>,
    next: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

struct SinkDebug(Sink);

impl std::fmt::Debug for SinkDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

impl Drop for Bidi {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Bidi {
    /// Connects to `ws://127.0.0.1:{port}/session` and starts a session
    /// that dismisses user prompts (alerts) instead of blocking on them.
    pub async fn connect(port: u16) -> Result<Bidi, BidiError> {
        let url = format!("ws://127.0.0.1:{port}/session");
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_MESSAGE_BYTES));
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true)
            .await
            .map_err(|e| BidiError::Connect(e.to_string()))?;
        let (sink, mut stream) = ws.split();
        let pending: Pending = Arc::new(std::sync::Mutex::new(Some(HashMap::new())));
        let routes = Arc::clone(&pending);
        let history: Arc<std::sync::Mutex<History>> = Arc::default();
        let events = Arc::clone(&history);
        let reader = tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let text = match msg {
                    Ok(Message::Text(t)) => t,
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => continue,
                };
                route(&routes, &events, text.as_str());
            }
            // Fail everyone waiting, and everyone who comes later.
            let waiting = lock(&routes).take();
            for (_, tx) in waiting.into_iter().flatten() {
                let _ = tx.send(Err(BidiError::Closed));
            }
        });
        let bidi = Bidi {
            sink: Mutex::new(SinkDebug(sink)),
            pending,
            history,
            next: AtomicU64::new(1),
            reader,
        };
        bidi.command(
            "session.new",
            json!({"capabilities": {"alwaysMatch": {
                "acceptInsecureCerts": false,
                "unhandledPromptBehavior": {"default": "dismiss"}
            }}}),
            Duration::from_secs(10),
        )
        .await?;
        bidi.command(
            "session.subscribe",
            json!({"events": ["log.entryAdded", "network.responseCompleted", "network.fetchError"]}),
            Duration::from_secs(10),
        )
        .await?;
        Ok(bidi)
    }

    /// Sends one command and waits up to `wait` for its result.
    pub async fn command(&self, method: &str, params: Value, wait: Duration) -> Reply {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match lock(&self.pending).as_mut() {
            Some(map) => map.insert(id, tx),
            None => return Err(BidiError::Closed),
        };
        let text = json!({"id": id, "method": method, "params": params}).to_string();
        let sent = self.sink.lock().await.0.send(Message::text(text)).await;
        if sent.is_err() {
            self.forget(id);
            return Err(BidiError::Closed);
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(BidiError::Closed),
            Err(_) => {
                self.forget(id);
                Err(BidiError::Timeout(wait))
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Some(map) = lock(&self.pending).as_mut() {
            map.remove(&id);
        }
    }

    /// Whether the connection still stands.
    pub fn is_open(&self) -> bool {
        lock(&self.pending).is_some() && !self.reader.is_finished()
    }
}

/// Hands one incoming message to the command waiting for it.
fn route(pending: &Pending, history: &std::sync::Mutex<History>, text: &str) {
    let Ok(msg) = serde_json::from_str::<Value>(text) else {
        tracing::warn!(bytes = text.len(), "unreadable BiDi message ignored");
        return;
    };
    let Some(id) = msg.get("id").and_then(Value::as_u64) else {
        // An event.
        if let (Some(method), Some(params)) =
            (msg.get("method").and_then(Value::as_str), msg.get("params"))
        {
            lock(history).event(method, params);
        }
        return;
    };
    let Some(tx) = lock(pending).as_mut().and_then(|m| m.remove(&id)) else {
        return;
    };
    let reply = match msg.get("type").and_then(Value::as_str) {
        Some("success") => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
        _ => Err(BidiError::Command {
            error: msg
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string(),
            message: msg
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .chars()
                .take(300)
                .collect(),
        }),
    };
    let _ = tx.send(reply);
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
