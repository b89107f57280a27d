//! Function calls the seed stops on (docs/contract.md rule 13b): a
//! function the run does not offer, and `ask_user` arguments that do not
//! parse, refuse the whole response before anything of it runs; and
//! `ask_user` never carries a credential (docs/security.md L14).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_function_stops_the_run_before_anything_of_its_response_runs() {
    let rig = Rig::new().await;
    rig.mock.push(Reply::output(vec![
        computer_call("call_c", vec![click(10, 20)]),
        function_call("call_fn", "delete_files", &json!({"path": "/"})),
    ]));
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::ActionFailed);
    assert_eq!(rig.probe().input_events(), Vec::<Event>::new());
    let refused = run.of_kind("refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["call_id"], "call_fn");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("`delete_files` is not a function this run offers"),
        "{refused:?}"
    );
    assert_eq!(rig.mock.requests().len(), 1);
    rig.assert_mock_clean();

    // Reporting instead: the model is told, still with nothing run.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            computer_call("call_c", vec![click(10, 20)]),
            function_call("call_fn", "delete_files", &json!({"path": "/"})),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(reporting(rig.opts()), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(rig.probe().input_events(), Vec::<Event>::new());
    let told: Vec<String> = rig.mock.requests()[1]
        .input_of_type("message")
        .iter()
        .filter_map(|m| user_text(m).map(str::to_string))
        .collect();
    assert!(
        told.iter()
            .any(|t| t.contains("Nothing of your last response was run")
                && t.contains("in function call call_fn")),
        "{told:?}"
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_arguments_that_do_not_parse_stop_the_run_and_nobody_is_asked() {
    for (args, why) in [
        (
            json!({"q": "Which name?"}),
            "a missing, unknown or mistyped field",
        ),
        (
            json!({"question": "Which name?", "urgent": true}),
            "a missing, unknown or mistyped field",
        ),
        (
            json!({"question": 7}),
            "a missing, unknown or mistyped field",
        ),
        (json!({"question": "   "}), "ask_user's question is empty"),
    ] {
        let rig = Rig::new().await;
        rig.mock.push(Reply::output(vec![
            computer_call("call_c", vec![click(10, 20)]),
            function_call("call_ask", "ask_user", &args),
        ]));
        let mut op = ScriptedOp::new(rig.probe()).answers([Some("Ada")]);
        let run = rig.run(rig.opts(), &mut op).await;
        run.assert_ending(Ending::ActionFailed);
        assert!(op.asked.is_empty(), "{args}: {:?}", op.asked);
        assert_eq!(rig.probe().input_events(), Vec::<Event>::new(), "{args}");
        let refused = run.of_kind("refused");
        assert!(
            refused[0]["reason"].as_str().unwrap().contains(why),
            "{args}: {refused:?}"
        );
        rig.assert_mock_clean();
    }
    // Not JSON at all.
    let rig = Rig::new().await;
    rig.mock.push(Reply::output(vec![json!({
        "type": "function_call", "id": "fc_1", "call_id": "call_ask",
        "name": "ask_user", "arguments": "{\"question\": ", "status": "completed",
    })]));
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("Ada")]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::ActionFailed);
    assert!(op.asked.is_empty());
    assert!(
        run.of_kind("refused")[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_never_carries_a_credential() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![ask_user(
            "call_1",
            "What is the admin PASSWORD for the router?",
        )]),
        Reply::output(vec![ask_user("call_2", "Send me the 2FA code, please.")]),
        // A word that merely contains a short credential word is asked.
        Reply::output(vec![ask_user("call_3", "Which footprint should I use?")]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("the small one")]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let asked: Vec<&str> = op
        .asked
        .iter()
        .filter_map(|a| match a {
            Asked::Question { question, .. } => Some(question.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["Which footprint should I use?"]);
    let reqs = rig.mock.requests();
    for (n, id) in [(1, "call_1"), (2, "call_2")] {
        let e = function_output(&reqs[n], id)["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(e.contains("never carries credentials"), "{e}");
    }
    assert_eq!(
        function_output(&reqs[3], "call_3"),
        json!({"answer": "the small one"})
    );
    rig.assert_mock_clean();
}
