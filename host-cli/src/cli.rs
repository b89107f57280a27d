//! The command line: parsing (clap) and the subcommands' bodies. Errors
//! carry context (`anyhow`); `main` maps them to exit codes.
//!
//! Layout: tests apart (`cli/tests.rs`): the clap definitions of every
//! subcommand and the bodies of the small ones: `guest` (~255 lines with its
//! helpers), `screenshot`, `act`; the large ones have modules of their own.
//! If it grows, `guest` moves to `cli/guest.rs`.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};
use sandtop_protocol::{Action, BatchRequest, Fit, ImageFormat, ScaleMap, ScreenshotOptions, Size};
use serde_json::{Value, json};

use crate::channel::{ChannelError, check_screenshot};
use crate::guest::ls_entry;
use crate::guest::{self, State};
use crate::session::end_run;
use crate::session::{BackendKind, SessionDir, SessionRecord, Store};

/// Sandtop: an isolated, exact, fast desktop for computer-use models.
#[derive(Debug, Parser)]
#[command(name = "host-cli", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a task with the computer-use model on a guest. Without
    /// OPENAI_API_KEY it runs the offline exercise instead.
    #[command(after_help = EXIT_STATUS)]
    Run(Box<crate::agent::cmd::RunArgs>),
    /// The offline exercise: the scripted model drives a real guest through
    /// the loop (approvals included) and the result is checked against the
    /// apps' own records.
    #[command(after_help = EXIT_STATUS)]
    Exercise(crate::agent::cmd::ExerciseArgs),
    /// Run each task of a JSON-lines file on its own fresh guest, in its
    /// own run folder, judged by checks of the guest's state; write
    /// results.json and an HTML table linking each run's report. Without
    /// an API key, tasks with a scripted solution run it.
    #[command(after_help = BATCH_EXIT_STATUS)]
    Batch(crate::commands::batch::BatchArgs),
    /// Start, list, stop and clean up guests.
    #[command(subcommand)]
    Guest(GuestCommand),
    /// A warm pool: keep N ready guests of one configuration that `guest
    /// start --pool`, `run --pool` and `mcp --pool` claim.
    #[command(subcommand)]
    Pool(crate::commands::pool::PoolCommand),
    /// (internal) A session's egress proxy; `guest start --network
    /// allow:...|ask` starts it.
    #[command(hide = true)]
    EgressProxy(crate::egress::service::ServeArgs),
    /// (internal) The host end of a VM guest's link; `guest start
    /// --backend qemu` starts it.
    #[command(hide = true)]
    QemuLink(crate::guest::qemu::LinkArgs),
    /// Take one screenshot of a session and write it to a file.
    Screenshot(ScreenshotArgs),
    /// Run Responses-API-shaped actions against a session; print the result
    /// as JSON (exit status 1 when an action failed or was refused).
    Act(ActArgs),
    /// What works on this host and what does not (Docker, the guest image,
    /// X, XTEST and SHM inside a throwaway guest), one line each, with the
    /// fix when something fails.
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Guest figures: boot to ready, a step through the channel (socket
    /// and exec), idle memory, N guests side by side (built with
    /// `--features bench`: `make bench-guest`).
    #[cfg(feature = "bench")]
    Bench(crate::bench::BenchArgs),
    /// Write one self-contained HTML report of a run folder (screenshots
    /// with the model's actions drawn, approvals, usage, timings, network
    /// decisions, the ending); it loads nothing when opened.
    Report(crate::commands::report::ReportArgs),
    /// Watch a guest live in your browser (127.0.0.1 only, a one-time
    /// link): the screen, a running `host-cli run`'s state, its questions
    /// answered with buttons, and Take control / Give back.
    View(crate::commands::view::ViewArgs),
    /// Replay a recorded run on a fresh guest (or --session) and compare
    /// each resulting screen with the recorded one; exit 0 when every
    /// step matched, 7 at the first divergence (its step and regions). A
    /// batch task's run folder (its task.json) gets the task's network and
    /// setup steps first.
    Replay(crate::replay::ReplayArgs),
    /// Serve guests to an MCP client (Claude Code, Claude Desktop, Codex
    /// CLI, VS Code, Cursor) over stdio: start/stop/list guests, `computer`,
    /// `screenshot`, `browser_<member>`; calls that type, press keys or
    /// change a page run only after the person approves them.
    Mcp(Box<crate::mcp::McpArgs>),
}

