//! The x11 tier: the real `sandtopd` binary on a real Xvfb, checked by a
//! test X client that records every event it receives (docs/security.md H1,
//! H4, H5, A7, A15 against a real server; docs/contract.md §1 semantics).
//!
//! Each test starts its own Xvfb (a free display picked by the server) and
//! its own daemon, so tests run in parallel without sharing state. Without
//! Xvfb they print `SKIP x11: ...` (and fail when SANDTOP_REQUIRE lists x11).

#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use http::{Method, StatusCode};
use sandtop_client::Client;
use sandtop_protocol::{Fit, ScaleMap, Size};
use sandtop_testkit::corpus::TYPING as CORPUS;
use sandtop_testkit::recorder::{Rec, Recorder};
use sandtop_testkit::skip;
use sandtop_testkit::xvfb::Xvfb;
use serde_json::{Value, json};

/// A daemon process under test.
struct Daemon {
    child: Child,
    _dir: tempfile::TempDir,
    socket: PathBuf,
    token: String,
}

impl Daemon {
    fn spawn(args: &[&str]) -> Daemon {
        Daemon::spawn_with_log(args, None)
    }

    /// Like [`Daemon::spawn`], its log (info level) going to `log`.
    fn spawn_logged(args: &[&str], log: &Path) -> Daemon {
        Daemon::spawn_with_log(args, Some(log))
    }

