//! The warm pool and `guest reset` (docs/contract.md rules 71-76), with host-cli
//! as a child process against Docker guests (E tier): claims hand out
//! distinct guests and the pool refills, a ready guest killed is replaced,
//! reset keeps the name and drops the guest's state, a supervisor killed
//! with -9 leaves nothing `guest gc` does not remove, a failing image
//! stops the refilling and `status` says why. Without Docker: a claim with
//! no pool says so, the memory budget and the backend are checked.
//!
//! Each test has its own state directory; the guard at the end of each
//! stops the pool, its sessions and any container left (and the test then
//! checks that nothing was left to remove).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandtop_testkit::skip;
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

fn host_cli(state: &Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("SANDTOP_IMAGE");
    c
}

fn run(state: &Path, args: &[&str]) -> Output {
    host_cli(state)
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .unwrap()
}

fn ok(state: &Path, args: &[&str]) -> String {
    let out = run(state, args);
    assert!(
        out.status.success(),
        "host-cli {args:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn status(state: &Path) -> Value {
    serde_json::from_str(&ok(state, &["pool", "status", "--json"])).unwrap()
}

/// Polls `f` on the pool's status until it holds; fails with the last
/// status after `within`.
fn wait_status(state: &Path, what: &str, within: Duration, f: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + within;
    loop {
        let s = status(state);
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < end,
            "{what}: not within {within:?}; the pool's status: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ready(s: &Value) -> usize {
    s["ready"].as_array().map_or(0, Vec::len)
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap()
}

/// Containers (id) whose session folder label is under `state`: every
/// guest of this test, claimed ones included (their label keeps the
/// pool's folder name).
fn containers_of(state: &Path) -> Vec<String> {
    sandtop_testkit::docker::session_containers(state)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

fn sessions(state: &Path) -> Vec<Value> {
    serde_json::from_str::<Vec<Value>>(&ok(state, &["guest", "ls", "--json"])).unwrap()
}

fn container_id(state: &Path, name: &str) -> String {
    sessions(state)
        .into_iter()
        .find(|s| s["name"] == name)
        .and_then(|s| s["container_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no session {name}: {:?}", sessions(state)))
}

/// Removes whatever a test leaves (pool, sessions, containers), on every
/// way out.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = run(&self.0, &["pool", "stop"]);
        let _ = run(&self.0, &["guest", "stop", "--all", "--force"]);
        let _ = run(&self.0, &["guest", "gc"]);
        for id in containers_of(&self.0) {
            let _ = docker(&["rm", "-f", &id]);
        }
    }
}

fn docker_engine() -> bool {
    if !skip::have("docker") || !docker(&["version"]).status.success() {
        return skip::skip("docker", "no Docker engine answers");
    }
    true
}

#[test]
fn parallel_claims_get_distinct_guests_the_pool_refills_and_replaces_a_killed_one() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let _cleanup = Cleanup(st.to_path_buf());
    ok(
        st,
        &[
            "pool", "start", "--detach", "--size", "3", "--memory", "768m",
        ],
    );
    wait_status(st, "3 ready", Duration::from_secs(90), |s| ready(s) == 3);

    // Six claims at once against three ready guests: three now, three as
    // the pool refills; never one guest twice.
    let claims: Vec<_> = (0..6)
        .map(|i| {
            let st = st.to_path_buf();
            std::thread::spawn(move || {
                let name = format!("c{i}");
                let out = ok(
                    &st,
                    &["guest", "start", "--pool", "--name", &name, "--json"],
                );
                let v: Value = serde_json::from_str(&out).unwrap();
                assert_eq!(v["name"], name.as_str());
                v["container_id"].as_str().unwrap().to_string()
            })
        })
        .collect();
    let mut ids: Vec<String> = claims.into_iter().map(|t| t.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "one guest was handed out twice: {ids:?}");
    let s = wait_status(st, "refilled to 3", Duration::from_secs(120), |s| {
        ready(s) == 3
    });
    let claimed = s["claimed"].as_array().unwrap();
    assert_eq!(claimed.len(), 6, "{s:#}");
    // A claimed guest is an ordinary session that answers.
    ok(
        st,
        &[
            "screenshot",
            "--session",
            "c0",
            "-o",
            &st.join("c0.png").to_string_lossy(),
        ],
    );

    // A ready guest killed is replaced, and the pool says so.
    let victim = s["ready"][0]["name"].as_str().unwrap().to_string();
    assert!(
        docker(&["kill", &container_id(st, &victim)])
            .status
            .success()
    );
    let s = wait_status(
        st,
        "the killed guest replaced",
        Duration::from_secs(90),
        |s| {
            ready(s) == 3
                && s["replaced"].as_u64() >= Some(1)
                && !s["ready"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["name"] == victim.as_str())
        },
    );
    assert!(
        s["failed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == victim.as_str()),
        "{s:#}"
    );

    // Reset while the pool runs: the same name, a guest from the pool.
    let before = container_id(st, "c1");
    let reset: Value = serde_json::from_str(&ok(st, &["guest", "reset", "c1", "--json"])).unwrap();
    assert_eq!(reset["name"], "c1");
    assert_eq!(reset["from_pool"], true, "{reset:#}");
    assert_ne!(reset["container_id"].as_str().unwrap(), before);

    // Stop: the unclaimed guests go, the claimed ones stay sessions.
    ok(st, &["pool", "stop"]);
    let names: Vec<String> = sessions(st)
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "c5"]);
    ok(st, &["guest", "stop", "--all"]);
    assert_eq!(containers_of(st), Vec::<String>::new());
}

