//! `--confirm-actions` confirmations bound to the screen, as safety-check
//! approvals are (docs/contract.md rule 12, docs/security.md L9): each action
//! is asked about on the screen it will meet, its target marked; when the
//! screen changed around it while the operator decided, it is asked again,
//! shown both screens, and nothing runs until a confirmation was given on
//! the screen the action meets.

use super::*;

/// A plain grey window that, once moved to `(x, y)`, covers 80 x 60
/// screen pixels from there.
fn window_at(x: u32, y: u32) -> Option<(Rect, [u8; 3])> {
    Some((
        Rect {
            x,
            y,
            width: 80,
            height: 60,
        },
        [200, 200, 200],
    ))
}

/// The confirmation questions of `call_1`: (index, marked, changed_since,
/// when).
fn questions(op: &ScriptedOp) -> Vec<(usize, Option<PathBuf>, Option<PathBuf>, Snap)> {
    op.asked
        .iter()
        .filter_map(|a| match a {
            Asked::Confirm {
                index,
                marked,
                changed_since,
                at,
                ..
            } => Some((*index, marked.clone(), changed_since.clone(), *at)),
            _ => None,
        })
        .collect()
}

fn confirming(rig: &Rig) -> RunOptions {
    RunOptions {
        confirm_actions: true,
        ..rig.opts()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c1_a_window_over_the_target_during_a_confirmation_is_asked_again_with_both_screens() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call(
            "call_1",
            vec![click(100, 100), click(10, 10)],
        )]),
        Reply::done("Clicked."),
    ]);
    // While the first action is asked about, a window opens over its
    // target; later questions leave it where it is.
    let mut op = ScriptedOp::new(rig.probe()).confirms(vec![Decision::Approve; 4]);
    op.confirm_windows.extend([window_at(70, 80)]);
    let run = rig.run(confirming(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let asked = questions(&op);
    assert_eq!(
        asked.iter().map(|q| q.0).collect::<Vec<_>>(),
        [0, 0, 1, 2],
        "action 0 twice, action 1, the final screenshot: {:?}",
        op.asked
    );
    // Action 0: first on the model's screenshot, marked; again on the
    // fresh capture, shown beside the first, with nothing run yet.
    let (_, first, none, _) = &asked[0];
    let (_, again, since, at) = &asked[1];
    assert_eq!(*none, None);
    assert_eq!(since, first, "the second question shows the first screen");
    let (first, again) = (first.as_ref().unwrap(), again.as_ref().unwrap());
    assert_ne!(first, again);
    assert!(first.is_file() && again.is_file());
    assert_eq!(at.input, 0, "nothing ran before the second answer");
    // Action 1 is asked about on the screen action 0 left (a capture),
    // its target away from the window: asked once.
    let (_, marked1, since1, at1) = &asked[2];
    assert!(marked1.as_ref().is_some_and(|p| p.is_file()));
    assert_eq!(*since1, None);
    assert_eq!(at1.input, clicked(100, 100).len());
    // The final screenshot has no target and no marked screen.
    assert_eq!(asked[3].1, None);
    let changed = run.of_kind("screen_changed");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["call_id"], "call_1");
    assert_eq!(changed[0]["before"], run.of_kind("observation")[0]["file"]);
    let confirms: Vec<_> = run
        .of_kind("confirm")
        .iter()
        .map(|c| (c["index"].clone(), c["approved"].clone()))
        .collect();
    assert_eq!(
        confirms,
        [
            (json!(0), json!(true)),
            (json!(0), json!(true)),
            (json!(1), json!(true)),
            (Value::Null, json!(true))
        ]
    );
    let mut both = clicked(100, 100);
    both.extend(clicked(10, 10));
    assert_eq!(rig.probe().input_events(), both);
    assert_eq!(run.ledger("call_1"), ["pending", "done"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c2_a_refusal_on_the_changed_screen_runs_nothing() {
    let rig = Rig::new().await;
    rig.mock.push_all([Reply::output(vec![computer_call(
        "call_1",
        vec![click(100, 100)],
    )])]);
    let mut op = ScriptedOp::new(rig.probe())
        .confirms([Decision::Approve, deny("that is not what I confirmed")]);
    op.confirm_windows.extend([window_at(90, 90)]);
    let run = rig.run(confirming(&rig), &mut op).await;
    run.assert_ending(Ending::Refused);
    assert_eq!(questions(&op).len(), 2);
    assert!(rig.probe().input_events().is_empty());
    assert_eq!(rig.probe().act_bodies().len(), 0);
    assert_eq!(run.ledger("call_1"), ["pending", "failed"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_a_change_away_from_the_target_is_not_asked_again_but_typing_is() {
    // A click: a window in the far corner changes nothing around it.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(40, 40)])]),
        Reply::done("Done."),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).confirms([Decision::Approve, Decision::Approve]);
    op.confirm_windows.extend([window_at(230, 130)]);
    let run = rig.run(confirming(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(
        questions(&op).len(),
        2,
        "the click and the final screenshot"
    );
    assert!(run.of_kind("screen_changed").is_empty());
    assert_eq!(rig.probe().input_events(), clicked(40, 40));
    rig.assert_mock_clean();

    // Typing goes wherever the focus is: the whole screen is its target.
    let rig = Rig::new().await;
    rig.mock.push_all([Reply::output(vec![computer_call(
        "call_1",
        vec![type_text("secret")],
    )])]);
    let mut op = ScriptedOp::new(rig.probe()).confirms([Decision::Approve, deny("no")]);
    op.confirm_windows.extend([window_at(230, 130)]);
    let run = rig.run(confirming(&rig), &mut op).await;
    run.assert_ending(Ending::Refused);
    assert_eq!(questions(&op).len(), 2);
    assert!(rig.probe().input_events().is_empty());
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_a_screen_that_keeps_changing_around_an_action_stops_the_run_with_it_not_run() {
    let rig = Rig::new().await;
    rig.mock.push_all([Reply::output(vec![computer_call(
        "call_1",
        vec![click(100, 100)],
    )])]);
    let moves = [(60, 60), (70, 70), (80, 80), (90, 90)];
    let mut op =
        ScriptedOp::new(rig.probe()).confirms(std::iter::repeat_n(Decision::Approve, moves.len()));
    op.confirm_windows
        .extend(moves.iter().map(|&(x, y)| window_at(x, y)));
    let run = rig.run(confirming(&rig), &mut op).await;
    run.assert_ending(Ending::Denied);
    assert!(
        run.outcome.message.contains("kept changing"),
        "{}",
        run.outcome.message
    );
    assert_eq!(questions(&op).len(), 4);
    assert_eq!(run.of_kind("screen_changed").len(), 3);
    assert!(rig.probe().input_events().is_empty());
    assert_eq!(rig.probe().act_bodies().len(), 0);
    assert_eq!(run.ledger("call_1"), ["pending", "failed"]);
    rig.assert_mock_clean();
}
