//! `run_script` only in a fresh guest, and a script in doubt discards it
//! (contract rule 41a; seed: scripts run with page privileges in a fresh,
//! credential-less session, discarded if in doubt).

use std::sync::Arc;

use sandtop_protocol::browser::{
    BrowserOutcome, BrowserReply, BrowserState, BrowserTab, PageIdentity,
};
use sandtop_protocol::{BrowserCall, ErrorBody, ErrorCode};
use sandtop_testkit::mock_responses::{Reply, function_call};
use sandtopd::browser::{Backend, BackendFuture};
use serde_json::json;

use super::Env;

/// The fake daemon's browser (`SANDTOP_FAKE_BROWSER`): one tab; every
/// `run_script` outlasts its wait (the daemon's `timeout`: the script may
/// still be running), everything else is refused.
#[derive(Debug)]
struct ScriptTimesOut;

fn state() -> BrowserState {
    BrowserState {
        tabs: vec![BrowserTab {
            id: "tab-1".into(),
            title: "Page".into(),
            url: "http://127.0.0.1:8080/".into(),
            active: true,
            title_truncated: false,
        }],
    }
}

impl Backend for ScriptTimesOut {
    fn call<'a>(&'a self, call: &'a BrowserCall) -> BackendFuture<'a, BrowserReply> {
        Box::pin(async move {
            Err(match call {
                // The page the approval binds (read before the question).
                BrowserCall::DescribePage { .. } => {
                    return Ok(BrowserReply {
                        outcome: BrowserOutcome::Page(PageIdentity {
                            tab_id: "tab-1".into(),
                            document: "doc-1".into(),
                            focus: "none".into(),
                        }),
                        state: state(),
                        elapsed_ms: 1,
                    });
                }
                BrowserCall::RunScript { .. } => ErrorBody::new(
                    ErrorCode::Timeout,
                    "the local wait stopped; the script may still be running",
                ),
                _ => ErrorBody::new(ErrorCode::NotActionable, "the fake does not do that"),
            })
        })
    }

    fn state(&self) -> BackendFuture<'_, BrowserState> {
        Box::pin(async move { Ok(state()) })
    }
}

pub(super) fn fake_browser() -> Arc<dyn Backend> {
    Arc::new(ScriptTimesOut)
}

const SCRIPT_OPTS: [&str; 6] = [
    "--browser",
    "--browser-add",
    "run_script",
    "--url-policy",
    "http://127.0.0.1:8080",
    "--screen",
];

pub(super) fn run_script_needs_a_fresh_guest_and_a_script_in_doubt_discards_it(env: &Env) {
    // Refused at start, before anything boots: a signed-in or reused guest.
    let missing = env.state.path().join("missing");
    let missing = missing.to_str().unwrap();
    for (extra, flag) in [
        (&["Run it.", "--session", "other"][..], "--session"),
        (&["Run it.", "--credentials", missing], "--credentials"),
        (&["--resume", missing], "--resume"),
    ] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&SCRIPT_OPTS);
        args.push("320x200");
        let out = env.run(&args);
        assert_eq!(out.code(), 1, "{args:?}: {out:?}");
        let err = out.stderr();
        assert!(
            err.contains("run_script") && err.contains(&format!("leave out {flag}")),
            "{args:?}: {err}"
        );
    }
    assert!(env.sessions().is_empty());
    assert!(env.mock.requests().is_empty());

    // A script whose outcome is unknown: the guest goes, --keep or not.
    let policy = env.state.path().join("policy.json");
    std::fs::write(
        &policy,
        json!({"approve_browser_members": ["run_script"]}).to_string(),
    )
    .unwrap();
    env.mock.push(Reply::output(vec![function_call(
        "call_script",
        "browser_run_script",
        &json!({"tab_id": null, "source": "1", "timeout_ms": 50}),
    )]));
    let mut args = vec![
        "run",
        "Run a script.",
        "--backend",
        "local",
        "--keep",
        "--approve-policy",
        policy.to_str().unwrap(),
    ];
    args.extend_from_slice(&SCRIPT_OPTS);
    args.push("320x200");
    let mut c = env.cmd(&args);
    c.env("SANDTOP_FAKE_BROWSER", "1");
    let out = env.output(c);
    assert_eq!(out.code(), 1, "{out:?}");
    assert_eq!(out.summary()["ending"], "failed", "{out:?}");
    let err = out.stderr();
    assert!(
        err.contains("script call call_script") && err.contains("removing session"),
        "{err}"
    );
    assert!(!err.contains("--reconcile"), "no resume is offered: {err}");
    assert!(
        env.sessions().is_empty(),
        "the guest was discarded: {:?}",
        env.sessions()
    );
    assert_eq!(env.mock.requests().len(), 1);
    env.assert_mock_clean();
}
