//! `read_page_scoped` against the real Firefox (docs/contract.md rule 40): a null
//! root lists the visible sections as scope refs; a scope ref reads inside
//! its section to `depth` DOM levels (shadow roots and frames count as
//! levels); scope refs never equal element refs, are refused by every
//! member that acts, and go stale with the document or when hidden.

use super::*;

pub const PAGE: &str = r#"<!doctype html><title>Checkout</title><body>
<header><nav aria-label="Main menu"><a href="/other">Home</a> <a href="/other">About</a></nav></header>
<main>
  <section id="billing" aria-label="Billing">
    <p>Billing details here</p>
    <input aria-label="Card number"> <button>Pay</button>
  </section>
  <section aria-labelledby="ship-h">
    <h2 id="ship-h">Shipping</h2>
    <p>Shipping details here</p>
    <div id="host"></div>
    <fieldset><legend>Speed</legend>
      <label><input type="radio" name="s"> Fast</label>
    </fieldset>
  </section>
  <button onclick="document.getElementById('billing').style.display = 'none'">Hide billing</button>
</main>
<footer>Footer text</footer>
<script>
  const root = document.getElementById('host').attachShadow({mode: 'open'});
  const b = document.createElement('button'); b.textContent = 'Deep ship'; root.appendChild(b);
</script></body>"#;

async fn scoped(d: &Daemon, root: Value, depth: u64, filter: &str) -> Value {
    let r = d
        .ok(json!({"member": "read_page_scoped", "tab_id": null, "root": root, "depth": depth, "filter": filter}))
        .await;
    assert_eq!(r["outcome"]["kind"], "read", "{r}");
    r["outcome"].clone()
}

fn labels(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["label"].as_str().unwrap().to_string())
        .collect()
}

fn scope_ref(v: &Value, label: &str) -> Value {
    v["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"] == label)
        .unwrap_or_else(|| panic!("no scope {label:?} in {v}"))["ref"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_reads_list_sections_read_inside_one_and_refs_stay_apart() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/scoped")).await;

    // Null root: the visible sections, named by label, heading or legend.
    let page = scoped(&d, Value::Null, 32, "interactive").await;
    let sections = labels(&page, "scopes");
    for want in ["Main menu", "Billing", "Shipping", "Speed"] {
        assert!(sections.contains(&want.to_string()), "{sections:?}");
    }
    let element_refs: Vec<&Value> = page["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["ref"])
        .collect();
    let scope_refs: Vec<&Value> = page["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["ref"])
        .collect();
    let mut unique = scope_refs.clone();
    unique.sort_by_key(|v| v.to_string());
    unique.dedup();
    assert_eq!(unique.len(), scope_refs.len(), "scope refs are unique");
    assert!(
        scope_refs.iter().all(|s| !element_refs.contains(s)),
        "a scope ref equals an element ref: {page}"
    );

    // Inside Billing only: its controls and text, nothing of Shipping.
    let billing = scope_ref(&page, "Billing");
    let inside = scoped(&d, billing.clone(), 32, "all").await;
    assert_eq!(labels(&inside, "elements"), ["Card number", "Pay"]);
    let text = inside["text"].as_str().unwrap();
    assert!(text.contains("Billing details here"), "{text}");
    assert!(!text.contains("Shipping"), "{text}");

    // Depth counts DOM levels below the root, into the shadow root too:
    // section > div#host (1) > shadow button (2).
    let shipping = scope_ref(&page, "Shipping");
    let shallow = scoped(&d, shipping.clone(), 1, "interactive").await;
    assert!(
        !labels(&shallow, "elements").contains(&"Deep ship".to_string()),
        "{shallow}"
    );
    let deeper = scoped(&d, shipping.clone(), 2, "interactive").await;
    assert!(
        labels(&deeper, "elements").contains(&"Deep ship".to_string()),
        "{deeper}"
    );
    assert_eq!(labels(&deeper, "scopes"), ["Speed"]);

    // A scope ref chooses a read root and nothing else.
    d.fails(
        json!({"member": "click", "tab_id": null, "target": billing}),
        "not_actionable",
    )
    .await;
    d.fails(
        json!({"member": "type", "tab_id": null, "target": billing, "text": "x"}),
        "not_actionable",
    )
    .await;
    d.fails(
        json!({"member": "set_checked", "tab_id": null, "target": billing, "checked": true}),
        "not_actionable",
    )
    .await;
    // An element ref is no root; an unknown one names nothing.
    let pay = inside["elements"][1]["ref"].clone();
    d.fails(
        json!({"member": "read_page_scoped", "tab_id": null, "root": pay, "depth": 3, "filter": "all"}),
        "not_actionable",
    )
    .await;
    d.fails(
        json!({"member": "read_page_scoped", "tab_id": null, "root": "div.main", "depth": 3, "filter": "all"}),
        "stale_target",
    )
    .await;

    // Hidden: its scope ref and its elements' refs go stale together.
    let hide = page["elements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["label"] == "Hide billing")
        .unwrap()["ref"]
        .clone();
    d.ok(json!({"member": "click", "tab_id": null, "target": hide}))
        .await;
    d.fails(
        json!({"member": "read_page_scoped", "tab_id": null, "root": billing, "depth": 3, "filter": "all"}),
        "stale_target",
    )
    .await;
    d.fails(
        json!({"member": "click", "tab_id": null, "target": pay}),
        "stale_target",
    )
    .await;
    // Another document: every scope ref of the old one is stale.
    d.goto(&format!("{origin}/scoped")).await;
    d.fails(
        json!({"member": "read_page_scoped", "tab_id": null, "root": shipping, "depth": 3, "filter": "all"}),
        "stale_target",
    )
    .await;
}
