//! Rule 11: --confirm-actions

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_actions_asks_each_action_then_the_final_screenshot_in_order() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call(
            "call_1",
            vec![click(10, 20), type_text("ab"), keypress(&["CTRL", "A"])],
        )]),
        Reply::done("done"),
    ]);
    let mut opts = rig.opts();
    opts.confirm_actions = true;
    let mut op = ScriptedOp::new(rig.probe()).confirms(vec![Decision::Approve; 4]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let asked = op.confirmations("call_1");
    assert_eq!(asked.len(), 4);
    let inputs_before = [0, 3, 5];
    // Each action is asked about on the screen it will meet: the model's
    // screenshot, then a capture before each later question, and one
    // fresh capture after each approval (docs/contract.md rule 12).
    let captures_before = [1, 3, 5];
    for (k, (index, of, action, at)) in asked.iter().enumerate() {
        assert_eq!((*index, *of), (k, 3));
        if k < 3 {
            // Asked right before action k: the k earlier ones ran, one
            // request each, and nothing of this one.
            assert_eq!(
                action.as_ref().unwrap().kind(),
                ["click", "type", "keypress"][k]
            );
            assert_eq!(
                *at,
                Snap {
                    input: inputs_before[k],
                    captures: captures_before[k],
                    actions: k
                }
            );
        } else {
            // The final screenshot is asked for on its own, not yet taken.
            assert!(action.is_none());
            assert_eq!(
                *at,
                Snap {
                    input: 9,
                    captures: 6,
                    actions: 3
                }
            );
        }
    }
    let acts = rig.probe().act_bodies();
    assert_eq!(acts.len(), 4);
    for a in &acts[..3] {
        assert_eq!(a["actions"].as_array().unwrap().len(), 1);
        assert_eq!(a["final_screenshot"], false);
    }
    assert_eq!(acts[3]["actions"], json!([]));
    assert!(acts[3].get("final_screenshot").is_none_or(|f| f == true));
    assert_eq!(rig.probe().captures(), 7);
    assert_eq!(run.ledger("call_1"), ["pending", "done"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_actions_a_refusal_stops_the_batch_at_that_action() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call(
            "call_1",
            vec![click(10, 20), click(30, 40), type_text("never"), wait()],
        )]),
        Reply::done("unused"),
    ]);
    let mut opts = rig.opts();
    opts.confirm_actions = true;
    let mut op =
        ScriptedOp::new(rig.probe()).confirms([Decision::Approve, deny("not that button")]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Refused);
    assert!(
        run.outcome.message.contains("action 1"),
        "{}",
        run.outcome.message
    );
    assert_eq!(op.confirmations("call_1").len(), 2);
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    assert_eq!(rig.probe().act_bodies().len(), 1);
    // The first screenshot, the re-check after the first approval, the
    // screen the second action was asked about.
    assert_eq!(rig.probe().captures(), 3);
    assert_eq!(rig.mock.requests().len(), 1);
    assert_eq!(run.ledger("call_1"), ["pending", "failed"]);
    let failed = run.of_kind("ledger").last().unwrap().clone();
    assert_eq!(failed["detail"]["executed"], 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_actions_refusing_the_final_screenshot_captures_nothing() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::done("unused"),
    ]);
    let mut opts = rig.opts();
    opts.confirm_actions = true;
    let mut op = ScriptedOp::new(rig.probe()).confirms([Decision::Approve, deny("no screenshot")]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Refused);
    assert!(
        run.outcome.message.contains("final screenshot"),
        "{}",
        run.outcome.message
    );
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    assert_eq!(
        rig.probe().captures(),
        2,
        "the first screenshot and the re-check only: no final screenshot"
    );
    assert_eq!(rig.probe().act_bodies().len(), 1);
    assert_eq!(rig.mock.requests().len(), 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_actions_without_a_terminal_refuses_unless_a_policy_decides() {
    let cases: Vec<(&str, Option<Policy>, Ending)> = vec![
        ("no terminal, no policy", None, Ending::Refused),
        (
            "policy approves",
            Some(Policy {
                approve_check_codes: Vec::new(),
                confirm_actions: Some(PolicyAnswer::Approve),
                ..Policy::default()
            }),
            Ending::Finished,
        ),
        (
            "policy denies",
            Some(Policy {
                approve_check_codes: Vec::new(),
                confirm_actions: Some(PolicyAnswer::Deny),
                ..Policy::default()
            }),
            Ending::Refused,
        ),
    ];
    for (name, policy, ending) in cases {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
            Reply::done("done"),
        ]);
        let mut opts = rig.opts();
        opts.confirm_actions = true;
        let mut op = Approvals {
            policy,
            ..Approvals::default()
        };
        let run = rig.run(opts, &mut op).await;
        assert_eq!(
            run.outcome.ending, ending,
            "{name}: {}",
            run.outcome.message
        );
        let want = if ending == Ending::Finished {
            clicked(10, 20)
        } else {
            Vec::new()
        };
        assert_eq!(rig.probe().input_events(), want, "{name}");
        rig.assert_mock_clean();
    }
}
