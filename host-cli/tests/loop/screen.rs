//! Approval bound to the screen (docs/contract.md rule 12,
//! docs/security.md L9): before approved actions run, a fresh capture; when the screen
//! changed around a call's targets while the operator was asked, the
//! operator is asked again, shown both screenshots, and nothing runs until
//! an approval was given on the screen the actions will meet.

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

fn one_check() -> Vec<Value> {
    vec![safety_check(
        "cu_sc_1",
        "sensitive_domain",
        "The action submits a payment.",
    )]
}

/// The `Asked::Checks` questions: (marked, changed_since, at).
fn check_questions(op: &ScriptedOp) -> Vec<(Option<PathBuf>, Option<PathBuf>, Snap)> {
    op.asked
        .iter()
        .filter_map(|a| match a {
            Asked::Checks {
                marked,
                changed_since,
                at,
                ..
            } => Some((marked.clone(), changed_since.clone(), *at)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_a_window_that_moves_over_the_target_during_the_prompt_is_asked_again_with_both_screens()
{
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call_checked(
            "call_1",
            vec![click(100, 100)],
            one_check(),
        )]),
        Reply::done("Paid."),
    ]);
    // While the first question is open, a window opens over the target.
    let mut op = ScriptedOp::new(rig.probe())
        .checks([Decision::Approve, Decision::Approve])
        .windows([window_at(70, 80)]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let asked = check_questions(&op);
    assert_eq!(asked.len(), 2, "asked: {:?}", op.asked);
    // First on the model's screenshot; again on the fresh capture, shown
    // beside the first, with nothing run yet.
    let (first, none, at1) = &asked[0];
    let (again, since, at2) = &asked[1];
    assert_eq!(*none, None);
    assert_eq!(since, first, "the second question shows the first screen");
    let (first, again) = (first.as_ref().unwrap(), again.as_ref().unwrap());
    assert_ne!(first, again);
    assert!(first.is_file() && again.is_file());
    assert_eq!(at1.input, 0);
    assert_eq!(
        *at2,
        Snap {
            input: 0,
            captures: 2,
            actions: 0
        }
    );
    // The two marked images differ where the window came.
    let a = host_cli::image_check::decode_png_within(
        &std::fs::read(first).unwrap(),
        host_cli::image_check::MAX_SIZE,
    )
    .unwrap();
    let b = host_cli::image_check::decode_png_within(
        &std::fs::read(again).unwrap(),
        host_cli::image_check::MAX_SIZE,
    )
    .unwrap();
    let px = |img: &host_cli::image_check::Rgb8, x: u32, y: u32| {
        let i = ((y * img.width + x) * 3) as usize;
        img.rgb[i..i + 3].to_vec()
    };
    assert_eq!(px(&b, 130, 130), vec![200, 200, 200]);
    assert_ne!(px(&a, 130, 130), vec![200, 200, 200]);
    // The trajectory says what changed, between which files, and both
    // decisions; then the click ran once.
    let changed = run.of_kind("screen_changed");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["call_id"], "call_1");
    assert_eq!(changed[0]["before"], run.of_kind("observation")[0]["file"]);
    let after = changed[0]["after"].as_str().unwrap();
    assert!(run.dir.join(after).is_file(), "{after}");
    let share = changed[0]["changed"][0]["share"].as_f64().unwrap();
    assert!(share > 0.5, "{share}");
    let decisions: Vec<_> = run
        .of_kind("safety_checks")
        .iter()
        .map(|d| d["decision"].clone())
        .collect();
    assert_eq!(decisions, [json!("approved"), json!("approved")]);
    assert_eq!(rig.probe().input_events(), clicked(100, 100));
    assert_eq!(run.ledger("call_1"), ["pending", "done"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_a_denial_on_the_changed_screen_runs_nothing() {
    let rig = Rig::new().await;
    rig.mock.push_all([Reply::output(vec![computer_call_checked(
        "call_1",
        vec![click(100, 100), type_text("4111 1111 1111 1111")],
        one_check(),
    )])]);
    let mut op = ScriptedOp::new(rig.probe())
        .checks([Decision::Approve, deny("that is not the page I approved")])
        .windows([window_at(90, 90)]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Denied);
    assert_eq!(check_questions(&op).len(), 2);
    assert!(rig.probe().input_events().is_empty());
    assert_eq!(rig.probe().act_bodies().len(), 0);
    assert!(run.ledger("call_1").is_empty());
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_change_away_from_the_targets_is_not_asked_again() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call_checked(
            "call_1",
            vec![click(40, 40)],
            one_check(),
        )]),
        Reply::done("Done."),
    ]);
    // The window opens in the far corner, nowhere near (40, 40).
    let mut op = ScriptedOp::new(rig.probe())
        .checks([Decision::Approve])
        .windows([window_at(230, 130)]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(check_questions(&op).len(), 1);
    assert!(run.of_kind("screen_changed").is_empty());
    assert_eq!(rig.probe().input_events(), clicked(40, 40));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_typing_without_a_target_is_bound_to_the_whole_screen() {
    let rig = Rig::new().await;
    rig.mock.push_all([Reply::output(vec![computer_call_checked(
        "call_1",
        vec![type_text("secret")],
        one_check(),
    )])]);
    // A window anywhere changes where the typing goes: asked again.
    let mut op = ScriptedOp::new(rig.probe())
        .checks([Decision::Approve, deny("no")])
        .windows([window_at(230, 130)]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Denied);
    assert_eq!(check_questions(&op).len(), 2);
    assert!(rig.probe().input_events().is_empty());
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_a_screen_that_keeps_changing_stops_the_run_with_nothing_run() {
    let rig = Rig::new().await;
    rig.mock.push_all([Reply::output(vec![computer_call_checked(
        "call_1",
        vec![click(100, 100)],
        one_check(),
    )])]);
    // Every question moves the window again, over the target each time.
    let moves = [(60, 60), (70, 70), (80, 80), (90, 90)];
    let mut op = ScriptedOp::new(rig.probe())
        .checks(std::iter::repeat_n(Decision::Approve, moves.len()))
        .windows(moves.iter().map(|&(x, y)| window_at(x, y)));
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Denied);
    assert!(
        run.outcome.message.contains("kept changing"),
        "{}",
        run.outcome.message
    );
    // Asked once and again MAX_ASKED_AGAIN (3) times; nothing ran.
    assert_eq!(check_questions(&op).len(), 4);
    assert_eq!(run.of_kind("screen_changed").len(), 3);
    assert!(rig.probe().input_events().is_empty());
    assert_eq!(rig.probe().act_bodies().len(), 0);
    rig.assert_mock_clean();
}
