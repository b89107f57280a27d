//! `host-cli pool` (start, status, stop), the claims of `guest start
//! --pool` and `run --pool`, and `guest reset`: the command line's side of
//! `sandtop-pool`, whose supervisor and protocol hold the logic.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use sandtop_pool::wire::{Status, Want};
use sandtop_pool::{PoolConfig, PoolPaths, client, supervisor::Supervisor};
use sandtop_protocol::Size;
use serde_json::json;

use crate::guest::options::{self, GuestArgs};
use crate::session::{self, BackendKind, SessionDir, SessionRecord, Store};

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Keep N guests of one configuration ready (and replace each one
    /// claimed or lost) until `pool stop` or Ctrl-C. `guest start --pool`,
    /// `run --pool` and `host-cli mcp --pool` claim them.
    Start(PoolStartArgs),
    /// Ready, starting, claimed and failed guests, with reasons.
    Status {
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the unclaimed guests and end the supervisor.
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Prewarm {
    /// Start each guest's Firefox before it counts as ready.
    Browser,
}

#[derive(Debug, Args)]
pub struct PoolStartArgs {
    /// How many guests to keep ready.
    #[arg(long, default_value_t = 2)]
    pub size: usize,
    /// The memory the pool may take in all, e.g. 8g: refused at start when
    /// --size x the guests' --memory is more.
    #[arg(long, value_name = "LIMIT", value_parser = crate::units::parse_bytes)]
    pub pool_memory: Option<i64>,
    /// Start something in each guest ahead of its claim.
    #[arg(long, value_enum)]
    pub prewarm: Option<Prewarm>,
    /// Run the supervisor in the background (its log: STATE/pool/pool.log)
    /// and return once it serves.
    #[arg(long)]
    pub detach: bool,
    /// Where the guests run (the pool keeps docker guests).
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// Screen size of the guests' display, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", default_value = "1280x800", value_parser = Size::parse)]
    pub screen: Size,
    #[command(flatten)]
    pub guest: GuestArgs,
    #[command(flatten)]
    pub net: crate::egress::service::NetworkArgs,
}

impl PoolStartArgs {
    fn config(&self) -> PoolConfig {
        PoolConfig {
            backend: self.backend,
            screen: self.screen,
            guest: self.guest.config(),
            network: self.net.config(),
            size: self.size,
            memory_budget: self.pool_memory,
            prewarm_browser: self.prewarm == Some(Prewarm::Browser),
        }
    }
}

pub async fn command(cmd: PoolCommand) -> anyhow::Result<ExitCode> {
    let store = Store::open()?;
    match cmd {
        PoolCommand::Start(a) => start(store, a).await,
        PoolCommand::Status { json } => {
            let s = client::status(&store).await?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print_status(&s);
            }
            Ok(ExitCode::SUCCESS)
        }
        PoolCommand::Stop => {
            client::stop(&store, Duration::from_secs(120)).await?;
            crate::out!("pool stopped; its unclaimed guests are removed");
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn start(store: Store, a: PoolStartArgs) -> anyhow::Result<ExitCode> {
    let config = a.config();
    config.check()?;
    if config.network.mode == crate::egress::policy::NetworkMode::Open {
        eprintln!(
            "host-cli: --network open: the guests reach any address Docker's bridge can, unfiltered"
        );
    }
    if a.detach {
        return detach(&store).await;
    }
    let sup = Supervisor::bind(store.clone(), config).await?;
    eprintln!(
        "host-cli: pool serving on {} (Ctrl-C or `host-cli pool stop` ends it)",
        PoolPaths::of(&store).socket().display()
    );
    sup.run(stop_signal()).await;
    Ok(ExitCode::SUCCESS)
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
async fn detach(store: &Store) -> anyhow::Result<ExitCode> {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let paths = PoolPaths::of(store);
    if client::running(&paths).await {
        bail!("a pool is already running for this state directory (host-cli pool status)");
    }
    std::fs::create_dir_all(&paths.dir)
        .with_context(|| format!("creating {}", paths.dir.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(paths.log())
        .with_context(|| format!("opening {}", paths.log().display()))?;
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
        .context("starting the pool's supervisor")?;
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the pool's supervisor ended ({status}) before serving; its log: {}",
                paths.log().display()
            );
        }
        if client::status(store).await.is_ok() {
            crate::out!(
                "pool started (pid {}); its log: {}",
                child.id(),
                paths.log().display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if std::time::Instant::now() > until {
            bail!(
                "the pool's supervisor (pid {}) does not answer after 30 s; its log: {}",
                child.id(),
                paths.log().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn print_status(s: &Status) {
    let c = &s.config;
    crate::out!(
        "pool (pid {}): {} of {} ready, {} starting; {} {} {}, {} MiB each{}{}",
        s.pid,
        s.ready.len(),
        c.size,
        s.starting.len(),
        c.backend,
        c.screen,
        crate::term::safe(&c.guest.image),
        sandtop_pool::mib(c.guest.memory),
        c.memory_budget
            .map(|b| format!(" (of {} MiB given)", sandtop_pool::mib(b)))
            .unwrap_or_default(),
        if c.prewarm_browser {
            ", browser started ahead"
        } else {
            ""
        }
    );
    let now = session::now_unix();
    for m in &s.ready {
        crate::out!(
            "  ready     {} ({} s)",
            m.name,
            now.saturating_sub(m.since_unix)
        );
    }
    for m in &s.starting {
        crate::out!(
            "  starting  {} ({} s)",
            m.name,
            now.saturating_sub(m.since_unix)
        );
    }
    for c in &s.claimed {
        crate::out!("  claimed   {} as {}", c.from, c.name);
    }
    for f in &s.failed {
        crate::out!(
            "  failed    {}: {}",
            f.name,
            crate::term::safe_line(&f.reason)
        );
    }
    if s.replaced > 0 {
        crate::out!("  {} ready guest(s) died and were replaced", s.replaced);
    }
    if let Some(h) = &s.halted {
        crate::out!("  NOT REFILLING: {}", crate::term::safe_line(h));
    }
    if s.stopping {
        crate::out!("  stopping");
    }
}

/// Claims a ready guest of the pool as session `name` (a fresh name when
/// none is given).
pub async fn claim(
    store: &Store,
    name: Option<String>,
    want: Want,
) -> anyhow::Result<(SessionDir, SessionRecord)> {
    let name = match name {
        Some(n) => n,
        None => session::new_name()?,
    };
    Ok(client::claim(store, &name, client::CLAIM_WAIT, want).await?)
}

/// `guest reset NAME`: the session's guest replaced by a fresh one under
/// the same name, from the pool when one runs with the session's
/// configuration, else booted with that configuration.
pub async fn reset(store: &Store, name: &str, force: bool, json: bool) -> anyhow::Result<ExitCode> {
    let dir = store.get(name)?;
    let rec = dir.load()?;
    if let Some(holder) = crate::agent::cmd::session_holder(&dir) {
        if !force {
            bail!(
                "session {name} is in use by a run (host-cli pid {}): not reset. Stop the run \
                 first, or pass --force to end it and then reset the session",
                crate::term::safe_line(&holder)
            );
        }
        crate::sessions::end_run(&dir, &holder).await?;
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
    let network = rec
        .network
        .clone()
        .unwrap_or_else(crate::egress::service::EgressConfig::none);
    if dir.record_path().exists() {
        crate::guest::stop(store, &dir, &rec)
            .await
            .with_context(|| format!("stopping the old guest of {name}"))?;
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
                    crate::term::safe_line(&e.to_string())
                );
                boot(store, name, &rec, &args, network).await?
            }
        }
    } else {
        boot(store, name, &rec, &args, network).await?
    };
    if json {
        let mut v = crate::sessions::ls_entry(&new, crate::guest::State::Running);
        v["from_pool"] = json!(from_pool);
        crate::out!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        crate::out!(
            "reset {name}{}",
            if from_pool { " (from the pool)" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn boot(
    store: &Store,
    name: &str,
    old: &SessionRecord,
    args: &GuestArgs,
    network: crate::egress::service::EgressConfig,
) -> anyhow::Result<SessionRecord> {
    let req = crate::guest::StartRequest {
        name: name.to_string(),
        screen: old.screen,
        network,
    };
    Ok(options::start_configured(store, old.backend(), args, &req, &[], None).await?)
}
