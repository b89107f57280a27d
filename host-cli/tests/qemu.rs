//! The VM guest (docs/security.md V1-V8), E tier, under the accelerator this host has
//! (TCG here: no VT-x exposed). One VM is booted through `host-cli guest
//! start --backend qemu` and checked:
//!
//! - it becomes ready, and its facts from inside (the read-only probe run
//!   at boot as the guest user, `SANDTOP_VM_PROBE=1`, read back through
//!   `guest logs`): no network interface but `lo`, the root read-only,
//!   writable places noexec, the guest uid, no capabilities;
//! - the session token is on no command line, in no environment of QEMU
//!   or the link, and in none of the session's logs;
//! - the desktop answers at once: Super+T pressed as soon as the guest is
//!   ready opens a terminal (seen in screenshots), and `exit` typed into
//!   it closes it (typing reaches its shell);
//! - the typing corpus typed into that terminal's `cat > FILE` arrives
//!   byte-exact (the file read back through the daemon) and none of it
//!   runs;
//! - `act` with a scaled coordinate space and `screenshot` work over the
//!   link, with the ScaleMap of the size asked;
//! - `--network allow:` works through the relay as in Docker: from the
//!   VM's terminal, Python's urllib (the proxy variables the guest's entry
//!   sets) reaches an allowed origin of a "fake internet" on this host (a
//!   server of the test on 127.0.0.1, its names pinned with
//!   `--egress-resolve`), while a request for another name pinned to the
//!   same server never lands there and is journaled as denied;
//! - the offline exercise passes on the VM (`host-cli exercise --session`):
//!   the form submitted in Firefox and the note saved by the editor, both
//!   checked on the apps' own records read through the daemon; under TCG
//!   the script's patience is 4 min per window (Firefox takes 30-40 s);
//! - after `kill -9` of QEMU, `guest gc` leaves no process and no folder.
//!
//! A second case, without a boot: started by root, QEMU runs as the
//! guest's uid (`qemu_started_by_root_runs_as_the_guest_uid`).
//!
//! Prerequisites: `qemu-system-<arch>` and the VM image (`make guest-vm`),
//! else `SKIP qemu` (a failure when SANDTOP_REQUIRE lists qemu).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sandtop_testkit::corpus::TYPING as CORPUS;
use sandtop_testkit::skip;
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

fn vm_ready() -> bool {
    let qemu = host_cli::guest::qemu::qemu_program();
    if !skip::have(&qemu) {
        return skip::skip("qemu", &format!("{qemu} is not installed"));
    }
    if let Err(e) = host_cli::guest::qemu::VmImage::locate() {
        return skip::skip("qemu", &e.to_string());
    }
    true
}

/// host-cli with no standard input and no controlling terminal.
fn host_cli(state: &Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env("SANDTOP_VM_PROBE", "1")
        .env_remove("OPENAI_API_KEY");
    c
}

/// The command's output, or a failure (the process killed) after `limit`:
/// a wedged run fails the tier instead of hanging it.
fn output_within(c: &mut Command, limit: Duration) -> std::process::Output {
    use std::io::Read as _;
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes meanwhile, so a chatty child never blocks on them.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let until = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err_t.join().unwrap();
            panic!(
                "{c:?} did not end within {limit:?}:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::process::Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    }
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

/// Removes the session on every way out of the test.
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

fn screen(state: &Path, name: &str, out: &Path) -> Vec<u8> {
    let _ = std::fs::remove_file(out);
    ok(host_cli(state)
        .args(["screenshot", "--session", name, "-o"])
        .arg(out));
    std::fs::read(out).unwrap()
}

/// The share of the desktop's pixels (the panel's rows left out) that
/// are not its background colour: about 0 for the empty desktop.
fn lit_share(png_bytes: &[u8]) -> f64 {
    use sandtop_protocol::desktop::{DESKTOP_BACKGROUND, PANEL_HEIGHT};
    sandtop_testkit::pixels::share_not(png_bytes, DESKTOP_BACKGROUND, PANEL_HEIGHT)
}

/// The "fake internet": an HTTP server on 127.0.0.1 that records the
/// path and Host of every request it is sent, and answers 200.
struct FakeInternet {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl FakeInternet {
    fn start() -> FakeInternet {
        use std::io::{BufRead as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> = Default::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut reader = std::io::BufReader::new(&stream);
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                let mut host = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':')
                        && k.eq_ignore_ascii_case("host")
                    {
                        host = v.trim().to_string();
                    }
                }
                let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push((path, host));
                let _ = (&stream).write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                );
            }
        });
        FakeInternet { port, seen }
    }

    fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// A process's Uid and Gid lines (real, effective, saved, filesystem),
/// its supplementary groups and its CapEff.
type Ids = (Vec<u32>, Vec<u32>, Vec<u32>, String);

