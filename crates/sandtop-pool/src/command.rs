//! What `host-cli pool start|status` and `guest start --pool|reset` do
//! once their options are read: the supervisor served in the foreground
//! or detached, the status printed, a claim, a session's guest replaced.

use std::path::PathBuf;
use std::time::Duration;

use sandtop_egress::policy::NetworkMode;
use sandtop_egress::service::EgressConfig;
use sandtop_guest::options::{self, GuestArgs};
use sandtop_guest::session::{self, SessionDir, SessionRecord, Store};
use sandtop_hostkit::out;
use sandtop_hostkit::term::{safe, safe_line};
use serde_json::json;

use crate::supervisor::Supervisor;
use crate::wire::{Status, Want};
use crate::{PoolConfig, PoolError, PoolPaths, client};

/// Why `pool start --detach` or `guest reset` could not do their part
/// (the supervisor's own errors are [`PoolError`]'s).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("a pool is already running for this state directory (host-cli pool status)")]
    AlreadyRunning,
    /// A file or process operation on the host; `what` says which, when
    /// anything does.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Os(#[from] std::io::Error),
    #[error("the pool's supervisor ended ({status}) before serving; its log: {}", log.display())]
    Ended {
        status: std::process::ExitStatus,
        log: PathBuf,
    },
    #[error("the pool's supervisor (pid {pid}) does not answer after 30 s; its log: {}", log.display())]
    Silent { pid: u32, log: PathBuf },
    #[error(
        "session {name} is in use by a run (host-cli pid {}): not reset. Stop the run \
         first, or pass --force to end it and then reset the session",
        safe_line(holder)
    )]
    InUse { name: String, holder: String },
    #[error("stopping the old guest of {name}")]
    Stop {
        name: String,
        #[source]
        source: sandtop_guest::GuestError,
    },
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Session(#[from] session::SessionError),
    #[error(transparent)]
    Guest(#[from] sandtop_guest::GuestError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> CommandError {
    move |source| CommandError::Io { what, source }
}

/// `pool start`: the supervisor of `config` served until Ctrl-C, SIGTERM,
/// SIGHUP or `pool stop`; with `detach`, this same command line run
/// without `--detach` in the background, returning once it serves.
pub async fn start(store: Store, config: PoolConfig, detach: bool) -> Result<(), CommandError> {
    config.check()?;
    if config.network.mode == NetworkMode::Open {
        eprintln!(
            "host-cli: --network open: the guests reach any address Docker's bridge can, unfiltered"
        );
    }
    if detach {
        return start_detached(&store).await;
    }
    let sup = Supervisor::bind(store.clone(), config).await?;
    eprintln!(
        "host-cli: pool serving on {} (Ctrl-C or `host-cli pool stop` ends it)",
        PoolPaths::of(&store).socket().display()
    );
    sup.run(stop_signal()).await;
    Ok(())
}

/// Ctrl-C, SIGTERM or SIGHUP.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        Some(_) = async { term.as_mut()?.recv().await } => {}
        Some(_) = async { hup.as_mut()?.recv().await } => {}
    }
}

