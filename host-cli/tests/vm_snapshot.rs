//! VM snapshots (docs/contract.md rules 85-88, docs/security.md V8), E tier, under the accelerator this
//! host has (TCG here). One run:
//!
//! - a `guest snapshot` killed with -9 during its boot leaves a session
//!   that `guest gc` removes, its QEMU ended;
//! - `guest snapshot` boots a VM to the moment it waits for the host and
//!   saves it (into a folder of the test: `SANDTOP_VM_SNAPSHOTS`); no
//!   session is left;
//! - a cold boot of the same configuration (`SANDTOP_VM_SNAPSHOT=0`), for
//!   the figures of the same run;
//! - three clones started from the snapshot (`guest start` says so): each
//!   answers actions (a terminal opened with Super+T, a command typed into
//!   it); their kernels' random states differ (16 bytes of `/dev/urandom`
//!   read in each are pairwise different, and each console shows the
//!   kernel's "crng reseeded due to virtual machine fork"); each clock is
//!   the host's, not the snapshot's (the time read in the guest falls
//!   between the host's before and after, while the snapshot is older
//!   than the cold boot by then); each has its own token (one clone's
//!   token does not open another's daemon);
//! - a clone's start is faster than the cold boot (both measured from
//!   QEMU's start to ready, as `guest start` reports it).
//!
//! Prerequisites: `qemu-system-<arch>` and the VM image (`make guest-vm`),
//! else `SKIP qemu` (a failure when SANDTOP_REQUIRE lists qemu).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sandtop_testkit::skip;
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");
const RESEEDED: &str = "crng reseeded due to virtual machine fork";

fn vm_ready() -> bool {
    let qemu = host_cli::guest::qemu::qemu_program();
    if !skip::have(&qemu) {
        return skip::skip("qemu", &format!("{qemu} is not installed"));
    }
    if let Err(e) = host_cli::guest::qemu::VmImage::locate() {
        return skip::skip("qemu", &e.to_string());
    }
    if !host_cli::guest::qemu::supports_vmgenid() {
        return skip::skip(
            "qemu",
            "no VM generation ID on this architecture: no snapshots",
        );
    }
    true
}

/// host-cli with no standard input, the test's state and snapshot folders.
fn host_cli(state: &Path, snapshots: &Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env("SANDTOP_VM_SNAPSHOTS", snapshots)
        .env_remove("SANDTOP_VM_PROBE")
        .env_remove("SANDTOP_VM_SNAPSHOT")
        .env_remove("OPENAI_API_KEY");
    c
}

fn ok(c: &mut Command) -> (String, String) {
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{c:?} failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout),
    );
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

/// The seconds `guest start` reported from QEMU's start to ready.
fn ready_secs(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("VM ready "))
        .unwrap_or_else(|| panic!("no ready line: {stderr}"));
    line.split("VM ready ")
        .nth(1)
        .and_then(|r| r.split(" s").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {line}"))
}

/// Removes the sessions on every way out of the test.
struct Guard {
    state: PathBuf,
    snapshots: PathBuf,
    names: Vec<String>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = host_cli(&self.state, &self.snapshots)
                .args(["guest", "stop", n])
                .output();
        }
    }
}

