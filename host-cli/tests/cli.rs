//! The CLI tier: `host-cli` as an operator runs it, against guests of the
//! local backend whose `sandtopd` is this test binary in disguise.
//!
//! 1. When started as `<dir>/sandtopd serve --socket S --token-file T ...`
//!    (a symlink to this binary, given to host-cli as `SANDTOPD_BIN`), it
//!    is a fake daemon: the real `sandtopd` router and desktop task over
//!    the fake driver, on the session's socket. `SANDTOP_FAKE_SLOW_MS`
//!    slows every input primitive down; with `SANDTOP_FAKE_SILENT` set it
//!    never answers an action batch or a screenshot (the rest answers);
//!    with `SANDTOP_FAKE_BROWSER` it has a browser whose scripts never
//!    finish (`cli/scripts.rs`). On SIGTERM it drains and closes
//!    like the real one, then lingers `SANDTOP_FAKE_LINGER_MS` (where the
//!    real one stops its display); it logs `fake: the desktop is busy`
//!    when an input job starts. The local backend starts it, checks it,
//!    and stops it like the real one (same argv shape).
//! 2. The model is the testkit's [`MockResponses`], reached through
//!    `OPENAI_BASE_URL`; every request it saw must be valid.
//! 3. Each case runs host-cli as a child process with its own state
//!    directory, without a controlling terminal (`setsid -w`), and checks
//!    its exit status, stdout, stderr and what it left behind.
//!
//! Its own harness (`harness = false`): the binary must accept the
//! daemon's command line, which libtest would refuse. `cargo test -p
//! host-cli --test cli [FILTER]`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use host_cli::agent::record::{Entry, LedgerState, read_trajectory};
use host_cli::agent::runner::Ending;
use sandtop_protocol::Size;
use sandtop_testkit::mock_responses::{MockResponses, Reply, computer_call, drag};
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

#[path = "cli/scripts.rs"]
mod scripts;

// ---------------------------------------------------------------------
// The fake daemon
// ---------------------------------------------------------------------

