//! The host's URL policy at execution (docs/contract.md rule 30a), against the real
//! Firefox: a call carrying `url_policy` acts only on a document whose
//! origin is in it, checked in that document when the call runs. Two
//! origins of one server: `http://127.0.0.1:PORT` (allowed) and
//! `http://localhost:PORT` (not). A 302 from the allowed origin and a
//! page's own script navigation both land on the other one; there every
//! state-changing member is `out_of_policy` and the page sees nothing,
//! while the same call without the policy does act (the refusal is the
//! policy's, not a broken page's).

use super::*;

/// The page both origins serve: a field, a button and a file input, each
/// reporting what reached it.
const PAGE: &str = r#"<!doctype html><title>Policy</title><body>
<input aria-label="Name" oninput="document.getElementById('out').textContent += ' typed:' + this.value">
<button onclick="document.getElementById('out').textContent += ' clicked'">Save</button>
<input type="file" aria-label="Upload" onchange="document.getElementById('out').textContent += ' file:' + this.files[0].name">
<div style="height: 3000px"></div>
<div id="out">log</div>
</body>"#;

/// Serves the pages; returns (allowed origin, other origin).
async fn two_origins() -> (String, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let other = format!("http://localhost:{port}");
    let to = format!("{other}/page");
    let leave = format!(
        "<!doctype html><title>Leaving</title><body><p>Leaving</p>\
         <script>setTimeout(() => location.href = '{to}', 300)</script></body>"
    );
    let app = axum::Router::new()
        .route("/page", get(|| async { Html(PAGE) }))
        .route(
            "/redirect",
            get(move || async move { (StatusCode::FOUND, [(http::header::LOCATION, to)]) }),
        )
        .route("/leave", get(move || async move { Html(leave) }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://127.0.0.1:{port}"), other)
}

/// `call` with the policy `[origin]`.
fn within(mut call: Value, origin: &str) -> Value {
    call["url_policy"] = json!([origin]);
    call
}

/// The active tab's URL.
async fn active_url(d: &Daemon) -> String {
    let (_, state) = d.post("/v1/browser/state", json!({})).await;
    state["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["active"] == true)
        .unwrap()["url"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every state-changing member with a policy the page's origin is not in:
/// `out_of_policy`, and the page's log shows nothing reached it.
async fn nothing_acts_here(d: &Daemon, allowed: &str) {
    let read = d.read("interactive").await;
    let name = by_label(&read, "Name")["ref"].clone();
    let save = by_label(&read, "Save")["ref"].clone();
    let calls = [
        json!({"member": "type", "tab_id": null, "text": "secret", "target": name}),
        json!({"member": "click", "tab_id": null, "target": save}),
        json!({"member": "hover", "tab_id": null, "target": save}),
        json!({"member": "scroll_to", "tab_id": null, "target": save}),
        json!({"member": "scroll", "tab_id": null, "direction": "down", "amount": 500}),
        json!({"member": "click_at", "tab_id": null, "x": 20, "y": 20, "button": "left", "click_count": 1, "keys": []}),
        json!({"member": "hold_keys", "tab_id": null, "keys": ["a"], "duration_ms": 50}),
        json!({"member": "run_script", "tab_id": null, "source": "document.getElementById('out').textContent += ' script'; 'ran'", "timeout_ms": 1000}),
        json!({"member": "set_file", "tab_id": null, "name": "cv.txt", "content_base64": "aGVsbG8="}),
        json!({"member": "take_download"}),
    ];
    for call in calls {
        let body = d.fails(within(call, allowed), "out_of_policy").await;
        assert!(
            !body["message"].as_str().unwrap().contains("log"),
            "no page text in the error: {body}"
        );
    }
    let text = d.text().await;
    for mark in ["typed", "clicked", "file:", "script"] {
        assert!(!text.contains(mark), "{mark} reached the page: {text}");
    }
    let (status, body) = d
        .post(
            "/v1/browser/call",
            json!({"member": "get_page_text", "tab_id": null}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "reads stay allowed: {body}");
    // Without the policy the same click does act: the refusals above were
    // the policy's.
    d.ok(json!({"member": "click", "tab_id": null, "target": save}))
        .await;
    assert!(d.text_containing("clicked").await.contains("clicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_policy_holds_at_execution_after_a_redirect_and_a_script_navigation() {
    let Some(d) = daemon() else { return };
    let (allowed, other) = two_origins().await;

    // On the allowed origin, with the policy, the members act.
    d.ok(within(
        json!({"member": "navigate", "tab_id": null, "url": format!("{allowed}/page")}),
        &allowed,
    ))
    .await;
    let read = d.read("interactive").await;
    let name = by_label(&read, "Name")["ref"].clone();
    d.ok(within(
        json!({"member": "type", "tab_id": null, "text": "ann", "target": name}),
        &allowed,
    ))
    .await;
    d.ok(within(
        json!({"member": "set_file", "tab_id": null, "name": "cv.txt", "content_base64": "aGVsbG8="}),
        &allowed,
    ))
    .await;
    let text = d.text_containing("file:cv.txt").await;
    assert!(
        text.contains("typed:ann") && text.contains("file:cv.txt"),
        "{text}"
    );

    // A 302 from the allowed origin: the navigation is reported, and the
    // tab is on the other origin.
    let body = d
        .fails(
            within(
                json!({"member": "navigate", "tab_id": null, "url": format!("{allowed}/redirect")}),
                &allowed,
            ),
            "out_of_policy",
        )
        .await;
    assert!(
        body["message"].as_str().unwrap().contains("navigation"),
        "{body}"
    );
    assert!(active_url(&d).await.starts_with(&other));
    nothing_acts_here(&d, &allowed).await;

    // The page's own script navigation, after a load the policy allowed.
    d.ok(within(
        json!({"member": "navigate", "tab_id": null, "url": format!("{allowed}/leave")}),
        &allowed,
    ))
    .await;
    let end = Instant::now() + Duration::from_secs(10);
    while !active_url(&d).await.starts_with(&other) {
        assert!(Instant::now() < end, "the page did not navigate itself");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Wait for the new document's form.
    assert!(d.text_containing("log").await.contains("log"));
    nothing_acts_here(&d, &allowed).await;
}

/// docs/contract.md rule 28a, the driver's half: `describe_target` reads one target
/// as it is now, and a call's `expect` (the role and label the operator
/// was shown) binds it: a page that relabels the button after that is
/// refused as `stale_target` and the click does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_acts_only_on_the_target_as_the_operator_was_shown_it() {
    let Some(d) = daemon() else { return };
    let (allowed, _) = two_origins().await;
    d.goto(&format!("{allowed}/page")).await;
    let read = d.read("interactive").await;
    let save = by_label(&read, "Save")["ref"].clone();
    let describe = json!({"member": "describe_target", "tab_id": null, "target": save});
    let now = d.ok(describe.clone()).await;
    let els = now["outcome"]["elements"].as_array().unwrap();
    assert_eq!(els.len(), 1, "{now}");
    assert_eq!(
        (els[0]["role"].as_str(), els[0]["label"].as_str()),
        (Some("button"), Some("Save"))
    );
    // The page relabels it.
    d.ok(
        json!({"member": "run_script", "tab_id": null, "timeout_ms": 1000,
        "source": "document.querySelector('button').textContent = 'Delete account'; 'ok'"}),
    )
    .await;
    let now = d.ok(describe).await;
    assert_eq!(
        now["outcome"]["elements"][0]["label"], "Delete account",
        "{now}"
    );
    let mut click = json!({"member": "click", "tab_id": null, "target": save,
        "expect": {"role": "button", "label": "Save"}});
    d.fails(click.clone(), "stale_target").await;
    assert!(!d.text().await.contains("clicked"));
    // As shown now, it acts.
    click["expect"]["label"] = json!("Delete account");
    d.ok(click).await;
    assert!(d.text_containing("clicked").await.contains("clicked"));
    // A ref of nothing: stale, as for every member.
    d.fails(
        json!({"member": "describe_target", "tab_id": null, "target": "nope.1"}),
        "stale_target",
    )
    .await;
}
