//! The browser tier: the real `sandtopd` binary with `--browser
//! firefox-esr` on a private Xvfb, against pages served by the test on
//! loopback. Each test starts its own daemon (and so its own Firefox, with
//! its own profile). Without Xvfb or Firefox the tests print `SKIP
//! browser: ...` (and fail when SANDTOP_REQUIRE lists `browser`).
//!
//! The driver's side of the browser contract (docs/contract.md, "Browser
//! driver"): reads, refs bound at execution, tabs and state, images,
//! hostile pages ending in limits, and the busy rule shared with the
//! computer driver. The toolset's rules (confirmation, URL policy, member
//! selection, model-facing shapes) are host-cli's and tested there.
//!
//! Size (~800 lines): the tier's fixture (a daemon with Firefox, the test
//! pages and their server) and the cases of the driver's core members
//! (reads, refs, tabs, limits, images, navigation, scrolling, the busy
//! rule); later parts of the contract have their own files in `browser/`.

#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::response::Html;
use axum::routing::get;
use http::{Method, StatusCode};
use sandtop_client::Client;
use sandtop_testkit::skip;
use sandtop_testkit::xvfb::Xvfb;
use serde_json::{Value, json};

const FIREFOX: &str = "firefox-esr";

#[path = "browser/diag.rs"]
mod diag;
#[path = "browser/files.rs"]
mod files;
#[path = "browser/page_bound.rs"]
mod page_bound;
#[path = "browser/pointer.rs"]
mod pointer;
#[path = "browser/policy.rs"]
mod policy;
#[path = "browser/scoped.rs"]
mod scoped;
#[path = "browser/script.rs"]
mod script;
#[path = "browser/sign_in.rs"]
mod sign_in;

