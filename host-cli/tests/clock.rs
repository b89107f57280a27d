//! The guest's fake clock (E tier, docs/contract.md rule
//! 53): once the host sets the time (`POST /v1/clock`, what a replay does
//! before each step), a program the window manager started reads it, its
//! `date` and the date of a file it writes (`stat`, which reads it with
//! `statx`, as GLib's file dialogs do), and a page's `Date` in the
//! daemon's Firefox (whose content processes are sandboxed); set back,
//! they read the real time.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sandtop_testkit::skip;
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

fn host_cli(state: &Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env_remove("OPENAI_API_KEY");
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Stops the guest however the test ends.
struct Guard {
    state: PathBuf,
    name: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = host_cli(&self.state)
            .args(["guest", "stop", &self.name])
            .output();
    }
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn a_program_the_window_manager_started_reads_the_time_the_host_set() {
    if !skip::docker_guest() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let name = "clocktest".to_string();
    let _guard = Guard {
        state: state.clone(),
        name: name.clone(),
    };
    ok(host_cli(&state).args(["guest", "start", "--name", &name]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let channel = || async {
        let store = host_cli::session::Store::at(state.clone()).unwrap();
        let dir = store.get(&name).unwrap();
        let rec = dir.load().unwrap();
        host_cli::guest::open_channel(&dir, &rec).await.unwrap()
    };
    let set = |unix_ms: Option<u64>| {
        rt.block_on(async { channel().await.set_clock(unix_ms).await.unwrap() })
    };
    let read = |path: &str| -> Option<String> {
        rt.block_on(async { channel().await.read_file(path).await.unwrap() })
            .map(|b| String::from_utf8(b).unwrap())
    };
    let act = |actions: &Value| {
        let out = ok(host_cli(&state).args(["act", "--session", &name, &actions.to_string()]));
        let r: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["ok"], true, "{r}");
    };
    // Three days, 17 minutes and 23 seconds ago: a recorded run's time.
    let recorded_s = now_s() - 3 * 86_400 - 17 * 60 - 23;
    let offset = set(Some(recorded_s as u64 * 1000))
        .expect("the guest keeps no fake clock (is the image older than this tree?)");
    assert!(
        (offset + 3 * 86_400 + 17 * 60 + 23).abs() <= 2,
        "offset {offset}"
    );
    // A page's `Date`, in the daemon's Firefox (the demo form's page), first:
    // the terminal opened next stays in front of it.
    let page_s = rt.block_on(async {
        let mut ch = channel().await;
        let go = sandtop_protocol::BrowserCall::Navigate {
            tab_id: None,
            url: "http://127.0.0.1:8080/".to_string(),
        };
        ch.browser_call(&go).await.unwrap();
        let run = sandtop_protocol::BrowserCall::RunScript {
            tab_id: None,
            source: "String(Math.floor(Date.now() / 1000))".to_string(),
            timeout_ms: 5000,
        };
        match ch.browser_call(&run).await.unwrap().outcome {
            sandtop_protocol::BrowserOutcome::Text { text } => text.parse::<i64>().unwrap(),
            other => panic!("{other:?}"),
        }
    });
    let elapsed = now_s() - (recorded_s + 3 * 86_400 + 17 * 60 + 23);
    assert!(
        (recorded_s - 2..=recorded_s + elapsed + 2).contains(&page_s),
        "the page read {page_s}, the host set {recorded_s} ({elapsed} s ago)"
    );
    // The terminal, started by the window manager (Super+T), writes what
    // it reads of the time.
    act(&serde_json::json!([{"type": "keypress", "keys": ["SUPER", "T"]}, {"type": "wait"}]));
    let line = "date -u +%s > /home/user/clock-date; touch /home/user/clock-made; \
                stat -c %Y /home/user/clock-made > /home/user/clock-mtime\n";
    let wait_for = |path: &str| -> i64 {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(text) = read(path).filter(|t| t.ends_with('\n')) {
                return text.trim().parse().unwrap();
            }
            assert!(Instant::now() < deadline, "{path} never written");
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    // The shell may not read keys yet: type again until it has run.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (date, mtime) = loop {
        act(&serde_json::json!([{"type": "type", "text": line}, {"type": "wait"}]));
        if read("/home/user/clock-mtime").is_some() {
            break (
                wait_for("/home/user/clock-date"),
                wait_for("/home/user/clock-mtime"),
            );
        }
        assert!(Instant::now() < deadline, "the terminal never ran the line");
        std::thread::sleep(Duration::from_secs(2));
    };
    let elapsed = now_s() - (recorded_s + 3 * 86_400 + 17 * 60 + 23);
    for (what, t) in [("date", date), ("a new file's date", mtime)] {
        assert!(
            (recorded_s - 2..=recorded_s + elapsed + 2).contains(&t),
            "{what} read {t}, the host set {recorded_s} ({elapsed} s ago)"
        );
    }
    // Back to the real time: the same program, the same file, now real.
    assert_eq!(set(None), Some(0));
    // libfaketime re-reads the shift at most once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let before = now_s();
    act(&serde_json::json!([{
        "type": "type",
        "text": "date -u +%s > /home/user/clock-real; stat -c %Y /home/user/clock-made > /home/user/clock-mtime2\n"
    }]));
    let real = wait_for("/home/user/clock-real");
    let mtime2 = wait_for("/home/user/clock-mtime2");
    assert!(
        (before - 2..=now_s() + 2).contains(&real),
        "real {real}, now {before}"
    );
    // The file was written at the real time `mtime - offset`.
    assert!(
        (mtime2 - (mtime - offset)).abs() <= 2,
        "{mtime2} vs {mtime}"
    );
}
