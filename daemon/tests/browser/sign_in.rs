//! The sign-in calls against the real Firefox (docs/contract.md rule 46,
//! the driver's half): the tab must be on the credential origin, each target a
//! live input of its kind (a password only into type=password), checked
//! again at fill time before anything is typed; filled values reach the
//! page's form but never a later read.

use super::*;

pub const PAGE: &str = r#"<!doctype html><title>Sign in</title><body>
<form id="f" onsubmit="event.preventDefault(); document.getElementById('out').textContent =
  'got ' + this.email.value.length + '/' + this.pw.value.length + '/' + (this.pw.value === 'canary-pw-7Qz' && this.email.value === 'op@example.test');">
<label for="email">Email</label> <input id="email" name="email" type="email">
<label for="pw">Password</label> <input id="pw" name="pw" type="password">
<label for="note">Note</label> <input id="note" name="note" type="text" readonly>
<button>Sign in</button>
</form>
<div id="out"></div>
</body>"#;

/// A page that moves the focus to another input after the fifth key typed
/// into the email input.
pub const STEAL: &str = r#"<!doctype html><title>Steal</title><body>
<label for="email">Email</label> <input id="email" type="email">
<label for="other">Other</label> <input id="other" type="text">
<script>let n = 0; document.getElementById('email').addEventListener('keydown', () => {
  if (++n === 5) document.getElementById('other').focus(); });</script>
</body>"#;

fn field(target: &Value, kind: &str) -> Value {
    json!({"target": target, "kind": kind})
}

fn value(target: &Value, kind: &str, v: &str) -> Value {
    json!({"target": target, "kind": kind, "value": v})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_binds_inputs_of_the_right_kind_on_the_right_origin_and_keeps_values_out_of_reads()
{
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/sign-in")).await;
    let read = d.read("interactive").await;
    let email = by_label(&read, "Email")["ref"].clone();
    let pw = by_label(&read, "Password")["ref"].clone();
    let note = by_label(&read, "Note")["ref"].clone();
    let button = by_label(&read, "Sign in")["ref"].clone();

    let check = |origin: &str, fields: Vec<Value>| json!({"member": "sign_in_check", "tab_id": null, "origin": origin, "fields": fields});
    let fill = |origin: &str, fields: Vec<Value>| json!({"member": "sign_in_fill", "tab_id": null, "origin": origin, "fields": fields});

    // The right inputs on the right origin.
    d.ok(check(
        &origin,
        vec![field(&email, "email"), field(&pw, "password")],
    ))
    .await;
    // Another origin (a look-alike port): refused.
    d.fails(
        check("http://127.0.0.1:1", vec![field(&email, "email")]),
        "invalid_action",
    )
    .await;
    // A password only into type=password; a button or a read-only input
    // takes nothing.
    for bad in [
        field(&email, "password"),
        field(&button, "text"),
        field(&note, "text"),
    ] {
        d.fails(check(&origin, vec![bad]), "not_actionable").await;
    }
    // An unknown ref: stale.
    d.fails(
        check(&origin, vec![field(&json!("nope.1"), "email")]),
        "stale_target",
    )
    .await;

    // A fill with one bad field types nothing at all.
    d.fails(
        fill(
            &origin,
            vec![
                value(&email, "email", "op@example.test"),
                value(&email.clone(), "password", "canary-pw-7Qz"),
            ],
        ),
        "invalid_action",
    )
    .await;
    d.fails(
        fill(
            &origin,
            vec![
                value(&email, "email", "op@example.test"),
                value(&note, "text", "x"),
            ],
        ),
        "not_actionable",
    )
    .await;
    let r = d
        .ok(json!({"member": "run_script", "tab_id": null, "source": "document.getElementById('email').value + '|' + document.getElementById('pw').value", "timeout_ms": 2000}))
        .await;
    assert_eq!(r["outcome"]["text"], "|", "nothing typed: {r}");

    // The real fill: the form gets exactly the values.
    d.ok(fill(
        &origin,
        vec![
            value(&email, "email", "op@example.test"),
            value(&pw, "password", "canary-pw-7Qz"),
        ],
    ))
    .await;
    // No read shows them: neither the values nor `find` on them.
    let after = d.read("all").await;
    let shown = after.to_string();
    assert!(!shown.contains("op@example.test"), "{shown}");
    assert!(!shown.contains("canary-pw-7Qz"), "{shown}");
    assert!(by_label(&after, "Email").get("value").is_none(), "{after}");
    assert!(omitted(&after).contains(&"private".to_string()), "{after}");
    let found = d
        .ok(json!({"member": "find", "tab_id": null, "query": "op@example.test"}))
        .await;
    assert!(!found.to_string().contains("op@example.test"), "{found}");
    // The page itself has them (checked by the page, which answers a
    // yes/no and lengths only).
    d.ok(json!({"member": "click", "tab_id": null, "target": button}))
        .await;
    d.ok(json!({"member": "wait_for", "tab_id": null, "text": "got", "timeout_ms": 5000}))
        .await;
    assert!(
        d.text().await.contains("got 15/13/true"),
        "{}",
        d.text().await
    );

    // After a navigation the refs are stale: a fill is refused.
    d.goto(&format!("{origin}/sign-in")).await;
    d.fails(
        fill(&origin, vec![value(&email, "email", "op@example.test")]),
        "stale_target",
    )
    .await;
}

/// docs/security.md L14: a value goes only into the input the driver bound,
/// on a document loaded from the credential origin. A failed load keeps the
/// tab's URL (the address that failed) but not its origin, and an input
/// that loses the focus while its value is typed stops the fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_binds_to_the_loaded_origin_and_to_the_focused_input() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    let check = |origin: &str, fields: Vec<Value>| json!({"member": "sign_in_check", "tab_id": null, "origin": origin, "fields": fields});
    let fill = |origin: &str, fields: Vec<Value>| json!({"member": "sign_in_fill", "tab_id": null, "origin": origin, "fields": fields});

    // The focus moves away mid-value: the fill stops before the next part.
    d.goto(&format!("{origin}/sign-in-steal")).await;
    let read = d.read("interactive").await;
    let email = by_label(&read, "Email")["ref"].clone();
    let long = format!("{}@example.test", "a".repeat(300));
    let failed = d
        .fails(
            fill(&origin, vec![value(&email, "email", &long)]),
            "not_actionable",
        )
        .await;
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("lost the focus"),
        "{failed}"
    );
    let r = d
        .ok(json!({"member": "run_script", "tab_id": null, "source": "document.getElementById('email').value.length + '|' + document.getElementById('other').value.length", "timeout_ms": 2000}))
        .await;
    let typed = r["outcome"]["text"].as_str().unwrap().to_string();
    let (in_email, in_other) = typed.split_once('|').unwrap();
    let total: usize = in_email.parse::<usize>().unwrap() + in_other.parse::<usize>().unwrap();
    assert!(
        total < long.len(),
        "the fill went on after the focus moved: {typed}"
    );

    // An address nothing answers: the tab keeps its URL, but the error page
    // in it was not loaded from that origin.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let _ = d
        .post(
            "/v1/browser/call",
            json!({"member": "navigate", "tab_id": null, "url": format!("{dead}/login")}),
        )
        .await;
    let failed = d
        .fails(
            check(&dead, vec![field(&json!("0123456789ab.1"), "password")]),
            "invalid_action",
        )
        .await;
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("not loaded from the credential origin"),
        "{failed}"
    );
}
