//! The URL policy after the navigation it allowed (docs/contract.md rule 30a), in
//! the loop: a redirect out of the policy is told to the model (fixed
//! text, no page text), no member acts on the page it led to, no granted
//! file reaches it, and every call carries the policy to the driver,
//! which checks it again at execution (the fake stands in for the
//! driver's check here; the real one is the browser tier's
//! `policy::url_policy_holds_at_execution_after_a_redirect_and_a_script_navigation`).

use std::os::unix::fs::PermissionsExt as _;

use host_cli::agent::browser::OUT_OF_POLICY;
use host_cli::agent::grants::Grants;

use super::*;

/// The default members plus `upload_file` with one grant, `cv`.
fn upload_toolset(host: &std::path::Path) -> Toolset {
    std::fs::set_permissions(host, std::fs::Permissions::from_mode(0o700)).unwrap();
    let cv = host.join("cv.txt");
    std::fs::write(&cv, b"curriculum").unwrap();
    let grants = Grants::parse(&[format!("upload:cv={}", cv.display())]).unwrap();
    Toolset::with_grants(
        None,
        Some(&["upload_file".to_string()]),
        Some(UrlPolicy::parse(ORIGIN).unwrap()),
        &[],
        grants,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_a_redirect_out_of_the_url_policy_is_told_and_nothing_acts_on_that_page() {
    let host = tempfile::tempdir().unwrap();
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    // An allowed URL that redirects elsewhere.
    rig.mock.push(Reply::output(vec![call(
        "n1",
        "navigate",
        json!({"tab_id": null, "url": format!("{ORIGIN}/redirect")}),
    )]));
    // Reading the page it led to stays allowed; acting on it does not.
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "t1",
        "type",
        json!({"tab_id": null, "target": "g2-name", "text": "secret"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g2-submit"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "u1",
        "upload_file",
        json!({"grant_id": "cv"}),
    )]));
    rig.mock
        .push(Reply::done("I stopped: the page left the allowed origin."));
    let mut op = BrowserOp::new(&fake, [approve(), approve(), approve(), approve()]);
    let opts = RunOptions {
        browser: Some(upload_toolset(host.path())),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();

    // The navigation: asked (its URL is allowed), carried out, and the
    // landing outside the policy told in fixed words, with the state.
    let (n1, _) = payload(&reqs[1], "n1");
    assert_eq!(n1["ok"], false, "{n1}");
    assert_eq!(n1["error"], OUT_OF_POLICY);
    assert_eq!(n1["state"]["tabs"][0]["url"], ELSEWHERE);
    let (r1, _) = payload(&reqs[2], "r1");
    assert_eq!(r1["ok"], true, "{r1}");
    // Type, click and the upload: refused before any question, nothing
    // sent, the grant not used.
    for (i, id) in [(3, "t1"), (4, "c1")] {
        let (p, _) = payload(&reqs[i], id);
        assert_eq!(
            (p["ok"].clone(), p["error"].clone()),
            (json!(false), json!(OUT_OF_POLICY)),
            "{id}: {p}"
        );
        assert_eq!(p["state"]["tabs"][0]["url"], ELSEWHERE);
    }
    let (u1, _) = payload(&reqs[5], "u1");
    assert_eq!(u1["ok"], false, "{u1}");
    assert_eq!(u1["error"], OUT_OF_POLICY);
    assert_eq!(u1["result"]["status"], "refused");
    let asked: Vec<&str> = op.asked.iter().map(|a| a.call_id.as_str()).collect();
    assert_eq!(asked, ["n1"], "nothing outside the policy is put to anyone");
    assert_eq!(fake.effects(), [format!("navigate {ELSEWHERE}/form")]);
    for member in ["type", "click", "set_file"] {
        assert!(
            !fake.calls().contains(&member.to_string()),
            "{member} was sent"
        );
    }
    assert!(run.ledger("t1").is_empty() && run.ledger("u1").is_empty());
    // The policy went with every call, for the driver to check.
    let policies = fake.policies();
    assert!(!policies.is_empty());
    for (member, p) in &policies {
        assert_eq!(p.as_deref(), Some(&[ORIGIN.to_string()][..]), "{member}");
    }
    // No page text in what the model was told of the refusals.
    assert!(!OUT_OF_POLICY.contains("evil"));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_a_page_that_leaves_the_policy_during_the_confirmation_gets_no_file() {
    let host = tempfile::tempdir().unwrap();
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "u1",
        "upload_file",
        json!({"grant_id": "cv"}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [approve()]);
    // While the operator reads the question, the page's script navigates
    // it to another origin: the host's check of the state passed, the
    // driver's at execution does not.
    op.during = Some(Box::new(|b: &FakeBrowser| {
        b.navigate_itself_to(&format!("{ELSEWHERE}/form"))
    }));
    let opts = RunOptions {
        browser: Some(upload_toolset(host.path())),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let (u1, _) = payload(&reqs[1], "u1");
    assert_eq!(u1["ok"], false, "{u1}");
    assert_eq!(u1["error"], OUT_OF_POLICY);
    assert_eq!(u1["result"]["status"], "refused");
    assert_eq!(u1["state"]["tabs"][0]["url"], ELSEWHERE);
    assert_eq!(op.asked.len(), 1);
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    assert_eq!(
        fake.policies(),
        [("set_file".to_string(), Some(vec![ORIGIN.to_string()]))]
    );
    assert_eq!(run.ledger("u1"), ["pending", "failed"]);
    rig.assert_mock_clean();
}