/// The share of the desktop's pixels (the panel's rows left out) that
/// are not its background colour: about 0 for the empty desktop.
fn lit_share(png_bytes: &[u8]) -> f64 {
    use sandtop_protocol::desktop::{DESKTOP_BACKGROUND, PANEL_HEIGHT};
    sandtop_testkit::pixels::share_not(png_bytes, DESKTOP_BACKGROUND, PANEL_HEIGHT)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The session of a `guest snapshot` under way, once its QEMU runs.
fn snapshot_session(store: &host_cli::session::Store) -> host_cli::session::SessionDir {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found =
            store.list().unwrap_or_default().into_iter().find(|(d, r)| {
                d.name.starts_with("snapshot-") && r.qemu().is_some_and(|q| q.pid > 0)
            });
        if let Some((dir, _)) = found {
            return dir;
        }
        assert!(Instant::now() < deadline, "no snapshot session appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The command lines of the processes that name `folder`.
fn processes_of(folder: &Path) -> Vec<String> {
    let needle = folder.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle))
        .collect()
}

fn p50(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn snapshot_clones_start_fast_each_with_its_own_random_state_clock_and_token() {
    if !vm_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let snapshots = tmp.path().join("snapshots");
    let cli = || host_cli(&state, &snapshots);
    let clones = ["clone-a", "clone-b", "clone-c"];
    let _guard = Guard {
        state: state.clone(),
        snapshots: snapshots.clone(),
        names: ["cold", "damaged"]
            .into_iter()
            .chain(clones)
            .map(String::from)
            .collect(),
    };

    // 0. A `guest snapshot` killed with -9 during its boot: `guest gc`
    // ends its VM and removes its session.
    let store = host_cli::session::Store::at(state.clone()).unwrap();
    let mut killed = cli()
        .args(["guest", "snapshot"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let boot = snapshot_session(&store);
    std::thread::sleep(Duration::from_secs(1));
    killed.kill().unwrap();
    killed.wait().unwrap();
    let (out, _) = ok(cli().args(["guest", "gc"]));
    assert!(out.contains(&boot.name), "{out}");
    assert!(!boot.path.exists(), "{out}");
    let left = processes_of(&boot.path);
    assert!(
        left.is_empty(),
        "processes of the killed snapshot left: {left:?}"
    );

    // 0b. One stopped by Ctrl-C during its boot ends at once (130) and
    // leaves nothing, with no `guest gc`: no session, no QEMU, no partial
    // state file.
    let mut stopped = cli()
        .args(["guest", "snapshot"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let boot = snapshot_session(&store);
    std::thread::sleep(Duration::from_secs(1));
    let status = sandtop_testkit::command::interrupt(&mut stopped, Duration::from_secs(30));
    let mut said = String::new();
    std::io::Read::read_to_string(&mut stopped.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("interrupted by Ctrl-C"), "{said}");
    assert!(!boot.path.exists(), "its session is left: {said}");
    let left = processes_of(&boot.path);
    assert!(
        left.is_empty(),
        "processes of the stopped snapshot left: {left:?}"
    );
    let files: Vec<_> = std::fs::read_dir(&snapshots)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        files.is_empty(),
        "the stopped snapshot left files: {files:?}"
    );

    // 1. The snapshot.
    let t = Instant::now();
    let (out, _) = ok(cli().args(["guest", "snapshot", "--json"]));
    let made = Instant::now();
    let snap: Value = serde_json::from_str(&out).unwrap();
    let file = PathBuf::from(snap["state"].as_str().unwrap());
    assert!(file.starts_with(&snapshots) && file.is_file(), "{snap}");
    eprintln!(
        "snapshot: {:.1} s in all (boot to the wait {:.1} s, saving {:.1} s), {} MiB",
        t.elapsed().as_secs_f64(),
        snap["boot_ms"].as_f64().unwrap() / 1000.0,
        snap["save_ms"].as_f64().unwrap() / 1000.0,
        snap["bytes"].as_u64().unwrap() / (1024 * 1024)
    );
    let sessions = state.join("sessions");
    let left: Vec<_> = std::fs::read_dir(&sessions)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "the snapshot's session is left: {left:?}");

    // 2. A cold boot of the same configuration, in the same run.
    let t = Instant::now();
    let (_, err) = ok(cli().env("SANDTOP_VM_SNAPSHOT", "0").args([
        "guest",
        "start",
        "--backend",
        "qemu",
        "--name",
        "cold",
    ]));
    let cold_wall = t.elapsed().as_secs_f64();
    assert!(!err.contains("from its snapshot"), "{err}");
    let cold = ready_secs(&err);
    ok(cli().args(["guest", "stop", "cold"]));

    // 3. Clones.
    let mut ready = Vec::new();
    let mut walls = Vec::new();
    for name in clones {
        let t = Instant::now();
        let (_, err) = ok(cli().args(["guest", "start", "--backend", "qemu", "--name", name]));
        walls.push(t.elapsed().as_secs_f64());
        assert!(err.contains("from its snapshot"), "{name}: {err}");
        ready.push(ready_secs(&err));
    }
    eprintln!(
        "cold boot to ready {cold:.1} s (guest start {cold_wall:.1} s); from the snapshot \
         {ready:.1?} s, p50 {:.1} s (guest start {walls:.1?} s)",
        p50(&ready)
    );
    assert!(
        p50(&ready) < cold,
        "starting from the snapshot ({ready:?} s) is not faster than booting ({cold:.1} s)"
    );

    // 4. Each clone: a terminal, 16 random bytes and the clock read in it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let read = |name: &str, path: &str| -> Option<Vec<u8>> {
        rt.block_on(async {
            let dir = store.get(name).unwrap();
            let rec = dir.load().unwrap();
            let mut ch = host_cli::guest::open_channel(&dir, &rec).await.unwrap();
            ch.read_file(path).await.unwrap()
        })
    };
    let shots = tmp.path().join("shots");
    std::fs::create_dir(&shots).unwrap();
    let mut seen = Vec::new();
    for name in clones {
        let act = |actions: &str| {
            let (out, _) = ok(cli().args(["act", "--session", name, actions]));
            let r: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(r["ok"], true, "{name}: {r}");
        };
        act(r#"[{"type":"keypress","keys":["SUPER","T"]},{"type":"wait"}]"#);
        let shot = shots.join(format!("{name}.png"));
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let _ = std::fs::remove_file(&shot);
            ok(cli()
                .args(["screenshot", "--session", name, "-o"])
                .arg(&shot));
            if lit_share(&std::fs::read(&shot).unwrap()) > 0.2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: no terminal after Super+T"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        let before = unix_now();
        act(&serde_json::json!([{"type": "type", "text":
            "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > ~/rng; date +%s > ~/now\n"}])
        .to_string());
        let deadline = Instant::now() + Duration::from_secs(60);
        // `now` is written after `rng` is complete: read in that order.
        let (rng, now) = loop {
            if let Some(n) = read(name, "/home/user/now")
                && !n.is_empty()
                && let Some(r) = read(name, "/home/user/rng")
            {
                break (String::from_utf8(r).unwrap(), String::from_utf8(n).unwrap());
            }
            assert!(Instant::now() < deadline, "{name}: the command never ran");
            std::thread::sleep(Duration::from_millis(200));
        };
        let after = unix_now();
        let guest_now: i64 = now.trim().parse().unwrap();
        let age = made.elapsed().as_secs();
        eprintln!(
            "{name}: urandom {rng}, clock {guest_now} read between the host's {before} and \
             {after} (the snapshot is {age} s old)"
        );
        assert_eq!(rng.len(), 32, "{name}: {rng:?}");
        // The command ran between `before` and `after` by the host's
        // clock; a clock left at the snapshot's would be `age` s behind.
        assert!(
            (before - 2..=after + 2).contains(&guest_now),
            "{name}: the guest's clock ({guest_now}) is not the host's ({before}..{after}); \
             the snapshot is {age} s old"
        );
        let (logs, _) = ok(cli().args(["guest", "logs", name]));
        assert!(logs.contains(RESEEDED), "{name}'s console:\n{logs}");
        seen.push(rng);
    }
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            assert_ne!(a, b, "two clones read the same random bytes");
        }
    }

    // 5. Each clone has its own token: clone-a's does not open clone-b.
    let token_of = |name: &str| {
        host_cli::secret::Secret::read(&store.get(name).unwrap().token_path()).unwrap()
    };
    assert_ne!(token_of("clone-a").expose(), token_of("clone-b").expose());
    let b_socket = store.get("clone-b").unwrap().socket_path();
    let wrong = rt.block_on(host_cli::channel::Channel::open(
        Box::new(host_cli::channel::UnixConnector(b_socket.clone())),
        token_of("clone-a"),
    ));
    assert!(wrong.is_err(), "clone-a's token opened clone-b's daemon");
    let right = rt.block_on(host_cli::channel::Channel::open(
        Box::new(host_cli::channel::UnixConnector(b_socket)),
        token_of("clone-b"),
    ));
    assert!(right.is_ok(), "clone-b's own token: {:?}", right.err());

    // 6. A damaged snapshot (its state file cut short): QEMU cannot load
    // it, so the start says so, removes it and boots instead.
    for name in clones {
        ok(cli().args(["guest", "stop", name]));
    }
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (_, err) = ok(cli().args(["guest", "start", "--backend", "qemu", "--name", "damaged"]));
    assert!(err.contains("from its snapshot"), "{err}");
    assert!(
        err.contains("QEMU exited while loading the VM snapshot")
            && err.contains("booting instead"),
        "{err}"
    );
    assert!(err.contains("(booted)"), "{err}");
    assert!(!file.exists(), "the damaged snapshot was kept");
    let damaged = store.get("damaged").unwrap();
    assert!(damaged.path.join("qemu-snapshot.log").is_file());
    let (out, _) = ok(cli().args(["act", "--session", "damaged", r#"[{"type":"wait"}]"#]));
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["ok"], true, "the booted guest does not act: {r}");
    ok(cli().args(["guest", "stop", "damaged"]));
}
