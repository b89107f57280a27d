//! `host-cli view [SESSION]`: a live view of a guest in the operator's
//! browser, with a running `host-cli run`'s state, its questions answered
//! by buttons, and the operator's takeover.
//!
//! How it fits together:
//! 1. [`auth`]: 127.0.0.1 only, a one-time link, a cookie, the Host and
//!    Origin pinned.
//! 2. [`frames`]: the screen pushed on X damage (the daemon's
//!    `/v1/frame`), JPEG, with the pointer drawn; nothing asked while no
//!    page is open.
//! 3. [`run_link`]: a run's control socket (`control::wire`) relayed both
//!    ways; without a run, the view's own takeover.
//! 4. [`server`]: the page (embedded), the WebSocket, the snapshot.

pub mod auth;
pub mod frames;
pub mod hub;
pub mod run_link;
pub mod server;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;

use crate::session::Store;

/// `host-cli view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The session to watch (default: the only running one).
    pub session: Option<String>,
    /// The port on 127.0.0.1 (default: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// The link shows the screen and the run's state, with no controls.
    #[arg(long)]
    pub view_only: bool,
    /// Scale frames down to at most this width (the snapshot stays at
    /// full resolution).
    #[arg(long, value_parser = clap::value_parser!(u32).range(16..=8192))]
    pub max_width: Option<u32>,
}

pub async fn view(a: ViewArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open()?;
    let (dir, rec) = crate::guest::resolve_session(&store, a.session.as_deref()).await?;
    let name = dir.name.clone();
    // A run that starts while this view is up waits a moment for it to
    // connect, so its first question reaches the page.
    let _present = crate::control::served::hold_view_lock(&dir.path)?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, a.port.unwrap_or(0))))
            .await
            .with_context(|| format!("listening on 127.0.0.1:{}", a.port.unwrap_or(0)))?;
    let addr = listener.local_addr()?;
    let grant = if a.view_only {
        auth::Grant::ViewOnly
    } else {
        auth::Grant::Control
    };
    let auth = auth::Auth::new(addr, grant)?;
    let (hub, commands) = hub::Hub::new(name.clone());
    let hub = Arc::new(hub);

    let opener = {
        let (dir, rec) = (dir.clone(), rec.clone());
        move || {
            let (dir, rec) = (dir.clone(), rec.clone());
            async move {
                crate::guest::open_channel(&dir, &rec)
                    .await
                    .map_err(anyhow::Error::from)
            }
        }
    };
    tokio::spawn(frames::pump(Arc::clone(&hub), a.max_width, opener.clone()));
    tokio::spawn(run_link::link(
        Arc::clone(&hub),
        dir.clone(),
        commands,
        opener.clone(),
    ));
    let snapshot = {
        let opener = opener.clone();
        move || -> server::SnapshotFuture {
            let opener = opener.clone();
            Box::pin(async move {
                use sandtop_protocol::frame::{FrameFormat, FrameRequest};
                let mut ch = opener().await?;
                let req = FrameRequest {
                    after: 0,
                    wait_ms: 0,
                    max_width: None,
                    format: FrameFormat::Png,
                    quality: None,
                };
                let (_, bytes) = ch.frame(&req).await?;
                bytes.context("the daemon sent no image")
            })
        }
    };
    let state = Arc::new(server::ViewState {
        auth,
        hub,
        snapshot: Box::new(snapshot),
    });
    crate::out!(
        "Watching session {name}{}: open {}",
        if a.view_only { " (view only)" } else { "" },
        state.auth.link()
    );
    crate::out!("The link works once; keep it to yourself. Ctrl-C stops the view.");
    let app = server::router(Arc::clone(&state));
    match crate::signals::until_interrupted(axum::serve(listener, app).into_future()).await {
        Ok(r) => r.context("serving the view")?,
        Err(_signal) => {}
    }
    Ok(ExitCode::SUCCESS)
}
