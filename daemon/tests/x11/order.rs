//! Input ordering under a real window manager (docs/contract.md
//! rule 2a): "a later action never takes effect before an earlier one has
//! been delivered".
//!
//! openbox, like any click-to-focus manager, grabs the pointer
//! synchronously on a press in an unfocused window and holds it frozen
//! until it has focused the window and replayed the click. These tests
//! send whole batches at once (no pauses between actions) into windows the
//! manager manages, starting unfocused, and check where every event landed.

use std::process::{Child, Command, Stdio};

use sandtop_testkit::recorder::{Rec, Recorder};
use sandtop_testkit::wm::{self, Openbox};

use super::*;

/// A display with openbox, a recording window the manager manages, and a
/// second managed window mapped after it so the recorder starts unfocused.
struct Rig {
    _x: Xvfb,
    _wm: Openbox,
    rec: Recorder,
    thief: Recorder,
    d: Daemon,
}

fn rig() -> Option<Rig> {
    let x = Xvfb::start(1024, 768)?;
    let wm = Openbox::start(&x.display)?;
    let rec = Recorder::start_managed(&x.display, "sandtop-recorder", (60, 80), (640, 480));
    let thief = Recorder::start_managed(&x.display, "sandtop-thief", (760, 80), (220, 220));
    let d = Daemon::attach(&x.display);
    // openbox focuses a newly mapped window: the thief, last mapped.
    let end = Instant::now() + LONG;
    while !thief.has_focus() {
        assert!(Instant::now() < end, "openbox never focused the new window");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!rec.has_focus(), "the recorder must start unfocused");
    Some(Rig {
        _x: x,
        _wm: wm,
        rec,
        thief,
        d,
    })
}

/// A click target: model coordinates, and the screen pixel they map to.
type Target = ((i64, i64), (i16, i16));

/// Four targets inside the recorder's window, in the model's space of a
/// 512x384 screenshot of the 1024x768 screen, and their mapped pixels.
fn four_targets(rec: &Recorder) -> Vec<Target> {
    let map = ScaleMap::fit(
        Size::new(1024, 768),
        None,
        Some(Size::new(512, 384)),
        Fit::Stretch,
    )
    .unwrap();
    let (ox, oy) = (i64::from(rec.origin.0), i64::from(rec.origin.1));
    let (w, h) = rec.size();
    let (w, h) = (i64::from(w), i64::from(h));
    [
        (w / 5, h / 5),
        (4 * w / 5, h / 4),
        (w / 3, 4 * h / 5),
        (3 * w / 4, 3 * h / 4),
    ]
    .into_iter()
    .map(|(sx, sy)| {
        // A model pixel whose mapped screen pixel is inside the window.
        let (mx, my) = ((ox + sx) / 2, (oy + sy) / 2);
        let (px, py) = map.to_screen(mx, my).unwrap();
        ((mx, my), (px as i16, py as i16))
    })
    .collect()
}

fn click(x: i64, y: i64) -> Value {
    json!({"type": "click", "button": "left", "x": x, "y": y})
}

/// Every press and release the recorder saw, with where it landed.
fn button_events(evs: &[Rec]) -> Vec<(u8, bool, i16, i16)> {
    evs.iter()
        .filter_map(|e| match e {
            Rec::Button {
                button, down, x, y, ..
            } => Some((*button, *down, *x, *y)),
            _ => None,
        })
        .collect()
}

