#![allow(clippy::unwrap_used)]

use super::*;

fn response_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| validator(openai_spec(), "Response"))
}

fn event_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| validator(openai_spec(), "ResponseStreamEvent"))
}

fn request(tools: Value, extra: Value) -> Value {
    let mut r = json!({
        "model": "gpt-5.5",
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "hello"}]}],
        "tools": tools,
        "store": true,
        "stream": false,
    });
    if let (Some(r), Some(e)) = (r.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    r
}

fn every_item() -> Vec<Value> {
    vec![
        reasoning("Looking at the form."),
        computer_call_checked(
            "call_1",
            vec![
                click(1, 2),
                click_button("right", 3, 4),
                double_click(5, 6),
                move_to(7, 8),
                scroll(9, 10, 0, 300),
                drag(&[(1, 1), (5, 5)], &["SHIFT"]),
                keypress(&["CTRL", "L"]),
                type_text("héllo"),
                wait(),
                screenshot(),
            ],
            vec![safety_check(
                "cu_sc_1",
                "malicious_instructions",
                "The page asks to ignore the user.",
            )],
        ),
        preview_call("call_2", click(1, 1), Vec::new()),
        ask_user("call_3", "Which name?"),
        message("Done."),
    ]
}

#[test]
fn fixtures_are_valid_responses() {
    let req = request(json!([{"type": "computer"}]), json!({}));
    for usage in [Some(usage(10, 5)), None] {
        let out = Output {
            items: every_item(),
            usage,
            status: "completed".into(),
            id: None,
        };
        let resp = build_response(&req, &out);
        let errs = errors(response_validator(), &resp);
        assert!(errs.is_empty(), "{errs:#?}");
    }
    for status in ["incomplete", "failed"] {
        let out = Output {
            items: vec![message("partial")],
            usage: Some(usage(1, 1)),
            status: status.into(),
            id: None,
        };
        let errs = errors(response_validator(), &build_response(&req, &out));
        assert!(errs.is_empty(), "{status}: {errs:#?}");
    }
}

#[test]
fn stream_events_are_valid_and_end_with_the_whole_response() {
    let req = request(json!([{"type": "computer"}]), json!({"stream": true}));
    let out = Output {
        items: every_item(),
        usage: Some(usage(10, 5)),
        status: "completed".into(),
        id: None,
    };
    let resp = build_response(&req, &out);
    let events = sse_events(&resp);
    for (i, e) in events.iter().enumerate() {
        let errs = errors(event_validator(), e);
        assert!(errs.is_empty(), "event {i} {}: {errs:#?}", e["type"]);
        assert_eq!(e["sequence_number"], json!(i));
    }
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"], resp);
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .map(|e| &e["item"])
        .collect();
    assert_eq!(done.len(), resp["output"].as_array().unwrap().len());
}

#[test]
fn the_validator_accepts_loop_requests_and_refuses_broken_ones() {
    let v = create_response_validator();
    let ok = request(json!([{"type": "computer"}]), json!({}));
    assert!(errors(v, &ok).is_empty(), "{:#?}", errors(v, &ok));
    let preview = request(
        json!([{"type": "computer_use_preview", "display_width": 1280,
                "display_height": 800, "environment": "linux"}]),
        json!({"truncation": "auto"}),
    );
    assert!(errors(v, &preview).is_empty());
    let bad = request(
        json!([{"type": "computer_use_preview", "display_width": "wide"}]),
        json!({}),
    );
    assert!(!errors(v, &bad).is_empty());
    let bad = request(json!([{"type": "computer"}]), json!({"store": "yes"}));
    assert!(!errors(v, &bad).is_empty());
    // Discriminated unions still check their members.
    let output = |o: Value| request(json!([{"type": "computer"}]), json!({"input": [o]}));
    let good = output(json!({"type": "computer_call_output", "call_id": "c",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA=="},
        "acknowledged_safety_checks": []}));
    assert!(errors(v, &good).is_empty(), "{:#?}", errors(v, &good));
    for broken in [
        json!({"type": "computer_call_output", "call_id": "c"}),
        json!({"type": "computer_call_output", "call_id": "c",
               "output": {"type": "computer_screenshot"},
               "acknowledged_safety_checks": [{"code": "no id"}]}),
        json!({"type": "function_call_output", "call_id": "c", "output": 7}),
        json!({"type": "message", "role": "robot", "content": "hi"}),
    ] {
        assert!(!errors(v, &output(broken.clone())).is_empty(), "{broken}");
    }
}

