//! L5: retries never repeat a driver action

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l5_model_failures_are_retried_and_the_action_runs_exactly_once() {
    let cases: Vec<(&str, Reply, bool)> = vec![
        ("429 Retry-After: 0", Reply::rate_limited("0"), false),
        (
            "500",
            Reply::status(
                500,
                "The server had an error while processing your request.",
            ),
            false,
        ),
        (
            "503",
            Reply::status(503, "The engine is currently overloaded."),
            true,
        ),
        ("malformed JSON body", Reply::malformed(), false),
        ("malformed event stream", Reply::malformed(), true),
        (
            "body cut mid-JSON",
            Reply::aborted(vec![message("x")]),
            false,
        ),
        (
            "stream cut cleanly",
            Reply::cut(vec![message("partial")]),
            true,
        ),
        (
            "stream aborted",
            Reply::aborted(vec![message("partial")]),
            true,
        ),
        (
            "stream error event",
            Reply::StreamError("The server had an error.".into()),
            true,
        ),
    ];
    for (name, failure, stream) in cases {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
            failure,
            Reply::done("done"),
        ]);
        let mut opts = rig.opts();
        opts.stream = stream;
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(opts, &mut op).await;
        assert_eq!(
            run.outcome.ending,
            Ending::Finished,
            "{name}: {}",
            run.outcome.message
        );
        // The action ran once; the retry repeated the model request only.
        assert_eq!(rig.probe().input_events(), clicked(10, 20), "{name}");
        assert_eq!(rig.probe().act_bodies().len(), 1, "{name}");
        let reqs = rig.mock.requests();
        assert_eq!(reqs.len(), 3, "{name}");
        assert_eq!(
            reqs[1].body, reqs[2].body,
            "{name}: the retry changed the request"
        );
        let usage = run.of_kind("usage");
        assert_eq!(usage.len(), 2, "{name}: one record per completed request");
        assert_eq!(usage[1]["attempts"], 2, "{name}");
        assert_eq!(run.outcome.usage.requests, 2, "{name}");
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l5_a_failure_before_any_action_is_retried_too_and_nothing_repeats() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::status(502, "Bad gateway"),
        Reply::rate_limited("0"),
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    assert_eq!(rig.mock.requests().len(), 4);
    assert_eq!(run.of_kind("usage")[0]["attempts"], 3);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l5_connection_refused_is_retried_and_the_action_runs_once() {
    let rig = Rig::new().await;
    // A port nobody listens on yet: connections are refused.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let retry = RetryPolicy {
        max_attempts: 100,
        base: Duration::from_millis(10),
        cap: Duration::from_millis(30),
    };
    let mut model = OpenAiModel::with_base_url(
        Secret::new(rig.key.clone()),
        &format!("http://{addr}"),
        false,
        retry,
    )
    .unwrap();
    // The API comes up 300 ms after the first screenshot, that is well
    // after the first request was refused.
    let late = {
        let probe = rig.probe().clone();
        let key = rig.key.clone();
        tokio::spawn(async move {
            probe
                .wait_for("the first screenshot", Duration::from_secs(10), |e| {
                    e.iter().any(|e| matches!(e, Event::Capture(_)))
                })
                .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            MockResponses::start_on(
                addr,
                &key,
                vec![
                    Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
                    Reply::done("done"),
                ],
            )
            .await
            .unwrap()
        })
    };
    let mut channel = rig.daemon.channel().await;
    let mut op = ScriptedOp::new(rig.probe());
    let run = drive(
        &rig.new_run_dir(),
        &mut model,
        &mut channel,
        rig.opts(),
        &mut op,
        Interrupt::default(),
    )
    .await;
    let mock = late.await.unwrap();
    run.assert_ending(Ending::Finished);
    let attempts = run.of_kind("usage")[0]["attempts"].as_u64().unwrap();
    assert!(
        attempts >= 2,
        "the first request was not refused ({attempts} attempt)"
    );
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(mock.validation_errors(), Vec::<String>::new());
    assert_eq!(mock.problems(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l5_a_400_is_not_retried_and_stops_the_run() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::status(400, "Invalid value for 'input[1].output'."),
        Reply::done("unused"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Failed);
    assert!(
        run.outcome.message.contains("(400)") && run.outcome.message.contains("Invalid value"),
        "{}",
        run.outcome.message
    );
    assert_eq!(rig.mock.requests().len(), 2, "a 400 was retried");
    assert_eq!(rig.mock.queued(), 1);
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    assert_eq!(
        run.of_kind("usage").len(),
        1,
        "a refused request is not a completed one"
    );
    assert_eq!(run.of_kind("model_error").len(), 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l5_retries_are_capped_and_then_the_run_fails_with_nothing_run() {
    let rig = Rig::new().await;
    for _ in 0..fast_retry().max_attempts {
        rig.mock.push(Reply::status(500, "boom"));
    }
    rig.mock.push(Reply::output(vec![computer_call(
        "call_1",
        vec![click(10, 20)],
    )]));
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Failed);
    assert!(
        run.outcome.message.contains("after 4 attempts"),
        "{}",
        run.outcome.message
    );
    assert_eq!(rig.mock.requests().len(), 4);
    assert_eq!(rig.mock.queued(), 1);
    assert_eq!(rig.probe().input_events(), vec![]);
    assert_eq!(run.outcome.usage.requests, 0);
    rig.assert_mock_clean();
}
