//! The whole response checked before any of it runs; failed actions

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_move_followed_by_an_invalid_call_produces_zero_effects() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "out of bounds",
            computer_call("call_2", vec![wait(), click(5000, 20)]),
            "outside the 320x200 screenshot in action 1 of computer call call_2",
        ),
        (
            "an unknown key",
            computer_call("call_2", vec![keypress(&["CTRL", "HYPERDRIVE"])]),
            "unknown key `HYPERDRIVE` in action 0 of computer call call_2",
        ),
        (
            "an unknown action",
            computer_call("call_2", vec![json!({"type": "teleport", "x": 1, "y": 1})]),
            "unknown action type `teleport` in action 0 of computer call call_2",
        ),
        (
            "a limit",
            computer_call("call_2", vec![scroll(1, 1, 0, 1_000_000)]),
            "in action 0 of computer call call_2",
        ),
        (
            "text that cannot be typed",
            computer_call("call_2", vec![type_text("a\u{0}b")]),
            "NUL",
        ),
    ];
    for (name, bad, says) in cases {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![
                computer_call("call_1", vec![move_to(5, 6)]),
                bad,
                ask_user("call_q", "Which form?"),
            ]),
            Reply::done("unused"),
        ]);
        let mut op = ScriptedOp::new(rig.probe()).answers([Some("the first")]);
        let run = rig.run(rig.opts(), &mut op).await;
        assert_eq!(
            run.outcome.ending,
            Ending::ActionFailed,
            "{name}: {}",
            run.outcome.message
        );
        assert!(
            run.outcome.message.contains(says),
            "{name}: {}",
            run.outcome.message
        );
        // Zero daemon calls after the first screenshot; nothing asked.
        assert_eq!(
            rig.probe().paths(),
            ["/v1/info", "/v1/screenshot"],
            "{name}"
        );
        assert_eq!(rig.probe().input_events(), vec![], "{name}");
        assert!(op.asked.is_empty(), "{name}");
        assert_eq!(run.ledger("call_1"), Vec::<String>::new(), "{name}");
        assert_eq!(run.outcome.attempted_call_ids, Vec::<String>::new());
        assert_eq!(run.outcome.action_failures, 1);
        assert_eq!(rig.mock.requests().len(), 1, "{name}");
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_approval_of_a_response_is_asked_before_any_call_runs() {
    // The second call's check is denied: the first call, valid and without
    // checks of its own, must not have run.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            computer_call("call_1", vec![move_to(5, 6)]),
            computer_call_checked("call_2", vec![click(10, 20)], two_checks()),
        ]),
        Reply::done("unused"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).checks([deny("no")]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Denied);
    assert_eq!(rig.probe().act_bodies().len(), 0);
    assert_eq!(rig.probe().input_events(), vec![]);
    // Both calls' checks approved: each asked once, before anything ran.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            computer_call_checked("call_1", vec![move_to(5, 6)], vec![two_checks()[0].clone()]),
            computer_call_checked("call_2", vec![click(10, 20)], vec![two_checks()[1].clone()]),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).checks([Decision::Approve, Decision::Approve]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let at: Vec<(String, Snap)> = op
        .asked
        .iter()
        .map(|a| match a {
            Asked::Checks { call_id, at, .. } => (call_id.clone(), *at),
            other => panic!("{other:?}"),
        })
        .collect();
    let none = Snap {
        input: 0,
        captures: 1,
        actions: 0,
    };
    assert_eq!(
        at,
        [("call_1".to_string(), none), ("call_2".to_string(), none)]
    );
    assert_eq!(rig.probe().act_bodies().len(), 2);
    rig.assert_mock_clean();
}