#[test]
fn compaction_rules_catch_altered_items() {
    let served: HashMap<String, String> = [("cmp_1".to_string(), "c0ffee".to_string())].into();
    let req = |items: Vec<Value>, cm: Value| json!({"input": items, "context_management": cm});
    let good = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "c0ffee"});
    let no_id = json!({"type": "compaction", "encrypted_content": "c0ffee"});
    let ok = req(vec![good, no_id], json!([{"type": "compaction"}]));
    assert_eq!(compaction_rules(&ok, &served), vec![]);
    let altered = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "c0ffef"});
    let unknown = json!({"type": "compaction", "id": "cmp_2", "encrypted_content": "c0ffee"});
    let bad = req(vec![altered, unknown], json!([{"type": "truncation"}]));
    assert_eq!(compaction_rules(&bad, &served).len(), 3);
}

#[test]
fn api_rules_catch_what_the_api_refuses() {
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC";
    let call = computer_call_checked(
        "call_1",
        vec![click(1, 1)],
        vec![safety_check("sc_1", "sensitive_domain", "m")],
    );
    let mut stored = HashMap::new();
    stored.insert("resp_1".to_string(), vec![call]);
    let output = |acked: Value, url: &str| {
        json!({"type": "computer_call_output", "call_id": "call_1",
               "output": {"type": "computer_screenshot", "image_url": url},
               "acknowledged_safety_checks": acked})
    };
    let with = |input: Vec<Value>, extra: Value| {
        request(json!([{"type": "computer"}]), extra)
            .as_object()
            .cloned()
            .map(|mut o| {
                o.insert("input".into(), json!(input));
                Value::Object(o)
            })
            .unwrap()
    };
    let good = with(
        vec![output(
            json!([safety_check("sc_1", "sensitive_domain", "m")]),
            png,
        )],
        json!({"previous_response_id": "resp_1"}),
    );
    assert_eq!(api_rules(&good, &stored), vec![]);
    let unacked = with(
        vec![output(json!([]), png)],
        json!({"previous_response_id": "resp_1"}),
    );
    assert_eq!(api_rules(&unacked, &stored).len(), 1);
    let stripped = with(
        vec![output(json!([{"id": "sc_1"}]), "<image 12 bytes>")],
        json!({"previous_response_id": "resp_1"}),
    );
    assert_eq!(api_rules(&stripped, &stored).len(), 1);
    let missing = with(vec![], json!({"previous_response_id": "resp_1"}));
    assert!(api_rules(&missing, &stored)[0].1.contains("No tool output"));
    let unknown = with(vec![], json!({"previous_response_id": "resp_9"}));
    assert!(api_rules(&unknown, &stored)[0].1.contains("not found"));
    let not_stored = with(vec![reasoning("x")], json!({"store": false}));
    assert_eq!(api_rules(&not_stored, &stored)[0].0, 404);
    let preview = request(
        json!([{"type": "computer_use_preview", "display_width": 1, "display_height": 1,
                "environment": "linux"}]),
        json!({}),
    );
    assert_eq!(api_rules(&preview, &stored).len(), 1);
    assert_eq!(png_size_of_data_url(png), Some((1, 1)));
}

#[tokio::test]
async fn the_server_checks_the_key_and_records_everything() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mock = MockResponses::start("sk-test-key").await;
    assert!(mock.addr().ip().is_loopback());
    mock.push(Reply::done("hi"));
    let body = request(json!([{"type": "computer"}]), json!({})).to_string();
    let send = |auth: &'static str| {
        let body = body.clone();
        let addr = mock.addr();
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!(
                "POST /responses HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        }
    };
    let denied = send("Bearer wrong").await;
    assert!(denied.starts_with("HTTP/1.1 401"), "{denied}");
    let ok = send("Bearer sk-test-key").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("\"output_text\""), "{ok}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert!(!reqs[0].authorized && reqs[1].authorized);
    assert!(reqs.iter().all(|r| r.validation_errors.is_empty()));
    assert_eq!(mock.problems().len(), 1, "{:?}", mock.problems());
    assert_eq!(
        mock.occurrences("sk-test-key"),
        vec!["request 2 header authorization"]
    );
    assert!(reqs[1].headers.iter().all(|(k, _)| k != "authorization"));
    mock.stop().await;
}
