//! What the view's parts share: the newest frame, the run's events (and a
//! cache of what a new page needs first), the operator's commands on
//! their way to the run.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use sandtop_protocol::{ScaleMap, Size};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast, mpsc, watch};

use sandtop_control::wire::{Command, Event};

/// One frame as the pages get it.
#[derive(Debug, Clone)]
pub struct Frame {
    pub seq: u64,
    pub width: u32,
    pub height: u32,
    pub screen: Size,
    pub scale_map: ScaleMap,
    pub jpeg: Bytes,
    /// When the pump had it (for the latency figure).
    pub at_unix_ms: u128,
}

impl Frame {
    /// The text message sent before the frame's bytes.
    pub fn meta(&self) -> String {
        json!({
            "type": "frame",
            "seq": self.seq,
            "width": self.width,
            "height": self.height,
            "screen": self.screen,
            "bytes": self.jpeg.len(),
            "t_unix_ms": self.at_unix_ms as u64,
        })
        .to_string()
    }
}

/// What a page learns first, then keeps current from the events.
#[derive(Debug, Default)]
pub struct Cache {
    pub hello: Option<Event>,
    pub state: Option<Event>,
    pub questions: BTreeMap<u64, Event>,
    pub network: Vec<Event>,
    /// A run's control socket is connected.
    pub run_attached: bool,
    /// Without a run: the operator holds the desktop through this view.
    pub local_control: bool,
    /// The last problem reaching the daemon, if the pump is failing.
    pub problem: Option<String>,
}

/// Network decisions kept for a page that connects late.
const NETWORK_KEPT: usize = 50;

/// The shared parts.
#[derive(Debug)]
pub struct Hub {
    pub session: String,
    pub frame: watch::Sender<Option<Frame>>,
    pub events: broadcast::Sender<String>,
    pub cache: Mutex<Cache>,
    /// Pages connected; the pump asks for frames only while some are.
    clients: AtomicUsize,
    pub client_arrived: Notify,
    pub commands: mpsc::Sender<Command>,
}

impl Hub {
    pub fn new(session: String) -> (Hub, mpsc::Receiver<Command>) {
        let (tx, rx) = mpsc::channel(64);
        (
            Hub {
                session,
                frame: watch::Sender::new(None),
                events: broadcast::channel(256).0,
                cache: Mutex::new(Cache::default()),
                clients: AtomicUsize::new(0),
                client_arrived: Notify::new(),
                commands: tx,
            },
            rx,
        )
    }

    pub fn client_count(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }

    /// Counts a page for as long as the guard lives.
    pub fn client(&self) -> ClientGuard<'_> {
        self.clients.fetch_add(1, Ordering::AcqRel);
        self.client_arrived.notify_waiters();
        ClientGuard(&self.clients)
    }

    pub fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A run event: cached as a new page needs it, then sent to pages.
    pub fn run_event(&self, e: Event) {
        {
            let mut c = self.cache();
            match &e {
                Event::Hello { .. } => c.hello = Some(e.clone()),
                Event::State { .. } => c.state = Some(e.clone()),
                Event::Question { id, .. } => {
                    c.questions.insert(*id, e.clone());
                }
                Event::Closed { id, .. } => {
                    c.questions.remove(id);
                }
                Event::Network { .. } => {
                    c.network.push(e.clone());
                    let n = c.network.len();
                    if n > NETWORK_KEPT {
                        c.network.drain(..n - NETWORK_KEPT);
                    }
                }
                // Kept with the network decisions: a page that connects
                // later still sees which origin got which fields.
                Event::SignedIn { .. } => {
                    c.network.push(e.clone());
                    let n = c.network.len();
                    if n > NETWORK_KEPT {
                        c.network.drain(..n - NETWORK_KEPT);
                    }
                }
                Event::Acted { .. } | Event::Refused { .. } => {}
            }
        }
        if let Ok(text) = serde_json::to_string(&e) {
            let _ = self.events.send(text);
        }
    }

    /// The view's own state (`{"type":"view", ...}`), sent to pages.
    pub fn view_state(&self) -> Value {
        let c = self.cache();
        json!({
            "type": "view",
            "session": self.session,
            "run_attached": c.run_attached,
            "local_control": c.local_control,
            "problem": c.problem,
        })
    }

    pub fn announce_view(&self) {
        let _ = self.events.send(self.view_state().to_string());
    }

    /// Everything a page needs when it connects, in order.
    pub fn opening(&self) -> Vec<String> {
        let mut out = vec![self.view_state().to_string()];
        let c = self.cache();
        let events = c
            .hello
            .iter()
            .chain(c.state.iter())
            .chain(c.questions.values())
            .chain(c.network.iter());
        out.extend(events.filter_map(|e| serde_json::to_string(e).ok()));
        out
    }

    /// The run went away: its state and questions with it.
    pub fn run_detached(&self) {
        {
            let mut c = self.cache();
            c.run_attached = false;
            c.hello = None;
            c.state = None;
            c.questions.clear();
        }
        self.announce_view();
    }
}

/// See [`Hub::client`].
#[derive(Debug)]
pub struct ClientGuard<'a>(&'a AtomicUsize);

impl Drop for ClientGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_control::wire::QuestionKind;

    #[test]
    fn a_late_page_gets_the_open_questions_but_not_the_closed_ones() {
        let (hub, _rx) = Hub::new("s".into());
        let q = |id| Event::Question {
            id,
            kind: QuestionKind::SafetyCheck,
            title: "t".into(),
            text: "x".into(),
            marked: None,
            answers: vec!["approve".into(), "deny".into()],
        };
        hub.run_event(q(1));
        hub.run_event(q(2));
        hub.run_event(Event::Closed {
            id: 1,
            by: "terminal".into(),
            answer: "approve".into(),
        });
        let opening = hub.opening();
        assert_eq!(opening.len(), 2, "{opening:?}");
        assert!(opening[0].contains(r#""type":"view""#));
        assert!(opening[1].contains(r#""id":2"#));
        hub.run_detached();
        assert_eq!(hub.opening().len(), 1);
    }

    #[test]
    fn network_decisions_are_kept_to_a_bound() {
        let (hub, _rx) = Hub::new("s".into());
        for i in 0..(NETWORK_KEPT + 7) {
            hub.run_event(Event::Network {
                entry: json!({ "n": i }),
            });
        }
        let c = hub.cache();
        assert_eq!(c.network.len(), NETWORK_KEPT);
        assert_eq!(
            c.network[0],
            Event::Network {
                entry: json!({ "n": 7 })
            }
        );
    }
}
