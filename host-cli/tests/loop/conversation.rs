//! Rule 14: usage records and totals

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_recorded_per_completed_request_and_summed() {
    for stream in [false, true] {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::with_usage(
                vec![computer_call("call_1", vec![click(10, 20)])],
                Some(usage(100, 10)),
            ),
            Reply::status(500, "retry me"),
            Reply::with_usage(vec![ask_user("call_ask", "Name?")], Some(usage(200, 20))),
            Reply::with_usage(vec![message("done")], Some(usage(300, 30))),
        ]);
        let mut opts = rig.opts();
        opts.stream = stream;
        let mut op = ScriptedOp::new(rig.probe()).answers([Some("Ada")]);
        let run = rig.run(opts, &mut op).await;
        run.assert_ending(Ending::Finished);
        let u = run.outcome.usage;
        assert_eq!(
            (
                u.requests,
                u.input_tokens,
                u.output_tokens,
                u.total_tokens,
                u.incomplete
            ),
            (3, 600, 60, 660, false),
            "stream {stream}"
        );
        let records = run.of_kind("usage");
        assert_eq!(records.len(), 3, "one record per completed request");
        let ids: Vec<String> = rig
            .mock
            .requests()
            .iter()
            .filter_map(Recorded::response_id)
            .collect();
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r["api"], "responses");
            assert_eq!(r["stage"], "request");
            assert_eq!(r["reason"], "completed");
            assert_eq!(r["call_id"], ids[i]);
            assert!(r["member"].as_str().is_some_and(|m| !m.is_empty()));
            assert!(r["duration_ms"].as_f64().is_some_and(|d| d >= 0.0));
            let n = 100 * (i as u64 + 1);
            assert_eq!(
                r["usage"],
                json!({"input_tokens": n, "output_tokens": n / 10, "total_tokens": n + n / 10})
            );
            // Never raw errors, page text, arguments or images.
            let text = r.to_string();
            for banned in ["retry me", "Name?", "data:image", "error"] {
                assert!(!text.contains(banned), "{banned} in {text}");
            }
        }
        let finished = run.of_kind("run_finished");
        assert_eq!(finished[0]["usage_totals"]["total_tokens"], 660);
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_a_response_without_usage_marks_the_totals_incomplete() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::with_usage(
            vec![computer_call("call_1", vec![click(10, 20)])],
            Some(usage(100, 10)),
        ),
        Reply::without_usage(vec![computer_call("call_2", vec![wait()])]),
        Reply::with_usage(vec![message("done")], Some(usage(300, 30))),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let u = run.outcome.usage;
    assert_eq!(
        (
            u.requests,
            u.input_tokens,
            u.output_tokens,
            u.total_tokens,
            u.incomplete
        ),
        (3, 400, 40, 440, true)
    );
    let records = run.of_kind("usage");
    assert_eq!(records.len(), 3);
    assert_eq!(records[1]["usage"], Value::Null);
    assert_eq!(
        run.of_kind("run_finished")[0]["usage_totals"]["incomplete"],
        true
    );
    rig.assert_mock_clean();
}

// ---------------------------------------------------------------------
// Conversation state: previous_response_id, or the whole input resent
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_on_chains_previous_response_id_and_sends_only_new_items() {
    let rig = Rig::new().await;
    let mut opts = rig.opts();
    opts.store = true;
    rig.mock.push_all([
        Reply::output(vec![
            reasoning("Start with the name."),
            computer_call("call_1", vec![click(10, 20)]),
        ]),
        Reply::output(vec![
            reasoning("Now the email."),
            computer_call("call_2", vec![type_text("a@b.c")]),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 3);
    // First: the task and the first screenshot, nothing to chain to.
    assert_eq!(reqs[0].previous_response_id(), None);
    let first = reqs[0].input();
    assert_eq!(first.len(), 1);
    assert_eq!(user_text(&first[0]), Some(rig.opts().task.as_str()));
    let image = first[0]["content"][1]["image_url"].as_str().unwrap();
    assert_eq!(
        png_size_of_data_url(image),
        Some((SCREEN.width, SCREEN.height))
    );
    // Then: chained to the previous response, with only the call's output.
    for k in 1..3 {
        let r = &reqs[k];
        let prev = reqs[k - 1].response_id().unwrap();
        assert_eq!(
            r.previous_response_id(),
            Some(prev.as_str()),
            "request {}",
            r.n
        );
        let input = r.input();
        assert_eq!(input.len(), 1, "request {}: {input:?}", r.n);
        assert_eq!(input[0]["call_id"], format!("call_{k}"));
        assert_eq!(r.body["store"], true);
        // Instructions are not carried over by previous_response_id.
        assert_eq!(r.body["instructions"], reqs[0].body["instructions"]);
        assert!(r.body["instructions"].is_string());
    }
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_off_resends_the_whole_conversation_in_order() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::output(vec![
            message("Typing the email now."),
            computer_call("call_2", vec![type_text("a@b.c")]),
        ]),
        Reply::done("done"),
    ]);
    let mut opts = rig.opts();
    opts.store = false;
    opts.context.max_images = 10;
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 3);
    for k in 0..3 {
        let r = &reqs[k];
        assert_eq!(r.previous_response_id(), None);
        assert_eq!(r.body["store"], false);
        if k == 0 {
            continue;
        }
        // Everything sent before, then the previous response's output as
        // received, then the new outputs.
        let before = reqs[k - 1].input();
        let served = reqs[k - 1].response.as_ref().unwrap()["output"]
            .as_array()
            .unwrap()
            .clone();
        let input = r.input();
        assert_eq!(input[..before.len()], before[..], "request {}", r.n);
        assert_eq!(
            input[before.len()..before.len() + served.len()],
            served[..],
            "request {}",
            r.n
        );
        let rest = &input[before.len() + served.len()..];
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0]["type"], "computer_call_output");
        assert_eq!(rest[0]["call_id"], format!("call_{k}"));
    }
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_off_resends_reasoning_items_the_api_can_read() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            reasoning("The name field comes first."),
            computer_call("call_1", vec![click(10, 20)]),
        ]),
        Reply::done("done"),
    ]);
    let mut opts = rig.opts();
    opts.store = false;
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    for r in rig.mock.requests() {
        assert!(
            r.body["include"]
                .as_array()
                .is_some_and(|i| i.contains(&json!("reasoning.encrypted_content"))),
            "request {} does not ask for encrypted reasoning",
            r.n
        );
    }
    rig.assert_mock_clean();
}

