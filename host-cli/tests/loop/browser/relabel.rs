//! A confirmation shows the target as it is when the operator is asked
//! (docs/contract.md rule 28a): the page that relabels a button after the model's
//! read gets its call refused as changed before anyone is asked, and one
//! that relabels it while the operator reads the question gets nothing
//! done (the label shown travels with the call and the driver compares).

use host_cli::agent::browser::TARGET_CHANGED;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b12_a_target_relabelled_after_the_read_or_during_the_question_is_refused_as_stale() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    // The page relabels its button right after it was read.
    lock(&fake.0).relabel_after_read = Some(("submit", "Delete account".into()));
    let rig = browser_rig(&fake).await;
    let read = |id: &str| call(id, "read_page", json!({"tab_id": null, "filter": "all"}));
    let click = |id: &str| call(id, "click", json!({"tab_id": null, "target": "g1-submit"}));
    rig.mock.push(Reply::output(vec![read("r1")]));
    rig.mock.push(Reply::output(vec![click("c1")]));
    rig.mock.push(Reply::output(vec![read("r2")]));
    rig.mock.push(Reply::output(vec![click("c2")]));
    rig.mock.push(Reply::done("Nothing was clicked."));
    let mut op = BrowserOp::new(&fake, [approve()]);
    // While the operator reads the second question, the page relabels the
    // button again.
    op.during = Some(Box::new(|b: &FakeBrowser| {
        b.relabel("submit", "Save draft")
    }));
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();

    // The model read "Submit"; the page now says "Delete account": refused
    // as changed, nobody asked, nothing clicked.
    let (r1, _) = payload(&reqs[1], "r1");
    assert!(
        r1["result"]["elements"].to_string().contains("\"Submit\""),
        "{r1}"
    );
    let (c1, _) = payload(&reqs[2], "c1");
    assert_eq!(c1["ok"], false, "{c1}");
    assert_eq!(c1["error"], TARGET_CHANGED);
    // Read again, the operator is shown what the page says now.
    let (r2, _) = payload(&reqs[3], "r2");
    assert!(
        r2["result"]["elements"]
            .to_string()
            .contains("Delete account"),
        "{r2}"
    );
    assert_eq!(op.asked.len(), 1, "only c2 was put to the operator");
    assert_eq!(op.asked[0].call_id, "c2");
    assert!(
        op.asked[0]
            .description
            .contains("target: button \"Delete account\""),
        "{}",
        op.asked[0].description
    );
    // Relabelled during the question: approved for "Delete account", the
    // button now says "Save draft": stale, nothing done.
    let (c2, _) = payload(&reqs[4], "c2");
    assert_eq!(c2["ok"], false, "{c2}");
    assert!(
        c2["error"]
            .as_str()
            .unwrap()
            .starts_with("The target is stale"),
        "{c2}"
    );
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    assert!(
        run.ledger("c1").is_empty(),
        "a refused call never reached the ledger"
    );
    assert_eq!(run.ledger("c2"), ["pending", "failed"]);
    rig.assert_mock_clean();
}
