//! The run's side of the control socket ([`super::wire`]): `host-cli run`
//! (and the offline exercise) serve their state and open questions on
//! `control.sock` in the session folder, take the answers of a viewer, and
//! hand the desktop to the operator between two steps when asked.
//!
//! The run's prompts block a thread (the terminal), so questions are
//! waited on with a condition variable; the runner's takeover is async and
//! waits on a [`Notify`]. The first answer to a question wins: the viewer's
//! is taken only while the question is open, and whoever closes it says
//! who answered ([`Served::close`]).
//!
//! Layout: tests apart (`served/tests.rs`): one state (`Shared`, behind one
//! mutex beside the `answered` condvar and the `Notify`) and both sides that
//! touch it: the run's (`Served`'s methods) and the viewers' (`command`,
//! `serve`). The view lock would be first to move out.

use std::collections::{BTreeMap, VecDeque};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, broadcast};

use super::line::fill_line;
use super::wire::{
    Command, Event, Holder, LastCall, Phase, QuestionKind, SOCKET_NAME, UsageSoFar, VERSION,
};

/// How many events a slow viewer may fall behind before it is dropped
/// (it reconnects and gets the state again).
const BACKLOG: usize = 256;

/// A viewer's answer to a question: the word (`approve`, `deny`,
/// `cancel`, `text`) and, for `text`, the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewAnswer {
    pub word: String,
    pub text: Option<String>,
}

/// A question that closed, for the trajectory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedQuestion {
    pub kind: QuestionKind,
    pub title: String,
    pub by: String,
    pub answer: String,
}

/// What the operator asks of the run while in control.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorCommand {
    /// Actions in screen pixels, unchecked (the runner checks them).
    Act(Vec<Value>),
    /// Give the desktop back to the agent.
    Give,
}

/// The run's state as a viewer sees it.
#[derive(Debug, Clone)]
struct RunState {
    step: u32,
    max_steps: u32,
    phase: Phase,
    holder: Holder,
    usage: UsageSoFar,
    last_call: Option<LastCall>,
    ending: Option<String>,
}

impl RunState {
    fn event(&self) -> Event {
        Event::State {
            step: self.step,
            max_steps: self.max_steps,
            phase: self.phase,
            holder: self.holder,
            usage: self.usage.clone(),
            last_call: self.last_call.clone(),
            ending: self.ending.clone(),
        }
    }
}

struct OpenQuestion {
    event: Event,
    kind: QuestionKind,
    title: String,
    answers: Vec<String>,
    answer: Option<ViewAnswer>,
}

struct Shared {
    hello: Event,
    state: RunState,
    /// The phase to go back to when the last question closes.
    phase_before_question: Option<Phase>,
    questions: BTreeMap<u64, OpenQuestion>,
    next_id: u64,
    viewers: usize,
    /// The operator's commands while in control, in order.
    commands: VecDeque<OperatorCommand>,
    closed: Vec<ClosedQuestion>,
    shut: bool,
    /// Why a take is refused, when this side never hands the desktop
    /// over (`host-cli mcp`: see [`Served::refuse_takeover`]).
    no_takeover: Option<String>,
}

