//! The browser driver: a Firefox this daemon started itself, driven over
//! WebDriver BiDi.
//!
//! - [`launch`] starts Firefox with a fresh private profile (a 0700
//!   directory, removed when the browser goes), on this daemon's display,
//!   with the Remote Agent on a port Firefox picks on 127.0.0.1 and writes
//!   into that profile (`WebDriverBiDiServer.json`). A browser the daemon
//!   did not start is never attached to: the port comes from our own
//!   profile, and Firefox accepts one BiDi session, which we hold.
//! - [`bidi`] is the WebSocket client; `page.js` is the agent evaluated in
//!   a BiDi sandbox realm of each document (reads, refs, element geometry),
//!   run by `context` (which also lists the tabs); `members` carries out
//!   each member with them; `keys` maps key names; `policy` checks the
//!   host's URL policy in the document a call acts on.
//! - [`BrowserService`] starts the browser on first use, restarts it when
//!   it died, and runs one call at a time (the API also holds the input
//!   gate, so a browser call and a computer action never interleave).
//!   Tests put a [`Backend`] of their own in Firefox's place, so the
//!   host's toolset and loop run through the real API against a fake.

mod act;
pub mod bidi;
mod context;
mod diagnostics;
mod files;
mod keys;
mod members;
mod pointer;
mod policy;
mod sign_in;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandtop_protocol::{BrowserCall, BrowserReply, BrowserRequest, ErrorBody, ErrorCode};

use bidi::{Bidi, BidiError};

/// How the daemon starts its browser.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// The Firefox binary (`firefox-esr` in the guest image).
    pub program: PathBuf,
    /// The X display Firefox opens its window on.
    pub display: String,
    /// The display's authority file, when it has one.
    pub xauth: Option<PathBuf>,
    /// Where the private profiles are made (a tmpfs in the guest).
    pub profile_parent: PathBuf,
    /// Longest wait for Firefox to come up.
    pub start_timeout: Duration,
    /// Firefox reads this fake clock (`--fake-clock`).
    pub clock: Option<crate::clock::FakeClock>,
}

/// A running browser: the process, its profile and the BiDi session.
#[derive(Debug)]
pub struct Browser {
    child: tokio::process::Child,
    profile: Profile,
    bidi: Bidi,
}

/// A private profile directory, removed on drop.
#[derive(Debug)]
struct Profile(PathBuf);

impl Drop for Profile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Browser {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None)) && self.bidi.is_open()
    }

    /// The BiDi session.
    pub fn bidi(&self) -> &Bidi {
        &self.bidi
    }

    /// The profile directory (for tests).
    pub fn profile(&self) -> &Path {
        &self.profile.0
    }
}