/// The whole program: parses the command line, sets up logging (stderr,
/// `RUST_LOG`, default `warn`) and the runtime, runs the command and turns
/// its error into a line on stderr. The `host-cli` binary only calls this:
/// every generic it needs is instantiated here, in the library, so the
/// binary's own compilation is a link (`make guest`'s release build).
pub fn main() -> ExitCode {
    let cli = parse();
    // The pool's supervisor logs what it does (its starts, claims, losses).
    let supervisor = matches!(
        cli.command,
        Command::Pool(crate::commands::pool::PoolCommand::Start(_))
    );
    {
        use std::io::IsTerminal as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        // `RUST_LOG` as `target=level` directives; unset or unreadable: warn.
        let filter = std::env::var("RUST_LOG")
            .ok()
            .and_then(|v| v.parse::<tracing_subscriber::filter::Targets>().ok())
            .unwrap_or_else(|| {
                let t = tracing_subscriber::filter::Targets::new()
                    .with_default(tracing_subscriber::filter::LevelFilter::WARN);
                if supervisor {
                    t.with_target(
                        "sandtop_pool",
                        tracing_subscriber::filter::LevelFilter::INFO,
                    )
                } else {
                    t
                }
            });
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .with(filter)
            .init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("host-cli: cannot start the runtime: {e}");
            return ExitCode::from(70);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // Its causes as `{e:#}` shows them, each once.
            eprintln!(
                "host-cli: {}",
                crate::term::safe(&crate::chain::chain(e.as_ref()))
            );
            ExitCode::FAILURE
        }
    }
}

/// Parses the command line (exiting with clap's message and status on an
/// error, as `Cli::parse` does), and notes which of `run`'s options were
/// given ([`crate::agent::cmd::RunArgs::given`]).
pub fn parse() -> Cli {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Run(a), Some(("run", m))) = (&mut cli.command, matches.subcommand()) {
        a.given = given(&Cli::command(), "run", m);
    }
    cli
}

