//! The egress proxy as a session's companion process.
//!
//! 1. `guest start --network allow:...|ask...` writes the session's
//!    [`EgressConfig`] to `egress.json` and starts `host-cli egress-proxy`
//!    detached, in its own process group, once the guest runs (the guest's
//!    relay connects per connection, so it needs nothing earlier).
//! 2. The proxy listens on `guest/egress.sock` (the guest's relay connects
//!    there; the folder is the guest's `/run/sandtop`) and on
//!    `egress-control.sock` (0600, the host user only).
//! 3. Every decision is appended to `egress.jsonl` and sent to the attached
//!    control client, if any, through the proxy's journal gate (a burst,
//!    then 10 entries a second, then summaries every 5 s: see
//!    `egress::limits`); the file stops at [`MAX_JOURNAL_BYTES`].
//! 4. A `host-cli run` on the session attaches to the control socket: it
//!    writes the decisions into its trajectory and answers the proxy's
//!    questions (ask mode) on the operator's terminal — approve, deny or
//!    cancel. Cancel refuses the requests waiting on that question only;
//!    the run goes on and the origin is asked about again (seed 004;
//!    docs/security.md N9). Without an attached run, or without a terminal, a
//!    question is answered deny. A request waits at most 120 s for the
//!    answer; the question stays open, and a later answer still lasts for
//!    the session.
//! 5. `guest stop` ends the proxy with the guest.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::policy::{Cidr, NetworkMode, Policy};
use super::proxy::{self, Answer, Proxy, Question, Resolver};

/// The most `egress.jsonl` grows to; past it one `journal_full` line is
/// written and the rest only reaches an attached run.
pub const MAX_JOURNAL_BYTES: u64 = 16 * 1024 * 1024;

/// Where programs in the guest find the proxy (the relay's address).
pub const RELAY_ADDR: &str = "127.0.0.1:3128";

/// A session's egress settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressConfig {
    pub mode: NetworkMode,
    /// Ranges whose addresses allowed names may resolve to.
    #[serde(default)]
    pub allow_private: Vec<Cidr>,
    /// Fixed name resolution (tests on private networks).
    #[serde(default)]
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
}

impl EgressConfig {
    pub fn none() -> EgressConfig {
        EgressConfig {
            mode: NetworkMode::None,
            allow_private: Vec::new(),
            resolve: BTreeMap::new(),
        }
    }
}

/// Paths of a session's egress files, under its folder.
#[derive(Debug, Clone)]
pub struct Paths {
    pub config: PathBuf,
    pub guest_socket: PathBuf,
    pub control: PathBuf,
    pub journal: PathBuf,
    pub log: PathBuf,
}

impl Paths {
    /// `session` is the session folder; `guest` the folder the guest sees
    /// as /run/sandtop.
    pub fn new(session: &Path, guest: &Path) -> Paths {
        Paths {
            config: session.join("egress.json"),
            guest_socket: guest.join(sandtop_protocol::session::EGRESS_SOCKET_NAME),
            control: session.join("egress-control.sock"),
            journal: session.join("egress.jsonl"),
            log: session.join("egress.log"),
        }
    }
}

