//! A8, A9, A11, A12, A14, A15: one input request at a time, many requests at once, panics, error bodies, the protocol version, held input released.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a8_concurrent_input_is_busy_and_never_interleaves() {
    let fx = Arc::new(Fx::new());
    let text: String = "abcdefghij".repeat(4);
    fx.knobs(|s| s.slow = Some(Duration::from_millis(50)));
    let first = {
        let fx = Arc::clone(&fx);
        let text = text.clone();
        tokio::spawn(async move { fx.run(json!([type_text(&text)])).await })
    };
    fx.wait_events(1, Duration::from_secs(5)).await;

    // While the first runs (40 chars x 50 ms), input and screenshots are
    // busy, at once (not after waiting for the first).
    let asked = Instant::now();
    let second = fx.run(json!([click(5, 5), type_text("zzz")])).await;
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "busy took {:?}",
        asked.elapsed()
    );
    second.assert_error(409, ErrorCode::Busy);
    assert_eq!(second.error().executed, None, "busy means nothing ran");
    let shot = fx.call(fx.post(paths::SCREENSHOT, &json!({}))).await;
    shot.assert_error(409, ErrorCode::Busy);
    let during = fx.events();
    assert!(
        !during.contains(&Event::Capture(Rect::full(SCREEN))),
        "the first request finished before the busy checks; the test proves nothing"
    );
    // Info and health are not input: they answer meanwhile.
    fx.call(fx.get(paths::INFO)).await.assert_ok();

    first.await.unwrap().assert_ok();
    fx.knobs(|s| s.slow = None);
    let mut want: Vec<Event> = text.chars().map(Event::Char).collect();
    want.extend([Event::Settle, Event::Capture(Rect::full(SCREEN))]);
    assert_eq!(
        fx.take_events(),
        want,
        "the busy requests' events interleaved"
    );

    // Right after the reply the gate is free again (no stale busy).
    fx.run(json!([click(5, 5)])).await.assert_ok();
    fx.call(fx.post(paths::SCREENSHOT, &json!({})))
        .await
        .assert_ok();
    let events = fx.take_events();
    assert_eq!(events[..3], [Event::Motion(5, 5), bd(1), bu(1)]);
}

