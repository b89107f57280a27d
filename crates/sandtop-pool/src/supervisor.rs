//! The supervisor: keeps `size` guests ready, hands them out, replaces
//! them.
//!
//! One task refills (at most [`PARALLEL_STARTS`] starts at once), one
//! watches the ready guests (one container listing every
//! [`WATCH_EVERY`]: a guest whose container stopped is removed and
//! replaced, and logged), one accepts claims on the control socket. Every
//! change of the state bumps a `watch` counter; claims waiting for a guest
//! and the refill loop wait on it. After [`HALT_AFTER`] failed starts in a
//! row (a missing image, a full disk) the pool stops refilling and says
//! why in `status`; until then each failure doubles a back-off (1 s to
//! 30 s).

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptionsBuilder;
use sandtop_guest::StartRequest;
use sandtop_guest::docker::{DockerBackend, LABEL_POOL};
use sandtop_guest::options::{GuestArgs, start_configured};
use sandtop_guest::session::{Store, pool_member};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::transfer::{TransferError, transfer};
use crate::wire::{Claimed, Failure, HISTORY, Member, Reply, Request, Status, Want};
use crate::{PoolConfig, PoolError, PoolPaths, now_unix};

/// Starts run at once, at most.
pub const PARALLEL_STARTS: usize = 4;
/// Failed starts in a row after which the pool stops refilling.
pub const HALT_AFTER: u32 = 3;
/// How often the ready guests are checked.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);
/// The longest a claim waits for a starting guest.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_secs(300);
/// Below this much free space in the state directory, no guest starts.
const MIN_FREE_BYTES: u64 = 64 * 1024 * 1024;
/// How long starting the browser ahead may take (`--prewarm browser`).
const PREWARM_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<Member>,
    starting: Vec<Member>,
    claimed: VecDeque<Claimed>,
    failed: VecDeque<Failure>,
    replaced: u32,
    failures_in_a_row: u32,
    halted: Option<String>,
    stopping: bool,
    /// No start before this (back-off after a failure).
    not_before: Option<Instant>,
}

fn keep<T>(q: &mut VecDeque<T>, item: T) {
    q.push_back(item);
    while q.len() > HISTORY {
        q.pop_front();
    }
}

#[derive(Debug)]
struct Inner {
    store: Store,
    paths: PoolPaths,
    config: PoolConfig,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn bump(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A running supervisor, bound to its socket; [`Supervisor::run`] serves
/// until `pool stop` or `stop_on` resolves.
#[derive(Debug)]
pub struct Supervisor {
    inner: Arc<Inner>,
    listener: UnixListener,
    _lock: std::fs::File,
}

impl Supervisor {
    /// Takes the state directory's pool (its lock), removes the guests a
    /// killed supervisor left, and binds the control socket (0600 in the
    /// 0700 pool folder).
    pub async fn bind(store: Store, config: PoolConfig) -> Result<Supervisor, PoolError> {
        config.check()?;
        let paths = PoolPaths::of(&store);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&paths.dir)
            .map_err(PoolError::io(format!("creating {}", paths.dir.display())))?;
        std::fs::set_permissions(&paths.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(PoolError::io("making the pool folder private"))?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(paths.lock())
            .map_err(PoolError::io("opening the pool's lock"))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(PoolError::AlreadyRunning { lock: paths.lock() });
        }
        remove_orphans(&store).await;
        let socket = paths.socket();
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .map_err(PoolError::io(format!("serving {}", socket.display())))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(PoolError::io("making the control socket private"))?;
        let (changes, _) = watch::channel(0);
        Ok(Supervisor {
            inner: Arc::new(Inner {
                store,
                paths,
                config,
                state: Mutex::new(State::default()),
                changes,
            }),
            listener,
            _lock: lock,
        })
    }

    /// Serves until a `stop` request or `stop_on`; then removes every
    /// unclaimed guest (waiting for those starting) and the socket.
    pub async fn run(self, stop_on: impl std::future::Future<Output = ()>) {
        let inner = self.inner.clone();
        let accept = tokio::spawn(accept(self.listener, inner.clone()));
        let watcher = tokio::spawn(watch_ready(inner.clone()));
        let mut changes = inner.changes.subscribe();
        tracing::info!(
            "pool: keeping {} {} guest(s) of {} ready",
            inner.config.size,
            inner.config.screen,
            inner.config.guest.image
        );
        tokio::pin!(stop_on);
        loop {
            refill(&inner);
            if inner.state().stopping {
                break;
            }
            let wake = inner.state().not_before;
            let tick = wake
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(WATCH_EVERY)
                .max(Duration::from_millis(50));
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep(tick) => {}
                () = &mut stop_on => {
                    inner.state().stopping = true;
                    inner.bump();
                }
            }
        }
        tracing::info!("pool: stopping: removing the unclaimed guests");
        watcher.abort();
        // Starting guests see `stopping` and remove themselves.
        let until = Instant::now() + Duration::from_secs(600);
        while !inner.state().starting.is_empty() && Instant::now() < until {
            let _ = tokio::time::timeout(Duration::from_millis(500), changes.changed()).await;
        }
        let ready: Vec<Member> = inner.state().ready.drain(..).collect();
        futures_util::future::join_all(ready.iter().map(|m| remove_guest(&inner.store, &m.name)))
            .await;
        accept.abort();
        let _ = std::fs::remove_file(inner.paths.socket());
        tracing::info!("pool: stopped");
    }
}

