//! The offline exercise end to end on the real guest (E tier): the CI
//! smoke test in Docker. `host-cli exercise` boots a guest, the scripted
//! model drives it through the real loop (its safety check approved by
//! `--approve-scripted-checks`), and the result is checked against the demo
//! app's stored record and the saved file inside the guest.
//!
//! The browser exercise (`exercise --browser`) likewise, through the
//! browser tools.
//!
//! Also: without a terminal the exercise's safety check is denied (the run
//! stops, exit non-zero); Ctrl-C stops a run and removes the guest it
//! booted; a second run on a session is refused.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use host_cli::agent::record::{Entry, LedgerState, read_trajectory};
use sandtop_testkit::skip;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

/// Whether Docker answers and the guest image exists; prints the skip
/// line (or fails when SANDTOP_REQUIRE lists docker) otherwise.
fn docker_ready() -> bool {
    skip::docker_guest()
}

fn containers_of(state: &std::path::Path) -> Vec<String> {
    sandtop_testkit::docker::session_containers(state)
        .into_iter()
        .map(|(_, dir)| dir)
        .collect()
}

/// host-cli as a child in a session of its own: no controlling terminal,
/// whatever the test runs from, so it can never prompt on a developer's
/// terminal (and hang there) when a test expects no terminal at all.
fn host_cli(state: &std::path::Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env_remove("OPENAI_API_KEY");
    c
}

/// The session a process leads or belongs to (field 6 of /proc/PID/stat).
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count after its ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

