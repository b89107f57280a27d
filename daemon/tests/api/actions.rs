//! The semantics of the nine actions (docs/contract.md section 1); A7: no shell, literal typing.

use super::*;

#[tokio::test]
async fn held_keys_wrap_pointer_actions_and_release_in_reverse() {
    let fx = Fx::new();
    let keys = ["CTRL", "SHIFT"];
    let down = [kd("CTRL"), kd("SHIFT")];
    let up = [ku("SHIFT"), ku("CTRL")];
    let cases: Vec<(Value, Vec<Event>)> = vec![
        (
            json!({"type": "click", "button": "left", "x": 10, "y": 20, "keys": keys}),
            [
                vec![Event::Motion(10, 20)],
                down.to_vec(),
                vec![bd(1), bu(1)],
                up.to_vec(),
            ]
            .concat(),
        ),
        (
            json!({"type": "double_click", "x": 30, "y": 40, "keys": keys}),
            [
                vec![Event::Motion(30, 40)],
                down.to_vec(),
                vec![bd(1), bu(1), bd(1), bu(1)],
                up.to_vec(),
            ]
            .concat(),
        ),
        (
            json!({"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 10, "y": 5}], "keys": keys}),
            [
                vec![Event::Motion(0, 0)],
                down.to_vec(),
                vec![bd(1), Event::Motion(10, 5), bu(1)],
                up.to_vec(),
            ]
            .concat(),
        ),
        (
            json!({"type": "move", "x": 50, "y": 60, "keys": keys}),
            [down.to_vec(), vec![Event::Motion(50, 60)], up.to_vec()].concat(),
        ),
        (
            json!({"type": "scroll", "x": 70, "y": 80, "scroll_x": 0, "scroll_y": 50, "keys": keys}),
            [
                vec![Event::Motion(70, 80)],
                down.to_vec(),
                vec![bd(5), bu(5)],
                up.to_vec(),
            ]
            .concat(),
        ),
    ];
    for (action, want) in cases {
        fx.run(json!([action])).await.assert_ok();
        let got = input_of(&fx.take_events(), Rect::full(SCREEN));
        assert_eq!(got, want, "{action}");
    }
    // Without keys (absent, null, empty) nothing is pressed but the button.
    for keys in [json!(null), json!([])] {
        fx.run(json!([{"type": "click", "button": "left", "x": 1, "y": 2, "keys": keys}]))
            .await
            .assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            vec![Event::Motion(1, 2), bd(1), bu(1)]
        );
    }
}

#[tokio::test]
async fn click_buttons_map_to_x_buttons() {
    let fx = Fx::new();
    for (name, number) in [
        ("left", 1),
        ("wheel", 2),
        ("right", 3),
        ("back", 8),
        ("forward", 9),
    ] {
        fx.run(json!([{"type": "click", "button": name, "x": 4, "y": 5}]))
            .await
            .assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            vec![Event::Motion(4, 5), bd(number), bu(number)],
            "{name}"
        );
    }
}

/// Checks a drag's motions after the button went down: every path point
/// in order, nothing but motions, consecutive motions at most 16 px apart
/// on each axis.
fn check_drag(input: &[Event], path: &[(u32, u32)], held: &[&str]) {
    let n_held = held.len();
    assert_eq!(input[0], Event::Motion(path[0].0, path[0].1));
    let downs: Vec<Event> = held.iter().map(|k| kd(k)).collect();
    assert_eq!(&input[1..=n_held], &downs[..]);
    assert_eq!(input[n_held + 1], bd(1));
    let tail: Vec<Event> = [vec![bu(1)], held.iter().rev().map(|k| ku(k)).collect()].concat();
    let end = input.len() - tail.len();
    assert_eq!(&input[end..], &tail[..]);
    let moves = &input[n_held + 2..end];
    let pts: Vec<(u32, u32)> = moves
        .iter()
        .map(|e| match *e {
            Event::Motion(x, y) => (x, y),
            ref other => panic!("{other:?} while dragging"),
        })
        .collect();
    // Every path point, in order.
    let mut next = 1;
    for p in &pts {
        if next < path.len() && *p == path[next] {
            next += 1;
        }
    }
    assert_eq!(
        next,
        path.len(),
        "not every path point was visited in order: {pts:?}"
    );
    assert_eq!(pts.last(), path.last());
    let mut prev = path[0];
    for &p in &pts {
        assert!(
            p.0.abs_diff(prev.0) <= 16 && p.1.abs_diff(prev.1) <= 16,
            "a jump from {prev:?} to {p:?}"
        );
        prev = p;
    }
}

