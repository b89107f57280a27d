//! L3: step and time budgets, Ctrl-C

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_max_steps_asks_the_model_exactly_n_times_and_the_last_calls_never_run() {
    for n in [1u32, 3] {
        let rig = Rig::new().await;
        for i in 1..=n + 1 {
            rig.mock.push(Reply::output(vec![
                computer_call(&format!("call_{i}"), vec![click(i64::from(i) * 10, 10)]),
                ask_user(&format!("call_ask_{i}"), "Shall I go on?"),
            ]));
        }
        let mut opts = rig.opts();
        opts.max_steps = n;
        let mut op = ScriptedOp::new(rig.probe()).answers((0..n).map(|_| Some("yes")));
        let run = rig.run(opts, &mut op).await;
        run.assert_ending(Ending::StepBudget);
        assert_eq!(run.outcome.steps, n);
        assert_eq!(rig.mock.requests().len(), n as usize, "max_steps {n}");
        assert_eq!(rig.mock.queued(), 1);
        // Rule 13: the calls of the n-th response start no effect: no
        // action, no question.
        let ran: Vec<(u32, u32)> = (1..n).map(|i| (i * 10, 10)).collect();
        assert_eq!(motions(&rig.probe().input_events()), ran, "max_steps {n}");
        assert_eq!(rig.probe().act_bodies().len(), (n - 1) as usize);
        assert_eq!(run.ledger(&format!("call_{n}")), Vec::<String>::new());
        let questions = op
            .asked
            .iter()
            .filter(|a| matches!(a, Asked::Question { .. }))
            .count();
        assert_eq!(questions, (n - 1) as usize);
        assert!(
            run.outcome.message.contains("were not run"),
            "{}",
            run.outcome.message
        );
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_the_time_budget_stops_the_run_between_steps() {
    let rig = Rig::new().await;
    for i in 0..20 {
        rig.mock.push(
            Reply::output(vec![computer_call(&format!("call_{i}"), vec![wait()])])
                .after(Duration::from_millis(100)),
        );
    }
    let mut opts = rig.opts();
    opts.max_duration = Some(Duration::from_millis(350));
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::TimeBudget);
    let asked = rig.mock.requests().len();
    assert!((1..20).contains(&asked), "{asked} requests");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_the_time_budget_also_bounds_a_request_in_flight() {
    let rig = Rig::new().await;
    rig.mock
        .push(Reply::done("late").after(Duration::from_secs(6)));
    let mut opts = rig.opts();
    opts.max_duration = Some(Duration::from_millis(500));
    let mut op = ScriptedOp::new(rig.probe());
    let t0 = Instant::now();
    let run = tokio::time::timeout(Duration::from_secs(3), rig.run(opts, &mut op))
        .await
        .expect("a 0.5 s time budget let a model request run for more than 3 s");
    assert!(t0.elapsed() < Duration::from_secs(3));
    run.assert_ending(Ending::TimeBudget);
}

/// A drag along many close points holding SHIFT: every primitive is slow,
/// so the batch takes seconds; cancellation is checked at every point.
pub(crate) fn slow_drag() -> Value {
    let path: Vec<(i64, i64)> = (0..40).map(|i| (10 + i * 5, 100)).collect();
    computer_call("call_slow", vec![drag(&path, &["SHIFT"])])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_interrupt_during_a_long_batch_stops_within_a_second_and_releases_input() {
    let rig = Rig::new().await;
    rig.probe()
        .knobs(|s| s.slow = Some(Duration::from_millis(40)));
    rig.mock
        .push_all([Reply::output(vec![slow_drag()]), Reply::done("unused")]);
    let interrupt = Interrupt::default();
    let trigger = {
        let interrupt = interrupt.clone();
        let probe = rig.probe().clone();
        tokio::spawn(async move {
            probe
                .wait_for(
                    "the drag to hold the button",
                    Duration::from_secs(10),
                    |e| e.contains(&bd(1)),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            interrupt.trigger();
            Instant::now()
        })
    };
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig
        .run_with(rig.opts(), &mut op, interrupt, fast_retry())
        .await;
    let returned = Instant::now();
    let triggered = trigger.await.unwrap();
    run.assert_ending(Ending::Interrupted);
    let took = returned.duration_since(triggered);
    assert!(
        took < Duration::from_secs(1),
        "stopped {took:?} after Ctrl-C"
    );
    // The daemon released everything it held, last.
    rig.probe()
        .wait_idle(Duration::from_millis(300), Duration::from_secs(5))
        .await;
    let events = rig.probe().input_events();
    assert_eq!(still_held(&events), vec![], "{events:?}");
    assert_eq!(events[events.len() - 2..], [bu(1), ku("SHIFT")]);
    assert!(
        motions(&events).len() < 40,
        "the batch ran to its end: {events:?}"
    );
    // The ledger says the outcome is unknown; the model was not asked again.
    assert_eq!(run.ledger("call_slow"), ["pending", "unknown"]);
    assert_eq!(rig.mock.requests().len(), 1);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_interrupt_while_the_model_answers_stops_within_a_second() {
    for stream in [false, true] {
        let rig = Rig::new().await;
        rig.mock.push(
            Reply::output(vec![computer_call("call_1", vec![click(10, 20)])])
                .after(Duration::from_secs(10)),
        );
        let interrupt = Interrupt::default();
        let trigger = {
            let interrupt = interrupt.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                interrupt.trigger();
                Instant::now()
            })
        };
        let mut opts = rig.opts();
        opts.stream = stream;
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run_with(opts, &mut op, interrupt, fast_retry()).await;
        let returned = Instant::now();
        let triggered = trigger.await.unwrap();
        run.assert_ending(Ending::Interrupted);
        assert_eq!(rig.mock.requests().len(), 1, "stream {stream}");
        let took = returned.duration_since(triggered);
        assert!(
            took < Duration::from_secs(1),
            "stopped {took:?} after Ctrl-C"
        );
        // The call that arrived too late never ran.
        assert_eq!(rig.probe().input_events(), vec![]);
        rig.assert_mock_clean();
    }
}