/// Removes the unclaimed guests of supervisors that are gone.
async fn remove_orphans(store: &Store) {
    for (dir, rec) in store.list().unwrap_or_default() {
        if pool_member::supervisor_alive(&dir) == Some(false) {
            tracing::info!(
                "pool: removing {}, left by a supervisor that is gone",
                dir.name
            );
            if let Err(e) = sandtop_guest::stop(store, &dir, &rec).await {
                tracing::warn!("pool: removing {}: {}", dir.name, e.chain());
            }
        }
    }
}

async fn remove_guest(store: &Store, name: &str) {
    let Ok(dir) = store.get(name) else { return };
    let Ok(rec) = dir.load() else {
        let _ = store.remove(&dir);
        return;
    };
    if let Err(e) = sandtop_guest::stop(store, &dir, &rec).await {
        tracing::warn!("pool: removing {name}: {}", e.chain());
    }
}

/// A fresh pool guest name: `pool-` and 8 hex digits.
fn pool_name() -> String {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_err() {
        b = (now_unix() as u32 ^ std::process::id()).to_le_bytes();
    }
    format!("pool-{:08x}", u32::from_le_bytes(b))
}

/// Starts what is missing, unless stopping, halted or backing off.
fn refill(inner: &Arc<Inner>) {
    let mut st = inner.state();
    if st.stopping || st.halted.is_some() {
        return;
    }
    if st.not_before.is_some_and(|t| Instant::now() < t) {
        return;
    }
    st.not_before = None;
    while st.ready.len() + st.starting.len() < inner.config.size
        && st.starting.len() < PARALLEL_STARTS
    {
        let name = pool_name();
        st.starting.push(Member {
            name: name.clone(),
            since_unix: now_unix(),
        });
        tokio::spawn(start_one(inner.clone(), name));
    }
}