/// The options of subcommand `name` that `m` has from the command line or
/// the environment.
pub fn given(
    cli: &clap::Command,
    name: &str,
    m: &clap::ArgMatches,
) -> Vec<crate::agent::cmd::Given> {
    use clap::parser::ValueSource;
    let Some(sub) = cli.find_subcommand(name) else {
        return Vec::new();
    };
    sub.get_arguments()
        .filter(|arg| {
            matches!(
                m.value_source(arg.get_id().as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .map(|arg| crate::agent::cmd::Given {
            id: arg.get_id().to_string(),
            shown: match arg.get_long() {
                Some(l) => format!("--{l}"),
                None => "the task".to_string(),
            },
        })
        .collect()
}

#[derive(Debug, Subcommand)]
pub enum GuestCommand {
    /// Start a guest and print its session name.
    Start(StartArgs),
    /// List sessions.
    Ls {
        /// Print a JSON array (name, backend, state, screen, and for a
        /// local session its X display name `x_display` and `xauthority`
        /// file, ...).
        #[arg(long)]
        json: bool,
    },
    /// Stop a session (or all of them) and remove its folder.
    Stop {
        /// The session to stop.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        name: Option<String>,
        /// Stop every session.
        #[arg(long)]
        all: bool,
        /// Also a session a run holds: that run is stopped first (as
        /// Ctrl-C stops it: it ends `interrupted`, its trajectory
        /// complete), then the session.
        #[arg(long)]
        force: bool,
    },
    /// Replace a session's guest with a fresh one under the same name (from
    /// the pool when one runs with the session's configuration, else booted
    /// with it): everything the guest held is gone.
    Reset {
        name: String,
        /// Also a session a run holds: that run is stopped first.
        #[arg(long)]
        force: bool,
        /// Print the new session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the tail of a session's log (for Docker sessions: the
    /// container's log).
    Logs { name: String },
    /// Boot a VM guest once, up to the moment it waits for the host, and
    /// save that state beside the VM image: `guest start --backend qemu`
    /// with the same configuration (image, QEMU, memory, CPUs, screen,
    /// egress mode) then starts from it instead of booting. Replaces the
    /// snapshot of that configuration; removes those of an older image.
    Snapshot(SnapshotArgs),
    /// Remove what a killed host-cli left behind: containers labelled
    /// `sandtop.session` that no live session owns, and stale session
    /// folders. What cannot be removed is listed (and the exit status is 1);
    /// the rest is removed anyway.
    Gc {
        /// Print what was removed, and what could not be, as a JSON array
        /// of lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// Session name (default: generated).
    #[arg(long)]
    pub name: Option<String>,
    /// Where the guest runs: `docker` (a hardened container); `local` runs
    /// Xvfb and sandtopd on this host with NO isolation (for development
    /// and tests).
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// Screen size of the guest's display, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", alias = "display", default_value = "1280x800", value_parser = Size::parse)]
    pub screen: Size,
    /// Print the session as JSON.
    #[arg(long)]
    pub json: bool,
    /// Take a ready guest from the warm pool (`host-cli pool start`)
    /// instead of booting one: it has the pool's configuration, so the
    /// guest flags are refused beside it.
    #[arg(long, conflicts_with_all = ["backend", "screen", "image", "memory", "cpus", "pids", "ready_timeout", "network"])]
    pub pool: bool,
    #[command(flatten)]
    pub guest: guest::options::GuestArgs,
    #[command(flatten)]
    pub net: crate::egress::service::NetworkArgs,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Screen size of the guests that will start from it, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", alias = "display", default_value = "1280x800", value_parser = Size::parse)]
    pub screen: Size,
    /// Print the snapshot as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub guest: guest::options::GuestArgs,
    #[command(flatten)]
    pub net: crate::egress::service::NetworkArgs,
}

#[derive(Debug, Args)]
pub struct SessionArg {
    /// The session (may be left out when exactly one is running).
    #[arg(long)]
    pub session: Option<String>,
}

#[derive(Debug, Args)]
pub struct ScreenshotArgs {
    #[command(flatten)]
    pub session: SessionArg,
    /// Scale to fit this size (aspect ratio kept).
    #[arg(long, value_parser = Size::parse)]
    pub size: Option<Size>,
    /// Image format.
    #[arg(long, value_enum, default_value = "png")]
    pub format: FormatArg,
    /// Draw the pointer into the image.
    #[arg(long)]
    pub cursor: bool,
    /// Output file (created 0600; an existing file is never overwritten).
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Give up when the daemon has not answered within this long
    /// (connecting included): exit 1 saying so, no file written. A
    /// capture takes well under a second; the default leaves room for a
    /// loaded host and a full-size PNG.
    #[arg(long, default_value = SCREENSHOT_TIMEOUT, value_parser = timeout_parser())]
    pub timeout: Duration,
}

/// `screenshot --timeout`'s default.
pub const SCREENSHOT_TIMEOUT: &str = "30s";

/// `act --timeout`'s default: the daemon ends any batch at its own
/// deadline (`limits::REQUEST_DEADLINE_MS`, 30 s, however long its waits:
/// 64 `wait` actions would be 192 s) and answers every request within
/// 10 s more; the other 20 s are for connecting (a Docker exec) and the
/// final screenshot's reply.
pub const ACT_TIMEOUT: &str = "60s";

fn timeout_parser() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    crate::units::duration_between(Duration::from_millis(100), Duration::from_secs(3600))
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    Png,
    Webp,
    /// Baseline JPEG, quality 85 (lossy).
    Jpeg,
}

impl From<FormatArg> for ImageFormat {
    fn from(f: FormatArg) -> ImageFormat {
        match f {
            FormatArg::Png => ImageFormat::Png,
            FormatArg::Webp => ImageFormat::Webp,
            FormatArg::Jpeg => ImageFormat::Jpeg,
        }
    }
}

#[derive(Debug, Args)]
pub struct ActArgs {
    #[command(flatten)]
    pub session: SessionArg,
    /// The coordinate space: the size of the screenshot the coordinates
    /// refer to (aspect ratio kept, as `screenshot --size` makes it).
    #[arg(long, value_parser = Size::parse)]
    pub size: Option<Size>,
    /// Write the final screenshot here (created 0600, never overwritten).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Give up when the daemon has not answered within this long
    /// (connecting included). The default is the daemon's own deadline
    /// for a batch (30 s) and for any reply (10 s more), plus 20 s to
    /// connect and carry the screenshot. On expiry: exit 1, and the
    /// outcome is unknown (all, some or none of the actions may have run:
    /// look before acting again).
    #[arg(long, default_value = ACT_TIMEOUT, value_parser = timeout_parser())]
    pub timeout: Duration,
    /// One action as JSON (e.g. '{"type":"click","button":"left","x":10,"y":20}')
    /// or an array of actions, Responses API shapes.
    pub actions: String,
}

const EXIT_STATUS: &str = "Exit status: 0 the run finished (the exercise: and both checks \
passed); 1 an error, or an exercise check failed; 3 a safety check or an action was denied \
or refused; 4 the step or time budget ran out; 5 an action failed (refused before its \
response ran, or by the guest), unless --on-action-error report; 6 the model ended its turn \
without a final answer (commentary only); 130 interrupted (Ctrl-C, or `cancel` to an origin \
question).";

const BATCH_EXIT_STATUS: &str = "Exit status: 0 every task that ran passed (unsupported and \
skipped tasks run nothing); 1 a task failed (a check did not pass) or could not be run (its \
guest, its setup); 2 a usage error: a task file with a bad line (each named with its line \
number; nothing runs), or bad options.";

/// Runs the command line; returns the exit code.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(a) => crate::agent::cmd::run(*a).await,
        Command::Exercise(a) => crate::agent::cmd::exercise(a).await,
        Command::Batch(a) => crate::commands::batch::batch(a).await,
        Command::Guest(g) => guest_command(g).await,
        Command::Pool(p) => crate::commands::pool::command(p).await,
        Command::EgressProxy(a) => {
            crate::egress::service::serve(a).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::QemuLink(a) => {
            crate::guest::qemu::serve_link(a).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Screenshot(a) => screenshot(a).await,
        Command::Act(a) => act(a).await,
        Command::Doctor(a) => crate::commands::doctor::run(a).await,
        #[cfg(feature = "bench")]
        Command::Bench(a) => crate::bench::run(a).await,
        Command::Report(a) => crate::commands::report::run(a),
        Command::View(a) => crate::commands::view::run(a).await,
        // A task's run folder gets its setup first.
        Command::Replay(a) => sandtop_batch::replay::replay(a).await,
        Command::Mcp(a) => crate::mcp::serve(*a).await,
    }
}

async fn guest_command(cmd: GuestCommand) -> anyhow::Result<ExitCode> {
    let store = Store::open()?;
    match cmd {
        GuestCommand::Start(a) => start::start(&store, a).await,
        GuestCommand::Snapshot(a) => start::snapshot(&store, a).await,
        GuestCommand::Reset { name, force, json } => {
            sandtop_pool::command::reset(&store, &name, force, json).await?;
            Ok(ExitCode::SUCCESS)
        }
        GuestCommand::Ls { json } => {
            let mut rows = Vec::new();
            for (dir, rec) in store.list()? {
                let st = guest::state(&dir, &rec).await;
                let mut row = ls_entry(&rec, st);
                if rec.backend() == BackendKind::Local && st == State::Running {
                    // The display a developer can start an app on: the
                    // daemon's own word (its Xvfb may have been restarted
                    // on another number), and the session's X cookie.
                    if let Ok(ch) = guest::open_channel(&dir, &rec).await
                        && let Some(x) = ch.info().x_display.clone()
                    {
                        row["x_display"] = json!(x);
                        row["xauthority"] = json!(dir.socket_path().with_file_name("xauthority"));
                    }
                }
                rows.push(row);
            }
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&rows)?);
            } else if rows.is_empty() {
                crate::out!("no sessions");
            } else {
                crate::out!(
                    "{:<12} {:<8} {:<13} {:<10} {}",
                    "NAME",
                    "BACKEND",
                    "STATE",
                    "SCREEN",
                    "X DISPLAY"
                );
                for r in &rows {
                    crate::out!(
                        "{:<12} {:<8} {:<13} {:<10} {}",
                        r["name"].as_str().unwrap_or(""),
                        r["backend"].as_str().unwrap_or(""),
                        r["state"].as_str().unwrap_or(""),
                        r["screen"].as_str().unwrap_or(""),
                        r["x_display"].as_str().unwrap_or("-")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        GuestCommand::Stop { name, all, force } => {
            let targets: Vec<(SessionDir, SessionRecord)> = if all {
                store.list()?
            } else {
                let dir = store.get(name.as_deref().unwrap_or_default())?;
                let rec = dir.load()?;
                vec![(dir, rec)]
            };
            let mut failed = false;
            for (dir, rec) in targets {
                if let Some(holder) = crate::agent::cmd::session_holder(&dir) {
                    if !force {
                        failed = true;
                        eprintln!(
                            "host-cli: session {} is in use by a run (host-cli pid {}): not \
                             stopped. Stop the run first, or pass --force to end it and then \
                             the session",
                            rec.name,
                            crate::term::safe_line(&holder)
                        );
                        continue;
                    }
                    if let Err(e) = end_run(&dir, &holder).await {
                        failed = true;
                        eprintln!(
                            "host-cli: stopping {}: {}",
                            rec.name,
                            crate::term::safe(&crate::chain::chain(&e))
                        );
                        continue;
                    }
                    if !dir.record_path().exists() {
                        // The run removed the guest it had booted.
                        crate::out!("stopped {} (with its run)", rec.name);
                        continue;
                    }
                }
                match guest::stop(&store, &dir, &rec).await {
                    Ok(()) => crate::out!("stopped {}", rec.name),
                    Err(e) => {
                        failed = true;
                        eprintln!(
                            "host-cli: stopping {}: {}",
                            rec.name,
                            crate::term::safe(&e.chain())
                        );
                    }
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        GuestCommand::Logs { name } => {
            let dir = store.get(&name)?;
            let rec = dir.load()?;
            let text = match rec.backend() {
                BackendKind::Local => {
                    use guest::Backend as _;
                    guest::local::LocalBackend.logs(&dir, &rec).await?
                }
                BackendKind::Qemu => guest::qemu::console_tail(&dir, 200),
                BackendKind::Docker => {
                    use guest::Backend as _;
                    guest::docker::DockerBackend::connect()
                        .await?
                        .logs(&dir, &rec)
                        .await?
                }
            };
            // The container's log is the guest's own text.
            crate::out!("{}", crate::term::safe(&text));
            Ok(ExitCode::SUCCESS)
        }
        GuestCommand::Gc { json } => {
            let report = guest::gc(&store).await?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&report.lines)?);
            } else if report.lines.is_empty() {
                crate::out!("nothing to clean up");
            } else {
                for line in &report.lines {
                    crate::out!("{line}");
                }
            }
            // Everything else was cleaned up; the failures are listed.
            Ok(if report.failures > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// Writes `bytes` to a new file, 0600; never replaces an existing file
/// (docs/contract.md rule 25).
pub fn write_new_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow::anyhow!(
                    "{} already exists; screenshots never overwrite a file",
                    path.display()
                )
            } else {
                anyhow::anyhow!("cannot create {}: {e}", path.display())
            }
        })?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

async fn screenshot(a: ScreenshotArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open()?;
    let (dir, rec) = guest::resolve_session(&store, a.session.session.as_deref()).await?;
    let _owner = crate::agent::cmd::hold_session(&dir, "host-cli screenshot")?;
    let deadline = tokio::time::Instant::now() + a.timeout;
    let options = ScreenshotOptions {
        size: a.size,
        fit: Fit::Contain,
        region: None,
        format: a.format.into(),
        cursor: a.cursor,
    };
    let shot = tokio::time::timeout_at(deadline, async {
        let mut ch = guest::open_channel(&dir, &rec).await?;
        anyhow::Ok(ch.screenshot(&options).await?)
    })
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "session {}: the daemon did not answer within {} (--timeout); no screenshot was written",
            dir.name,
            crate::units::show_duration(a.timeout)
        )
    })??;
    let bytes = check_screenshot(&shot.screenshot)?;
    write_new_file(&a.output, &bytes)?;
    crate::out!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "file": a.output,
            "width": shot.screenshot.width,
            "height": shot.screenshot.height,
            "format": shot.screenshot.format,
            "bytes": bytes.len(),
            "scale_map": shot.screenshot.scale_map,
            "timings": shot.timings,
        }))?
    );
    Ok(ExitCode::SUCCESS)
}

