//! The browser toolset's translation, against shapes copied from the SDK
//! (`anthropic==2.17.0`, `types/beta/beta_browser_*`); the Python tier
//! (`python/tests/test_anthropic_browser_loop.py`) validates every request
//! the loop sends with the SDK's own pydantic types on top of these.

use super::*;
use crate::browser::toolset::{NAVIGATION_REFUSED, Toolset, UrlPolicy, output};
use crate::model::anthropic::{from_message_in, to_messages_request};

fn toolset(add: &[&str]) -> Toolset {
    let add: Vec<String> = add.iter().map(|s| s.to_string()).collect();
    let policy = UrlPolicy::parse("http://127.0.0.1:8080").unwrap();
    Toolset::new(None, Some(&add), Some(policy), &[]).unwrap()
}

fn roles_of(pairs: &[(&str, &str)]) -> Roles {
    pairs
        .iter()
        .map(|(r, role)| (r.to_string(), role.to_string()))
        .collect()
}

/// Every seed call a script can express goes out as a member and comes
/// back as the same seed call, and the loop's own toolset accepts it.
#[test]
fn seed_calls_go_out_as_members_and_come_back_unchanged() {
    let ts = toolset(&["hover_at", "click_at", "read_page_scoped", "set_checked"]);
    let roles = roles_of(&[("r1", "textbox"), ("r2", "combobox"), ("r3", "checkbox")]);
    let cases = [
        (
            "navigate",
            json!({"url": "http://127.0.0.1:8080/form", "tab_id": null}),
        ),
        (
            "read_page",
            json!({"tab_id": null, "filter": "interactive"}),
        ),
        ("read_page", json!({"tab_id": "t1", "filter": "all"})),
        (
            "read_page_scoped",
            json!({"tab_id": null, "root": "s1", "depth": 4, "filter": "all"}),
        ),
        ("find", json!({"query": "the send button", "tab_id": null})),
        ("get_page_text", json!({"tab_id": null})),
        ("screenshot", json!({"tab_id": null})),
        ("zoom", json!({"tab_id": null, "region": [0, 0, 100, 50]})),
        ("click", json!({"target": "r9", "tab_id": null})),
        (
            "type",
            json!({"text": "Zoë 山田", "target": "r1", "tab_id": null}),
        ),
        (
            "select_option",
            json!({"target": "r2", "values": ["pt"], "tab_id": null}),
        ),
        (
            "set_checked",
            json!({"tab_id": null, "target": "r3", "checked": true}),
        ),
        ("hover", json!({"target": "r9", "tab_id": null})),
        ("hover_at", json!({"tab_id": null, "x": 5, "y": 6})),
        ("scroll_to", json!({"target": "r9", "tab_id": "t2"})),
        ("new_tab", json!({"url": null})),
        ("list_tabs", json!({})),
        ("switch_tab", json!({"tab_id": "t2"})),
        ("close_tab", json!({"tab_id": "t2"})),
    ];
    for (seed, args) in cases {
        let (name, input) = to_member(seed, &args).unwrap_or_else(|| panic!("{seed}"));
        let back = to_seed(name, &input, &roles).unwrap_or_else(|e| panic!("{seed}: {e}"));
        assert_eq!(back, (seed, args.clone()), "{seed} via {name} {input}");
        ts.prepare(&format!("browser_{seed}"), &back.1.to_string())
            .unwrap_or_else(|e| panic!("{seed}: the loop refuses {}: {e}", back.1));
    }
    // What stays a custom tool, and what no member expresses.
    assert_eq!(to_member("wait_for", &json!({"text": "x"})), None);
    assert_eq!(
        to_member("type", &json!({"text": "x", "target": null})),
        None
    );
    assert_eq!(to_member("new_tab", &json!({"url": "http://x"})), None);
}

