//! A1, A3, A4, A5: the token; browsers and foreign hosts; bad requests get JSON errors and wedge nothing; body limits.

use super::*;

#[tokio::test]
async fn a1_missing_or_wrong_token_is_401_with_no_side_effect() {
    let fx = Fx::new();
    let other_session = Token::generate().unwrap();
    let token = fx.token().to_string();
    let mut off_by_one = token.clone();
    off_by_one.replace_range(63.., if token.ends_with('0') { "1" } else { "0" });
    let auths: Vec<Option<String>> = vec![
        None,
        Some(format!("Bearer {}", other_session.expose())),
        Some(format!("Bearer {off_by_one}")),
        Some(format!("Bearer {}", &token[..63])),
        Some(format!("Bearer {token}0")),
        Some(token.clone()),
        Some(format!("Basic {token}")),
        Some("Bearer ".into()),
        Some(String::new()),
    ];
    let batch = serde_json::to_vec(&json!({"actions": [click(10, 10), type_text("x")]})).unwrap();
    let endpoints: [(Method, &str, Option<&[u8]>); 5] = [
        (Method::GET, paths::INFO, None),
        (Method::POST, paths::ACTIONS, Some(batch.as_slice())),
        (Method::POST, paths::SCREENSHOT, None),
        (Method::POST, paths::SCREENSHOT, Some(b"{}".as_slice())),
        (Method::GET, "/v1/does-not-exist", None),
    ];
    for auth in &auths {
        for (method, path, body) in &endpoints {
            let mut req = bare(method.clone(), path);
            if let Some(a) = auth {
                req = req.header(header::AUTHORIZATION, a);
            }
            if body.is_some() {
                req = req.header(header::CONTENT_TYPE, "application/json");
            }
            let body = body.map_or_else(Body::empty, |b| Body::from(b.to_vec()));
            let reply = fx.call(req.body(body).unwrap()).await;
            reply.assert_error(401, ErrorCode::Unauthorized);
            assert_eq!(
                reply.headers.get(header::WWW_AUTHENTICATE).unwrap(),
                "Bearer",
                "{path}"
            );
        }
        // The token in the query string is no token.
        let uri = format!("{}?token={token}", paths::INFO);
        let reply = fx
            .call(bare(Method::GET, &uri).body(Body::empty()).unwrap())
            .await;
        reply.assert_error(401, ErrorCode::Unauthorized);
    }
    assert_eq!(fx.events(), vec![], "a refused request reached the driver");

    // The right token works (so the refusals above were about the token).
    fx.call(fx.get(paths::INFO)).await.assert_ok();
    fx.batch(serde_json::from_slice(&batch).unwrap())
        .await
        .assert_ok();
    assert!(!fx.events().is_empty());
}

/// A VM guest's daemon starts before its token exists (`--await-token`):
/// health answers, every other endpoint is 401 whatever the header, until
/// the token arrives; then that token works.
#[tokio::test]
async fn a1_awaiting_its_token_only_health_answers() {
    let slot = Arc::new(std::sync::OnceLock::new());
    let awaited = Arc::clone(&slot);
    let fx = Fx::build(SCREEN, move |s| s.token = awaited);
    fx.health().await.assert_ok();
    for auth in [
        None,
        Some("Bearer ".to_string()),
        Some(format!("Bearer {}", "0".repeat(64))),
    ] {
        let mut req = bare(Method::GET, paths::INFO);
        if let Some(a) = &auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        fx.call(req.body(Body::empty()).unwrap())
            .await
            .assert_error(401, ErrorCode::Unauthorized);
    }
    assert!(slot.set(Token::generate().unwrap()).is_ok());
    fx.call(fx.get(paths::INFO)).await.assert_ok();
}