/// The ids of `pid` from `/proc/PID/status`.
fn ids_of(pid: i64) -> Option<Ids> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let nums = |name: &str| {
        field(name)
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect::<Vec<u32>>()
    };
    Some((
        nums("Uid:"),
        nums("Gid:"),
        nums("Groups:"),
        field("CapEff:"),
    ))
}

/// docs/security.md V7: started by root, QEMU runs as the guest's uid and gid
/// (with no other group and no capability); started by another user, as
/// that user. The files it opened before its drop (the link socket, the
/// console log, the pid file) stay the invoking user's, in the session
/// folder only that user may enter. The drop comes before the guest
/// runs, so no boot is needed: QEMU's ids are read while the guest boots,
/// then the session is stopped.
#[test]
fn qemu_started_by_root_runs_as_the_guest_uid() {
    use std::os::unix::fs::MetadataExt as _;
    if !vm_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let name = "vmuid".to_string();
    let _guard = Guard {
        state: state.clone(),
        name: name.clone(),
    };
    let me = rustix::process::geteuid().as_raw();
    let want = if me == 0 {
        (
            host_cli::guest::ids::GUEST_UID,
            host_cli::guest::ids::GUEST_GID,
        )
    } else {
        (me, rustix::process::getegid().as_raw())
    };
    let log = tmp.path().join("start.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut start = host_cli(&state)
        .args(["guest", "start", "--backend", "qemu", "--name", &name])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let dir = state.join("sessions").join(&name);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen: Option<Instant> = None;
    let (pid, ids) = loop {
        let pid = std::fs::read(dir.join("session.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|r| r["qemu"]["pid"].as_i64());
        if let Some((pid, ids)) = pid.and_then(|p| Some((p, ids_of(p)?))) {
            // QEMU drops right after its set-up, before the guest runs
            // (as another user there is nothing to drop).
            let since = *seen.get_or_insert_with(Instant::now);
            if me != 0 || ids.0[1] != 0 || since.elapsed() > Duration::from_secs(30) {
                break (pid, ids);
            }
        }
        assert!(
            start.try_wait().unwrap().is_none(),
            "guest start ended before QEMU's ids could be read:\n{}",
            said()
        );
        assert!(Instant::now() < deadline, "no QEMU seen:\n{}", said());
        std::thread::sleep(Duration::from_millis(100));
    };
    let (uids, gids, groups, cap_eff) = ids;
    eprintln!(
        "QEMU (pid {pid}) as uid {uids:?}, gid {gids:?}, groups {groups:?}, CapEff {cap_eff}"
    );
    assert_eq!(uids, [want.0; 4], "QEMU's Uid line");
    assert_eq!(gids, [want.1; 4], "QEMU's Gid line");
    if me == 0 {
        assert!(groups.iter().all(|g| *g == want.1), "groups {groups:?}");
        assert_eq!(cap_eff, "0000000000000000");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let ids = format!("{}:{}", want.0, want.1);
        assert!(
            cmdline.contains(&format!("-runas {ids}"))
                || cmdline.contains(&format!("-run-with user={ids}")),
            "{cmdline}"
        );
    }
    let m = std::fs::metadata(&dir).unwrap();
    assert_eq!(
        (m.uid(), m.mode() & 0o777),
        (me, 0o700),
        "the session folder"
    );
    for f in ["link.sock", "console.log", "qemu.pid"] {
        let m = std::fs::metadata(dir.join(f)).unwrap();
        assert_eq!(m.uid(), me, "{f} is not the invoking user's");
    }
    let _ = start.kill();
    let _ = start.wait();
    ok(host_cli(&state).args(["guest", "stop", &name]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while ids_of(pid).is_some_and(|_| {
        !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    }) {
        assert!(Instant::now() < deadline, "QEMU is left after guest stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!dir.exists(), "the session folder is left");
}

#[test]
fn a_vm_guest_boots_acts_and_leaves_nothing_behind() {
    if !vm_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let name = "vmtest".to_string();
    let t0 = Instant::now();
    let _guard = Guard {
        state: state.clone(),
        name: name.clone(),
    };
    // `allow:` one origin of the fake internet; another name pinned to the
    // same server is not allowed (a request that got through would land).
    let internet = FakeInternet::start();
    let port = internet.port;
    let started = host_cli(&state)
        .args(["guest", "start", "--backend", "qemu", "--name", &name])
        .arg("--network")
        .arg(format!("allow:http://allowed.test:{port}"))
        .args(["--egress-resolve", "allowed.test=127.0.0.1"])
        .args(["--egress-resolve", "blocked.test=127.0.0.1"])
        .args(["--allow-private", "127.0.0.1/32"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&started.stderr).to_string();
    assert!(started.status.success(), "guest start: {stderr}");
    eprintln!(
        "VM boot to ready: {:.1} s ({})",
        t0.elapsed().as_secs_f64(),
        stderr.lines().next().unwrap_or("kvm")
    );
    // The desktop answers at once: Super+T pressed the moment the guest
    // is ready opens a terminal (the window manager counts as ready only
    // when its event loop answers, so the key is not lost in its start).
    let shots = tmp.path().join("shots");
    std::fs::create_dir(&shots).unwrap();
    let act = |actions: &str| {
        let out = ok(host_cli(&state).args(["act", "--session", &name, actions]));
        let r: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["ok"], true, "{r}");
    };
    act(r#"[{"type":"keypress","keys":["SUPER","T"]},{"type":"wait"}]"#);
    let mut n = 0;
    let mut lit = || {
        n += 1;
        lit_share(&screen(&state, &name, &shots.join(format!("{n}.png"))))
    };
    let t = Instant::now();
    let deadline = t + Duration::from_secs(90);
    while lit() < 0.2 {
        assert!(Instant::now() < deadline, "no terminal after Super+T");
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "terminal on screen {:.1} s after Super+T",
        t.elapsed().as_secs_f64()
    );
    // The typing corpus (the E tier's, with its marks in the home
    // folder): `cat > FILE` typed into the shell, the corpus, Ctrl-D; the
    // file, read back through the daemon, holds exactly the corpus, and
    // nothing of it ran.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let read = |path: &str| -> Option<Vec<u8>> {
        rt.block_on(async {
            let store = host_cli::session::Store::at(state.clone()).unwrap();
            let dir = store.get(&name).unwrap();
            let rec = dir.load().unwrap();
            let mut ch = host_cli::guest::open_channel(&dir, &rec).await.unwrap();
            ch.read_file(path).await.unwrap()
        })
    };
    let typed = "/home/user/typed.txt";
    let pwned = "/home/user/sandtop-pwned-vm";
    let corpus = CORPUS.replace("/tmp/sandtop-pwned-MARK", pwned);
    act(&serde_json::json!([{"type": "type", "text": format!("cat > {typed}\n")}]).to_string());
    // cat has created the file (empty) once it reads the terminal.
    let deadline = Instant::now() + Duration::from_secs(60);
    while read(typed).is_none() {
        assert!(Instant::now() < deadline, "cat never started");
        std::thread::sleep(Duration::from_millis(200));
    }
    act(&serde_json::json!([
        {"type": "type", "text": corpus},
        {"type": "keypress", "keys": ["CTRL", "D"]},
    ])
    .to_string());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = read(typed).unwrap_or_default();
        if got == corpus.as_bytes() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the terminal received other bytes:\n got: {:?}\nwant: {corpus:?}",
            String::from_utf8_lossy(&got)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(read(pwned), None, "a command in the typed text ran");

    // The relay, from the VM's shell: the blocked name first, then the
    // allowed one (each its own python3, so the refusal cannot stop the
    // second). When the allowed request has landed, the blocked one has
    // been decided.
    let get = |h: &str| {
        format!(
            "python3 -c \"import urllib.request as u; u.urlopen('http://{h}.test:{port}/vm-{h}', timeout=60)\""
        )
    };
    let line = format!("{}; {}\n", get("blocked"), get("allowed"));
    act(&serde_json::json!([{"type": "type", "text": line}]).to_string());
    let t = Instant::now();
    let deadline = t + Duration::from_secs(120);
    while !internet.seen().iter().any(|(p, _)| p == "/vm-allowed") {
        assert!(
            Instant::now() < deadline,
            "the allowed request never reached the fake internet: {:?}",
            internet.seen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "allowed request landed {:.1} s after it was typed",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        internet.seen(),
        [("/vm-allowed".to_string(), format!("allowed.test:{port}"))],
        "only the allowed origin's request may land"
    );
    let dir = state.join("sessions").join(&name);
    let journal = std::fs::read_to_string(dir.join("egress.jsonl")).unwrap();
    let decisions: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "egress")
        .collect();
    let decided = |origin: &str| -> Vec<String> {
        decisions
            .iter()
            .filter(|e| e["origin"] == origin)
            .map(|e| e["decision"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        decided(&format!("http://blocked.test:{port}")),
        ["denied"],
        "{journal}"
    );
    assert_eq!(
        decided(&format!("http://allowed.test:{port}")),
        ["allowed"],
        "{journal}"
    );

    // Typing reaches its shell: `exit` closes it, the screen is empty again.
    act(r#"[{"type":"type","text":"exit\n"},{"type":"wait"}]"#);
    let deadline = Instant::now() + Duration::from_secs(60);
    while lit() > 0.01 {
        assert!(
            Instant::now() < deadline,
            "the terminal did not close on `exit`"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Without a pause here the exercise's first click (on the panel)
    // ended `input_blocked` 5 of 5 times on a quiet host ("button 1 is not
    // up yet after 2000 ms": a client held the pointer in a synchronous
    // grab). The likely cause, not proven: the corpus typed above remapped
    // spare keycodes many times, and under TCG the window manager is
    // still working through those mapping changes, its click-to-focus
    // grab held meanwhile. With this pause it passed.
    std::thread::sleep(Duration::from_secs(10));

    // The offline exercise on the VM: the scripted model opens Firefox
    // from the panel, fills in and submits the demo form, writes a note in
    // the editor and saves it; checked on the apps' own records, read
    // through the daemon (`/v1/files/read`: a VM has no exec path). Under
    // TCG the script waits up to 4 min per window, the run has 900 s.
    let t = Instant::now();
    let out = output_within(
        host_cli(&state)
            .args([
                "exercise",
                "--session",
                &name,
                "--approve-scripted-checks",
                "--quiet",
                "--record",
            ])
            .arg(tmp.path().join("exercise")),
        // The run's own budget under TCG is 900 s.
        Duration::from_secs(1200),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the exercise failed on the VM ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    for check in [
        "ok   the demo app stored the submission",
        "ok   the editor saved the note",
    ] {
        assert!(stdout.contains(check), "{check}: {stdout}");
    }
    let exercise_stderr = stderr.to_string();
    eprintln!(
        "the exercise passed on the VM in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap();
    // Under TCG the exercise said it would be patient.
    if rec["qemu"]["accel"] == "tcg" {
        assert!(
            exercise_stderr.contains("software emulation"),
            "{exercise_stderr}"
        );
    }
    let qemu_pid = rec["qemu"]["pid"].as_i64().unwrap();
    let link_pid = rec["qemu"]["link_pid"].as_i64().unwrap();

    // Facts from inside, printed by the probe at boot.
    let logs = ok(host_cli(&state).args(["guest", "logs", &name]));
    let line = logs
        .lines()
        .find_map(|l| l.strip_prefix("sandtop-probe: "))
        .unwrap_or_else(|| panic!("no probe line in the console:\n{logs}"));
    let facts: Value = serde_json::from_str(line).unwrap();
    assert_eq!(facts["network"]["interfaces"], serde_json::json!(["lo"]));
    assert_eq!(facts["network"]["ipv4_routes"], 0);
    assert_eq!(facts["root_readonly"], true);
    for p in ["/", "/etc", "/usr/local/bin"] {
        let w = facts["write_tests"][p].as_str().unwrap();
        assert!(w.contains("Read-only"), "{p}: {w}");
    }
    for p in ["/tmp", "/home/user", "/dev/shm"] {
        let x = facts["noexec_effective"][p].as_str().unwrap();
        assert!(x.starts_with("refused"), "{p}: {x}");
    }
    assert_eq!(facts["ids"]["uid"], 2_000_000_000u64);
    assert_eq!(facts["caps"]["CapEff"], "0000000000000000");
    assert_eq!(facts["no_new_privs"], 1);

    // The token: on no command line, in no environment, in no log.
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let token = token.trim();
    assert_eq!(token.len(), 64);
    for pid in [qemu_pid, link_pid] {
        for f in ["cmdline", "environ"] {
            let text = std::fs::read(format!("/proc/{pid}/{f}")).unwrap();
            assert!(
                !String::from_utf8_lossy(&text).contains(token),
                "the token is in /proc/{pid}/{f}"
            );
        }
    }
    for f in [
        "console.log",
        "qemu.log",
        "link.log",
        "egress.log",
        "egress.jsonl",
    ] {
        let text = std::fs::read(dir.join(f)).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains(token),
            "token in {f}"
        );
    }
    assert!(!logs.contains(token));

    // Actions in a scaled space; the ScaleMap says that space.
    let out = ok(host_cli(&state).args([
        "act",
        "--session",
        &name,
        "--size",
        "640x400",
        r#"{"type":"move","x":320,"y":200}"#,
    ]));
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["scale_map"]["image"]["width"], 640, "{r}");
    assert_eq!(r["scale_map"]["screen"]["width"], 1280, "{r}");

    // A screenshot over the link: a PNG of the whole screen.
    let png = screen(&state, &name, &tmp.path().join("s.png"));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 1280);

    // kill -9 of QEMU, then gc: no process, no folder.
    let killed = Command::new("kill")
        .args(["-9", &qemu_pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let gone = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !gone(qemu_pid) {
        assert!(Instant::now() < deadline, "QEMU survived kill -9");
        std::thread::sleep(Duration::from_millis(100));
    }
    let gc = ok(host_cli(&state).args(["guest", "gc"]));
    assert!(gc.contains(&name), "{gc}");
    assert!(!dir.exists(), "the session folder is left");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(link_pid) {
        assert!(Instant::now() < deadline, "the link process is left");
        std::thread::sleep(Duration::from_millis(100));
    }
}
