//! Rules 19-20: guidance and ask_user

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guidance_comes_at_the_end_of_the_turn_and_does_not_reset_the_budget() {
    let rig = Rig::new().await;
    for i in 1..=4 {
        rig.mock.push(Reply::output(vec![computer_call(
            &format!("call_{i}"),
            vec![click(i * 10, 20)],
        )]));
    }
    let mut opts = rig.opts();
    opts.max_steps = 3;
    // Stored, so each request holds only the turn's new items.
    opts.store = true;
    let mut op = ScriptedOp::new(rig.probe()).guidance([
        vec!["Use the second form instead."],
        vec![],
        vec!["Also tick the newsletter box.", "And hurry."],
    ]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::StepBudget);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 3, "guidance reset the step budget");
    // After the call's output, at the end of the turn.
    let second = reqs[1].input();
    assert_eq!(second.len(), 2);
    assert_eq!(second[0]["type"], "computer_call_output");
    assert_eq!(user_text(&second[1]), Some("Use the second form instead."));
    let third = reqs[2].input();
    assert_eq!(third.len(), 1);
    assert_eq!(third[0]["type"], "computer_call_output");
    let logged: Vec<Value> = run.of_kind("guidance");
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["step"], 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_questions_reach_the_operator_and_answers_go_back_by_call_id() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![ask_user("call_ask_1", "Which name should I use?")]),
        Reply::output(vec![ask_user("call_ask_2", "And the colour?")]),
        // Rule 20: beside the computer tool in the same response.
        Reply::output(vec![
            computer_call("call_c", vec![click(10, 20)]),
            ask_user("call_ask_3", "Submit now?"),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("Ada Lovelace"), None, Some("yes")]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let questions: Vec<(&str, Snap)> = op
        .asked
        .iter()
        .filter_map(|a| match a {
            Asked::Question { question, at } => Some((question.as_str(), *at)),
            _ => None,
        })
        .collect();
    let texts: Vec<&str> = questions.iter().map(|q| q.0).collect();
    assert_eq!(
        texts,
        ["Which name should I use?", "And the colour?", "Submit now?"]
    );
    // Calls run in the order of the response: the click before the question.
    assert_eq!(questions[1].1.actions, 0);
    assert_eq!(
        questions[2].1,
        Snap {
            input: 3,
            captures: 2,
            actions: 1
        }
    );
    let reqs = rig.mock.requests();
    for r in &reqs {
        let tools = r.body["tools"].as_array().unwrap();
        assert!(
            tools.iter().any(|t| t["name"] == "ask_user"),
            "request {}",
            r.n
        );
    }
    assert_eq!(
        function_output(&reqs[1], "call_ask_1"),
        json!({"answer": "Ada Lovelace"})
    );
    assert!(function_output(&reqs[2], "call_ask_2")["error"].is_string());
    assert_eq!(
        function_output(&reqs[3], "call_ask_3"),
        json!({"answer": "yes"})
    );
    let _ = call_output(&reqs[3], "call_c");
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    rig.assert_mock_clean();
}

/// docs/contract.md rule 45 (a): both additions over the official SDK's runner turn off — the
/// `ask_user` tool (`--no-ask-user`) and the screenshot sent with the task
/// (`--no-initial-screenshot`): the first request is then the task alone,
/// and the model's first `screenshot` action is what captures the screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initial_screenshot_and_ask_user_turn_off_as_in_the_sdk_runner() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![screenshot()])]),
        Reply::done("done"),
    ]);
    let mut opts = rig.opts();
    opts.initial_screenshot = false;
    opts.ask_user = false;
    let mut op = Approvals::default();
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].body["input"].as_array().unwrap();
    assert_eq!(first.len(), 1, "the task alone: {first:?}");
    assert_eq!(user_text(&first[0]), Some(rig.opts().task.as_str()));
    assert!(
        image_urls(&reqs[0].body).is_empty(),
        "no screenshot before the model asks for one"
    );
    for r in &reqs {
        let names: Vec<&Value> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["type"])
            .collect();
        assert_eq!(names, [&json!("computer")], "request {}", r.n);
    }
    // The screenshot the model asked for goes back as usual.
    let out = call_output(&reqs[1], "call_1");
    assert_eq!(real_screenshots(std::slice::from_ref(&out), SCREEN), 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_without_a_terminal_goes_back_as_an_error() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![ask_user("call_ask", "Which name?")]),
        Reply::done("done"),
    ]);
    let mut op = Approvals::default();
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert!(function_output(&reqs[1], "call_ask")["error"].is_string());
    rig.assert_mock_clean();
}

// ---------------------------------------------------------------------
// End to end, both transports; screenshots in the ScaleMap's space
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_and_non_streaming_runs_work_end_to_end_alike() {
    let mut seen = Vec::new();
    for stream in [false, true] {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![
                reasoning("Fill in the name."),
                computer_call("call_1", vec![click(10, 20), type_text("Ada")]),
            ]),
            Reply::output(vec![
                message("Submitting."),
                computer_call("call_2", vec![keypress(&["ENTER"])]),
            ]),
            Reply::done("All done: the form was submitted."),
        ]);
        let mut opts = rig.opts();
        opts.stream = stream;
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(opts, &mut op).await;
        run.assert_ending(Ending::Finished);
        assert_eq!(run.outcome.message, "All done: the form was submitted.");
        assert_eq!(run.outcome.steps, 3);
        for r in rig.mock.requests() {
            assert_eq!(r.stream(), stream);
        }
        rig.assert_mock_clean();
        seen.push((rig.probe().input_events(), run.outcome.usage));
    }
    assert_eq!(seen[0], seen[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_go_back_as_data_urls_in_the_scale_maps_space() {
    // A 640x400 screen shown to the model at 320x200.
    let screen = Size::new(640, 400);
    let image = Size::new(320, 200);
    let rig = Rig::with_screen(screen).await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(100, 50)])]),
        Reply::output(vec![computer_call("call_2", vec![move_to(319, 199)])]),
        Reply::done("done"),
    ]);
    let mut opts = rig.opts();
    opts.screenshot.size = Some(image);
    // Stored, so each screenshot is sent once.
    opts.store = true;
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let map = ScaleMap::fit(screen, None, Some(image), Fit::default()).unwrap();
    let mut urls = Vec::new();
    for r in rig.mock.requests() {
        urls.extend(image_urls(&r.body));
    }
    assert_eq!(urls.len(), 3);
    for u in &urls {
        assert_eq!(png_size_of_data_url(u), Some((image.width, image.height)));
    }
    // The daemon got the map the model's coordinates refer to, and mapped
    // them back to the screen.
    for body in rig.probe().act_bodies() {
        assert_eq!(body["expect_scale_map"], json!(map));
    }
    let (x, y) = map.to_screen(100, 50).unwrap();
    let (x2, y2) = map.to_screen(319, 199).unwrap();
    let mut want = clicked(x, y);
    want.push(Event::Motion(x2, y2));
    assert_eq!(rig.probe().input_events(), want);
    for obs in run.of_kind("observation") {
        assert_eq!(obs["scale_map"], json!(map));
    }
    rig.assert_mock_clean();
}
