//! The real daemon over the fake driver, for tests (feature
//! `test-support`; never in the binary the guest ships).
//!
//! - [`FakeDesktop`]: the desktop task on [`FakeDriver`]s and the API
//!   state over it, connected: what the api tier drives through the
//!   router, and what the daemons below serve.
//! - [`FakeDaemon`]: a [`FakeDesktop`] served on a Unix socket in a
//!   temporary folder until it is dropped: what the host's loop, report
//!   and channel tests talk to.
//!
//! Every driver the desktop task opens (a fatal driver error makes it
//! reconnect, which opens a fresh fake) is kept in [`FakeDesktop::drivers`],
//! in order, so a test sees exactly what would have reached X.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use sandtop_client::Token;
use sandtop_protocol::Size;

use crate::api::server::{bind_unix, serve};
use crate::api::{ApiState, router};
use crate::driver::Driver;
use crate::driver::fake::{FakeDriver, FakeState};
use crate::supervise::DisplayHealth;

/// One fake driver's record of what it was sent.
pub type FakeLog = Arc<Mutex<FakeState>>;

/// How long the desktop task may take to connect to its first driver.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// The desktop task on fake drivers and the API state over it.
pub struct FakeDesktop {
    pub api: Arc<ApiState>,
    /// Every driver the desktop task opened, in order.
    pub drivers: Arc<Mutex<Vec<FakeLog>>>,
    pub desktop: std::thread::JoinHandle<()>,
}

impl std::fmt::Debug for FakeDesktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDesktop").finish_non_exhaustive()
    }
}

/// What a [`FakeDesktop`] is built with beyond its screen.
pub struct Setup {
    /// The API's token (default: a fresh one).
    pub token: Option<Token>,
    /// Called on each driver before the desktop task takes it (a delay
    /// per primitive, ...).
    pub driver: Box<dyn Fn(&FakeDriver) + Send>,
    /// Called on the API state before it is shared (a browser, the X
    /// display's name, ...).
    pub api: Box<dyn FnOnce(ApiState) -> ApiState>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup").finish_non_exhaustive()
    }
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            token: None,
            driver: Box::new(|_| {}),
            api: Box::new(|api| api),
        }
    }
}

impl FakeDesktop {
    /// A desktop of `screen` on fake drivers, connected (panics when it
    /// does not connect within 5 s).
    pub fn start(screen: Size) -> FakeDesktop {
        FakeDesktop::start_with(screen, Setup::default())
    }

    /// [`FakeDesktop::start`], set up as `setup` says.
    pub fn start_with(screen: Size, setup: Setup) -> FakeDesktop {
        let drivers: Arc<Mutex<Vec<FakeLog>>> = Arc::default();
        let opened = Arc::clone(&drivers);
        let tune_driver = setup.driver;
        let (handle, desktop) = crate::desktop::spawn(Box::new(move || {
            let fake = FakeDriver::new(screen);
            tune_driver(&fake);
            lock(&opened).push(fake.state());
            Ok(Box::new(fake) as Box<dyn Driver>)
        }));
        let display = Arc::new(DisplayHealth::default());
        display.mark_ok();
        let token = match setup.token {
            Some(t) => t,
            None => Token::generate().expect("a random token"),
        };
        let api = Arc::new((setup.api)(ApiState::new(handle, token, display)));
        let end = Instant::now() + CONNECT_LIMIT;
        // The desktop task is a thread of its own: waiting here blocks no
        // runtime it needs.
        while !api.desktop.status.connected.load(Ordering::Acquire) || lock(&drivers).is_empty() {
            assert!(Instant::now() < end, "the desktop task never connected");
            std::thread::sleep(Duration::from_millis(2));
        }
        FakeDesktop {
            api,
            drivers,
            desktop,
        }
    }

    /// The API's token.
    pub fn token(&self) -> &str {
        self.api.token.get().map_or("", Token::expose)
    }
}

/// A [`FakeDesktop`]'s API on a Unix socket, served until dropped.
pub struct FakeDaemon {
    pub desktop: FakeDesktop,
    socket: PathBuf,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for FakeDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDaemon")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl FakeDaemon {
    /// A fake desktop of `screen` served as it is.
    pub async fn start(screen: Size) -> FakeDaemon {
        FakeDaemon::serve(FakeDesktop::start(screen), |r| r).await
    }

    /// Serves `desktop`'s router, passed through `wrap` first (a layer
    /// that records requests, ...), on a new socket.
    pub async fn serve(desktop: FakeDesktop, wrap: impl FnOnce(Router) -> Router) -> FakeDaemon {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let socket = dir.path().join("sandtopd.sock");
        let listener = bind_unix(&socket).await.expect("binding the socket");
        let app = wrap(router(Arc::clone(&desktop.api)));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(app, vec![listener], async {
            let _ = stopped.await;
        }));
        FakeDaemon {
            desktop,
            socket,
            _dir: dir,
            stop: Some(stop),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn token(&self) -> &str {
        self.desktop.token()
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
