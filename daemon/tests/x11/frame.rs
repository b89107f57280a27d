//! `/v1/frame` on a real X server: another client's drawing (X damage)
//! and the pointer moving push a frame to a waiting viewer; an idle
//! screen answers `changed: false` when the wait runs out.

use super::*;

async fn frame(d: &Daemon, after: u64, wait_ms: u32) -> Value {
    let (status, body) = d
        .post(
            "/v1/frame",
            json!({"after": after, "wait_ms": wait_ms, "max_width": 400}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Waits for frames until one arrives or `within` passes.
async fn next_change(d: &Daemon, after: u64, within: Duration) -> Option<Value> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        let f = frame(d, after, 2000).await;
        if f["changed"] == json!(true) {
            return Some(f);
        }
    }
    None
}

/// Lets the screen go quiet: frames until one wait comes back unchanged.
async fn quiet(d: &Daemon) -> u64 {
    let mut seq = frame(d, 0, 0).await["seq"].as_u64().unwrap();
    for _ in 0..20 {
        let f = frame(d, seq, 400).await;
        if f["changed"] == json!(false) {
            return seq;
        }
        seq = f["seq"].as_u64().unwrap();
    }
    panic!("the screen never went quiet");
}

#[tokio::test(flavor = "multi_thread")]
async fn damage_and_pointer_motion_push_frames_and_an_idle_screen_pushes_none() {
    let Some((x, rec, d)) = setup(800, 600) else {
        return;
    };
    let seq = quiet(&d).await;

    // Another client draws: a waiting request gets a frame. (A late
    // change of the setup may come first: frames are taken until one
    // arrives after the drawing started.)
    let drawing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drawer = {
        let drawing = drawing.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drawing.store(true, std::sync::atomic::Ordering::SeqCst);
            rec.draw(|x, y| ((x / 3) as u8, (y / 3) as u8, 90));
            rec
        })
    };
    let mut seq = seq;
    let end = Instant::now() + Duration::from_secs(5);
    let f = loop {
        assert!(Instant::now() < end, "no frame after another client drew");
        let f = frame(&d, seq, 2000).await;
        if f["changed"] == json!(true) {
            seq = f["seq"].as_u64().unwrap();
            if drawing.load(std::sync::atomic::Ordering::SeqCst) {
                break f;
            }
        }
    };
    let _rec = drawer.join().unwrap();
    assert_eq!(f["image"]["width"], json!(400));
    assert_eq!(f["image"]["height"], json!(300));
    let jpeg = base64::engine::general_purpose::STANDARD
        .decode(f["image"]["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(&jpeg[..2], &[0xff, 0xd8]);

    // Quiet again, then only the pointer moves (by another client: no
    // input batch of ours, no damage on Xvfb's screen).
    let seq = quiet(&d).await;
    if std::process::Command::new("xdotool")
        .arg("--version")
        .output()
        .is_ok()
    {
        let display = x.display.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let _ = std::process::Command::new("xdotool")
                .args(["mousemove", "123", "77"])
                .env("DISPLAY", display)
                .status();
        });
        let f = next_change(&d, seq, Duration::from_secs(5))
            .await
            .expect("no frame after the pointer moved");
        assert!(f["seq"].as_u64().unwrap() > seq);
    } else {
        eprintln!("x11 frame test: no xdotool, the pointer case is not run");
    }
}