/// Firefox preferences of the private profile: a quiet, blank start.
const USER_JS: &str = r#"user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.page", 0);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("browser.aboutwelcome.enabled", false);
user_pref("browser.tabs.warnOnClose", false);
user_pref("browser.tabs.warnOnCloseOtherTabs", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("browser.sessionstore.resume_from_crash", false);
user_pref("app.update.auto", false);
user_pref("dom.disable_open_during_load", true);
"#;

/// Starts Firefox and connects to it.
pub async fn launch(config: &BrowserConfig) -> Result<Browser, ErrorBody> {
    let unavailable = |what: String| ErrorBody::new(ErrorCode::BrowserUnavailable, what);
    let profile = make_profile(&config.profile_parent)
        .map_err(|e| unavailable(format!("cannot create the browser profile: {e}")))?;
    let prefs = format!("{USER_JS}{}", files::download_prefs(&profile.0));
    std::fs::write(profile.0.join("user.js"), prefs)
        .map_err(|e| unavailable(format!("cannot write the browser profile: {e}")))?;
    files::make_download_dir(&profile.0)
        .map_err(|e| unavailable(format!("cannot create the download folder: {e}")))?;
    let mut cmd = tokio::process::Command::new(&config.program);
    cmd.arg("--new-instance")
        .arg("--profile")
        .arg(&profile.0)
        .args(["--remote-debugging-port", "0", "about:blank"])
        .env("DISPLAY", &config.display)
        .env("MOZ_CRASHREPORTER_DISABLE", "1")
        .env_remove("MOZ_REMOTE_SETTINGS_DEVTOOLS")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    match &config.xauth {
        Some(x) => cmd.env("XAUTHORITY", x),
        None => cmd.env_remove("XAUTHORITY"),
    };
    if let Some(c) = &config.clock {
        cmd.envs(c.env());
    }
    let mut child = cmd.spawn().map_err(|e| {
        unavailable(format!(
            "cannot start {}: {e}",
            config
                .program
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        ))
    })?;
    let port_file = profile.0.join("WebDriverBiDiServer.json");
    let end = Instant::now() + config.start_timeout;
    let port = loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(unavailable(format!(
                "the browser exited at start ({status})"
            )));
        }
        if let Some(port) = read_port(&port_file) {
            break port;
        }
        if Instant::now() >= end {
            return Err(unavailable(format!(
                "the browser did not open its remote port within {} s",
                config.start_timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let bidi = Bidi::connect(port)
        .await
        .map_err(|e| unavailable(format!("cannot open a session with the browser: {e}")))?;
    tracing::info!(port, "browser started");
    Ok(Browser {
        child,
        profile,
        bidi,
    })
}

fn make_profile(parent: &Path) -> std::io::Result<Profile> {
    use std::os::unix::fs::DirBuilderExt as _;
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let dir = parent.join(format!("sandtop-browser-{name}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(Profile(dir))
}

fn read_port(path: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    if v.get("ws_host")?.as_str()? != "127.0.0.1" {
        return None;
    }
    u16::try_from(v.get("ws_port")?.as_u64()?).ok()
}

/// Spawns [`BrowserService::release_input`] when dropped armed.
struct ReleaseOnDrop(Option<std::sync::Arc<BrowserService>>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(svc) = self.0.take() {
            tracing::info!("a browser call was dropped midway; releasing its input");
            // Whichever comes first, this task or the next call, releases.
            svc.release_pending
                .store(true, std::sync::atomic::Ordering::Release);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { svc.release_input().await });
            }
        }
    }
}

/// `input.releaseActions` on every tab.
async fn release_all(bidi: &Bidi) {
    let Ok(tabs) = context::contexts(bidi).await else {
        return;
    };
    for (ctx, _) in tabs {
        act::release(bidi, &ctx).await;
    }
}

/// A future of the [`Backend`] trait.
pub type BackendFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, ErrorBody>> + Send + 'a>>;

/// What stands in for Firefox in tests: carries out checked calls and
/// reports the tabs, as the real driver does.
pub trait Backend: Send + Sync + std::fmt::Debug {
    fn call<'a>(&'a self, call: &'a BrowserCall) -> BackendFuture<'a, BrowserReply>;
    /// A call with the host's requirements (its URL policy); a backend
    /// that checks none carries out the call alone.
    fn request<'a>(&'a self, request: &'a BrowserRequest) -> BackendFuture<'a, BrowserReply> {
        self.call(&request.call)
    }
    fn state(&self) -> BackendFuture<'_, sandtop_protocol::BrowserState>;
}

/// The daemon's browser: started on first use, one call at a time.
#[derive(Debug)]
pub struct BrowserService {
    config: Option<BrowserConfig>,
    browser: tokio::sync::Mutex<Option<Browser>>,
    backend: Option<std::sync::Arc<dyn Backend>>,
    /// A call was dropped midway: its input is released before anything
    /// else runs on the browser.
    release_pending: std::sync::atomic::AtomicBool,
}

impl BrowserService {
    /// `None`: this daemon has no browser; every call says so.
    pub fn new(config: Option<BrowserConfig>) -> BrowserService {
        BrowserService {
            config,
            browser: tokio::sync::Mutex::new(None),
            backend: None,
            release_pending: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A service whose calls go to `backend` instead of a Firefox (tests).
    pub fn with_backend(backend: std::sync::Arc<dyn Backend>) -> BrowserService {
        BrowserService {
            config: None,
            browser: tokio::sync::Mutex::new(None),
            backend: Some(backend),
            release_pending: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a browser can be used at all.
    pub fn configured(&self) -> bool {
        self.config.is_some() || self.backend.is_some()
    }

    /// Carries out one call and reads the state after it (also after a
    /// failed call: the error then carries no state, and the host reads it
    /// with [`BrowserService::state`]); a state-changing member only on
    /// documents of the request's URL policy, when it has one.
    /// The call's arguments were checked by the API (`BrowserRequest::check`).
    pub async fn call(&self, request: &BrowserRequest) -> Result<BrowserReply, ErrorBody> {
        if let Some(b) = &self.backend {
            return b.request(request).await;
        }
        let call = &request.call;
        let policy = policy::Policy {
            origins: request.url_policy.as_deref(),
            expect: request.expect.as_ref(),
            page: request.expect_page.as_ref(),
        };
        let started = Instant::now();
        let mut guard = self.ready().await?;
        let browser = guard.as_mut().ok_or_else(internal)?;
        if self
            .release_pending
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            release_all(&browser.bidi).await;
        }
        // The tab the call was approved on (docs/contract.md rule 28b): a `tab_id:
        // null` call acts only while that tab is still the active one.
        let outcome = match policy.check_tab(&browser.bidi, call.tab_id()).await {
            Err(e) => Err(e),
            Ok(()) => match call {
                BrowserCall::SetFile { .. }
                | BrowserCall::TakeDownload {}
                | BrowserCall::RemoveDownload { .. } => {
                    files::run(&browser.bidi, &browser.profile.0, call, policy).await
                }
                _ => members::run(&browser.bidi, call, policy).await,
            },
        };
        let outcome = match outcome {
            Err(e) if e.code == ErrorCode::BrowserUnavailable => {
                *guard = None;
                return Err(e);
            }
            other => other?,
        };
        let state = context::state(&browser.bidi).await?;
        Ok(BrowserReply {
            outcome,
            state,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Carries out one call on a shared service; if the call is dropped
    /// midway (the client went away, the deadline passed), whatever input
    /// it held (keys, buttons) is released at once by a task of its own,
    /// and in any case before the next call runs on the browser.
    pub async fn call_released(
        self: std::sync::Arc<Self>,
        request: BrowserRequest,
    ) -> Result<BrowserReply, ErrorBody> {
        let mut guard = ReleaseOnDrop(Some(std::sync::Arc::clone(&self)));
        let r = self.call(&request).await;
        guard.0 = None;
        r
    }

    /// Releases every input source of every tab (BiDi `releaseActions`):
    /// keys up, buttons up, in reverse order of pressing; unless a call
    /// already did it.
    pub async fn release_input(&self) {
        let guard = self.browser.lock().await;
        if !self
            .release_pending
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        if let Some(browser) = guard.as_ref() {
            release_all(&browser.bidi).await;
        }
    }

    /// The tabs, read now.
    pub async fn state(&self) -> Result<sandtop_protocol::BrowserState, ErrorBody> {
        if let Some(b) = &self.backend {
            return b.state().await;
        }
        let mut guard = self.ready().await?;
        let browser = guard.as_mut().ok_or_else(internal)?;
        match context::state(&browser.bidi).await {
            // Gone between the liveness check and the read (killed, crashed:
            // its connection not seen closed yet): a read is safe to try
            // again, on a new browser.
            Err(e) if e.code == ErrorCode::BrowserUnavailable => {
                tracing::warn!("the browser went away; starting a new one");
                *guard = None;
                drop(guard);
                let mut guard = self.ready().await?;
                let browser = guard.as_mut().ok_or_else(internal)?;
                context::state(&browser.bidi).await
            }
            other => other,
        }
    }

    /// Stops the browser (daemon shutdown).
    pub async fn stop(&self) {
        if let Some(mut b) = self.browser.lock().await.take() {
            let _ = b.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), b.child.wait()).await;
        }
    }

    async fn ready(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Browser>>, ErrorBody> {
        let Some(config) = &self.config else {
            return Err(ErrorBody::new(
                ErrorCode::BrowserUnavailable,
                "this daemon was started without a browser (--browser)",
            ));
        };
        let mut guard = self.browser.lock().await;
        if let Some(b) = guard.as_mut()
            && !b.alive()
        {
            tracing::warn!("the browser is gone; starting a new one");
            *guard = None;
        }
        if guard.is_none() {
            *guard = Some(launch(config).await?);
        }
        Ok(guard)
    }
}

fn internal() -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, "the browser slot is empty")
}

/// A BiDi failure as an error body. Browser messages are not copied (they
/// may quote the page); the BiDi error code is a fixed vocabulary.
pub(crate) fn bidi_error(e: BidiError) -> ErrorBody {
    match e {
        BidiError::Command { error, .. } if error == "no such frame" => {
            ErrorBody::new(ErrorCode::NoSuchTab, "no open tab has this id")
        }
        BidiError::Command { error, .. } => ErrorBody::new(
            ErrorCode::BrowserFailed,
            format!(
                "the browser refused the command ({})",
                error
                    .chars()
                    .filter(|c| c.is_ascii_alphabetic() || *c == ' ')
                    .take(40)
                    .collect::<String>()
            ),
        ),
        BidiError::Timeout(d) => ErrorBody::new(
            ErrorCode::Timeout,
            format!("the browser did not answer within {} ms", d.as_millis()),
        ),
        BidiError::Closed | BidiError::Connect(_) => {
            ErrorBody::new(ErrorCode::BrowserUnavailable, "the browser went away")
        }
    }
}