// ---------------------------------------------------------------------
// Rule 17: the context budget when resending
// ---------------------------------------------------------------------

/// Every computer/function call of an input has exactly one output, after it.
#[track_caller]
fn assert_paired(input: &[Value], n: usize) {
    for (i, item) in input.iter().enumerate() {
        let out = match item["type"].as_str() {
            Some("computer_call") => "computer_call_output",
            Some("function_call") => "function_call_output",
            _ => continue,
        };
        let outs: Vec<usize> = input
            .iter()
            .enumerate()
            .filter(|(_, o)| o["type"] == out && o["call_id"] == item["call_id"])
            .map(|(j, _)| j)
            .collect();
        assert_eq!(outs.len(), 1, "request {n}: outputs of {}", item["call_id"]);
        assert!(outs[0] > i, "request {n}: the output comes before its call");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_budget_caps_images_and_keeps_the_newest_and_every_pairing() {
    let rig = Rig::new().await;
    for i in 1..=5 {
        rig.mock.push(Reply::output(vec![
            computer_call(&format!("call_{i}"), vec![click(i * 10, 20)]),
            ask_user(&format!("call_ask_{i}"), "Still right?"),
        ]));
    }
    rig.mock.push(Reply::done("done"));
    let mut opts = rig.opts();
    opts.store = false;
    opts.context = ContextBudget {
        max_images: 2,
        max_bytes: 16 * 1024 * 1024,
    };
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("yes"); 5]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 6);
    for r in &reqs {
        let input = r.input();
        assert!(real_screenshots(&input, SCREEN) <= 2, "request {}", r.n);
        assert_paired(&input, r.n);
        // The newest observation is whole: the last call's screenshot (or,
        // first, the task's).
        let newest = input
            .iter()
            .rev()
            .find(|i| i["type"] == "computer_call_output")
            .map(|o| o["output"]["image_url"].clone())
            .unwrap_or_else(|| input[0]["content"][1]["image_url"].clone());
        assert_eq!(
            png_size_of_data_url(newest.as_str().unwrap()),
            Some((SCREEN.width, SCREEN.height)),
            "request {}",
            r.n
        );
        assert_eq!(user_text(&input[0]), Some(rig.opts().task.as_str()));
    }
    // The budget did bite: the last request resends 6 screenshots' worth
    // of history with only 2 of them whole.
    let last = reqs.last().unwrap().input();
    assert_eq!(image_urls(&Value::Array(last.clone())).len(), 6);
    assert_eq!(real_screenshots(&last, SCREEN), 2);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_budget_caps_bytes_but_never_drops_the_newest_screenshot() {
    let rig = Rig::new().await;
    for i in 1..=3 {
        rig.mock.push(Reply::output(vec![computer_call(
            &format!("call_{i}"),
            vec![click(i * 10, 20)],
        )]));
    }
    rig.mock.push(Reply::done("done"));
    let mut opts = rig.opts();
    opts.store = false;
    // Room for about one screenshot.
    let shot = rig
        .daemon
        .channel()
        .await
        .screenshot(&opts.screenshot)
        .await
        .unwrap();
    let budget = shot.screenshot.data_url().len() * 3 / 2;
    opts.context = ContextBudget {
        max_images: 10,
        max_bytes: budget,
    };
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    for r in rig.mock.requests() {
        let input = r.input();
        let bytes = serde_json::to_string(&input).unwrap().len();
        let real = real_screenshots(&input, SCREEN);
        assert_eq!(real, 1, "request {}", r.n);
        assert!(bytes <= budget, "request {}: {bytes} > {budget}", r.n);
        assert_paired(&input, r.n);
    }
    rig.assert_mock_clean();
}
