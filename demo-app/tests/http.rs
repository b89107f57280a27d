//! HTTP-level tests of sandtop-demo: the router driven in memory with
//! `tower::ServiceExt::oneshot` (cookies carried by hand), and once over a
//! real socket on 127.0.0.1:0.
//!
//! Size (~880 lines): the form's and the sign-in flow's HTTP contracts,
//! one case per rule, over one in-memory client helper.

#![allow(clippy::unwrap_used)] // test helpers panic on purpose

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use sandtop_demo::{BODY_LIMIT, LOGIN_BODY_LIMIT, SignIn, Store, router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    /// Absent at the start, like in the guest before the host writes it.
    accounts: std::path::PathBuf,
    sign_ins: std::path::PathBuf,
    app: axum::Router,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo/submissions.jsonl");
    let accounts = dir.path().join("demo/accounts.json");
    let sign_ins = dir.path().join("demo/sign-ins.jsonl");
    let app = router(
        Arc::new(Store::open(&path).unwrap()),
        Arc::new(SignIn::open(&accounts, &sign_ins).unwrap()),
    );
    Fixture {
        _dir: dir,
        path,
        accounts,
        sign_ins,
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
    for id in ["name", "email", "message", "submit", "sign-in-link"] {
        assert!(body.contains(&format!("id=\"{id}\"")), "missing #{id}");
    }
    assert!(body.contains("<a id=\"sign-in-link\" href=\"/login\">Sign in</a>"));
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

// ---- Sign-in ----

const EMAIL: &str = "o'brien+<tag>@例え.test";
const PASSWORD: &str = "Pässwörd 🔑 s3cret&=%";
const CODE: &str = "58302917";

/// One answer, headers kept (for Set-Cookie and Location).
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn ctype(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_default()
    }

    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_default()
    }

    fn set_cookies(&self) -> Vec<&str> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    /// `name=value` of the cookie this answer sets (not one it removes).
    fn cookie(&self, name: &str) -> String {
        let prefix = format!("{name}=");
        let set = self
            .set_cookies()
            .into_iter()
            .find(|c| c.starts_with(&prefix) && !c.contains("Max-Age=0"))
            .unwrap_or_else(|| panic!("no cookie {name} in {:?}", self.set_cookies()));
        let pair = set.split(';').next().unwrap();
        let value = &pair[prefix.len()..];
        assert_eq!(value.len(), 64, "{set}");
        assert!(
            value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{set}"
        );
        assert_eq!(
            set,
            format!("{pair}; HttpOnly; SameSite=Strict; Path=/"),
            "cookie attributes"
        );
        pair.to_owned()
    }
}

/// Drives the router like a browser that keeps every body it was shown.
struct Browser<'a> {
    app: &'a axum::Router,
    bodies: Vec<String>,
}

impl<'a> Browser<'a> {
    fn new(app: &'a axum::Router) -> Self {
        Self {
            app,
            bodies: Vec::new(),
        }
    }

