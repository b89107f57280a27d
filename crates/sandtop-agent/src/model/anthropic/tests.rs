//! The translation, against shapes copied from the SDK
//! (`anthropic==2.17.0`, `anthropic/types/beta/`); the Python tier
//! (`python/tests/test_anthropic_loop.py`) validates every request with
//! the SDK's own pydantic types on top of these.

use super::*;
use crate::model::openai::{RequestParts, create_request};
use crate::runner::PLACEHOLDER_PNG;
use sandtop_protocol::{Action, Size};
use sandtop_runfolder::items::{OutputItem, ToolShape};

const PNG: &str = "data:image/png;base64,AAAA";

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input, "toolset_name": "computer"})
}

fn message(content: Value, stop: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-mock",
           "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2}})
}

/// Every member the loop runs becomes actions the loop's strict parser
/// accepts, as the Python driver maps them.
#[test]
fn members_become_the_daemons_actions() {
    let cases = [
        (
            "left_click",
            json!({"coordinate": [10, 20]}),
            json!([{"type": "click", "button": "left", "x": 10, "y": 20}]),
        ),
        (
            "right_click",
            json!({"coordinate": [1, 2], "text": "ctrl+shift"}),
            json!([{"type": "click", "button": "right", "x": 1, "y": 2, "keys": ["ctrl", "shift"]}]),
        ),
        (
            "middle_click",
            json!({"coordinate": [1, 2]}),
            json!([{"type": "click", "button": "wheel", "x": 1, "y": 2}]),
        ),
        (
            "double_click",
            json!({"coordinate": [3, 4]}),
            json!([{"type": "double_click", "x": 3, "y": 4}]),
        ),
        (
            "triple_click",
            json!({"coordinate": [3, 4]}),
            json!([{"type": "double_click", "x": 3, "y": 4},
                   {"type": "click", "button": "left", "x": 3, "y": 4}]),
        ),
        (
            "mouse_move",
            json!({"coordinate": [5, 6]}),
            json!([{"type": "move", "x": 5, "y": 6}]),
        ),
        (
            "left_click_drag",
            json!({"start_coordinate": [1, 1], "coordinate": [9, 9]}),
            json!([{"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 9, "y": 9}]}]),
        ),
        (
            "scroll",
            json!({"coordinate": [7, 8], "scroll_direction": "up", "scroll_amount": 3}),
            json!([{"type": "scroll", "x": 7, "y": 8, "scroll_x": 0, "scroll_y": -150}]),
        ),
        (
            "type",
            json!({"text": "héllo\n"}),
            json!([{"type": "type", "text": "héllo\n"}]),
        ),
        (
            "key",
            json!({"text": "ctrl+s Tab", "repeat": 2}),
            json!([{"type": "keypress", "keys": ["ctrl", "s"]}, {"type": "keypress", "keys": ["Tab"]},
                   {"type": "keypress", "keys": ["ctrl", "s"]}, {"type": "keypress", "keys": ["Tab"]}]),
        ),
        (
            "key",
            json!({"text": "ctrl++"}),
            json!([{"type": "keypress", "keys": ["ctrl", "+"]}]),
        ),
        ("wait", json!({"duration": 2}), json!([{"type": "wait"}])),
        ("screenshot", json!({}), json!([{"type": "screenshot"}])),
    ];
    for (name, input, want) in cases {
        let got = member_actions(name, &input);
        assert_eq!(json!(got), want, "{name} {input}");
        for a in &got {
            Action::from_model_value(a).unwrap_or_else(|e| panic!("{name}: {a}: {e}"));
        }
    }
}

/// What the loop cannot run is refused by its strict parser, never run
/// as something else: a pointer member without a coordinate, an input a
/// member does not take, an unknown field, a negative or absurd amount.
#[test]
fn what_the_loop_cannot_run_is_refused_before_anything_runs() {
    for (name, input) in [
        ("left_click", json!({})),
        (
            "scroll",
            json!({"scroll_direction": "up", "scroll_amount": 1}),
        ),
        (
            "scroll",
            json!({"coordinate": [1, 1], "scroll_direction": "up", "scroll_amount": -1}),
        ),
        (
            "scroll",
            json!({"coordinate": [1, 1], "scroll_direction": "sideways", "scroll_amount": 1}),
        ),
        ("left_click", json!({"coordinate": [1, 1], "button": "x"})),
        ("left_click", json!({"coordinate": [1]})),
        ("key", json!({"text": "ctrl+"})),
        ("key", json!({"text": "a", "repeat": 101})),
        ("key", json!({"text": "   "})),
        ("wait", json!({"duration": 31})),
        ("zoom", json!({"region": [0, 0, 10]})),
        ("zoom", json!({})),
        ("cursor_position", json!({"coordinate": [1, 1]})),
        ("left_mouse_down", json!({"coordinate": [1, 1]})),
        ("left_mouse_up", json!({"button": "left"})),
        ("hold_key", json!({"text": "a", "duration": 11})),
        ("hold_key", json!({"text": "a b", "duration": 1})),
        ("hold_key", json!({"text": "a"})),
        ("made_up", json!({})),
    ] {
        let got = member_actions(name, &input);
        assert_eq!(got.len(), 1, "{name} {input}");
        let err = Action::from_model_value(&got[0]).expect_err(&format!("{name} {input}"));
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
}

#[test]
fn a_message_becomes_calls_in_order_with_their_blocks() {
    let blocks = json!([
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
        {"type": "text", "text": "Clicking."},
        tool_use("toolu_1", "left_click", json!({"coordinate": [10, 20]})),
        {"type": "tool_use", "id": "toolu_2", "name": "ask_user", "input": {"question": "Which?"}},
    ]);
    let r = from_message(&message(blocks.clone(), "tool_use")).unwrap();
    assert_eq!(r.id, "msg_1");
    assert_eq!(r.status, "completed");
    assert_eq!(r.raw_output.len(), 4);
    for (item, block) in r.raw_output.iter().zip(blocks.as_array().unwrap()) {
        assert_eq!(&item[BLOCK], block);
    }
    assert_eq!(r.items[0], OutputItem::Other);
    assert_eq!(
        r.items[1],
        OutputItem::Message {
            text: "Clicking.".into(),
            final_answer: false
        }
    );
    match &r.items[2] {
        OutputItem::ComputerCall {
            call_id,
            actions,
            pending_safety_checks,
            unfinished,
        } => {
            assert_eq!(call_id, "toolu_1");
            assert_eq!(actions[0]["type"], "click");
            assert!(pending_safety_checks.is_empty() && unfinished.is_none());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.items[3],
        OutputItem::FunctionCall {
            call_id: "toolu_2".into(),
            name: "ask_user".into(),
            arguments: r#"{"question":"Which?"}"#.into()
        }
    );
    let u = r.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (12, 5, 17)
    );
}

#[test]
fn end_turn_text_is_the_final_answer_and_max_tokens_is_incomplete() {
    let r = from_message(&message(
        json!([{"type": "text", "text": "done"}]),
        "end_turn",
    ))
    .unwrap();
    assert_eq!(
        r.items[0],
        OutputItem::Message {
            text: "done".into(),
            final_answer: true
        }
    );
    let r = from_message(&message(
        json!([{"type": "text", "text": "do"}]),
        "max_tokens",
    ))
    .unwrap();
    assert_eq!(r.status, "incomplete");
    assert!(r.problem.unwrap().contains("max_tokens"));
    for bad in [
        json!({"type": "error", "error": {}}),
        message(
            json!([{"type": "tool_use", "name": "x", "input": {}}]),
            "tool_use",
        ),
        message(
            json!([{"type": "tool_use", "id": "t", "name": "x", "input": []}]),
            "tool_use",
        ),
        message(
            json!([{"type": "tool_use", "id": "t", "name": "navigate", "input": {}, "toolset_name": "files"}]),
            "tool_use",
        ),
    ] {
        assert!(from_message(&bad).is_err(), "{bad}");
    }
}

/// The runner's request body, with a conversation as the runner holds
/// it, becomes the Messages body: system, the toolset entry with every
/// member offered (no `configs`), custom tools, alternating messages, the
/// tool results paired by id with the toolset's acknowledgment and the
/// screenshot, a pruned screenshot as a line of text.
#[test]
fn a_runner_body_becomes_a_messages_body() {
    let first = from_message(&message(
        json!([tool_use("toolu_1", "type", json!({"text": "hi"})),
               tool_use("toolu_2", "screenshot", json!({})),
               {"type": "tool_use", "id": "toolu_3", "name": "ask_user", "input": {"question": "q"}}]),
        "tool_use",
    ))
    .unwrap();
    let mut input = vec![wire::user_message("the task", Some(PLACEHOLDER_PNG))];
    input.extend(first.raw_output.iter().cloned());
    input.push(wire::computer_call_output("toolu_1", PNG, &[]));
    input.push(wire::computer_call_output("toolu_2", PNG, &[]));
    input.push(wire::function_call_output("toolu_3", "yes"));
    input.push(wire::user_message("a note", None));
    let body = create_request(&RequestParts {
        model: "claude-x",
        shape: Some(ToolShape::Computer),
        browser: &[],
        display: Size::new(1280, 800),
        instructions: Some("be careful"),
        input: &input,
        previous_response_id: None,
        store: false,
        stream: false,
        ask_user: true,
        compaction: false,
    });
    let m = to_messages_request(&body, PLACEHOLDER_PNG).unwrap();
    assert_eq!(m["model"], "claude-x");
    assert_eq!(m["system"], "be careful");
    assert_eq!(m["max_tokens"], MAX_TOKENS);
    let tools = m["tools"].as_array().unwrap();
    assert_eq!(tools[0]["type"], COMPUTER_TOOLSET);
    // Every member offered: none withheld (all are on by default).
    assert!(tools[0].get("configs").is_none(), "{}", tools[0]);
    assert!(tools[0].get("name").is_none());
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[1]["name"], "ask_user");
    assert_eq!(tools[1]["input_schema"]["type"], "object");
    assert!(tools[1].get("type").is_none() && tools[1].get("parameters").is_none());
    let msgs = m["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        msgs[0]["content"],
        json!([{"type": "text", "text": "the task"}, {"type": "text", "text": PRUNED_TEXT}])
    );
    assert_eq!(msgs[1]["content"].as_array().unwrap().len(), 3);
    let results = msgs[2]["content"].as_array().unwrap();
    assert_eq!(
        results[0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "toolset_name": "computer",
               "content": [{"type": "text", "text": "Typed."},
                           {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]})
    );
    assert_eq!(
        results[1]["content"],
        json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}])
    );
    assert_eq!(
        results[2],
        json!({"type": "tool_result", "tool_use_id": "toolu_3", "content": [{"type": "text", "text": "yes"}]})
    );
    assert_eq!(results[3], json!({"type": "text", "text": "a note"}));
}

