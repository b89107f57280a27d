//! `host-cli report`: the report of a real run folder.
//!
//! The run folder is made by the real loop: the real `sandtopd` router
//! and desktop task over the fake driver (a 1280x800 screen) on a Unix
//! socket, the real channel and recorder, and a scripted model (offline,
//! with usage numbers) whose script exercises every kind of action, a
//! safety check, reasoning summaries and hostile text.

#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use host_cli::agent::approve::{ActionRequest, CheckRequest, DecidedBy, Decision, Operator};
use host_cli::agent::model::{CallStats, Creating, Model};
use host_cli::agent::record::{Entry, Recorder, Started};
use host_cli::agent::runner::{
    ContextBudget, Ending, Interrupt, OnActionError, RunOptions, Runner,
};
use host_cli::agent::wire::{self, ToolShape};
use host_cli::channel::{Channel, UnixConnector};
use host_cli::commands::report::ReportArgs;
use host_cli::report::{self, Journal};
use host_cli::secret::Secret;
use sandtop_protocol::{ScreenshotOptions, Size};
use sandtop_testkit::mock_responses::{
    click, computer_call, computer_call_checked, double_click, drag, keypress, message, move_to,
    reasoning, safety_check, scroll, type_text, wait,
};
use sandtopd::testing::FakeDaemon;
use serde_json::{Value, json};

const SCREEN: Size = Size::new(1280, 800);
const HOSTILE: &str = "<script>alert(1)</script>";

/// The real daemon over the fake driver, on a Unix socket.
struct Daemon(FakeDaemon);

impl Daemon {
    async fn start(screen: Size) -> Daemon {
        Daemon(FakeDaemon::start(screen).await)
    }

    async fn channel(&self) -> Channel {
        Channel::open(
            Box::new(UnixConnector(self.0.socket().to_path_buf())),
            Secret::new(self.0.token().to_string()),
        )
        .await
        .unwrap()
    }
}

/// Plays a fixed script, with usage figures (n-th request: 1000 n input
/// tokens, 10 n output tokens) so the totals can be checked.
struct Script {
    outputs: VecDeque<Vec<Value>>,
    n: u64,
}

impl Model for Script {
    fn describe(&self) -> String {
        "the report test's script".into()
    }

    fn create<'a>(&'a mut self, _body: &'a Value) -> Creating<'a> {
        Box::pin(async move {
            self.n += 1;
            let n = self.n;
            let output = self.outputs.pop_front().unwrap_or_default();
            let resp = json!({
                "id": format!("resp_{n}"),
                "status": "completed",
                "output": output,
                "usage": {"input_tokens": 1000 * n, "output_tokens": 10 * n, "total_tokens": 1010 * n},
            });
            Ok((
                wire::parse_response(&resp).unwrap(),
                CallStats {
                    attempts: 1,
                    duration: Duration::from_millis(3),
                },
            ))
        })
    }
}

/// Approves every safety check.
struct Approver;

impl Operator for Approver {
    fn approve_checks(&mut self, _req: &CheckRequest<'_>) -> Decision {
        Decision::Approve
    }
    fn confirm_action(&mut self, _req: &ActionRequest<'_>) -> Decision {
        Decision::Approve
    }
    fn ask(&mut self, _question: &str) -> Option<String> {
        None
    }
    fn take_guidance(&mut self) -> Vec<String> {
        Vec::new()
    }
    fn decided_by(&self) -> Option<DecidedBy> {
        Some(DecidedBy::Terminal)
    }
}

/// The actions of step `i` (1-based), cycling through every kind.
fn actions_of(i: usize) -> Vec<Value> {
    let x = 100 + (i as i64 * 53) % 1000;
    match i % 7 {
        0 => vec![click(640, 400)],
        1 => vec![double_click(x, 300)],
        2 => vec![drag(&[(x, 200), (x + 80, 260), (x + 160, 240)], &[])],
        3 => vec![scroll(x, 500, 0, 300)],
        4 => vec![click(x, 120), type_text("\"><img src=x onerror=alert(1)>")],
        5 => vec![keypress(&["CTRL", "S"]), wait()],
        _ => vec![move_to(x, 700)],
    }
}

