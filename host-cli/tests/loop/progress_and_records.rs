//! Progress while it runs (docs/contract.md rule 14a)

use super::*;

/// A writer the test reads back.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8(lock(&self.0).clone()).unwrap()
    }
}

/// Runs with progress going to two buffers: (run, stderr lines, events).
async fn run_with_progress(
    rig: &Rig,
    opts: RunOptions,
    op: &mut dyn Operator,
    lines: bool,
    events: bool,
) -> (Run, String, String) {
    let (err, out) = (Buf::default(), Buf::default());
    let dir = rig.new_run_dir();
    let mut model = rig.model(opts.stream, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let mut recorder = start_recorder(&dir);
    let progress = Progress::to(
        lines.then(|| Box::new(err.clone()) as Box<dyn std::io::Write + Send>),
        events.then(|| Box::new(out.clone()) as Box<dyn std::io::Write + Send>),
    );
    let mut runner = Runner::new(
        &mut model,
        &mut channel,
        op,
        &mut recorder,
        opts,
        Interrupt::default(),
    )
    .with_progress(progress);
    let outcome = tokio::time::timeout(RUN_LIMIT, runner.run(None))
        .await
        .expect("the run hung")
        .unwrap();
    drop(runner);
    drop(recorder);
    let run = Run {
        outcome,
        dir: dir.clone(),
        lines: trajectory(&dir),
    };
    (run, err.text(), out.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_a_line_per_step_on_stderr_and_one_json_object_per_event() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call(
            "call_1",
            vec![click(10, 20), type_text("hi")],
        )]),
        Reply::output(vec![
            computer_call("call_2", vec![move_to(5, 5)]),
            ask_user("call_q", "Which name?"),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).answers([Some("Ada")]);
    let (run, err, out) = run_with_progress(&rig, rig.opts(), &mut op, true, true).await;
    run.assert_ending(Ending::Finished);
    // One line per step: the step, each call with its action kinds, the
    // model's and the daemon's time.
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    let pattern = |l: &str, head: &str| {
        l.starts_with(head)
            && l.contains(" | model ")
            && l.ends_with(" ms")
            && l.contains(" | daemon ")
    };
    assert!(
        pattern(lines[0], "host-cli: step 1/10: call_1 click,type | "),
        "{}",
        lines[0]
    );
    assert!(
        pattern(
            lines[1],
            "host-cli: step 2/10: call_2 move; call_q ask_user | "
        ),
        "{}",
        lines[1]
    );
    assert!(
        pattern(lines[2], "host-cli: step 3/10: no tool call | "),
        "{}",
        lines[2]
    );
    // Events: every stdout line one JSON object, in the run's order.
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "started", "model", "call", "step", "model", "call", "call", "step", "model", "step",
            "finished"
        ]
    );
    let call = &events[2];
    assert_eq!(call["call_id"], "call_1");
    assert_eq!(call["kinds"], json!(["click", "type"]));
    assert_eq!(call["state"], "done");
    assert!(call["daemon_ms"].as_f64().unwrap() > 0.0, "{call}");
    assert_eq!(events[1]["calls"], 1);
    assert!(events[1]["model_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(events[6]["state"], "answered");
    assert_eq!(events[10]["ending"], "finished");
    assert_eq!(events[10]["steps"], 3);
    // --quiet: no line at all; without --events: no event.
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_3", vec![click(1, 1)])]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let (run, err, out) = run_with_progress(&rig, rig.opts(), &mut op, false, false).await;
    run.assert_ending(Ending::Finished);
    assert_eq!((err.as_str(), out.as_str()), ("", ""));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reports_failed_refused_and_skipped_calls() {
    let rig = Rig::new().await;
    // A call the host refuses: the line says so, nothing ran.
    rig.mock.push_all([Reply::output(vec![
        computer_call("call_ok", vec![move_to(1, 1)]),
        computer_call("call_bad", vec![click(5000, 5000)]),
    ])]);
    let mut op = ScriptedOp::new(rig.probe());
    let (run, err, _) = run_with_progress(&rig, rig.opts(), &mut op, true, false).await;
    run.assert_ending(Ending::ActionFailed);
    assert!(
        err.starts_with(
            "host-cli: step 1/10: call_ok move (skipped); call_bad click (refused) | model "
        ),
        "{err}"
    );
    rig.assert_mock_clean();
}

// ---------------------------------------------------------------------
// The trajectory is typed (docs/contract.md rule 18a)
// ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trajectory_is_typed_entries_and_resume_reads_them() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            computer_call_checked("call_1", vec![click(10, 20)], two_checks()),
            ask_user("call_q", "Which name?"),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe())
        .checks([Decision::Approve])
        .answers([Some("Ada")]);
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    let entries = read_trajectory(&run.dir).unwrap();
    let kinds: Vec<String> = entries.iter().map(Entry::kind).collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "observation",
            "request_input",
            "usage",
            "response",
            "safety_checks",
            "ledger",
            "ledger",
            "observation",
            "ask_user",
            "call_output",
            "call_output",
            "request_input",
            "usage",
            "response",
            "run_finished"
        ]
    );
    let Entry::RunStarted(started) = &entries[0] else {
        unreachable!()
    };
    assert_eq!(started.session, "test");
    assert!(matches!(
        &entries[5],
        // ScriptedOp does not say who decided: no `by`.
        Entry::SafetyChecks { call_id, checks, decision, step: 1, by: None }
            if call_id == "call_1" && checks.len() == 2 && decision == "approved"
    ));
    assert!(matches!(
        &entries[7],
        Entry::Ledger { call_id, state: LedgerState::Done, step: 1, .. } if call_id == "call_1"
    ));
    assert!(matches!(
        &entries[9],
        Entry::AskUser { call_id, answered: true, .. } if call_id == "call_q"
    ));
    let Entry::Usage(u) = &entries[3] else {
        unreachable!()
    };
    assert_eq!(
        (u.api.as_str(), u.stage.as_str(), u.reason.as_str()),
        ("responses", "request", "completed")
    );
    let Entry::RunFinished(f) = entries.last().unwrap() else {
        unreachable!()
    };
    assert_eq!(f.ending, Ending::Finished);
    assert_eq!(f.steps, 2);
    // Resume reads the same entries: the session by name, the steps done.
    let p = resume_point(&run.dir).unwrap();
    assert_eq!(p.started.session, "test");
    assert_eq!(p.steps_done, 2);
    assert!(p.finished);
    rig.assert_mock_clean();
}