#[test]
fn items_of_another_provider_are_refused() {
    let body = json!({"model": "m", "input": [{"type": "reasoning", "id": "rs_1", "summary": []}]});
    assert!(to_messages_request(&body, PLACEHOLDER_PNG).is_err());
    let body = json!({"model": "m", "input": [], "tools": [{"type": "computer_use_preview"}]});
    assert!(to_messages_request(&body, PLACEHOLDER_PNG).is_err());
}

#[test]
fn acknowledgments_are_the_toolsets_own_lines() {
    let ack = |name: &str, input: Value| acknowledgment(&tool_use("t", name, input));
    assert_eq!(
        ack("key", json!({"text": "ctrl+s"})).unwrap(),
        "Pressed ctrl+s."
    );
    assert_eq!(
        ack("scroll", json!({"scroll_direction": "down"})).unwrap(),
        "Scrolled down."
    );
    assert_eq!(ack("wait", json!({"duration": 2})).unwrap(), "Waited 2s.");
    assert_eq!(ack("left_click", json!({})).unwrap(), "Clicked.");
    assert!(ack("screenshot", json!({})).is_none());
}

/// A PNG data URL of `w` x `h` (its header is all the size reader needs).
fn png_url(w: u32, h: u32) -> String {
    use base64::Engine as _;
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

/// `--computer-20251124`: the older tool, sized from the screenshots; its
/// `tool_use` (name `computer`, `action` the member) runs as the member
/// does, and its result carries no toolset.
#[test]
fn the_older_computer_tool_is_sized_from_the_screenshots_and_speaks_actions() {
    let task = json!({"role": "user", "content": [
        {"type": "input_text", "text": "t"},
        {"type": "input_image", "image_url": png_url(640, 400), "detail": "original"}]});
    let body = json!({"model": "m", "input": [task.clone()], "tools": [{"type": "computer"}]});
    let req = translate(&body, PLACEHOLDER_PNG, ComputerTool::Computer20251124).unwrap();
    assert_eq!(
        req["tools"],
        json!([{"type": "computer_20251124", "name": "computer",
                "display_width_px": 640, "display_height_px": 400}])
    );
    // The toolset stays the default.
    assert_eq!(
        to_messages_request(&body, PLACEHOLDER_PNG).unwrap()["tools"][0]["type"],
        COMPUTER_TOOLSET
    );
    // No screenshot yet: nothing to size the tool from.
    let bare = json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "t"}]}],
                      "tools": [{"type": "computer"}]});
    assert!(translate(&bare, PLACEHOLDER_PNG, ComputerTool::Computer20251124).is_err());

    let use_ = json!({"type": "tool_use", "id": "toolu_1", "name": "computer",
                      "input": {"action": "left_click", "coordinate": [10, 20]}});
    let r = from_message(&message(json!([use_.clone()]), "tool_use")).unwrap();
    match &r.items[0] {
        OutputItem::ComputerCall {
            call_id, actions, ..
        } => {
            assert_eq!(call_id, "toolu_1");
            assert_eq!(
                actions,
                &vec![json!({"type": "click", "button": "left", "x": 10, "y": 20})]
            );
        }
        other => panic!("{other:?}"),
    }
    let no_action = json!({"type": "tool_use", "id": "toolu_2", "name": "computer", "input": {"coordinate": [1, 2]}});
    let r = from_message(&message(json!([no_action]), "tool_use")).unwrap();
    let OutputItem::ComputerCall { actions, .. } = &r.items[0] else {
        panic!()
    };
    assert!(
        actions[0]["type"].as_str().unwrap().contains("`action`"),
        "{actions:?}"
    );

    let mut call = r.raw_output[0].clone();
    call["call_id"] = json!("toolu_1");
    call[BLOCK] = use_;
    let out = json!({"type": "computer_call_output", "call_id": "toolu_1",
                     "output": {"type": "computer_screenshot", "image_url": png_url(640, 400)}});
    let body = json!({"model": "m", "input": [task, call, out], "tools": [{"type": "computer"}]});
    let req = translate(&body, PLACEHOLDER_PNG, ComputerTool::Computer20251124).unwrap();
    let result = &req["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert!(result.get("toolset_name").is_none(), "{result}");
    assert_eq!(
        result["content"][0],
        json!({"type": "text", "text": "Clicked."})
    );
    assert_eq!(result["content"][1]["type"], "image");
}

