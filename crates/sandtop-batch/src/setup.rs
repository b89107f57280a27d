//! Running a task's setup steps on its guest, before the model's first
//! turn.
//!
//! The browser steps go through the daemon's browser driver on the
//! channel (`navigate`, `new_tab`). The daemon has no call to write a
//! file, start a program or list windows, so those go through the Docker
//! engine's exec API, as the browser exercise provisions its account:
//! argv lists only, never a shell, nothing from a model (a setup step is
//! the task file's, read before the run). So setup steps other than the
//! browser's need a Docker guest.
//!
//! `wait_window` lists the window manager's clients (`_NET_CLIENT_LIST`,
//! each one's `_NET_WM_NAME` or `WM_NAME`) with a fixed X11 client of ~30
//! lines run by the guest's python3 ([`LIST_WINDOWS`]): the image carries
//! no xprop or wmctrl.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use sandtop_channel::{Channel, ChannelError};
use sandtop_guest::docker::DockerBackend;
use sandtop_protocol::{BrowserCall, ErrorCode};

use crate::task::{MAX_PUT_BYTES, Setup};

/// The environment a launched program gets besides the image's
/// (`DISPLAY`, `HOME`, `LANG`): what `sandtop-entry` exports to the
/// window manager's children.
pub const LAUNCH_ENV: &[&str] = &[
    "XDG_RUNTIME_DIR=/tmp/runtime-user",
    "DBUS_SESSION_BUS_ADDRESS=unix:path=/tmp/runtime-user/bus",
    "NO_AT_BRIDGE=1",
];