#[tokio::test]
async fn drag_visits_every_point_in_order_in_small_steps() {
    let fx = Fx::new();
    let path = [
        (10, 10),
        (200, 10),
        (200, 300),
        (50, 50),
        (51, 51),
        (51, 51),
        (900, 700),
    ];
    let body: Vec<Value> = path.iter().map(|&(x, y)| json!({"x": x, "y": y})).collect();
    fx.run(json!([{"type": "drag", "path": body, "keys": ["ALT"]}]))
        .await
        .assert_ok();
    let input = input_of(&fx.take_events(), Rect::full(SCREEN));
    check_drag(&input, &path, &["ALT"]);
    assert!(
        motions(&input).len() > 40,
        "intermediate motions are missing"
    );
    // Scaled: the path is mapped point by point.
    let map = ScaleMap::fit(SCREEN, None, Some(Size::new(960, 540)), Fit::Contain).unwrap();
    let model = [(10i64, 10i64), (100, 200), (400, 20)];
    let body: Vec<Value> = model
        .iter()
        .map(|&(x, y)| json!({"x": x, "y": y}))
        .collect();
    fx.batch(json!({"actions": [{"type": "drag", "path": body}],
                    "screenshot": {"size": {"width": 960, "height": 540}}}))
        .await
        .assert_ok();
    let screen: Vec<(u32, u32)> = model
        .iter()
        .map(|&(x, y)| map.to_screen(x, y).unwrap())
        .collect();
    check_drag(&input_of(&fx.take_events(), map.region), &screen, &[]);
}

#[tokio::test]
async fn drag_long_segment_moves_at_most_16px_per_motion() {
    let fx = Fx::new();
    let path = [(0, 500), (1919, 500), (0, 0)];
    let body: Vec<Value> = path.iter().map(|&(x, y)| json!({"x": x, "y": y})).collect();
    fx.run(json!([{"type": "drag", "path": body}]))
        .await
        .assert_ok();
    check_drag(&input_of(&fx.take_events(), Rect::full(SCREEN)), &path, &[]);
}

#[tokio::test]
async fn keypress_presses_in_order_and_releases_in_reverse() {
    let fx = Fx::new();
    fx.run(json!([{"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]}]))
        .await
        .assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            kd("CTRL"),
            kd("SHIFT"),
            kd("t"),
            ku("t"),
            ku("SHIFT"),
            ku("CTRL")
        ]
    );
    assert_eq!(
        ks("t"),
        xkeysym::key::t,
        "T is the T key, not a shifted one"
    );
    fx.run(json!([{"type": "keypress", "keys": ["ENTER"]}]))
        .await
        .assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Key(xkeysym::key::Return, true),
            Event::Key(xkeysym::key::Return, false)
        ]
    );
}