/// A response whose first call fails at its second action (the fake
/// driver's 4th input primitive fails), with a second computer call and a
/// question after it.
fn failing_response(rig: &Rig) -> Reply {
    rig.probe().knobs(|s| s.fail_at = Some(4));
    Reply::output(vec![
        computer_call(
            "call_1",
            vec![click(10, 20), click(30, 40), type_text("never")],
        ),
        computer_call("call_2", vec![move_to(7, 7)]),
        ask_user("call_q", "Shall I go on?"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_action_stops_the_run_by_default_with_the_call_ids() {
    let rig = Rig::new().await;
    rig.mock
        .push_all([failing_response(&rig), Reply::done("unused")]);
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("yes")]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::ActionFailed);
    assert!(
        run.outcome.message.contains("computer call call_1")
            && run.outcome.message.contains("at action 1"),
        "{}",
        run.outcome.message
    );
    assert_eq!(host_cli::agent::cmd::exit_status(run.outcome.ending), 5);
    // The first click ran, the rest of the response did not.
    let events = rig.probe().input_events();
    assert_eq!(events[..3], clicked(10, 20)[..]);
    assert!(!events.contains(&Event::Motion(7, 7)));
    assert_eq!(rig.probe().act_bodies().len(), 1);
    assert!(
        op.asked.is_empty(),
        "the question after the failure was asked"
    );
    assert_eq!(run.ledger("call_1"), ["pending", "failed"]);
    assert_eq!(run.ledger("call_2"), Vec::<String>::new());
    assert_eq!(run.outcome.attempted_call_ids, ["call_1"]);
    assert_eq!(run.outcome.completed_call_ids, Vec::<String>::new());
    assert_eq!(run.outcome.action_failures, 1);
    assert_eq!(rig.mock.requests().len(), 1);
    let summary: Value =
        serde_json::from_str(&host_cli::agent::cmd::summary(&run.outcome, &run.dir)).unwrap();
    assert_eq!(summary["ending"], "action_failed");
    assert_eq!(summary["attempted_call_ids"], json!(["call_1"]));
    assert_eq!(summary["completed_call_ids"], json!([]));
    assert_eq!(summary["action_failures"], 1);
    assert!(resume_point(&run.dir).unwrap().finished);
    rig.assert_mock_clean();

    // A failure in the second call: the first completed.
    let rig = Rig::new().await;
    rig.probe().knobs(|s| s.fail_at = Some(4));
    rig.mock.push_all([
        Reply::output(vec![
            computer_call("call_1", vec![click(10, 20)]),
            computer_call("call_2", vec![click(30, 40)]),
        ]),
        Reply::done("unused"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::ActionFailed);
    assert_eq!(run.outcome.attempted_call_ids, ["call_1", "call_2"]);
    assert_eq!(run.outcome.completed_call_ids, ["call_1"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_tells_the_model_skips_the_rest_of_the_response_and_goes_on() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        failing_response(&rig),
        Reply::output(vec![computer_call("call_3", vec![move_to(8, 8)])]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("yes")]);
    let run = rig.run(reporting(rig.opts()), &mut op).await;
    run.assert_ending(Ending::Finished);
    // call_2 and the question were skipped; the next response ran.
    let events = rig.probe().input_events();
    assert!(!events.contains(&Event::Motion(7, 7)));
    assert!(events.contains(&Event::Motion(8, 8)));
    assert!(op.asked.is_empty(), "a skipped question was asked");
    assert_eq!(run.ledger("call_1"), ["pending", "failed"]);
    assert_eq!(run.ledger("call_2"), Vec::<String>::new());
    assert_eq!(run.ledger("call_3"), ["pending", "done"]);
    let skipped: Vec<Value> = run.of_kind("skipped");
    assert_eq!(skipped.len(), 2);
    // Every call got its answer, in order, then the note.
    let reqs = rig.mock.requests();
    let second = reqs[1].input();
    let n = second.len();
    assert_eq!(second[n - 4]["call_id"], "call_1");
    assert_eq!(second[n - 3]["call_id"], "call_2");
    assert_eq!(
        second[n - 3]["output"]["image_url"],
        second[n - 4]["output"]["image_url"]
    );
    assert_eq!(
        function_output(&reqs[1], "call_q")["error"],
        json!("not run: an earlier call of the same response failed")
    );
    let note = user_text(&second[n - 1]).unwrap();
    assert!(
        note.contains("Action 1 (click) of computer call call_1")
            && note.contains("1 of its 3 action(s) ran")
            && note.contains("were not run: call_2, call_q"),
        "{note}"
    );
    // The failure still counts.
    assert_eq!(run.outcome.action_failures, 1);
    let summary: Value =
        serde_json::from_str(&host_cli::agent::cmd::summary(&run.outcome, &run.dir)).unwrap();
    assert_eq!(summary["action_failures"], 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_with_an_unknown_field_is_refused_never_run_without_it() {
    let with_foo = json!({"type": "click", "button": "left", "x": 10, "y": 20, "foo": "bar"});
    let drag_extra =
        json!({"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 5, "y": 5, "pressure": 1}]});
    // Stopping (the default): the operator reads which field.
    for (bad, says) in [
        (with_foo.clone(), "unknown field `foo` in action 2"),
        (
            drag_extra,
            "unknown field `pressure` in drag path point 1 in action 2",
        ),
    ] {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![computer_call("call_1", vec![wait(), wait(), bad])]),
            Reply::done("unused"),
        ]);
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(rig.opts(), &mut op).await;
        run.assert_ending(Ending::ActionFailed);
        assert!(
            run.outcome.message.contains(says),
            "{}",
            run.outcome.message
        );
        assert_eq!(rig.probe().act_bodies().len(), 0);
        rig.assert_mock_clean();
    }
    // Reporting: the model sees the error, nothing ran, and it can retry.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call(
            "call_1",
            vec![wait(), wait(), with_foo.clone()],
        )]),
        Reply::output(vec![computer_call("call_2", vec![click(10, 20)])]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(reporting(rig.opts()), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let input = reqs[1].input();
    let note = user_text(input.last().unwrap()).unwrap();
    assert!(
        note.contains("unknown field `foo` in action 2 of computer call call_1"),
        "{note}"
    );
    // Only the corrected click ran, once.
    assert_eq!(rig.probe().act_bodies().len(), 1);
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    assert_eq!(run.outcome.action_failures, 1);
    rig.assert_mock_clean();
    // A refused response whose calls carry safety checks nobody approved
    // cannot be answered honestly: the run stops instead.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call_checked(
            "call_1",
            vec![with_foo],
            two_checks(),
        )]),
        Reply::done("unused"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).checks([Decision::Approve]);
    let run = rig.run(reporting(rig.opts()), &mut op).await;
    run.assert_ending(Ending::ActionFailed);
    assert!(
        run.outcome
            .message
            .contains("safety checks nobody approved")
    );
    assert!(op.asked.is_empty());
    assert_eq!(rig.mock.requests().len(), 1);
    rig.assert_mock_clean();
}
