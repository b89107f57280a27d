//! A6 and the coordinates (docs/contract.md rule 4): validation before anything runs.

use super::*;

#[tokio::test]
async fn a6_out_of_bounds_in_model_space_is_422_with_index() {
    let fx = Fx::new();
    let small = json!({"size": {"width": 1280, "height": 720}});
    // (1300, 100) is a pixel of the 1920x1080 screen, not of the 1280x720 image.
    for (x, y) in [
        (1300, 100),
        (1280, 0),
        (0, 720),
        (-1, 5),
        (5, -1),
        (i64::MAX, 0),
    ] {
        let reply = fx
            .batch(json!({"actions": [mv(10, 10), click(x, y)], "screenshot": small}))
            .await;
        reply.assert_error(422, ErrorCode::OutOfBounds);
        let e = reply.error();
        assert_eq!(
            (e.index, e.executed, e.partial),
            (Some(1), Some(0), Some(false)),
            "({x}, {y})"
        );
        // Drag points and scroll positions are checked the same way.
        let reply = fx
            .batch(json!({"actions": [
                {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": x, "y": y}]}
            ], "screenshot": small}))
            .await;
        reply.assert_error(422, ErrorCode::OutOfBounds);
        assert_eq!(reply.error().index, Some(0));
    }
    // A fitted (contain) image is smaller than the requested size: 1024x576.
    let contain = json!({"size": {"width": 1024, "height": 768}});
    let reply = fx
        .batch(json!({"actions": [click(10, 600)], "screenshot": contain}))
        .await;
    reply.assert_error(422, ErrorCode::OutOfBounds);
    assert_eq!(fx.events(), vec![], "a refused batch reached the driver");
    // The corner pixel of the image is fine.
    fx.batch(json!({"actions": [click(1279, 719)], "screenshot": small}))
        .await
        .assert_ok();
}

#[tokio::test]
async fn a6_one_invalid_action_refuses_the_whole_batch() {
    let fx = Fx::new();
    let long_path: Vec<Value> = (0..=limits::MAX_DRAG_POINTS)
        .map(|i| json!({"x": i % 100, "y": 1}))
        .collect();
    let bad: Vec<(&str, Value, ErrorCode)> = vec![
        (
            "unknown held key",
            json!({"type": "click", "button": "left", "x": 1, "y": 1, "keys": ["HYPERDRIVE"]}),
            ErrorCode::UnknownKey,
        ),
        (
            "unknown chord key",
            json!({"type": "keypress", "keys": ["CTRL", "NOPE"]}),
            ErrorCode::UnknownKey,
        ),
        (
            "a combination as one name",
            json!({"type": "keypress", "keys": ["ctrl+c"]}),
            ErrorCode::UnknownKey,
        ),
        ("NUL in text", type_text("ab\0cd"), ErrorCode::InvalidAction),
        (
            "too long a drag path",
            json!({"type": "drag", "path": long_path}),
            ErrorCode::LimitExceeded,
        ),
        (
            "a drag of one point",
            json!({"type": "drag", "path": [{"x": 1, "y": 1}]}),
            ErrorCode::InvalidAction,
        ),
        (
            "too large a scroll",
            json!({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0,
                   "scroll_y": limits::MAX_SCROLL_DISTANCE + 1}),
            ErrorCode::LimitExceeded,
        ),
        (
            "too long a text",
            type_text(&"a".repeat(limits::MAX_TYPE_CHARS + 1)),
            ErrorCode::LimitExceeded,
        ),
        (
            "too many keys",
            json!({"type": "keypress", "keys": vec!["a"; limits::MAX_KEYS + 1]}),
            ErrorCode::LimitExceeded,
        ),
        (
            "an empty keypress",
            json!({"type": "keypress", "keys": []}),
            ErrorCode::InvalidAction,
        ),
        ("out of bounds", click(1920, 5), ErrorCode::OutOfBounds),
    ];
    for (what, action, code) in bad {
        // Actions 0 and 1 are valid and come first: they must not run either.
        let reply = fx
            .run(json!([mv(10, 10), type_text("hello"), action]))
            .await;
        assert_eq!(
            (reply.status.as_u16(), reply.code()),
            (422, code),
            "{what}: {}",
            reply
        );
        let e = reply.error();
        assert_eq!(
            (e.index, e.executed, e.partial),
            (Some(2), Some(0), Some(false)),
            "{what}"
        );
        assert_eq!(fx.events(), vec![], "{what}: the batch partly ran");
    }
    // Too many actions: no single action is at fault.
    let many = vec![mv(1, 1); limits::MAX_ACTIONS + 1];
    let reply = fx.run(json!(many)).await;
    reply.assert_error(422, ErrorCode::LimitExceeded);
    assert_eq!(
        (reply.error().index, reply.error().executed),
        (None, Some(0))
    );
    assert_eq!(fx.events(), vec![]);
    // The same batch without the bad action runs.
    let reply = fx.run(json!([mv(10, 10), type_text("hello")])).await;
    assert_eq!(reply.batch().executed, 2);
}

#[tokio::test]
async fn a6_stale_scale_map_and_bad_screenshot_options_run_nothing() {
    let fx = Fx::new();
    let stale = ScaleMap::identity(Size::new(1280, 800));
    let reply = fx
        .batch(json!({"actions": [click(5, 5)], "expect_scale_map": stale}))
        .await;
    reply.assert_error(409, ErrorCode::StaleScaleMap);
    assert_eq!(reply.error().executed, Some(0));
    let outside = json!({"region": {"x": 1900, "y": 0, "width": 100, "height": 10}});
    let reply = fx
        .batch(json!({"actions": [click(5, 5)], "screenshot": outside}))
        .await;
    reply.assert_error(400, ErrorCode::BadRequest);
    assert_eq!(reply.error().executed, Some(0));
    let reply = fx.call(fx.post(paths::SCREENSHOT, &outside)).await;
    reply.assert_error(400, ErrorCode::BadRequest);
    assert_eq!(fx.events(), vec![]);
    // The map the daemon itself reports is not stale.
    let shot: ScreenshotResponse = serde_json::from_value(
        fx.call(fx.post(
            paths::SCREENSHOT,
            &json!({"size": {"width": 960, "height": 540}}),
        ))
        .await
        .json,
    )
    .unwrap();
    fx.batch(json!({
        "actions": [click(5, 5)],
        "screenshot": {"size": {"width": 960, "height": 540}},
        "expect_scale_map": shot.screenshot.scale_map,
    }))
    .await
    .assert_ok();
}

// ---------------------------------------------------------------------
// Coordinates (docs/contract.md rule 4)
// ---------------------------------------------------------------------

#[tokio::test]
async fn coordinates_map_through_scale_map_to_screen() {
    let fx = Fx::new();
    let cases: Vec<(Value, Vec<(i64, i64)>)> = vec![
        (
            json!({"size": {"width": 960, "height": 540}}),
            vec![(100, 50), (0, 0), (959, 539), (480, 270)],
        ),
        (json!({}), vec![(0, 0), (1919, 1079), (123, 456)]),
        (
            json!({"size": {"width": 1280, "height": 800}, "fit": "stretch"}),
            vec![(0, 0), (1279, 799), (640, 400), (333, 777)],
        ),
        (
            json!({"size": {"width": 200, "height": 100},
                   "region": {"x": 100, "y": 50, "width": 400, "height": 200}}),
            vec![(0, 0), (199, 99), (100, 50)],
        ),
        (
            json!({"region": {"x": 1000, "y": 500, "width": 300, "height": 200}}),
            vec![(0, 0), (299, 199)],
        ),
    ];
    for (options, points) in cases {
        let opts: ScreenshotOptions = serde_json::from_value(options.clone()).unwrap();
        let map = ScaleMap::fit(SCREEN, opts.region, opts.size, opts.fit).unwrap();
        let actions: Vec<Value> = points.iter().map(|&(x, y)| click(x, y)).collect();
        let reply = fx
            .batch(json!({"actions": actions, "screenshot": options}))
            .await;
        let batch = reply.batch();
        assert_eq!(
            batch.screenshot.as_ref().unwrap().scale_map,
            map,
            "{options}"
        );
        assert_eq!(
            (
                batch.screenshot.as_ref().unwrap().width,
                batch.screenshot.as_ref().unwrap().height
            ),
            (map.image.width, map.image.height)
        );
        assert_eq!(
            png_size(batch.screenshot.as_ref().unwrap()),
            (map.image.width, map.image.height)
        );
        let input = input_of(&fx.take_events(), map.region);
        let want: Vec<(u32, u32)> = points
            .iter()
            .map(|&(x, y)| map.to_screen(x, y).unwrap())
            .collect();
        assert_eq!(motions(&input), want, "{options}");
    }
    // The brief's example, spelled out.
    let reply = fx
        .batch(json!({"actions": [click(100, 50)],
                      "screenshot": {"size": {"width": 960, "height": 540}}}))
        .await;
    reply.assert_ok();
    assert_eq!(fx.take_events()[0], Event::Motion(201, 101));
}

/// Width and height from a PNG's IHDR.
pub(crate) fn png_size(shot: &Screenshot) -> (u32, u32) {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&shot.data)
        .unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}