// ---------------------------------------------------------------------
// A stop during an open prompt (docs/contract.md rule 15)
// ---------------------------------------------------------------------

/// How the run is stopped while its prompt is open.
#[derive(Debug, Clone, Copy)]
enum StopBy {
    CtrlC,
    Budget,
}

/// Runs with the real operator on a terminal the test types into: once
/// a prompt ending with `prompt_end` is shown, the run is stopped (Ctrl-C,
/// or the time budget of 1 s running out with nobody answering); 1.5 s
/// later `yes` is typed. Returns the run, how long after the stop it
/// ended, and what the terminal showed.
async fn stop_during_prompt(
    rig: &Rig,
    mut opts: RunOptions,
    prompt_end: &str,
    by: StopBy,
) -> (Run, Duration, String) {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let screen = Buf::default();
    let terminal = Terminal::from_parts(rx, Box::new(screen.clone()));
    let mut op = Approvals {
        terminal: Some(Arc::new(Mutex::new(terminal))),
        ..Approvals::default()
    };
    if let StopBy::Budget = by {
        opts.max_duration = Some(Duration::from_secs(1));
    }
    let interrupt = Interrupt::default();
    let dir = rig.new_run_dir();
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let mut recorder = start_recorder(&dir);
    let stopped_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let started = Instant::now();
    // Its own task: the prompt blocks the run's.
    let driver = {
        let (screen, interrupt, stopped_at) =
            (screen.clone(), interrupt.clone(), stopped_at.clone());
        let prompt_end = prompt_end.to_string();
        tokio::spawn(async move {
            while !screen.text().ends_with(&prompt_end) {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "no prompt: {}",
                    screen.text()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            match by {
                StopBy::CtrlC => interrupt.trigger(),
                StopBy::Budget => {
                    tokio::time::sleep_until((started + Duration::from_secs(1)).into()).await;
                }
            }
            *lock(&stopped_at) = Some(Instant::now());
            tokio::time::sleep(Duration::from_millis(1500)).await;
            // Typed after the stop: it must answer nothing.
            let _ = tx.send("yes".into());
            let _ = tx.send("yes".into());
        })
    };
    let (outcome, ended) = {
        let mut runner = Runner::new(
            &mut model,
            &mut channel,
            &mut op,
            &mut recorder,
            opts,
            interrupt,
        );
        let run = async {
            let o = tokio::time::timeout(RUN_LIMIT, runner.run(None))
                .await
                .expect("the run hung")
                .unwrap();
            (o, Instant::now())
        };
        let (r, d) = tokio::join!(run, driver);
        d.unwrap();
        r
    };
    drop(recorder);
    let stop = lock(&stopped_at).unwrap();
    let run = Run {
        outcome,
        dir: dir.clone(),
        lines: trajectory(&dir),
    };
    (run, ended.saturating_duration_since(stop), screen.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_open_prompt_closes_it_and_a_late_yes_runs_nothing() {
    for (by, ending) in [
        (StopBy::CtrlC, Ending::Interrupted),
        (StopBy::Budget, Ending::TimeBudget),
    ] {
        // A safety-check approval.
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![computer_call_checked(
                "call_1",
                vec![click(10, 20)],
                two_checks(),
            )]),
            Reply::done("unused"),
        ]);
        let (run, after, shown) =
            stop_during_prompt(&rig, rig.opts(), "anything else denies: ", by).await;
        run.assert_ending(ending);
        assert!(
            after < Duration::from_millis(500),
            "{by:?}: ended {after:?} after the stop"
        );
        assert!(
            shown.contains("(the run stopped: this question is closed)"),
            "{shown}"
        );
        assert_eq!(rig.probe().act_bodies().len(), 0, "{by:?}");
        assert_eq!(rig.probe().input_events(), vec![], "{by:?}");
        assert_eq!(rig.mock.requests().len(), 1);
        let decision = &run.of_kind("safety_checks")[0];
        assert_eq!(
            decision["decision"],
            "denied: the run stopped during the question"
        );
        rig.assert_mock_clean();
        // An action confirmation (--confirm-actions).
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
            Reply::done("unused"),
        ]);
        let mut opts = rig.opts();
        opts.confirm_actions = true;
        let (run, after, _) = stop_during_prompt(&rig, opts, "[yes/no] ", by).await;
        run.assert_ending(ending);
        assert!(
            after < Duration::from_millis(500),
            "{by:?}: ended {after:?} after the stop"
        );
        assert_eq!(rig.probe().act_bodies().len(), 0, "{by:?}");
        assert_eq!(run.ledger("call_1"), ["pending", "failed"]);
        rig.assert_mock_clean();
        // An ask_user question.
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![ask_user("call_q", "Which name?")]),
            Reply::done("unused"),
        ]);
        let (run, after, _) =
            stop_during_prompt(&rig, rig.opts(), "Your answer (empty line = refuse): ", by).await;
        run.assert_ending(ending);
        assert!(
            after < Duration::from_millis(500),
            "{by:?}: ended {after:?} after the stop"
        );
        assert_eq!(
            rig.mock.requests().len(),
            1,
            "{by:?}: the late answer went out"
        );
        rig.assert_mock_clean();
    }
}

