//! `sandtopd`: see the library docs (`sandtopd::`) for how it works.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use sandtop_client::Token;
use sandtop_protocol::session::{self, TOKEN_ENV};
use sandtop_protocol::{Size, paths};
use sandtopd::api::{self, ApiState};
use sandtopd::desktop::{self, Job};
use sandtopd::driver::Driver;
use sandtopd::driver::x11::X11Driver;
use sandtopd::supervise::{self, DisplayConfig, DisplayHealth, DisplayName, Supervisor};

/// The Sandtop computer driver: XTEST input, MIT-SHM capture and an
/// authenticated HTTP API on a Unix socket, for one X display.
#[derive(Debug, Parser)]
#[command(name = "sandtopd", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once at start: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Serve the API for one display (start Xvfb with --xvfb, or attach).
    Serve(ServeArgs),
    /// Ask a running daemon for its health; exit 0 only when it is ok.
    Health {
        /// The daemon's Unix socket.
        #[arg(long, default_value = session::SOCKET_PATH)]
        socket: PathBuf,
    },
    /// Relay standard input and output to the daemon's socket (the host
    /// reaches the daemon this way through a Docker exec stream).
    Connect {
        #[arg(long, default_value = session::SOCKET_PATH)]
        socket: PathBuf,
    },
    /// The guest end of a VM guest's link (run by the VM's PID 1): the
    /// token from the host, the entry program, the streams.
    VmLink(sandtopd::vm_link::VmLinkArgs),
    /// Side-by-side latency figures against xdotool, ImageMagick and scrot,
    /// on a fresh Xvfb (built with `--features bench`: `make bench`).
    #[cfg(feature = "bench")]
    Bench(sandtopd::bench::BenchArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Unix socket to listen on (created 0600; a stale one is replaced).
    #[arg(long, default_value = session::SOCKET_PATH)]
    socket: PathBuf,
    /// Also listen on this loopback TCP address (for VM backends).
    #[arg(long)]
    tcp: Option<SocketAddr>,
    /// The session token file (64 hex digits). Created 0600 with a fresh
    /// token when missing. SANDTOPD_TOKEN, when set, takes precedence.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// With --token-file: a missing file is awaited, not created. The
    /// daemon starts its display and serves health; every other endpoint
    /// is refused until the file holds a token (a VM guest's link writes it
    /// when the host sends it, which after a snapshot's restore is long
    /// after this start).
    #[arg(long, requires = "token_file")]
    await_token: bool,
    /// Start and supervise Xvfb (otherwise attach to --display or $DISPLAY).
    #[arg(long)]
    xvfb: bool,
    /// The X display (`:N`). With --xvfb and no display, a free one is picked.
    #[arg(long)]
    display: Option<String>,
    /// With --xvfb: write a fresh X authority file here (mode 0600) and
    /// start Xvfb with access control, so only clients holding the cookie
    /// (XAUTHORITY=this file) reach the display. The local backend uses it.
    #[arg(long, value_name = "PATH")]
    xauth_file: Option<PathBuf>,
    /// Screen size for --xvfb.
    #[arg(long, default_value = "1280x800", value_parser = parse_size)]
    screen: Size,
    /// The Xvfb binary.
    #[arg(long, default_value = "Xvfb")]
    xvfb_path: PathBuf,
    /// A window manager to start and supervise (program name or path).
    #[arg(long)]
    wm: Option<String>,
    /// Arguments for the window manager (repeat for each).
    #[arg(long = "wm-arg", allow_hyphen_values = true)]
    wm_args: Vec<String>,
    /// Paint the desktop's background this colour (`RRGGBB`, hex), again
    /// after every X restart. Without it the root window stays as the X
    /// server leaves it (black under Xvfb).
    #[arg(long, value_name = "RRGGBB", value_parser = parse_rgb)]
    background: Option<u32>,
    /// Relay loopback TCP connections to a Unix socket (`ADDR=SOCKET`):
    /// the guest's egress path, when the session has one.
    #[arg(long)]
    egress_relay: Option<sandtopd::relay::RelaySpec>,
    /// Offer the browser driver (`/v1/browser/...`): this Firefox binary is
    /// started on first use, with a private profile, on this display.
    #[arg(long, value_name = "PROGRAM")]
    browser: Option<PathBuf>,
    /// Where the browser's private profile is made (default: the temporary
    /// directory).
    #[arg(long, value_name = "DIR")]
    browser_profiles: Option<PathBuf>,
    /// Let the host read files beneath this folder (`/v1/files/read`: the
    /// guest's home, where the applications keep their records). Without
    /// it the daemon reads no files for anyone.
    #[arg(long, value_name = "DIR")]
    files_root: Option<PathBuf>,
    /// Start the window manager and the browser with libfaketime reading
    /// the wall clock's shift from this file, which the daemon creates
    /// (no shift) and rewrites on `POST /v1/clock` (a replay shows the
    /// recorded run's time). Without it the clock cannot be set.
    #[arg(long, value_name = "FILE")]
    fake_clock: Option<PathBuf>,
    /// The libfaketime library for --fake-clock.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
    )]
    fake_clock_lib: PathBuf,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

