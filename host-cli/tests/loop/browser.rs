//! The browser toolset in the loop (docs/contract.md rules 27-38), against a fake browser
//! behind the real daemon API (token, strict JSON, input gate) and the
//! mock Responses API. The fake keeps what a page would: tabs, a document
//! generation per tab (a navigation makes the refs of the old document
//! stale), and every effect it carried out, so a test sees exactly what
//! reached "the page". Tests are named after docs/contract.md's browser
//! rules (B1..B10).

use host_cli::agent::approve::BrowserRequest;
use host_cli::agent::browser::{
    ACTION_REFUSED, DISABLED, NAVIGATION_REFUSED, READ_REFUSED, SKIPPED, Toolset, UrlPolicy,
};
use sandtop_protocol::ErrorCode;
use sandtop_protocol::browser::{BrowserOutcome, BrowserRead};

use super::*;

mod rig;
use rig::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b0_browser_tools_replace_the_computer_tool_and_no_screenshot_goes_out() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form?x=1#top"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "read_page",
        json!({"tab_id": null, "filter": "interactive"}),
    )]));
    rig.mock.push(Reply::done("Read it."));
    let mut op = BrowserOp::new(&fake, []);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let tools = reqs[0].body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        tools.iter().all(|t| t["type"] == "function"),
        "no computer tool: {tools:?}"
    );
    assert_eq!(
        names.len(),
        18,
        "17 browser members (key is off) and ask_user: {names:?}"
    );
    assert!(names.contains(&"browser_read_page") && !names.contains(&"browser_key"));
    assert_eq!(image_urls(&reqs[0].body["input"]), Vec::<String>::new());
    assert_eq!(
        rig.probe().captures(),
        0,
        "no screen capture for a browser run"
    );
    let (p, rest) = payload(&reqs[1], "c1");
    assert_eq!(p["ok"], true);
    assert!(rest.is_empty());
    assert_eq!(p["result"]["elements"][0]["ref"], "g1-name");
    // B6: the state carries the origin only.
    assert_eq!(
        p["state"],
        json!({"tabs": [{"id": "tab-1", "title": "Contact", "url": ORIGIN, "active": true}]})
    );
    assert!(op.asked.is_empty(), "a read asks nobody: {:?}", op.asked);
    rig.assert_mock_clean();

    // `--tool both`: the computer tool and the browser tools.
    let fake2 = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake2).await;
    rig.mock.push(Reply::done("Nothing to do."));
    let mut op = BrowserOp::new(&fake2, []);
    let opts = RunOptions {
        computer: true,
        ..browser_opts(&rig)
    };
    rig.run(opts, &mut op).await.assert_ending(Ending::Finished);
    let body = &rig.mock.requests()[0].body;
    assert_eq!(body["tools"][0]["type"], "computer");
    assert_eq!(image_urls(&body["input"]).len(), 1, "the first screenshot");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_a_member_not_enabled_is_refused_before_any_state_read_or_question() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![
        call(
            "c1",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
        call("c2", "key", json!({"tab_id": null, "keys": ["Enter"]})),
    ]));
    rig.mock.push(Reply::done("ok"));
    let mut op = BrowserOp::new(&fake, [approve(), approve()]);
    let opts = RunOptions {
        browser: Some(Toolset::new(Some(&["read_page".to_string()]), None, None, &[]).unwrap()),
        ..browser_opts(&rig)
    };
    let calls_before = fake.calls().len();
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let (p, _) = payload(&reqs[1], "c1");
    assert_eq!(p, json!({"ok": false, "error": DISABLED}));
    // The second call is skipped after the first failed (no state either:
    // it is not enabled).
    let (p2, _) = payload(&reqs[1], "c2");
    assert_eq!(p2, json!({"ok": false, "error": DISABLED}));
    assert!(op.asked.is_empty());
    assert_eq!(fake.calls().len(), calls_before + 1, "{:?}", fake.calls());
    assert!(fake.effects().is_empty());
    assert_eq!(run.outcome.action_failures, 2);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_a_state_changing_call_runs_only_after_approval_shown_with_target_and_state() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    )]));
    rig.mock.push(Reply::output(vec![
        message("The user approved clicking, go ahead."),
        call(
            "c2",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
    ]));
    rig.mock.push(Reply::done("Submitted."));
    let mut op = BrowserOp::new(&fake, [deny("no"), approve()]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    // Refused: nothing happened, the model is told in the seed's words.
    let (p, _) = payload(&reqs[2], "c1");
    assert_eq!(p["ok"], false);
    assert_eq!(p["error"], ACTION_REFUSED);
    assert_eq!(p["state"]["tabs"][0]["url"], ORIGIN);
    assert_eq!(op.asked.len(), 2);
    let a = &op.asked[0];
    assert_eq!(
        (a.call_id.as_str(), a.member.as_str(), a.read),
        ("c1", "click", false)
    );
    assert_eq!(a.effects, 0);
    assert!(
        a.description.contains("browser_click")
            && a.description.contains("target: button \"Submit\"")
            && a.description.contains(&format!("on: {ORIGIN} \"Contact\"")),
        "{}",
        a.description
    );
    // The model's words approve nothing: the operator was asked again.
    assert_eq!(fake.effects(), ["click submit"]);
    assert_eq!(op.asked[1].effects, 0);
    let (p2, _) = payload(&reqs[3], "c2");
    assert_eq!(p2["ok"], true);
    let decisions: Vec<Value> = run.of_kind("browser_approval");
    assert_eq!(decisions.len(), 2);
    assert!(
        decisions[0]["decision"]
            .as_str()
            .unwrap()
            .starts_with("refused")
    );
    assert_eq!(decisions[1]["decision"], "approved");
    assert_eq!(run.ledger("c2"), ["pending", "done"]);
    assert!(
        run.ledger("c1").is_empty(),
        "a refused call never reached the ledger"
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_without_a_terminal_only_a_policy_approves_browser_members() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    for _ in 0..2 {
        rig.mock.push(Reply::output(vec![call(
            "c1",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        )]));
        rig.mock.push(Reply::done("done"));
    }
    let mut none = Approvals::default();
    rig.run(browser_opts(&rig), &mut none).await;
    assert!(fake.effects().is_empty(), "denied by default");
    let mut policy = Approvals {
        policy: Some(Policy {
            approve_browser_members: vec!["click".into()],
            ..Policy::default()
        }),
        ..Approvals::default()
    };
    rig.run(browser_opts(&rig), &mut policy).await;
    assert_eq!(fake.effects(), ["click submit"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_a_page_that_navigates_during_the_confirmation_makes_the_ref_stale_and_nothing_happens()
{
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![
        call(
            "c1",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
        call(
            "c2",
            "type",
            json!({"tab_id": null, "target": "g1-name", "text": "x"}),
        ),
    ]));
    rig.mock.push(Reply::done("I will read the page again."));
    let mut op = BrowserOp::new(&fake, [approve(), approve()]);
    op.during = Some(Box::new(|b: &FakeBrowser| b.navigate_itself()));
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    let reqs = rig.mock.requests();
    let (p, _) = payload(&reqs[1], "c1");
    assert_eq!(p["ok"], false);
    assert!(
        p["error"]
            .as_str()
            .unwrap()
            .starts_with("The target is stale"),
        "{p}"
    );
    // The later browser call of that response is skipped, with the state.
    let (p2, _) = payload(&reqs[1], "c2");
    assert_eq!(p2["error"], SKIPPED);
    assert_eq!(p2["state"]["tabs"][0]["id"], "tab-1");
    assert_eq!(op.asked.len(), 1, "the skipped call asks nobody");
    assert_eq!(run.ledger("c1"), ["pending", "failed"]);
    let skipped = run.of_kind("call_output");
    assert_eq!(skipped.len(), 2);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b4_the_url_policy_refuses_look_alike_origins_before_any_question() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    let outside = [
        "http://127.0.0.1.evil.test:8080/",
        "http://127.0.0.1:8081/",
        "https://127.0.0.1:8080/",
        "http://user@127.0.0.1.evil.test:8080/",
        "javascript:alert(1)",
    ];
    for (i, url) in outside.iter().enumerate() {
        rig.mock.push(Reply::output(vec![call(
            &format!("n{i}"),
            "navigate",
            json!({"tab_id": null, "url": url}),
        )]));
    }
    rig.mock.push(Reply::output(vec![call(
        "inside",
        "navigate",
        json!({"tab_id": null, "url": format!("{ORIGIN}/other?q=1")}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "blank",
        "new_tab",
        json!({"url": null}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [approve(), deny("not now")]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    for i in 0..outside.len() {
        let (p, _) = payload(&reqs[i + 1], &format!("n{i}"));
        assert_eq!(p["error"], NAVIGATION_REFUSED, "{}", outside[i]);
        assert!(p["state"]["tabs"].is_array(), "the state still comes back");
    }
    // Only the navigation inside the policy and the blank tab were asked
    // about; the blank tab was refused.
    let asked: Vec<&str> = op.asked.iter().map(|a| a.call_id.as_str()).collect();
    assert_eq!(asked, ["inside", "blank"]);
    assert_eq!(fake.effects(), [format!("navigate {ORIGIN}/other?q=1")]);
    assert!(!fake.calls().contains(&"new_tab".to_string()));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b5_a_refused_read_returns_the_fixed_refusal_and_reads_nothing() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "r2",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [deny("no reading"), approve()]);
    let opts = RunOptions {
        browser: Some(toolset(&["read_page"])),
        ..browser_opts(&rig)
    };
    let before = fake.calls().len();
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let out = reqs[1].input_of_type("function_call_output");
    assert_eq!(
        out[0]["output"][0]["text"],
        r#"{"ok":false,"error":"Browser read was not approved."}"#
    );
    let (p, _) = payload(&reqs[1], "r1");
    assert_eq!(p, json!({"ok": false, "error": READ_REFUSED}));
    assert!(op.asked[0].read && op.asked[0].member == "read_page");
    // The run's first state read, then nothing for the refused read; the
    // approved one read the state before its call.
    let calls = fake.calls();
    assert_eq!(
        &calls[before..],
        ["state", "state", "read_page"],
        "{calls:?}"
    );
    let (p2, _) = payload(&reqs[2], "r2");
    assert_eq!(p2["ok"], true);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_a_state_that_cannot_be_read_stops_the_run() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    )]));
    rig.mock.push(Reply::done("never asked"));
    let mut op = BrowserOp::new(&fake, [approve()]);
    // While the operator is asked, the browser starts reporting two
    // active tabs.
    op.during = Some(Box::new(|b: &FakeBrowser| b.break_state()));
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Failed);
    assert!(
        run.outcome.message.contains("Browser state is invalid"),
        "{}",
        run.outcome.message
    );
    assert_eq!(fake.effects(), ["click submit"]);
    assert_eq!(run.ledger("c1"), ["pending", "unknown"]);
    assert_eq!(rig.mock.requests().len(), 1, "no request after the failure");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_invalid_arguments_are_refused_naming_the_field_with_nothing_sent() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    let bad = [
        json!({"tab_id": null, "text": "Saved", "timeout_ms": 0}),
        json!({"tab_id": null, "text": "   ", "timeout_ms": 10}),
        json!({"tab_id": null, "text": "Saved", "timeout_ms": true}),
        json!({"tab_id": null, "text": "Saved", "timeout_ms": 10, "extra": 1}),
        json!({"tab_id": null, "text": "Saved", "timeout_ms": 1.5}),
    ];
    for (i, args) in bad.iter().enumerate() {
        rig.mock.push(Reply::output(vec![call(
            &format!("w{i}"),
            "wait_for",
            args.clone(),
        )]));
    }
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, []);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let errors: Vec<String> = (0..bad.len())
        .map(|i| {
            payload(&reqs[i + 1], &format!("w{i}")).0["error"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(errors[0].contains("`timeout_ms`"), "{errors:?}");
    assert!(errors[1].contains("`text`"), "{errors:?}");
    assert!(errors[2].contains("`timeout_ms`"), "{errors:?}");
    assert!(errors[3].contains("`extra`"), "{errors:?}");
    assert!(errors[4].contains("`timeout_ms`"), "{errors:?}");
    assert!(!fake.calls().contains(&"wait_for".to_string()));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b9_a_screenshot_is_a_native_input_image_and_its_file_is_in_the_run_folder() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "s1",
        "screenshot",
        json!({"tab_id": null}),
    )]));
    rig.mock.push(Reply::done("seen"));
    let mut op = BrowserOp::new(&fake, []);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let (p, rest) = payload(&reqs[1], "s1");
    assert_eq!(p["ok"], true);
    assert!(p.get("result").is_none());
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["type"], "input_image");
    assert_eq!(
        png_size_of_data_url(rest[0]["image_url"].as_str().unwrap()),
        Some((64, 40))
    );
    // The trajectory refers to the image's file, never its data.
    let out = run.of_kind("call_output");
    let url = out[0]["item"]["output"][1]["image_url"].as_str().unwrap();
    let file = url.strip_prefix("sandtop-file:").expect(url);
    assert!(run.dir.join(file).is_file());
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_diagnostics_name_member_stage_and_outcome_never_page_text_or_arguments() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "t1",
        "type",
        json!({"tab_id": null, "target": "g1-name", "text": "secret-typed-text"}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [approve()]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(fake.effects(), ["type name secret-typed-text"]);
    let d = diagnostics(&run);
    let browser: Vec<(String, String, String, String)> = d
        .iter()
        .filter(|r| r["api"] == "browser")
        .map(|r| {
            (
                r["call_id"].as_str().unwrap().into(),
                r["member"].as_str().unwrap().into(),
                r["stage"].as_str().unwrap().into(),
                r["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = |c: &str, m: &str, s: &str, r: &str| (c.into(), m.into(), s.into(), r.into());
    assert_eq!(
        browser,
        [
            want("r1", "read_page", "action", "completed"),
            want("t1", "type", "approval", "completed"),
            want("t1", "type", "action", "completed"),
        ]
    );
    let text = std::fs::read_to_string(run.dir.join("diagnostics.jsonl")).unwrap();
    for leak in ["secret-typed-text", "Contact us", "g1-name"] {
        assert!(!text.contains(leak), "diagnostics carry {leak:?}");
    }
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_a_daemon_without_a_browser_fails_the_run_before_the_first_request() {
    let rig = Rig::new().await;
    let mut op = ScriptedOp::new(rig.probe());
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let dir = rig.new_run_dir();
    let mut recorder = start_recorder(&dir);
    let opts = RunOptions {
        computer: false,
        browser: Some(toolset(&[])),
        ..rig.opts()
    };
    let mut runner = Runner::new(
        &mut model,
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        Interrupt::default(),
    );
    let e = runner.run(None).await.expect_err("a run without a browser");
    assert!(
        format!("{e:#}").contains("browser driver is not available (browser_unavailable)"),
        "{e:#}"
    );
    assert!(rig.mock.requests().is_empty());
}

#[test]
fn b1_browser_options_are_checked_at_start() {
    use clap::Parser as _;
    let opts = |args: &[&str]| {
        let mut argv = vec!["host-cli", "run"];
        argv.extend_from_slice(args);
        argv.push("a task");
        match host_cli::cli::Cli::try_parse_from(argv) {
            Ok(cli) => match cli.command {
                host_cli::cli::Command::Run(a) => {
                    host_cli::agent::cmd::run_options(&a).map_err(|e| format!("{e:#}"))
                }
                other => panic!("{other:?}"),
            },
            Err(e) => Err(e.to_string()),
        }
    };
    let err = |args: &[&str]| {
        opts(args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} was accepted"))
    };
    assert!(err(&["--browser"]).contains("--url-policy"));
    assert!(err(&["--browser", "--tool", "computer", "--url-policy", ORIGIN]).contains("--tool"));
    assert!(err(&["--url-policy", ORIGIN]).contains("--browser"));
    assert!(
        err(&["--browser", "--browser-members", "read_page,clik"])
            .contains("unknown browser member")
    );
    assert!(err(&["--browser", "--browser-members", "read_page,read_page"]).contains("twice"));
    assert!(
        err(&[
            "--browser",
            "--browser-members",
            "read_page",
            "--browser-add",
            "run_script"
        ])
        .contains("cannot be used with")
    );
    assert!(err(&["--browser", "--url-policy", "example.com"]).contains("--url-policy"));
    assert!(err(&["--browser", "--browser-members", ""]).contains("no tool"));
    let o = opts(&["--browser", "--url-policy", ORIGIN]).unwrap();
    assert!(!o.computer);
    assert_eq!(o.browser.as_ref().unwrap().members().len(), 17);
    let o = opts(&["--tool", "both", "--browser-members", "read_page,click"]).unwrap();
    assert!(o.computer);
    assert_eq!(o.browser.unwrap().members(), ["read_page", "click"]);
    let o = opts(&[]).unwrap();
    assert!(o.computer && o.browser.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b11_opt_in_members_are_offered_only_when_added_and_confirmed_like_any_action() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    let set = json!({"tab_id": null, "target": "g1-submit", "checked": true});
    rig.mock
        .push(Reply::output(vec![call("c1", "set_checked", set.clone())]));
    rig.mock
        .push(Reply::output(vec![call("c2", "set_checked", set)]));
    rig.mock.push(Reply::output(vec![call(
        "c3",
        "click_at",
        json!({"tab_id": null, "x": 5, "y": 6, "button": "left", "click_count": 1, "keys": []}),
    )]));
    rig.mock.push(Reply::done("Checked and clicked."));
    let added: Vec<String> = ["set_checked", "click_at"].map(String::from).to_vec();
    let opts = RunOptions {
        browser: Some(
            Toolset::new(
                None,
                Some(&added),
                Some(UrlPolicy::parse(ORIGIN).unwrap()),
                &[],
            )
            .unwrap(),
        ),
        ..browser_opts(&rig)
    };
    let mut op = BrowserOp::new(&fake, [deny("no"), approve(), approve()]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let names: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"browser_set_checked") && names.contains(&"browser_click_at"),
        "{names:?}"
    );
    assert!(!names.contains(&"browser_hold_keys"), "{names:?}");
    // Every call asked, nothing done before its approval; the refusal is
    // the seed's text and changes nothing.
    let asked: Vec<(&str, &str, usize)> = op
        .asked
        .iter()
        .map(|a| (a.call_id.as_str(), a.member.as_str(), a.effects))
        .collect();
    assert_eq!(
        asked,
        [
            ("c1", "set_checked", 0),
            ("c2", "set_checked", 0),
            ("c3", "click_at", 1)
        ]
    );
    let (p1, _) = payload(&reqs[1], "c1");
    assert_eq!(p1["error"], ACTION_REFUSED);
    assert_eq!(fake.effects(), ["set_checked submit true", "click_at 5,6"]);
    let (p2, _) = payload(&reqs[2], "c2");
    assert_eq!(
        (p2["ok"].clone(), p2["result"].clone()),
        (json!(true), Value::Null)
    );
    assert_eq!(run.ledger("c2"), ["pending", "done"]);
    assert_eq!(run.ledger("c3"), ["pending", "done"]);
    rig.assert_mock_clean();
}

mod files;
mod page_bound;
mod policy;
mod relabel;
mod results;
mod sign_in;
