//! The opt-in pointer and key members against the real Firefox (docs/contract.md
//! rule 39): click_at, drag_path, hover_at at viewport points in CSS
//! pixels, hold_keys, set_checked. The page logs what it received as
//! trusted events; the test reads that log back through get_page_text.

use super::*;

/// A pad that logs pointer events, a checkbox and a radio group that log
/// their changes, and a key log with hold times.
pub const PAGE: &str = r#"<!doctype html><title>Pointer</title>
<body style="margin:0">
<div id="pad" style="position:absolute;left:0;top:0;width:400px;height:300px;background:#ddd"></div>
<div style="position:absolute;left:0;top:320px">
<label><input type="checkbox" id="agree"> Agree</label>
<label><input type="radio" name="r" id="r1"> One</label>
<label><input type="radio" name="r" id="r2" checked> Two</label>
<button id="plain">Plain</button>
<p id="at">at none</p>
<pre id="log"></pre>
</div>
<script>
  const log = [];
  const note = (s) => { log.push(s); document.getElementById('log').textContent = log.join('\n'); };
  const pad = document.getElementById('pad');
  const mods = (e) => ['ctrl', 'alt', 'shift', 'meta'].filter((m) => e[m + 'Key']).join('+') || 'none';
  pad.addEventListener('click', (e) => note(`click ${e.clientX},${e.clientY} detail${e.detail} mods ${mods(e)} trusted ${e.isTrusted}`));
  pad.addEventListener('dblclick', (e) => note('dblclick'));
  pad.addEventListener('contextmenu', (e) => { e.preventDefault(); note(`contextmenu ${e.clientX},${e.clientY}`); });
  pad.addEventListener('mousedown', (e) => note(`down ${e.clientX},${e.clientY} button${e.button} mods ${mods(e)}`));
  pad.addEventListener('mouseup', (e) => note(`up ${e.clientX},${e.clientY} button${e.button}`));
  pad.addEventListener('mousemove', (e) => {
    document.getElementById('at').textContent = `at ${e.clientX},${e.clientY} buttons${e.buttons}`;
    if (e.buttons & 1) note(`drag ${e.clientX},${e.clientY}`);
  });
  for (const id of ['agree', 'r1', 'r2'])
    document.getElementById(id).addEventListener('change', (e) => note(`change ${id} ${e.target.checked}`));
  const down = {};
  document.addEventListener('keydown', (e) => { if (!e.repeat) { down[e.key] = performance.now(); note(`keydown ${e.key}`); } });
  document.addEventListener('keyup', (e) => note(`keyup ${e.key} after ${Math.round(performance.now() - (down[e.key] || 0))}`));
</script></body>"#;

/// The page's event log, one line per event.
async fn events(d: &Daemon) -> Vec<String> {
    let text = d.text().await;
    text.lines()
        .map(str::trim)
        .filter(|l| {
            [
                "click",
                "dblclick",
                "contextmenu",
                "down",
                "up",
                "drag",
                "change",
                "keydown",
                "keyup",
            ]
            .iter()
            .any(|p| l.starts_with(&format!("{p} ")) || *l == *p)
        })
        .map(str::to_string)
        .collect()
}