/// The pointer members reach the loop's coordinate members, with their
/// button, count and modifiers.
#[test]
fn pointer_members_reach_click_at_drag_path_and_hover_at() {
    let none = Roles::new();
    let at = |x: i64, y: i64| json!({"type": "coordinate", "x": x, "y": y});
    assert_eq!(
        to_seed(
            "right_click",
            &json!({"target": at(3, 4), "modifiers": "ctrl+shift"}),
            &none
        )
        .unwrap(),
        (
            "click_at",
            json!({"tab_id": null, "x": 3, "y": 4, "button": "right", "click_count": 1,
                   "keys": ["Control", "Shift"]})
        )
    );
    assert_eq!(
        to_seed("triple_click", &json!({"target": at(1, 2)}), &none)
            .unwrap()
            .1["click_count"],
        3
    );
    assert_eq!(
        to_seed(
            "left_click",
            &json!({"target": {"type": "ref", "ref": "r"}, "modifiers": "cmd"}),
            &none
        )
        .unwrap_err(),
        "left_click: this browser needs a coordinate target here, not an element reference"
    );
    assert_eq!(
        to_seed(
            "left_click_drag",
            &json!({"from": at(1, 1), "target": at(9, 9)}),
            &none
        )
        .unwrap(),
        (
            "drag_path",
            json!({"tab_id": null, "path": [{"x": 1, "y": 1}, {"x": 9, "y": 9}], "keys": []})
        )
    );
    assert_eq!(
        to_seed(
            "scroll",
            &json!({"target": at(0, 0), "scroll_direction": "down"}),
            &none
        )
        .unwrap(),
        (
            "scroll",
            json!({"direction": "down", "amount": 300, "tab_id": null})
        )
    );
    assert_eq!(
        to_seed(
            "hold_key",
            &json!({"text": "shift", "duration": 1.5}),
            &none
        )
        .unwrap(),
        (
            "hold_keys",
            json!({"tab_id": null, "keys": ["shift"], "duration_ms": 1500})
        )
    );
    let js = to_seed("javascript_exec", &json!({"text": "document.title"}), &none).unwrap();
    assert_eq!(js.0, "run_script");
    assert!(
        js.1["source"]
            .as_str()
            .unwrap()
            .contains("\"document.title\"")
    );
}

/// What no seed call can carry out is refused with the reason, and the
/// call the loop receives is one its toolset refuses before anything is
/// read or asked.
#[test]
fn inputs_the_loop_cannot_run_are_refused_with_their_reason() {
    let none = Roles::new();
    let at = json!({"type": "coordinate", "x": 1, "y": 1});
    for (name, input, why) in [
        (
            "navigate",
            json!({"url": "back"}),
            "navigate: 'back' is not available",
        ),
        (
            "right_click",
            json!({"target": {"type": "ref", "ref": "r"}}),
            "needs a coordinate",
        ),
        (
            "mouse_move",
            json!({"target": {"type": "ref", "ref": "r"}}),
            "needs a coordinate",
        ),
        (
            "scroll",
            json!({"target": at, "scroll_direction": "down", "scroll_amount": 11}),
            "1 to 10",
        ),
        (
            "scroll",
            json!({"target": at, "scroll_direction": "in"}),
            "up, down, left or right",
        ),
        (
            "hold_key",
            json!({"text": "a", "duration": 4}),
            "up to 3 seconds",
        ),
        (
            "hold_key",
            json!({"text": "a b", "duration": 1}),
            "one key combination",
        ),
        ("zoom", json!({"region": [0, 0, 10]}), "[x0, y0, x1, y1]"),
        (
            "find",
            json!({"query": "x", "extra": 1}),
            "unknown field \"extra\"",
        ),
        (
            "form_input",
            json!({"target": at, "value": "x"}),
            "element reference",
        ),
        (
            "form_input",
            json!({"target": {"type": "ref", "ref": "r"}, "value": null}),
            "a string, a number",
        ),
        ("type", json!({"text": "x"}), "does not run this member"),
        ("wait", json!({"duration": 1}), "does not run this member"),
    ] {
        let e = to_seed(name, &input, &none).unwrap_err();
        assert!(e.contains(why), "{name} {input}: {e}");
        let call = function_call("toolu_1", name, &input, &none);
        let ts = toolset(&["click_at", "hover_at", "hold_keys"]);
        assert!(
            ts.prepare(
                call["name"].as_str().unwrap(),
                call["arguments"].as_str().unwrap()
            )
            .is_err(),
            "{call}"
        );
    }
}