#[tokio::test]
async fn scroll_distance_becomes_wheel_clicks() {
    let fx = Fx::new();
    let clicks = |b: u8, n: usize| -> Vec<Event> { (0..n).flat_map(|_| [bd(b), bu(b)]).collect() };
    let cases: Vec<(i64, i64, Vec<Event>)> = vec![
        (0, 300, clicks(5, 6)),
        (-100, 0, clicks(6, 2)),
        (-100, 300, [clicks(5, 6), clicks(6, 2)].concat()),
        (0, -50, clicks(4, 1)),
        (75, 0, clicks(7, 2)),
        (1, -1, [clicks(4, 1), clicks(7, 1)].concat()),
        (0, 0, vec![]),
        (0, 10_000, clicks(5, 200)),
    ];
    for (sx, sy, wheel) in cases {
        fx.run(json!([{"type": "scroll", "x": 100, "y": 200, "scroll_x": sx, "scroll_y": sy}]))
            .await
            .assert_ok();
        let want = [vec![Event::Motion(100, 200)], wheel].concat();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            want,
            "scroll ({sx}, {sy})"
        );
    }
}

/// What typing `text` must send to the driver.
fn typed(text: &str) -> Vec<Event> {
    let ret = [
        Event::Key(xkeysym::key::Return, true),
        Event::Key(xkeysym::key::Return, false),
    ];
    let tab = [
        Event::Key(xkeysym::key::Tab, true),
        Event::Key(xkeysym::key::Tab, false),
    ];
    let mut out = Vec::new();
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\r' => {
                if it.peek() == Some(&'\n') {
                    it.next();
                }
                out.extend(ret.clone());
            }
            '\n' => out.extend(ret.clone()),
            '\t' => out.extend(tab.clone()),
            c => out.push(Event::Char(c)),
        }
    }
    out
}

#[tokio::test]
async fn type_maps_newlines_and_tabs_to_keys() {
    let fx = Fx::new();
    fx.run(json!([type_text("a\r\nb\tc")])).await.assert_ok();
    let r = |down| Event::Key(xkeysym::key::Return, down);
    let t = |down| Event::Key(xkeysym::key::Tab, down);
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Char('a'),
            r(true),
            r(false),
            Event::Char('b'),
            t(true),
            t(false),
            Event::Char('c'),
        ]
    );
    // `\n\r` is two Returns, `\r` alone is one.
    fx.run(json!([type_text("x\n\ry\rz")])).await.assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Char('x'),
            r(true),
            r(false),
            r(true),
            r(false),
            Event::Char('y'),
            r(true),
            r(false),
            Event::Char('z'),
        ]
    );
}

#[tokio::test]
async fn screenshot_action_is_a_noop_and_the_final_screenshot_is_taken_once() {
    let fx = Fx::new();
    let reply = fx
        .run(json!([
            {"type": "screenshot"},
            click(1, 1),
            {"type": "screenshot"},
            {"type": "wait"},
            {"type": "screenshot"}
        ]))
        .await;
    let batch = reply.batch();
    assert_eq!(batch.executed, 5);
    assert!(batch.timings.settled);
    let events = fx.take_events();
    // The wait settles once; the final screenshot settles and captures once.
    assert_eq!(
        events,
        vec![
            Event::Motion(1, 1),
            bd(1),
            bu(1),
            Event::Settle,
            Event::Settle,
            Event::Capture(Rect::full(SCREEN)),
        ]
    );
    // An empty batch only takes the screenshot.
    assert_eq!(fx.run(json!([])).await.batch().executed, 0);
    assert_eq!(
        fx.take_events(),
        vec![Event::Settle, Event::Capture(Rect::full(SCREEN))]
    );
}