fn click_at(x: u64, y: u64, button: &str, count: u64, keys: &[&str]) -> Value {
    json!({"member": "click_at", "tab_id": null, "x": x, "y": y, "button": button,
           "click_count": count, "keys": keys})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn click_at_hover_at_and_drag_path_reach_the_page_as_trusted_input_at_css_points() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/pointer")).await;

    d.ok(click_at(50, 60, "left", 1, &[])).await;
    // (Firefox counts no double click while Control is held: on Linux a
    // control-click is a click of its own.)
    d.ok(click_at(100, 120, "left", 2, &["Alt", "Shift"])).await;
    d.ok(click_at(200, 150, "right", 1, &[])).await;
    // The last of these events, once in the page, means all are.
    d.text_containing("up 200,150 button2").await;
    let ev = events(&d).await;
    assert!(
        ev.contains(&"click 50,60 detail1 mods none trusted true".to_string()),
        "{ev:?}"
    );
    // Two clicks in a row are a double click, modifiers held throughout.
    assert!(
        ev.contains(&"click 100,120 detail2 mods alt+shift trusted true".to_string()),
        "{ev:?}"
    );
    assert!(ev.contains(&"dblclick".to_string()), "{ev:?}");
    assert!(
        ev.contains(&"down 200,150 button2 mods none".to_string()),
        "{ev:?}"
    );
    assert!(ev.contains(&"contextmenu 200,150".to_string()), "{ev:?}");
    // Released afterwards: a plain click carries no modifier.
    d.ok(click_at(10, 10, "left", 1, &[])).await;
    d.text_containing("click 10,10").await;
    assert!(
        events(&d)
            .await
            .contains(&"click 10,10 detail1 mods none trusted true".to_string())
    );

    // Hover: the pointer moves, no button held, nothing clicked.
    let before = events(&d).await.len();
    d.ok(json!({"member": "hover_at", "tab_id": null, "x": 333, "y": 222}))
        .await;
    let text = d.text_containing("at 333,222 buttons0").await;
    assert!(text.contains("at 333,222 buttons0"), "{text}");
    assert_eq!(events(&d).await.len(), before, "hovering pressed nothing");

    // A drag: pressed at the first point, moved through the others, released
    // at the last.
    d.ok(
        json!({"member": "drag_path", "tab_id": null, "keys": ["Alt"],
                "path": [{"x": 20, "y": 20}, {"x": 120, "y": 40}, {"x": 220, "y": 90}]}),
    )
    .await;
    d.text_containing("up 220,90 button0").await;
    let ev = events(&d).await;
    let tail: Vec<&String> = ev[before..].iter().collect();
    assert!(
        tail.contains(&&"down 20,20 button0 mods alt".to_string()),
        "{tail:?}"
    );
    assert!(tail.contains(&&"drag 120,40".to_string()), "{tail:?}");
    assert!(tail.contains(&&"up 220,90 button0".to_string()), "{tail:?}");

    // Points outside the viewport as it is now: refused, nothing happens.
    let before = events(&d).await;
    d.fails(click_at(100_000, 5, "left", 1, &[]), "out_of_bounds")
        .await;
    d.fails(
        json!({"member": "drag_path", "tab_id": null, "keys": [],
               "path": [{"x": 20, "y": 20}, {"x": 20, "y": 90_000}]}),
        "out_of_bounds",
    )
    .await;
    d.fails(
        json!({"member": "hover_at", "tab_id": null, "x": 5, "y": 90_000}),
        "out_of_bounds",
    )
    .await;
    assert_eq!(events(&d).await, before);
    // The daemon checks the arguments too (the host is not trusted to).
    for bad in [
        click_at(1, 1, "left", 4, &[]),
        click_at(1, 1, "left", 1, &["Shift", "Shift"]),
        json!({"member": "drag_path", "tab_id": null, "keys": [], "path": [{"x": 1, "y": 1, "z": 1}, {"x": 2, "y": 2}]}),
        json!({"member": "drag_path", "tab_id": null, "keys": [], "path": [{"x": 1, "y": 1}]}),
        json!({"member": "hold_keys", "tab_id": null, "keys": ["a", "a"], "duration_ms": 10}),
        json!({"member": "hold_keys", "tab_id": null, "keys": ["a"], "duration_ms": 3001}),
    ] {
        let (status, body) = d.post("/v1/browser/call", bad.clone()).await;
        assert!(
            matches!(
                (status, body["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some("bad_request"))
                    | (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_action"))
            ),
            "{bad} -> {status} {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_keys_holds_for_the_duration_and_releases_even_when_the_call_is_dropped() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/pointer")).await;
    d.ok(
        json!({"member": "hold_keys", "tab_id": null, "keys": ["Shift", "b"], "duration_ms": 400}),
    )
    .await;
    d.text_containing("keyup Shift after ").await;
    let ev = events(&d).await;
    let held = |key: &str| -> u64 {
        let line = ev
            .iter()
            .find(|l| l.starts_with(&format!("keyup {key} after ")))
            .unwrap_or_else(|| panic!("no keyup of {key}: {ev:?}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(ev.contains(&"keydown Shift".to_string()), "{ev:?}");
    assert!(held("Shift") >= 350, "{ev:?}");
    assert!(held("B") >= 350 || held("b") >= 350, "{ev:?}");
    d.fails(
        json!({"member": "hold_keys", "tab_id": null, "keys": ["NoSuchKey"], "duration_ms": 10}),
        "unknown_key",
    )
    .await;

    // A 3 s hold whose client goes away after 0.5 s: the keys come up at
    // once, not after the 3 s.
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        d.post(
            "/v1/browser/call",
            json!({"member": "hold_keys", "tab_id": null, "keys": ["Control"], "duration_ms": 3000}),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the hold should still have been running");
    let end = Instant::now() + Duration::from_secs(10);
    let released = loop {
        let (status, _) = d.post("/v1/browser/state", json!({})).await;
        if status == StatusCode::OK {
            let ev = events(&d).await;
            if let Some(l) = ev.iter().find(|l| l.starts_with("keyup Control after ")) {
                break l.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
            }
        }
        assert!(Instant::now() < end, "Control was never released");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        released < 2500,
        "released after {released} ms: at the end of the hold, not when the call was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_checked_is_idempotent_bound_to_the_original_control_and_refuses_others() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;
    d.goto(&format!("{origin}/pointer")).await;
    let read = d.read("interactive").await;
    let agree = by_label(&read, "Agree")["ref"].clone();
    let one = by_label(&read, "One")["ref"].clone();
    let two = by_label(&read, "Two")["ref"].clone();
    let plain = by_label(&read, "Plain")["ref"].clone();
    let set = |target: &Value, checked: bool| json!({"member": "set_checked", "tab_id": null, "target": target, "checked": checked});

    d.ok(set(&agree, true)).await;
    // True twice stays checked, and changes nothing the second time.
    d.ok(set(&agree, true)).await;
    let ev = events(&d).await;
    assert_eq!(
        ev.iter().filter(|l| l.starts_with("change agree")).count(),
        1,
        "{ev:?}"
    );
    assert!(ev.contains(&"change agree true".to_string()));
    assert_eq!(
        by_label(&d.read("interactive").await, "Agree")["checked"],
        true
    );
    d.ok(set(&agree, false)).await;
    assert!(events(&d).await.contains(&"change agree false".to_string()));

    // A radio is chosen; it cannot be cleared by itself.
    d.ok(set(&one, true)).await;
    assert!(events(&d).await.contains(&"change r1 true".to_string()));
    assert_eq!(
        by_label(&d.read("interactive").await, "Two")["checked"],
        false
    );
    d.fails(set(&one, false), "not_actionable").await;
    d.ok(set(&two, false)).await; // already unchecked: nothing to do
    // Not a checkbox or radio.
    d.fails(set(&plain, true), "not_actionable").await;
    // A replaced control (the page reloaded): its ref is stale, and the
    // new control stays as it is.
    d.goto(&format!("{origin}/pointer")).await;
    d.fails(set(&agree, true), "stale_target").await;
    assert_eq!(
        by_label(&d.read("interactive").await, "Agree")["checked"],
        false
    );
}