/// Free bytes of the state directory's file system.
fn free_bytes(store: &Store) -> Option<u64> {
    let s = rustix::fs::statvfs(store.root()).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

async fn start_one(inner: Arc<Inner>, name: String) {
    let t = Instant::now();
    let outcome = start_guest(&inner, &name).await;
    let remove = settle(&inner, &name, outcome, t);
    inner.bump();
    if remove {
        // Still listed as starting: the stopping supervisor waits for the
        // removal before it ends (and `pool stop` returns).
        remove_guest(&inner.store, &name).await;
        inner.state().starting.retain(|m| m.name != name);
        inner.bump();
    }
}

/// Records how a start ended; whether the guest is to be removed (it
/// became ready while the pool stops: it then stays among the starting
/// until its removal is done).
fn settle(inner: &Inner, name: &str, outcome: Result<(), String>, t: Instant) -> bool {
    let name = name.to_string();
    let mut st = inner.state();
    if outcome.is_ok() && st.stopping {
        return true;
    }
    st.starting.retain(|m| m.name != name);
    match outcome {
        Ok(()) => {
            st.failures_in_a_row = 0;
            st.ready.push_back(Member {
                name: name.clone(),
                since_unix: now_unix(),
            });
            tracing::info!("pool: {name} ready in {} ms", t.elapsed().as_millis());
            false
        }
        Err(reason) => {
            st.failures_in_a_row += 1;
            let n = st.failures_in_a_row;
            tracing::warn!("pool: starting {name} failed ({n} in a row): {reason}");
            if n >= HALT_AFTER && st.halted.is_none() {
                st.halted = Some(format!(
                    "stopped refilling after {n} failed starts in a row; the last: {reason}"
                ));
                tracing::error!("pool: {}", st.halted.as_deref().unwrap_or_default());
            }
            let backoff = Duration::from_secs(1 << n.min(5)).min(Duration::from_secs(30));
            st.not_before = Some(Instant::now() + backoff);
            keep(
                &mut st.failed,
                Failure {
                    name: name.clone(),
                    reason,
                    at_unix: now_unix(),
                },
            );
            false
        }
    }
}

/// Boots one pool guest (marked, labelled) and, with `--prewarm browser`,
/// starts its browser; on failure nothing of it is left.
async fn start_guest(inner: &Inner, name: &str) -> Result<(), String> {
    if let Some(free) = free_bytes(&inner.store)
        && free < MIN_FREE_BYTES
    {
        return Err(format!(
            "the state directory's file system has {} MiB free (at least {} MiB needed)",
            free / (1024 * 1024),
            MIN_FREE_BYTES / (1024 * 1024)
        ));
    }
    let c = &inner.config;
    let req = StartRequest {
        name: name.to_string(),
        screen: c.screen,
        network: c.network.clone(),
    };
    let labels = [(
        LABEL_POOL.to_string(),
        inner.paths.dir.display().to_string(),
    )];
    let marker = pool_member::marker_for(name);
    let args = GuestArgs::from_config(&c.guest);
    let rec = start_configured(&inner.store, c.backend, &args, &req, &labels, Some(&marker))
        .await
        .map_err(|e| e.chain())?;
    if c.prewarm_browser {
        let warmed = tokio::time::timeout(PREWARM_TIMEOUT, async {
            let dir = inner.store.get(name).map_err(|e| e.to_string())?;
            let mut ch = sandtop_guest::open_channel(&dir, &rec)
                .await
                .map_err(|e| e.chain())?;
            ch.browser_state().await.map_err(|e| e.to_string())?;
            Ok::<(), String>(())
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", PREWARM_TIMEOUT.as_secs())));
        if let Err(e) = warmed {
            remove_guest(&inner.store, name).await;
            return Err(format!(
                "starting its browser ahead (--prewarm browser): {e}"
            ));
        }
    }
    Ok(())
}

/// Checks the ready guests' containers every [`WATCH_EVERY`]; a guest
/// whose container is not running is removed (and so replaced).
async fn watch_ready(inner: Arc<Inner>) {
    let Ok(docker) = DockerBackend::connect().await else {
        tracing::warn!("pool: the Docker engine does not answer: ready guests are not watched");
        return;
    };
    let label = format!("{LABEL_POOL}={}", inner.paths.dir.display());
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let filters = HashMap::from([
            ("label", vec![label.clone()]),
            ("status", vec!["running".to_string()]),
        ]);
        let Ok(list) = docker
            .docker()
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(false)
                    .filters(&filters)
                    .build(),
            ))
            .await
        else {
            continue;
        };
        let running: HashSet<String> = list.into_iter().filter_map(|c| c.id).collect();
        let ready: Vec<String> = inner.state().ready.iter().map(|m| m.name.clone()).collect();
        for name in ready {
            let id = inner
                .store
                .get(&name)
                .ok()
                .and_then(|d| d.load().ok())
                .and_then(|r| r.docker().map(|d| d.container_id.clone()));
            if id.as_ref().is_some_and(|id| running.contains(id)) {
                continue;
            }
            let lost = {
                let mut st = inner.state();
                let before = st.ready.len();
                st.ready.retain(|m| m.name != name);
                let lost = st.ready.len() < before;
                if lost {
                    st.replaced += 1;
                    keep(
                        &mut st.failed,
                        Failure {
                            name: name.clone(),
                            reason: "its container stopped while it was ready; replaced".into(),
                            at_unix: now_unix(),
                        },
                    );
                }
                lost
            };
            if lost {
                tracing::warn!(
                    "pool: {name} died while ready (its container is not running): replacing it"
                );
                inner.bump();
                remove_guest(&inner.store, &name).await;
            }
        }
    }
}