fn parse_size(s: &str) -> Result<Size, sandtop_protocol::Invalid> {
    Size::parse(s)
}

fn parse_rgb(s: &str) -> Result<u32, String> {
    let hex = s.strip_prefix('#').unwrap_or(s);
    if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`{s}` is not a colour: six hex digits, RRGGBB"));
    }
    u32::from_str_radix(hex, 16).map_err(|e| e.to_string())
}

fn init_log(json: bool) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // `RUST_LOG` as `target=level` directives; unset or unreadable: info.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        registry.with(layer.json()).init();
    } else {
        registry.with(layer).init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandtopd: cannot start the runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Health { socket } => health(socket).await,
            Command::Connect { socket } => connect(socket).await,
            Command::VmLink(args) => {
                init_log(false);
                sandtopd::vm_link::run(args)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            #[cfg(feature = "bench")]
            Command::Bench(args) => sandtopd::bench::run(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandtopd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_token(args: &ServeArgs) -> anyhow::Result<Token> {
    if let Ok(t) = std::env::var(TOKEN_ENV) {
        return Token::parse(&t).context(TOKEN_ENV);
    }
    match &args.token_file {
        Some(p) => Token::load_or_create(p).context("loading the session token"),
        None => bail!("no token: pass --token-file PATH or set {TOKEN_ENV}"),
    }
}

/// Fills `slot` with the token in `path` once the file holds one (it is
/// written whole by `sandtopd vm-link`; a partial read fails to parse and
/// is tried again 20 ms later).
fn await_token(path: PathBuf, slot: Arc<std::sync::OnceLock<Token>>) {
    tokio::spawn(async move {
        loop {
            if let Ok(t) = Token::read(&path) {
                let _ = slot.set(t);
                tracing::info!("the session token arrived");
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    init_log(args.log_json);
    // Checked before anything starts.
    if let Some(root) = &args.files_root
        && !(root.is_absolute() && root.is_dir())
    {
        bail!(
            "--files-root {}: must be an absolute path to a folder",
            root.display()
        );
    }
    let token = Arc::new(std::sync::OnceLock::new());
    match &args.token_file {
        Some(path) if args.await_token && std::env::var_os(TOKEN_ENV).is_none() => {
            await_token(path.clone(), Arc::clone(&token));
        }
        _ => {
            let _ = token.set(load_token(&args)?);
        }
    }
    let clock = match &args.fake_clock {
        Some(file) => Some(
            sandtopd::clock::FakeClock::new(file.clone(), args.fake_clock_lib.clone())
                .with_context(|| format!("--fake-clock {}", file.display()))?,
        ),
        None => None,
    };
    let health = Arc::new(DisplayHealth::default());
    let wm_argv = args.wm.as_ref().map(|w| {
        let mut v = vec![w.clone()];
        v.extend(args.wm_args.iter().cloned());
        v
    });
    let config = DisplayConfig {
        display: args.display.clone(),
        spawn_xvfb: args.xvfb,
        screen: args.screen,
        xvfb: args.xvfb_path.clone(),
        wm: wm_argv.clone(),
        xauth: None,
        clock: clock.clone(),
    };
    let mut config = config;
    if let Some(path) = &args.xauth_file {
        anyhow::ensure!(
            args.xvfb,
            "--xauth-file needs --xvfb (it sets up the Xvfb it starts)"
        );
        let xauth = sandtopd::xauth::XAuth::create(path)
            .with_context(|| format!("writing the X authority file {}", path.display()))?;
        config.xauth = Some(xauth.path().to_path_buf());
    }

    // 1. The display.
    let (xvfb, display) = if args.xvfb {
        let (child, name) = supervise::start_xvfb(
            &config.xvfb,
            config.display.as_deref(),
            config.screen,
            config.xauth.as_deref(),
        )
        .await
        .context("starting Xvfb")?;
        (Some(child), name)
    } else {
        let d = args
            .display
            .clone()
            .or_else(|| std::env::var("DISPLAY").ok())
            .context("no display: pass --xvfb, --display :N, or set DISPLAY")?;
        (None, d)
    };
    health
        .wm_expected
        .store(wm_argv.is_some(), Ordering::Release);
    let wm = match &wm_argv {
        Some(argv) => Some(
            supervise::start_wm(argv, &display, config.xauth.as_deref(), clock.as_ref())
                .context("starting the window manager")?,
        ),
        None => None,
    };

    let config_xauth = config.xauth.clone();

    // 2. The desktop task, the monitor, the supervisor. They share the
    // display's name: a restart may move it.
    let name = DisplayName::new(display.clone());
    let shared = name.clone();
    let reported = name.clone();
    let background = args.background;
    let (desktop, desktop_thread) = desktop::spawn(Box::new(move || {
        let d = X11Driver::connect(Some(&shared.get()))?;
        if let Some(rgb) = background
            && let Err(e) = d.set_background(rgb)
        {
            // The desktop works without it.
            tracing::warn!(error = %e, "could not paint the background");
        }
        Ok(Box::new(d) as Box<dyn Driver>)
    }));
    let monitor_stop = Arc::new(AtomicBool::new(false));
    supervise::spawn_monitor(name.clone(), Arc::clone(&health), Arc::clone(&monitor_stop));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let supervisor = Supervisor {
        config,
        display: name,
        xvfb,
        wm,
        health: Arc::clone(&health),
        desktop: desktop.clone(),
    };
    let supervisor = tokio::spawn(supervisor.run(stop_rx));

    if let Some(spec) = args.egress_relay.clone() {
        tokio::spawn(async move {
            if let Err(e) = sandtopd::relay::run(spec).await {
                tracing::error!(error = %e, "the egress relay stopped");
            }
        });
    }

    // 3. The API.
    let browser = args
        .browser
        .clone()
        .map(|program| sandtopd::browser::BrowserConfig {
            program,
            display: display.clone(),
            xauth: config_xauth.clone(),
            profile_parent: args
                .browser_profiles
                .clone()
                .unwrap_or_else(std::env::temp_dir),
            start_timeout: std::time::Duration::from_secs(60),
            clock: clock.clone(),
        });
    let mut state = ApiState::with_token_slot(desktop.clone(), token, Arc::clone(&health))
        .with_browser(sandtopd::browser::BrowserService::new(browser))
        .with_x_display(reported);
    if let Some(root) = &args.files_root {
        state = state.with_files_root(root.clone());
    }
    if let Some(c) = clock {
        state = state.with_clock(c);
    }
    let state = Arc::new(state);
    let mut listeners = vec![api::server::bind_unix(&args.socket).await?];
    if let Some(addr) = args.tcp {
        listeners.push(api::server::bind_tcp(addr).await?);
    }
    let x_display = display.clone();
    for l in &listeners {
        tracing::info!(listen = %l.describe(), x_display = %x_display, "sandtopd is serving");
    }
    let router = api::router(Arc::clone(&state));
    // On SIGTERM or SIGINT: draining, then closed (see api::server).
    api::server::serve_draining(
        router,
        listeners,
        Arc::clone(&state.lifecycle),
        async move {
            wait_for_signal().await;
            tracing::info!("shutting down: no new work, draining the work in flight");
        },
    )
    .await;
    tracing::info!("closed: stopping the browser and the display");

    // 4. Stop in order: the browser, input released by the desktop task,
    //    then the display's children.
    state.browser.stop().await;
    let _ = desktop.send(Job::Stop);
    let _ = tokio::task::spawn_blocking(move || desktop_thread.join()).await;
    monitor_stop.store(true, Ordering::Release);
    let _ = stop_tx.send(true);
    let _ = supervisor.await;
    let _ = std::fs::remove_file(&args.socket);
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn health(socket: PathBuf) -> anyhow::Result<ExitCode> {
    let mut c = sandtop_client::Client::connect(&socket, None).await?;
    let (status, body) = c
        .request(http::Method::GET, paths::HEALTH, None)
        .await
        .context("asking for health")?;
    println!("{}", String::from_utf8_lossy(&body));
    let ok = status.is_success()
        && serde_json::from_slice::<sandtop_protocol::Health>(&body)
            .is_ok_and(|h| h.status == sandtop_protocol::HealthStatus::Ok);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn connect(socket: PathBuf) -> anyhow::Result<ExitCode> {
    let stream = tokio::net::UnixStream::connect(&socket)
        .await
        .with_context(|| format!("connecting to {}", socket.display()))?;
    let (mut rd, mut wr) = stream.into_split();
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let up = async {
        let r = tokio::io::copy(&mut stdin, &mut wr).await;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut wr).await;
        r
    };
    let down = async {
        let r = tokio::io::copy(&mut rd, &mut stdout).await;
        let _ = tokio::io::AsyncWriteExt::flush(&mut stdout).await;
        r
    };
    // The relay ends when the daemon closes its side.
    let (_, down) = tokio::join!(up, down);
    down.context("relaying from the daemon")?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_rgb;

    #[test]
    fn a_background_is_six_hex_digits() {
        assert_eq!(parse_rgb("3b4252"), Ok(0x3b4252));
        assert_eq!(parse_rgb("#FFFFFF"), Ok(0xffffff));
        for bad in ["", "fff", "3b42521", "3b425g", "+3b425", "0x3b42"] {
            assert!(parse_rgb(bad).is_err(), "{bad}");
        }
    }
}