#[tokio::test]
async fn a1_health_needs_no_token() {
    let fx = Fx::new();
    fx.api.display.mark_ok();
    let reply = fx.health().await;
    reply.assert_ok();
    let health: Health = serde_json::from_value(reply.json).unwrap();
    assert_eq!(health.status, HealthStatus::Ok);
    assert!(health.x_connected);
    assert_eq!(health.display, Some(SCREEN));
    assert_eq!(health.window_manager, None);
    // With a wrong token it still answers (it ignores the header).
    let req = bare(Method::GET, paths::HEALTH)
        .header(header::AUTHORIZATION, "Bearer nonsense")
        .body(Body::empty())
        .unwrap();
    fx.call(req).await.assert_ok();
}

#[tokio::test]
async fn health_reports_a_dead_display_as_503_down() {
    let fx = Fx::new();
    fx.api.display.mark_down();
    let reply = fx.health().await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let health: Health = serde_json::from_value(reply.json).unwrap();
    assert_eq!(health.status, HealthStatus::Down);
    assert!(!health.x_connected);
    fx.api.display.mark_ok();
    fx.health().await.assert_ok();
}

// ---------------------------------------------------------------------
// A3: browsers and foreign hosts
// ---------------------------------------------------------------------

#[tokio::test]
async fn a3_browser_headers_and_foreign_hosts_are_403_with_no_side_effect() {
    let fx = Fx::new();
    fx.api.display.mark_ok();
    let body = json!({"actions": [click(10, 10)]});
    let browser_headers = [
        ("origin", "http://localhost:8080"),
        ("origin", "null"),
        ("sec-fetch-site", "same-origin"),
        ("sec-fetch-mode", "no-cors"),
        ("sec-fetch-dest", "empty"),
        ("sec-fetch-user", "?1"),
        ("sec-fetch-anything", "x"),
    ];
    for (name, value) in browser_headers {
        // With a valid token and a valid body: still refused.
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut().insert(name, value.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
        let mut req = fx.post(paths::SCREENSHOT, &json!({}));
        req.headers_mut().insert(name, value.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
        // Health too: a web page must not even probe the daemon.
        let req = bare(Method::GET, paths::HEALTH)
            .header(name, value)
            .body(Body::empty())
            .unwrap();
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
    }
    let foreign = [
        "evil.test",
        "localhost.evil.test",
        "evil.test:80",
        "127.0.0.1.nip.io",
        "sandtopd.evil.test:1234",
        "10.0.0.1",
    ];
    for host in foreign {
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut()
            .insert(header::HOST, host.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
        let req = Request::builder()
            .uri(paths::HEALTH)
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
    }
    // Two Host headers, the first allowed: refused, whatever the second.
    for second in ["evil.test", "localhost"] {
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut()
            .append(header::HOST, "localhost".parse().unwrap());
        req.headers_mut()
            .append(header::HOST, second.parse().unwrap());
        fx.call(req).await.assert_error(403, ErrorCode::Forbidden);
    }
    assert_eq!(fx.events(), vec![], "a refused request reached the driver");

    for host in [
        "localhost:1234",
        "sandtopd",
        "localhost",
        "127.0.0.1:9",
        "[::1]:80",
    ] {
        let mut req = fx.post(paths::ACTIONS, &body);
        req.headers_mut()
            .insert(header::HOST, host.parse().unwrap());
        fx.call(req).await.assert_ok();
    }
    assert_eq!(motions(&fx.events()).len(), 5);
}

// ---------------------------------------------------------------------
// A4: bad requests get JSON errors and do not wedge anything
// ---------------------------------------------------------------------

#[tokio::test]
async fn a4_bad_requests_get_json_errors_and_the_next_request_succeeds() {
    let fx = Fx::new();
    let json_req = |method: Method, path: &str, body: &str| {
        fx.authed(method, path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let with_type = |ct: Option<&str>, path: &str, body: &str| {
        let mut r = fx.authed(Method::POST, path);
        if let Some(ct) = ct {
            r = r.header(header::CONTENT_TYPE, ct);
        }
        r.body(Body::from(body.to_string())).unwrap()
    };
    let valid = r#"{"actions":[{"type":"move","x":7,"y":8}]}"#;
    let cases: Vec<(&str, Request<Body>, u16, ErrorCode)> = vec![
        (
            "malformed JSON",
            json_req(Method::POST, paths::ACTIONS, r#"{"actions": [{"type":"#),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "empty JSON body",
            json_req(Method::POST, paths::ACTIONS, ""),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "not an object",
            json_req(Method::POST, paths::ACTIONS, "[1, 2]"),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown top-level field",
            json_req(
                Method::POST,
                paths::ACTIONS,
                r#"{"actions": [], "sudo": true}"#,
            ),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown field inside an action",
            json_req(
                Method::POST,
                paths::ACTIONS,
                r#"{"actions": [{"type":"click","button":"left","x":1,"y":1,"force":true}]}"#,
            ),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown field inside screenshot options",
            json_req(Method::POST, paths::SCREENSHOT, r#"{"quality": 9}"#),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "unknown action type",
            json_req(
                Method::POST,
                paths::ACTIONS,
                r#"{"actions": [{"type":"shell","command":"id"}]}"#,
            ),
            400,
            ErrorCode::BadRequest,
        ),
        (
            "wrong content type",
            with_type(Some("text/plain"), paths::ACTIONS, valid),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "form content type",
            with_type(
                Some("application/x-www-form-urlencoded"),
                paths::ACTIONS,
                valid,
            ),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "no content type",
            with_type(None, paths::ACTIONS, valid),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "screenshot options as text",
            with_type(Some("text/plain"), paths::SCREENSHOT, "{}"),
            415,
            ErrorCode::UnsupportedMediaType,
        ),
        (
            "GET on actions",
            fx.get(paths::ACTIONS),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "DELETE on info",
            fx.authed(Method::DELETE, paths::INFO)
                .body(Body::empty())
                .unwrap(),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "PUT on screenshot",
            json_req(Method::PUT, paths::SCREENSHOT, "{}"),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        (
            "POST on health",
            bare(Method::POST, paths::HEALTH)
                .body(Body::empty())
                .unwrap(),
            405,
            ErrorCode::MethodNotAllowed,
        ),
        ("unknown path", fx.get("/v1/nope"), 404, ErrorCode::NotFound),
        ("root", fx.get("/"), 404, ErrorCode::NotFound),
        (
            "other major version",
            json_req(Method::POST, "/v2/actions", valid),
            404,
            ErrorCode::NotFound,
        ),
        (
            "below an endpoint",
            fx.get("/v1/info/extra"),
            404,
            ErrorCode::NotFound,
        ),
    ];
    for (what, req, status, code) in cases {
        let allow_wanted = match (req.method().clone(), req.uri().path()) {
            (Method::POST, paths::HEALTH) => Some("GET"),
            (_, paths::INFO) => Some("GET"),
            (Method::GET | Method::PUT, paths::ACTIONS | paths::SCREENSHOT) => Some("POST"),
            _ => None,
        };
        fx.take_events();
        let reply = fx.call(req).await;
        assert_eq!(
            (reply.status.as_u16(), reply.code()),
            (status, code),
            "{what}: {}",
            reply
        );
        assert_eq!(fx.events(), vec![], "{what}: reached the driver");
        if status == 405 {
            let allow = reply
                .headers
                .get(header::ALLOW)
                .unwrap_or_else(|| panic!("{what}: 405 without Allow"))
                .to_str()
                .unwrap();
            let wanted = allow_wanted.unwrap();
            assert!(allow.contains(wanted), "{what}: Allow: {allow}");
        }
        // The next valid request is served normally.
        let next = fx.call(json_req(Method::POST, paths::ACTIONS, valid)).await;
        next.assert_ok();
        assert_eq!(
            input_of(&fx.take_events(), Rect::full(SCREEN)),
            vec![Event::Motion(7, 8)],
            "after {what}"
        );
    }
}

// ---------------------------------------------------------------------
// A5: body limits
// ---------------------------------------------------------------------

/// A streamed body of `chunks` chunks of `size` spaces that counts how many
/// chunks were pulled.
fn counted_body(chunks: usize, size: usize) -> (Body, Arc<AtomicUsize>) {
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pulled);
    let stream = futures_util::stream::iter(0..chunks).map(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(Bytes::from(vec![b' '; size]))
    });
    (Body::from_stream(stream), pulled)
}

#[tokio::test]
async fn a5_oversized_body_with_content_length_is_413_before_reading() {
    let fx = Fx::new();
    const CHUNK: usize = 64 * 1024;
    let total = limits::MAX_BODY_BYTES + CHUNK;
    for path in [paths::ACTIONS, paths::SCREENSHOT] {
        let (body, pulled) = counted_body(total / CHUNK, CHUNK);
        let req = fx
            .authed(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, total)
            .body(body)
            .unwrap();
        fx.call(req)
            .await
            .assert_error(413, ErrorCode::PayloadTooLarge);
        assert_eq!(
            pulled.load(Ordering::SeqCst),
            0,
            "{path}: the body was read although Content-Length said it is too big"
        );
        // One byte over, in one piece.
        let mut big = br#"{"actions": []}"#.to_vec();
        big.resize(limits::MAX_BODY_BYTES + 1, b' ');
        let req = fx
            .authed(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, big.len())
            .body(Body::from(big))
            .unwrap();
        fx.call(req)
            .await
            .assert_error(413, ErrorCode::PayloadTooLarge);
    }
    assert_eq!(
        fx.events(),
        vec![],
        "an oversized request reached the driver"
    );

    // Exactly at the limit is fine (the limit is not off by one).
    let mut max = br#"{"actions": [{"type": "move", "x": 3, "y": 4}]}"#.to_vec();
    max.resize(limits::MAX_BODY_BYTES, b' ');
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, max.len())
        .body(Body::from(max))
        .unwrap();
    fx.call(req).await.assert_ok();
    assert_eq!(
        input_of(&fx.events(), Rect::full(SCREEN)),
        vec![Event::Motion(3, 4)]
    );
}

#[tokio::test]
async fn a5_oversized_chunked_body_is_413() {
    let fx = Fx::new();
    const CHUNK: usize = 64 * 1024;
    let chunks = 2 * limits::MAX_BODY_BYTES / CHUNK;
    for path in [paths::ACTIONS, paths::SCREENSHOT] {
        let (body, pulled) = counted_body(chunks, CHUNK);
        let req = fx
            .authed(Method::POST, path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .unwrap();
        assert!(req.headers().get(header::CONTENT_LENGTH).is_none());
        fx.call(req)
            .await
            .assert_error(413, ErrorCode::PayloadTooLarge);
        let pulled = pulled.load(Ordering::SeqCst);
        assert!(
            pulled <= limits::MAX_BODY_BYTES / CHUNK + 2,
            "{path}: {pulled} of {chunks} chunks were read past the limit"
        );
    }
    assert_eq!(
        fx.events(),
        vec![],
        "an oversized request reached the driver"
    );
    fx.run(json!([mv(1, 2)])).await.assert_ok();
    // A streamed body under the limit is read whole.
    let body = Body::from_stream(futures_util::stream::iter(
        [
            r#"{"actions": "#,
            r#"[{"type": "move", "#,
            r#""x": 5, "y": 6}]}"#,
        ]
        .map(|s| Ok::<_, std::io::Error>(Bytes::from(s))),
    ));
    let req = fx
        .authed(Method::POST, paths::ACTIONS)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap();
    fx.call(req).await.assert_ok();
    assert_eq!(motions(&fx.events()), vec![(1, 2), (5, 6)]);
}
