//! A live view of a guest in the operator's browser, with a running
//! `host-cli run`'s state, its questions answered by buttons, and the
//! operator's takeover (`host-cli view [SESSION]` is its command).
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
mod error;
pub mod frames;
pub mod hub;
pub mod run_link;
pub mod server;

pub use error::Error;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use sandtop_guest::session::Store;

/// What a view serves: whose screen, where, and what it lets the page do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The session to watch (`None`: the only running one).
    pub session: Option<String>,
    /// The port on 127.0.0.1 (`None`: a free one).
    pub port: Option<u16>,
    /// The link shows the screen and the run's state, with no controls.
    pub view_only: bool,
    /// Frames scaled down to at most this width (the snapshot stays at
    /// full resolution).
    pub max_width: Option<u32>,
}

/// Serves the view of `a.session` on 127.0.0.1 until Ctrl-C (printing its
/// one-time link).
pub async fn serve(a: Options) -> Result<(), Error> {
    let store = Store::open()?;
    let (dir, rec) = sandtop_guest::resolve_session(&store, a.session.as_deref()).await?;
    let name = dir.name.clone();
    // A run that starts while this view is up waits a moment for it to
    // connect, so its first question reaches the page.
    let _present = sandtop_control::served::hold_view_lock(&dir.path)?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, a.port.unwrap_or(0))))
            .await
            .map_err(|source| Error::Io {
                doing: format!("listening on 127.0.0.1:{}", a.port.unwrap_or(0)),
                source,
            })?;
    let addr = listener.local_addr().map_err(|source| Error::Io {
        doing: "reading the view's address".into(),
        source,
    })?;
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
                sandtop_guest::open_channel(&dir, &rec)
                    .await
                    .map_err(Error::from)
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
                bytes.ok_or(Error::NoImage)
            })
        }
    };
    let state = Arc::new(server::ViewState {
        auth,
        hub,
        snapshot: Box::new(snapshot),
    });
    sandtop_hostkit::out!(
        "Watching session {name}{}: open {}",
        if a.view_only { " (view only)" } else { "" },
        state.auth.link()
    );
    sandtop_hostkit::out!("The link works once; keep it to yourself. Ctrl-C stops the view.");
    let app = server::router(Arc::clone(&state));
    match sandtop_hostkit::signals::until_interrupted(axum::serve(listener, app).into_future())
        .await
    {
        Ok(r) => r.map_err(|source| Error::Io {
            doing: "serving the view".into(),
            source,
        })?,
        Err(_signal) => {}
    }
    Ok(())
}
