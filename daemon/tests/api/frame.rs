//! `/v1/frame`: a frame at once for a new viewer, none while nothing
//! changes, one after input, never `busy`, the strict body.

use super::*;

fn frame_body(after: u64, wait_ms: u32) -> Value {
    json!({ "after": after, "wait_ms": wait_ms, "max_width": 960, "quality": 60 })
}

fn decoded(reply: &Value) -> Vec<u8> {
    let data = reply["image"]["data"].as_str().unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap()
}

#[tokio::test]
async fn a_new_viewer_gets_a_frame_at_once_then_none_until_something_changes() {
    let fx = Fx::new();
    let first = fx.call(fx.post(paths::FRAME, &frame_body(0, 0))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.json["changed"], json!(true));
    let seq = first.json["seq"].as_u64().unwrap();
    assert!(seq > 0);
    // Scaled to the width asked, the screen's aspect kept, a real JPEG.
    assert_eq!(first.json["image"]["width"], json!(960));
    assert_eq!(first.json["image"]["height"], json!(540));
    assert_eq!(first.json["screen"], json!({"width": 1920, "height": 1080}));
    let jpeg = decoded(&first.json);
    assert_eq!(&jpeg[..3], &[0xff, 0xd8, 0xff], "JPEG's SOI");
    assert!(fx.events().iter().any(|e| matches!(e, Event::Capture(_))));

    // Nothing changes: the wait runs out with no capture and no image.
    let captures = |fx: &Fx| {
        fx.events()
            .iter()
            .filter(|e| matches!(e, Event::Capture(_)))
            .count()
    };
    let before = captures(&fx);
    let t = Instant::now();
    let idle = fx.call(fx.post(paths::FRAME, &frame_body(seq, 300))).await;
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(idle.json["changed"], json!(false));
    assert_eq!(idle.json["seq"], json!(seq));
    assert!(idle.json.get("image").is_none());
    assert_eq!(captures(&fx), before, "an idle desktop is not captured");

    // Input changes the counter: a waiting viewer gets the next frame.
    let waiter = {
        let router = fx.router.clone();
        let req = fx.post(paths::FRAME, &frame_body(seq, 2000));
        tokio::spawn(async move { router.oneshot(req).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = fx.run(json!([click(5, 5)])).await;
    assert_eq!(r.status, StatusCode::OK);
    let resp = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let next = check_reply(paths::FRAME, StatusCode::OK, &body, fx.token());
    assert_eq!(next["changed"], json!(true));
    assert!(next["seq"].as_u64().unwrap() > seq);
}

/// The pointer is part of the picture a viewer sees: the fake driver's
/// cursor (a 2x2 green square at 1,1) is drawn over its screen pattern,
/// at full resolution in the lossless snapshot format.
#[tokio::test]
async fn a_frame_shows_the_pointer_where_it_is() {
    let fx = Fx::new();
    let body = json!({ "after": 0, "wait_ms": 0, "format": "png" });
    let r = fx.call(fx.post(paths::FRAME, &body)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["image"]["width"], json!(1920));
    let png = decoded(&r.json);
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .unwrap();
    let mut px = vec![0u8; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut px).unwrap();
    assert_eq!((info.width, info.height), (1920, 1080));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let at = |x: usize, y: usize| {
        let i = (y * 1920 + x) * 3;
        [px[i], px[i + 1], px[i + 2]]
    };
    // The screen's own pattern is RGB (x^y, y, x) around the pointer.
    assert_eq!(at(0, 0), [0, 0, 0]);
    assert_eq!(at(3, 3), [0, 3, 3]);
    assert_eq!(at(5, 2), [7, 2, 5]);
    for (x, y) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
        assert_eq!(at(x, y), [0, 255, 0], "the pointer at {x},{y}");
    }
}

#[tokio::test]
async fn a_frame_never_takes_the_input_gate() {
    let fx = Fx::new();
    // Another input request holds the gate: actions are `busy`, frames
    // are not.
    let held = Arc::clone(&fx.api.desktop.gate)
        .try_acquire_owned()
        .unwrap();
    let busy = fx.run(json!([click(1, 1)])).await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    let f = fx.call(fx.post(paths::FRAME, &frame_body(0, 0))).await;
    assert_eq!(f.status, StatusCode::OK);
    assert_eq!(f.json["changed"], json!(true));
    drop(held);
}

#[tokio::test]
async fn a_snapshot_is_a_full_resolution_png() {
    let fx = Fx::new();
    let r = fx
        .call(fx.post(paths::FRAME, &json!({"after": 0, "format": "png"})))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["image"]["width"], json!(1920));
    let png = decoded(&r.json);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

#[tokio::test]
async fn frame_requests_are_strict_and_their_ranges_named() {
    let fx = Fx::new();
    for (body, field) in [
        (json!({"after": 0, "wait_ms": 2001}), "wait_ms"),
        (json!({"after": 0, "quality": 0}), "quality"),
        (json!({"after": 0, "max_width": 4}), "max_width"),
        (json!({"after": 0, "fps": 30}), "fps"),
    ] {
        let r = fx.call(fx.post(paths::FRAME, &body)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        let m = r.json["message"].as_str().unwrap();
        assert!(m.contains(field), "{body}: {m}");
    }
    // The token is needed like everywhere but health.
    let r = fx
        .call(
            bare(Method::POST, paths::FRAME)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[test]
fn frame_schemas_have_exactly_the_fields_of_the_rust_types() {
    use sandtop_protocol::frame::{FrameFormat, FrameImage, FrameReply, FrameRequest};
    let screen = Size::new(1920, 1080);
    let map = ScaleMap::fit(screen, None, Some(Size::new(960, 540)), Fit::Stretch).unwrap();
    let req = FrameRequest {
        after: 1,
        wait_ms: 2,
        max_width: Some(960),
        format: FrameFormat::Png,
        quality: Some(4),
    };
    assert_schema_fields("FrameRequest", &serde_json::to_value(req).unwrap());
    let image = FrameImage {
        format: FrameFormat::Jpeg,
        width: 960,
        height: 540,
        data: "/9j/".into(),
        scale_map: map,
        capture_ms: 1.0,
        encode_ms: 2.0,
    };
    assert_schema_fields("FrameImage", &serde_json::to_value(&image).unwrap());
    let reply = FrameReply {
        seq: 3,
        changed: true,
        screen,
        image: Some(image),
    };
    assert_schema_fields("FrameReply", &serde_json::to_value(&reply).unwrap());
    assert!(
        validator(daemon_spec(), "FrameReply").is_valid(&serde_json::to_value(&reply).unwrap())
    );
}
