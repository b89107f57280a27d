//! `host-cli batch` (docs/contract.md rules 77-82): results equal the
//! checks' verdicts, unsupported is never a failure, a bad task file is a
//! usage error naming its lines, every guest is removed afterwards.
//!
//! The first two tests need no Docker (nothing boots); the others run real
//! guests (E tier) and SKIP without Docker or the image `sandtop-guest:latest`.
//! The example set: a subset of examples/tasks/ with `--parallel 2`
//! (one task of each app), or the whole of it with `--parallel 4` when
//! `SANDTOP_BATCH_FULL=1` (`make test-full`). With a key, the model (the
//! scripted mock of the Responses API) runs a task, not its solution.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandtop_testkit::skip;
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

fn host_cli(state: &Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    c
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tasks")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/batch")
        .join(name)
}

fn batch(state: &Path, file: &Path, out: &Path, parallel: u16) -> Output {
    let o = host_cli(state)
        .arg("batch")
        .arg(file)
        .arg("--out")
        .arg(out)
        .args(["--parallel", &parallel.to_string()])
        .output()
        .unwrap();
    eprintln!(
        "batch {} exit {:?}\n{}",
        file.display(),
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn results(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

fn task<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}: {r:#}"))
}

/// Containers whose session folder is under `state` (none must be left).
fn containers_of(state: &Path) -> Vec<String> {
    sandtop_testkit::docker::session_containers(state)
        .into_iter()
        .map(|(_, dir)| dir)
        .collect()
}

/// `guest ls --json` of the state: no session left.
fn sessions_left(state: &Path) -> Value {
    let o = host_cli(state)
        .args(["guest", "ls", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

fn assert_nothing_left(state: &Path) {
    assert_eq!(
        containers_of(state),
        Vec::<String>::new(),
        "containers left"
    );
    let ls = sessions_left(state);
    assert!(
        ls.as_array().is_some_and(Vec::is_empty),
        "guest ls still lists: {ls}"
    );
}

#[test]
fn a_malformed_task_file_is_a_usage_error_naming_each_bad_line() {
    let state = tempfile::tempdir().unwrap();
    let o = batch(
        state.path(),
        &fixture("malformed.jsonl"),
        &state.path().join("out"),
        1,
    );
    assert_eq!(o.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "malformed.jsonl:2: not JSON",
        "malformed.jsonl:3: not a task: unknown field `checkz`",
        "malformed.jsonl:5: duplicate id \"ok\" (first on line 1)",
        "3 bad line(s)",
        "nothing was run",
    ] {
        assert!(err.contains(want), "missing {want:?} in\n{err}");
    }
    assert!(!state.path().join("out").exists(), "nothing was written");
}

#[test]
fn unsupported_and_keyless_tasks_run_nothing_and_fail_nothing() {
    let state = tempfile::tempdir().unwrap();
    let out = state.path().join("out");
    let o = batch(state.path(), &fixture("unsupported.jsonl"), &out, 2);
    assert_eq!(o.status.code(), Some(0), "nothing failed");
    let r = results(&out);
    let t = task(&r, "osworld-calc");
    assert_eq!(t["status"], "unsupported");
    assert_eq!(
        t["unsupported"],
        serde_json::json!(["config:execute", "evaluator:compare_table"])
    );
    assert_eq!(task(&r, "no-solution")["status"], "skipped");
    assert!(
        task(&r, "no-solution")["reason"]
            .as_str()
            .unwrap()
            .contains("no API key"),
        "{r:#}"
    );
    assert_eq!(r["totals"]["unsupported"], 1);
    assert_eq!(r["totals"]["skipped"], 1);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("evaluator:compare_table"), "{html}");
}

#[test]
fn results_equal_the_checks_verdicts_and_every_guest_is_removed() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let out = state.path().join("out");
    let o = batch(state.path(), &fixture("verdicts.jsonl"), &out, 2);
    assert_eq!(o.status.code(), Some(1), "a task failed");
    let r = results(&out);
    let pass = task(&r, "right");
    assert_eq!(pass["status"], "passed", "{r:#}");
    assert_eq!(pass["ending"], "finished");
    assert_eq!(pass["checks"][0]["ok"], true);
    // The same solution against a wrong expectation: failed, by its check,
    // with what the file holds.
    let fail = task(&r, "wrong-expectation");
    assert_eq!(fail["status"], "failed", "{r:#}");
    assert_eq!(fail["ending"], "finished", "the run itself finished");
    assert_eq!(fail["checks"][0]["ok"], false);
    assert!(
        fail["reason"]
            .as_str()
            .unwrap()
            .contains("\"sandtop-ok\\n\""),
        "{r:#}"
    );
    assert_eq!(task(&r, "unsupported-evaluator")["status"], "unsupported");
    // Each run has its folder, its checks recorded, its report linked.
    for id in ["right", "wrong-expectation"] {
        let t = task(&r, id);
        let report = out.join(t["report"].as_str().unwrap());
        assert!(report.is_file(), "{}", report.display());
        let traj =
            std::fs::read_to_string(out.join("runs").join(id).join("trajectory.jsonl")).unwrap();
        assert!(traj.contains("\"exercise_checks\""), "{traj}");
    }
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("href=\"runs/right/report.html\""));
    assert_nothing_left(state.path());
}

/// The example set's tasks this test runs: all with SANDTOP_BATCH_FULL=1,
/// else one of each app (editor, terminal, form, tabs) and the OSWorld
/// one.
const SUBSET: &[&str] = &[
    "editor-append-line",
    "terminal-echo",
    "form-submit",
    "browser-new-tab",
];

#[test]
fn the_example_set_passes_offline_in_parallel() {
    if !skip::docker_guest() {
        return;
    }
    let full = std::env::var("SANDTOP_BATCH_FULL").is_ok_and(|v| v == "1");
    let state = tempfile::tempdir().unwrap();
    let mut lines: Vec<String> = Vec::new();
    for f in ["tasks.jsonl", "osworld.jsonl"] {
        let text = std::fs::read_to_string(examples().join(f)).unwrap();
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            let id = serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string();
            if full || SUBSET.contains(&id.as_str()) || id == "osworld-terminal-hello" {
                lines.push(l.to_string());
            }
        }
    }
    if full {
        assert!(
            lines.len() >= 12,
            "the example set has {} tasks",
            lines.len()
        );
    }
    let file = state.path().join("set.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = state.path().join("out");
    let o = batch(state.path(), &file, &out, if full { 4 } else { 2 });
    let r = results(&out);
    assert_eq!(o.status.code(), Some(0), "{r:#}");
    assert_eq!(r["totals"]["passed"], lines.len(), "{r:#}");
    for t in r["tasks"].as_array().unwrap() {
        assert_eq!(t["status"], "passed", "{t:#}");
        assert_eq!(t["model"], "sandtop-scripted-solution");
        assert!(t["checks"].as_array().is_some_and(|c| !c.is_empty()));
    }
    assert_nothing_left(state.path());
}

/// With a key the model answers, not the solution: here the scripted mock
/// of the Responses API (every request checked against OpenAI's
/// description), whose answers differ from the task's solution. The key
/// never lands in the output folder.
#[test]
fn with_a_key_the_model_runs_the_task_not_its_solution() {
    use sandtop_testkit::mock_responses::{MockResponses, Reply};
    if !skip::docker_guest() {
        return;
    }
    const KEY: &str = "sk-batch-test-key-7f3a";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mock = rt.block_on(MockResponses::start(KEY));
    mock.push_all([
        Reply::output(vec![serde_json::json!({
            "type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
            "pending_safety_checks": [],
            "actions": [{"type": "wait"},
                        {"type": "type", "text": "echo from-the-model > /home/user/t.txt\n"},
                        {"type": "wait"}]})]),
        Reply::done("I wrote the file."),
    ]);
    let state = tempfile::tempdir().unwrap();
    // The verdicts fixture's first task expects `sandtop-ok`, which its
    // solution writes; the model writes something else.
    let file = state.path().join("one.jsonl");
    let first = std::fs::read_to_string(fixture("verdicts.jsonl")).unwrap();
    std::fs::write(&file, first.lines().next().unwrap()).unwrap();
    let out = state.path().join("out");
    let o = host_cli(state.path())
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", mock.base_url())
        .arg("batch")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    let r = results(&out);
    assert_eq!(o.status.code(), Some(1), "{r:#}");
    let t = task(&r, "right");
    assert_eq!(t["status"], "failed", "{r:#}");
    assert_eq!(t["model"], "gpt-5.5");
    assert!(
        t["reason"].as_str().unwrap().contains("from-the-model"),
        "{r:#}"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for q in &requests {
        assert!(q.authorized);
        assert_eq!(q.validation_errors, Vec::<String>::new());
        assert_eq!(q.problems, Vec::<String>::new());
    }
    rt.block_on(mock.stop());
    for e in walk(&out) {
        let bytes = std::fs::read(&e).unwrap();
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key is in {}",
            e.display()
        );
    }
    assert_nothing_left(state.path());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Stops the pool and removes what a test left in its state folder.
struct PoolCleanup(PathBuf);

impl Drop for PoolCleanup {
    fn drop(&mut self) {
        for args in [
            &["pool", "stop"][..],
            &["guest", "stop", "--all", "--force"],
            &["guest", "gc"],
        ] {
            let _ = host_cli(&self.0).args(args).output();
        }
    }
}

fn pool_status(state: &Path) -> Value {
    let o = host_cli(state)
        .args(["pool", "status", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

/// `--pool` (docs/contract.md rule 89): a task whose network is the pool's
/// takes a pool guest; one with its own network gets a guest booted for
/// it; without a running pool, nothing runs.
#[test]
fn with_pool_a_matching_task_takes_a_pool_guest_and_another_boots_its_own() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let _cleanup = PoolCleanup(st.to_path_buf());
    let file = st.join("tasks.jsonl");
    let right = std::fs::read_to_string(fixture("verdicts.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let mut own: Value = serde_json::from_str(&right).unwrap();
    own["id"] = "own-network".into();
    own["network"] = "allow:https://example.org".into();
    std::fs::write(&file, format!("{right}\n{own}\n")).unwrap();

    // No pool yet: a usage error, and nothing boots.
    let o = host_cli(st)
        .arg("batch")
        .arg(&file)
        .args(["--pool", "--out"])
        .arg(st.join("none"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no pool is running"));
    assert!(!st.join("none").exists());

    let o = host_cli(st)
        .args([
            "pool", "start", "--detach", "--size", "1", "--memory", "768m",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while pool_status(st)["ready"].as_array().map_or(0, Vec::len) < 1 {
        assert!(std::time::Instant::now() < end, "{:#}", pool_status(st));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    let out = st.join("out");
    let o = host_cli(st)
        .arg("batch")
        .arg(&file)
        .args(["--pool", "--parallel", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("batch --pool exit {:?}\n{err}", o.status.code());
    assert_eq!(o.status.code(), Some(0), "{err}");
    let r = results(&out);
    let pooled = task(&r, "right");
    assert_eq!(pooled["status"], "passed", "{r:#}");
    assert_eq!(pooled["guest"], "pool", "{r:#}");
    let booted = task(&r, "own-network");
    assert_eq!(booted["status"], "passed", "{r:#}");
    assert_eq!(booted["guest"], "booted", "{r:#}");
    assert!(
        err.contains("task own-network: the pool did not hand out a guest"),
        "{err}"
    );
    // The claimed guest was removed after its task; the pool refilled.
    let s = pool_status(st);
    assert_eq!(s["claimed"].as_array().map(Vec::len), Some(1), "{s:#}");
    let o = host_cli(st).args(["pool", "stop"]).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_nothing_left(st);
}

#[test]
fn ctrl_c_ends_the_run_under_way_skips_the_rest_and_removes_every_guest() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let out = state.path().join("out");
    // `long` waits 40 turns; the two after it are never begun.
    let mut child = host_cli(state.path())
        .arg("batch")
        .arg(fixture("interrupt.jsonl"))
        .arg("--out")
        .arg(&out)
        .args(["--parallel", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let trajectory = out.join("runs/long/trajectory.jsonl");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !std::fs::read_to_string(&trajectory).is_ok_and(|t| t.contains("\"kind\":\"ledger\"")) {
        assert!(
            std::time::Instant::now() < end,
            "the first task's run never began"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status =
        sandtop_testkit::command::interrupt(&mut child, std::time::Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    eprintln!("{stderr}");
    assert_eq!(status.code(), Some(130), "interrupted: {status:?}");
    let r = results(&out);
    assert_eq!(r["totals"]["interrupted"], 3, "{r:#}");
    let long = task(&r, "long");
    assert_eq!(long["status"], "interrupted", "{r:#}");
    assert_eq!(long["ending"], "interrupted", "{r:#}");
    assert!(
        long["reason"].as_str().unwrap().contains("stopped after"),
        "{r:#}"
    );
    assert!(long["steps"].as_u64().unwrap() >= 1, "{r:#}");
    assert!(
        long["steps"].as_u64().unwrap() < 40,
        "the run went on: {r:#}"
    );
    // Its checks judge a finished run only; its folder and report stay.
    assert_eq!(long["checks"], serde_json::json!([]), "{r:#}");
    assert!(out.join(long["report"].as_str().unwrap()).is_file());
    for id in ["after-1", "after-2"] {
        let t = task(&r, id);
        assert_eq!(t["status"], "interrupted", "{r:#}");
        assert!(
            t["reason"].as_str().unwrap().contains("before it began"),
            "{r:#}"
        );
        assert!(t.get("run_folder").is_none(), "{r:#}");
    }
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("3 interrupted"), "{html}");
    assert_nothing_left(state.path());
}

#[test]
fn a_tasks_run_folder_replays_on_a_guest_set_up_as_the_task_was() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let out = state.path().join("out");
    let o = batch(state.path(), &fixture("replay.jsonl"), &out, 1);
    assert_eq!(o.status.code(), Some(0), "the task passes");
    let run = out.join("runs/note");
    // The folder records the task (never its solution) ...
    let task: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("task.json")).unwrap()).unwrap();
    assert_eq!(task["setup"].as_array().unwrap().len(), 3, "{task:#}");
    assert!(task.get("solution").is_none(), "{task:#}");
    // ... and its replay writes the file and opens the editor first: the
    // first screen is the recorded one (without the setup it is an empty
    // desktop, and the replay diverges at step 1).
    let r = host_cli(state.path())
        .arg("replay")
        .arg(&run)
        .arg("-o")
        .arg(state.path().join("replayed"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stdout);
    let err = String::from_utf8_lossy(&r.stderr);
    eprintln!("{said}{err}");
    assert_eq!(r.status.code(), Some(0), "{said}{err}");
    assert!(said.contains("every step matched"), "{said}");
    assert!(err.contains("its 3 setup step(s) ran"), "{err}");
    assert_nothing_left(state.path());
}