    fn spawn_with_log(args: &[&str], log: Option<&Path>) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("sandtopd.sock");
        let token_file = dir.path().join("token");
        let child = Command::new(env!("CARGO_BIN_EXE_sandtopd"))
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--token-file")
            .arg(&token_file)
            .args(args)
            .env(
                "RUST_LOG",
                match log {
                    Some(_) => "info".into(),
                    None => {
                        std::env::var("SANDTOP_TEST_DAEMON_LOG").unwrap_or_else(|_| "warn".into())
                    }
                },
            )
            .stdout(match log {
                Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
                None => Stdio::inherit(),
            })
            .stderr(match log {
                Some(p) => Stdio::from(std::fs::OpenOptions::new().append(true).open(p).unwrap()),
                None => Stdio::inherit(),
            })
            .stdin(Stdio::null())
            // Its own process group, so that dropping the test kills the
            // daemon's Xvfb and window manager too.
            .process_group(0)
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(15);
        while !(socket.exists() && token_file.exists()) {
            assert!(Instant::now() < end, "the daemon did not come up");
            std::thread::sleep(Duration::from_millis(10));
        }
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_string();
        Daemon {
            child,
            _dir: dir,
            socket,
            token,
        }
    }

    /// Attached to an existing display.
    fn attach(display: &str) -> Daemon {
        Daemon::spawn(&["--display", display])
    }

    async fn client(&self) -> Client {
        Client::connect(&self.socket, Some(self.token.clone()))
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let mut c = self.client().await;
        let (status, bytes) = c
            .request(Method::POST, path, Some(serde_json::to_vec(&body).unwrap()))
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    /// Runs actions in the coordinate space of `size` (None: screen pixels).
    async fn act(&self, actions: Value, size: Option<(u32, u32)>) -> Value {
        let mut shot = json!({});
        if let Some((w, h)) = size {
            shot = json!({"size": {"width": w, "height": h}, "fit": "stretch"});
        }
        let (status, body) = self
            .post(
                "/v1/actions",
                json!({"actions": actions, "screenshot": shot}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn health(&self) -> (StatusCode, Value) {
        let mut c = self.client().await;
        let (status, bytes) = c.request(Method::GET, "/v1/health", None).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(pgid) = rustix::process::Pid::from_raw(self.pid()) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

fn setup(w: u32, h: u32) -> Option<(Xvfb, Recorder, Daemon)> {
    let x = Xvfb::start(w, h)?;
    let rec = Recorder::start(&x.display);
    let d = Daemon::attach(&x.display);
    Some((x, rec, d))
}

fn presses(evs: &[Rec]) -> Vec<(u8, i16, i16)> {
    evs.iter()
        .filter_map(|e| match e {
            Rec::Button {
                button,
                down: true,
                x,
                y,
                ..
            } => Some((*button, *x, *y)),
            _ => None,
        })
        .collect()
}

fn buttons(evs: &[Rec]) -> Vec<(u8, bool)> {
    evs.iter()
        .filter_map(|e| match e {
            Rec::Button { button, down, .. } => Some((*button, *down)),
            _ => None,
        })
        .collect()
}

fn keys(evs: &[Rec]) -> Vec<(u32, bool)> {
    evs.iter()
        .filter_map(|e| match e {
            Rec::Key { base, down, .. } => Some((*base, *down)),
            _ => None,
        })
        .collect()
}

const QUIET: Duration = Duration::from_millis(150);
const LONG: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn every_button_arrives_at_the_mapped_pixel() {
    let Some((_x, rec, d)) = setup(1280, 720) else {
        return;
    };
    let cases = [
        ("left", 1u8),
        ("right", 3),
        ("wheel", 2),
        ("back", 8),
        ("forward", 9),
    ];
    for (i, (name, _)) in cases.iter().enumerate() {
        let (x, y) = (100 + 50 * i as i64, 200 + 10 * i as i64);
        d.act(
            json!([{"type": "click", "button": name, "x": x, "y": y}]),
            None,
        )
        .await;
    }
    let evs = rec.wait_until(LONG, |e| buttons(e).len() >= 10);
    let got = presses(&evs);
    let want: Vec<(u8, i16, i16)> = cases
        .iter()
        .enumerate()
        .map(|(i, (_, b))| (*b, 100 + 50 * i as i16, 200 + 10 * i as i16))
        .collect();
    assert_eq!(got, want);
    // Each press is followed by its release.
    let b = buttons(&evs);
    for pair in b.chunks(2) {
        assert_eq!(
            (pair[0].0, pair[0].1, pair[1].0, pair[1].1),
            (pair[0].0, true, pair[0].0, false)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn clicks_in_scaled_space_land_on_the_mapped_pixel() {
    let Some((_x, rec, d)) = setup(1920, 1080) else {
        return;
    };
    let screen = Size::new(1920, 1080);
    // Screen pixels per model pixel: 1, 1.5, 2, 2.5, and a stretched,
    // non-uniform map.
    let sizes = [
        (1920, 1080),
        (1280, 720),
        (960, 540),
        (768, 432),
        (1000, 700),
    ];
    let mut expected = Vec::new();
    for (w, h) in sizes {
        let map = ScaleMap::fit(screen, None, Some(Size::new(w, h)), Fit::Stretch).unwrap();
        for (x, y) in [
            (0, 0),
            (w as i64 - 1, h as i64 - 1),
            (w as i64 / 3, h as i64 / 7),
            (17, 311),
        ] {
            d.act(
                json!([{"type": "click", "button": "left", "x": x, "y": y}]),
                Some((w, h)),
            )
            .await;
            let (sx, sy) = map.to_screen(x, y).unwrap();
            expected.push((1u8, sx as i16, sy as i16));
        }
    }
    // Cropped and scaled: scale first, then add the crop offset.
    let region = sandtop_protocol::Rect {
        x: 100,
        y: 50,
        width: 800,
        height: 600,
    };
    let map = ScaleMap::fit(
        screen,
        Some(region),
        Some(Size::new(400, 300)),
        Fit::Contain,
    )
    .unwrap();
    for (x, y) in [(0, 0), (399, 299), (200, 150)] {
        let (status, body) = d
            .post(
                "/v1/actions",
                json!({"actions": [{"type": "click", "button": "left", "x": x, "y": y}],
                       "screenshot": {"size": {"width": 400, "height": 300},
                                      "region": {"x": 100, "y": 50, "width": 800, "height": 600}}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body["screenshot"]["scale_map"],
            serde_json::to_value(map).unwrap()
        );
        let (sx, sy) = map.to_screen(x, y).unwrap();
        expected.push((1u8, sx as i16, sy as i16));
    }
    assert_eq!(expected[expected.len() - 3], (1, 101, 51));
    assert_eq!(expected[expected.len() - 2], (1, 899, 649));
    let evs = rec.wait_until(LONG, |e| presses(e).len() >= expected.len());
    assert_eq!(presses(&evs), expected);
    // A point the scaled screenshot does not contain is refused, though it
    // is a valid screen pixel.
    let (status, body) = d
        .post(
            "/v1/actions",
            json!({"actions": [{"type": "click", "button": "left", "x": 1000, "y": 10}],
                   "screenshot": {"size": {"width": 960, "height": 540}}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["code"], "out_of_bounds");
}

#[tokio::test(flavor = "multi_thread")]
async fn double_click_is_two_clicks_inside_the_interval() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    d.act(
        json!([{"type": "double_click", "x": 40, "y": 50, "keys": null}]),
        None,
    )
    .await;
    let evs = rec.wait_until(LONG, |e| buttons(e).len() >= 4);
    assert_eq!(
        buttons(&evs),
        vec![(1, true), (1, false), (1, true), (1, false)]
    );
    let times: Vec<u32> = evs
        .iter()
        .filter_map(|e| match e {
            Rec::Button {
                down: true, time, ..
            } => Some(*time),
            _ => None,
        })
        .collect();
    // xterm's multi-click time (250 ms) is the strictest common one.
    assert!(times[1] - times[0] < 250, "{times:?}");
    assert!(presses(&evs).iter().all(|p| (p.1, p.2) == (40, 50)));
}

#[tokio::test(flavor = "multi_thread")]
async fn drag_passes_through_every_point_with_motion_between() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    let path = [(10, 10), (200, 15), (210, 300), (50, 400)];
    let path_json: Vec<Value> = path.iter().map(|(x, y)| json!({"x": x, "y": y})).collect();
    d.act(
        json!([{"type": "drag", "path": path_json, "keys": null}]),
        None,
    )
    .await;
    rec.wait_until(LONG, |e| buttons(e).len() >= 2);
    let evs = rec.wait_quiet(QUIET, LONG);
    // The button goes down at the first point and up at the last.
    let down = evs
        .iter()
        .position(|e| matches!(e, Rec::Button { down: true, .. }))
        .unwrap();
    let up = evs
        .iter()
        .position(|e| matches!(e, Rec::Button { down: false, .. }))
        .unwrap();
    assert!(
        matches!(
            evs[down],
            Rec::Button {
                button: 1,
                x: 10,
                y: 10,
                ..
            }
        ),
        "{:?}",
        evs[down]
    );
    assert!(
        matches!(
            evs[up],
            Rec::Button {
                button: 1,
                x: 50,
                y: 400,
                ..
            }
        ),
        "{:?}",
        evs[up]
    );
    let motions: Vec<(i16, i16)> = evs[down..up]
        .iter()
        .filter_map(|e| match e {
            Rec::Motion { x, y } => Some((*x, *y)),
            _ => None,
        })
        .collect();
    // Every path point is visited, in order ...
    let mut next = 1;
    for m in &motions {
        if next < path.len() && *m == (path[next].0, path[next].1) {
            next += 1;
        }
    }
    assert_eq!(
        next,
        path.len(),
        "not every point was visited in order: {motions:?}"
    );
    // ... with motion in between: no jump larger than 16 px.
    let mut prev = (10i16, 10i16);
    for m in &motions {
        let jump = (m.0 - prev.0).abs().max((m.1 - prev.1).abs());
        assert!(jump <= 16, "a {jump} px jump from {prev:?} to {m:?}");
        prev = *m;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scroll_turns_distance_into_wheel_clicks_on_both_axes() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    d.act(
        json!([{"type": "scroll", "x": 300, "y": 200, "scroll_x": -100, "scroll_y": 300, "keys": null},
               {"type": "scroll", "x": 300, "y": 200, "scroll_x": 50, "scroll_y": -50, "keys": null}]),
        None,
    )
    .await;
    let evs = rec.wait_until(LONG, |e| buttons(e).len() >= 2 * (6 + 2 + 1 + 1));
    let downs: Vec<u8> = buttons(&evs)
        .into_iter()
        .filter(|b| b.1)
        .map(|b| b.0)
        .collect();
    // 300 down = 6 clicks of 5, 100 left = 2 of 6, 50 up = 1 of 4, 50 right = 1 of 7.
    assert_eq!(downs, vec![5, 5, 5, 5, 5, 5, 6, 6, 4, 7]);
    assert!(presses(&evs).iter().all(|p| (p.1, p.2) == (300, 200)));
}

#[tokio::test(flavor = "multi_thread")]
async fn chords_and_held_keys() {
    use xkeysym::key as k;
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    d.act(
        json!([{"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]}]),
        None,
    )
    .await;
    let evs = rec.wait_until(LONG, |e| keys(e).len() >= 6);
    assert_eq!(
        keys(&evs),
        vec![
            (k::Control_L, true),
            (k::Shift_L, true),
            (k::t, true),
            (k::t, false),
            (k::Shift_L, false),
            (k::Control_L, false),
        ]
    );
    // The T press carries both modifiers.
    let t_state = evs
        .iter()
        .find_map(|e| match e {
            Rec::Key {
                base,
                down: true,
                state,
                ..
            } if *base == k::t => Some(*state),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        t_state & 0x5,
        0x5,
        "Shift (1) and Control (4) held: {t_state:#x}"
    );

    rec.clear();
    d.act(
        json!([{"type": "click", "button": "left", "x": 5, "y": 6, "keys": ["SHIFT", "ALT"]}]),
        None,
    )
    .await;
    let evs = rec.wait_until(LONG, |e| keys(e).len() >= 4 && buttons(e).len() >= 2);
    let press_state = evs
        .iter()
        .find_map(|e| match e {
            Rec::Button {
                down: true, state, ..
            } => Some(*state),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        press_state & 0x9,
        0x9,
        "Shift (1) and Mod1/Alt (8) held during the click: {press_state:#x}"
    );
    let order = keys(&evs);
    assert_eq!(order.first(), Some(&(k::Shift_L, true)));
    assert_eq!(order.last(), Some(&(k::Shift_L, false)));
    assert!(
        rec.keys_down().is_empty(),
        "keys left down: {:?}",
        rec.keys_down()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn typing_reaches_a_client_exactly() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    let text = CORPUS.replace("MARK", "recorder");
    d.act(json!([{"type": "type", "text": text}]), None).await;
    let want = text.chars().count();
    let evs = rec.wait_until(LONG, |e| Recorder::typed_text(e).chars().count() >= want);
    assert_eq!(Recorder::typed_text(&evs), text);
    assert!(rec.keys_down().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn typed_corpus_in_xterm_is_byte_exact_and_nothing_runs() {
    let Some(x) = Xvfb::start(1024, 768) else {
        return;
    };
    if !skip::have("xterm") {
        skip::skip("x11", "xterm is not installed (make deps installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("typed.txt");
    let marker = format!("/tmp/sandtop-pwned-{}", std::process::id());
    let _ = std::fs::remove_file(&marker);
    // `tee FILE` as xterm's program: no shell anywhere, the file receives
    // exactly the bytes the terminal's line discipline passes on.
    let mut xterm = Command::new("xterm")
        .args(["-geometry", "120x40+0+0", "-u8", "-e", "tee"])
        .arg(&out)
        .env("DISPLAY", &x.display)
        .env("LANG", "C.UTF-8")
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon::attach(&x.display);
    wait_for_window(&d).await;
    let text = CORPUS.replace("MARK", &std::process::id().to_string());
    // Focus the terminal by pointing at it, then press Return until tee
    // echoes a line into the file: from then on the terminal is reading.
    let end = Instant::now() + LONG;
    loop {
        d.act(
            json!([{"type": "move", "x": 300, "y": 200}, {"type": "keypress", "keys": ["RETURN"]}]),
            None,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        if std::fs::metadata(&out).is_ok_and(|m| m.len() > 0) {
            break;
        }
        assert!(Instant::now() < end, "xterm never read its input");
    }
    // Type, then end the input.
    d.act(
        json!([{"type": "type", "text": text}, {"type": "keypress", "keys": ["CTRL", "D"]}]),
        None,
    )
    .await;
    let end = Instant::now() + LONG;
    while xterm.try_wait().unwrap().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = xterm.kill();
    let got = std::fs::read(&out).unwrap_or_default();
    // The readiness Returns come first; the corpus starts with `-`.
    let start = got.iter().position(|&b| b != b'\n').unwrap_or(got.len());
    let got = &got[start..];
    assert_eq!(
        String::from_utf8_lossy(got),
        text,
        "xterm received other bytes"
    );
    assert_eq!(got, text.as_bytes());
    assert!(
        !Path::new(&marker).exists(),
        "typed text was executed: {marker} exists"
    );
}

/// Waits until something (a client window) has drawn on the screen.
async fn wait_for_window(d: &Daemon) {
    let end = Instant::now() + LONG;
    loop {
        let (_, body) = d.post("/v1/screenshot", json!({})).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(body["screenshot"]["data"].as_str().unwrap())
            .unwrap();
        let (_, px) = decode_png(&png);
        if px.iter().any(|&b| b != 0) {
            // Give the client a moment to finish mapping and take input.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return;
        }
        assert!(
            Instant::now() < end,
            "no window drew anything within {LONG:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn decode_png(bytes: &[u8]) -> ((u32, u32), Vec<u8>) {
    let dec = png::Decoder::new(std::io::Cursor::new(bytes.to_vec()));
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        info.color_type,
        png::ColorType::Rgb,
        "screenshots are RGB, no alpha"
    );
    buf.truncate(info.buffer_size());
    ((info.width, info.height), buf)
}

fn pattern(x: u32, y: u32) -> (u8, u8, u8) {
    (x as u8, y as u8, ((x >> 8) | ((y >> 8) << 4)) as u8)
}

#[tokio::test(flavor = "multi_thread")]
async fn screenshot_pixels_match_a_known_pattern() {
    let Some((_x, rec, d)) = setup(1024, 768) else {
        return;
    };
    rec.draw(pattern);
    // Whole screen, unscaled: every pixel exact.
    let (status, body) = d.post("/v1/screenshot", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let png = base64::engine::general_purpose::STANDARD
        .decode(body["screenshot"]["data"].as_str().unwrap())
        .unwrap();
    let ((w, h), px) = decode_png(&png);
    assert_eq!((w, h), (1024, 768));
    for y in 0..h {
        for x in 0..w {
            let i = ((y * w + x) * 3) as usize;
            let (r, g, b) = pattern(x, y);
            assert_eq!(&px[i..i + 3], &[r, g, b], "pixel ({x}, {y})");
        }
    }
    // A cropped region: the crop offset is honoured.
    let (_, body) = d
        .post(
            "/v1/screenshot",
            json!({"region": {"x": 300, "y": 200, "width": 64, "height": 32}}),
        )
        .await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(body["screenshot"]["data"].as_str().unwrap())
        .unwrap();
    let ((w, h), px) = decode_png(&png);
    assert_eq!((w, h), (64, 32));
    let (r, g, b) = pattern(300 + 5, 200 + 7);
    let i = ((7 * w + 5) * 3) as usize;
    assert_eq!(&px[i..i + 3], &[r, g, b]);
    // Scaled: the size and map are what was asked for.
    let (_, body) = d
        .post(
            "/v1/screenshot",
            json!({"size": {"width": 512, "height": 512}}),
        )
        .await;
    assert_eq!(body["screenshot"]["width"], 512);
    assert_eq!(body["screenshot"]["height"], 384);
    assert_eq!(
        body["screenshot"]["scale_map"]["image"],
        json!({"width": 512, "height": 384})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelled_typing_stops_and_releases_every_key() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    // 64 actions of 10,000 characters: far more than can be typed before
    // the request is dropped.
    let chunk: String = "abcdefghijklmnopqrstuvwxyzéß中✓"
        .chars()
        .cycle()
        .take(10_000)
        .collect();
    let text = chunk.repeat(64);
    let actions: Vec<Value> = (0..64)
        .map(|_| json!({"type": "type", "text": chunk}))
        .collect();
    let body = serde_json::to_vec(&json!({"actions": actions})).unwrap();
    let mut c = d.client().await;
    // Drop the request (and its connection) while the text is being typed.
    let r = tokio::time::timeout(
        Duration::from_millis(60),
        c.request(Method::POST, "/v1/actions", Some(body)),
    )
    .await;
    assert!(r.is_err(), "640,000 characters were typed in under 60 ms");
    drop(c);
    let evs = rec.wait_quiet(Duration::from_millis(300), LONG);
    let typed = Recorder::typed_text(&evs);
    assert!(typed.chars().count() < 640_000, "typing did not stop");
    assert!(text.starts_with(&typed), "what was typed is not a prefix");
    assert!(
        rec.keys_down().is_empty(),
        "keys left down: {:?}",
        rec.keys_down()
    );
    assert_eq!(rec.buttons_down(), 0);
    // The daemon is still fine.
    d.act(json!([{"type": "type", "text": "ok"}]), None).await;
}

/// Health, shutdown and the display's cookie.
#[path = "x11/health.rs"]
mod health;

#[path = "x11/order.rs"]
mod order;

#[path = "x11/shortcut.rs"]
mod shortcut;

/// The live view's frames on a real X server.
#[path = "x11/frame.rs"]
mod frame;

/// What the Anthropic computer toolset needs: held buttons, hold_key, the
/// cursor position, and zoom as a region capture.
#[path = "x11/claude.rs"]
mod claude;
#[path = "x11/settle.rs"]
mod settle;
#[path = "x11/unchanged.rs"]
mod unchanged;