/// The five members the loop once withheld are offered and mapped: the
/// button down and up and `hold_key` as Sandtop's own actions (rule 66),
/// `cursor_position` and `zoom` as the loop's reads; the preflight of a
/// model that speaks them accepts them, an OpenAI model's refuses them.
#[test]
fn the_once_withheld_members_are_offered_and_mapped() {
    use crate::computer::preflight::{Checked, check_computer_call};
    use crate::computer::reads::Read;
    use sandtop_protocol::{Button, ScaleMap};
    for m in [
        "cursor_position",
        "left_mouse_down",
        "left_mouse_up",
        "hold_key",
        "zoom",
    ] {
        assert!(MEMBERS.contains(&m), "{m}");
    }
    assert_eq!(MEMBERS.len(), 17);
    assert_eq!(computer_toolset(), json!({"type": COMPUTER_TOOLSET}));
    let map = ScaleMap::identity(Size::new(640, 400));
    let cases = [
        (
            "left_mouse_down",
            json!({}),
            json!([{"type": "mouse_down", "button": "left"}]),
            Checked::Actions(vec![Action::MouseDown {
                button: Button::Left,
            }]),
        ),
        (
            "left_mouse_up",
            json!({}),
            json!([{"type": "mouse_up", "button": "left"}]),
            Checked::Actions(vec![Action::MouseUp {
                button: Button::Left,
            }]),
        ),
        (
            "hold_key",
            json!({"text": "shift+a", "duration": 2}),
            json!([{"type": "hold_key", "keys": ["shift", "a"], "duration_ms": 2000}]),
            Checked::Actions(vec![Action::HoldKey {
                keys: vec!["shift".into(), "a".into()],
                duration_ms: 2000,
            }]),
        ),
        (
            "cursor_position",
            json!({}),
            json!([{"type": "cursor_position"}]),
            Checked::Read(Read::CursorPosition),
        ),
        (
            "zoom",
            json!({"region": [0, 0, 320, 200]}),
            json!([{"type": "zoom", "region": [0, 0, 320, 200]}]),
            Checked::Read(Read::Zoom {
                region: [0, 0, 320, 200],
            }),
        ),
    ];
    for (name, input, want, checked) in cases {
        let got = member_actions(name, &input);
        assert_eq!(json!(got), want, "{name}");
        assert_eq!(
            check_computer_call("t", &got, Some(&map), true).unwrap(),
            checked,
            "{name}"
        );
        assert!(
            check_computer_call("t", &got, Some(&map), false).is_err(),
            "{name}"
        );
    }
    // A zoom outside the screenshot is refused before anything runs.
    let outside = member_actions("zoom", &json!({"region": [0, 0, 641, 200]}));
    assert!(check_computer_call("t", &outside, Some(&map), true).is_err());
}