/// Runs this same command line without `--detach` as a child in a process
/// group of its own (no shell, stdin from /dev/null, output into the
/// pool's log), and returns once it serves or says why it cannot.
async fn start_detached(store: &Store) -> Result<(), CommandError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let paths = PoolPaths::of(store);
    if client::running(&paths).await {
        return Err(CommandError::AlreadyRunning);
    }
    std::fs::create_dir_all(&paths.dir).map_err(io(format!("creating {}", paths.dir.display())))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(paths.log())
        .map_err(io(format!("opening {}", paths.log().display())))?;
    let args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--detach")
        .collect();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io("starting the pool's supervisor".into()))?;
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(CommandError::Ended {
                status,
                log: paths.log(),
            });
        }
        if client::status(store).await.is_ok() {
            out!(
                "pool started (pid {}); its log: {}",
                child.id(),
                paths.log().display()
            );
            return Ok(());
        }
        if std::time::Instant::now() > until {
            return Err(CommandError::Silent {
                pid: child.id(),
                log: paths.log(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `pool status` without `--json`: one line for the pool, one per guest.
pub fn print_status(s: &Status) {
    let c = &s.config;
    out!(
        "pool (pid {}): {} of {} ready, {} starting; {} {} {}, {} MiB each{}{}",
        s.pid,
        s.ready.len(),
        c.size,
        s.starting.len(),
        c.backend,
        c.screen,
        safe(&c.guest.image),
        crate::mib(c.guest.memory),
        c.memory_budget
            .map(|b| format!(" (of {} MiB given)", crate::mib(b)))
            .unwrap_or_default(),
        if c.prewarm_browser {
            ", browser started ahead"
        } else {
            ""
        }
    );
    let now = session::now_unix();
    for m in &s.ready {
        out!(
            "  ready     {} ({} s)",
            m.name,
            now.saturating_sub(m.since_unix)
        );
    }
    for m in &s.starting {
        out!(
            "  starting  {} ({} s)",
            m.name,
            now.saturating_sub(m.since_unix)
        );
    }
    for c in &s.claimed {
        out!("  claimed   {} as {}", c.from, c.name);
    }
    for f in &s.failed {
        out!("  failed    {}: {}", f.name, safe_line(&f.reason));
    }
    if s.replaced > 0 {
        out!("  {} ready guest(s) died and were replaced", s.replaced);
    }
    if let Some(h) = &s.halted {
        out!("  NOT REFILLING: {}", safe_line(h));
    }
    if s.stopping {
        out!("  stopping");
    }
}

/// Claims a ready guest of the pool as session `name` (a fresh name when
/// none is given).
pub async fn claim(
    store: &Store,
    name: Option<String>,
    want: Want,
) -> Result<(SessionDir, SessionRecord), PoolError> {
    let name = match name {
        Some(n) => n,
        None => session::new_name()?,
    };
    client::claim(store, &name, client::CLAIM_WAIT, want).await
}

/// `guest reset NAME`: the session's guest replaced by a fresh one under
/// the same name, from the pool when one runs with the session's
/// configuration, else booted with that configuration; `force` ends a
/// run that holds the session first. Prints the new session (`json`: its
/// `guest ls` entry and `from_pool`).
pub async fn reset(store: &Store, name: &str, force: bool, json: bool) -> Result<(), CommandError> {
    let dir = store.get(name)?;
    let rec = dir.load()?;
    if let Some(holder) = session::session_holder(&dir) {
        if !force {
            return Err(CommandError::InUse {
                name: name.to_string(),
                holder,
            });
        }
        session::end_run(&dir, &holder).await?;
    }
    let config = options::load_config(&dir);
    let args = match &config {
        Some(c) => GuestArgs::from_config(c),
        None => {
            let mut a = GuestArgs::default();
            if let Some(d) = rec.docker() {
                a.image = d.image.clone();
            }
            eprintln!(
                "host-cli: session {name} kept no start options (started before `guest reset`): \
                 its backend, screen, network and image are kept, the limits are the defaults"
            );
            a
        }
    };
    let network = rec.network.clone().unwrap_or_else(EgressConfig::none);
    if dir.record_path().exists() {
        sandtop_guest::stop(store, &dir, &rec)
            .await
            .map_err(|source| CommandError::Stop {
                name: name.to_string(),
                source,
            })?;
    }
    let want = Want {
        backend: Some(rec.backend()),
        screen: Some(rec.screen),
        guest: Some(args.config()),
        network: Some(network.clone()),
    };
    let paths = PoolPaths::of(store);
    let mut from_pool = false;
    let new = if client::running(&paths).await {
        match client::claim(store, name, client::CLAIM_WAIT, want).await {
            Ok((_, r)) => {
                from_pool = true;
                r
            }
            Err(e) => {
                eprintln!(
                    "host-cli: not from the pool ({}); booting a fresh guest",
                    safe_line(&e.to_string())
                );
                boot(store, name, &rec, &args, network).await?
            }
        }
    } else {
        boot(store, name, &rec, &args, network).await?
    };
    if json {
        let mut v = sandtop_guest::ls_entry(&new, sandtop_guest::State::Running);
        v["from_pool"] = json!(from_pool);
        out!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        out!(
            "reset {name}{}",
            if from_pool { " (from the pool)" } else { "" }
        );
    }
    Ok(())
}

async fn boot(
    store: &Store,
    name: &str,
    old: &SessionRecord,
    args: &GuestArgs,
    network: EgressConfig,
) -> Result<SessionRecord, sandtop_guest::GuestError> {
    let req = sandtop_guest::StartRequest {
        name: name.to_string(),
        screen: old.screen,
        network,
    };
    options::start_configured(store, old.backend(), args, &req, &[], None).await
}
