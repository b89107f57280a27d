//! Responses compaction (`--compaction auto`,
//! docs/contract.md rule 17b): every request asks for it
//! (`context_management`, validated by the mock against `CreateResponse`
//! and the API's rules); the local context budget is then off (the seed:
//! choose one, never both); a compaction item the API returns is checked
//! and resent unchanged, and the next requests start from it; a model
//! that refuses compaction gets the same request again without it, and the
//! local budget from then on.

use host_cli::agent::runner::Compaction;
use sandtop_testkit::mock_responses::compaction;

use super::*;

fn compacting(rig: &Rig) -> RunOptions {
    let mut opts = rig.opts();
    opts.compaction = Compaction::Auto;
    // A budget that would bite: one screenshot.
    opts.context = ContextBudget {
        max_images: 1,
        max_bytes: 16 * 1024 * 1024,
    };
    opts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_compaction_replaces_the_local_budget_and_the_item_goes_back_unchanged() {
    let rig = Rig::new().await;
    let cmp = compaction("cmp_0123");
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::output(vec![computer_call("call_2", vec![click(30, 20)])]),
        Reply::output(vec![
            cmp.clone(),
            computer_call("call_3", vec![click(50, 20)]),
        ]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(compacting(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs {
        assert_eq!(
            r.body["context_management"],
            json!([{"type": "compaction"}]),
            "request {}",
            r.n
        );
    }
    // No local budget: the third request resends all three screenshots
    // whole (the budget would have kept one).
    assert_eq!(real_screenshots(&reqs[2].input(), SCREEN), 3);
    // After the compaction: the task, the compaction item as the API sent
    // it, then what came after it; calls 1 and 2 are not resent.
    let last = reqs[3].input();
    assert_eq!(user_text(&last[0]), Some(rig.opts().task.as_str()));
    assert_eq!(last[1], cmp, "the compaction item, unchanged");
    let kinds: Vec<&str> = last
        .iter()
        .map(|i| i["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "compaction",
            "computer_call",
            "computer_call_output"
        ]
    );
    assert!(!reqs[3].raw_body.contains("call_1") && !reqs[3].raw_body.contains("call_2"));
    // The trajectory keeps everything.
    assert_eq!(run.of_kind("observation").len(), 4);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k2_a_model_without_compaction_gets_the_request_again_and_the_local_budget() {
    let rig = Rig::new().await;
    rig.mock.refuse_compaction();
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::output(vec![computer_call("call_2", vec![click(30, 20)])]),
        Reply::done("done"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(compacting(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(run.outcome.steps, 3);
    let reqs = rig.mock.requests();
    assert_eq!(reqs.len(), 4, "one refused request, then three");
    assert!(
        reqs[0].answer.contains("no compaction"),
        "{}",
        reqs[0].answer
    );
    assert_eq!(reqs[0].input(), reqs[1].input(), "the same request again");
    for r in &reqs[1..] {
        assert!(
            r.body.get("context_management").is_none(),
            "request {}",
            r.n
        );
    }
    // The local budget bites again: one screenshot whole.
    assert_eq!(real_screenshots(&reqs[3].input(), SCREEN), 1);
    assert_eq!(rig.probe().act_bodies().len(), 2, "each call ran once");
    let d = std::fs::read_to_string(run.dir.join("diagnostics.jsonl")).unwrap();
    assert!(d.contains("compaction_unsupported"), "{d}");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k3_a_compaction_item_without_its_required_fields_stops_the_run() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![
            json!({"type": "compaction", "id": "cmp_1"}),
            computer_call("call_1", vec![click(10, 20)]),
        ]),
        Reply::done("never"),
    ]);
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(compacting(&rig), &mut op).await;
    run.assert_ending(Ending::Failed);
    assert!(
        run.outcome.message.contains("encrypted_content"),
        "{}",
        run.outcome.message
    );
    assert_eq!(rig.probe().act_bodies().len(), 0, "nothing ran");
    assert_eq!(rig.mock.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k4_with_compaction_off_nothing_asks_for_it() {
    let rig = Rig::new().await;
    rig.mock.push(Reply::done("done"));
    let mut op = ScriptedOp::new(rig.probe());
    let run = rig.run(rig.opts(), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert!(
        rig.mock.requests()[0]
            .body
            .get("context_management")
            .is_none()
    );
    rig.assert_mock_clean();
}
