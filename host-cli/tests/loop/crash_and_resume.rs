//! L7: the trajectory survives a crash; the ledger never lies

use super::*;

/// What `resume_point` should say about a trajectory cut after `lines`
/// complete lines (a torn line after them is ignored).
fn expected_resume(lines: &[Value]) -> (u32, Option<String>, Option<(u32, String)>, bool) {
    let mut steps = 0;
    let mut last = None;
    let mut ledger: Vec<(String, u32, String)> = Vec::new();
    let mut finished = false;
    for l in lines {
        match l["kind"].as_str().unwrap() {
            "response" => {
                steps = l["step"].as_u64().unwrap() as u32;
                last = l["id"].as_str().map(str::to_string);
            }
            "ledger" => {
                let call = l["call_id"].as_str().unwrap().to_string();
                ledger.retain(|(c, _, _)| *c != call);
                ledger.push((
                    call,
                    l["step"].as_u64().unwrap() as u32,
                    l["state"].as_str().unwrap().to_string(),
                ));
            }
            "run_finished" => finished = true,
            _ => {}
        }
    }
    let unsettled = ledger
        .into_iter()
        .filter(|(_, _, s)| s == "pending" || s == "unknown")
        .map(|(c, step, _)| (step, c))
        .min_by(|a, b| a.1.cmp(&b.1));
    (steps, last, unsettled, finished)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_the_trajectory_is_complete_and_resume_point_survives_a_crash_at_any_byte() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::output(vec![computer_call("call_2", vec![type_text("x")])]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    // Complete: every line parsed (trajectory() checks), the run's story in
    // order, the last line the end.
    let kinds: Vec<&str> = run
        .lines
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_finished"));
    assert_eq!(run.ledger("call_1"), ["pending", "done"]);
    assert_eq!(run.ledger("call_2"), ["pending", "done"]);
    let ids: Vec<String> = rig
        .mock
        .requests()
        .iter()
        .map(|r| r.response_id().unwrap())
        .collect();
    let p = resume_point(&run.dir).unwrap();
    assert_eq!(p.steps_done, 3);
    assert_eq!(p.last_response_id.as_deref(), Some(ids[2].as_str()));
    assert_eq!(p.unsettled, None);
    assert!(p.finished);
    // A crash can cut the file anywhere: at every line end and in the
    // middle of every line, resume_point reads what was complete.
    let text = std::fs::read(run.dir.join("trajectory.jsonl")).unwrap();
    let mut ends: Vec<usize> = vec![];
    for (i, b) in text.iter().enumerate() {
        if *b == b'\n' {
            ends.push(i + 1);
        }
    }
    let crash = rig.runs.path().join("crash");
    std::fs::create_dir(&crash).unwrap();
    // The screenshots a crash leaves beside the trajectory (a resume sends
    // them again).
    for entry in std::fs::read_dir(&run.dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "trajectory.jsonl" {
            std::fs::copy(&path, crash.join(path.file_name().unwrap())).unwrap();
        }
    }
    let mut start = 0;
    for (n, &end) in ends.iter().enumerate() {
        for cut in [start + (end - start) / 2, end] {
            std::fs::write(crash.join("trajectory.jsonl"), &text[..cut]).unwrap();
            let complete = if cut == end { n + 1 } else { n };
            if complete == 0 {
                // Not even `run_started` survived: nothing to resume.
                assert!(resume_point(&crash).is_err());
                continue;
            }
            let (steps, last, unsettled, finished) = expected_resume(&run.lines[..complete]);
            let p = resume_point(&crash).unwrap();
            assert_eq!(p.steps_done, steps, "cut at byte {cut}");
            assert_eq!(p.last_response_id, last, "cut at byte {cut}");
            assert_eq!(p.unsettled, unsettled, "cut at byte {cut}");
            assert_eq!(p.finished, finished, "cut at byte {cut}");
        }
        start = end;
    }
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_a_crash_mid_batch_leaves_the_call_unsettled_never_done() {
    let rig = Rig::new().await;
    rig.probe()
        .knobs(|s| s.slow = Some(Duration::from_millis(40)));
    rig.mock
        .push_all([Reply::output(vec![slow_drag()]), Reply::done("unused")]);
    let dir = rig.new_run_dir();
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let mut op = ScriptedOp::new(rig.probe());
    let mut recorder = start_recorder(&dir);
    {
        let mut runner = Runner::new(
            &mut model,
            &mut channel,
            &mut op,
            &mut recorder,
            rig.opts(),
            Interrupt::default(),
        );
        // The host process "dies" while the daemon runs the batch: the
        // runner is dropped mid-await, nothing more is written.
        tokio::select! {
            r = runner.run(None) => panic!("the run ended before the crash: {:?}", r.map(|o| o.ending)),
            () = rig.probe().wait_for("the drag", Duration::from_secs(10), |e| e.contains(&bd(1))) => {}
        }
    }
    drop(recorder);
    let lines = trajectory(&dir);
    assert!(lines.iter().all(|l| l["kind"] != "run_finished"));
    let p = resume_point(&dir).unwrap();
    assert_eq!(p.unsettled, Some((1, "call_slow".to_string())));
    assert_eq!(p.steps_done, 1);
    assert!(!p.finished);
    let states: Vec<&str> = lines
        .iter()
        .filter(|l| l["kind"] == "ledger")
        .map(|l| l["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending"]);
    // The daemon, seeing the client go, released what the batch held.
    rig.probe()
        .wait_idle(Duration::from_millis(300), Duration::from_secs(5))
        .await;
    assert_eq!(still_held(&rig.probe().input_events()), vec![]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_an_interrupted_run_can_be_resumed_after_reconciling() {
    let rig = Rig::new().await;
    rig.probe()
        .knobs(|s| s.slow = Some(Duration::from_millis(40)));
    rig.mock
        .push_all([Reply::output(vec![slow_drag()]), Reply::done("unused")]);
    let interrupt = Interrupt::default();
    {
        let interrupt = interrupt.clone();
        let probe = rig.probe().clone();
        tokio::spawn(async move {
            probe
                .wait_for("the drag", Duration::from_secs(10), |e| e.contains(&bd(1)))
                .await;
            interrupt.trigger();
        });
    }
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig
        .run_with(rig.opts(), &mut op, interrupt, fast_retry())
        .await;
    run.assert_ending(Ending::Interrupted);
    assert!(run.outcome.message.contains("--resume"));
    let p = resume_point(&run.dir).unwrap();
    assert_eq!(p.unsettled, Some((1, "call_slow".to_string())));
    assert!(
        !p.finished,
        "the interrupted run is recorded as finished, so --resume refuses it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_resuming_after_a_crash_continues_after_the_last_completed_step() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        // Step 2's answer never arrives before the crash.
        Reply::done("too late").after(Duration::from_secs(20)),
    ]);
    let dir = rig.new_run_dir();
    {
        let mut model = rig.model(false, fast_retry());
        let mut channel = rig.daemon.channel().await;
        let mut op = ScriptedOp::new(rig.probe());
        let mut recorder = start_recorder(&dir);
        let mut runner = Runner::new(
            &mut model,
            &mut channel,
            &mut op,
            &mut recorder,
            stored(rig.opts()),
            Interrupt::default(),
        );
        let mock = &rig.mock;
        let second_request = async {
            while mock.requests().len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            r = runner.run(None) => panic!("the run ended before the crash: {:?}", r.map(|o| o.ending)),
            () = second_request => {}
        }
    }
    let first_id = rig.mock.requests()[0].response_id().unwrap();
    let p = resume_point(&dir).unwrap();
    assert_eq!(p.steps_done, 1);
    assert_eq!(p.last_response_id.as_deref(), Some(first_id.as_str()));
    assert_eq!(p.unsettled, None);
    assert!(!p.finished);
    // Resume as `host-cli run --resume` does.
    rig.mock.push(Reply::done("done"));
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let mut op = ScriptedOp::new(rig.probe());
    let mut recorder = Recorder::open(&dir).unwrap();
    let resume = Resume {
        previous_response_id: p.last_response_id.clone(),
        steps_done: p.steps_done,
        next_input: p.pending_outputs.clone(),
        conversation: p.conversation.clone(),
    };
    let outcome = Runner::new(
        &mut model,
        &mut channel,
        &mut op,
        &mut recorder,
        stored(rig.opts()),
        Interrupt::default(),
    )
    .run(Some(resume))
    .await
    .unwrap();
    assert_eq!(outcome.ending, Ending::Finished, "{}", outcome.message);
    let reqs = rig.mock.requests();
    let resumed = reqs.last().unwrap();
    assert_eq!(resumed.previous_response_id(), Some(first_id.as_str()));
    let url = call_output(resumed, "call_1")["output"]["image_url"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        png_size_of_data_url(&url),
        Some((SCREEN.width, SCREEN.height))
    );
    // The completed step's action was never run again.
    assert_eq!(rig.probe().input_events(), clicked(10, 20));
    rig.assert_mock_clean();
}
