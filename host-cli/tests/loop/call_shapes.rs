//! L2: both call shapes; unknown actions

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_batched_actions_run_once_in_order_with_one_final_screenshot() {
    let rig = Rig::new().await;
    let actions = vec![
        move_to(5, 6),
        click(10, 20),
        double_click(30, 40),
        type_text("añ"),
        keypress(&["CTRL", "A"]),
        scroll(50, 60, 0, 100),
        drag(&[(100, 100), (110, 100), (120, 104)], &[]),
        wait(),
        screenshot(),
    ];
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", actions.clone())]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let mut want = vec![Event::Capture(Rect::full(SCREEN)), Event::Motion(5, 6)];
    want.extend(clicked(10, 20));
    want.extend([Event::Motion(30, 40), bd(1), bu(1), bd(1), bu(1)]);
    want.extend([Event::Char('a'), Event::Char('ñ')]);
    want.extend([kd("CTRL"), kd("A"), ku("A"), ku("CTRL")]);
    want.extend([Event::Motion(50, 60), bd(5), bu(5), bd(5), bu(5)]);
    want.extend([
        Event::Motion(100, 100),
        bd(1),
        Event::Motion(110, 100),
        Event::Motion(120, 104),
        bu(1),
    ]);
    want.extend([
        Event::Settle,
        Event::Settle,
        Event::Capture(Rect::full(SCREEN)),
    ]);
    assert_eq!(rig.probe().events(), want);
    // One batch, the actions as the model sent them.
    let acts = rig.probe().act_bodies();
    assert_eq!(acts.len(), 1);
    let sent: Vec<&str> = acts[0]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        sent,
        [
            "move",
            "click",
            "double_click",
            "type",
            "keypress",
            "scroll",
            "drag",
            "wait",
            "screenshot"
        ]
    );
    assert!(op.asked.is_empty());
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_the_preview_shape_runs_its_single_actions_with_the_preview_tool() {
    // The model sees a 160x100 screenshot of a 320x200 screen.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            reasoning("Click the field."),
            preview_call("call_1", click(10, 20), Vec::new()),
        ]),
        Reply::output(vec![preview_call("call_2", type_text("ok"), Vec::new())]),
        Reply::done("done"),
    ]);
    let mut opts = rig.opts();
    opts.shape = ToolShape::ComputerUsePreview;
    opts.model = "computer-use-preview".into();
    opts.screenshot.size = Some(Size::new(160, 100));
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    // Coordinates are in the screenshot's space, mapped back by its map.
    let map = ScaleMap::fit(SCREEN, None, Some(Size::new(160, 100)), Fit::default()).unwrap();
    let (x, y) = map.to_screen(10, 20).unwrap();
    assert!((20..=21).contains(&x) && (40..=41).contains(&y), "{x},{y}");
    let mut want = clicked(x, y);
    want.extend([Event::Char('o'), Event::Char('k')]);
    assert_eq!(rig.probe().input_events(), want);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        assert_eq!(
            r.body["tools"][0],
            json!({"type": "computer_use_preview", "display_width": 160,
                   "display_height": 100, "environment": "linux"}),
            "request {}",
            r.n
        );
        assert_eq!(r.body["truncation"], "auto", "request {}", r.n);
        assert_eq!(r.body["model"], "computer-use-preview");
    }
    assert_eq!(rig.probe().act_bodies().len(), 2);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_an_unknown_action_stops_the_run_with_zero_daemon_events() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "unknown type in a batch",
            computer_call(
                "call_1",
                vec![click(1, 1), json!({"type": "teleport", "x": 1, "y": 1})],
            ),
            "unknown action type `teleport`",
        ),
        (
            "unknown preview action",
            preview_call(
                "call_1",
                json!({"type": "hover", "x": 1, "y": 1}),
                Vec::new(),
            ),
            "unknown action type `hover`",
        ),
        (
            "a field the schema does not know",
            computer_call(
                "call_1",
                vec![wait(), json!({"type": "move", "x": 1, "y": 1, "foo": 1})],
            ),
            "unknown field `foo`",
        ),
        (
            "a click without y",
            computer_call(
                "call_1",
                vec![json!({"type": "click", "button": "left", "x": 1})],
            ),
            "invalid `click` action",
        ),
        (
            "a button that does not exist",
            computer_call(
                "call_1",
                vec![json!({"type": "click", "button": "middle", "x": 1, "y": 1})],
            ),
            "invalid `click` action",
        ),
    ];
    for (name, call, says) in cases {
        let rig = Rig::new().await;
        rig.mock
            .push_all([Reply::output(vec![call]), Reply::done("unused")]);
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(rig.opts(), &mut op).await;
        assert_eq!(run.outcome.ending, Ending::ActionFailed, "{name}");
        assert!(
            run.outcome.message.contains(says) && run.outcome.message.contains("call_1"),
            "{name}: {}",
            run.outcome.message
        );
        assert_eq!(rig.probe().act_bodies().len(), 0, "{name}");
        assert_eq!(rig.probe().input_events(), vec![], "{name}");
        assert_eq!(rig.mock.requests().len(), 1, "{name}");
        assert_eq!(run.ledger("call_1"), Vec::<String>::new(), "{name}");
        rig.assert_mock_clean();
    }
}