async fn accept(listener: UnixListener, inner: Arc<Inner>) {
    let ours = rustix::process::getuid().as_raw();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        match stream.peer_cred() {
            Ok(c) if c.uid() == ours => {}
            _ => {
                tracing::warn!("pool: a connection from another user was refused");
                continue;
            }
        }
        tokio::spawn(serve(stream, inner.clone()));
    }
}

async fn serve(stream: UnixStream, inner: Arc<Inner>) {
    let (read, mut write) = stream.into_split();
    let mut reader = tokio::io::BufReader::new(read).take(crate::wire::MAX_REQUEST_BYTES);
    let mut line = String::new();
    if reader.read_line(&mut line).await.is_err() || !line.ends_with('\n') {
        return;
    }
    let reply = match serde_json::from_str::<Request>(line.trim_end()) {
        Err(e) => Reply::Refused {
            reason: format!("not a pool request: {e}"),
        },
        Ok(Request::Status {}) => Reply::Status {
            status: Box::new(status(&inner)),
        },
        Ok(Request::Stop {}) => {
            inner.state().stopping = true;
            inner.bump();
            Reply::Stopping
        }
        Ok(Request::Claim {
            name,
            wait_ms,
            want,
        }) => claim(&inner, &name, Duration::from_millis(wait_ms), &want).await,
    };
    let mut text = serde_json::to_string(&reply).unwrap_or_default();
    text.push('\n');
    let _ = write.write_all(text.as_bytes()).await;
}

fn status(inner: &Inner) -> Status {
    let st = inner.state();
    Status {
        pid: std::process::id(),
        config: inner.config.clone(),
        ready: st.ready.iter().cloned().collect(),
        starting: st.starting.clone(),
        claimed: st.claimed.iter().cloned().collect(),
        failed: st.failed.iter().cloned().collect(),
        replaced: st.replaced,
        failures_in_a_row: st.failures_in_a_row,
        halted: st.halted.clone(),
        stopping: st.stopping,
    }
}

/// Hands a ready guest over as `name`, waiting up to `wait` for one.
async fn claim(inner: &Arc<Inner>, name: &str, wait: Duration, want: &Want) -> Reply {
    let refused = |reason: String| Reply::Refused { reason };
    if let Some(why) = want.mismatch(&inner.config) {
        return refused(why);
    }
    if let Err(e) = sandtop_guest::session::check_name(name) {
        return refused(e.to_string());
    }
    let t = Instant::now();
    let deadline = t + wait.min(MAX_CLAIM_WAIT);
    let mut changes = inner.changes.subscribe();
    loop {
        let broken = {
            let mut st = inner.state();
            if st.stopping {
                return refused("the pool is stopping".into());
            }
            match st.ready.pop_front() {
                Some(m) => match transfer(&inner.store, &m.name, name) {
                    Ok(_) => {
                        keep(
                            &mut st.claimed,
                            Claimed {
                                from: m.name.clone(),
                                name: name.to_string(),
                                at_unix: now_unix(),
                            },
                        );
                        drop(st);
                        inner.bump();
                        tracing::info!("pool: {} handed out as {name}", m.name);
                        return Reply::Claimed {
                            name: name.to_string(),
                            from: m.name,
                            waited_ms: u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX),
                        };
                    }
                    Err(TransferError::Exists(n)) => {
                        st.ready.push_front(m);
                        return refused(format!(
                            "a session named `{n}` already exists (host-cli guest ls)"
                        ));
                    }
                    Err(e) => {
                        keep(
                            &mut st.failed,
                            Failure {
                                name: m.name.clone(),
                                reason: format!("could not be handed out: {e}"),
                                at_unix: now_unix(),
                            },
                        );
                        Some(m.name)
                    }
                },
                None => {
                    if let Some(h) = &st.halted {
                        return refused(format!(
                            "no guest is ready and the pool stopped refilling: {h}"
                        ));
                    }
                    None
                }
            }
        };
        if let Some(b) = broken {
            inner.bump();
            remove_guest(&inner.store, &b).await;
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || tokio::time::timeout(left, changes.changed()).await.is_err() {
            let st = inner.state();
            let last = st
                .failed
                .back()
                .map(|f| format!("; the last failure: {}", f.reason))
                .unwrap_or_default();
            return refused(format!(
                "no guest became ready within {} ms ({} starting, pool size {}){last}",
                wait.as_millis(),
                st.starting.len(),
                inner.config.size
            ));
        }
    }
}