/// Parses `act`'s argument: one action object or an array of them, with
/// the daemon's strict rules (an unknown field is an error here too).
pub fn parse_actions(text: &str) -> anyhow::Result<Vec<Action>> {
    let v: Value = serde_json::from_str(text).context("the actions are not valid JSON")?;
    let list = match v {
        Value::Array(items) => items,
        obj @ Value::Object(_) => vec![obj],
        _ => bail!("expected one action object or an array of actions"),
    };
    if list.is_empty() {
        bail!("no actions given");
    }
    list.into_iter()
        .enumerate()
        .map(|(i, a)| {
            serde_json::from_value::<Action>(a).with_context(|| format!("action {i} is invalid"))
        })
        .collect()
}

async fn act(a: ActArgs) -> anyhow::Result<ExitCode> {
    let actions = parse_actions(&a.actions)?;
    let store = Store::open()?;
    let (dir, rec) = guest::resolve_session(&store, a.session.session.as_deref()).await?;
    let _owner = crate::agent::cmd::hold_session(&dir, "host-cli act")?;
    let deadline = tokio::time::Instant::now() + a.timeout;
    let waited = crate::units::show_duration(a.timeout);
    // Nothing is sent before the channel is open: a deadline here is a
    // known outcome (nothing ran).
    let mut ch = tokio::time::timeout_at(deadline, guest::open_channel(&dir, &rec))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "session {}: the daemon did not answer within {waited} (--timeout) while \
                 connecting; no action was sent",
                dir.name
            )
        })??;
    let screenshot = ScreenshotOptions {
        size: a.size,
        ..ScreenshotOptions::default()
    };
    let request = BatchRequest::new(actions, screenshot);
    let Ok(reply) = tokio::time::timeout_at(deadline, ch.act(&request)).await else {
        // The batch was sent: whether any of it ran is not known.
        let why = format!(
            "the daemon did not answer within {waited} (--timeout): the outcome is unknown \
             (all, some or none of the {} actions may have run); look before acting again \
             (host-cli screenshot)",
            request.actions.len()
        );
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "ok": false,
                "outcome": "unknown",
                "error": {"code": "timeout", "message": why},
            }))?
        );
        eprintln!("host-cli act: session {}: {why}", dir.name);
        return Ok(ExitCode::FAILURE);
    };
    match reply {
        Ok(r) => {
            let shot = r
                .screenshot
                .context("the daemon sent no final screenshot")?;
            let mut file = Value::Null;
            if let Some(path) = &a.output {
                let bytes = check_screenshot(&shot)?;
                write_new_file(path, &bytes)?;
                file = json!(path);
            }
            crate::out!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "ok": true,
                    "executed": r.executed,
                    "scale_map": shot.scale_map,
                    "screenshot": {
                        "width": shot.width,
                        "height": shot.height,
                        "format": shot.format,
                        "file": file,
                    },
                    "timings": r.timings,
                }))?
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(ChannelError::Daemon { body, .. }) => {
            // The map these coordinates were checked against, as the daemon
            // computed it from the screen it reported on open.
            let scale_map = ch
                .info()
                .display
                .and_then(|screen| ScaleMap::fit(screen, None, a.size, Fit::Contain).ok());
            // The error's message is the guest's text: printed inert.
            crate::out!(
                "{}",
                serde_json::to_string_pretty(&crate::term::safe_json(&json!({
                    "ok": false,
                    "executed": body.executed.unwrap_or(0),
                    "error": body,
                    "scale_map": scale_map,
                })))?
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}

mod start;
#[cfg(test)]
mod tests;