fn arg_after(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The X display the fake daemon says it drives.
const FAKE_X_DISPLAY: &str = ":77";

/// The line the fake daemon logs when an input job takes the desktop.
const FAKE_BUSY: &str = "fake: the desktop is busy";

/// `sandtopd serve ...` with the fake driver; runs until SIGTERM (then
/// drains) or killed.
fn fake_daemon(args: &[String]) -> ExitCode {
    use sandtopd::api::router;
    use sandtopd::api::server::{bind_unix, serve_draining};
    use sandtopd::testing::{FakeDesktop, Setup};
    let socket = PathBuf::from(arg_after(args, "--socket").unwrap());
    let token_file = PathBuf::from(arg_after(args, "--token-file").unwrap());
    let screen = arg_after(args, "--screen")
        .and_then(|s| Size::parse(&s).ok())
        .unwrap_or(Size::new(320, 200));
    let slow = std::env::var("SANDTOP_FAKE_SLOW_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let linger = std::env::var("SANDTOP_FAKE_LINGER_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let FakeDesktop { api, .. } = FakeDesktop::start_with(
            screen,
            Setup {
                token: Some(sandtop_client::Token::load_or_create(&token_file).unwrap()),
                driver: Box::new(move |fake| fake.state().lock().unwrap().slow = slow),
                api: Box::new(|api| {
                    let api = api.with_x_display(sandtopd::supervise::DisplayName::new(
                        FAKE_X_DISPLAY.into(),
                    ));
                    if std::env::var_os("SANDTOP_FAKE_BROWSER").is_some() {
                        api.with_browser(sandtopd::browser::BrowserService::with_backend(
                            scripts::fake_browser(),
                        ))
                    } else {
                        api
                    }
                }),
            },
        );
        let gate = Arc::clone(&api.desktop.gate);
        tokio::spawn(async move {
            let mut busy = false;
            loop {
                let now = gate.available_permits() == 0;
                if now && !busy {
                    eprintln!("{FAKE_BUSY}");
                }
                busy = now;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        let listener = bind_unix(&socket).await.unwrap();
        let lifecycle = Arc::clone(&api.lifecycle);
        let mut app = router(api);
        if std::env::var_os("SANDTOP_FAKE_SILENT").is_some() {
            app = app.layer(axum::middleware::from_fn(silent));
        }
        serve_draining(app, vec![listener], lifecycle, async move {
            term.recv().await;
        })
        .await;
        if let Some(d) = linger {
            tokio::time::sleep(d).await;
        }
    });
    ExitCode::SUCCESS
}

/// `SANDTOP_FAKE_SILENT`: an action batch or a screenshot is read and
/// never answered (a daemon that hangs).
async fn silent(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use sandtop_protocol::paths;
    if [paths::ACTIONS, paths::SCREENSHOT].contains(&req.uri().path()) {
        eprintln!("fake: silent on {}", req.uri().path());
        std::future::pending::<()>().await;
    }
    next.run(req).await
}

// ---------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------

type Case = fn(&Env);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        return fake_daemon(&args);
    }
    let cases: Vec<(&str, Case)> = vec![
        (
            "a_run_ending_with_an_unknown_outcome_keeps_its_guest_and_resumes_from_the_cli",
            a_run_ending_with_an_unknown_outcome_keeps_its_guest_and_resumes_from_the_cli,
        ),
        (
            "while_a_run_holds_a_session_act_screenshot_and_stop_refuse_it_and_force_ends_the_run",
            while_a_run_holds_a_session_act_screenshot_and_stop_refuse_it_and_force_ends_the_run,
        ),
        (
            "guest_ls_shows_a_daemon_finishing_a_call_after_a_stop_as_draining_then_closed",
            guest_ls_shows_a_daemon_finishing_a_call_after_a_stop_as_draining_then_closed,
        ),
        (
            "progress_lines_go_to_stderr_and_events_json_to_stdout_with_the_summary_last",
            progress_lines_go_to_stderr_and_events_json_to_stdout_with_the_summary_last,
        ),
        (
            "a_reader_that_has_gone_ends_the_output_without_a_panic",
            a_reader_that_has_gone_ends_the_output_without_a_panic,
        ),
        (
            "run_without_a_key_refuses_a_task_and_the_options_the_exercise_would_drop",
            run_without_a_key_refuses_a_task_and_the_options_the_exercise_would_drop,
        ),
        (
            "guest_ls_names_a_local_sessions_screen_and_x_display",
            guest_ls_names_a_local_sessions_screen_and_x_display,
        ),
        (
            "act_and_screenshot_give_up_on_a_silent_daemon_at_their_deadline",
            act_and_screenshot_give_up_on_a_silent_daemon_at_their_deadline,
        ),
        (
            "run_script_needs_a_fresh_guest_and_a_script_in_doubt_discards_it",
            scripts::run_script_needs_a_fresh_guest_and_a_script_in_doubt_discards_it,
        ),
    ];
    let rest: Vec<&String> = args.iter().skip(1).collect();
    if rest.iter().any(|a| *a == "--list") {
        for (n, _) in &cases {
            println!("{n}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&&String> = rest.iter().filter(|a| !a.starts_with('-')).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, case) in cases {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        let t = Instant::now();
        let env = rt.block_on(Env::new());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&env)));
        env.cleanup();
        match r {
            Ok(()) => println!("test {name} ... ok ({:.1} s)", t.elapsed().as_secs_f64()),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(name);
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One case's world: a state directory, the disguised daemon, the mock.
struct Env {
    state: tempfile::TempDir,
    bin: tempfile::TempDir,
    mock: MockResponses,
    key: String,
}

impl Env {
    async fn new() -> Env {
        let key = "sk-test-cli-0123456789abcdef".to_string();
        let bin = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            std::env::current_exe().unwrap(),
            bin.path().join("sandtopd"),
        )
        .unwrap();
        Env {
            state: tempfile::tempdir().unwrap(),
            bin,
            mock: MockResponses::start(&key).await,
            key,
        }
    }

    /// host-cli with this world's state, daemon and model, no terminal.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("setsid");
        c.arg("-w")
            .arg(HOST_CLI)
            .args(args)
            .env("SANDTOP_STATE_DIR", self.state.path())
            .env("SANDTOPD_BIN", self.bin.path().join("sandtopd"))
            .env("OPENAI_API_KEY", &self.key)
            .env("OPENAI_BASE_URL", self.mock.base_url())
            .env_remove("SANDTOP_FAKE_SLOW_MS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        self.output(self.cmd(args))
    }

    fn output(&self, mut c: Command) -> Out {
        let out = c.output().unwrap();
        Out(out)
    }

    /// `guest ls --json`.
    fn sessions(&self) -> Vec<Value> {
        let out = self.run(&["guest", "ls", "--json"]);
        assert_eq!(out.code(), 0, "{out:?}");
        serde_json::from_str(&out.stdout()).unwrap()
    }

    /// The mock saw only requests the real API would accept.
    #[track_caller]
    fn assert_mock_clean(&self) {
        assert_eq!(self.mock.validation_errors(), Vec::<String>::new());
        assert_eq!(self.mock.problems(), Vec::<String>::new());
    }

    /// Stops every guest a case left running.
    fn cleanup(&self) {
        let _ = self.run(&["guest", "stop", "--all"]);
    }
}

struct Out(Output);

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.0.status.code(),
            self.stdout(),
            self.stderr()
        )
    }
}