struct Daemon {
    child: Child,
    _dir: tempfile::TempDir,
    socket: PathBuf,
    token: String,
    _x: Xvfb,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(pgid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

/// A daemon with a browser, or `None` (skip printed) when this host lacks
/// Xvfb or Firefox.
fn daemon() -> Option<Daemon> {
    if !skip::have(FIREFOX) {
        skip::skip(
            "browser",
            "firefox-esr is not installed (make deps installs it)",
        );
        return None;
    }
    if !skip::have("Xvfb") {
        skip::skip("browser", "Xvfb is not installed (make deps installs it)");
        return None;
    }
    let x = Xvfb::start(1280, 800)?;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sandtopd.sock");
    let token_file = dir.path().join("token");
    let child = Command::new(env!("CARGO_BIN_EXE_sandtopd"))
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .arg("--token-file")
        .arg(&token_file)
        .args(["--display", &x.display, "--browser", FIREFOX])
        .arg("--browser-profiles")
        .arg(dir.path())
        .env(
            "RUST_LOG",
            std::env::var("SANDTOP_TEST_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(15);
    while !(socket.exists() && token_file.exists()) {
        assert!(Instant::now() < end, "the daemon did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    Some(Daemon {
        child,
        _dir: dir,
        socket,
        token,
        _x: x,
    })
}

impl Daemon {
    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let mut c = Client::connect(&self.socket, Some(self.token.clone()))
            .await
            .unwrap();
        let (status, bytes) = c
            .request(Method::POST, path, Some(serde_json::to_vec(&body).unwrap()))
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    /// One call; panics unless it succeeded.
    async fn ok(&self, call: Value) -> Value {
        let (status, body) = self.post("/v1/browser/call", call.clone()).await;
        assert_eq!(status, StatusCode::OK, "{call} -> {body}");
        body
    }

    /// One call that must fail with `code`.
    async fn fails(&self, call: Value, code: &str) -> Value {
        let (status, body) = self.post("/v1/browser/call", call.clone()).await;
        assert_ne!(status, StatusCode::OK, "{call} succeeded: {body}");
        assert_eq!(body["code"], code, "{call} -> {body}");
        body
    }

    async fn read(&self, filter: &str) -> Value {
        let r = self
            .ok(json!({"member": "read_page", "tab_id": null, "filter": filter}))
            .await;
        assert_eq!(r["outcome"]["kind"], "read", "{r}");
        r["outcome"].clone()
    }

    async fn text(&self) -> String {
        let r = self
            .ok(json!({"member": "get_page_text", "tab_id": null}))
            .await;
        assert_eq!(r["outcome"]["elements"], json!([]));
        r["outcome"]["text"].as_str().unwrap().to_string()
    }

    /// The page's text once it contains `needle`, polled for up to 5 s:
    /// an input's effect reaches the page's handlers after the call that
    /// dispatched it has returned (a loaded CI host read the text first).
    async fn text_containing(&self, needle: &str) -> String {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let text = self.text().await;
            if text.contains(needle) || std::time::Instant::now() >= end {
                return text;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn goto(&self, url: &str) -> Value {
        self.ok(json!({"member": "navigate", "tab_id": null, "url": url}))
            .await
    }
}

/// The element of a read report with this label.
fn by_label<'a>(read: &'a Value, label: &str) -> &'a Value {
    read["elements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["label"] == label)
        .unwrap_or_else(|| panic!("no element labelled {label:?} in {read}"))
}

fn omitted(read: &Value) -> Vec<String> {
    read["omitted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect()
}

const FORM: &str = r#"<!doctype html><html><head><title>Every role</title></head><body>
<h1>Order form</h1>
<label for="name">Full name</label> <input id="name" value="Ann">
<input type="password" aria-label="Password" value="hunter2">
<textarea aria-label="Message">hello</textarea>
<select aria-label="Colour"><option value="r">Red</option><option value="g" selected>Green</option></select>
<select multiple aria-label="Toppings"><option value="a" selected>Cheese</option><option value="b">Ham</option></select>
<label><input type="checkbox" checked> Subscribe</label>
<label><input type="radio" name="r" value="1"> One</label>
<input type="range" aria-label="Volume" value="30">
<button id="go" onclick="document.getElementById('out').textContent = 'clicked by ' + document.getElementById('name').value">Go</button>
<input type="file" aria-label="Upload">
<a href="/other">Other page</a>
<div style="display:none"><button>Hidden button</button></div>
<button aria-label="evil&#27;[2J&#7;label">x</button>
<button aria-label="LONG">x</button>
<div id="out"></div>
<script>
  document.querySelector('[aria-label=LONG]').setAttribute('aria-label', 'L'.repeat(1000));
  document.querySelector('select[aria-label=Colour]').addEventListener('change', e => {
    document.getElementById('out').textContent = 'colour ' + e.target.value;
  });
</script>
</body></html>"#;

const BIG: &str = r#"<!doctype html><title>Big</title><body><div id="c"></div><script>
  const c = document.getElementById('c');
  for (let i = 0; i < 10000; i++) { const b = document.createElement('button'); b.textContent = 'B' + i; c.appendChild(b); }
</script></body>"#;

const SHADOW: &str = r#"<!doctype html><title>Shadow</title><body><div id="host"></div><script>
  let host = document.getElementById('host');
  for (let i = 0; i < 300; i++) {
    const root = host.attachShadow({mode: 'open'});
    const inner = document.createElement('div');
    root.appendChild(inner);
    host = inner;
  }
  const b = document.createElement('button'); b.textContent = 'Deep button';
  b.onclick = () => { document.title = 'deep clicked'; };
  host.appendChild(b);
</script></body>"#;

const LONE: &str = r#"<!doctype html><title>x</title><body><button id="b">ok</button><script>
  document.title = 'bad \uD800 title';
  document.getElementById('b').setAttribute('aria-label', 'half \uDC00 pair');
</script></body>"#;

/// Serves the test pages on 127.0.0.1; returns the origin.
async fn pages() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let frames = format!(
        r#"<!doctype html><title>Frames</title><body><button>Top</button>
<iframe src="/inner" width="300" height="100"></iframe>
<iframe src="http://localhost:{port}/inner" width="300" height="100"></iframe></body>"#
    );
    let app = axum::Router::new()
        .route("/form", get(|| async { Html(FORM) }))
        .route(
            "/other",
            get(|| async { Html("<!doctype html><title>Other</title><p>The other page</p>") }),
        )
        .route("/big", get(|| async { Html(BIG) }))
        .route(
            "/huge",
            get(|| async {
                Html(
                    "<!doctype html><title>Huge</title><body><div id=\"c\"></div><script>\
                     const c = document.getElementById('c'); const f = document.createDocumentFragment();\
                     for (let i = 0; i < 100000; i++) f.appendChild(document.createElement('span'));\
                     c.appendChild(f); const b = document.createElement('button'); b.textContent = 'Last';\
                     document.body.appendChild(b);</script></body>",
                )
            }),
        )
        .route("/shadow", get(|| async { Html(SHADOW) }))
        .route("/lone", get(|| async { Html(LONE) }))
        .route("/pointer", get(|| async { Html(pointer::PAGE) }))
        .route("/scoped", get(|| async { Html(scoped::PAGE) }))
        .route("/script", get(|| async { Html(script::PAGE) }))
        .route("/diag", get(|| async { Html(diag::PAGE) }))
        .route("/sign-in", get(|| async { Html(sign_in::PAGE) }))
        .route("/sign-in-steal", get(|| async { Html(sign_in::STEAL) }))
        .route("/files", get(|| async { Html(files::PAGE) }))
        .route("/files-two", get(|| async { Html(files::TWO) }))
        .route("/files-link", get(|| async { Html(files::LINK) }))
        .route(
            "/report.csv",
            get(|| async {
                (
                    [
                        (http::header::CONTENT_TYPE, "text/csv"),
                        (
                            http::header::CONTENT_DISPOSITION,
                            "attachment; filename=\"report.csv\"",
                        ),
                    ],
                    "a,b\n1,2\n",
                )
            }),
        )
        .route(
            "/inner",
            get(|| async { Html("<!doctype html><body><button>Inner button</button></body>") }),
        )
        .route("/frames", get(move || async move { Html(frames) }))
        .route(
            "/dialog",
            get(|| async {
                Html(
                    "<!doctype html><title>Dialog</title><body><button onclick=\"alert('hi'); \
                     document.title = 'after alert'\">Alert</button>\
                     <button onclick=\"setTimeout(() => location.href = '/other', 300)\">Leave</button></body>",
                )
            }),
        )
        .route(
            "/late",
            get(|| async {
                Html(
                    "<!doctype html><title>Late</title><body><script>setTimeout(() => \
                     document.body.append('Ready now'), 700)</script></body>",
                )
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_page_reports_roles_labels_values_and_keeps_private_values_out() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/form")).await;
    let read = d.read("all").await;
    assert_eq!(read["version"], 1);
    let text = read["text"].as_str().unwrap();
    assert!(text.contains("Order form"), "{text}");

    let name = by_label(&read, "Full name");
    assert_eq!(
        (&name["role"], &name["value"]),
        (&json!("textbox"), &json!("Ann"))
    );
    let pw = by_label(&read, "Password");
    assert_eq!(pw["role"], "textbox");
    assert!(
        pw.get("value").is_none(),
        "a password's value is never reported: {pw}"
    );
    assert_eq!(by_label(&read, "Message")["value"], "hello");
    let colour = by_label(&read, "Colour");
    assert_eq!(colour["role"], "combobox");
    assert_eq!(colour["value"], "g");
    assert_eq!(
        colour["options"],
        json!([{"label": "Red", "value": "r"}, {"label": "Green", "value": "g"}])
    );
    let toppings = by_label(&read, "Toppings");
    assert_eq!(toppings["role"], "listbox");
    assert_eq!(toppings["options"][0]["selected"], true);
    assert_eq!(toppings["options"][1]["selected"], false);
    assert_eq!(by_label(&read, "Subscribe")["checked"], true);
    assert_eq!(by_label(&read, "One")["role"], "radio");
    assert_eq!(by_label(&read, "One")["checked"], false);
    assert_eq!(by_label(&read, "Volume")["role"], "slider");
    assert_eq!(by_label(&read, "Go")["role"], "button");
    assert_eq!(by_label(&read, "Other page")["role"], "button");
    // Control characters in labels become spaces; long labels are cut.
    let labels: Vec<&str> = read["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["label"].as_str().unwrap())
        .collect();
    assert!(labels.contains(&"evil [2J label"), "{labels:?}");
    assert!(labels.iter().all(|l| !l.chars().any(char::is_control)));
    assert!(
        labels
            .iter()
            .any(|l| l.len() == 256 && l.starts_with("LLL")),
        "{labels:?}"
    );
    assert!(
        !labels.contains(&"Hidden button"),
        "hidden elements are not reported"
    );
    // Refs are unique; roles come from the closed set.
    let refs: std::collections::BTreeSet<&str> = read["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ref"].as_str().unwrap())
        .collect();
    assert_eq!(refs.len(), labels.len());
    let om = omitted(&read);
    for code in ["private", "unsupported_control", "name_limit"] {
        assert!(om.contains(&code.to_string()), "{code} missing from {om:?}");
    }

    let interactive = d.read("interactive").await;
    assert_eq!(interactive["text"], "");
    assert_eq!(interactive["elements"], read["elements"], "refs are stable");

    let found = d
        .ok(json!({"member": "find", "tab_id": null, "query": "colour"}))
        .await;
    let els = found["outcome"]["elements"].as_array().unwrap();
    assert_eq!(els.len(), 1, "{found}");
    assert_eq!(els[0]["label"], "Colour");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn click_type_and_select_act_through_refs() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/form")).await;
    let read = d.read("interactive").await;
    let name = by_label(&read, "Full name")["ref"].clone();
    d.ok(json!({"member": "type", "tab_id": null, "target": name, "text": "Zoë 中文"}))
        .await;
    // Typing at the focus (no target) goes on where the caret is.
    d.ok(json!({"member": "type", "tab_id": null, "target": null, "text": "!"}))
        .await;
    let after = d.read("interactive").await;
    assert_eq!(
        by_label(&after, "Full name")["value"],
        "Zoë 中文!",
        "typing replaced the value"
    );
    let go = by_label(&read, "Go")["ref"].clone();
    d.ok(json!({"member": "click", "tab_id": null, "target": go}))
        .await;
    assert!(
        d.text().await.contains("clicked by Zoë 中文!"),
        "the click ran the page's handler"
    );

    let colour = by_label(&read, "Colour")["ref"].clone();
    d.ok(json!({"member": "select_option", "tab_id": null, "target": colour, "values": ["Red"]}))
        .await;
    assert!(d.text().await.contains("colour r"));
    d.fails(
        json!({"member": "select_option", "tab_id": null, "target": colour, "values": ["Blue"]}),
        "not_actionable",
    )
    .await;
    d.fails(
        json!({"member": "type", "tab_id": null, "target": go, "text": "x"}),
        "not_actionable",
    )
    .await;
    // A key combination: select all in the focused field, then replace.
    let msg = by_label(&read, "Message")["ref"].clone();
    d.ok(json!({"member": "click", "tab_id": null, "target": msg}))
        .await;
    d.ok(json!({"member": "key", "tab_id": null, "keys": ["Control", "a"]}))
        .await;
    d.ok(json!({"member": "type", "tab_id": null, "target": null, "text": "bye"}))
        .await;
    assert_eq!(
        by_label(&d.read("interactive").await, "Message")["value"],
        "bye"
    );
    d.fails(
        json!({"member": "key", "tab_id": null, "keys": ["NoSuchKey"]}),
        "unknown_key",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_bound_at_execution_and_stale_refs_do_nothing() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/form")).await;
    let read = d.read("interactive").await;
    let name = by_label(&read, "Full name")["ref"].clone();
    // A reload is another document: the old ref is stale, nothing typed.
    d.goto(&format!("{origin}/form")).await;
    d.fails(
        json!({"member": "type", "tab_id": null, "target": name, "text": "typed"}),
        "stale_target",
    )
    .await;
    let now = d.read("interactive").await;
    assert_eq!(
        by_label(&now, "Full name")["value"],
        "Ann",
        "nothing was typed"
    );
    assert_ne!(by_label(&now, "Full name")["ref"], name);
    // An element that became invisible is stale too.
    let go = by_label(&now, "Go")["ref"].clone();
    d.ok(json!({"member": "new_tab", "url": null})).await;
    // ... and a ref of another tab's document.
    d.fails(
        json!({"member": "click", "tab_id": null, "target": go}),
        "stale_target",
    )
    .await;
    // A ref that was never issued.
    d.fails(
        json!({"member": "hover", "tab_id": null, "target": "nope.1"}),
        "stale_target",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tabs_have_stable_ids_and_exactly_one_active() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    let first = d.goto(&format!("{origin}/form")).await;
    let tabs = first["state"]["tabs"].as_array().unwrap().clone();
    assert_eq!(tabs.len(), 1, "{first}");
    assert_eq!(tabs[0]["active"], true);
    assert_eq!(tabs[0]["title"], "Every role");
    assert_eq!(tabs[0]["url"], format!("{origin}/form"));
    let a = tabs[0]["id"].as_str().unwrap().to_string();

    let opened = d
        .ok(json!({"member": "new_tab", "url": format!("{origin}/other")}))
        .await;
    let tabs = opened["state"]["tabs"].as_array().unwrap();
    assert_eq!(tabs.len(), 2);
    assert_eq!(tabs.iter().filter(|t| t["active"] == true).count(), 1);
    let b = tabs.iter().find(|t| t["id"] != a.as_str()).unwrap();
    assert_eq!((&b["active"], &b["title"]), (&json!(true), &json!("Other")));
    let b = b["id"].as_str().unwrap().to_string();

    let switched = d.ok(json!({"member": "switch_tab", "tab_id": a})).await;
    let active: Vec<&str> = switched["state"]["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["active"] == true)
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(active, [a.as_str()]);
    // Reads of a named tab read that tab.
    let other = d.ok(json!({"member": "get_page_text", "tab_id": b})).await;
    assert!(
        other["outcome"]["text"]
            .as_str()
            .unwrap()
            .contains("The other page")
    );

    let closed = d.ok(json!({"member": "close_tab", "tab_id": b})).await;
    assert_eq!(closed["state"]["tabs"].as_array().unwrap().len(), 1);
    d.fails(json!({"member": "switch_tab", "tab_id": b}), "no_such_tab")
        .await;
    d.fails(
        json!({"member": "close_tab", "tab_id": a}),
        "not_actionable",
    )
    .await;
    let (status, state) = d.post("/v1/browser/state", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(state["tabs"][0]["id"], a.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pages_end_in_limits_never_hangs_or_bad_text() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;

    d.goto(&format!("{origin}/big")).await;
    let t = Instant::now();
    let big = d.read("all").await;
    eprintln!("read_page of 10,000 buttons: {:?}", t.elapsed());
    assert_eq!(big["elements"].as_array().unwrap().len(), 500);
    assert!(omitted(&big).contains(&"report_limit".to_string()));

    // 100,000 nodes: the walk stops at its node budget and says so.
    d.goto(&format!("{origin}/huge")).await;
    let t = Instant::now();
    let huge = d.read("interactive").await;
    eprintln!("read_page of 100,000 nodes: {:?}", t.elapsed());
    assert!(
        omitted(&huge).contains(&"work_limit".to_string()),
        "{:?}",
        omitted(&huge)
    );

    d.goto(&format!("{origin}/shadow")).await;
    let deep = d.read("interactive").await;
    let b = by_label(&deep, "Deep button")["ref"].clone();
    let clicked = d
        .ok(json!({"member": "click", "tab_id": null, "target": b}))
        .await;
    assert_eq!(clicked["state"]["tabs"][0]["title"], "deep clicked");

    d.goto(&format!("{origin}/frames")).await;
    let frames = d.read("interactive").await;
    by_label(&frames, "Top");
    let inner = by_label(&frames, "Inner button")["ref"].clone();
    assert_eq!(
        frames["elements"].as_array().unwrap().len(),
        2,
        "the cross-origin frame's button is not reported: {frames}"
    );
    assert!(omitted(&frames).contains(&"remote_action".to_string()));
    d.ok(json!({"member": "click", "tab_id": null, "target": inner}))
        .await;

    d.goto(&format!("{origin}/lone")).await;
    let lone = d.read("all").await;
    assert_eq!(by_label(&lone, "half \u{FFFD} pair")["role"], "button");
    let (_, state) = d.post("/v1/browser/state", json!({})).await;
    assert_eq!(state["tabs"][0]["title"], "bad \u{FFFD} title");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshot_and_zoom_capture_the_viewport_as_png() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/form")).await;
    let shot = d.ok(json!({"member": "screenshot", "tab_id": null})).await;
    let img = &shot["outcome"];
    assert_eq!(img["kind"], "image");
    let (w, h) = (
        img["width"].as_u64().unwrap(),
        img["height"].as_u64().unwrap(),
    );
    assert!(w > 600 && h > 300, "{w}x{h}");
    let zoom = d
        .ok(json!({"member": "zoom", "tab_id": null, "region": [10, 20, 110, 70]}))
        .await;
    assert_eq!(
        (
            zoom["outcome"]["width"].as_u64(),
            zoom["outcome"]["height"].as_u64()
        ),
        (Some(100), Some(50))
    );
    d.fails(
        json!({"member": "zoom", "tab_id": null, "region": [0, 0, w + 1, 10]}),
        "out_of_bounds",
    )
    .await;
    d.fails(
        json!({"member": "zoom", "tab_id": null, "region": [5, 0, 5, 10]}),
        "invalid_action",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigation_opens_web_urls_only_and_wait_for_is_bounded() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    for url in [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "data:text/html,hi",
    ] {
        d.fails(
            json!({"member": "navigate", "tab_id": null, "url": url}),
            "invalid_action",
        )
        .await;
    }
    d.goto(&format!("{origin}/late")).await;
    let r = d
        .ok(json!({"member": "wait_for", "tab_id": null, "text": "  Ready\n now ", "timeout_ms": 5000}))
        .await;
    assert_eq!(r["outcome"]["kind"], "text");
    let t = Instant::now();
    d.fails(
        json!({"member": "wait_for", "tab_id": null, "text": "never", "timeout_ms": 300}),
        "wait_timed_out",
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(5));
    // Unknown fields and a missing member are refused before anything runs.
    let (status, body) = d
        .post(
            "/v1/browser/call",
            json!({"member": "navigate", "tab_id": null, "url": "about:blank", "x": 1}),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );
    let (status, _) = d
        .post("/v1/browser/call", json!({"member": "list_tabs"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scroll_moves_the_page_and_scroll_to_brings_a_target_into_view() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/big")).await;
    // A digest of the capture (the PNG itself would flood a failure).
    let shot = || async {
        use std::hash::{Hash as _, Hasher as _};
        let r = d.ok(json!({"member": "screenshot", "tab_id": null})).await;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        r["outcome"]["png_base64"].as_str().unwrap().hash(&mut h);
        h.finish()
    };
    let top = shot().await;
    d.ok(json!({"member": "scroll", "tab_id": null, "direction": "down", "amount": 300}))
        .await;
    let scrolled = shot().await;
    assert_ne!(
        top, scrolled,
        "scrolling down changed what the viewport shows"
    );
    d.ok(json!({"member": "scroll", "tab_id": null, "direction": "up", "amount": 300}))
        .await;
    // Back at the top, read from the page itself: the pixels may differ
    // from the first capture by an overlay scrollbar still fading out or
    // a hover under the wheel's point (seen once in CI).
    let at = d
        .ok(json!({"member": "run_script", "tab_id": null, "source": "String(Math.round(scrollY))", "timeout_ms": 2000}))
        .await;
    assert_eq!(
        at["outcome"]["text"], "0",
        "scrolling back up shows the top again"
    );
    let read = d.read("interactive").await;
    let last = read["elements"][499]["ref"].clone();
    d.ok(json!({"member": "scroll_to", "tab_id": null, "target": last}))
        .await;
    assert_ne!(shot().await, top, "scroll_to moved the page");
    d.ok(json!({"member": "hover", "tab_id": null, "target": last}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_call_and_a_computer_action_never_interleave() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/form")).await;
    // A browser call that runs for a while (its text never shows) ...
    let waiting = d.post(
        "/v1/browser/call",
        json!({"member": "wait_for", "tab_id": null, "text": "never shown", "timeout_ms": 3000}),
    );
    let others = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        // ... meanwhile a computer action and a second browser call are
        // refused at once, not queued.
        let t = Instant::now();
        let action = d
            .post(
                "/v1/actions",
                json!({"actions": [{"type": "move", "x": 5, "y": 5}], "screenshot": {}}),
            )
            .await;
        let browser = d.post("/v1/browser/state", json!({})).await;
        (action, browser, t.elapsed())
    };
    let ((status, body), ((a_status, a_body), (b_status, b_body), took)) =
        tokio::join!(waiting, others);
    assert_eq!(body["code"], "wait_timed_out", "{status} {body}");
    assert_eq!(
        (a_status, &a_body["code"]),
        (StatusCode::CONFLICT, &json!("busy")),
        "{a_body}"
    );
    assert_eq!(
        (b_status, &b_body["code"]),
        (StatusCode::CONFLICT, &json!("busy")),
        "{b_body}"
    );
    assert!(
        took < Duration::from_millis(1500),
        "refused at once, took {took:?}"
    );
    // Once it is over, both work again.
    let (status, _) = d.post("/v1/browser/state", json!({})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialogs_are_dismissed_and_a_page_that_leaves_makes_its_refs_stale() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/dialog")).await;
    let read = d.read("interactive").await;
    // An alert opened by the click does not block the driver: it is
    // dismissed and the page goes on.
    let alert = by_label(&read, "Alert")["ref"].clone();
    d.ok(json!({"member": "click", "tab_id": null, "target": alert.clone()}))
        .await;
    let after = d.read("all").await;
    assert_eq!(after["elements"].as_array().unwrap().len(), 2, "{after}");
    let (_, state) = d.post("/v1/browser/state", json!({})).await;
    assert_eq!(state["tabs"][0]["title"], "after alert", "{state}");
    // A page that navigates itself: its refs go stale with it.
    let leave = by_label(&read, "Leave")["ref"].clone();
    d.ok(json!({"member": "click", "tab_id": null, "target": leave}))
        .await;
    d.ok(
        json!({"member": "wait_for", "tab_id": null, "text": "The other page", "timeout_ms": 5000}),
    )
    .await;
    d.fails(
        json!({"member": "click", "tab_id": null, "target": alert}),
        "stale_target",
    )
    .await;
}

/// A browser killed between two calls (a crash, `pkill` in the guest) is
/// started again by the next state read, which answers: the daemon does
/// not report its old browser's closed connection as the new state of
/// affairs (a run starting right after a crash reads the state first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_browser_is_started_again_by_the_next_state_read() {
    let Some(d) = daemon() else { return };
    d.ok(json!({"member": "navigate", "tab_id": null, "url": "about:blank"}))
        .await;
    for round in 0..3 {
        // Every firefox-esr of the daemon's process group, killed at once.
        let pgid = d.child.id().to_string();
        let killed = Command::new("pkill")
            .args(["-KILL", "-g", &pgid, "-x", FIREFOX])
            .status()
            .unwrap();
        assert!(killed.success(), "round {round}: no firefox-esr to kill");
        let (status, body) = d.post("/v1/browser/state", json!({})).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        assert_eq!(body["tabs"].as_array().map(Vec::len), Some(1), "{body}");
    }
}