#[test]
fn the_exercise_passes_against_the_apps_own_records() {
    if !docker_ready() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = host_cli(state.path())
        .args(["exercise", "--approve-scripted-checks"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("exercise took {:?}", t.elapsed());
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("ok   the demo app stored the submission"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok   the editor saved the note"),
        "{stdout}"
    );
    assert!(stdout.contains("\"ending\": \"finished\""), "{stdout}");
    // The approval really happened, and before any action: the trajectory
    // has the check approved before the first ledger entry.
    let runs = state.path().join("runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // Read through the trajectory's own type: a misspelt field fails here.
    let entries = read_trajectory(&run).unwrap();
    let check = entries
        .iter()
        .position(|e| matches!(e, Entry::SafetyChecks { .. }))
        .expect("a safety check was raised");
    let first_ledger = entries
        .iter()
        .position(|e| matches!(e, Entry::Ledger { .. }))
        .expect("an action was recorded");
    assert!(
        check < first_ledger,
        "the check was decided before anything ran"
    );
    assert!(
        entries
            .iter()
            .any(|e| matches!(e, Entry::SafetyChecks { decision, .. } if decision == "approved")),
        "{entries:#?}"
    );
    assert!(
        containers_of(state.path()).is_empty(),
        "the exercise left its guest behind"
    );
}

/// The browser exercise (the browser toolset, docs/contract.md rules 27-38): the scripted model works through the
/// browser tools only; every state-changing call was approved before it
/// reached the browser; the demo app's record and the run's own record
/// are checked by the exercise itself.
#[test]
fn the_browser_exercise_fills_the_form_through_refs_and_refuses_outside_and_stale() {
    if !docker_ready() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    // Sign-in (rule 47): the operator's credentials file, with canary
    // values searched for afterwards in everything host-cli wrote.
    let secrets = tempfile::tempdir().unwrap();
    let password = format!("canary-pw-{}", std::process::id());
    let code = "905217";
    let credentials = secrets.path().join("credentials.json");
    std::fs::write(
        &credentials,
        serde_json::json!({"http://127.0.0.1:8080": {
            "email": "canary.signin@example.test", "password": password, "code": code,
        }})
        .to_string(),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        // Mode 0644 is refused before a guest boots.
        std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out = host_cli(state.path())
            .args([
                "exercise",
                "--browser",
                "--approve-scripted-checks",
                "--credentials",
            ])
            .arg(&credentials)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("chmod 600"), "{stderr}");
        assert!(containers_of(state.path()).is_empty());
        std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let t = Instant::now();
    let out = host_cli(state.path())
        .args([
            "exercise",
            "--browser",
            "--approve-scripted-checks",
            "--credentials",
        ])
        .arg(&credentials)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("browser exercise took {:?}", t.elapsed());
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("ok   the demo app stored the submission"),
        "{stdout}"
    );
    // The credentials file answered without a question, and the operator
    // was told which origin got which fields (docs/security.md L14).
    assert!(
        stderr.contains("http://127.0.0.1:8080 received")
            && stderr.contains("(password)")
            && stderr.contains("--credentials file"),
        "{stderr}"
    );
    assert!(
        stdout.contains("ok   the run refused the outside navigation before any question"),
        "{stdout}"
    );
    // The exercise's own checks: the demo app's record, and its search of
    // the run folder, the session folder (egress journal) and the
    // container's log.
    assert!(
        stdout.contains("ok   the demo app's record shows the sign-in reached the protected page"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok   the password and the code are in none of"),
        "{stdout}"
    );
    // And here: host-cli's stdout and stderr, and every file it left.
    for canary in [password.as_str(), code] {
        assert!(!stdout.contains(canary), "{canary} on stdout");
        assert!(!stderr.contains(canary), "{canary} on stderr");
        for f in walk_files(state.path()) {
            let bytes = std::fs::read(&f).unwrap_or_default();
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
                "{canary} in {}",
                f.display()
            );
        }
    }
    let run = std::fs::read_dir(state.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let entries = read_trajectory(&run).unwrap();
    // Every call that reached the browser's ledger was approved first.
    for (i, e) in entries.iter().enumerate() {
        if let Entry::Ledger {
            call_id,
            state: LedgerState::Pending,
            ..
        } = e
        {
            assert!(
                entries[..i].iter().any(|a| matches!(a,
                    Entry::BrowserApproval { call_id: c, decision, .. }
                        if c == call_id && decision == "approved")),
                "{call_id} ran without an approval"
            );
        }
    }
    let approvals = entries
        .iter()
        .filter(|e| matches!(e, Entry::BrowserApproval { .. }))
        .count();
    // navigate, reload, three types and the click; then the login page,
    // Sign in and Verify (sign-in requests are answered from the
    // credentials file, not approved as browser calls). The stale type is
    // refused when its target is read again, before anyone is asked
    // (docs/contract.md rule 28a).
    assert_eq!(approvals, 9, "{stdout}");
    let sign_ins: Vec<(&str, Option<&str>)> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::SignIn { status, source, .. } => Some((status.as_str(), source.as_deref())),
            _ => None,
        })
        .collect();
    assert_eq!(
        sign_ins,
        [("submitted", Some("file")), ("submitted", Some("file"))]
    );
    // No desktop screenshot went to the model.
    assert!(
        !entries
            .iter()
            .any(|e| matches!(e, Entry::Observation { .. }))
    );
    assert!(containers_of(state.path()).is_empty());
}

#[test]
fn without_a_terminal_the_safety_check_is_denied_and_nothing_runs() {
    if !docker_ready() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    // `run` without OPENAI_API_KEY is the exercise; no terminal, no policy,
    // no --approve-scripted-checks: the check must be denied.
    let out = host_cli(state.path()).arg("run").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 3: denied, as `host-cli run` with a model says it.
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("\"ending\": \"denied\""), "{stdout}");
    let runs = state.path().join("runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let entries = read_trajectory(&run).unwrap();
    assert!(
        !entries.iter().any(|e| matches!(e, Entry::Ledger { .. })),
        "an action was sent though the check was denied"
    );
    assert!(
        entries.iter().any(
            |e| matches!(e, Entry::SafetyChecks { decision, .. } if decision.starts_with("denied"))
        ),
        "{entries:#?}"
    );
    assert!(containers_of(state.path()).is_empty());
}

#[test]
fn ctrl_c_stops_the_run_and_removes_the_guest_it_booted() {
    if !docker_ready() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let mut child = host_cli(state.path())
        .args(["exercise", "--approve-scripted-checks"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the run is under way (a trajectory exists).
    let end = Instant::now() + Duration::from_secs(60);
    let runs = state.path().join("runs");
    loop {
        let started = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| std::fs::read_to_string(e.path().join("trajectory.jsonl")).ok())
            .is_some_and(|t| t.contains("\"kind\":\"ledger\""));
        if started {
            break;
        }
        assert!(Instant::now() < end, "the run did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        session_of(child.id()),
        Some(child.id()),
        "host-cli should lead a session of its own (no controlling terminal)"
    );
    let status = sandtop_testkit::command::interrupt(&mut child, Duration::from_secs(30));
    // 130: interrupted (128 + SIGINT, as shells report it).
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        containers_of(state.path()).is_empty(),
        "Ctrl-C left the guest behind"
    );
}

#[test]
fn a_second_run_on_a_session_is_refused() {
    if !docker_ready() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let out = host_cli(state.path())
        .args(["guest", "start", "--name", "one"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut first = host_cli(state.path())
        .args(["exercise", "--session", "one", "--approve-scripted-checks"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the first run to hold the lock.
    let lock = state.path().join("sessions/one/run.lock");
    let end = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&lock).is_ok_and(|s| !s.trim().is_empty()) {
        assert!(Instant::now() < end, "the first run never took the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = host_cli(state.path())
        .args(["exercise", "--session", "one", "--approve-scripted-checks"])
        .output()
        .unwrap();
    let _ = first.kill();
    let _ = first.wait();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(
        stderr.contains("another run is active on session one"),
        "{stderr}"
    );
    let out = host_cli(state.path())
        .args(["guest", "stop", "--all"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(containers_of(state.path()).is_empty());
}

/// Every regular file under `dir` (links not followed).
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}
