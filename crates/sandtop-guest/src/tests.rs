//! Unit tests of the guest module: readiness and states, a failed start
//! and what it leaves, the errors callers match on, gc's report.

use std::path::Path;

use super::*;
use crate::session::remove::tests::{CHILD, GUEST, OTHER, check_child, chown_tree, rerun};

fn request(name: &str) -> StartRequest {
    StartRequest {
        name: name.into(),
        screen: Size::new(640, 480),
        network: sandtop_egress::service::EgressConfig::none(),
    }
}

fn docker_record(name: &str) -> SessionRecord {
    SessionRecord {
        name: name.into(),
        screen: Size::new(640, 480),
        created_unix: 1,
        guest: crate::session::BackendRecord::Docker(crate::session::DockerRecord {
            container_id: "c0ffee".into(),
            container_name: format!("sandtop-{name}"),
            image: "sandtop-guest:latest".into(),
        }),
        network: None,
        egress_pid: None,
    }
}

/// A backend whose start fails the way a slow guest does.
struct NeverReady;

impl Backend for NeverReady {
    async fn start(&self, dir: &SessionDir, _req: &StartRequest) -> Result<SessionRecord> {
        // What a real start leaves in the folder before it fails.
        std::fs::write(dir.log_path(), b"booting").unwrap();
        Err(GuestError::NotReady {
            kind: "guest",
            waited: std::time::Duration::from_secs(1),
            last: None,
            log: "booting".into(),
        })
    }
    async fn stop(&self, _: &SessionDir, _: &SessionRecord) -> Result<()> {
        unreachable!("nothing to stop")
    }
    async fn connector(&self, _: &SessionDir, _: &SessionRecord) -> Result<Box<dyn Connect>> {
        unreachable!("never connected")
    }
    async fn alive(&self, _: &SessionDir, _: &SessionRecord) -> bool {
        false
    }
    async fn logs(&self, _: &SessionDir, _: &SessionRecord) -> Result<String> {
        Ok(String::new())
    }
}

#[tokio::test]
async fn a_failed_start_returns_the_backends_error_and_leaves_no_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::at(tmp.path().join("state")).unwrap();
    let e = start(&store, &NeverReady, &request("slow"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, GuestError::NotReady { kind: "guest", .. }),
        "{e:?}"
    );
    assert!(
        matches!(
            store.get("slow"),
            Err(crate::session::SessionError::NotFound(_))
        ),
        "the folder of a failed start is left"
    );
    // A name taken by another session is refused before any backend
    // runs, as the store's own error.
    store.create("taken").unwrap();
    let e = start(&store, &NeverReady, &request("taken"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, GuestError::Session(crate::session::SessionError::Exists(ref n)) if n == "taken"),
        "{e:?}"
    );
}