// ---------------------------------------------------------------------
// A9: many requests at once
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a9_a_thousand_concurrent_requests_get_json_answers_and_health_answers() {
    let fx = Arc::new(Fx::build(Size::new(320, 240), |_| {}));
    let display = Arc::clone(&fx.api.display);
    let ticker = tokio::spawn(async move {
        loop {
            display.mark_ok();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1000usize {
        let fx = Arc::clone(&fx);
        tasks.spawn(async move {
            let req = match i % 4 {
                0 => bare(Method::GET, paths::HEALTH)
                    .body(Body::empty())
                    .unwrap(),
                1 => fx.get(paths::INFO),
                2 => fx.post(paths::SCREENSHOT, &json!({"format": "png"})),
                _ => fx.post(
                    paths::ACTIONS,
                    &json!({"actions": [click((i % 300) as i64, 7), type_text("ok")]}),
                ),
            };
            (i % 4, fx.call(req).await)
        });
    }
    let mut count: HashMap<(usize, u16), usize> = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        let (kind, reply) = done.expect("a request task panicked");
        let status = reply.status.as_u16();
        assert!(
            matches!(status, 200 | 409 | 503),
            "kind {kind}: {status} {}",
            reply
        );
        if status != 200 {
            assert!(
                matches!(reply.code(), ErrorCode::Busy | ErrorCode::Overloaded),
                "{}",
                reply
            );
        }
        *count.entry((kind, status)).or_default() += 1;
    }
    assert_eq!(
        count.get(&(0, 200)),
        Some(&250),
        "health must always answer: {count:?}"
    );
    assert!(!fx.desktop.is_finished(), "the desktop task died");
    // Every batch that ran was whole: nothing left held, input never split.
    let events = fx.take_events();
    assert_nothing_held(&events);
    let captures = events
        .iter()
        .filter(|e| matches!(e, Event::Capture(_)))
        .count();
    let ok = |kind| count.get(&(kind, 200)).copied().unwrap_or(0);
    let ok_input = ok(2) + ok(3);
    assert_eq!(captures, ok_input, "{count:?}");
    for job in events.split_inclusive(|e| matches!(e, Event::Capture(_))) {
        let whole = matches!(
            job,
            [Event::Capture(_)]
                | [
                    Event::Motion(_, 7),
                    Event::Button(1, true),
                    Event::Button(1, false),
                    Event::Char('o'),
                    Event::Char('k'),
                    Event::Settle,
                    Event::Capture(_),
                ]
        );
        assert!(whole, "a split or interleaved job: {job:?}");
    }

    fx.health().await.assert_ok();
    fx.run(json!([click(1, 1)])).await.assert_ok();
    ticker.abort();
}

// ---------------------------------------------------------------------
// A11: panics
// ---------------------------------------------------------------------

#[tokio::test]
async fn a11_a_panic_is_an_internal_error_and_releases_held_input() {
    let fx = Fx::new();
    // Primitives: 0 motion, 1 CTRL down, 2 SHIFT down, 3 button down (panics).
    fx.knobs(|s| s.panic_at = Some(3));
    let reply = fx
        .run(json!([{"type": "click", "button": "left", "x": 10, "y": 10, "keys": ["CTRL", "SHIFT"]}]))
        .await;
    reply.assert_error(500, ErrorCode::Internal);
    assert!(!reply.error().message.contains("fake"), "{reply}");
    assert!(!fx.desktop.is_finished(), "the desktop task died");
    // The daemon goes on: the next request is served normally, and only
    // after the panicking action's keys were released (the desktop task is
    // serial, so this order is deterministic). The wait for the gate works
    // around the stale busy pinned by `a11_after_a_panic_the_reply_comes_last`.
    fx.wait_idle(Duration::from_secs(2)).await;
    fx.run(json!([click(3, 3)])).await.assert_ok();
    assert_eq!(
        input_of(&fx.take_events(), Rect::full(SCREEN)),
        vec![
            Event::Motion(10, 10),
            kd("CTRL"),
            kd("SHIFT"),
            ku("SHIFT"),
            ku("CTRL"),
            Event::Motion(3, 3),
            bd(1),
            bu(1)
        ]
    );
    fx.call(fx.get(paths::INFO)).await.assert_ok();
    // A panic mid-drag: the button comes up too.
    fx.knobs(|s| s.panic_at = Some(s.primitives + 4));
    let reply = fx
        .run(
            json!([{"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 5, "y": 5},
            {"x": 9, "y": 9}], "keys": ["ALT"]}]),
        )
        .await;
    reply.assert_error(500, ErrorCode::Internal);
    fx.wait_idle(Duration::from_secs(2)).await;
    fx.run(json!([])).await.assert_ok();
    let events = fx.take_events();
    assert_nothing_held(&events);
    assert_eq!(
        events[..6],
        [
            Event::Motion(1, 1),
            kd("ALT"),
            bd(1),
            Event::Motion(5, 5),
            bu(1),
            ku("ALT")
        ]
    );
}

/// desktop.rs step 4: "releases any held input, drops the permit, then
/// replies, so the next request never sees a stale `busy`". When a job
/// panics, its `reply` sender and then its `permit` are dropped while
/// unwinding out of `Desktop::handle` (locals drop in reverse order:
/// reply before permit), and only afterwards does `recover_after_panic`
/// release the keys. So the 500 can arrive while keys are still held, and a
/// request sent right after it can get a stale 409 `busy`. Racy by nature:
/// each round can pass by luck, 20 rounds fail reliably while the bug is
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a11_after_a_panic_the_reply_comes_last() {
    let rounds = 20;
    let (mut held, mut busy) = (0, 0);
    for _ in 0..rounds {
        let fx = Fx::new();
        fx.knobs(|s| s.panic_at = Some(3));
        let reply = fx
            .run(json!([{"type": "click", "button": "left", "x": 10, "y": 10,
                "keys": ["CTRL", "SHIFT"]}]))
            .await;
        reply.assert_error(500, ErrorCode::Internal);
        // No waiting: the reply must come after the release and the permit.
        if !still_held(&fx.events()).is_empty() {
            held += 1;
        }
        if fx.run(json!([mv(1, 1)])).await.status == StatusCode::CONFLICT {
            busy += 1;
        }
    }
    assert_eq!(
        (held, busy),
        (0, 0),
        "of {rounds} panics: keys still held at the 500 {held} times, \
         the next request busy {busy} times"
    );
}

// ---------------------------------------------------------------------
// A12: nothing leaks through error bodies
// ---------------------------------------------------------------------

#[tokio::test]
async fn a12_error_bodies_leak_no_token_path_or_backtrace() {
    // Every reply goes through `check_reply`, which refuses error bodies
    // holding the token, a path, a backtrace or a panic message; this test
    // provokes one of each kind of error.
    let fx = Fx::build(Size::new(640, 480), |s| {
        s.deadline = Duration::from_millis(400);
    });
    let mut bodies = Vec::new();
    let mut keep = |r: Reply, code: ErrorCode| {
        assert_eq!(r.code(), code, "{r}");
        bodies.push(r.json);
    };
    keep(
        fx.call(bare(Method::GET, paths::INFO).body(Body::empty()).unwrap())
            .await,
        ErrorCode::Unauthorized,
    );
    let mut req = fx.get(paths::INFO);
    req.headers_mut()
        .insert(header::ORIGIN, "http://evil.test".parse().unwrap());
    keep(fx.call(req).await, ErrorCode::Forbidden);
    keep(fx.call(fx.get("/v1/x")).await, ErrorCode::NotFound);
    keep(
        fx.call(fx.get(paths::ACTIONS)).await,
        ErrorCode::MethodNotAllowed,
    );
    let mut big = vec![b' '; limits::MAX_BODY_BYTES + 1];
    big[0] = b'{';
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(big))
        .unwrap();
    keep(fx.call(req).await, ErrorCode::PayloadTooLarge);
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .body(Body::from("{}"))
        .unwrap();
    keep(fx.call(req).await, ErrorCode::UnsupportedMediaType);
    keep(fx.batch(json!({"actions": 5})).await, ErrorCode::BadRequest);
    keep(
        fx.run(json!([{"type": "keypress", "keys": ["NOPE"]}]))
            .await,
        ErrorCode::UnknownKey,
    );
    keep(
        fx.batch(json!({"actions": [], "expect_scale_map": ScaleMap::identity(Size::new(10, 10))}))
            .await,
        ErrorCode::StaleScaleMap,
    );
    fx.knobs(|s| s.panic_at = Some(0));
    keep(fx.run(json!([click(1, 1)])).await, ErrorCode::Internal);
    // See `a11_after_a_panic_the_reply_comes_last` for why this wait.
    fx.wait_idle(Duration::from_secs(2)).await;
    fx.knobs(|s| {
        s.fail_at = Some(s.primitives);
    });
    keep(
        fx.run(json!([click(1, 1)])).await,
        ErrorCode::DisplayUnavailable,
    );
    // The fatal error dropped the driver; the next request reconnects (to
    // a fresh fake), whose knobs are set next.
    fx.run(json!([])).await.assert_ok();
    assert_eq!(fx.drivers.lock().unwrap().len(), 2);
    fx.knobs(|s| s.slow = Some(Duration::from_millis(40)));
    keep(
        fx.run(json!([type_text(&"x".repeat(100))])).await,
        ErrorCode::Timeout,
    );
    assert_eq!(bodies.len(), 12);
    for b in &bodies {
        let text = b.to_string();
        assert!(!text.contains(fx.token()), "{text}");
        assert!(!text.contains(&fx.token()[..16]), "{text}");
        for leak in LEAKS {
            assert!(!text.contains(leak), "{text}");
        }
    }
}