struct Inner {
    shared: Mutex<Shared>,
    /// Wakes threads waiting for an answer.
    answered: Condvar,
    /// Wakes the runner waiting for a takeover command.
    commands: Notify,
    events: broadcast::Sender<Event>,
    path: PathBuf,
    accept: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The served control socket of one run; cheap to clone.
#[derive(Clone)]
pub struct Served {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// What the first line to every viewer says.
#[derive(Debug, Clone)]
pub struct Hello {
    pub session: String,
    pub run_folder: String,
    pub task: String,
    pub max_steps: u32,
}

/// The control socket or the view's lock could not be set up: `doing`
/// names the file and the step, the io error is the source.
#[derive(Debug, thiserror::Error)]
#[error("{doing}")]
pub struct SetupError {
    pub doing: String,
    #[source]
    pub source: std::io::Error,
}

fn doing(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> SetupError {
    let doing = format!("{what} {}", path.display());
    move |source| SetupError { doing, source }
}

impl Served {
    /// Serves `control.sock` in `session_dir` (the caller holds the
    /// session's run lock, so a socket left there is a stale one and is
    /// replaced). The socket is 0600 in a 0700 folder, and a peer of
    /// another uid is refused.
    pub fn bind(session_dir: &Path, hello: Hello) -> Result<Served, SetupError> {
        let path = session_dir.join(SOCKET_NAME);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(doing("removing", &path)(e)),
        }
        let listener = UnixListener::bind(&path).map_err(doing("serving", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(doing("chmod 0600", &path))?;
        let (events, _) = broadcast::channel(BACKLOG);
        let inner = Arc::new(Inner {
            shared: Mutex::new(Shared {
                hello: Event::Hello {
                    version: VERSION,
                    session: hello.session,
                    run_folder: hello.run_folder,
                    task: hello.task,
                },
                state: RunState {
                    step: 0,
                    max_steps: hello.max_steps,
                    phase: Phase::Starting,
                    holder: Holder::Agent,
                    usage: UsageSoFar::default(),
                    last_call: None,
                    ending: None,
                },
                phase_before_question: None,
                questions: BTreeMap::new(),
                next_id: 1,
                viewers: 0,
                commands: VecDeque::new(),
                closed: Vec::new(),
                shut: false,
                no_takeover: None,
            }),
            answered: Condvar::new(),
            commands: Notify::new(),
            events,
            path,
            accept: Mutex::new(None),
        });
        let task = tokio::spawn(accept(listener, Arc::downgrade(&inner)));
        *lock(&inner.accept) = Some(task);
        Ok(Served { inner })
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        lock(&self.inner.shared)
    }

    fn send(&self, e: Event) {
        // No receiver (no viewer) is not an error.
        let _ = self.inner.events.send(e);
    }

    /// Changes the run's state and tells the viewers.
    pub fn update(&self, f: impl FnOnce(&mut StateEdit<'_>)) {
        let ev = {
            let mut s = self.shared();
            let before = s.state.event();
            let Shared {
                state,
                phase_before_question,
                ..
            } = &mut *s;
            f(&mut StateEdit {
                state,
                phase_before_question,
            });
            let now = s.state.event();
            (now != before).then_some(now)
        };
        if let Some(e) = ev {
            self.send(e);
        }
    }

    /// An egress decision, as the proxy journaled it.
    pub fn network(&self, entry: Value) {
        self.send(Event::Network { entry });
    }

    /// A sign-in's values went into a page (which origin, which fields).
    pub fn signed_in(
        &self,
        call_id: &str,
        origin: &str,
        fields: Vec<crate::wire::SignedInField>,
        source: &str,
    ) {
        self.send(Event::SignedIn {
            call_id: call_id.into(),
            origin: origin.into(),
            fields,
            source: source.into(),
        });
    }

    /// How many viewers are connected.
    pub fn viewers(&self) -> usize {
        self.shared().viewers
    }

    /// Opens a question; it stays open (and is shown to every viewer that
    /// connects) until [`Served::close`].
    pub fn open(
        &self,
        kind: QuestionKind,
        title: String,
        text: String,
        marked: Option<String>,
        answers: &[&str],
    ) -> u64 {
        let (id, ev, state) = {
            let mut s = self.shared();
            let id = s.next_id;
            s.next_id += 1;
            let answers: Vec<String> = answers.iter().map(|a| (*a).to_string()).collect();
            let event = Event::Question {
                id,
                kind,
                title: title.clone(),
                text,
                marked,
                answers: answers.clone(),
            };
            s.questions.insert(
                id,
                OpenQuestion {
                    event: event.clone(),
                    kind,
                    title,
                    answers,
                    answer: None,
                },
            );
            let state = if s.phase_before_question.is_none() {
                s.phase_before_question = Some(s.state.phase);
                s.state.phase = Phase::Question;
                Some(s.state.event())
            } else {
                None
            };
            (id, event, state)
        };
        self.send(ev);
        if let Some(st) = state {
            self.send(st);
        }
        id
    }

    /// Whether question `id` is still open (not closed, the run not over).
    pub fn is_open(&self, id: u64) -> bool {
        let s = self.shared();
        !s.shut && s.questions.contains_key(&id)
    }

    /// The viewer's answer to an open question, if one came.
    pub fn answer_of(&self, id: u64) -> Option<ViewAnswer> {
        self.shared()
            .questions
            .get(&id)
            .and_then(|q| q.answer.clone())
    }

    /// Waits (blocking the thread) for the viewer's answer, at most
    /// `for_at_most`.
    pub fn wait_answer(&self, id: u64, for_at_most: Duration) -> Option<ViewAnswer> {
        let until = Instant::now() + for_at_most;
        let mut s = self.shared();
        loop {
            if let Some(a) = s.questions.get(&id).and_then(|q| q.answer.clone()) {
                return Some(a);
            }
            let now = Instant::now();
            if now >= until || !s.questions.contains_key(&id) || s.shut {
                return None;
            }
            s = self
                .inner
                .answered
                .wait_timeout(s, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Closes a question: who answered it (`terminal`, `view`, `policy`,
    /// `stop`, `timeout`) and the answer's word. Every viewer's prompt of
    /// it closes.
    pub fn close(&self, id: u64, by: &str, answer: &str) {
        let state = {
            let mut s = self.shared();
            let Some(q) = s.questions.remove(&id) else {
                return;
            };
            s.closed.push(ClosedQuestion {
                kind: q.kind,
                title: q.title,
                by: by.into(),
                answer: answer.into(),
            });
            if s.questions.is_empty()
                && let Some(p) = s.phase_before_question.take()
            {
                s.state.phase = p;
                Some(s.state.event())
            } else {
                None
            }
        };
        self.send(Event::Closed {
            id,
            by: by.into(),
            answer: answer.into(),
        });
        if let Some(st) = state {
            self.send(st);
        }
    }

    /// The questions closed since the last call (for the trajectory).
    pub fn take_closed(&self) -> Vec<ClosedQuestion> {
        std::mem::take(&mut self.shared().closed)
    }

    /// This side never hands the desktop over (it has no step boundary to
    /// pause at: `host-cli mcp` answers a client's calls): a viewer's
    /// `take` is refused with `why`, and the questions still go to it.
    pub fn refuse_takeover(&self, why: &str) {
        self.shared().no_takeover = Some(why.to_string());
    }

    /// Whether the operator asked for the desktop.
    pub fn take_requested(&self) -> bool {
        self.shared().state.holder == Holder::TakeRequested
    }

    /// Hands the desktop to the operator (the runner, at a step boundary).
    pub fn hand_over(&self) {
        self.shared().commands.clear();
        self.update(|s| {
            s.state.holder = Holder::Operator;
            s.phase(Phase::Paused);
        });
    }

    /// The operator's next command while in control.
    pub async fn next_command(&self) -> OperatorCommand {
        loop {
            let n = self.inner.commands.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if let Some(c) = self.shared().commands.pop_front() {
                return c;
            }
            n.await;
        }
    }

    /// The result of the operator's actions.
    pub fn acted(&self, ok: bool, executed: usize, error: Option<String>) {
        self.send(Event::Acted {
            ok,
            executed,
            error,
        });
    }

    /// The desktop goes back to the agent.
    pub fn hand_back(&self, phase: Phase) {
        self.update(|s| {
            s.state.holder = Holder::Agent;
            s.phase(phase);
        });
    }

    /// The run ended: every open question closes, viewers get the last
    /// state, the socket goes away.
    pub fn finish(&self, ending: &str) {
        if self.shared().shut {
            return;
        }
        let open: Vec<u64> = self.shared().questions.keys().copied().collect();
        for id in open {
            self.close(id, "stop", "deny");
        }
        self.update(|s| {
            s.state.phase = Phase::Finished;
            s.state.holder = Holder::Agent;
            s.state.ending = Some(ending.to_string());
        });
        self.shut();
    }

    fn shut(&self) {
        {
            let mut s = self.shared();
            if s.shut {
                return;
            }
            s.shut = true;
        }
        self.inner.answered.notify_all();
        if let Some(t) = lock(&self.inner.accept).take() {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.inner.path);
    }

    /// A command from a viewer: answers go to the question, takeover
    /// requests to the runner; what is not allowed now is refused.
    fn command(&self, c: Command) -> Option<Event> {
        let refused = |what: &str, why: &str| {
            Some(Event::Refused {
                what: what.into(),
                why: why.into(),
            })
        };
        match c {
            Command::Answer { id, answer, text } => {
                let mut s = self.shared();
                let Some(q) = s.questions.get_mut(&id) else {
                    return refused("answer", "that question is no longer open");
                };
                if !q.answers.contains(&answer) {
                    return refused("answer", "not one of the question's answers");
                }
                if (answer == "text") != text.is_some() {
                    return refused("answer", "`text` goes with the answer `text`, and only it");
                }
                if q.answer.is_none() {
                    q.answer = Some(ViewAnswer { word: answer, text });
                }
                drop(s);
                self.inner.answered.notify_all();
                None
            }
            Command::Take {} => {
                if let Some(why) = self.shared().no_takeover.clone() {
                    return refused("take", &why);
                }
                let changed = {
                    let mut s = self.shared();
                    if s.state.holder == Holder::Agent && s.state.phase != Phase::Finished {
                        s.state.holder = Holder::TakeRequested;
                        Some(s.state.event())
                    } else {
                        None
                    }
                };
                match changed {
                    Some(e) => Some(e),
                    None => refused("take", "the desktop is not the agent's to give now"),
                }
            }
            Command::Give {} => {
                let mut s = self.shared();
                match s.state.holder {
                    Holder::Operator => {
                        s.commands.push_back(OperatorCommand::Give);
                        drop(s);
                        self.inner.commands.notify_one();
                        None
                    }
                    Holder::TakeRequested => {
                        // Withdrawn before the step boundary came.
                        s.state.holder = Holder::Agent;
                        Some(s.state.event())
                    }
                    Holder::Agent => refused("give", "you are not in control"),
                }
            }
            Command::Act { actions } => {
                let mut s = self.shared();
                if s.state.holder != Holder::Operator {
                    return refused(
                        "act",
                        "take control first (the agent pauses at its next step)",
                    );
                }
                s.commands.push_back(OperatorCommand::Act(actions));
                drop(s);
                self.inner.commands.notify_one();
                None
            }
        }
    }
}

/// Waits (at most `for_at_most`) for a viewer when a `host-cli view` of
/// the session is running: the run's first question then reaches it
/// rather than being denied for want of anyone to ask.
pub async fn wait_for_viewer(served: &Served, session_dir: &Path, for_at_most: Duration) {
    if !view_running(session_dir) {
        return;
    }
    let until = Instant::now() + for_at_most;
    while served.viewers() == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The file each running `host-cli view` of a session holds a shared
/// lock on.
pub const VIEW_LOCK: &str = "view.lock";

/// Whether a `host-cli view` of the session is running.
pub fn view_running(session_dir: &Path) -> bool {
    let Ok(f) = std::fs::File::open(session_dir.join(VIEW_LOCK)) else {
        return false;
    };
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
}

/// Says that a view of the session runs, for as long as the file lives.
pub fn hold_view_lock(session_dir: &Path) -> Result<std::fs::File, SetupError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = session_dir.join(VIEW_LOCK);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(doing("opening", &path))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockShared)
        .map_err(|e| doing("locking", &path)(e.into()))?;
    Ok(f)
}

/// Ends the served socket when dropped (an error path); the run's own end
/// calls [`Served::finish`] with its ending first.
#[derive(Debug)]
pub struct FinishOnDrop(pub Served);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish("ended");
    }
}

/// What [`Served::update`] may change.
#[derive(Debug)]
pub struct StateEdit<'a> {
    state: &'a mut RunState,
    phase_before_question: &'a mut Option<Phase>,
}

impl StateEdit<'_> {
    pub fn step(&mut self, step: u32) {
        self.state.step = step;
    }

    /// The phase; while a question is open it shows, and this phase
    /// follows when the last one closes.
    pub fn phase(&mut self, phase: Phase) {
        match self.phase_before_question {
            Some(p) => *p = phase,
            None => self.state.phase = phase,
        }
    }

    pub fn usage(&mut self, usage: UsageSoFar) {
        self.state.usage = usage;
    }

    pub fn last_call(&mut self, call: LastCall) {
        self.state.last_call = Some(call);
    }

    /// The last call's ledger word.
    pub fn last_call_state(&mut self, call_id: &str, word: &str) {
        if let Some(c) = self.state.last_call.as_mut()
            && c.call_id == call_id
        {
            c.state = word.into();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept(listener: UnixListener, inner: std::sync::Weak<Inner>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let ours = rustix::process::getuid().as_raw();
        match stream.peer_cred() {
            Ok(c) if c.uid() == ours => {}
            _ => {
                tracing::warn!("a control connection from another user was refused");
                continue;
            }
        }
        tokio::spawn(serve(Served { inner }, stream));
    }
}

async fn serve(served: Served, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    // Subscribed before the opening is read, so nothing falls between.
    let mut events = served.inner.events.subscribe();
    let opening = {
        let mut s = served.shared();
        s.viewers += 1;
        let mut out = vec![s.hello.clone(), s.state.event()];
        out.extend(s.questions.values().map(|q| q.event.clone()));
        out
    };
    let _count = ViewerCount(served.clone());
    for e in opening {
        if write_event(&mut write, &e).await.is_err() {
            return;
        }
    }
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        tokio::select! {
            // Cancel-safe: an event sent while a command is half arrived
            // loses none of it.
            n = fill_line(&mut read, &mut line) => {
                if !matches!(n, Ok(true)) {
                    return;
                }
                let reply = match serde_json::from_slice::<Command>(&line) {
                    Ok(c) => served.command(c),
                    Err(e) => Some(Event::Refused {
                        what: "line".into(),
                        why: format!("not a control command: {e}"),
                    }),
                };
                line.clear();
                // A refusal goes to its sender only; a state change to all.
                if let Some(e) = reply {
                    if matches!(e, Event::State { .. }) {
                        served.send(e);
                    } else if write_event(&mut write, &e).await.is_err() {
                        return;
                    }
                }
            }
            e = events.recv() => match e {
                Ok(e) => {
                    let last = matches!(&e, Event::State { phase: Phase::Finished, .. });
                    if write_event(&mut write, &e).await.is_err() || last {
                        return;
                    }
                }
                // Fell behind or the run ended: the viewer reconnects.
                Err(_) => return,
            },
        }
    }
}

/// Counts a viewer while its connection is served.
struct ViewerCount(Served);

impl Drop for ViewerCount {
    fn drop(&mut self) {
        let mut s = self.0.shared();
        s.viewers = s.viewers.saturating_sub(1);
    }
}

async fn write_event<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    e: &Event,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

#[cfg(test)]
mod tests;
