//! An approval binds the page it was given on (docs/contract.md
//! rule 28b): pointer members, `hold_keys` and
//! `tab_id: null` calls act only on the tab, the load (document) and, for
//! keys, the focus the operator was shown; the page reloading, the focus
//! moving or another tab becoming active while the operator decides makes
//! the call stale, nothing done. The fake checks `expect_page` as the
//! driver does (the browser tier checks the driver itself).

use sandtop_protocol::browser::ExpectedPage;

use super::*;

fn with_members(extra: &[&str]) -> Toolset {
    let add: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    Toolset::new(
        None,
        Some(&add),
        Some(UrlPolicy::parse(ORIGIN).unwrap()),
        &[],
    )
    .unwrap()
}

fn click_at(id: &str) -> Value {
    call(
        id,
        "click_at",
        json!({"tab_id": null, "x": 20, "y": 30, "button": "left", "click_count": 1, "keys": []}),
    )
}

/// The page the fake saw each call of `member` bound to.
fn bound(fake: &FakeBrowser, member: &str) -> Vec<Option<ExpectedPage>> {
    lock(&fake.0)
        .pages
        .iter()
        .filter(|(m, _)| m == member)
        .map(|(_, p)| p.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_a_point_acts_only_on_the_load_it_was_approved_on() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![click_at("c1")]));
    rig.mock.push(Reply::output(vec![click_at("c2")]));
    rig.mock.push(Reply::done("Clicked once."));
    let mut op = BrowserOp::new(&fake, [approve(), approve()]);
    // The first click's page stays; while the second is asked about, the
    // page reloads itself (another document at the same address).
    let mut asked = 0;
    op.during = Some(Box::new(move |b: &FakeBrowser| {
        asked += 1;
        if asked == 2 {
            b.navigate_itself();
        }
    }));
    let opts = RunOptions {
        browser: Some(with_members(&["click_at"])),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(payload(&reqs[1], "c1").0["ok"], true);
    let (c2, _) = payload(&reqs[2], "c2");
    assert_eq!(c2["ok"], false, "{c2}");
    assert!(
        c2["error"]
            .as_str()
            .unwrap()
            .starts_with("The target is stale"),
        "{c2}"
    );
    assert_eq!(fake.effects(), ["click_at 20,30"], "only the first acted");
    // Each was bound to the tab and the document read just before its
    // question; the page was read before each question.
    assert_eq!(
        bound(&fake, "click_at"),
        [
            Some(ExpectedPage {
                tab_id: "tab-1".into(),
                document: Some("tab-1-g1".into()),
                focus: None,
            }),
            Some(ExpectedPage {
                tab_id: "tab-1".into(),
                document: Some("tab-1-g1".into()),
                focus: None,
            })
        ]
    );
    let calls = fake.calls();
    let describe = calls.iter().filter(|c| *c == "describe_page").count();
    assert_eq!(describe, 2, "{calls:?}");
    assert_eq!(run.ledger("c2"), ["pending", "failed"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_held_keys_go_only_to_the_focus_they_were_approved_for() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    lock(&fake.0).focus = "g1-name".into();
    let rig = browser_rig(&fake).await;
    let hold = |id: &str| {
        call(
            id,
            "hold_keys",
            json!({"tab_id": null, "keys": ["Shift"], "duration_ms": 10}),
        )
    };
    rig.mock.push(Reply::output(vec![hold("h1")]));
    rig.mock.push(Reply::output(vec![hold("h2")]));
    rig.mock.push(Reply::done("Held once."));
    let mut op = BrowserOp::new(&fake, [approve(), approve()]);
    let mut asked = 0;
    op.during = Some(Box::new(move |b: &FakeBrowser| {
        asked += 1;
        if asked == 2 {
            // The page moves the focus to another field meanwhile.
            lock(&b.0).focus = "g1-email".into();
        }
    }));
    let opts = RunOptions {
        browser: Some(with_members(&["hold_keys"])),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(payload(&reqs[1], "h1").0["ok"], true);
    assert_eq!(payload(&reqs[2], "h2").0["ok"], false);
    assert_eq!(fake.effects(), ["hold_keys Shift at g1-name"]);
    assert_eq!(
        bound(&fake, "hold_keys")[1],
        Some(ExpectedPage {
            tab_id: "tab-1".into(),
            document: Some("tab-1-g1".into()),
            focus: Some("g1-name".into()),
        })
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_a_null_tab_call_acts_only_on_the_tab_that_was_active_when_approved() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    )]));
    rig.mock.push(Reply::done("Nothing clicked."));
    let mut op = BrowserOp::new(&fake, [approve()]);
    // While the operator decides, another tab with the same form comes to
    // the front: its Submit has the same ref (its first document).
    op.during = Some(Box::new(|b: &FakeBrowser| {
        let mut p = lock(&b.0);
        p.tabs.push(FakeTab {
            id: "tab-2".into(),
            url: format!("{ORIGIN}/form"),
            title: "Contact".into(),
            generation: 1,
        });
        p.active = 1;
    }));
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let (c1, _) = payload(&rig.mock.requests()[1], "c1");
    assert_eq!(c1["ok"], false, "{c1}");
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    assert_eq!(
        bound(&fake, "click"),
        [Some(ExpectedPage {
            tab_id: "tab-1".into(),
            document: None,
            focus: None,
        })]
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_a_tab_gone_before_the_question_is_refused_unasked() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click_at",
        json!({"tab_id": "tab-9", "x": 1, "y": 1, "button": "left", "click_count": 1, "keys": []}),
    )]));
    rig.mock.push(Reply::done("No such tab."));
    let mut op = BrowserOp::new(&fake, [approve()]);
    let opts = RunOptions {
        browser: Some(with_members(&["click_at"])),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let (c1, _) = payload(&rig.mock.requests()[1], "c1");
    assert_eq!(c1["ok"], false, "{c1}");
    assert_eq!(c1["error"], host_cli::agent::browser::PAGE_CHANGED);
    assert!(op.asked.is_empty());
    assert!(fake.effects().is_empty());
    rig.assert_mock_clean();
}