/// Their results: the button and `hold_key` answer with the toolset's
/// acknowledgment and the screenshot after them; `cursor_position` with
/// the toolset's `X=..,Y=..` text alone; `zoom` with its image alone.
#[test]
fn the_once_withheld_members_answer_as_the_toolset_renders_them() {
    let ack = |name: &str, input: Value| acknowledgment(&tool_use("t", name, input));
    assert_eq!(
        ack("hold_key", json!({"text": "shift", "duration": 2})).unwrap(),
        "Held shift for 2s."
    );
    assert_eq!(
        ack("left_mouse_down", json!({})).unwrap(),
        "Left mouse button pressed."
    );
    assert_eq!(
        ack("left_mouse_up", json!({})).unwrap(),
        "Left mouse button released."
    );
    assert!(ack("zoom", json!({"region": [0, 0, 1, 1]})).is_none());
    assert!(ack("cursor_position", json!({})).is_none());

    let first = from_message(&message(
        json!([
            tool_use("toolu_1", "left_mouse_down", json!({})),
            tool_use("toolu_2", "cursor_position", json!({})),
            tool_use("toolu_3", "zoom", json!({"region": [0, 0, 1, 1]}))
        ]),
        "tool_use",
    ))
    .unwrap();
    let mut input = vec![wire::user_message("the task", Some(PNG))];
    input.extend(first.raw_output.iter().cloned());
    input.push(wire::computer_call_output("toolu_1", PNG, &[]));
    input.push(wire::function_call_output(
        "toolu_2",
        &crate::computer::reads::cursor_text(12, 34),
    ));
    input.push(wire::computer_call_output("toolu_3", PNG, &[]));
    let body = json!({"model": "m", "input": input, "tools": [{"type": "computer"}]});
    let m = to_messages_request(&body, PLACEHOLDER_PNG).unwrap();
    let results = m["messages"][2]["content"].as_array().unwrap();
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}});
    assert_eq!(
        results[0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "toolset_name": "computer",
               "content": [{"type": "text", "text": "Left mouse button pressed."}, image]})
    );
    assert_eq!(
        results[1],
        json!({"type": "tool_result", "tool_use_id": "toolu_2", "toolset_name": "computer",
               "content": [{"type": "text", "text": "X=12,Y=34"}]})
    );
    assert_eq!(
        results[2],
        json!({"type": "tool_result", "tool_use_id": "toolu_3", "toolset_name": "computer",
               "content": [image]})
    );
}