/// The guest's window titles, one a line (see the module docs). Talks
/// the X11 protocol over the display's socket: connection setup, then
/// InternAtom and GetProperty requests, one at a time.
pub const LIST_WINDOWS: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect('/tmp/.X11-unix/X0')
s.sendall(struct.pack('<BxHHHHxx', 0x6c, 11, 0, 0, 0))
def rd(n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit(2)
        b += c
    return b
h = rd(8)
if h[0] != 1:
    sys.exit(3)
d = rd(struct.unpack('<H', h[6:8])[0] * 4)
vl = struct.unpack('<H', d[16:18])[0]
root = struct.unpack('<I', d[32 + ((vl + 3) & ~3) + 8 * d[21]:][:4])[0]
def req(b):
    s.sendall(b)
    r = rd(32)
    if r[0] == 0:
        return None
    return r + rd(struct.unpack('<I', r[4:8])[0] * 4)
def atom(n):
    n = n.encode()
    p = (4 - len(n) % 4) % 4
    r = req(struct.pack('<BBHHxx', 16, 0, 2 + (len(n) + p) // 4, len(n)) + n + b'\0' * p)
    return struct.unpack('<I', r[8:12])[0]
def prop(w, a):
    r = req(struct.pack('<BxHIIIII', 20, 6, w, a, 0, 0, 4096))
    if r is None:
        return b''
    n = struct.unpack('<I', r[16:20])[0]
    return r[32:32 + n * (r[1] // 8)]
ws = prop(root, atom('_NET_CLIENT_LIST'))
name = atom('_NET_WM_NAME')
for i in range(0, len(ws), 4):
    w = struct.unpack('<I', ws[i:i + 4])[0]
    t = prop(w, name) or prop(w, 39)
    print(t.decode('utf-8', 'replace').replace('\n', ' '))
"#;

/// What a task's setup acts on.
pub struct Guest<'a> {
    pub channel: &'a mut Channel,
    /// The Docker engine and the guest's container, for the steps the
    /// daemon has no call for.
    pub docker: Option<(&'a DockerBackend, &'a str)>,
}

impl std::fmt::Debug for Guest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("docker", &self.docker.map(|(_, c)| c))
            .finish_non_exhaustive()
    }
}

impl Guest<'_> {
    fn docker(&self, step: &str) -> anyhow::Result<(&DockerBackend, &str)> {
        self.docker.with_context(|| {
            format!("setup step {step} needs a Docker guest (the daemon has no call for it)")
        })
    }
}

/// Runs the steps in order; the first that fails stops the setup.
pub async fn run(guest: &mut Guest<'_>, steps: &[Setup]) -> anyhow::Result<()> {
    if guest.docker.is_some() {
        desktop_complete(guest).await?;
    }
    for (i, s) in steps.iter().enumerate() {
        step(guest, s)
            .await
            .with_context(|| format!("setup step {}", i + 1))?;
    }
    Ok(())
}

async fn step(guest: &mut Guest<'_>, s: &Setup) -> anyhow::Result<()> {
    match s {
        Setup::OpenUrl(url) => {
            let call = BrowserCall::Navigate {
                tab_id: None,
                url: url.clone(),
            };
            browser(guest.channel, &call)
                .await
                .with_context(|| format!("opening {url} in the browser"))?;
        }
        Setup::NewTab(url) => {
            let call = BrowserCall::NewTab {
                url: Some(url.clone()),
            };
            browser(guest.channel, &call)
                .await
                .with_context(|| format!("opening {url} in a new tab"))?;
        }
        Setup::PutFile { path, text } => put_file(guest, path, text.as_bytes()).await?,
        Setup::Download { url, path } => {
            let bytes = download(url).await?;
            put_file(guest, path, &bytes).await?;
        }
        Setup::Launch(argv) => {
            let (docker, container) = guest.docker("launch")?;
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            docker
                .exec_detached(container, &argv, LAUNCH_ENV)
                .await
                .with_context(|| format!("launching {}", argv[0]))?;
        }
        Setup::WaitWindow { title, timeout_s } => {
            let timeout = Duration::from_secs_f64(timeout_s.unwrap_or(30.0));
            if let Err(titles) =
                until_listed(guest, timeout, |t| t.contains(title.as_str())).await?
            {
                bail!(
                    "no window titled {title:?} within {:.0} s (windows: {titles:?})",
                    timeout.as_secs_f64()
                );
            }
        }
        Setup::Sleep(secs) => tokio::time::sleep(Duration::from_secs_f64(*secs)).await,
    }
    Ok(())
}

/// The guest image's panel (guest-image/tint2), as the window manager
/// lists it.
pub const PANEL_TITLE: &str = "tint2";
/// How long a task waits for the panel before its setup goes on without.
const PANEL_WAIT: Duration = Duration::from_secs(30);

/// Waits until the desktop is whole: its panel listed by the window
/// manager. A guest answers actions before its panel has started (tint2
/// runs at nice 10; ~1-3 s after `guest start` here), and a window
/// launched meanwhile was placed over the panel's place in one run and
/// beside it in another, so a run and its replay began on different
/// screens. A guest whose image has no such panel waits
/// [`PANEL_WAIT`], says so, and goes on.
async fn desktop_complete(guest: &mut Guest<'_>) -> anyhow::Result<()> {
    if until_listed(guest, PANEL_WAIT, |t| t == PANEL_TITLE)
        .await?
        .is_err()
    {
        eprintln!(
            "host-cli: the guest's panel ({PANEL_TITLE}) was not listed within {} s: \
             the task's setup goes on without it",
            PANEL_WAIT.as_secs()
        );
    }
    Ok(())
}

/// Lists the guest's windows until one's title `matches` (`Ok(Ok)`), or
/// `timeout` has passed (`Ok(Err)` with the titles last listed).
async fn until_listed(
    guest: &mut Guest<'_>,
    timeout: Duration,
    matches: impl Fn(&str) -> bool,
) -> anyhow::Result<Result<(), Vec<String>>> {
    let end = Instant::now() + timeout;
    loop {
        let titles = windows(guest).await?;
        if titles.iter().any(|t| matches(t)) {
            return Ok(Ok(()));
        }
        if Instant::now() >= end {
            return Ok(Err(titles));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How often a setup step's browser call is tried when the daemon
/// reports its browser unavailable.
const BROWSER_TRIES: u32 = 3;

/// A browser call of a setup step. When the daemon answers
/// `browser_unavailable` (Firefox did not start: measured with four
/// guests starting Firefox at once on a loaded 2-core host), nothing was
/// done and the next call starts the browser again: tried up to
/// [`BROWSER_TRIES`] times. Any other error is final.
async fn browser(channel: &mut Channel, call: &BrowserCall) -> anyhow::Result<()> {
    let mut n = 1;
    loop {
        match channel.browser_call(call).await {
            Ok(_) => return Ok(()),
            Err(ChannelError::Daemon { body, .. })
                if body.code == ErrorCode::BrowserUnavailable && n < BROWSER_TRIES =>
            {
                tracing::warn!(
                    try_ = n,
                    "setup: the guest's browser was unavailable; trying again"
                );
                n += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The titles of the window manager's windows.
pub async fn windows(guest: &Guest<'_>) -> anyhow::Result<Vec<String>> {
    let (docker, container) = guest.docker("wait_window")?;
    let r = docker
        .exec(
            container,
            &["python3", "-c", LIST_WINDOWS],
            None,
            Duration::from_secs(10),
        )
        .await?;
    if r.exit_code != 0 {
        bail!(
            "listing the guest's windows failed (exit {}): {}",
            r.exit_code,
            String::from_utf8_lossy(&r.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&r.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// Writes `bytes` to `path` in the guest (its folder made first), as the
/// guest user, through exec's standard input.
pub async fn put_file(guest: &Guest<'_>, path: &str, bytes: &[u8]) -> anyhow::Result<()> {
    crate::task::home_path(path).map_err(anyhow::Error::msg)?;
    let (docker, container) = guest.docker("put_file")?;
    let dir = path.rsplit_once('/').map_or("/", |(d, _)| d);
    let r = docker
        .exec(
            container,
            &["mkdir", "-p", "--", dir],
            None,
            Duration::from_secs(10),
        )
        .await?;
    if r.exit_code != 0 {
        bail!("making {dir} in the guest failed (exit {})", r.exit_code);
    }
    let of = format!("of={path}");
    let r = docker
        .exec(
            container,
            &["dd", &of, "status=none"],
            Some(bytes),
            Duration::from_secs(20),
        )
        .await?;
    if r.exit_code != 0 {
        bail!("writing {path} in the guest failed (exit {})", r.exit_code);
    }
    Ok(())
}

/// A file fetched by the host: http(s), at most [`MAX_PUT_BYTES`], no
/// credentials sent.
async fn download(url: &str) -> anyhow::Result<Vec<u8>> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let mut resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("downloading {url}"))?
        .error_for_status()
        .with_context(|| format!("downloading {url}"))?;
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        out.extend_from_slice(&chunk);
        if out.len() > MAX_PUT_BYTES {
            bail!("downloading {url}: more than {MAX_PUT_BYTES} bytes");
        }
    }
    Ok(out)
}