#[tokio::test]
async fn screenshot_endpoint_captures_now_with_the_requested_options() {
    let fx = Fx::new();
    // No body, no content type: the defaults.
    let req = fx
        .authed(Method::POST, paths::SCREENSHOT)
        .body(Body::empty())
        .unwrap();
    let shot: ScreenshotResponse = serde_json::from_value(fx.call(req).await.json).unwrap();
    assert_eq!(shot.screenshot.scale_map, ScaleMap::identity(SCREEN));
    assert_eq!(shot.screenshot.format, ImageFormat::Png);
    assert_eq!(png_size(&shot.screenshot), (1920, 1080));
    assert!(!shot.timings.settled, "a lone screenshot does not settle");
    assert_eq!(fx.take_events(), vec![Event::Capture(Rect::full(SCREEN))]);

    let region = Rect {
        x: 100,
        y: 50,
        width: 800,
        height: 400,
    };
    let reply = fx
        .call(fx.post(
            paths::SCREENSHOT,
            &json!({"size": {"width": 400, "height": 400}, "region": region,
                    "format": "webp", "cursor": true}),
        ))
        .await;
    let shot: ScreenshotResponse = serde_json::from_value(reply.json).unwrap();
    assert_eq!(shot.screenshot.format, ImageFormat::Webp);
    assert_eq!((shot.screenshot.width, shot.screenshot.height), (400, 200));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&shot.screenshot.data)
        .unwrap();
    assert_eq!((&bytes[..4], &bytes[8..12]), (&b"RIFF"[..], &b"WEBP"[..]));
    assert_eq!(fx.take_events(), vec![Event::Capture(region)]);

    // JPEG (protocol 1.2): baseline, at the size asked for.
    let reply = fx
        .call(fx.post(
            paths::SCREENSHOT,
            &json!({"size": {"width": 640, "height": 360}, "format": "jpeg"}),
        ))
        .await;
    let shot: ScreenshotResponse = serde_json::from_value(reply.json).unwrap();
    assert_eq!(shot.screenshot.format, ImageFormat::Jpeg);
    assert_eq!(shot.screenshot.format.mime(), "image/jpeg");
    assert_eq!((shot.screenshot.width, shot.screenshot.height), (640, 360));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&shot.screenshot.data)
        .unwrap();
    let mut dec = jpeg_decoder::Decoder::new(&bytes[..]);
    let px = dec.decode().unwrap();
    let info = dec.info().unwrap();
    assert_eq!((info.width, info.height), (640, 360));
    assert_eq!(
        info.coding_process,
        jpeg_decoder::CodingProcess::DctSequential
    );
    assert_eq!(px.len(), 640 * 360 * 3);
}

// ---------------------------------------------------------------------
// A7: no shell, literal typing
// ---------------------------------------------------------------------

#[tokio::test]
async fn a7_typing_corpus_reaches_the_driver_literally() {
    let fx = Fx::new();
    let corpus = [
        "$(touch /tmp/pwned)",
        "`touch /tmp/pwned`",
        "'single' \"double\" \\\"escaped\\\"",
        "-rf --no-preserve-root",
        "--help",
        "; rm -rf ~ && echo pwned | sh #",
        "${HOME} $PATH %s %n %x {{7*7}}",
        "emoji 😀👍🏽👩‍👩‍👧 ✓",
        "CJK 中文字符 日本語 한국어",
        "line one\nline two\r\nline three\rend",
        "col1\tcol2\t\tcol4",
        "<script>alert(1)</script>",
        "\u{202e}reversed\u{200b}zero-width",
    ];
    for text in corpus {
        fx.run(json!([type_text(text)])).await.assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            typed(text),
            "{text:?}"
        );
    }
    // All of it in one batch, in order.
    let all: Vec<Value> = corpus.iter().map(|t| type_text(t)).collect();
    fx.run(json!(all)).await.assert_ok();
    let want: Vec<Event> = corpus.iter().flat_map(|t| typed(t)).collect();
    assert_eq!(input_of(&fx.take_events(), Rect::full(SCREEN)), want);
}

#[tokio::test]
async fn a7_nul_and_control_characters_are_refused() {
    let fx = Fx::new();
    for text in [
        "\0",
        "abc\0def",
        "bell\u{7}",
        "esc\u{1b}[2J",
        "del\u{7f}",
        "nel\u{85}",
    ] {
        let reply = fx.run(json!([type_text("fine"), type_text(text)])).await;
        reply.assert_error(422, ErrorCode::InvalidAction);
        assert_eq!(reply.error().index, Some(1), "{text:?}");
        assert_eq!(fx.events(), vec![], "{text:?}: something was typed");
    }
}