/// Runs the loop for `steps` requests (the last one a final answer) and
/// returns the run folder.
async fn real_run(root: &Path, steps: usize) -> PathBuf {
    let daemon = Daemon::start(SCREEN).await;
    let mut outputs = VecDeque::new();
    for i in 1..steps {
        let call_id = format!("call_{i}");
        let call = if i == 2 {
            computer_call_checked(
                &call_id,
                actions_of(i),
                vec![safety_check("sc_1", "malicious_instructions", HOSTILE)],
            )
        } else {
            computer_call(&call_id, actions_of(i))
        };
        let mut out = vec![call];
        if i == 1 {
            out.insert(0, reasoning("I should look at the form first."));
            out.insert(1, message(&format!("Working on it {HOSTILE} & \"quotes\"")));
        }
        outputs.push_back(out);
    }
    outputs.push_back(vec![message(&format!("Done. {HOSTILE}"))]);
    let mut model = Script { outputs, n: 0 };
    let mut channel = daemon.channel().await;
    let dir = root.join("run");
    let mut recorder = Recorder::create(&dir).unwrap();
    recorder
        .write(&Entry::RunStarted(Box::new(Started {
            task: format!("Fill in the form {HOSTILE}"),
            session: "report-test".into(),
            model: Some("scripted".into()),
            ..Started::default()
        })))
        .unwrap();
    let opts = RunOptions {
        task: "Fill in the form".into(),
        model: "scripted".into(),
        shape: ToolShape::Computer,
        computer: true,
        browser: None,
        instructions: None,
        max_steps: steps as u32 + 5,
        max_duration: Some(Duration::from_secs(120)),
        store: false,
        stream: false,
        screenshot: ScreenshotOptions::default(),
        confirm_actions: false,
        ask_user: false,
        sign_in: false,
        initial_screenshot: true,
        context: ContextBudget::default(),
        compaction: host_cli::agent::runner::Compaction::Off,
        on_action_error: OnActionError::Stop,
    };
    let mut op = Approver;
    let mut runner = Runner::new(
        &mut model,
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        Interrupt::default(),
    );
    let outcome = tokio::time::timeout(Duration::from_secs(120), runner.run(None))
        .await
        .expect("the run hung")
        .unwrap();
    assert_eq!(outcome.ending, Ending::Finished, "{}", outcome.message);
    assert_eq!(outcome.steps as usize, steps);
    dir
}

