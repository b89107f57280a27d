//! L6: the API key and the daemon token never leak

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_the_key_and_the_token_stay_out_of_trajectories_errors_debug_and_requests() {
    for stream in [false, true] {
        let rig = Rig::new().await;
        rig.mock.push_all([
            Reply::output(vec![
                reasoning("Log in first."),
                computer_call_checked("call_1", vec![click(10, 20)], two_checks()),
            ]),
            Reply::output(vec![ask_user("call_ask", "Which account?")]),
            Reply::output(vec![computer_call(
                "call_2",
                vec![type_text("user@example.com")],
            )]),
            Reply::done("done"),
        ]);
        let mut model = rig.model(stream, fast_retry());
        let mut channel = rig.daemon.channel().await;
        let mut op = ScriptedOp::new(rig.probe())
            .checks([Decision::Approve])
            .answers([Some("the work one")]);
        let mut opts = rig.opts();
        opts.stream = stream;
        let run = drive(
            &rig.new_run_dir(),
            &mut model,
            &mut channel,
            opts,
            &mut op,
            Interrupt::default(),
        )
        .await;
        run.assert_ending(Ending::Finished);
        let token = rig.daemon.token.clone();
        let key = rig.key.clone();
        let texts = [
            ("the run folder", rig.trajectory_text()),
            (
                "the outcome",
                format!("{:?} {}", run.outcome, run.outcome.message),
            ),
            ("the model", format!("{model:?}")),
            ("the channel", format!("{channel:?}")),
            (
                "the secrets",
                format!(
                    "{:?} {:?}",
                    Secret::new(key.clone()),
                    Secret::new(token.clone())
                ),
            ),
        ];
        for (what, text) in texts {
            assert!(!text.contains(&key), "the API key is in {what}");
            assert!(!text.contains(&token), "the daemon token is in {what}");
        }
        assert!(format!("{channel:?}").contains("redacted"));
        rig.assert_mock_clean();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_refusals_that_echo_the_key_are_redacted() {
    for status in [400u16, 401, 403] {
        let rig = Rig::new().await;
        rig.mock.push(Reply::status(
            status,
            &format!("Incorrect API key provided: {}.", rig.key),
        ));
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(rig.opts(), &mut op).await;
        run.assert_ending(Ending::Failed);
        assert!(run.outcome.message.contains("Incorrect API key provided"));
        assert!(
            !run.outcome.message.contains(&rig.key),
            "{status}: {}",
            run.outcome.message
        );
        assert!(!rig.trajectory_text().contains(&rig.key), "{status}");
        rig.assert_mock_clean();
    }
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuf {
    type Writer = LogBuf;
    fn make_writer(&'a self) -> LogBuf {
        self.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_retried_errors_that_echo_the_key_are_redacted_from_errors_and_logs() {
    let logs = LogBuf::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    type EchoCase = (&'static str, bool, fn(&str) -> Reply);
    let cases: Vec<EchoCase> = vec![
        ("500", false, |key| {
            Reply::status(500, &format!("upstream rejected key {key}"))
        }),
        ("429", false, |key| Reply::Status {
            status: 429,
            message: format!("rate limit for key {key}"),
            retry_after: Some("0".into()),
        }),
        ("stream error event", true, |key| {
            Reply::StreamError(format!("stream failed for key {key}"))
        }),
    ];
    for (name, stream, reply) in cases {
        let rig = Rig::new().await;
        for _ in 0..fast_retry().max_attempts {
            rig.mock.push(reply(&rig.key));
        }
        let mut opts = rig.opts();
        opts.stream = stream;
        let mut op = ScriptedOp::new(rig.probe());
        let run = rig.run(opts, &mut op).await;
        run.assert_ending(Ending::Failed);
        assert!(
            !run.outcome.message.contains(&rig.key),
            "{name}: {}",
            run.outcome.message
        );
        assert!(
            !rig.trajectory_text().contains(&rig.key),
            "{name}: trajectory"
        );
        let logged = String::from_utf8_lossy(&lock(&logs.0)).into_owned();
        assert!(
            logged.contains("retrying"),
            "{name}: the log capture saw nothing: {logged}"
        );
        assert!(!logged.contains(&rig.key), "{name}: logs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_daemon_errors_that_echo_the_token_are_redacted() {
    let rig = Rig::new().await;
    let daemon = GarbageDaemon::start(Garbage::EchoesTheToken).await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::done("done"),
    ]);
    let mut model = rig.model(false, fast_retry());
    let mut channel = daemon.channel().await;
    let mut op = ScriptedOp::new(rig.probe());
    let run = drive(
        &rig.new_run_dir(),
        &mut model,
        &mut channel,
        reporting(rig.opts()),
        &mut op,
        Interrupt::default(),
    )
    .await;
    run.assert_ending(Ending::Finished);
    assert!(!run.outcome.message.contains(&daemon.token));
    assert!(
        !rig.trajectory_text().contains(&daemon.token),
        "the daemon token is in the trajectory"
    );
    assert_eq!(
        rig.mock.occurrences(&daemon.token),
        Vec::<String>::new(),
        "the daemon token reached the model API"
    );
}