/// Why a session's egress proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// A file of the session, or the proxy's program, could not be used.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding the egress settings")]
    Config(#[from] serde_json::Error),
    /// The proxy's sockets did not appear in time; `log` is the proxy's
    /// own log (host text).
    #[error("the egress proxy did not start within {waited:?}; its log says:\n{log}")]
    NotStarted { waited: Duration, log: String },
    /// The proxy's settings file could not be read back.
    #[error("reading {}", path.display())]
    Settings {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// `--socket-owner` is not `uid:gid`.
    #[error("--socket-owner is uid:gid, not `{0}`")]
    Owner(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EgressError {
    let what = what.into();
    move |source| EgressError::Io { what, source }
}

/// How long [`start`] waits for the proxy's sockets.
const START_WAIT: Duration = Duration::from_secs(5);

/// Writes the config and starts the proxy process; returns its pid once
/// its sockets exist.
pub async fn start(
    paths: &Paths,
    cfg: &EgressConfig,
    guest_uid: Option<(u32, u32)>,
) -> Result<i32, EgressError> {
    std::fs::write(&paths.config, serde_json::to_vec_pretty(cfg)?)
        .map_err(io(format!("writing {}", paths.config.display())))?;
    let exe = std::env::current_exe().map_err(io("locating host-cli"))?;
    let log = std::fs::File::create(&paths.log).map_err(io("creating the egress log"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("egress-proxy")
        .arg("--config")
        .arg(&paths.config)
        .arg("--socket")
        .arg(&paths.guest_socket)
        .arg("--control")
        .arg(&paths.control)
        .arg("--journal")
        .arg(&paths.journal);
    if let Some((u, g)) = guest_uid {
        cmd.arg("--socket-owner").arg(format!("{u}:{g}"));
    }
    for k in sandtop_hostkit::secret::SECRET_ENV {
        cmd.env_remove(k);
    }
    use std::os::unix::process::CommandExt as _;
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(io("opening the egress log"))?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io("starting the egress proxy"))?;
    let pid = child.id() as i32;
    drop(child);
    let until = std::time::Instant::now() + START_WAIT;
    while std::time::Instant::now() < until {
        if paths.control.exists() && paths.guest_socket.exists() {
            return Ok(pid);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop(pid);
    Err(EgressError::NotStarted {
        waited: START_WAIT,
        log: std::fs::read_to_string(&paths.log).unwrap_or_default(),
    })
}

/// Ends the proxy process (and its group).
pub fn stop(pid: i32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::TERM);
    }
}

/// Options of the hidden `host-cli egress-proxy` command.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[arg(long)]
    pub config: PathBuf,
    #[arg(long)]
    pub socket: PathBuf,
    #[arg(long)]
    pub control: PathBuf,
    #[arg(long)]
    pub journal: PathBuf,
    /// `uid:gid` to own the guest socket (when running as root).
    #[arg(long)]
    pub socket_owner: Option<String>,
}

fn bind(path: &Path, mode: u32) -> Result<tokio::net::UnixListener, EgressError> {
    let _ = std::fs::remove_file(path);
    let l =
        tokio::net::UnixListener::bind(path).map_err(io(format!("binding {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("chmod {mode:o} {}", path.display())))?;
    Ok(l)
}

/// Binds the guest's socket without ever following a path the guest can
/// write: the guest's folder is its `/run/sandtop`, where it may plant a
/// symlink at any moment, and a chmod or chown by the proxy through one
/// would hand a host file to the guest. So there is no chmod: the mode
/// comes from the umask [`serve`] sets before anything else (bind(2) never
/// follows a link; it fails if anything is in the way), and the chown does
/// not follow links (a link swapped in after the bind gets the new owner
/// itself, which is harmless). Binding elsewhere and renaming into place
/// would also be safe, but the socket would keep its first name in
/// /proc/net/unix.
fn bind_for_guest(
    target: &Path,
    owner: Option<(u32, u32)>,
) -> Result<tokio::net::UnixListener, EgressError> {
    let _ = std::fs::remove_file(target);
    let l = tokio::net::UnixListener::bind(target)
        .map_err(io(format!("binding {}", target.display())))?;
    if let Some((u, g)) = owner {
        rustix::fs::chownat(
            rustix::fs::CWD,
            target,
            Some(rustix::fs::Uid::from_raw(u)),
            Some(rustix::fs::Gid::from_raw(g)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io("chown of the guest socket")(e.into()))?;
    }
    Ok(l)
}

/// The proxy's umask, which gives the guest's socket its mode: 0600 when
/// the socket will belong to the guest's uid (we chown it, or we are that
/// uid); else 0666, as the guest's folder is then open to "others" too
/// (the 0700 session folder above it keeps other host users out; see
/// `prepare_guest_dir`).
fn umask_for(owner: Option<(u32, u32)>) -> u32 {
    let guest_is_owner = owner.is_some()
        || rustix::process::geteuid().as_raw() == sandtop_protocol::session::GUEST_UID;
    if guest_is_owner { 0o177 } else { 0o111 }
}

fn parse_owner(s: &str) -> Result<(u32, u32), EgressError> {
    let bad = || EgressError::Owner(s.to_string());
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

/// The attached control client, if any: journal entries go to it.
pub type Clients = Arc<Mutex<Option<mpsc::UnboundedSender<Value>>>>;

/// Sends a journal entry to the attached control client, if any.
pub fn forward(client: &Clients, entry: &Value) {
    if let Some(c) = client.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        let _ = c.send(json!({"type": "journal", "entry": entry}));
    }
}

/// The body of `host-cli egress-proxy`.
pub async fn serve(a: ServeArgs) -> Result<(), EgressError> {
    let owner = a.socket_owner.as_deref().map(parse_owner).transpose()?;
    // First, before any file exists: see `bind_for_guest`.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(umask_for(owner)));
    let text = std::fs::read(&a.config).map_err(io(format!("reading {}", a.config.display())))?;
    let cfg: EgressConfig =
        serde_json::from_slice(&text).map_err(|source| EgressError::Settings {
            path: a.config.clone(),
            source,
        })?;
    let mut journal_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&a.journal)
        .map_err(io(format!("opening {}", a.journal.display())))?;
    let client: Clients = Arc::default();
    let (jtx, mut jrx) = mpsc::unbounded_channel::<Value>();
    let journal: proxy::Journal = Arc::new(move |v| {
        let _ = jtx.send(v);
    });
    let c2 = Arc::clone(&client);
    let mut written = journal_file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut full = false;
    tokio::spawn(async move {
        while let Some(mut v) = jrx.recv().await {
            v["t_unix_ms"] = json!(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0)
            );
            // The gate keeps the rate low; this keeps the file bounded
            // whatever the rate (docs/security.md N8).
            let line = format!("{v}\n");
            if written + line.len() as u64 <= MAX_JOURNAL_BYTES {
                written += line.len() as u64;
                let _ = journal_file.write_all(line.as_bytes());
                let _ = journal_file.sync_data();
            } else if !full {
                full = true;
                let _ = writeln!(
                    journal_file,
                    "{}",
                    json!({"kind": "journal_full", "limit_bytes": MAX_JOURNAL_BYTES})
                );
                let _ = journal_file.sync_data();
            }
            forward(&c2, &v);
        }
    });
    let resolver = Resolver {
        fixed: cfg.resolve.clone().into_iter().collect::<HashMap<_, _>>(),
    };
    let proxy = Arc::new(Proxy::new(
        Policy {
            mode: cfg.mode.clone(),
            allow_private: cfg.allow_private.clone(),
        },
        resolver,
        journal,
    ));
    let guest = bind_for_guest(&a.socket, owner)?;
    let control = bind(&a.control, 0o600)?;
    tracing::info!(mode = ?cfg.mode, "egress proxy is serving");
    // A session removed without stopping us (guest gc after a crash): go.
    let config = a.config.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if !config.exists() {
                tracing::info!("the session folder is gone; the egress proxy stops");
                std::process::exit(0);
            }
        }
    });
    tokio::spawn(proxy::serve_unix(Arc::clone(&proxy), guest));
    serve_control(proxy, control, client).await
}

/// Serves the control socket: one operator at a time, who receives the
/// journal (through `client`, which the proxy's journal [`forward`]s to)
/// and answers the questions.
pub async fn serve_control(
    proxy: Arc<Proxy>,
    control: tokio::net::UnixListener,
    client: Clients,
) -> Result<(), EgressError> {
    loop {
        let (stream, _) = control
            .accept()
            .await
            .map_err(io("accepting on the egress control socket"))?;
        // One operator at a time: a new client replaces the old one.
        let (tx, rx) = mpsc::unbounded_channel::<Value>();
        *client.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
        let (qtx, qrx) = mpsc::channel::<Question>(16);
        proxy.set_asker(Some(qtx));
        control_session(stream, rx, tx, qrx).await;
        proxy.set_asker(None);
        *client.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Serves one control client until it goes away.
async fn control_session(
    stream: tokio::net::UnixStream,
    mut outgoing: mpsc::UnboundedReceiver<Value>,
    out_tx: mpsc::UnboundedSender<Value>,
    mut questions: mpsc::Receiver<Question>,
) {
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    let mut pending: HashMap<u64, oneshot::Sender<Answer>> = HashMap::new();
    let mut next = 0u64;
    loop {
        tokio::select! {
            out = outgoing.recv() => {
                let Some(v) = out else { return };
                if wr.write_all(format!("{v}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
            q = questions.recv() => {
                let Some(q) = q else { return };
                next += 1;
                pending.insert(next, q.reply);
                let _ = out_tx.send(json!({"type": "ask", "id": next, "origin": q.origin.to_string()}));
            }
            line = lines.next_line() => {
                let Ok(Some(line)) = line else { return };
                let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                if v["type"] == "answer"
                    && let Some(id) = v["id"].as_u64()
                    && let Some(reply) = pending.remove(&id)
                {
                    let answer = match v["answer"].as_str() {
                        Some("approve") => Answer::Approve,
                        Some("cancel") => Answer::Cancel,
                        _ => Answer::Deny,
                    };
                    let _ = reply.send(answer);
                }
            }
        }
    }
}

/// What an attached run does with the proxy's messages.
pub trait Attached: Send + 'static {
    /// Decides an origin question (blocking is fine: it runs on its own
    /// thread).
    fn answer(&mut self, origin: &str) -> Answer;
    /// Records a journal entry.
    fn journal(&mut self, entry: &Value);
}

/// Attaches a run to the session's proxy. Returns `None` when the session
/// has no proxy.
///
/// `_on_cancel` is no longer called: a cancel answer refuses that origin's
/// waiting requests only and the run goes on (seed 004: cancelling an
/// approval request does not cancel the task; docs/security.md N9). It stays
/// in the signature until its callers stop passing it.
pub async fn attach(
    control: &Path,
    handler: Box<dyn Attached>,
    _on_cancel: Box<dyn Fn() + Send + Sync>,
) -> Option<tokio::task::JoinHandle<()>> {
    let stream = tokio::net::UnixStream::connect(control).await.ok()?;
    let handler = Arc::new(Mutex::new(handler));
    Some(tokio::spawn(async move {
        let (rd, mut wr) = stream.into_split();
        let mut lines = BufReader::new(rd).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match v["type"].as_str() {
                Some("journal") => {
                    let h = Arc::clone(&handler);
                    let entry = v["entry"].clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        h.lock().unwrap_or_else(|p| p.into_inner()).journal(&entry)
                    })
                    .await;
                }
                Some("ask") => {
                    let origin = v["origin"].as_str().unwrap_or("").to_string();
                    let h = Arc::clone(&handler);
                    let answer = tokio::task::spawn_blocking(move || {
                        h.lock().unwrap_or_else(|p| p.into_inner()).answer(&origin)
                    })
                    .await
                    .unwrap_or(Answer::Deny);
                    let word = match answer {
                        Answer::Approve => "approve",
                        Answer::Deny => "deny",
                        Answer::Cancel => "cancel",
                    };
                    let reply = json!({"type": "answer", "id": v["id"], "answer": word});
                    if wr.write_all(format!("{reply}\n").as_bytes()).await.is_err() {
                        return;
                    }
                }
                _ => {}
            }
        }
    }))
}

/// The network options of `guest start` and `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct NetworkArgs {
    /// The guest's network: `none` (the default: no network at all),
    /// `allow:ORIGIN[,ORIGIN...]` (only these origins, e.g.
    /// https://example.com or http://example.org:8080, through the egress
    /// proxy), `ask[:ORIGIN,...]` (those, and the operator is asked about
    /// any other; no answer means deny), or `open` (Docker's bridge
    /// network, unfiltered).
    #[arg(long, default_value = "none")]
    pub network: NetworkMode,
    /// Let allowed names resolve to addresses in this range (private,
    /// loopback, link-local and CGNAT addresses are refused otherwise; the
    /// metadata address always is). Repeatable.
    #[arg(long = "allow-private", value_name = "CIDR")]
    pub allow_private: Vec<Cidr>,
    /// Pin a name to an address instead of asking DNS (for intranet names).
    /// Repeatable.
    #[arg(long = "egress-resolve", value_name = "NAME=IP", value_parser = parse_resolve)]
    pub resolve: Vec<(String, IpAddr)>,
}

fn parse_resolve(s: &str) -> Result<(String, IpAddr), String> {
    let (n, ip) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=IP"))?;
    let host = super::policy::Host::parse(n).map_err(|e| e.to_string())?;
    let super::policy::Host::Name(name) = host else {
        return Err(format!("`{n}` is an address, not a name"));
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("`{ip}` is not an IP address"))?;
    Ok((name, ip))
}

impl NetworkArgs {
    /// The session's egress settings.
    pub fn config(&self) -> EgressConfig {
        let mut resolve: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for (n, ip) in &self.resolve {
            resolve.entry(n.clone()).or_default().push(*ip);
        }
        EgressConfig {
            mode: self.network.clone(),
            allow_private: self.allow_private.clone(),
            resolve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_folder_that_is_gone_is_an_io_error_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join("gone");
        let paths = Paths::new(&gone, &gone.join("guest"));
        match start(&paths, &EgressConfig::none(), None).await {
            Err(EgressError::Io { what, source }) => {
                assert_eq!(what, format!("writing {}", paths.config.display()));
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_planted_symlink_does_not_redirect_the_guest_socket() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "host file").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let guest = tmp.path().join("guest");
        std::fs::create_dir(&guest).unwrap();
        let target = guest.join("egress.sock");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        let me = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let _l = bind_for_guest(&target, Some(me)).unwrap();
        use std::os::unix::fs::FileTypeExt as _;
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::symlink_metadata(&target).unwrap();
        assert!(m.file_type().is_socket(), "{:?}", m.file_type());
        assert_eq!((m.uid(), m.gid()), me);
        let v = std::fs::metadata(&victim).unwrap();
        assert_eq!(
            v.permissions().mode() & 0o777,
            0o600,
            "the victim was chmod-ed"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host file");
        tokio::net::UnixStream::connect(&target).await.unwrap();
    }

    #[test]
    fn a_socket_owner_is_uid_colon_gid_and_anything_else_is_refused_by_name() {
        assert_eq!(parse_owner("1000:1001").unwrap(), (1000, 1001));
        for bad in ["1000", "1000:", ":1000", "a:b", "1:2:3", "-1:0"] {
            match parse_owner(bad) {
                Err(EgressError::Owner(s)) => assert_eq!(s, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
