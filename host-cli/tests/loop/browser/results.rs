//! An invalid browser *result* stops the run (contract rule 13c, seed: an
//! invalid result or state stops the run): a read report that fails
//! validation, or an outcome of the wrong kind for the member, is never
//! answered to the model as `ok: false` with the run going on.

use super::*;

/// A read report the host must refuse (version 2).
fn bad_read() -> BrowserOutcome {
    BrowserOutcome::Read(BrowserRead {
        version: 2,
        text: "Contact us".into(),
        elements: Vec::new(),
        omitted: Vec::new(),
        scopes: None,
    })
}

/// One run whose first response is `first`, the fake answering `member`
/// once with `outcome`: the run, what the operator was asked, the fake.
async fn run_with_bad(
    first: Value,
    member: &'static str,
    outcome: BrowserOutcome,
) -> (Run, BrowserOp, FakeBrowser, Rig) {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    lock(&fake.0).bad_outcome = Some((member, outcome));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![first]));
    rig.mock.push(Reply::done("never asked"));
    let mut op = BrowserOp::new(&fake, [approve()]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    (run, op, fake, rig)
}

#[track_caller]
fn assert_stopped(run: &Run, rig: &Rig, call_id: &str) {
    run.assert_ending(Ending::Failed);
    assert!(
        run.outcome.message.contains(call_id) && run.outcome.message.contains("invalid"),
        "{}",
        run.outcome.message
    );
    assert_eq!(
        rig.mock.requests().len(),
        1,
        "the model is not asked again after an invalid result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b13_a_read_report_that_fails_validation_stops_the_run() {
    let read = call("r1", "read_page", json!({"tab_id": null, "filter": "all"}));
    let (run, op, _fake, rig) = run_with_bad(read, "read_page", bad_read()).await;
    assert_stopped(&run, &rig, "r1");
    assert!(op.asked.is_empty());
    assert!(
        run.ledger("r1").is_empty(),
        "a read never reaches the ledger"
    );
    let d = diagnostics(&run);
    assert!(
        d.iter()
            .any(|d| d["call_id"] == "r1" && d["reason"] == "invalid_result"),
        "{d:?}"
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b13_a_read_answered_with_the_wrong_outcome_kind_stops_the_run() {
    // A bare Done for a read (accepted as an empty result before).
    let read = call("r1", "get_page_text", json!({"tab_id": null}));
    let (run, _op, _fake, rig) = run_with_bad(read, "get_page_text", BrowserOutcome::Done).await;
    assert_stopped(&run, &rig, "r1");
    rig.assert_mock_clean();
    // Text for a screenshot.
    let shot = call("s1", "screenshot", json!({"tab_id": null}));
    let text = BrowserOutcome::Text { text: "hi".into() };
    let (run, _op, _fake, rig) = run_with_bad(shot, "screenshot", text).await;
    assert_stopped(&run, &rig, "s1");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b13_an_action_answered_with_the_wrong_outcome_kind_stops_the_run_with_its_effect_unknown()
{
    let click = call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    );
    let (run, op, fake, rig) = run_with_bad(click, "click", bad_read()).await;
    assert_stopped(&run, &rig, "c1");
    assert_eq!(op.asked.len(), 1, "the click was approved");
    assert_eq!(fake.effects(), ["click submit"]);
    assert_eq!(run.ledger("c1"), ["pending", "unknown"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b13_an_invalid_read_of_the_target_before_the_question_stops_the_run_with_nothing_done() {
    let click = call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    );
    let (run, op, fake, rig) = run_with_bad(click, "describe_target", BrowserOutcome::Done).await;
    assert_stopped(&run, &rig, "c1");
    assert!(op.asked.is_empty(), "nobody is asked: {:?}", op.asked);
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    assert!(run.ledger("c1").is_empty());
    rig.assert_mock_clean();
}
