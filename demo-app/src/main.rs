//! `sandtop-demo` binary: parses the command line, refuses non-loopback
//! addresses, opens the submissions store and the sign-in record, and serves
//! the form and the sign-in pages until SIGTERM or Ctrl-C.
//! See the library crate (`src/lib.rs`) for the request flow.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use sandtop_demo::{SignIn, Store, check_listen_addr, router};

/// The small web form of Sandtop's offline exercise (loopback only).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on; must be loopback (127.0.0.0/8 or [::1]).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// JSON-lines file the submissions are appended to (parent created).
    #[arg(long, default_value = "/home/user/demo/submissions.jsonl")]
    store: PathBuf,
    /// JSON file of the accounts that may sign in: an array of
    /// {"email","password","code"} objects. Read at every sign-in attempt,
    /// so it may be written after the start; absent means no accounts.
    #[arg(long, default_value = "/home/user/demo/accounts.json")]
    accounts: PathBuf,
    /// JSON-lines file the sign-in events are appended to (parent created).
    #[arg(long, default_value = "/home/user/demo/sign-ins.jsonl")]
    sign_ins: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // `SANDTOP_DEMO_LOG` as `target=level` directives; unset or unreadable: info.
    let filter = std::env::var("SANDTOP_DEMO_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(filter)
        .init();
    let args = Args::parse();
    check_listen_addr(args.listen)?;
    let store = Arc::new(Store::open(&args.store)?);
    let sign_in = Arc::new(SignIn::open(&args.accounts, &args.sign_ins)?);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        store = %store.path().display(),
        accounts = %sign_in.accounts_path().display(),
        sign_ins = %sign_in.record().path().display(),
        "sandtop-demo ready"
    );
    axum::serve(listener, router(store, sign_in))
        .with_graceful_shutdown(shutdown())
        .await
        .context("serving")?;
    tracing::info!("sandtop-demo stopped");
    Ok(())
}

async fn shutdown() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(err) => {
                tracing::warn!("cannot watch SIGTERM: {err}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