/// Every `src="..."` and `href="..."` value of the page.
fn urls(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["src=\"", "href=\"", "src='", "href='", "xlink:href"] {
        for (i, _) in html.match_indices(attr) {
            let rest = &html[i + attr.len()..];
            out.push(rest.chars().take(40).collect());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twenty_step_run_is_one_safe_page_under_3_mb() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = real_run(tmp.path(), 20).await;
    let html = report::render(&dir, Journal::None).unwrap();

    for n in 1..=20 {
        assert!(
            html.contains(&format!("id=\"step-{n}\"")),
            "step {n} is missing"
        );
    }
    assert!(!html.contains("id=\"step-21\""));
    // The screenshot the model saw, for each of the 20 requests.
    assert_eq!(
        html.matches("<img src=\"data:image/jpeg;base64,").count(),
        20
    );
    assert!(!html.contains("data:image/png"));
    for u in urls(&html) {
        assert!(
            u.starts_with("data:image/jpeg;base64,"),
            "a URL that loads: {u}"
        );
    }
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(html.contains(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
    ));
    // Step 7 clicked (640, 400) on a 1280x800 screenshot: drawn there, in
    // the screenshot's own coordinates.
    let step7 = section(&html, 7);
    assert!(step7.contains("viewBox=\"0 0 1280 800\""), "{step7}");
    assert!(step7.contains("data-action=\"click\" cx=\"640\" cy=\"400\""));
    assert!(step7.contains("click left at (640, 400)"));
    assert!(section(&html, 2).contains("points=\"206,200 286,260 366,240\""));
    assert!(section(&html, 3).contains("dx=0 dy=300"));
    // Hostile text from the model, in the task and in a safety check:
    // only ever escaped.
    assert!(!html.contains(HOSTILE));
    assert!(!html.to_lowercase().contains("<script"));
    assert!(!html.contains("<img src=x"));
    assert!(
        html.contains(
            "Working on it &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;"
        )
    );
    assert!(html.contains("I should look at the form first."));
    // The approval: what was asked and the answer.
    let step2 = section(&html, 2);
    assert!(
        step2.contains("malicious_instructions: &lt;script&gt;"),
        "{step2}"
    );
    assert!(step2.contains("<span class=\"ok\">approved</span>"));
    // Who answered, from the trajectory's `by`.
    assert!(
        step2.contains("answered by the operator on the terminal"),
        "{step2}"
    );
    // Usage: request n spent 1010 n tokens; 20 requests, 212100 in all.
    assert!(html.contains("<td class=\"n\">20200</td>"));
    assert!(html.contains(
        "<td class=\"n\">210000</td><td class=\"n\">2100</td><td class=\"n\">212100</td>"
    ));
    assert!(html.contains("Daemon: capture"));
    assert!(html.contains("<span class=\"ok\">finished</span>: Done. &lt;script&gt;"));
    assert!(html.contains("No network journal"));

    let size = html.len();
    eprintln!(
        "report: 20 steps, 1280x800 screenshots (the fake driver's busy XOR pattern) shown at 1024x640: {size} bytes ({:.2} MB)",
        size as f64 / 1e6
    );
    assert!(size < 3_000_000, "the report is {size} bytes");

    // The command: RUN/report.html, 0600, never overwritten without --force.
    let args = |force| ReportArgs {
        run: dir.clone(),
        output: None,
        force,
        journal: Some(tmp.path().join("no-such-journal.jsonl")),
        replay: None,
    };
    let not_a_folder = host_cli::commands::report::run(ReportArgs {
        replay: Some(tmp.path().join("no-such-replay")),
        ..args(false)
    })
    .unwrap_err();
    assert!(
        format!("{not_a_folder:#}").contains("--replay"),
        "{not_a_folder:#}"
    );
    host_cli::commands::report::run(args(false)).unwrap();
    let out = dir.join("report.html");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    std::fs::write(&out, "old").unwrap();
    let e = format!(
        "{:#}",
        host_cli::commands::report::run(args(false)).unwrap_err()
    );
    assert!(e.contains("exists") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    host_cli::commands::report::run(args(true)).unwrap();
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .starts_with("<!DOCTYPE html>")
    );
}

/// The HTML of step `n`'s section.
fn section(html: &str, n: u32) -> &str {
    let start = html.find(&format!("id=\"step-{n}\"")).unwrap();
    let end = html[start..].find("</section>").unwrap();
    &html[start..start + end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_decisions_come_from_the_run_or_its_session_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = real_run(tmp.path(), 3).await;
    // The session's journal, as the egress proxy writes it: one entry in
    // the run's time, one long before it.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let journal = tmp.path().join("egress.jsonl");
    let lines = [
        json!({"kind": "egress", "origin": "https://example.test:443", "via": "connect",
               "decision": "denied", "reason": HOSTILE, "addresses": [], "t_unix_ms": now}),
        json!({"kind": "egress", "origin": "old.test:443", "via": "connect",
               "decision": "allowed", "reason": "policy", "addresses": [], "t_unix_ms": 1000}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&journal, text).unwrap();
    // An entry written now stretches the run's time past `now`.
    let mut rec = Recorder::open(&dir).unwrap();
    rec.write(&Entry::RunResumed { steps_done: 3 }).unwrap();
    drop(rec);
    let html = report::render(&dir, Journal::File(&journal)).unwrap();
    assert!(html.contains("the session&#39;s journal"), "source named");
    assert!(html.contains("example.test:443"));
    assert!(
        !html.contains("old.test"),
        "an entry outside the run's time"
    );
    assert!(html.contains("<span class=\"bad\">denied</span>"));
    assert!(!html.contains(HOSTILE));
    // An origin as the URL text of a table cell is data, never a link.
    assert!(urls(&html).iter().all(|u| u.starts_with("data:")));

    // Decisions the run recorded itself come first.
    let mut rec = Recorder::open(&dir).unwrap();
    rec.write(&Entry::OriginQuestion {
        origin: "api.example.test:443".into(),
        answer: "allow_session".into(),
    })
    .unwrap();
    rec.write(&Entry::Egress {
        entry: json!({"kind": "egress", "origin": "api.example.test:443", "via": "connect",
                      "decision": "allowed", "reason": "the operator allowed it", "addresses": []}),
    })
    .unwrap();
    drop(rec);
    let html = report::render(&dir, Journal::File(&journal)).unwrap();
    assert!(html.contains("the run&#39;s trajectory"));
    assert!(html.contains("allow_session"));
    assert!(html.contains("<span class=\"ok\">allowed</span>"));
    assert!(!html.contains("https://example.test:443"));
    let html = report::render(&dir, Journal::None).unwrap();
    assert!(html.contains("api.example.test:443"));
}

#[test]
fn what_is_not_a_run_folder_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let e = format!("{:#}", report::render(&missing, Journal::None).unwrap_err());
    assert!(e.contains("no run folder at"), "{e}");
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let e = format!("{:#}", report::render(&file, Journal::None).unwrap_err());
    assert!(e.contains("is not a folder"), "{e}");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = format!("{:#}", report::render(&empty, Journal::None).unwrap_err());
    assert!(e.contains("no trajectory.jsonl"), "{e}");
    std::fs::write(empty.join("trajectory.jsonl"), "").unwrap();
    let e = format!("{:#}", report::render(&empty, Journal::None).unwrap_err());
    assert!(e.contains("no run_started entry"), "{e}");
    std::fs::write(empty.join("trajectory.jsonl"), "{\"kind\":\"nonsense\"}\n").unwrap();
    let e = format!("{:#}", report::render(&empty, Journal::None).unwrap_err());
    assert!(e.contains("line 1"), "{e}");
    // The command says it too, and writes nothing.
    let e = host_cli::commands::report::run(ReportArgs {
        run: missing.clone(),
        output: None,
        force: false,
        journal: None,
        replay: None,
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("no run folder"));
    assert!(!missing.exists());
}

#[test]
fn a_screenshot_file_the_trajectory_points_outside_the_folder_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut rec = Recorder::create(&dir).unwrap();
    rec.write(&Entry::RunStarted(Box::new(Started {
        task: "t".into(),
        session: "s".into(),
        ..Started::default()
    })))
    .unwrap();
    rec.write(&Entry::Observation {
        step: 0,
        call_id: None,
        file: "../../etc/passwd".into(),
        scale_map: sandtop_protocol::ScaleMap::identity(Size::new(10, 10)),
    })
    .unwrap();
    rec.write(&Entry::RequestInput {
        step: 1,
        items: vec![],
        previous_response_id: None,
        images: 1,
        bytes: 10,
    })
    .unwrap();
    drop(rec);
    let html = report::render(&dir, Journal::None).unwrap();
    assert!(html.contains("is not a file of the run folder"), "{html}");
    assert!(html.contains("not finished"));
}

/// A 10x10 PNG of one colour.
fn png_of(rgb: [u8; 3]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, 10, 10);
    e.set_color(png::ColorType::Rgb);
    e.set_depth(png::BitDepth::Eight);
    let mut w = e.write_header().unwrap();
    w.write_image_data(&rgb.repeat(100)).unwrap();
    w.finish().unwrap();
    out
}

/// A run folder whose one observation is `step-000.png`.
fn run_with_one_screenshot(dir: &Path) {
    let mut rec = Recorder::create(dir).unwrap();
    rec.write(&Entry::RunStarted(Box::new(Started {
        task: "t".into(),
        session: "s".into(),
        ..Started::default()
    })))
    .unwrap();
    rec.write(&Entry::Observation {
        step: 0,
        call_id: None,
        file: "step-000.png".into(),
        scale_map: sandtop_protocol::ScaleMap::identity(Size::new(10, 10)),
    })
    .unwrap();
    rec.write(&Entry::RequestInput {
        step: 1,
        items: vec![],
        previous_response_id: None,
        images: 1,
        bytes: 10,
    })
    .unwrap();
}

// docs/security.md L16: a run folder from elsewhere cannot pull in any image
// the operator can read through a symbolic link.
#[test]
fn a_symlinked_screenshot_or_trajectory_in_a_run_folder_is_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    // The operator's own picture, outside the run folder.
    let private = tmp.path().join("private.png");
    std::fs::write(&private, png_of([200, 30, 40])).unwrap();
    // Control: the same picture as the run folder's own file is shown.
    let own = tmp.path().join("own");
    run_with_one_screenshot(&own);
    std::fs::copy(&private, own.join("step-000.png")).unwrap();
    let html = report::render(&own, Journal::None).unwrap();
    assert_eq!(html.matches("data:image/jpeg;base64,").count(), 1, "{html}");
    // A link named like the screenshot: noted, not read.
    let linked = tmp.path().join("linked");
    run_with_one_screenshot(&linked);
    std::os::unix::fs::symlink(&private, linked.join("step-000.png")).unwrap();
    let html = report::render(&linked, Journal::None).unwrap();
    assert!(!html.contains("data:image"), "{html}");
    assert!(
        html.contains(
            "The screenshot could not be shown: step-000.png is a symbolic link: not read"
        ),
        "{html}"
    );
    // A diagnostics file that is a link: a warning, nothing of it read.
    std::fs::write(tmp.path().join("diag.jsonl"), "{}\n").unwrap();
    std::os::unix::fs::symlink(
        tmp.path().join("diag.jsonl"),
        linked.join("diagnostics.jsonl"),
    )
    .unwrap();
    let html = report::render(&linked, Journal::None).unwrap();
    assert!(
        html.contains("diagnostics.jsonl is a symbolic link: not read"),
        "{html}"
    );
    // A trajectory that is a link: no report at all, and it says why.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(
        own.join("trajectory.jsonl"),
        elsewhere.join("trajectory.jsonl"),
    )
    .unwrap();
    let e = format!(
        "{:#}",
        report::render(&elsewhere, Journal::None).unwrap_err()
    );
    assert!(
        e.contains("trajectory.jsonl is a symbolic link: not read"),
        "{e}"
    );
}
