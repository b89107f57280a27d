//! docs/contract.md 3b on a real X server: a screenshot is answered again
//! (`timings.reused`) only while nothing was drawn since it was taken.
//! Another client fills a square of the root window with a new colour
//! after another, each confirmed drawn (a round trip) before its number is
//! published; every screenshot must show a colour at least as new as the
//! last one confirmed before it was asked for. A stale answer shows an
//! older one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{ChangeGCAux, ConnectionExt as _, CreateGCAux, Rectangle};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

use super::*;

const SQUARE: u16 = 48;

/// The colour of drawing number `i` (distinct for every i below 2^20).
fn colour(i: u64) -> u32 {
    // An odd multiplier is a bijection mod 2^24.
    ((i.wrapping_mul(0x9e_37_79) ^ 0x55_aa_55) & 0xff_ffff) as u32
}

/// Draws colour after colour into the square until `stop`; `done` is the
/// number of the last drawing the server has processed.
fn drawer(display: String, done: Arc<AtomicU64>, stop: Arc<AtomicBool>, pause_us: u64) {
    let (conn, screen) = RustConnection::connect(Some(&display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let gc = conn.generate_id().unwrap();
    conn.create_gc(gc, root, &CreateGCAux::new()).unwrap();
    let mut i = done.load(Ordering::Acquire);
    while !stop.load(Ordering::Acquire) {
        i += 1;
        conn.change_gc(gc, &ChangeGCAux::new().foreground(colour(i)))
            .unwrap();
        let r = Rectangle {
            x: 0,
            y: 0,
            width: SQUARE,
            height: SQUARE,
        };
        conn.poly_fill_rectangle(root, gc, &[r]).unwrap();
        conn.sync().unwrap();
        done.store(i, Ordering::Release);
        // Vary the phase against the screenshots.
        std::thread::sleep(Duration::from_micros(pause_us * (i % 4)));
    }
}

/// Fills the square once with drawing `i`'s colour; returns when drawn.
fn draw_one(display: &str, i: u64) {
    let (conn, screen) = RustConnection::connect(Some(display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let gc = conn.generate_id().unwrap();
    conn.create_gc(gc, root, &CreateGCAux::new().foreground(colour(i)))
        .unwrap();
    let r = Rectangle {
        x: 0,
        y: 0,
        width: SQUARE,
        height: SQUARE,
    };
    conn.poly_fill_rectangle(root, gc, &[r]).unwrap();
    conn.sync().unwrap();
}

/// The drawing number the square shows in a screenshot reply.
fn shown(body: &Value, numbers: &HashMap<u32, u64>) -> u64 {
    let png = base64::engine::general_purpose::STANDARD
        .decode(body["screenshot"]["data"].as_str().unwrap())
        .unwrap();
    let ((w, _), px) = decode_png(&png);
    let i = ((10 * w + 10) * 3) as usize;
    let c = (u32::from(px[i]) << 16) | (u32::from(px[i + 1]) << 8) | u32::from(px[i + 2]);
    *numbers
        .get(&c)
        .unwrap_or_else(|| panic!("the square shows {c:06x}, no colour that was drawn"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_screen_drawn_on_between_screenshots_is_never_answered_stale() {
    let Some(x) = Xvfb::start(640, 480) else {
        return;
    };
    let d = Daemon::attach(&x.display);
    let numbers: HashMap<u32, u64> = (0..200_000).map(|i| (colour(i), i)).collect();
    assert_eq!(numbers.len(), 200_000, "the colours are distinct");
    let done = Arc::new(AtomicU64::new(0));
    let body = json!({"region": {"x": 0, "y": 0, "width": 64, "height": 64}});

    // 1. While the other client draws, at varying phases.
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (display, done, stop) = (x.display.clone(), Arc::clone(&done), Arc::clone(&stop));
        std::thread::spawn(move || drawer(display, done, stop, 700))
    };
    while done.load(Ordering::Acquire) < 3 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (mut reused_while_drawing, mut shots) = (0, 0);
    for _ in 0..300 {
        let before = done.load(Ordering::Acquire);
        let (status, reply) = d.post("/v1/screenshot", body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        let seen = shown(&reply, &numbers);
        assert!(
            seen >= before,
            "drawing {before} was done before the screenshot was asked for, \
             it shows drawing {seen} (reused: {})",
            reply["timings"]["reused"]
        );
        shots += 1;
        if reply["timings"]["reused"] == json!(true) {
            reused_while_drawing += 1;
        }
    }
    stop.store(true, Ordering::Release);
    worker.join().unwrap();
    let last = done.load(Ordering::Acquire);
    eprintln!("{shots} screenshots while drawing, {reused_while_drawing} reused");

    // 2. Quiet: the first screenshot shows the last drawing; the next
    //    ones are it again, not captured anew.
    let (_, first) = d.post("/v1/screenshot", body.clone()).await;
    assert_eq!(shown(&first, &numbers), last);
    for _ in 0..5 {
        let (_, again) = d.post("/v1/screenshot", body.clone()).await;
        assert_eq!(
            again["timings"]["reused"],
            json!(true),
            "{}",
            again["timings"]
        );
        assert_eq!(again["screenshot"], first["screenshot"]);
    }

    // 3. One drawing more: seen at once.
    draw_one(&x.display, last + 1);
    let (_, after) = d.post("/v1/screenshot", body).await;
    assert_ne!(after["timings"]["reused"], json!(true));
    assert_eq!(shown(&after, &numbers), last + 1);
}
