//! What the Anthropic computer toolset needs of the daemon (docs/contract.md
//! rules 65-68), on a real Xvfb: a button held across
//! batches (`mouse_down` / `mouse_up`), `hold_key`, `POST /v1/cursor`, and a
//! zoom (a region capture fitted into a size) that equals a crop of a full
//! screenshot scaled by the same scaler.

use sandtop_imaging::{Layout, Scaler};

use super::*;

fn releases(evs: &[Rec]) -> Vec<(u8, i16, i16)> {
    evs.iter()
        .filter_map(|e| match e {
            Rec::Button {
                button,
                down: false,
                x,
                y,
                ..
            } => Some((*button, *x, *y)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn mouse_down_stays_held_across_batches_until_mouse_up() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    d.act(json!([{"type": "move", "x": 100, "y": 120}]), None)
        .await;
    d.act(json!([{"type": "mouse_down", "button": "left"}]), None)
        .await;
    let evs = rec.wait_until(LONG, |e| !buttons(e).is_empty());
    assert_eq!(presses(&evs), vec![(1, 100, 120)]);
    // Held after its batch ended; a second press of a held button does nothing.
    assert_ne!(rec.buttons_down(), 0, "the button is not held");
    d.act(
        json!([{"type": "move", "x": 300, "y": 250}, {"type": "mouse_down", "button": "left"}]),
        None,
    )
    .await;
    assert_ne!(rec.buttons_down(), 0, "the button is not held");
    d.act(json!([{"type": "mouse_up", "button": "left"}]), None)
        .await;
    let evs = rec.wait_until(LONG, |e| buttons(e).len() >= 2);
    assert_eq!(buttons(&evs), vec![(1, true), (1, false)]);
    assert_eq!(releases(&evs), vec![(1, 300, 250)]);
    assert_eq!(rec.buttons_down(), 0);
    // A mouse_up with nothing held sends nothing.
    rec.clear();
    d.act(json!([{"type": "mouse_up", "button": "left"}]), None)
        .await;
    let evs = rec.wait_quiet(QUIET, LONG);
    assert!(buttons(&evs).is_empty(), "{evs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_that_fails_while_running_releases_a_held_button() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    d.act(
        json!([{"type": "move", "x": 50, "y": 60}, {"type": "mouse_down", "button": "left"}]),
        None,
    )
    .await;
    rec.wait_until(LONG, |e| !buttons(e).is_empty());
    assert_ne!(rec.buttons_down(), 0, "the button is not held");
    // A long typing request dropped while it runs: the batch fails, and
    // everything held is released, the earlier batch's button included.
    let chunk: String = "abcdefghij".chars().cycle().take(10_000).collect();
    let actions: Vec<Value> = (0..64)
        .map(|_| json!({"type": "type", "text": chunk}))
        .collect();
    let body = serde_json::to_vec(&json!({"actions": actions})).unwrap();
    let mut c = d.client().await;
    let r = tokio::time::timeout(
        Duration::from_millis(60),
        c.request(Method::POST, "/v1/actions", Some(body)),
    )
    .await;
    assert!(r.is_err(), "640,000 characters were typed in under 60 ms");
    drop(c);
    rec.wait_quiet(Duration::from_millis(300), LONG);
    assert_eq!(rec.buttons_down(), 0);
    assert!(rec.keys_down().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn hold_key_presses_in_order_and_releases_in_reverse() {
    let Some((_x, rec, d)) = setup(800, 600) else {
        return;
    };
    d.act(
        json!([{"type": "hold_key", "keys": ["shift", "a"], "duration_ms": 200}]),
        None,
    )
    .await;
    let evs = rec.wait_until(LONG, |e| keys(e).len() >= 4);
    assert_eq!(
        keys(&evs),
        vec![
            (xkeysym::key::Shift_L, true),
            (xkeysym::key::a, true),
            (xkeysym::key::a, false),
            (xkeysym::key::Shift_L, false),
        ]
    );
    assert!(rec.keys_down().is_empty());
    // Past the limit, or without keys: refused before anything runs.
    for (action, code) in [
        (
            json!({"type": "hold_key", "keys": ["a"], "duration_ms": 10_001}),
            "limit_exceeded",
        ),
        (
            json!({"type": "hold_key", "keys": [], "duration_ms": 10}),
            "invalid_action",
        ),
        (
            json!({"type": "hold_key", "keys": ["nosuchkey"], "duration_ms": 10}),
            "unknown_key",
        ),
    ] {
        let (status, body) = d.post("/v1/actions", json!({"actions": [action]})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["code"], code, "{body}");
        assert_eq!(body["executed"], 0, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cursor_reports_the_pointer_in_the_screenshots_space() {
    let Some((_x, _rec, d)) = setup(1280, 720) else {
        return;
    };
    d.act(json!([{"type": "move", "x": 301, "y": 203}]), None)
        .await;
    let (status, body) = d.post("/v1/cursor", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["x"].clone(), body["y"].clone()),
        (json!(301), json!(203))
    );
    assert_eq!(
        body["scale_map"]["image"],
        json!({"width": 1280, "height": 720})
    );
    // In a scaled screenshot's space: the map's own inverse.
    let screen = Size::new(1280, 720);
    let map = ScaleMap::fit(screen, None, Some(Size::new(640, 360)), Fit::Contain).unwrap();
    let (status, body) = d
        .post("/v1/cursor", json!({"size": {"width": 640, "height": 360}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (ix, iy) = map.to_image(301, 203).unwrap();
    assert_eq!(
        (body["x"].clone(), body["y"].clone()),
        (json!(ix), json!(iy))
    );
    // A click at the reported position lands where the pointer is.
    assert_eq!(
        map.to_screen(i64::from(ix), i64::from(iy)).unwrap(),
        (301, 203)
    );
    // Outside the captured region: out_of_bounds.
    let (status, body) = d
        .post(
            "/v1/cursor",
            json!({"region": {"x": 600, "y": 400, "width": 100, "height": 100}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "out_of_bounds");
}

fn shot_pixels(body: &Value) -> ((u32, u32), Vec<u8>) {
    let png = base64::engine::general_purpose::STANDARD
        .decode(body["screenshot"]["data"].as_str().unwrap())
        .unwrap();
    decode_png(&png)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zoom_of_a_region_equals_a_crop_of_a_full_screenshot_scaled() {
    let Some((_x, rec, d)) = setup(1024, 768) else {
        return;
    };
    rec.draw(pattern);
    let (status, full) = d.post("/v1/screenshot", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{full}");
    let ((fw, _), full_px) = shot_pixels(&full);
    let region = (300u32, 200u32, 80u32, 50u32);
    let crop: Vec<u8> = (region.1..region.1 + region.3)
        .flat_map(|y| {
            let start = ((y * fw + region.0) * 3) as usize;
            full_px[start..start + (region.2 * 3) as usize].to_vec()
        })
        .collect();
    // Zoomed into 640x400 (contain: 8x, touching the width), and at 1x.
    for (asked, want) in [((640u32, 400u32), (640u32, 400u32)), ((80, 50), (80, 50))] {
        let (status, zoom) = d
            .post(
                "/v1/screenshot",
                json!({"region": {"x": region.0, "y": region.1, "width": region.2, "height": region.3},
                       "size": {"width": asked.0, "height": asked.1}, "fit": "contain"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{zoom}");
        // Its own map: the region, at the size it was fitted to.
        assert_eq!(
            zoom["screenshot"]["scale_map"],
            json!({"screen": {"width": 1024, "height": 768},
                   "region": {"x": region.0, "y": region.1, "width": region.2, "height": region.3},
                   "image": {"width": want.0, "height": want.1}})
        );
        let (size, px) = shot_pixels(&zoom);
        assert_eq!(size, want);
        let mut scaled = Vec::new();
        Scaler::new()
            .scale(Layout::Rgb, &crop, (region.2, region.3), &mut scaled, want)
            .unwrap();
        let worst = px
            .iter()
            .zip(&scaled)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(
            worst <= 1,
            "the zoom differs from the scaled crop by up to {worst} levels"
        );
        if want == (region.2, region.3) {
            assert_eq!(px, crop, "at 1x the zoom is the crop, pixel for pixel");
        }
    }
}
