//! The sign-in calls against the real Firefox (issue 14 part 3, the
//! driver's half): the tab must be on the credential origin, each target a
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
