//! `sandtopd bench`: our latencies beside the tools the peers shell out
//! to, in one run on the same display.
//!
//! 1. Start a private Xvfb at 1920x1080 and paint a desktop-like scene
//!    (gradients, panels, text-like stripes, a noisy "photo"), so encoders
//!    have real work.
//! 2. Start a real `sandtopd serve` on that display and talk to it over
//!    its Unix socket, exactly as the host does.
//! 3. Measure, each with p50/p95:
//!    - screenshot 1920x1080 -> 1280x720 PNG through the API (request,
//!      capture, scale, encode, base64, JSON, reply) of a screen changed
//!      before each one (a corner repainted, outside the timing), and of
//!      an unchanged screen (answered again, docs/contract.md 3b), vs
//!      `import -window root png:- | base64` and `scrot` + `convert -resize`;
//!    - a click (motion + press + release, then a round trip so the server
//!      has processed it) on the driver vs `xdotool mousemove X Y click 1`;
//!    - 100 typed characters vs `xdotool type` (its default 12 ms delay,
//!      as the peers run it);
//!    - a whole step through the API: click + final screenshot;
//!    - keys after a shortcut (docs/contract.md 2b): `[CTRL+L, type]` with
//!      a window that repaints on the key, with nothing reacting (the
//!      cap), and `[ENTER, type]` (no shortcut, no wait);
//!    - the same screenshot in each format the daemon writes (PNG, JPEG, WebP),
//!      end to end and inside the daemon (its own phase timings);
//!    - the daemon's resident memory idle and after many screenshots.
//!
//! Peer tools that are not installed are reported as skipped, never faked.
//!
//! Layout: no tests: one sequential measurement, `run` taking the steps above
//! in order, and the helpers only it uses (`Reactor`: the window that answers
//! a shortcut). If it grows, the scene (`scene`, `paint`) and the peer tools'
//! timers (`time_cmd`, `time_import`, `time_scrot`) are the parts to move
//! out.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http::Method;
use sandtop_client::{Client, Token};
use sandtop_protocol::{
    Action, BatchRequest, Button, ImageFormat, ScreenshotOptions, Size, session,
};
use serde::Serialize;
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{
    ConnectionExt as _, CreateGCAux, CreateWindowAux, ImageFormat as XImageFormat, WindowClass,
};
use x11rb::rust_connection::RustConnection;

use crate::cancel::Cancel;
use crate::desktop::exec::{self, Input};
use crate::driver::Driver as _;
use crate::driver::x11::X11Driver;
use crate::supervise;

/// Options of `sandtopd bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Iterations of each of our measurements.
    #[arg(long, default_value_t = 200)]
    pub iterations: usize,
    /// Iterations of each peer tool (they are slow).
    #[arg(long, default_value_t = 20)]
    pub peer_iterations: usize,
    /// Screenshots taken before the second memory reading.
    #[arg(long, default_value_t = 10_000)]
    pub memory_shots: usize,
    /// The Xvfb binary.
    #[arg(long, default_value = "Xvfb")]
    pub xvfb_path: PathBuf,
}

/// p50/p95 of one measurement, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    pub name: String,
    pub n: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// One comparison row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub what: String,
    pub ours: Stat,
    pub peer: Option<Stat>,
    /// peer p50 / our p50.
    pub ratio_p50: Option<f64>,
    /// Why the peer was not measured.
    pub peer_skipped: Option<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub display: String,
    pub screen: Size,
    pub rows: Vec<Row>,
    pub extra: Vec<Stat>,
    pub rss_idle_kib: u64,
    pub rss_after_warmup_kib: u64,
    pub rss_after_shots_kib: u64,
    /// Of `rss_after_shots_kib`, shared memory (the MIT-SHM segment).
    pub rss_after_shots_shmem_kib: u64,
    pub memory_shots: usize,
    pub screenshot_png_bytes: usize,
    /// Medians of the daemon's own phase timings for the screenshot row.
    pub screenshot_server_side: ServerSide,
    /// Median time inside the daemon of a screenshot of an unchanged
    /// screen (answered again, `timings.reused`).
    pub unchanged_server_total_ms: f64,
    /// The same screenshot (1920x1080 -> 1280x720, a changed screen) in
    /// each format the daemon writes, PNG included, measured one format
    /// after the other in this run.
    pub formats: Vec<FormatRow>,
}