// ---------------------------------------------------------------------
// Diagnostics records; a failing writer changes nothing (docs/contract.md
// rule 14)
// ---------------------------------------------------------------------

/// A diagnostics writer that keeps records, fails, or panics.
#[derive(Clone)]
enum DiagWriter {
    Keep(Arc<Mutex<Vec<Diagnostic>>>),
    Fail,
    Panic,
}

impl Diagnostics for DiagWriter {
    fn record(&mut self, d: &Diagnostic) -> sandtop_runfolder::Result<()> {
        match self {
            DiagWriter::Keep(v) => {
                lock(v).push(d.clone());
                Ok(())
            }
            DiagWriter::Fail => Err(sandtop_runfolder::Error::Io {
                doing: "appending to diagnostics.jsonl".into(),
                source: std::io::Error::other("disk full"),
            }),
            DiagWriter::Panic => panic!("the diagnostics writer breaks"),
        }
    }
}

/// One scenario with a diagnostics writer: (outcome, ledger states of
/// call_1, daemon input events, operator questions).
async fn diag_scenario(
    writer: DiagWriter,
    approve: bool,
) -> (Ending, u32, Vec<String>, Vec<Event>, usize) {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call_checked(
            "call_1",
            vec![click(10, 20), type_text("SECRET-TYPED-TEXT")],
            two_checks(),
        )]),
        Reply::output(vec![computer_call(
            "call_2",
            vec![keypress(&["CTRL", "Z"])],
        )]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe()).checks(if approve {
        vec![Decision::Approve]
    } else {
        vec![deny("no")]
    });
    let dir = rig.new_run_dir();
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let mut recorder = start_recorder(&dir);
    let outcome = Runner::new(
        &mut model,
        &mut channel,
        &mut op,
        &mut recorder,
        rig.opts(),
        Interrupt::default(),
    )
    .with_diagnostics(Box::new(writer))
    .run(None)
    .await
    .unwrap();
    drop(recorder);
    let run = Run {
        outcome,
        dir: dir.clone(),
        lines: trajectory(&dir),
    };
    // The daemon's own timings stay with each completed call in the
    // trajectory, whatever the diagnostics writer did.
    for e in read_trajectory(&dir).unwrap() {
        if let Entry::Ledger {
            state: LedgerState::Done,
            detail,
            call_id,
            ..
        } = e
        {
            let total = detail["daemon_timings"]["total_ms"].as_f64();
            assert!(total.is_some_and(|t| t > 0.0), "{call_id}: {detail}");
        }
    }
    rig.assert_mock_clean();
    (
        run.outcome.ending,
        run.outcome.steps,
        run.ledger("call_1"),
        rig.probe().input_events(),
        op.asked.len(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_records_as_the_seed_lists_them_and_a_failing_writer_changes_nothing() {
    // What a working writer gets: one record per completed request and
    // per computer call, with the listed fields and nothing else.
    let kept: Arc<Mutex<Vec<Diagnostic>>> = Arc::default();
    let reference = diag_scenario(DiagWriter::Keep(kept.clone()), true).await;
    assert_eq!(reference.0, Ending::Finished);
    let records = lock(&kept).clone();
    let shape: Vec<(&str, &str, &str, &str)> = records
        .iter()
        .map(|d| {
            (
                d.api.as_str(),
                d.stage.as_str(),
                d.reason.as_str(),
                d.member.as_str(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("responses", "request", "completed", "responses.create"),
            ("computer", "action", "done", "click,type"),
            ("responses", "request", "completed", "responses.create"),
            ("computer", "action", "done", "keypress"),
            ("responses", "request", "completed", "responses.create"),
        ]
    );
    for d in &records {
        assert!(d.duration_ms > 0.0, "{d:?}");
        assert!(!d.call_id.is_empty());
        if d.api == "responses" {
            assert!(d.usage.is_some() && d.daemon_timings.is_none(), "{d:?}");
        } else {
            assert!(d.usage.is_none(), "{d:?}");
            assert!(d.daemon_timings.unwrap().total_ms > 0.0, "{d:?}");
        }
    }
    assert_eq!(records[1].call_id, "call_1");
    // Never arguments, page text, errors or images.
    let text = serde_json::to_string(&records).unwrap();
    assert!(
        !text.contains("SECRET-TYPED-TEXT") && !text.contains("data:image"),
        "{text}"
    );
    // A writer that fails, or panics, changes nothing: the same ending,
    // steps, ledger and input, for an approved run and a denied one.
    for writer in [DiagWriter::Fail, DiagWriter::Panic] {
        assert_eq!(diag_scenario(writer.clone(), true).await, reference);
        let denied = diag_scenario(writer, false).await;
        assert_eq!(denied.0, Ending::Denied);
        assert_eq!(denied.3, vec![], "a failing writer let an action run");
        assert_eq!(
            denied,
            diag_scenario(DiagWriter::Keep(Arc::default()), false).await
        );
    }
}