// ---------------------------------------------------------------------
// A14: protocol version
// ---------------------------------------------------------------------

#[tokio::test]
async fn a14_info_reports_protocol_1_2_and_a_major_mismatch_is_refused_clearly() {
    let fx = Fx::new();
    let reply: InfoReply = serde_json::from_value(fx.call(fx.get(paths::INFO)).await.json).unwrap();
    assert_eq!(reply.state, DaemonState::Open);
    let info = reply.info;
    assert_eq!(info.protocol, "1.2");
    assert_eq!(info.protocol, PROTOCOL_VERSION);
    assert_eq!(info.daemon_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.display, Some(SCREEN));
    assert_eq!(info.limits, Limits::current());
    assert!(info.capabilities.xtest);
    assert!(check_protocol(&info.protocol).is_ok());
    assert!(check_protocol("1.7").is_ok());
    let err = check_protocol("2.0").unwrap_err();
    assert_eq!(
        err,
        sandtop_protocol::VersionError::Mismatch {
            theirs: "2.0".into()
        }
    );
    let err = err.to_string();
    assert!(
        err.contains("2.0") && err.contains(PROTOCOL_VERSION) && err.contains("major"),
        "unclear: {err}"
    );
    for bad in ["", "one", "v1.0", "-1.0"] {
        let err = check_protocol(bad).unwrap_err();
        assert!(
            matches!(&err, sandtop_protocol::VersionError::Unreadable(v) if v == bad),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains("unreadable"), "{bad:?}: {err}");
    }
    assert!(check_protocol("0.9").is_err());
}

// ---------------------------------------------------------------------
// A15: held input is released on error, deadline and cancel
// ---------------------------------------------------------------------

