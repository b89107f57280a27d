//! HTTP-level tests of sandtop-demo: the router driven in memory with
//! `tower::ServiceExt::oneshot`, and once over a real socket on 127.0.0.1:0.

#![allow(clippy::unwrap_used)] // test helpers panic on purpose

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandtop_demo::{BODY_LIMIT, Store, router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    app: axum::Router,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo/submissions.jsonl");
    let app = router(Arc::new(Store::open(&path).unwrap()));
    Fixture {
        _dir: dir,
        path,
        app,
    }
}

async fn call(app: &axum::Router, req: Request<Body>) -> (StatusCode, String, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let ctype = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ctype, String::from_utf8(body.to_vec()).unwrap())
}

fn post_form(body: impl Into<Body>) -> Request<Body> {
    Request::post("/submit")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body.into())
        .unwrap()
}

/// Percent-encodes like a browser does for a UTF-8 form.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[tokio::test]
async fn form_page_has_the_fields() {
    let f = fixture();
    let (status, ctype, body) = call(&f.app, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ctype, "text/html; charset=utf-8");
    assert!(body.contains("<meta charset=\"utf-8\">"));
    for id in ["name", "email", "message", "submit"] {
        assert!(body.contains(&format!("id=\"{id}\"")), "missing #{id}");
    }
    assert!(body.contains("<textarea id=\"message\" name=\"message\""));
    assert!(body.contains("id=\"name\" name=\"name\" type=\"text\" autofocus"));
    assert!(body.contains("font-size: 24px"));
    assert!(body.contains("action=\"/submit\""));
}

#[tokio::test]
async fn submission_round_trips_byte_exact() {
    let f = fixture();
    let name = "Zoë Ångström 山田太郎 👩‍💻";
    let email = "zoë+tag@例え.jp";
    let message = "Héllo <b>&amp;</b> \"quoted\" 'x'\r\n第二行 🎉 $(rm -rf /) `id`\ttab";
    let body = format!(
        "name={}&email={}&message={}",
        encode(name),
        encode(email),
        encode(message)
    );
    let (status, ctype, page) = call(&f.app, post_form(body)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(ctype, "text/html; charset=utf-8");
    assert!(page.contains("Saved submission 1"));
    assert!(page.contains("Zoë Ångström 山田太郎 👩‍💻"));
    assert!(page.contains("Héllo &lt;b&gt;&amp;amp;&lt;/b&gt; &quot;quoted&quot; &#39;x&#39;"));
    assert!(!page.contains("<b>"));

    let (status, _, page) = call(&f.app, post_form("name=2&email=&message=")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Saved submission 2"));

    // The file holds one JSON line per submission, UTF-8 unescaped.
    let content = std::fs::read_to_string(&f.path).unwrap();
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("{\"seq\":1,\"received_at\":\""));
    assert!(lines[0].contains("山田太郎 👩‍💻"));
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["name"].as_str().unwrap().as_bytes(), name.as_bytes());
    assert_eq!(
        first["email"].as_str().unwrap().as_bytes(),
        email.as_bytes()
    );
    assert_eq!(
        first["message"].as_str().unwrap().as_bytes(),
        message.as_bytes()
    );

    let (status, ctype, json) = call(
        &f.app,
        Request::get("/submissions").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ctype, "application/json");
    let list: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0], first);
    assert_eq!(list[1]["seq"], 2);
    assert_eq!(list[1]["name"], "2");
}

#[tokio::test]
async fn bad_forms_get_400_with_a_reason_and_store_nothing() {
    let f = fixture();
    let cases = [
        ("name=a&email=b", "missing field \"message\""),
        (
            "name=a&email=b&message=c&admin=1",
            "unknown field \"admin\"",
        ),
        ("name=a&email=b&message=c&name=d", "more than once"),
        ("name=%FF&email=b&message=c", "not valid UTF-8"),
        ("name=%G0&email=b&message=c", "percent-encoding"),
        ("", "missing field \"name\""),
    ];
    for (body, want) in cases {
        let (status, ctype, text) = call(&f.app, post_form(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(ctype, "text/plain; charset=utf-8");
        assert!(text.contains(want), "{body}: {text}");
    }
    let (status, _, json) = call(
        &f.app,
        Request::get("/submissions").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json, "[]");
}

#[tokio::test]
async fn wrong_content_type_size_method_and_path() {
    let f = fixture();
    let json = Request::post("/submit")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        call(&f.app, json).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let latin1 = Request::post("/submit")
        .header(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=ISO-8859-1",
        )
        .body(Body::from("name=a&email=b&message=c"))
        .unwrap();
    assert_eq!(
        call(&f.app, latin1).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let utf8 = Request::post("/submit")
        .header(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=UTF-8",
        )
        .body(Body::from("name=a&email=b&message=c"))
        .unwrap();
    assert_eq!(call(&f.app, utf8).await.0, StatusCode::OK);

    // Exactly at the limit is read (and refused for its content); one more is 413.
    let at_limit = format!("name=a&email=b&message={}", "x".repeat(BODY_LIMIT - 23));
    assert_eq!(at_limit.len(), BODY_LIMIT);
    assert_eq!(call(&f.app, post_form(at_limit)).await.0, StatusCode::OK);
    let over = format!("name=a&email=b&message={}", "x".repeat(BODY_LIMIT - 22));
    assert_eq!(
        call(&f.app, post_form(over)).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let get_submit = Request::get("/submit").body(Body::empty()).unwrap();
    assert_eq!(
        call(&f.app, get_submit).await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let nowhere = Request::get("/etc/passwd").body(Body::empty()).unwrap();
    assert_eq!(call(&f.app, nowhere).await.0, StatusCode::NOT_FOUND);

    let list: Vec<serde_json::Value> = serde_json::from_str(
        &call(
            &f.app,
            Request::get("/submissions").body(Body::empty()).unwrap(),
        )
        .await
        .2,
    )
    .unwrap();
    assert_eq!(list.len(), 2);
}

#[tokio::test]
async fn serves_over_a_real_loopback_socket() {
    let f = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, f.app.clone()).into_future());

    let body = format!("name={}&email=e&message=m", encode("café ☕"));
    let request = format!(
        "POST /submit HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("Saved submission 1"));
    assert!(response.contains("café ☕"));

    // A chunked body (no Content-Length) over the limit is refused with 413.
    let mut request = format!(
        "POST /submit HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for _ in 0..80 {
        request.push_str(&format!("400\r\n{}\r\n", "x".repeat(1024)));
    }
    request.push_str("0\r\n\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before reading it all: ignore write errors.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response);
    assert!(
        response.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
        "{response}"
    );
    server.abort();

    let stored = std::fs::read_to_string(&f.path).unwrap();
    assert!(stored.contains("\"name\":\"café ☕\""));
}