fn assert_landed(evs: &[Rec], targets: &[Target]) {
    let got = button_events(evs);
    assert_eq!(
        got.len(),
        2 * targets.len(),
        "one press and one release per click: {got:?}"
    );
    for (i, (pair, (_, (tx, ty)))) in got.chunks(2).zip(targets).enumerate() {
        for &(button, _, x, y) in pair {
            assert_eq!(button, 1);
            assert!(
                (x - tx).abs() <= 1 && (y - ty).abs() <= 1,
                "click {i} landed at {x},{y}, aimed at {tx},{ty}: {got:?}"
            );
        }
        assert!(pair[0].1 && !pair[1].1, "press then release: {pair:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn four_clicks_in_one_batch_land_where_aimed_in_an_unfocused_managed_window() {
    let Some(r) = rig() else {
        return;
    };
    let targets = four_targets(&r.rec);
    let batch: Vec<Value> = targets.iter().map(|((x, y), _)| click(*x, *y)).collect();
    let body = r.d.act(json!(batch), Some((512, 384))).await;
    assert_eq!(body["executed"], 4, "{body}");
    let evs = r.rec.wait_until(LONG, |e| button_events(e).len() >= 8);
    assert_landed(&evs, &targets);
    assert!(
        button_events(&r.thief.events()).is_empty(),
        "no click reached the other window"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn four_clicks_in_back_to_back_calls_land_where_aimed_in_an_unfocused_managed_window() {
    let Some(r) = rig() else {
        return;
    };
    let targets = four_targets(&r.rec);
    for ((x, y), _) in &targets {
        r.d.act(json!([click(*x, *y)]), Some((512, 384))).await;
    }
    let evs = r.rec.wait_until(LONG, |e| button_events(e).len() >= 8);
    assert_landed(&evs, &targets);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drag_right_after_focusing_a_window_passes_through_every_point() {
    let Some(r) = rig() else {
        return;
    };
    let (ox, oy) = (i64::from(r.rec.origin.0), i64::from(r.rec.origin.1));
    let path: Vec<(i64, i64)> = vec![
        (ox + 50, oy + 50),
        (ox + 250, oy + 60),
        (ox + 300, oy + 300),
        (ox + 80, oy + 200),
    ];
    let pts: Vec<Value> = path.iter().map(|(x, y)| json!({"x": x, "y": y})).collect();
    // The press focuses the window (openbox freezes the pointer until it
    // replays it), the path follows at once, then text: neither the path
    // nor the keys may overtake the press.
    r.d.act(
        json!([
            {"type": "drag", "path": pts},
            {"type": "type", "text": "ok"}
        ]),
        None,
    )
    .await;
    let evs = r.rec.wait_until(LONG, |e| {
        Recorder::typed_text(e).ends_with("ok") && button_events(e).len() >= 2
    });
    // Every path point was reached while the button was down, in order.
    let down_at = evs
        .iter()
        .position(|e| matches!(e, Rec::Button { down: true, .. }))
        .expect("the press reached the window");
    let up_at = evs
        .iter()
        .position(|e| matches!(e, Rec::Button { down: false, .. }))
        .expect("the release reached the window");
    let motions: Vec<(i64, i64)> = evs[down_at..up_at]
        .iter()
        .filter_map(|e| match e {
            Rec::Motion { x, y } => Some((i64::from(*x), i64::from(*y))),
            _ => None,
        })
        .collect();
    let mut next = 1;
    for m in &motions {
        if next < path.len() && *m == path[next] {
            next += 1;
        }
    }
    assert_eq!(
        next,
        path.len(),
        "path {path:?}, motions while held {motions:?}"
    );
    assert!(
        matches!(evs[up_at], Rec::Button { x, y, .. } if (i64::from(x), i64::from(y)) == path[3]),
        "released at the last point: {:?}",
        evs[up_at]
    );
    // The text came after the release, into this window.
    let keys_before_release = evs[..up_at]
        .iter()
        .filter(
            |e| matches!(e, Rec::Key { down: true, base, .. } if *base == 0x6f || *base == 0x6b),
        )
        .count();
    assert_eq!(keys_before_release, 0, "typed keys overtook the drag");
    assert_eq!(Recorder::typed_text(&r.thief.events()), "");
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gtk_entry(display: &str, title: &str, out: &Path, at: (i32, i32)) -> Option<Proc> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gtk_entry.py");
    let ok = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import gi; gi.require_version('Gtk', '3.0'); from gi.repository import Gtk",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip::skip(
            "x11",
            "python3-gi with GTK 3 is not installed (make deps installs it)",
        );
        return None;
    }
    let child = Command::new("/usr/bin/python3")
        .arg(script)
        .arg(title)
        .arg(out)
        .args([at.0.to_string(), at.1.to_string()])
        .env("DISPLAY", display)
        .env("GDK_BACKEND", "x11")
        .env("NO_AT_BRIDGE", "1")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Some(Proc(child))
}

fn xterm_tee(display: &str, title: &str, out: &Path, geometry: &str) -> Option<Proc> {
    if !skip::have("xterm") {
        skip::skip("x11", "xterm is not installed (make deps installs it)");
        return None;
    }
    // `tee FILE` as the terminal's program: no shell; the file gets exactly
    // the bytes typed into this terminal.
    let child = Command::new("xterm")
        .args(["-T", title, "-geometry", geometry, "-u8", "-e", "tee"])
        .arg(out)
        .env("DISPLAY", display)
        .env("LANG", "C.UTF-8")
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Some(Proc(child))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_click_then_typing_lands_in_the_clicked_xterm_and_gtk_entry() {
    let Some(x) = Xvfb::start(1024, 768) else {
        return;
    };
    let Some(_wm) = Openbox::start(&x.display) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (term_out, gtk_out) = (dir.path().join("term.txt"), dir.path().join("gtk.txt"));
    let Some(_term) = xterm_tee(&x.display, "sandtop-term", &term_out, "60x10+20+40") else {
        return;
    };
    let term = wm::wait_for_title(&x.display, "sandtop-term", LONG);
    let Some(_gtk) = gtk_entry(&x.display, "sandtop-gtk", &gtk_out, (560, 60)) else {
        return;
    };
    let gtk = wm::wait_for_title(&x.display, "sandtop-gtk", LONG);
    // A third window, mapped last, has the focus when the batch starts.
    let thief = Recorder::start_managed(&x.display, "sandtop-thief", (300, 420), (300, 200));
    let end = Instant::now() + LONG;
    while !thief.has_focus() {
        assert!(Instant::now() < end, "openbox never focused the new window");
        std::thread::sleep(Duration::from_millis(20));
    }
    let end = Instant::now() + LONG;
    while !term_out.exists() {
        assert!(Instant::now() < end, "tee never started in the xterm");
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = Daemon::attach(&x.display);
    let (tx, ty) = term.centre();
    let (gx, gy) = gtk.centre();
    // One call, no pauses: click, type, click elsewhere, type, and back
    // (40 px off the first click: at the same place, within GTK's 400 ms,
    // the entry would take it as a double click and select a word).
    let batch = json!([
        {"type": "click", "button": "left", "x": gx, "y": gy},
        {"type": "type", "text": "gtk-1 héllo"},
        {"type": "click", "button": "left", "x": tx, "y": ty},
        {"type": "type", "text": "term-2 中文\n"},
        {"type": "click", "button": "left", "x": gx + 40, "y": gy},
        {"type": "type", "text": " end-3\n"},
    ]);
    let body = d.act(batch, None).await;
    assert_eq!(body["executed"], 6, "{body}");
    let end = Instant::now() + LONG;
    while !gtk_out.exists() {
        assert!(Instant::now() < end, "the GTK entry never got its Return");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the terminal's line reach the file.
    let end = Instant::now() + LONG;
    while std::fs::read(&term_out).unwrap_or_default().is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        std::fs::read_to_string(&gtk_out).unwrap(),
        "gtk-1 héllo end-3",
        "the other window got {:?}",
        Recorder::typed_text(&thief.events())
    );
    assert_eq!(std::fs::read_to_string(&term_out).unwrap(), "term-2 中文\n");
    assert_eq!(
        Recorder::typed_text(&thief.events()),
        "",
        "keys went to the window focused before"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grab_that_outlives_the_deadline_fails_the_action_and_sends_nothing_after() {
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{ConnectionExt as _, EventMask, GrabMode, GrabStatus};
    let Some((x, rec, d)) = setup(800, 600) else {
        return;
    };
    // Another client freezes the pointer: an active grab in synchronous
    // mode, never released by AllowEvents.
    let (conn, screen) = x11rb::rust_connection::RustConnection::connect(Some(&x.display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let status = conn
        .grab_pointer(
            false,
            root,
            EventMask::BUTTON_PRESS,
            GrabMode::SYNC,
            GrabMode::ASYNC,
            x11rb::NONE,
            x11rb::NONE,
            x11rb::CURRENT_TIME,
        )
        .unwrap()
        .reply()
        .unwrap()
        .status;
    assert_eq!(status, GrabStatus::SUCCESS);
    let t = Instant::now();
    let (status, body) = d
        .post(
            "/v1/actions",
            json!({"actions": [
                {"type": "keypress", "keys": ["A"]},
                {"type": "click", "button": "left", "x": 100, "y": 100},
                {"type": "type", "text": "never"}
            ], "screenshot": {}}),
        )
        .await;
    let waited = t.elapsed();
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "input_blocked", "{body}");
    assert_eq!(
        body["index"], 1,
        "the click is the action that could not be delivered: {body}"
    );
    assert_eq!(body["executed"], 1, "{body}");
    assert_eq!(body["partial"], true, "{body}");
    assert!(
        waited >= Duration::from_millis(sandtop_protocol::limits::INPUT_DELIVERY_MS),
        "it waited for the deadline: {waited:?}"
    );
    // Release the grab: the queued click is processed, and nothing of the
    // text was ever sent.
    conn.ungrab_pointer(x11rb::CURRENT_TIME).unwrap();
    conn.flush().unwrap();
    let evs = rec.wait_quiet(QUIET, LONG);
    let text = Recorder::typed_text(&evs);
    assert_eq!(
        text, "a",
        "only the first action's key, never the text: {evs:?}"
    );
    // And the daemon takes input again.
    let body = d.act(json!([{"type": "type", "text": "z"}]), None).await;
    assert_eq!(body["executed"], 1, "{body}");
}