#[test]
fn reset_keeps_the_name_and_drops_the_guests_state() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let _cleanup = Cleanup(st.to_path_buf());
    ok(
        st,
        &[
            "guest", "start", "--name", "r", "--memory", "768m", "--screen", "1024x768",
        ],
    );
    let before = container_id(st, "r");
    let exec = |id: &str, args: &[&str]| {
        let mut a = vec!["exec", id];
        a.extend_from_slice(args);
        docker(&a).status.success()
    };
    assert!(exec(&before, &["touch", "/home/user/left-by-the-task"]));
    assert!(exec(
        &before,
        &["test", "-e", "/home/user/left-by-the-task"]
    ));

    // A run's lock on the session: reset refuses without --force.
    let lock = host_cli::session::lock_session(
        &host_cli::session::Store::at(st.to_path_buf())
            .unwrap()
            .get("r")
            .unwrap(),
    )
    .unwrap();
    let out = run(st, &["guest", "reset", "r"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in use by a run") && err.contains("--force"),
        "{err}"
    );
    drop(lock);

    let v: Value = serde_json::from_str(&ok(st, &["guest", "reset", "r", "--json"])).unwrap();
    assert_eq!(v["name"], "r");
    assert_eq!(v["from_pool"], false);
    assert_eq!(
        v["screen"], "1024x768",
        "the recorded configuration is kept"
    );
    let after = v["container_id"].as_str().unwrap().to_string();
    assert_ne!(after, before);
    assert!(
        !exec(&after, &["test", "-e", "/home/user/left-by-the-task"]),
        "the old guest's file survived the reset"
    );
    let mem = docker(&["inspect", "-f", "{{.HostConfig.Memory}}", &after]);
    assert_eq!(
        String::from_utf8_lossy(&mem.stdout).trim(),
        (768 * 1024 * 1024).to_string()
    );
    assert_eq!(containers_of(st), vec![after[..12].to_string()]);
}

#[test]
fn a_supervisor_killed_with_9_leaves_nothing_gc_does_not_remove() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let _cleanup = Cleanup(st.to_path_buf());
    let mut sup = host_cli(st)
        .args(["pool", "start", "--size", "2", "--memory", "768m"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait_ready = |n: usize| {
        let end = Instant::now() + Duration::from_secs(90);
        loop {
            let out = run(st, &["pool", "status", "--json"]);
            if out.status.success() {
                let s: Value = serde_json::from_slice(&out.stdout).unwrap();
                if ready(&s) == n && s["starting"].as_array().unwrap().is_empty() {
                    return;
                }
            }
            assert!(Instant::now() < end, "the pool did not get {n} ready");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_ready(2);
    ok(st, &["guest", "start", "--pool", "--name", "mine"]);
    wait_ready(2);
    assert_eq!(containers_of(st).len(), 3);
    sup.kill().unwrap(); // SIGKILL
    sup.wait().unwrap();

    let out = ok(st, &["guest", "gc"]);
    assert_eq!(out.matches("removed pool guest").count(), 2, "{out}");
    // Only the claimed guest is left: it is the claimer's session.
    let left = containers_of(st);
    assert_eq!(
        left,
        vec![container_id(st, "mine")[..12].to_string()],
        "{out}"
    );
    let names: Vec<Value> = sessions(st).iter().map(|s| s["name"].clone()).collect();
    assert_eq!(names, ["mine"]);
    // A second gc finds nothing more.
    let again = ok(st, &["guest", "gc"]);
    assert_eq!(again.trim(), "nothing to clean up", "first gc: {out}");
    ok(st, &["guest", "stop", "mine"]);
    assert!(containers_of(st).is_empty());
}

#[test]
fn a_failing_image_stops_the_refilling_and_status_says_why() {
    if !docker_engine() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let _cleanup = Cleanup(st.to_path_buf());
    let image = "sandtop-guest:no-such-tag-for-the-pool-test";
    ok(
        st,
        &["pool", "start", "--detach", "--size", "1", "--image", image],
    );
    let s = wait_status(st, "halted", Duration::from_secs(60), |s| {
        !s["halted"].is_null()
    });
    let why = s["halted"].as_str().unwrap();
    assert!(
        why.contains("3 failed starts in a row") && why.contains(image),
        "{why}"
    );
    assert!(
        ready(&s) == 0 && s["failed"].as_array().unwrap().len() == 3,
        "{s:#}"
    );
    let human = ok(st, &["pool", "status"]);
    assert!(
        human.contains("NOT REFILLING") && human.contains(image),
        "{human}"
    );
    // A claim says why at once, without waiting.
    let t = Instant::now();
    let out = run(st, &["guest", "start", "--pool", "--name", "x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stopped refilling") && err.contains(image),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    ok(st, &["pool", "stop"]);
    assert!(containers_of(st).is_empty());
}

#[test]
fn without_a_pool_a_claim_says_so_and_the_pools_limits_are_checked() {
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    let out = run(st, &["guest", "start", "--pool"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no pool is running") && err.contains("host-cli pool start"),
        "{err}"
    );

    let out = run(
        st,
        &[
            "pool",
            "start",
            "--size",
            "4",
            "--memory",
            "1g",
            "--pool-memory",
            "3g",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("4 guests at 1024 MiB each needs 4096 MiB, more than the 3072 MiB"),
        "{err}"
    );
    let out = run(st, &["pool", "start", "--backend", "local"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("docker guests only"));
    // The guest flags are the pool's: refused beside --pool.
    let out = run(st, &["guest", "start", "--pool", "--screen", "800x600"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    let out = run(st, &["pool", "status"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no pool is running"));
}
