//! `read_diagnostics` against the real Firefox (docs/contract.md rule 41): the
//! tab's console entries and network requests, filtered (no query
//! strings, user info, headers, cookies or credential-like console text),
//! bounded, text only.

use super::*;

pub const PAGE: &str = r#"<!doctype html><title>Diagnostics</title><body>
<script>
  console.log('page ready');
  console.warn('login with password=hunter2 failed');
  console.error('Authorization: Bearer sk-live-0123');
  fetch('/other?card=4111111111111111').then(() => console.info('fetched'));
</script></body>"#;

async fn diagnostics(d: &Daemon, source: &str, limit: u64) -> Value {
    let r = d
        .ok(json!({"member": "read_diagnostics", "tab_id": null, "source": source, "limit": limit}))
        .await;
    assert_eq!(r["outcome"]["kind"], "read", "{r}");
    assert_eq!(r["outcome"]["elements"], json!([]));
    r["outcome"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_diagnostics_returns_filtered_console_and_network_lines_of_the_tab() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/diag")).await;
    // The fetch completes after the load: wait for its console line.
    let end = Instant::now() + Duration::from_secs(10);
    let console = loop {
        let c = diagnostics(&d, "console", 100).await;
        if c["text"].as_str().unwrap().contains("fetched") {
            break c;
        }
        assert!(Instant::now() < end, "no 'fetched' line: {c}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let text = console["text"].as_str().unwrap();
    assert!(text.contains("info: page ready"), "{text}");
    assert!(
        text.contains("warn: login with password=[redacted] failed"),
        "{text}"
    );
    assert!(
        text.contains("error: Authorization: Bearer [redacted]"),
        "{text}"
    );
    for secret in ["hunter2", "sk-live"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // The last entries only.
    let last = diagnostics(&d, "console", 1).await;
    assert_eq!(last["text"], "info: fetched");

    let network = diagnostics(&d, "network", 100).await;
    let text = network["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("GET {origin}/other 200 text/html")),
        "{text}"
    );
    assert!(
        text.contains(&format!("GET {origin}/diag 200 text/html")),
        "{text}"
    );
    assert!(!text.contains("4111"), "{text}");

    // Another tab has its own history (none yet).
    d.ok(json!({"member": "new_tab", "url": null})).await;
    let empty = diagnostics(&d, "console", 100).await;
    assert_eq!(empty["text"], "");
    // Limits checked by the daemon too.
    let (status, body) = d
        .post(
            "/v1/browser/call",
            json!({"member": "read_diagnostics", "tab_id": null, "source": "console", "limit": 101}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}