/// One screenshot format: end to end, inside the daemon, and its size.
#[derive(Debug, Clone, Serialize)]
pub struct FormatRow {
    pub format: ImageFormat,
    pub end_to_end: Stat,
    pub server_side: ServerSide,
    /// The reply (JSON with base64), the last one taken.
    pub reply_bytes: usize,
}

/// Where the daemon spends a screenshot (medians, ms).
#[derive(Debug, Clone, Serialize)]
pub struct ServerSide {
    pub capture_ms: f64,
    pub scale_ms: f64,
    pub encode_ms: f64,
    pub total_ms: f64,
}

fn stat(name: &str, mut samples: Vec<Duration>) -> Stat {
    samples.sort();
    let pick = |q: usize| {
        let i = ((samples.len() * q) / 100).min(samples.len().saturating_sub(1));
        samples
            .get(i)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    Stat {
        name: name.to_string(),
        n: samples.len(),
        p50_ms: pick(50),
        p95_ms: pick(95),
    }
}

fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The resident part that is shared memory: the MIT-SHM capture segment,
/// which the X server maps too.
fn rss_shmem_kib(pid: u32) -> u64 {
    status_kib(pid, "RssShmem:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A desktop-like scene, deterministic: a gradient wallpaper, a window of
/// text (5x7 glyphs from a fixed set, in lines and words, like a page), a
/// "photo" (a smooth colour field with mild noise), and a panel.
fn scene(x: u32, y: u32) -> (u8, u8, u8) {
    let hash = |a: u32, b: u32| {
        let mut h = a.wrapping_mul(2_654_435_761) ^ b.wrapping_mul(40_503);
        h ^= h >> 13;
        h.wrapping_mul(0x5bd1_e995) >> 24
    };
    if (1200..1800).contains(&x) && (150..750).contains(&y) {
        let (fx, fy) = (f64::from(x - 1200) / 600.0, f64::from(y - 150) / 600.0);
        let v = (fx * 9.0).sin() + (fy * 7.0).cos() + ((fx + fy) * 5.0).sin();
        let n = (hash(x, y) % 7) as f64 - 3.0;
        let c = |k: f64| ((v * 40.0 + k + n).clamp(0.0, 255.0)) as u8;
        return (c(120.0), c(100.0), c(80.0));
    }
    if (100..1100).contains(&x) && (100..900).contains(&y) {
        let (cx, cy) = ((x - 100) / 8, (y - 100) / 16);
        let (gx, gy) = ((x - 100) % 8, (y - 100) % 16);
        // Words of 3-9 glyphs separated by spaces, ragged line ends.
        let in_word = (cx + cy * 7) % 11 < 3 + hash(cy, 1) % 7;
        let line_len = 60 + hash(cy, 2) % 60;
        if in_word && cx < line_len && gx < 5 && (4..11).contains(&gy) {
            let glyph = hash(cx, cy) % 40;
            let bit = (gy - 4) * 5 + gx;
            if (hash(glyph, 97) >> (bit % 24)) & 1 == 1 || bit % 7 == 0 {
                return (25, 25, 30);
            }
        }
        return (250, 250, 250);
    }
    if y > 1040 {
        return (45, 45, 60);
    }
    let v = (y * 120 / 1080) as u8;
    (40 + v, 70 + v, 120 + v / 2)
}

/// The painted scene's window, kept to change a corner of it between
/// screenshots (an unchanged screen is answered from the last screenshot,
/// docs/contract.md 3b; the bench measures both).
struct Scene {
    conn: RustConnection,
    win: u32,
    gc: u32,
    changes: u32,
}

impl Scene {
    /// Repaints a 24x24 square in a new colour and waits until the X
    /// server has drawn it (outside any timed region).
    fn change(&mut self) -> anyhow::Result<()> {
        self.changes = self.changes.wrapping_add(1);
        let colour = self.changes.wrapping_mul(0x9e_37_79) & 0xff_ffff;
        self.conn.change_gc(
            self.gc,
            &x11rb::protocol::xproto::ChangeGCAux::new().foreground(colour),
        )?;
        let r = x11rb::protocol::xproto::Rectangle {
            x: 8,
            y: 8,
            width: 24,
            height: 24,
        };
        self.conn.poly_fill_rectangle(self.win, self.gc, &[r])?;
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }
}

fn paint(display: &str, size: Size) -> anyhow::Result<Scene> {
    let (conn, screen_num) = RustConnection::connect(Some(display))?;
    let root = conn.setup().roots[screen_num].root;
    let win = conn.generate_id()?;
    conn.create_window(
        24,
        win,
        root,
        0,
        0,
        size.width as u16,
        size.height as u16,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new()
            .override_redirect(1)
            .background_pixel(0),
    )?;
    conn.map_window(win)?;
    let gc = conn.generate_id()?;
    conn.create_gc(gc, win, &CreateGCAux::new())?;
    let rows = 32;
    for y0 in (0..size.height).step_by(rows as usize) {
        let n = rows.min(size.height - y0);
        let mut data = Vec::with_capacity((size.width * n * 4) as usize);
        for y in y0..y0 + n {
            for x in 0..size.width {
                let (r, g, b) = scene(x, y);
                data.extend_from_slice(&[b, g, r, 0]);
            }
        }
        conn.put_image(
            XImageFormat::Z_PIXMAP,
            win,
            gc,
            size.width as u16,
            n as u16,
            0,
            y0 as i16,
            0,
            24,
            &data,
        )?;
    }
    conn.get_input_focus()?.reply()?;
    Ok(Scene {
        conn,
        win,
        gc,
        changes: 0,
    })
}

/// A focused window that repaints itself on every key press, like a
/// program answering a shortcut; paused, it ignores keys.
struct Reactor {
    conn: RustConnection,
    win: u32,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The client message that pauses (1) or resumes (0) the reactor, or
/// stops it (2).
const REACTOR_CTL: u32 = 0x5245_4143; // "REAC"

impl Reactor {
    fn start(display: &str) -> anyhow::Result<Reactor> {
        let (tx, rx) = std::sync::mpsc::channel();
        let d = display.to_string();
        let thread = std::thread::spawn(move || {
            if let Err(e) = react_loop(&d, &tx) {
                tracing::warn!(error = %e, "bench: the reacting window stopped");
            }
        });
        let win = rx
            .recv_timeout(Duration::from_secs(10))
            .context("the reacting window did not start")?;
        let (conn, _) = RustConnection::connect(Some(display))?;
        Ok(Reactor {
            conn,
            win,
            thread: Some(thread),
        })
    }

    fn send(&self, what: u32) -> anyhow::Result<()> {
        use x11rb::protocol::xproto::{ClientMessageEvent, EventMask};
        let ev = ClientMessageEvent::new(32, self.win, x11rb::NONE, [REACTOR_CTL, what, 0, 0, 0]);
        self.conn
            .send_event(false, self.win, EventMask::NO_EVENT, ev)?;
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    fn pause(&self, on: bool) -> anyhow::Result<()> {
        self.send(u32::from(on))
    }
}

impl Drop for Reactor {
    fn drop(&mut self) {
        let _ = self.send(2);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reactor's window, focused, repainted on each key press; control
/// messages (sent to its creator: this connection) pause or stop it.
fn react_loop(display: &str, ready: &std::sync::mpsc::Sender<u32>) -> anyhow::Result<()> {
    use x11rb::protocol::Event;
    use x11rb::protocol::xproto::{ChangeGCAux, EventMask, InputFocus, Rectangle};
    let (conn, screen_num) = RustConnection::connect(Some(display))?;
    let root = conn.setup().roots[screen_num].root;
    let win = conn.generate_id()?;
    conn.create_window(
        24,
        win,
        root,
        1300,
        100,
        400,
        200,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new()
            .override_redirect(1)
            .background_pixel(0x0020_4060)
            .event_mask(EventMask::KEY_PRESS),
    )?;
    conn.map_window(win)?;
    conn.set_input_focus(InputFocus::POINTER_ROOT, win, x11rb::CURRENT_TIME)?;
    let gc = conn.generate_id()?;
    conn.create_gc(gc, win, &CreateGCAux::new())?;
    conn.get_input_focus()?.reply()?;
    let _ = ready.send(win);
    let mut paused = false;
    let mut colour = 0u32;
    loop {
        match conn.wait_for_event()? {
            Event::KeyPress(_) if !paused => {
                colour ^= 0x00ff_ff00;
                conn.change_gc(gc, &ChangeGCAux::new().foreground(colour))?;
                let all = Rectangle {
                    x: 0,
                    y: 0,
                    width: 400,
                    height: 200,
                };
                conn.poly_fill_rectangle(win, gc, &[all])?;
                conn.flush()?;
            }
            Event::ClientMessage(c) if c.data.as_data32()[0] == REACTOR_CTL => {
                match c.data.as_data32()[1] {
                    2 => return Ok(()),
                    p => paused = p == 1,
                }
            }
            _ => {}
        }
    }
}

async fn time_cmd(argv: &[&str], display: &str, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = tokio::process::Command::new(argv[0])
            .args(&argv[1..])
            .env("DISPLAY", display)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .with_context(|| format!("running {}", argv[0]))?;
        if !status.success() {
            bail!("{} failed: {status}", argv.join(" "));
        }
        out.push(t.elapsed());
    }
    Ok(out)
}

/// `import -window root png:- | base64`, as two processes joined by a pipe.
async fn time_import(display: &str, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut import = std::process::Command::new("import")
            .args(["-window", "root", "png:-"])
            .env("DISPLAY", display)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("running import")?;
        let pipe = import.stdout.take().context("import stdout")?;
        let b64 = std::process::Command::new("base64")
            .stdin(Stdio::from(pipe))
            .stdout(Stdio::null())
            .status()
            .context("running base64")?;
        let st = import.wait()?;
        if !st.success() || !b64.success() {
            bail!("import | base64 failed");
        }
        out.push(t.elapsed());
    }
    Ok(out)
}

async fn time_scrot(display: &str, dir: &Path, n: usize) -> anyhow::Result<Vec<Duration>> {
    let shot = dir.join("scrot.png");
    let small = dir.join("small.png");
    let (s, m) = (
        shot.to_string_lossy().to_string(),
        small.to_string_lossy().to_string(),
    );
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        time_cmd(&["scrot", "-o", &s], display, 1).await?;
        time_cmd(&["convert", &s, "-resize", "1280x720", &m], display, 1).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

fn row(what: &str, ours: Stat, peer: anyhow::Result<Option<Stat>>, tool: &str) -> Row {
    let (peer, skipped) = match peer {
        Ok(Some(p)) => (Some(p), None),
        Ok(None) => (None, Some(format!("{tool} is not installed"))),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let ratio = peer.as_ref().map(|p| p.p50_ms / ours.p50_ms);
    Row {
        what: what.to_string(),
        ours,
        peer,
        ratio_p50: ratio,
        peer_skipped: skipped,
    }
}

/// One screenshot through the API; the reply is received in full.
async fn api_screenshot(
    client: &mut Client,
    body: &[u8],
) -> anyhow::Result<(http::StatusCode, bytes::Bytes)> {
    let (status, reply) = client
        .request(Method::POST, "/v1/screenshot", Some(body.to_vec()))
        .await?;
    Ok((status, reply))
}

/// Parses what [`api_screenshot`] received (outside the timed region).
fn screenshot_timings(
    (status, reply): (http::StatusCode, bytes::Bytes),
) -> anyhow::Result<(usize, sandtop_protocol::Timings)> {
    if !status.is_success() {
        bail!(
            "screenshot failed: {status} {}",
            String::from_utf8_lossy(&reply)
        );
    }
    let parsed: sandtop_protocol::ScreenshotResponse = serde_json::from_slice(&reply)?;
    Ok((reply.len(), parsed.timings))
}

/// Every screenshot format the daemon writes, in the bench's order.
const BENCH_FORMATS: [ImageFormat; 3] = [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::Webp];

/// `n` screenshots of a changed screen in `format` (after a few not
/// timed, so its buffers are warm).
async fn time_format(
    client: &mut Client,
    scene: &mut Scene,
    opts: ScreenshotOptions,
    format: ImageFormat,
    n: usize,
) -> anyhow::Result<FormatRow> {
    eprintln!("bench: screenshots as {format:?}");
    let body = serde_json::to_vec(&ScreenshotOptions { format, ..opts })?;
    let mut reply_bytes = 0;
    for _ in 0..5 {
        scene.change()?;
        reply_bytes = screenshot_timings(api_screenshot(client, &body).await?)?.0;
    }
    let mut shots = Vec::with_capacity(n);
    let mut phases: [Vec<f64>; 4] = Default::default();
    for _ in 0..n {
        scene.change()?;
        let t = Instant::now();
        let reply = api_screenshot(client, &body).await?;
        shots.push(t.elapsed());
        let (bytes, timings) = screenshot_timings(reply)?;
        if timings.reused {
            bail!("a screenshot of a changed screen was reused");
        }
        reply_bytes = bytes;
        phases[0].push(timings.capture_ms);
        phases[1].push(timings.scale_ms);
        phases[2].push(timings.encode_ms);
        phases[3].push(timings.total_ms);
    }
    let [capture_ms, scale_ms, encode_ms, total_ms] = phases.map(median);
    Ok(FormatRow {
        format,
        end_to_end: stat(
            &format!(
                "sandtopd /v1/screenshot 1920x1080 -> 1280x720 {} (end to end)",
                format.extension()
            ),
            shots,
        ),
        server_side: ServerSide {
            capture_ms,
            scale_ms,
            encode_ms,
            total_ms,
        },
        reply_bytes,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the benchmark and prints the report.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let screen = Size::new(1920, 1080);
    let n = args.iterations.max(5);
    let pn = args.peer_iterations.max(3);
    eprintln!("bench: starting Xvfb {screen}");
    let (mut xvfb, display) = supervise::start_xvfb(&args.xvfb_path, None, screen, None)
        .await
        .context("starting Xvfb (install it with `make deps`)")?;
    let mut scene = paint(&display, screen).context("painting the scene")?;

    let dir = tempfile_dir()?;
    let socket = dir.join(session::SOCKET_NAME);
    let token_file = dir.join(session::TOKEN_NAME);
    let mut daemon = tokio::process::Command::new(std::env::current_exe()?)
        .args(["serve", "--display", &display])
        .arg("--socket")
        .arg(&socket)
        .arg("--token-file")
        .arg(&token_file)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the daemon")?;
    let pid = daemon.id().context("daemon pid")?;
    let end = Instant::now() + Duration::from_secs(10);
    while !socket.exists() || !token_file.exists() {
        if Instant::now() > end {
            bail!("the daemon did not come up");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_idle = rss_kib(pid);
    let token = Token::read(&token_file)?.expose().to_string();
    let mut client = Client::connect(&socket, Some(token)).await?;

    // Screenshots through the API.
    let opts = ScreenshotOptions {
        size: Some(Size::new(1280, 720)),
        ..ScreenshotOptions::default()
    };
    let body = serde_json::to_vec(&opts)?;
    let mut png_bytes = 0;
    for _ in 0..10 {
        scene.change()?;
        png_bytes = screenshot_timings(api_screenshot(&mut client, &body).await?)?.0;
    }
    let rss_warm = rss_kib(pid);
    eprintln!("bench: screenshots");
    let mut shots = Vec::with_capacity(n);
    let mut phases: [Vec<f64>; 4] = Default::default();
    for _ in 0..n {
        // A changed screen: captured, scaled and encoded anew.
        scene.change()?;
        let t = Instant::now();
        let reply = api_screenshot(&mut client, &body).await?;
        shots.push(t.elapsed());
        let (_, timings) = screenshot_timings(reply)?;
        phases[0].push(timings.capture_ms);
        phases[1].push(timings.scale_ms);
        phases[2].push(timings.encode_ms);
        phases[3].push(timings.total_ms);
    }
    let [capture, scale, encode, total] = phases.map(median);
    let server_side = ServerSide {
        capture_ms: capture,
        scale_ms: scale,
        encode_ms: encode,
        total_ms: total,
    };
    let ours_shot = stat(
        "sandtopd /v1/screenshot 1920x1080 -> 1280x720 png (end to end)",
        shots,
    );
    // The same screenshot again and again of a screen nothing draws on.
    let mut same = Vec::with_capacity(n);
    let mut same_inside = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let reply = api_screenshot(&mut client, &body).await?;
        same.push(t.elapsed());
        let (_, timings) = screenshot_timings(reply)?;
        if !timings.reused {
            bail!("a screenshot of an unchanged screen was not reused");
        }
        same_inside.push(timings.total_ms);
    }
    let unchanged = stat(
        "sandtopd /v1/screenshot, unchanged screen (reused, end to end)",
        same,
    );
    let unchanged_inside_ms = median(same_inside);
    let mut formats = Vec::new();
    for format in BENCH_FORMATS {
        formats.push(time_format(&mut client, &mut scene, opts, format, n).await?);
    }
    let import = if have("import") && have("base64") {
        time_import(&display, pn)
            .await
            .map(|v| Some(stat("import -window root png:- | base64", v)))
    } else {
        Ok(None)
    };
    let scrot = if have("scrot") && have("convert") {
        time_scrot(&display, &dir, pn)
            .await
            .map(|v| Some(stat("scrot + convert -resize 1280x720", v)))
    } else {
        Ok(None)
    };

    // Input on the driver, on its own connection to the same display.
    eprintln!("bench: input");
    let mut driver = X11Driver::connect(Some(&display))?;
    let mut input = Input::default();
    let screen_now = driver.screen_size()?;
    let click_req = |x: i64, y: i64| BatchRequest {
        actions: vec![Action::Click {
            button: Button::Left,
            x,
            y,
            keys: None,
        }],
        screenshot: ScreenshotOptions::default(),
        expect_scale_map: None,
        final_screenshot: false,
    };
    let mut clicks = Vec::with_capacity(n);
    for i in 0..n {
        let req = click_req(1300 + (i % 100) as i64, 900);
        clicks.push(timed_batch(&mut driver, &mut input, &req, screen_now)?);
    }
    let ours_click = stat(
        "sandtopd click (XTEST motion+press+release, round trip)",
        clicks,
    );
    let xdo_click = if have("xdotool") {
        time_cmd(
            &["xdotool", "mousemove", "1300", "900", "click", "1"],
            &display,
            pn,
        )
        .await
        .map(|v| Some(stat("xdotool mousemove X Y click 1", v)))
    } else {
        Ok(None)
    };

    let ascii: String = "The quick brown fox jumps over the lazy dog 0123456789. "
        .chars()
        .cycle()
        .take(100)
        .collect();
    let unicode: String = "Olá, mundo! éüß€ 中文字 жизнь ✓ 🙂 "
        .chars()
        .cycle()
        .take(100)
        .collect();
    let type_n = n.min(100);
    let mut time_type = |text: &str| -> anyhow::Result<Vec<Duration>> {
        let req = BatchRequest {
            actions: vec![Action::Type {
                text: text.to_string(),
            }],
            screenshot: ScreenshotOptions::default(),
            expect_scale_map: None,
            final_screenshot: false,
        };
        let mut v = Vec::with_capacity(type_n);
        for _ in 0..type_n {
            v.push(timed_batch(&mut driver, &mut input, &req, screen_now)?);
        }
        Ok(v)
    };
    let ours_type = stat("sandtopd type 100 ASCII chars", time_type(&ascii)?);
    let ours_type_uni = stat(
        "sandtopd type 100 mixed Unicode chars (spare keycodes)",
        time_type(&unicode)?,
    );
    let xdo_type = if have("xdotool") {
        time_cmd(&["xdotool", "type", &ascii], &display, pn.min(10))
            .await
            .map(|v| {
                Some(stat(
                    "xdotool type (default 12 ms delay) 100 ASCII chars",
                    v,
                ))
            })
    } else {
        Ok(None)
    };

    // Keys after a shortcut wait for its reaction (docs/contract.md 2b):
    // what that costs when a program redraws at once on the key, when
    // nothing reacts (the cap), and without a shortcut (no wait).
    eprintln!("bench: keys after a shortcut");
    let reactor = Reactor::start(&display)?;
    let shortcut_n = n.min(20);
    let mut time_batch = |keys: &[&str], reps: usize| -> anyhow::Result<Vec<Duration>> {
        let req = BatchRequest {
            actions: vec![
                Action::Keypress {
                    keys: keys.iter().map(|k| (*k).to_string()).collect(),
                },
                Action::Type { text: "abc".into() },
            ],
            screenshot: ScreenshotOptions::default(),
            expect_scale_map: None,
            final_screenshot: false,
        };
        let mut v = Vec::with_capacity(reps);
        for _ in 0..reps {
            v.push(timed_batch(&mut driver, &mut input, &req, screen_now)?);
            // Let the reaction's own drawing end before the next one.
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(v)
    };
    let shortcut_reacting = stat(
        "keypress CTRL+L + type 3 chars, a program redraws on the key",
        time_batch(&["CTRL", "L"], shortcut_n)?,
    );
    reactor.pause(true)?;
    let shortcut_still = stat(
        "keypress CTRL+L + type 3 chars, nothing reacts (the cap)",
        time_batch(&["CTRL", "L"], shortcut_n.min(10))?,
    );
    let no_shortcut = stat(
        "keypress ENTER + type 3 chars (not a shortcut: no wait)",
        time_batch(&["ENTER"], shortcut_n)?,
    );
    drop(reactor);
    drop(driver);

    // A whole step through the API: click + settle + final screenshot.
    eprintln!("bench: api steps");
    let step = serde_json::to_vec(&BatchRequest {
        actions: vec![Action::Click {
            button: Button::Left,
            x: 1000,
            y: 700,
            keys: None,
        }],
        screenshot: opts,
        expect_scale_map: None,
        final_screenshot: true,
    })?;
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n.min(100) {
        // As a click that changes something: the screenshot is new.
        scene.change()?;
        let t = Instant::now();
        let (status, _) = client
            .request(Method::POST, "/v1/actions", Some(step.clone()))
            .await?;
        if !status.is_success() {
            bail!("step failed: {status}");
        }
        steps.push(t.elapsed());
    }
    let api_step = stat(
        "sandtopd /v1/actions click + settle + 1280x720 png (end to end)",
        steps,
    );

    // The same with a reaction to settle on: a key a window repaints on
    // at once (as an xterm echoes it; docs/contract.md 2c).
    eprintln!("bench: api steps with a reaction");
    let reactor = Reactor::start(&display)?;
    let step = serde_json::to_vec(&BatchRequest {
        actions: vec![Action::Keypress {
            keys: vec!["a".into()],
        }],
        screenshot: opts,
        expect_scale_map: None,
        final_screenshot: true,
    })?;
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n.min(100) {
        let t = Instant::now();
        let (status, _) = client
            .request(Method::POST, "/v1/actions", Some(step.clone()))
            .await?;
        if !status.is_success() {
            bail!("step failed: {status}");
        }
        steps.push(t.elapsed());
    }
    drop(reactor);
    let api_step_reacting = stat(
        "sandtopd /v1/actions keypress a window repaints on + settle + 1280x720 png (end to end)",
        steps,
    );

    eprintln!(
        "bench: {} screenshots for the memory reading",
        args.memory_shots
    );
    for _ in 0..args.memory_shots {
        scene.change()?;
        screenshot_timings(api_screenshot(&mut client, &body).await?)?;
    }
    let rss_after = rss_kib(pid);
    let rss_after_shmem = rss_shmem_kib(pid);

    let report = Report {
        display: display.clone(),
        screen,
        rows: vec![
            row("screenshot", ours_shot.clone(), import, "import/base64"),
            row("screenshot", ours_shot, scrot, "scrot/convert"),
            row("click", ours_click, xdo_click, "xdotool"),
            row("type 100 chars", ours_type, xdo_type, "xdotool"),
        ],
        extra: vec![
            unchanged,
            ours_type_uni,
            api_step,
            api_step_reacting,
            shortcut_reacting,
            shortcut_still,
            no_shortcut,
        ],
        rss_idle_kib: rss_idle,
        rss_after_warmup_kib: rss_warm,
        rss_after_shots_kib: rss_after,
        rss_after_shots_shmem_kib: rss_after_shmem,
        memory_shots: args.memory_shots,
        screenshot_png_bytes: png_bytes,
        screenshot_server_side: server_side,
        unchanged_server_total_ms: unchanged_inside_ms,
        formats,
    };
    let _ = daemon.start_kill();
    let _ = daemon.wait().await;
    let _ = xvfb.start_kill();
    let _ = std::fs::remove_dir_all(&dir);

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir().join(format!("sandtopd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    Ok(base)
}

fn print_table(r: &Report) {
    println!(
        "sandtopd bench on {} ({}), p50 / p95 in ms",
        r.display, r.screen
    );
    println!();
    println!(
        "{:<16} {:>9} {:>9}   {:>9} {:>9}   {:>8}  peer",
        "", "ours p50", "p95", "peer p50", "p95", "ratio"
    );
    for row in &r.rows {
        match (&row.peer, &row.peer_skipped) {
            (Some(p), _) => println!(
                "{:<16} {:>9.2} {:>9.2}   {:>9.2} {:>9.2}   {:>7.0}x  {}",
                row.what,
                row.ours.p50_ms,
                row.ours.p95_ms,
                p.p50_ms,
                p.p95_ms,
                row.ratio_p50.unwrap_or(f64::NAN),
                p.name
            ),
            (None, why) => println!(
                "{:<16} {:>9.2} {:>9.2}   peer skipped: {}",
                row.what,
                row.ours.p50_ms,
                row.ours.p95_ms,
                why.as_deref().unwrap_or("?")
            ),
        }
    }
    println!();
    for row in &r.rows {
        println!("  ours: {} (n={})", row.ours.name, row.ours.n);
    }
    for s in &r.extra {
        println!(
            "{:<60} p50 {:>7.2}  p95 {:>7.2}  (n={})",
            s.name, s.p50_ms, s.p95_ms, s.n
        );
    }
    println!();
    println!(
        "daemon RSS: idle {:.1} MB, after warm-up {:.1} MB, after {} more screenshots {:.1} MB (growth {:+.1} MB)",
        r.rss_idle_kib as f64 / 1024.0,
        r.rss_after_warmup_kib as f64 / 1024.0,
        r.memory_shots,
        r.rss_after_shots_kib as f64 / 1024.0,
        (r.rss_after_shots_kib as f64 - r.rss_after_warmup_kib as f64) / 1024.0
    );
    println!(
        "  after the screenshots: {:.1} MB private, {:.1} MB the MIT-SHM capture segment (shared with the X server)",
        (r.rss_after_shots_kib - r.rss_after_shots_shmem_kib) as f64 / 1024.0,
        r.rss_after_shots_shmem_kib as f64 / 1024.0,
    );
    let s = &r.screenshot_server_side;
    println!(
        "screenshot inside the daemon (medians): capture {:.2} ms, scale+RGB {:.2} ms, encode+base64 {:.2} ms, total {:.2} ms",
        s.capture_ms, s.scale_ms, s.encode_ms, s.total_ms
    );
    println!(
        "an unchanged screen inside the daemon (median): {:.2} ms (reused)",
        r.unchanged_server_total_ms
    );
    println!(
        "1280x720 PNG reply size: {} bytes (JSON with base64)",
        r.screenshot_png_bytes
    );
    println!();
    println!(
        "each format, 1920x1080 -> 1280x720 of a changed screen (medians, ms; inside the daemon: capture / scale / encode+base64 / total):"
    );
    for f in &r.formats {
        let s = &f.server_side;
        println!(
            "  {:<5} end to end p50 {:>6.2} p95 {:>6.2}   inside {:.2} / {:.2} / {:.2} / {:.2}   reply {} bytes",
            f.format.extension(),
            f.end_to_end.p50_ms,
            f.end_to_end.p95_ms,
            s.capture_ms,
            s.scale_ms,
            s.encode_ms,
            s.total_ms,
            f.reply_bytes
        );
    }
}

/// One batch planned and run on the driver directly, until the X server
/// has processed it: the time it took.
fn timed_batch(
    driver: &mut X11Driver,
    input: &mut Input,
    req: &BatchRequest,
    screen: Size,
) -> anyhow::Result<Duration> {
    let cancel = Cancel::new(Instant::now() + Duration::from_secs(5));
    let t = Instant::now();
    let (steps, _) = exec::plan(req, screen).map_err(|e| anyhow::anyhow!("{e}"))?;
    exec::run(driver, input, &steps, &cancel).map_err(|f| anyhow::anyhow!("{}", f.error))?;
    driver.sync()?;
    Ok(t.elapsed())
}
