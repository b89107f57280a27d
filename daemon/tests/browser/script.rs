//! `run_script` against the real Firefox (docs/contract.md rule 41): the page's own
//! realm (page privileges), a string result (empty allowed, anything else
//! refused), promises awaited, exceptions reported, and a timeout that
//! stops the local wait only and says so.

use super::*;

pub const PAGE: &str = r#"<!doctype html><title>Script page</title><body>
<p id="p">Hello</p>
<script>window.pageSecret = 'only the page knows'; var counter = 0;</script>
</body>"#;

fn script(source: &str, timeout_ms: u64) -> Value {
    json!({"member": "run_script", "tab_id": null, "source": source, "timeout_ms": timeout_ms})
}

async fn text_of(d: &Daemon, source: &str) -> String {
    let r = d.ok(script(source, 5000)).await;
    assert_eq!(r["outcome"]["kind"], "text", "{r}");
    r["outcome"]["text"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_script_runs_in_the_page_returns_strings_and_bounds_its_wait() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/script")).await;

    // The page's own realm: its globals, its DOM.
    assert_eq!(
        text_of(&d, "window.pageSecret").await,
        "only the page knows"
    );
    assert_eq!(text_of(&d, "document.title").await, "Script page");
    // Effects are real: the page sees them afterwards.
    assert_eq!(
        text_of(&d, "counter += 41; document.getElementById('p').textContent = 'changed'; String(counter + 1)").await,
        "42"
    );
    assert!(d.text().await.contains("changed"));
    // A promise is awaited; the empty string is a result.
    assert_eq!(
        text_of(&d, "new Promise((r) => setTimeout(() => r('later'), 200))").await,
        "later"
    );
    assert_eq!(text_of(&d, "''").await, "");
    // Not a string (null, a number, undefined): refused.
    for src in ["null", "42", "undefined", "({a: 1})"] {
        d.fails(script(src, 2000), "invalid_action").await;
    }
    // An exception is a failure; the page's text stays out of the code.
    d.fails(script("throw new Error('boom')", 2000), "browser_failed")
        .await;
    // A script that never settles: the wait stops at its timeout, said so.
    let t = Instant::now();
    let body = d
        .fails(script("new Promise(() => {})", 400), "timeout")
        .await;
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("outcome is unknown"),
        "{body}"
    );
    // The browser still answers afterwards.
    assert_eq!(text_of(&d, "document.title").await, "Script page");
    // Arguments are checked by the daemon too.
    for bad in [script("", 100), script("1", 0), script("1", 30_001)] {
        let (status, body) = d.post("/v1/browser/call", bad.clone()).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_action")),
            "{bad} -> {body}"
        );
    }
}