impl Out {
    fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).to_string()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).to_string()
    }
    /// The JSON summary on stdout.
    fn summary(&self) -> Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

fn pid_alive(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// A drag long enough to outlast a short time budget on a slowed fake.
/// `host-cli guest ls | head -0`: stdout is a pipe nobody reads (its
/// read end closed before host-cli writes, so every write fails with
/// EPIPE). The command still ends normally: no panic, exit 0.
fn a_reader_that_has_gone_ends_the_output_without_a_panic(env: &Env) {
    for args in [&["guest", "ls"][..], &["guest", "ls", "--json"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut c = env.cmd(args);
        c.stdout(writer);
        let out = env.output(c);
        assert_eq!(out.code(), 0, "{args:?}: {out:?}");
        assert!(!out.stderr().contains("panicked"), "{args:?}: {out:?}");
    }
}

fn slow_drag() -> Value {
    let path: Vec<(i64, i64)> = (0..40).map(|i| (10 + i * 5, 100)).collect();
    computer_call("call_slow", vec![drag(&path, &[])])
}

// ---------------------------------------------------------------------
// Resumable unknowns (docs/contract.md rule 18)
// ---------------------------------------------------------------------

fn a_run_ending_with_an_unknown_outcome_keeps_its_guest_and_resumes_from_the_cli(env: &Env) {
    env.mock.push(Reply::output(vec![slow_drag()]));
    // The time budget runs out while the drag runs: its outcome is unknown.
    let mut c = env.cmd(&[
        "run",
        "Drag the slider.",
        "--backend",
        "local",
        "--screen",
        "320x200",
        "--max-time",
        "2s",
    ]);
    c.env("SANDTOP_FAKE_SLOW_MS", "150");
    let first = env.output(c);
    assert_eq!(first.code(), 4, "{first:?}");
    let summary = first.summary();
    assert_eq!(summary["ending"], "time_budget", "{first:?}");
    let run = summary["run_folder"].as_str().unwrap().to_string();
    // The guest it booted stays, and the operator is told how to resume.
    let sessions = env.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let name = sessions[0]["name"].as_str().unwrap().to_string();
    let pid = sessions[0]["pid"].as_i64().unwrap();
    assert_eq!(sessions[0]["state"], "running");
    let err = first.stderr();
    assert!(
        err.contains(&format!("keeping session {name}, which this run booted")),
        "{err}"
    );
    assert!(
        err.contains(&format!("host-cli run --resume {run} --reconcile done")),
        "{err}"
    );
    assert!(
        err.contains(&format!("host-cli run --resume {run} --reconcile not-done")),
        "{err}"
    );
    // The operator looks at the screen, as told (once the daemon has
    // finished cancelling the drag).
    let shot = env.state.path().join("now.png");
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let out = env.run(&[
            "screenshot",
            "--session",
            &name,
            "-o",
            shot.to_str().unwrap(),
        ]);
        if out.code() == 0 {
            break;
        }
        assert!(
            out.stderr().contains("busy") && Instant::now() < end,
            "{out:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Resuming without saying what happened is refused, and keeps it too.
    let refused = env.run(&["run", "--resume", &run]);
    assert_eq!(refused.code(), 1, "{refused:?}");
    assert!(
        refused
            .stderr()
            .contains("--reconcile done or --reconcile not-done"),
        "{refused:?}"
    );
    assert_eq!(env.sessions().len(), 1);
    assert_eq!(
        env.mock.requests().len(),
        1,
        "a request went out unreconciled"
    );
    // With the operator's answer it goes on where it stopped, from the CLI.
    env.mock.push(Reply::done("The slider is at the end."));
    let resumed = env.run(&["run", "--resume", &run, "--reconcile", "done"]);
    assert_eq!(resumed.code(), 0, "{resumed:?}");
    let s = resumed.summary();
    assert_eq!(s["ending"], "finished");
    assert_eq!(s["steps"], 2);
    let reqs = env.mock.requests();
    assert_eq!(reqs.len(), 2);
    let outputs = reqs[1].input_of_type("computer_call_output");
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(outputs[0]["call_id"], "call_slow");
    let told = reqs[1].input();
    let note = told.last().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains("call_slow ran"), "{note}");
    // The ledger says what the operator decided.
    let entries = read_trajectory(Path::new(&run)).unwrap();
    let reconciled = entries.iter().any(|e| {
        matches!(e, Entry::Ledger { call_id, state: LedgerState::Done, detail, step: 1 }
            if call_id == "call_slow" && detail["reconciled_by_operator"] == "done")
    });
    assert!(reconciled, "{entries:#?}");
    // Settled: the guest the first part booted is removed now.
    assert_eq!(env.sessions(), Vec::<Value>::new());
    assert!(!pid_alive(pid), "its daemon still runs");
    env.assert_mock_clean();
}

// ---------------------------------------------------------------------
// Progress while it runs, from the command line (docs/contract.md rule 14a)
// ---------------------------------------------------------------------

fn progress_lines_go_to_stderr_and_events_json_to_stdout_with_the_summary_last(env: &Env) {
    let args = [
        "run",
        "Drag the slider.",
        "--backend",
        "local",
        "--screen",
        "320x200",
    ];
    // By default: one line per step on stderr, the plain summary on stdout.
    env.mock.push(Reply::output(vec![computer_call(
        "call_a",
        vec![drag(&[(10, 10), (20, 20)], &[])],
    )]));
    env.mock.push(Reply::done("Done."));
    let plain = env.run(&args);
    assert_eq!(plain.code(), 0, "{plain:?}");
    let err = plain.stderr();
    assert!(
        err.contains("host-cli: step 1/") && err.contains("call_a drag"),
        "{err}"
    );
    assert!(err.contains("host-cli: step 2/"), "{err}");
    assert_eq!(plain.summary()["ending"], "finished");

    // --quiet --events json: no step line; stdout is one JSON object per
    // line, the step events first, the summary last.
    env.mock.push(Reply::output(vec![computer_call(
        "call_b",
        vec![drag(&[(10, 10), (30, 30)], &[])],
    )]));
    env.mock.push(Reply::done("Done again."));
    let mut quiet: Vec<&str> = args.to_vec();
    quiet.extend(["--quiet", "--events", "json"]);
    let json = env.run(&quiet);
    assert_eq!(json.code(), 0, "{json:?}");
    assert!(!json.stderr().contains("host-cli: step"), "{json:?}");
    let events: Vec<Value> = json
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("(none)"))
        .collect();
    assert_eq!(kinds.last(), Some(&"summary"), "{kinds:?}");
    assert!(kinds.contains(&"step"), "{kinds:?}");
    let summary = events.last().unwrap();
    assert_eq!(summary["ending"], "finished");
    assert_eq!(summary["steps"], 2);
    env.assert_mock_clean();
}

// ---------------------------------------------------------------------
// One owner per session (docs/contract.md rule 6)
// ---------------------------------------------------------------------

fn while_a_run_holds_a_session_act_screenshot_and_stop_refuse_it_and_force_ends_the_run(env: &Env) {
    let start = env.run(&[
        "guest",
        "start",
        "--backend",
        "local",
        "--screen",
        "320x200",
    ]);
    assert_eq!(start.code(), 0, "{start:?}");
    let name = start.stdout().trim().to_string();
    // A run that holds the session: the model takes its time.
    env.mock
        .push(Reply::done("too late").after(Duration::from_secs(60)));
    let run = env
        .cmd(&["run", "Wait for me.", "--session", &name])
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while env.mock.requests().is_empty() {
        assert!(Instant::now() < end, "the run never asked the model");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = run.id();
    // act and screenshot refuse the session, naming the run; nothing of
    // theirs reaches the guest (the screenshot file is never created).
    let act = env.run(&["act", "--session", &name, r#"{"type":"move","x":5,"y":5}"#]);
    assert_eq!(act.code(), 1, "{act:?}");
    let says = format!("session {name} is in use by a run (host-cli pid {pid})");
    assert!(act.stderr().contains(&says), "{act:?}");
    assert!(act.stderr().contains("`host-cli act`"), "{act:?}");
    let file = env.state.path().join("shot.png");
    let shot = env.run(&[
        "screenshot",
        "--session",
        &name,
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(shot.code(), 1, "{shot:?}");
    assert!(shot.stderr().contains(&says), "{shot:?}");
    assert!(!file.exists());
    // guest stop refuses it too, and leaves it running.
    let stop = env.run(&["guest", "stop", &name]);
    assert_eq!(stop.code(), 1, "{stop:?}");
    assert!(
        stop.stderr().contains(&format!(
            "session {name} is in use by a run (host-cli pid {pid}): not stopped"
        )) && stop.stderr().contains("--force"),
        "{stop:?}"
    );
    assert_eq!(env.sessions().len(), 1);
    // --force ends the run cleanly first (interrupted, its trajectory
    // complete), then stops the session.
    let forced = env.run(&["guest", "stop", "--force", &name]);
    assert_eq!(forced.code(), 0, "{forced:?}");
    assert!(
        forced.stdout().contains(&format!("stopped {name}")),
        "{forced:?}"
    );
    let run = run.wait_with_output().unwrap();
    let run = Out(run);
    assert_eq!(run.code(), 130, "{run:?}");
    let summary = run.summary();
    assert_eq!(summary["ending"], "interrupted");
    let entries = read_trajectory(Path::new(summary["run_folder"].as_str().unwrap())).unwrap();
    assert!(
        matches!(entries.last(), Some(Entry::RunFinished(f)) if f.ending == Ending::Interrupted),
        "{entries:#?}"
    );
    assert_eq!(env.sessions(), Vec::<Value>::new());
    env.assert_mock_clean();
}

// ---------------------------------------------------------------------
// Draining, then closed (docs/contract.md rule 7)
// ---------------------------------------------------------------------

fn guest_ls_shows_a_daemon_finishing_a_call_after_a_stop_as_draining_then_closed(env: &Env) {
    let mut start = env.cmd(&[
        "guest",
        "start",
        "--backend",
        "local",
        "--screen",
        "320x200",
    ]);
    start
        .env("SANDTOP_FAKE_SLOW_MS", "50")
        .env("SANDTOP_FAKE_LINGER_MS", "3000");
    let start = env.output(start);
    assert_eq!(start.code(), 0, "{start:?}");
    let name = start.stdout().trim().to_string();
    let store = host_cli::session::Store::at(env.state.path().to_path_buf()).unwrap();
    let dir = store.get(&name).unwrap();
    let sessions = env.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["state"], "running", "{sessions:?}");
    let pid = sessions[0]["pid"].as_i64().unwrap();
    let table = env.run(&["guest", "ls"]);
    assert!(table.stdout().contains(" running "), "{table:?}");

    // A call in flight: 60 characters at 50 ms each.
    let text = "abcdefghij".repeat(6);
    let action = serde_json::json!({"type": "type", "text": text}).to_string();
    let act = env
        .cmd(&["act", "--session", &name, &action])
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(dir.log_path())
        .unwrap_or_default()
        .contains(FAKE_BUSY)
    {
        assert!(Instant::now() < end, "the call never reached the daemon");
        std::thread::sleep(Duration::from_millis(10));
    }

    // The stop: SIGTERM to the daemon, as `guest stop` or `docker stop`
    // sends it.
    let daemon = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(daemon, rustix::process::Signal::TERM).unwrap();

    // `guest ls` until the guest is gone: running (until the signal
    // lands), draining while the call runs, closed, exited.
    let mut seen: Vec<String> = Vec::new();
    let mut table_while_draining = None;
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < end, "still not exited: {seen:?}");
        let sessions = env.sessions();
        let state = sessions[0]["state"].as_str().unwrap().to_string();
        if state == "draining" && table_while_draining.is_none() {
            table_while_draining = Some(env.run(&["guest", "ls"]));
        }
        if seen.last() != Some(&state) {
            seen.push(state.clone());
        }
        if state == "exited" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let after_running: Vec<&str> = seen
        .iter()
        .map(String::as_str)
        .skip_while(|s| *s == "running")
        .collect();
    assert_eq!(
        after_running,
        ["draining", "closed", "exited"],
        "states seen: {seen:?}"
    );
    let table = table_while_draining.unwrap();
    assert!(
        table.stdout().contains(" draining "),
        "the table shows draining: {table:?}"
    );
    // The call that was in flight finished with its result.
    let act = Out(act.wait_with_output().unwrap());
    assert_eq!(act.code(), 0, "{act:?}");
    let done = act.summary();
    assert_eq!(
        (&done["ok"], &done["executed"]),
        (&serde_json::json!(true), &serde_json::json!(1))
    );
    assert!(!pid_alive(pid));
}

// ---------------------------------------------------------------------
// One vocabulary on the command line (each unit and option spelt one way)
// ---------------------------------------------------------------------

/// Without OPENAI_API_KEY, `run` is the offline exercise: a task, and any
/// option the exercise would not use, is refused by name before a guest
/// boots (nothing is left behind); nothing is silently dropped.
fn run_without_a_key_refuses_a_task_and_the_options_the_exercise_would_drop(env: &Env) {
    let no_key = |args: &[&str]| {
        let mut c = env.cmd(args);
        c.env_remove("OPENAI_API_KEY");
        env.output(c)
    };
    let out = no_key(&["run", "book a table for two"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(out.stderr().contains("a task needs a model"), "{out:?}");
    for (args, named) in [
        (&["run", "--max-steps", "5"][..], &["--max-steps"][..]),
        (
            &["run", "--network", "allow:https://a.test"],
            &["--network"],
        ),
        (
            &["run", "--size", "640x400", "--model", "m"],
            &["--model", "--size"],
        ),
        (&["run", "--screen", "1024x640"], &["--screen"]),
        (&["run", "--display", "1024x640"], &["--screen"]),
        (
            &["run", "--max-time", "5m", "--stream"],
            &["--stream", "--max-time"],
        ),
        (
            &["run", "--tool", "computer_use_preview"],
            &["--tool computer-use-preview"],
        ),
    ] {
        let out = no_key(args);
        assert_eq!(out.code(), 1, "{args:?}: {out:?}");
        let err = out.stderr();
        assert!(
            err.contains("the offline exercise, which does not use"),
            "{args:?}: {err}"
        );
        for n in named {
            assert!(err.contains(n), "{args:?} should name {n}: {err}");
        }
        assert!(
            !err.contains("booting"),
            "{args:?}: a guest was booted: {err}"
        );
    }
    // --reconcile beside a task (clap lets it pass: --resume conflicts
    // with a task) is refused, with a key too, before anything starts.
    let out = env.run(&["run", "--reconcile", "done", "a task"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(out.stderr().contains("give --resume RUN"), "{out:?}");
    // A bad value is still clap's usage error (exit 2), key or not.
    let out = no_key(&["run", "--max-steps", "0"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr().contains("--max-steps"), "{out:?}");
    assert_eq!(env.sessions(), Vec::<Value>::new(), "nothing was started");
}

/// `guest start --screen` (and the old `--display`) sets the screen;
/// `guest ls --json` says it as `screen`, and for a local session the X
/// display the daemon drives and the session's X cookie file.
fn guest_ls_names_a_local_sessions_screen_and_x_display(env: &Env) {
    let out = env.run(&[
        "guest",
        "start",
        "--backend",
        "local",
        "--name",
        "v1",
        "--screen",
        "640x400",
    ]);
    assert_eq!(out.code(), 0, "{out:?}");
    let out = env.run(&[
        "guest",
        "start",
        "--backend",
        "local",
        "--name",
        "v2",
        "--display",
        "320x240",
    ]);
    assert_eq!(out.code(), 0, "{out:?}");
    let rows = env.sessions();
    let row = |n: &str| rows.iter().find(|r| r["name"] == n).cloned().unwrap();
    assert_eq!(row("v1")["screen"], "640x400");
    assert_eq!(row("v2")["screen"], "320x240");
    assert_eq!(row("v1")["x_display"], FAKE_X_DISPLAY);
    let cookie = row("v1")["xauthority"].as_str().unwrap().to_string();
    assert!(
        cookie.starts_with(&env.state.path().display().to_string())
            && cookie.ends_with("/xauthority"),
        "{cookie}"
    );
    let table = env.run(&["guest", "ls"]).stdout();
    assert!(
        table.contains("SCREEN") && table.contains("X DISPLAY"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("v1") && l.contains("640x400") && l.ends_with(FAKE_X_DISPLAY)),
        "{table}"
    );
}

// ---------------------------------------------------------------------
// Act and screenshot have a deadline (docs/security.md L15)
// ---------------------------------------------------------------------

/// Runs `c` to its end, or kills it and fails after `cap` (a command with
/// no deadline of its own would hang the suite instead).
fn output_within(mut c: Command, cap: Duration, what: &str) -> Out {
    let mut child = c.spawn().unwrap();
    let end = Instant::now() + cap;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} was still waiting after {cap:?}: it has no deadline");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Out(child.wait_with_output().unwrap())
}

fn act_and_screenshot_give_up_on_a_silent_daemon_at_their_deadline(env: &Env) {
    // The deadlines are stated in --help, with their defaults.
    let help = env.run(&["act", "--help"]);
    assert!(
        help.stdout().contains("--timeout <TIMEOUT>")
            && help.stdout().contains("[default: 60s]")
            && help.stdout().contains("outcome is unknown"),
        "{help:?}"
    );
    let help = env.run(&["screenshot", "--help"]);
    assert!(
        help.stdout().contains("--timeout <TIMEOUT>") && help.stdout().contains("[default: 30s]"),
        "{help:?}"
    );
    let mut start = env.cmd(&[
        "guest",
        "start",
        "--backend",
        "local",
        "--screen",
        "320x200",
    ]);
    start.env("SANDTOP_FAKE_SILENT", "1");
    let start = env.output(start);
    assert_eq!(start.code(), 0, "{start:?}");
    let name = start.stdout().trim().to_string();
    let cap = Duration::from_secs(30);

    let act = output_within(
        env.cmd(&[
            "act",
            "--session",
            &name,
            "--timeout",
            "1s",
            r#"{"type":"move","x":5,"y":5}"#,
        ]),
        cap,
        "act",
    );
    assert_eq!(act.code(), 1, "{act:?}");
    let summary = act.summary();
    assert_eq!(summary["ok"], false, "{act:?}");
    assert_eq!(summary["outcome"], "unknown", "{act:?}");
    assert_eq!(summary["error"]["code"], "timeout", "{act:?}");
    assert!(
        act.stderr()
            .contains("the daemon did not answer within 1s (--timeout): the outcome is unknown"),
        "{act:?}"
    );

    let file = env.state.path().join("silent.png");
    let shot = output_within(
        env.cmd(&[
            "screenshot",
            "--session",
            &name,
            "--timeout",
            "1s",
            "-o",
            file.to_str().unwrap(),
        ]),
        cap,
        "screenshot",
    );
    assert_eq!(shot.code(), 1, "{shot:?}");
    assert!(
        shot.stderr()
            .contains("the daemon did not answer within 1s (--timeout); no screenshot was written"),
        "{shot:?}"
    );
    assert!(!file.exists());
    // Both requests reached the daemon: the deadline, not a refusal, ended them.
    let logs = env.run(&["guest", "logs", &name]);
    assert!(
        logs.stdout().contains("fake: silent on /v1/actions")
            && logs.stdout().contains("fake: silent on /v1/screenshot"),
        "{logs:?}"
    );
    // A timeout below the floor is refused with its range.
    let bad = env.run(&["act", "--session", &name, "--timeout", "0s", "{}"]);
    assert_eq!(bad.code(), 2, "{bad:?}");
    assert!(bad.stderr().contains("between"), "{bad:?}");
}