/// `form_input` chooses its seed call by the value and by the role the
/// conversation's reads gave the ref.
#[test]
fn form_input_follows_the_value_and_the_role_read() {
    let read = output(
        "call_1",
        Some(json!({"tabs": []})),
        Ok(
            json!({"version": 1, "text": "", "omitted": [], "elements": [
                {"ref": "a", "role": "textbox", "label": "Name"},
                {"ref": "b", "role": "combobox", "label": "Country", "options": []},
            ]}),
        ),
        None,
    );
    let roles = roles(&[read]);
    let input = |r: &str, v: Value| json!({"target": {"type": "ref", "ref": r}, "value": v});
    assert_eq!(
        to_seed("form_input", &input("a", json!("Ana")), &roles)
            .unwrap()
            .0,
        "type"
    );
    assert_eq!(
        to_seed("form_input", &input("b", json!("pt")), &roles).unwrap(),
        (
            "select_option",
            json!({"target": "b", "values": ["pt"], "tab_id": null})
        )
    );
    assert_eq!(
        to_seed("form_input", &input("a", json!(42.0)), &roles)
            .unwrap()
            .1["text"],
        "42"
    );
    assert_eq!(
        to_seed("form_input", &input("c", json!(false)), &roles)
            .unwrap()
            .0,
        "set_checked"
    );
}

/// The toolset entry enables exactly what the run's seed members can
/// carry out, and the members without a toolset counterpart stay custom
/// tools beside it.
#[test]
fn the_offer_is_one_toolset_entry_plus_the_uncovered_members() {
    let ts = toolset(&["run_script"]);
    let mut all = ts.tools();
    all.insert(0, json!({"type": "computer"}));
    let out = tools(&all, |t| {
        Ok::<_, ()>(if t["type"] == "function" {
            json!({"custom": t["name"].clone()})
        } else {
            t.clone()
        })
    })
    .unwrap();
    let entries: Vec<&Value> = out
        .iter()
        .filter(|t| t["type"] == BROWSER_TOOLSET)
        .collect();
    assert_eq!(entries.len(), 1, "{out:?}");
    let configs = entries[0]["configs"].as_object().unwrap();
    let on = |m: &str| {
        configs.get(m).map_or_else(
            || MEMBERS.iter().find(|r| r.0 == m).unwrap().3,
            |c| c["enabled"] == true,
        )
    };
    for m in [
        "navigate",
        "left_click",
        "form_input",
        "read_page",
        "javascript_exec",
        "new_tab",
    ] {
        assert!(on(m), "{m} should be offered: {configs:?}");
    }
    // key is disabled while confirmation is on; type, wait, file_upload
    // and the button press/release have no seed member; click_at and
    // read_diagnostics were not added.
    for m in [
        "key",
        "type",
        "wait",
        "file_upload",
        "left_mouse_down",
        "left_mouse_up",
        "right_click",
        "double_click",
        "mouse_move",
        "read_console",
    ] {
        assert!(!on(m), "{m} should be withheld: {configs:?}");
    }
    let custom: Vec<&Value> = out.iter().filter_map(|t| t.get("custom")).collect();
    assert_eq!(custom, vec![&json!("browser_wait_for")]);
    assert_eq!(out[0]["type"], "computer");
}