    async fn send(&mut self, req: Request<Body>) -> Reply {
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        self.bodies.push(body.clone());
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn get(&mut self, path: &str, cookie: Option<&str>) -> Reply {
        let mut req = Request::get(path);
        if let Some(cookie) = cookie {
            req = req.header(header::COOKIE, cookie);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    async fn post(&mut self, path: &str, cookie: Option<&str>, body: impl Into<Body>) -> Reply {
        let mut req =
            Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(cookie) = cookie {
            req = req.header(header::COOKIE, cookie);
        }
        self.send(req.body(body.into()).unwrap()).await
    }

    async fn login(&mut self, email: &str, password: &str) -> Reply {
        let body = format!("email={}&password={}", encode(email), encode(password));
        self.post("/login", None, body).await
    }

    async fn code(&mut self, pending: &str, code: &str) -> Reply {
        let body = format!("code={}", encode(code));
        self.post("/login/code", Some(pending), body).await
    }

    /// Signs in with the password; the pending cookie.
    async fn password_ok(&mut self) -> String {
        let r = self.login(EMAIL, PASSWORD).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
        assert_eq!(r.location(), "/login/code");
        r.cookie("pending_login")
    }

    /// Asserts no body shown so far holds the password or the code.
    fn assert_no_secret_shown(&self) {
        for body in &self.bodies {
            assert!(!body.contains(PASSWORD), "password shown: {body}");
            assert!(!body.contains(CODE), "code shown: {body}");
            assert!(!body.contains(&encode(PASSWORD)), "password shown: {body}");
        }
    }
}

fn write_accounts(f: &Fixture) {
    let accounts = serde_json::json!([
        {"email": "other@example.test", "password": "other-password", "code": "11111111"},
        {"email": EMAIL, "password": PASSWORD, "code": CODE},
    ]);
    std::fs::write(&f.accounts, accounts.to_string()).unwrap();
}

/// The record's lines with `received_at` checked and replaced by `T`.
fn record_lines(f: &Fixture) -> Vec<String> {
    let bytes = std::fs::read(&f.sign_ins).unwrap();
    assert!(
        !contains(&bytes, PASSWORD.as_bytes()),
        "password in the record"
    );
    assert!(!contains(&bytes, CODE.as_bytes()), "code in the record");
    let text = String::from_utf8(bytes).unwrap();
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let at = value["received_at"].as_str().unwrap();
            assert_eq!(at.len(), "2026-05-08T09:41:07.123Z".len(), "{at}");
            assert!(at.ends_with('Z') && at.as_bytes()[10] == b'T', "{at}");
            line.replacen(at, "T", 1)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn line(seq: u64, event: &str, email: &str) -> String {
    format!(
        "{{\"seq\":{seq},\"received_at\":\"T\",\"event\":\"{event}\",\"email\":{}}}",
        serde_json::to_string(email).unwrap()
    )
}

async fn sign_ins_json(b: &mut Browser<'_>) -> Vec<serde_json::Value> {
    let r = b.get("/sign-ins", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.ctype(), "application/json");
    serde_json::from_str(&r.body).unwrap()
}

#[tokio::test]
async fn sign_in_pages_have_the_fields() {
    let f = fixture();
    let mut b = Browser::new(&f.app);
    let r = b.get("/login", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.ctype(), "text/html; charset=utf-8");
    let csp = r.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    for want in [
        "<meta charset=\"utf-8\">",
        "<title>Sign in</title>",
        "<form method=\"post\" action=\"/login\"",
        "<label for=\"email\">Email</label>",
        "<input id=\"email\" name=\"email\" type=\"email\" autocomplete=\"username\"",
        "<label for=\"password\">Password</label>",
        "<input id=\"password\" name=\"password\" type=\"password\" \
         autocomplete=\"current-password\">",
        "<button id=\"sign-in\" type=\"submit\">Sign in</button>",
    ] {
        assert!(r.body.contains(want), "missing {want}: {}", r.body);
    }
    assert!(!r.body.contains("<script"));
    assert!(!r.body.contains("id=\"error\""));

    // The code page needs a pending sign-in.
    write_accounts(&f);
    let pending = b.password_ok().await;
    let r = b.get("/login/code", Some(&pending)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    for want in [
        "<form method=\"post\" action=\"/login/code\"",
        "<label for=\"code\">Code</label>",
        "<input id=\"code\" name=\"code\" type=\"text\" inputmode=\"numeric\" \
         autocomplete=\"one-time-code\"",
        "<button id=\"verify\" type=\"submit\">Verify</button>",
    ] {
        assert!(r.body.contains(want), "missing {want}: {}", r.body);
    }
}

#[tokio::test]
async fn sign_in_happy_path_records_each_step() {
    let f = fixture();
    // The host provisions the accounts after the app started.
    write_accounts(&f);
    let mut b = Browser::new(&f.app);

    let pending = b.password_ok().await;
    let r = b.get("/login/code", Some(&pending)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains("id=\"code\""));

    let r = b.code(&pending, CODE).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location(), "/account");
    assert!(
        r.set_cookies()
            .contains(&"pending_login=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/"),
        "{:?}",
        r.set_cookies()
    );
    let session = r.cookie("session");
    assert_ne!(session[8..], pending[14..]);

    for _ in 0..2 {
        // A browser sends other cookies too.
        let cookies = format!("theme=dark; {session}; {pending}");
        let r = b.get("/account", Some(&cookies)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.ctype(), "text/html; charset=utf-8");
        assert!(r.body.contains("<title>Account</title>"));
        assert!(
            r.body
                .contains("Signed in as o&#39;brien+&lt;tag&gt;@例え.test</p>"),
            "{}",
            r.body
        );
    }
    // The pending sign-in ended with the code.
    let r = b.get("/login/code", Some(&pending)).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/login");

    assert_eq!(
        record_lines(&f),
        [
            line(1, "password_ok", EMAIL),
            line(2, "code_ok", EMAIL),
            line(3, "protected_page", EMAIL),
            line(4, "protected_page", EMAIL),
        ]
    );
    let list = sign_ins_json(&mut b).await;
    let stored: Vec<serde_json::Value> = std::fs::read_to_string(&f.sign_ins)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(list, stored);
    assert_eq!(list.len(), 4);
    assert_eq!(list[1]["event"], "code_ok");
    assert_eq!(list[3]["email"], EMAIL);
    assert_eq!(list[3]["seq"], 4);
    // Submissions are a store of their own.
    assert_eq!(b.get("/submissions", None).await.body, "[]");
    b.assert_no_secret_shown();
}

#[tokio::test]
async fn wrong_email_or_password_is_401_and_recorded_without_it() {
    let f = fixture();
    write_accounts(&f);
    let mut b = Browser::new(&f.app);
    let long_email = format!("{}@x.test", "é".repeat(300));
    let attempts = [
        (EMAIL, "Pässwörd 🔑 s3cret&=", EMAIL.to_owned()),
        (EMAIL, "", EMAIL.to_owned()),
        (
            "nobody@example.test",
            PASSWORD,
            "nobody@example.test".to_owned(),
        ),
        // Another account's email with this one's password.
        (
            "other@example.test",
            PASSWORD,
            "other@example.test".to_owned(),
        ),
        (&long_email, PASSWORD, "é".repeat(256)),
    ];
    let mut want = Vec::new();
    for (i, (email, password, recorded)) in attempts.iter().enumerate() {
        let r = b.login(email, password).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{email}");
        assert_eq!(r.ctype(), "text/html; charset=utf-8");
        assert!(r.set_cookies().is_empty());
        assert!(r.body.contains("<title>Sign in</title>"));
        assert!(
            r.body.contains(">Wrong email or password.</p>"),
            "{}",
            r.body
        );
        // Nothing typed comes back, not even the email.
        assert!(!r.body.contains("brien") && !r.body.contains("nobody"));
        assert!(!r.body.contains("value="));
        want.push(line(i as u64 + 1, "password_wrong", recorded));
    }
    assert_eq!(record_lines(&f), want);
    b.assert_no_secret_shown();
}

#[tokio::test]
async fn wrong_code_is_401_then_the_right_one_works() {
    let f = fixture();
    write_accounts(&f);
    let mut b = Browser::new(&f.app);
    let pending = b.password_ok().await;
    // The other account's code, and this one's with a space: wrong.
    for wrong in ["11111111", "58302917 ", ""] {
        let r = b.code(&pending, wrong).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{wrong:?}");
        assert_eq!(r.ctype(), "text/html; charset=utf-8");
        assert!(r.body.contains(">Wrong code.</p>"), "{}", r.body);
        assert!(r.body.contains("id=\"verify\""));
        assert!(r.set_cookies().is_empty());
    }
    let r = b.code(&pending, CODE).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.location(), "/account");
    assert_eq!(
        record_lines(&f),
        [
            line(1, "password_ok", EMAIL),
            line(2, "code_wrong", EMAIL),
            line(3, "code_wrong", EMAIL),
            line(4, "code_wrong", EMAIL),
            line(5, "code_ok", EMAIL),
        ]
    );
    b.assert_no_secret_shown();
}

#[tokio::test]
async fn a_code_is_refused_the_second_time() {
    let f = fixture();
    write_accounts(&f);
    let mut b = Browser::new(&f.app);
    let first = b.password_ok().await;
    let second = b.password_ok().await;
    assert_ne!(first, second);
    let r = b.code(&first, CODE).await;
    assert_eq!(r.location(), "/account");
    let session = r.cookie("session");
    // A second sign-in, password right, cannot use the code again.
    let r = b.code(&second, CODE).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains("Wrong code."));
    let third = b.password_ok().await;
    let r = b.code(&third, CODE).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // The first session still works.
    assert_eq!(
        b.get("/account", Some(&session)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        record_lines(&f),
        [
            line(1, "password_ok", EMAIL),
            line(2, "password_ok", EMAIL),
            line(3, "code_ok", EMAIL),
            line(4, "code_wrong", EMAIL),
            line(5, "password_ok", EMAIL),
            line(6, "code_wrong", EMAIL),
            line(7, "protected_page", EMAIL),
        ]
    );
    b.assert_no_secret_shown();
}

#[tokio::test]
async fn five_wrong_codes_drop_the_pending_sign_in() {
    let f = fixture();
    write_accounts(&f);
    let mut b = Browser::new(&f.app);
    let pending = b.password_ok().await;
    for _ in 0..4 {
        let r = b.code(&pending, "00000000").await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert!(r.body.contains("Wrong code."));
    }
    let r = b.code(&pending, "00000000").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains("<title>Sign in</title>"), "{}", r.body);
    assert!(r.body.contains(">Too many wrong codes. Sign in again.</p>"));
    assert_eq!(
        r.set_cookies(),
        ["pending_login=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/"]
    );
    // Gone: the page and the right code both send back to /login.
    let r = b.get("/login/code", Some(&pending)).await;
    assert_eq!((r.status, r.location()), (StatusCode::SEE_OTHER, "/login"));
    let r = b.code(&pending, CODE).await;
    assert_eq!((r.status, r.location()), (StatusCode::SEE_OTHER, "/login"));
    let mut want = vec![line(1, "password_ok", EMAIL)];
    want.extend((2..=6).map(|seq| line(seq, "code_wrong", EMAIL)));
    assert_eq!(record_lines(&f), want);
    // A new sign-in may still use the (unused) code.
    let pending = b.password_ok().await;
    assert_eq!(b.code(&pending, CODE).await.location(), "/account");
    b.assert_no_secret_shown();
}

#[tokio::test]
async fn protected_pages_without_cookies_redirect() {
    let f = fixture();
    write_accounts(&f);
    let mut b = Browser::new(&f.app);
    let pending = b.password_ok().await;
    let forged = format!("session={}", "a".repeat(64));
    let as_session = format!("session={}", &pending["pending_login=".len()..]);
    for cookie in [
        None,
        Some(forged.as_str()),
        Some("session=short"),
        Some(&as_session),
    ] {
        let r = b.get("/account", cookie).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{cookie:?}");
        assert_eq!(r.location(), "/login");
        assert_eq!(r.headers[header::CACHE_CONTROL], "no-store");
    }
    let as_pending = format!("pending_login={}", "0".repeat(64));
    for cookie in [None, Some(as_pending.as_str())] {
        let r = b.get("/login/code", cookie).await;
        assert_eq!((r.status, r.location()), (StatusCode::SEE_OTHER, "/login"));
        let r = b.post("/login/code", cookie, format!("code={CODE}")).await;
        assert_eq!((r.status, r.location()), (StatusCode::SEE_OTHER, "/login"));
    }
    // Only the password step was recorded.
    assert_eq!(record_lines(&f), [line(1, "password_ok", EMAIL)]);
}

#[tokio::test]
async fn absent_or_malformed_accounts_file() {
    let f = fixture();
    let mut b = Browser::new(&f.app);
    // Absent: no accounts, the attempt fails like a wrong password.
    let r = b.login(EMAIL, PASSWORD).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains("Wrong email or password."));

    let malformed = [
        format!(r#"[{{"email":{EMAIL:?},"password":{PASSWORD:?},"code":{CODE:?},"x":1}}]"#),
        format!(r#"{{"email":{EMAIL:?},"password":{PASSWORD:?},"code":{CODE:?}}}"#),
        format!(r#"[{{"email":{EMAIL:?},"password":{PASSWORD:?}}}]"#),
        format!(r#"[{{"email":{EMAIL:?},"password":{PASSWORD:?},"code":58302917}}]"#),
        format!(r#"[{{"email":{EMAIL:?},"password":{PASSWORD:?},"code":{CODE:?}}}"#),
        format!("{PASSWORD} {CODE}"),
    ];
    for content in &malformed {
        std::fs::write(&f.accounts, content).unwrap();
        let r = b.login(EMAIL, PASSWORD).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{content}");
        assert_eq!(r.ctype(), "text/plain; charset=utf-8");
        assert!(
            r.body.starts_with("the accounts file is malformed"),
            "{}",
            r.body
        );
        assert!(
            !r.body.contains("brien") && !r.body.contains("Pä"),
            "{}",
            r.body
        );
    }
    // Malformed between the two steps: 500, and the attempt is not counted.
    write_accounts(&f);
    let pending = b.password_ok().await;
    std::fs::write(&f.accounts, "[").unwrap();
    let r = b.code(&pending, CODE).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.body.contains("malformed"));
    write_accounts(&f);
    assert_eq!(b.code(&pending, CODE).await.location(), "/account");

    assert_eq!(
        record_lines(&f),
        [
            line(1, "password_wrong", EMAIL),
            line(2, "password_ok", EMAIL),
            line(3, "code_ok", EMAIL),
        ]
    );
    b.assert_no_secret_shown();
}

#[tokio::test]
async fn bad_sign_in_forms_get_400_and_record_nothing() {
    let f = fixture();
    write_accounts(&f);
    let mut b = Browser::new(&f.app);
    let pw = encode(PASSWORD);
    let email = encode(EMAIL);
    let cases = [
        (
            format!("email={email}&password={pw}&remember=1"),
            "unknown field \"remember\"",
        ),
        (
            format!("email={email}&password={pw}&password={pw}"),
            "\"password\" given more than once",
        ),
        (
            format!("email={email}&email={email}&password={pw}"),
            "\"email\" given more than once",
        ),
        (
            format!("email={email}"),
            "missing field \"password\": the form needs email and password",
        ),
        (format!("email={email}&password=%FF"), "not valid UTF-8"),
        (format!("email={email}&password=%G0"), "percent-encoding"),
    ];
    for (body, want) in &cases {
        let r = b.post("/login", None, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(r.ctype(), "text/plain; charset=utf-8");
        assert!(r.body.contains(want), "{body}: {}", r.body);
    }
    let pending = b.password_ok().await;
    for (body, want) in [
        (
            format!("code={CODE}&code={CODE}"),
            "\"code\" given more than once",
        ),
        (format!("code={CODE}&email=x"), "unknown field \"email\""),
        (String::new(), "missing field \"code\""),
    ] {
        let r = b.post("/login/code", Some(&pending), body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(r.body.contains(want), "{body}: {}", r.body);
    }
    // Wrong type, too big: refused before parsing.
    let json = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        b.send(json).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let over = format!("email=a&password={}", "x".repeat(LOGIN_BODY_LIMIT));
    assert_eq!(
        b.post("/login", None, over).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let over = format!("code={}", "1".repeat(LOGIN_BODY_LIMIT));
    assert_eq!(
        b.post("/login/code", Some(&pending), over).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // The pending sign-in is untouched: no wrong code was counted.
    assert_eq!(b.code(&pending, CODE).await.location(), "/account");
    assert_eq!(
        record_lines(&f),
        [line(1, "password_ok", EMAIL), line(2, "code_ok", EMAIL)]
    );
    b.assert_no_secret_shown();
}
