//! Sign-in out of band in the loop (docs/contract.md rule
//! 47): `request_sign_in` against the fake browser, the mock Responses
//! API and the real daemon API. A canary secret is searched for in
//! everything the model and the run folder got.

use host_cli::agent::approve::{Approvals, SignInPrompt, SignedIn};
use host_cli::agent::sign_in::{Answer, Credentials};
use sandtop_protocol::sign_in::Secret;

use super::*;

const CANARY_PW: &str = "canary-Pw-7f3a9c";
const CANARY_MAIL: &str = "canary.ada@example.test";

fn sign_in_call(call_id: &str, origin: Value, g: u32) -> Value {
    function_call(
        call_id,
        "request_sign_in",
        &json!({
            "credential_origin": origin,
            "reason": "The account page needs a sign-in.",
            "fields": [
                {"id": "email", "label": "Email", "type": "email", "required": true, "target": format!("g{g}-email")},
                {"id": "password", "label": "Password", "type": "password", "required": true, "target": format!("g{g}-password")},
            ],
            "options": null,
        }),
    )
}

fn sign_in_opts(rig: &Rig) -> RunOptions {
    RunOptions {
        sign_in: true,
        ..browser_opts(rig)
    }
}

fn credentials(dir: &Path, origin: &str) -> Credentials {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join("credentials.json");
    std::fs::write(
        &p,
        json!({origin: {"email": CANARY_MAIL, "password": CANARY_PW}}).to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    Credentials::open(&p).unwrap()
}

/// The model's output for `call_id`, parsed.
#[track_caller]
fn result_of(req: &Recorded, call_id: &str) -> Value {
    function_output(req, call_id)
}

/// An operator that answers sign-ins from a queue, counts the questions
/// and may change the page while it is asked.
struct SignInOp {
    browser: FakeBrowser,
    answers: VecDeque<Answer>,
    asked: usize,
    during: Option<During>,
    /// What the operator was told after each fill (one line each).
    told: Vec<String>,
}

impl SignInOp {
    /// Answers from `answers`, in order; then declines.
    fn new(browser: &FakeBrowser, answers: impl IntoIterator<Item = Answer>) -> SignInOp {
        SignInOp {
            browser: browser.clone(),
            answers: answers.into_iter().collect(),
            asked: 0,
            during: None,
            told: Vec::new(),
        }
    }
}

impl Operator for SignInOp {
    fn approve_checks(&mut self, _req: &CheckRequest<'_>) -> Decision {
        deny("no checks expected")
    }
    fn confirm_action(&mut self, _req: &ActionRequest<'_>) -> Decision {
        deny("no computer actions expected")
    }
    fn confirm_browser(&mut self, _req: &BrowserRequest<'_>) -> Decision {
        Decision::Approve
    }
    fn sign_in(&mut self, req: &SignInPrompt<'_>) -> Answer {
        self.asked += 1;
        let _ = req;
        if let Some(f) = self.during.as_mut() {
            f(&self.browser);
        }
        self.answers.pop_front().unwrap_or(Answer::Decline {
            why: "no answer left".into(),
        })
    }
    fn signed_in(&mut self, told: &SignedIn<'_>) {
        self.told.push(told.line());
    }
    fn ask(&mut self, _question: &str) -> Option<String> {
        None
    }
    fn take_guidance(&mut self) -> Vec<String> {
        Vec::new()
    }
}

fn submit() -> Answer {
    Answer::Submit {
        option: None,
        values: vec![
            ("email".into(), Secret::new(CANARY_MAIL.into())),
            ("password".into(), Secret::new(CANARY_PW.into())),
        ],
        source: "terminal",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_values_from_the_credentials_file_reach_the_page_and_nothing_else() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    rig.mock.push_all([
        Reply::output(vec![sign_in_call("s1", json!(ORIGIN), 1)]),
        Reply::done("Signed in."),
    ]);
    let secrets = tempfile::tempdir().unwrap();
    let mut op = Approvals {
        credentials: Some(credentials(secrets.path(), ORIGIN)),
        ..Approvals::default()
    };
    let run = rig.run(sign_in_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    // The page got exactly the values, after the daemon checked the
    // targets and before anything else.
    assert_eq!(
        fake.signed_in(),
        [
            ("email".to_string(), CANARY_MAIL.to_string()),
            ("password".to_string(), CANARY_PW.to_string())
        ]
    );
    let calls = fake.calls();
    let check = calls.iter().position(|c| c == "sign_in_check").unwrap();
    let fill = calls.iter().position(|c| c == "sign_in_fill").unwrap();
    assert!(check < fill, "{calls:?}");
    // The model: the tool, then only the status.
    let reqs = rig.mock.requests();
    let tool = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "request_sign_in")
        .expect("request_sign_in is offered")
        .clone();
    assert_eq!(tool["strict"], true);
    assert_eq!(result_of(&reqs[1], "s1"), json!({"status": "submitted"}));
    // The canary is nowhere but the page.
    for canary in [CANARY_PW, CANARY_MAIL] {
        assert_eq!(rig.mock.occurrences(canary), Vec::<String>::new());
        assert!(
            !rig.trajectory_text().contains(canary),
            "{canary} is in the run folder"
        );
    }
    let entries = run.of_kind("sign_in");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["status"], "submitted");
    assert_eq!(entries[0]["source"], "file");
    assert_eq!(entries[0]["request"]["origin"], ORIGIN);
    assert_eq!(entries[0]["request"]["fields"][1]["type"], "password");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_a_request_is_refused_before_anyone_is_asked_and_says_why() {
    let cases: Vec<(Value, u32, &str)> = vec![
        (Value::Null, 1, "`credential_origin` is missing"),
        (
            json!("127.0.0.1:8080"),
            1,
            "`credential_origin` is not an origin",
        ),
        (
            json!("http://127.0.0.1:9090"),
            1,
            "outside the operator's URL policy",
        ),
        // A stale target: the daemon's check refuses it.
        (json!(ORIGIN), 7, "a target is stale"),
    ];
    for (origin, g, want) in cases {
        let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
        let rig = browser_rig(&fake).await;
        rig.mock.push_all([
            Reply::output(vec![sign_in_call("s2", origin.clone(), g)]),
            Reply::done("ok"),
        ]);
        let mut op = SignInOp::new(&fake, [submit()]);
        let run = rig.run(sign_in_opts(&rig), &mut op).await;
        run.assert_ending(Ending::Finished);
        let out = result_of(&rig.mock.requests()[1], "s2");
        let e = out["error"].as_str().unwrap_or_default();
        assert!(e.contains(want), "{origin}: {out}");
        assert_eq!(op.asked, 0, "{origin}: the operator was asked");
        assert!(fake.signed_in().is_empty());
        assert_eq!(run.of_kind("sign_in")[0]["status"], "refused");
        rig.assert_mock_clean();
    }
    // Not the active tab's origin (the URL policy allows both).
    let fake = FakeBrowser::new("http://127.0.0.1:9090/login");
    let rig = browser_rig(&fake).await;
    rig.mock.push_all([
        Reply::output(vec![sign_in_call("s2", json!(ORIGIN), 1)]),
        Reply::done("ok"),
    ]);
    let mut op = SignInOp::new(&fake, [submit()]);
    let opts = RunOptions {
        browser: Some(
            Toolset::new(
                None,
                None,
                Some(UrlPolicy::parse(&format!("{ORIGIN},http://127.0.0.1:9090")).unwrap()),
                &[],
            )
            .unwrap(),
        ),
        ..sign_in_opts(&rig)
    };
    rig.run(opts, &mut op).await.assert_ending(Ending::Finished);
    let out = result_of(&rig.mock.requests()[1], "s2");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("is not the origin of the active tab (http://127.0.0.1:9090)"),
        "{out}"
    );
    assert_eq!(op.asked, 0);
    assert!(fake.signed_in().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_declining_cancels_the_request_not_the_task() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    rig.mock.push_all([
        Reply::output(vec![sign_in_call("s3", json!(ORIGIN), 1)]),
        // The task goes on after the decline.
        Reply::output(vec![call(
            "r1",
            "read_page",
            json!({"tab_id": null, "filter": "interactive"}),
        )]),
        Reply::done("I could not sign in."),
    ]);
    // No terminal and no credentials file: declined.
    let mut op = Approvals::default();
    let run = rig.run(sign_in_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 3, "the run went on");
    assert_eq!(result_of(&reqs[1], "s3"), json!({"status": "declined"}));
    assert!(fake.signed_in().is_empty());
    let e = &run.of_kind("sign_in")[0];
    assert_eq!(e["status"], "declined");
    assert!(e["why"].as_str().unwrap().contains("no terminal"), "{e}");
    // Nothing is retried: one question, one answer.
    assert_eq!(
        fake.calls()
            .iter()
            .filter(|c| *c == "sign_in_check")
            .count(),
        1
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_a_page_that_changes_while_the_operator_answers_cancels_with_nothing_typed() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    rig.mock.push_all([
        Reply::output(vec![sign_in_call("s4", json!(ORIGIN), 1)]),
        Reply::done("ok"),
    ]);
    let mut op = SignInOp {
        during: Some(Box::new(FakeBrowser::navigate_itself)),
        ..SignInOp::new(&fake, [submit()])
    };
    let run = rig.run(sign_in_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(op.asked, 1);
    assert_eq!(
        result_of(&rig.mock.requests()[1], "s4"),
        json!({"status": "cancelled"})
    );
    assert!(fake.signed_in().is_empty(), "nothing typed");
    let e = &run.of_kind("sign_in")[0];
    assert_eq!(e["status"], "cancelled");
    for canary in [CANARY_PW, CANARY_MAIL] {
        assert_eq!(rig.mock.occurrences(canary), Vec::<String>::new());
        assert!(!rig.trajectory_text().contains(canary));
    }
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_a_password_goes_only_into_a_password_input_and_an_answer_is_checked() {
    // The model binds the password to the email input: refused by the
    // daemon's check, before the question.
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    rig.mock.push_all([
        Reply::output(vec![function_call(
            "s5",
            "request_sign_in",
            &json!({
                "credential_origin": ORIGIN,
                "reason": null,
                "fields": [
                    {"id": "password", "label": "Password", "type": "password", "required": true, "target": "g1-email"},
                ],
                "options": null,
            }),
        )]),
        // An answer missing a required value is declined, not typed.
        Reply::output(vec![sign_in_call("s6", json!(ORIGIN), 1)]),
        Reply::done("ok"),
    ]);
    let mut op = SignInOp {
        browser: fake.clone(),
        answers: [Answer::Submit {
            option: None,
            values: vec![("email".into(), Secret::new(CANARY_MAIL.into()))],
            source: "terminal",
        }]
        .into(),
        asked: 0,
        during: None,
        told: Vec::new(),
    };
    let run = rig.run(sign_in_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let out = result_of(&reqs[1], "s5");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("not an input for its field's type"),
        "{out}"
    );
    assert_eq!(result_of(&reqs[2], "s6"), json!({"status": "declined"}));
    assert_eq!(op.asked, 1);
    assert!(fake.signed_in().is_empty());
    assert!(!rig.trajectory_text().contains(CANARY_MAIL));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_without_sign_in_the_tool_is_not_offered_and_a_call_is_unknown() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    rig.mock
        .push(Reply::output(vec![sign_in_call("s7", json!(ORIGIN), 1)]));
    let mut op = SignInOp::new(&fake, [submit()]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    // An unknown function stops the run before anything ran (rule 13b).
    run.assert_ending(Ending::ActionFailed);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        !reqs[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "request_sign_in")
    );
    let refused = run.of_kind("refused");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("`request_sign_in` is not a function this run offers"),
        "{refused:?}"
    );
    assert_eq!(op.asked, 0);
    assert!(fake.signed_in().is_empty());
    rig.assert_mock_clean();
}

/// The terminal attack (docs/security.md L14): a model opens a terminal,
/// starts `cat > FILE` in it, and asks for a sign-in. No value is ever
/// typed at the desktop's keyboard focus: a null target is refused, a run
/// without the browser tools refuses every request, and with targets the
/// values go only to the inputs the browser driver bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_a_sign_in_never_types_at_the_keyboard_focus() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    let terminal = "cat > /tmp/leak\n";
    let null_target = |call_id: &str| {
        function_call(
            call_id,
            "request_sign_in",
            &json!({
                "credential_origin": ORIGIN,
                "reason": null,
                "fields": [{"id": "password", "label": "Password", "type": "password", "required": true, "target": null}],
                "options": null,
            }),
        )
    };
    rig.mock.push_all([
        // Open a terminal and start `cat > FILE` in it: the focus is there.
        Reply::output(vec![computer_call(
            "c1",
            vec![keypress(&["SUPER", "T"]), type_text(terminal)],
        )]),
        Reply::output(vec![null_target("s8")]),
        Reply::output(vec![sign_in_call("s9", json!(ORIGIN), 1)]),
        Reply::done("ok"),
    ]);
    let mut op = SignInOp::new(&fake, [submit(), submit()]);
    let opts = RunOptions {
        computer: true,
        ..sign_in_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    // The tool's schema takes no null target.
    let tool = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "request_sign_in")
        .expect("request_sign_in is offered with the browser tools")
        .clone();
    assert_eq!(
        tool["parameters"]["properties"]["fields"]["items"]["properties"]["target"]["type"],
        "string"
    );
    let refused = result_of(&reqs[2], "s8")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        refused.contains("`fields[0].target` is null") && refused.contains("keyboard focus"),
        "{refused}"
    );
    assert_eq!(result_of(&reqs[3], "s9"), json!({"status": "submitted"}));
    // Asked once (for the request with targets); told once, with the origin
    // and the fields, never a value.
    assert_eq!(op.asked, 1);
    assert_eq!(op.told.len(), 1, "{:?}", op.told);
    assert!(op.told[0].contains(ORIGIN), "{:?}", op.told);
    assert!(op.told[0].contains("Email (email)"), "{:?}", op.told);
    assert!(op.told[0].contains("Password (password)"), "{:?}", op.told);
    assert!(!op.told[0].contains(CANARY_PW) && !op.told[0].contains(CANARY_MAIL));
    // The values went to the bound inputs, and not one character of them
    // to the desktop: the only typed text is the model's own.
    assert_eq!(
        fake.signed_in(),
        [
            ("email".to_string(), CANARY_MAIL.to_string()),
            ("password".to_string(), CANARY_PW.to_string())
        ]
    );
    let typed: String = rig
        .probe()
        .input_events()
        .iter()
        .filter_map(|e| match e {
            Event::Char(c) => Some(*c),
            _ => None,
        })
        .collect();
    assert_eq!(typed, terminal.replace('\n', ""), "typed at the focus");
    for canary in [CANARY_PW, CANARY_MAIL] {
        assert_eq!(rig.mock.occurrences(canary), Vec::<String>::new());
        assert!(!rig.trajectory_text().contains(canary));
    }
    rig.assert_mock_clean();

    // The computer tool alone: every request is refused, nobody is asked,
    // nothing is typed.
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    rig.mock.push_all([
        Reply::output(vec![sign_in_call("s10", json!(ORIGIN), 1)]),
        Reply::done("ok"),
    ]);
    let mut op = SignInOp::new(&fake, [submit()]);
    let opts = RunOptions {
        sign_in: true,
        ..rig.opts()
    };
    let events_before = rig.probe().input_events().len();
    rig.run(opts, &mut op).await.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let refused = result_of(&reqs[1], "s10")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(refused.contains("no browser tools"), "{refused}");
    assert_eq!(op.asked, 0);
    assert!(op.told.is_empty());
    assert!(fake.signed_in().is_empty());
    assert_eq!(rig.probe().input_events().len(), events_before);
    rig.assert_mock_clean();
}

/// Contract rule 41a: once sign-in values went to a page, `run_script` is
/// refused for the rest of the run, before anyone is asked; a script
/// before the sign-in ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_after_a_sign_in_run_script_is_refused_unasked() {
    use host_cli::agent::browser::SCRIPT_AFTER_SIGN_IN;
    let fake = FakeBrowser::new(&format!("{ORIGIN}/login"));
    let rig = browser_rig(&fake).await;
    let script = |id: &str| {
        call(
            id,
            "run_script",
            json!({"tab_id": null, "source": "document.title", "timeout_ms": 1000}),
        )
    };
    rig.mock.push_all([
        Reply::output(vec![script("r1")]),
        Reply::output(vec![sign_in_call("s1", json!(ORIGIN), 1)]),
        Reply::output(vec![script("r2")]),
        Reply::done("Done."),
    ]);
    let mut op = SignInOp::new(&fake, [submit()]);
    let add = ["run_script".to_string()];
    let opts = RunOptions {
        browser: Some(
            Toolset::new(
                None,
                Some(&add),
                Some(UrlPolicy::parse(ORIGIN).unwrap()),
                &[],
            )
            .unwrap(),
        ),
        ..sign_in_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(payload(&reqs[1], "r1").0["ok"], true);
    assert_eq!(result_of(&reqs[2], "s1"), json!({"status": "submitted"}));
    let (r2, _) = payload(&reqs[3], "r2");
    assert_eq!(r2["ok"], false, "{r2}");
    assert_eq!(r2["error"], SCRIPT_AFTER_SIGN_IN);
    let scripts: Vec<String> = fake
        .effects()
        .into_iter()
        .filter(|e| e.starts_with("run_script"))
        .collect();
    assert_eq!(scripts, ["run_script document.title"], "only r1 ran");
    assert!(run.ledger("r2").is_empty(), "r2 never reached the ledger");
    rig.assert_mock_clean();
}