#[tokio::test]
async fn reaching_a_session_whose_daemon_is_gone_is_a_channel_error() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::at(tmp.path().join("state")).unwrap();
    let dir = store.create("gone").unwrap();
    sandtop_client::Token::generate()
        .unwrap()
        .write_new(&dir.token_path())
        .unwrap();
    let mut rec = docker_record("gone");
    rec.guest = crate::session::BackendRecord::Local(crate::session::LocalRecord { pid: i32::MAX });
    let e = open_channel(&dir, &rec).await.unwrap_err();
    assert!(
        matches!(&e, GuestError::Channel { name, .. } if name == "gone"),
        "{e:?}"
    );
    assert!(
        e.chain()
            .starts_with("opening the channel to session gone: "),
        "{}",
        e.chain()
    );
    // Without its token file, the token is what is missing.
    std::fs::remove_file(dir.token_path()).unwrap();
    let e = open_channel(&dir, &rec).await.unwrap_err();
    assert!(
        matches!(
            e,
            GuestError::Token(sandtop_client::TokenError::Read { .. })
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_backend_refuses_a_record_of_another_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::at(tmp.path().join("state")).unwrap();
    let dir = store.create("other").unwrap();
    let e = local::LocalBackend
        .stop(&dir, &docker_record("other"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, GuestError::NotThisBackend("local process")),
        "{e:?}"
    );
}

#[test]
fn a_guest_is_ready_only_when_its_health_is_ok() {
    let health = |status: &str, wm: Option<bool>| -> sandtop_protocol::Health {
        serde_json::from_value(serde_json::json!({
            "status": status, "x_connected": status != "down",
            "display": {"width": 1280, "height": 800},
            "window_manager": wm, "display_restarts": 0, "uptime_ms": 1,
        }))
        .unwrap()
    };
    assert!(ready(&health("ok", Some(true))));
    assert!(ready(&health("ok", None)));
    assert!(!ready(&health("degraded", Some(false))));
    assert!(!ready(&health("down", Some(false))));
}

#[test]
fn states_follow_the_daemons_lifecycle_and_the_guests_existence() {
    let cases = [
        (true, Probe::Answered(DaemonState::Open), "running"),
        (true, Probe::Answered(DaemonState::Draining), "draining"),
        (true, Probe::Answered(DaemonState::Closed), "closed"),
        (true, Probe::Refused, "closed"),
        (true, Probe::Silent, "unresponsive"),
        (false, Probe::Answered(DaemonState::Open), "exited"),
        (false, Probe::Refused, "exited"),
        (false, Probe::Silent, "exited"),
    ];
    for (alive, probe, word) in cases {
        let st = classify(alive, probe);
        assert_eq!(st.to_string(), word, "{alive} {probe:?}");
        // `guest ls --json` uses the same words.
        assert_eq!(serde_json::to_value(st).unwrap(), word, "{alive} {probe:?}");
    }
}

#[test]
fn gc_goes_on_past_a_folder_it_cannot_remove_and_reports_it() {
    if let Some(dir) = std::env::var_os(CHILD) {
        gc_case(Path::new(&dir));
        return;
    }
    if !rustix::process::geteuid().is_root() {
        println!("SKIP: making a directory of another uid needs root");
        return;
    }
    // Three stale folders (no record, no live creator) of the guest's
    // uid; in the first, the guest left a directory of another account
    // with a file, which the guest's uid cannot remove.
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::at(tmp.path().join("state")).unwrap();
    for name in ["a-stuck", "b-stale", "c-stale"] {
        let d = store.create(name).unwrap();
        std::fs::create_dir(d.guest_path()).unwrap();
        std::fs::write(d.guest_path().join("file"), b"x").unwrap();
    }
    let theirs = tmp.path().join("state/sessions/a-stuck/guest/theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("file"), b"x").unwrap();
    chown_tree(tmp.path(), GUEST);
    chown_tree(&theirs, OTHER);
    let f = "gc_goes_on_past_a_folder_it_cannot_remove_and_reports_it";
    let Some(out) = rerun(module_path!(), f, tmp.path(), Some(GUEST)) else {
        return;
    };
    check_child(&out, tmp.path());
}

fn gc_case(dir: &Path) {
    let store = Store::at(dir.join("state")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut report = GcReport::default();
    rt.block_on(gc_folders(&store, None, &mut report)).unwrap();
    assert_eq!(report.failures, 1, "{report:?}");
    assert_eq!(report.lines.len(), 3, "{report:?}");
    let stuck = &report.lines[0];
    assert!(
        stuck.starts_with("could not remove session folder a-stuck: ")
            && stuck.contains("guest/theirs/file")
            && stuck.contains(&format!("uid {OTHER}")),
        "{stuck}"
    );
    for (line, name) in report.lines[1..].iter().zip(["b-stale", "c-stale"]) {
        assert!(
            line.starts_with(&format!("removed session folder {name}: ")),
            "{line}"
        );
    }
    let left: Vec<String> = store
        .folders()
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(left, vec!["a-stuck".to_string()]);
    // Everything of a-stuck but the other account's directory is gone.
    let a = dir.join("state/sessions/a-stuck");
    let mut rest: Vec<String> = walk(&a);
    rest.sort();
    assert_eq!(
        rest,
        ["guest", "guest/theirs", "guest/theirs/file"],
        "{rest:?}"
    );
    std::fs::write(dir.join("child-done"), b"").unwrap();
}

fn walk(top: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![top.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(top).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn a_session_is_named_or_the_only_running_one() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::at(tmp.path().join("state")).unwrap();
    let e = resolve_session(&store, None).await.unwrap_err();
    assert!(matches!(e, GuestError::NoneRunning), "{e:?}");
    let e = resolve_session(&store, Some("nope")).await.unwrap_err();
    assert!(
        matches!(e, GuestError::Session(crate::session::SessionError::NotFound(ref n)) if n == "nope"),
        "{e:?}"
    );
    // A session whose guest is gone is not running: still none.
    let dir = store.create("gone").unwrap();
    let mut rec = docker_record("gone");
    rec.guest = crate::session::BackendRecord::Local(crate::session::LocalRecord { pid: i32::MAX });
    dir.save(&rec).unwrap();
    let e = resolve_session(&store, None).await.unwrap_err();
    assert!(matches!(e, GuestError::NoneRunning), "{e:?}");
    // Named, it is found whatever its state.
    let (d, r) = resolve_session(&store, Some("gone")).await.unwrap();
    assert_eq!((d.name.as_str(), r.name.as_str()), ("gone", "gone"));
    let e = GuestError::SeveralRunning {
        names: vec!["a".into(), "b".into()],
    };
    assert_eq!(
        e.to_string(),
        "2 sessions are running (a, b): pick one with --session NAME"
    );
}