#[tokio::test]
async fn a15_a_driver_failure_releases_held_input_and_reports_partial() {
    // Primitives of [move(5,5), click(10,10) holding CTRL, SHIFT]:
    // 0 motion | 1 motion, 2 CTRL down, 3 SHIFT down, 4 button down,
    // 5 button up, 6 SHIFT up, 7 CTRL up.
    let actions = json!([
        mv(5, 5),
        {"type": "click", "button": "left", "x": 10, "y": 10, "keys": ["CTRL", "SHIFT"]}
    ]);
    for fail_at in 2..=7 {
        let fx = Fx::new();
        fx.knobs(|s| s.fail_at = Some(fail_at));
        let reply = fx.run(actions.clone()).await;
        reply.assert_error(503, ErrorCode::DisplayUnavailable);
        let e = reply.error();
        assert_eq!(
            (e.index, e.executed, e.partial),
            (Some(1), Some(1), Some(true)),
            "fail at {fail_at}: {}",
            reply
        );
        let events = fx.take_events();
        assert_nothing_held(&events);
        assert!(
            !events.contains(&Event::Settle),
            "no screenshot after a failure"
        );
        let tail: Vec<Event> = match fail_at {
            2 => vec![Event::Motion(10, 10)],
            3 => vec![kd("CTRL"), ku("CTRL")],
            4 => vec![kd("SHIFT"), ku("SHIFT"), ku("CTRL")],
            // The button went down: it comes up first, then the keys.
            5 => vec![bd(1), bu(1), ku("SHIFT"), ku("CTRL")],
            6 => vec![bu(1), ku("SHIFT"), ku("CTRL")],
            _ => vec![ku("SHIFT"), ku("CTRL")],
        };
        assert!(
            events.ends_with(&tail),
            "fail at {fail_at}: {events:?} should end with {tail:?}"
        );
        // The desktop reconnects and the next request is served.
        fx.run(json!([click(1, 1)])).await.assert_ok();
    }
}

#[tokio::test]
async fn a15_the_deadline_is_504_and_releases_held_input() {
    let fx = Fx::build(SCREEN, |s| s.deadline = Duration::from_millis(400));
    fx.knobs(|s| s.slow = Some(Duration::from_millis(20)));
    let points = 300; // 300 x 20 ms: well past the deadline
    let started = Instant::now();
    let reply = fx.run(json!([zigzag_drag(points, &["SHIFT"])])).await;
    reply.assert_error(504, ErrorCode::Timeout);
    let e = reply.error();
    assert_eq!(
        (e.index, e.executed, e.partial),
        (Some(0), Some(0), Some(true))
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the deadline did not stop the drag"
    );
    let events = fx.take_events();
    assert_nothing_held(&events);
    assert!(events.ends_with(&[bu(1), ku("SHIFT")]), "{events:?}");
    assert!(motions(&events).len() < points, "the drag ran to its end");
    assert!(!events.contains(&Event::Capture(Rect::full(SCREEN))));
    // The next request has its own deadline.
    fx.knobs(|s| s.slow = None);
    fx.run(json!([click(1, 1)])).await.assert_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_a_dropped_request_cancels_and_releases_held_input() {
    let fx = Fx::new();
    fx.knobs(|s| s.slow = Some(Duration::from_millis(20)));

    // Typing 200 characters takes 4 s; the client gives up after 100 ms.
    let text = "y".repeat(200);
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        fx.run(json!([type_text(&text)])),
    )
    .await;
    assert!(gave_up.is_err(), "the request finished within 100 ms");
    fx.wait_idle(Duration::from_secs(2)).await;
    let events = fx.take_events();
    let typed = chars(&events);
    assert!(typed > 0, "typing never started");
    assert!(
        typed < text.len() / 2,
        "typing went on after the client left: {typed} chars"
    );
    assert!(
        !events.contains(&Event::Settle),
        "no screenshot for a gone client"
    );

    // A drag holding keys: the button and the keys come up.
    let points = 300;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        fx.run(json!([zigzag_drag(points, &["CTRL", "ALT"])])),
    )
    .await;
    assert!(gave_up.is_err());
    fx.wait_idle(Duration::from_secs(2)).await;
    let events = fx.take_events();
    assert_nothing_held(&events);
    assert!(
        events.ends_with(&[bu(1), ku("ALT"), ku("CTRL")]),
        "{events:?}"
    );
    assert!(motions(&events).len() < points / 2);

    // Nothing is stuck.
    fx.knobs(|s| s.slow = None);
    fx.run(json!([click(2, 2)])).await.assert_ok();
}
