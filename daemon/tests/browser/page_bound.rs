//! An approval binds the page it was given on (docs/contract.md rule 28b), against
//! the real Firefox: `describe_page` names the tab, the document (a new
//! one on every load) and the focus; a call carrying them as
//! `expect_page` acts only while all are the same, else `stale_target`
//! and the page's own log shows nothing reached it.

use super::*;

/// The page's event log lines that start with `prefix`.
async fn logged(d: &Daemon, prefix: &str) -> Vec<String> {
    d.text()
        .await
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

async fn describe(d: &Daemon) -> Value {
    let r = d
        .ok(json!({"member": "describe_page", "tab_id": null}))
        .await;
    assert_eq!(r["outcome"]["kind"], "page", "{r}");
    r["outcome"].clone()
}

fn click_at(page: &Value, x: u64, y: u64) -> Value {
    json!({"member": "click_at", "tab_id": null, "x": x, "y": y, "button": "left",
           "click_count": 1, "keys": [],
           "expect_page": {"tab_id": page["tab_id"], "document": page["document"]}})
}

fn focus(id: &str) -> Value {
    json!({"member": "run_script", "tab_id": null, "timeout_ms": 1000,
           "source": format!("document.getElementById('{id}').focus(); 'ok'")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_act_only_on_the_tab_load_and_focus_they_were_approved_on() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    let url = format!("{origin}/pointer");
    d.goto(&url).await;

    // The same load: it acts.
    let first = describe(&d).await;
    assert_eq!(first["focus"], "none", "{first}");
    d.ok(click_at(&first, 50, 60)).await;
    assert_eq!(
        d.text_containing("click 50,60")
            .await
            .matches("click 50,60")
            .count(),
        1
    );
    // Another load of the same address: a new document, the old approval
    // is stale and nothing reaches the page.
    d.goto(&url).await;
    let second = describe(&d).await;
    assert_eq!(second["tab_id"], first["tab_id"]);
    assert_ne!(second["document"], first["document"]);
    d.fails(click_at(&first, 70, 80), "stale_target").await;
    d.ok(click_at(&second, 90, 100)).await;
    d.text_containing("click 90,100").await;
    assert!(logged(&d, "click 70,80").await.is_empty());

    // Keys go to the focus they were approved for.
    d.ok(focus("agree")).await;
    let on_agree = describe(&d).await;
    assert_ne!(on_agree["focus"], "none", "{on_agree}");
    d.ok(focus("plain")).await;
    let hold = |page: &Value| {
        json!({"member": "hold_keys", "tab_id": null, "keys": ["q"], "duration_ms": 20,
               "expect_page": {"tab_id": page["tab_id"], "document": page["document"],
                               "focus": page["focus"]}})
    };
    d.fails(hold(&on_agree), "stale_target").await;
    assert!(logged(&d, "keydown q").await.is_empty());
    let on_plain = describe(&d).await;
    assert_ne!(on_plain["focus"], on_agree["focus"]);
    d.ok(hold(&on_plain)).await;
    d.text_containing("keydown q").await;

    // Another tab in front: a `tab_id: null` call approved on the first
    // tab does nothing; naming that tab, it acts there.
    d.ok(json!({"member": "new_tab", "url": null})).await;
    d.fails(
        json!({"member": "scroll", "tab_id": null, "direction": "down", "amount": 100,
               "expect_page": {"tab_id": second["tab_id"]}}),
        "stale_target",
    )
    .await;
    d.ok(
        json!({"member": "scroll", "tab_id": second["tab_id"], "direction": "down", "amount": 100,
               "expect_page": {"tab_id": second["tab_id"]}}),
    )
    .await;
}
