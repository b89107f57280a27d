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
/// as something else: a pointer member without a coordinate, a withheld
/// member, an unknown field, a negative or absurd amount.
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
        ("zoom", json!({"region": [0, 0, 10, 10]})),
        ("cursor_position", json!({})),
        ("left_mouse_down", json!({})),
        ("hold_key", json!({"text": "a", "duration": 1})),
        ("made_up", json!({})),
    ] {
        let got = member_actions(name, &input);
        assert_eq!(got.len(), 1, "{name} {input}");
        let err = Action::from_model_value(&got[0]).expect_err(&format!("{name} {input}"));
        assert!(err.contains(name), "{name}: {err}");
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
            json!([{"type": "tool_use", "id": "t", "name": "navigate", "input": {}, "toolset_name": "browser"}]),
            "tool_use",
        ),
    ] {
        assert!(from_message(&bad).is_err(), "{bad}");
    }
}

/// The runner's request body, with a conversation as the runner holds
/// it, becomes the Messages body: system, the toolset entry with the
/// withheld members disabled, custom tools, alternating messages, the
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
    for w in WITHHELD_MEMBERS {
        assert_eq!(tools[0]["configs"][w]["enabled"], false, "{w}");
    }
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