/// A success renders the member's line and the tabs; a failure is an
/// `is_error` result of its text alone; an input the loop could not run
/// tells its reason whatever the loop answered.
#[test]
fn results_render_as_the_toolset_renders_them() {
    let state = json!({"tabs": [
        {"id": "t1", "title": "Form", "url": "http://127.0.0.1:8080/form", "active": true},
        {"id": "t2", "title": "", "url": "about:blank", "active": false},
    ]});
    let block = |name: &str, input: Value| json!({"type": "tool_use", "id": "toolu_1", "name": name, "input": input, "toolset_name": "browser"});
    let render =
        |b: &Value, item: &Value| tool_result(b, item, |_| Ok(json!({"type": "image"}))).unwrap();
    let nav = render(
        &block("navigate", json!({"url": "127.0.0.1:8080/form"})),
        &output("toolu_1", Some(state.clone()), Ok(Value::Null), None),
    );
    assert_eq!(nav["toolset_name"], "browser");
    assert_eq!(
        nav["content"][0]["text"],
        "Navigated to http://127.0.0.1:8080/form — Form"
    );
    assert_eq!(
        nav["content"][1],
        json!({"type": "browser_state", "tabs": [
            {"tab_id": "t1", "title": "Form", "url": "http://127.0.0.1:8080/form", "active": true},
            {"tab_id": "t2", "title": "", "url": "about:blank", "active": false},
        ]})
    );
    assert!(nav.get("is_error").is_none());
    let form = render(
        &block(
            "form_input",
            json!({"target": {"type": "ref", "ref": "{text}"}, "value": "x"}),
        ),
        &output("toolu_1", Some(state.clone()), Ok(Value::Null), None),
    );
    assert_eq!(form["content"][0]["text"], "Set the value of {text}.");
    let tabs = render(
        &block("list_tabs", json!({})),
        &output("toolu_1", Some(state.clone()), Ok(Value::Null), None),
    );
    assert_eq!(tabs["content"].as_array().unwrap().len(), 1);
    let read = render(
        &block("find", json!({"query": "name"})),
        &output(
            "toolu_1",
            Some(state.clone()),
            Ok(
                json!({"version": 1, "text": "", "omitted": [], "elements": [
                {"ref": "a", "role": "textbox", "label": "Name", "value": "Ana"}]}),
            ),
            None,
        ),
    );
    assert_eq!(
        read["content"][0]["text"],
        "[a] textbox \"Name\" value=\"Ana\""
    );
    let refused = render(
        &block("navigate", json!({"url": "https://elsewhere.example"})),
        &output(
            "toolu_1",
            Some(state.clone()),
            Err(NAVIGATION_REFUSED.into()),
            None,
        ),
    );
    assert_eq!(refused["is_error"], true);
    assert_eq!(
        refused["content"],
        json!([{"type": "text", "text": NAVIGATION_REFUSED}])
    );
    let back = render(
        &block("navigate", json!({"url": "back"})),
        &output(
            "toolu_1",
            Some(state),
            Err("Browser argument `unsupported` is not a field of this tool.".into()),
            None,
        ),
    );
    assert!(
        back["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("navigate: 'back'")
    );
}

/// A whole exchange: the reply's browser member becomes the loop's call,
/// and its output goes back as the member's `tool_result`, answering the
/// `tool_use` the API sent.
#[test]
fn a_browser_member_round_trips_through_the_messages_shapes() {
    let reply = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "tool_use", "id": "toolu_7", "name": "left_click",
                     "input": {"target": {"type": "ref", "ref": "r4"}}, "toolset_name": "browser"}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 1, "output_tokens": 1}});
    let resp = from_message_in(&reply, &Roles::new()).unwrap();
    let raw = &resp.raw_output[0];
    assert_eq!(raw["name"], "browser_click");
    assert_eq!(
        raw["arguments"],
        json!({"target": "r4", "tab_id": null}).to_string()
    );
    let state = json!({"tabs": [{"id": "t1", "title": "T", "url": "http://a", "active": true}]});
    let body = json!({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "task"}]},
        raw,
        output("toolu_7", Some(state), Ok(Value::Null), None),
    ], "tools": toolset(&[]).tools()});
    let req = to_messages_request(&body, "data:placeholder").unwrap();
    let msgs = req["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"][0]["toolset_name"], "browser");
    let result = &msgs[2]["content"][0];
    assert_eq!(result["tool_use_id"], "toolu_7");
    assert_eq!(result["toolset_name"], "browser");
    assert_eq!(result["content"][0]["text"], "Clicked.");
    // The toolset entry, and wait_for (a default member no toolset member
    // covers) as a custom tool.
    assert_eq!(req["tools"][0]["type"], BROWSER_TOOLSET);
    assert_eq!(req["tools"][1]["name"], "browser_wait_for");
    assert_eq!(req["tools"].as_array().unwrap().len(), 2);
}
