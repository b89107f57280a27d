//! `sandtop-probe`: facts about the guest, from inside, as JSON.
//!
//! Installed in the guest image at `/usr/local/bin/sandtop-probe` and run
//! by the E tier tests and `host-cli doctor` through a Docker exec (as the
//! desktop user). It changes nothing it does not undo, reads no secret's
//! value (environment variable *names* only) and needs no privileges.
//!
//! Modes:
//! - `sandtop-probe [facts] [--gateway IP]`: the facts (identity, capabilities,
//!   no_new_privs, seccomp, setuid/setgid files on the root filesystem,
//!   sudo and compilers, mounts and tmpfs options, noexec in effect, cgroup
//!   limits, docker.sock, device nodes, X on TCP, network reach, environment
//!   names, extra files in /run/sandtop, PID 1, zombies).
//! - `sandtop-probe orphans`: leaves an orphan to PID 1, then reports
//!   whether any zombie is left after it exited (C8).
//! - `sandtop-probe ps`: the processes (pid, uid, state, comm, argv0, wchan).
//!
//! It is not a weapon: the stress the E tier puts on a guest (a fork bomb,
//! a memory hog) is test-only shell the tests run through exec, and does
//! not ship in the image.
//!
//! Layout: no tests here (the E tier runs it in a real guest): `facts` and
//! some 25 small readers, one per fact, none over ~40 lines. If it grows, the
//! natural split is by area: the filesystem and mounts, the network, the
//! processes.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Read-only facts about the guest, from inside, as JSON.
#[derive(Debug, clap::Parser)]
#[command(name = "sandtop-probe", version)]
struct Args {
    /// The egress gateway to try to reach (facts: network reach).
    #[arg(long, global = true)]
    gateway: Option<String>,
    #[command(subcommand)]
    mode: Option<Mode>,
}

#[derive(Debug, clap::Subcommand)]
enum Mode {
    /// The facts (the default).
    Facts,
    /// Leaves an orphan to PID 1 and reports whether a zombie is left.
    Orphans,
    /// The processes (pid, ppid, uid, state, comm, argv0).
    Ps,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    let out = match args.mode.unwrap_or(Mode::Facts) {
        Mode::Facts => facts(args.gateway.as_deref()),
        Mode::Orphans => orphans(),
        Mode::Ps => json!({ "processes": processes() }),
    };
    println!("{out}");
    ExitCode::SUCCESS
}

fn facts(gateway: Option<&str>) -> Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| -> Option<String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    let first_num = |k: &str| -> Option<u64> { field(k)?.split_whitespace().next()?.parse().ok() };
    let caps: serde_json::Map<String, Value> = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
        .iter()
        .map(|k| (k.to_string(), json!(field(k))))
        .collect();
    let groups: Vec<u64> = field("Groups")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .collect();
    let started = Instant::now();
    let (setid, walked, walk_errors) = setid_files();
    let walk_ms = started.elapsed().as_millis() as u64;
    let mounts = mounts();
    json!({
        "probe": 1,
        "ids": {
            "uid": first_num("Uid"),
            "gid": first_num("Gid"),
            "uids": field("Uid"),
            "gids": field("Gid"),
            "groups": groups,
        },
        "caps": caps,
        "no_new_privs": first_num("NoNewPrivs"),
        "seccomp": first_num("Seccomp"),
        "setid_files": setid,
        "setid_walk": { "entries": walked, "errors": walk_errors.len(), "unreadable": walk_errors, "ms": walk_ms },
        "sudo": find_programs(&["sudo", "doas", "pkexec", "run0"]),
        "su": find_programs(&["su"]),
        "compilers": find_programs(&[
            "cc", "c89", "c99", "gcc", "g++", "c++", "cpp", "clang", "clang++", "tcc",
            "rustc", "cargo", "go", "gccgo", "as", "ld", "javac", "make",
        ]),
        "package_caches": package_caches(),
        "root_readonly": root_readonly(),
        "write_tests": write_tests(),
        "tmpfs": tmpfs(&mounts),
        "noexec_effective": noexec_effective(),
        "mounts": mounts,
        "cgroup": cgroup(),
        "docker_sockets": docker_sockets(),
        "devices": devices(),
        "x_tcp_open": x_tcp(),
        "tcp_listeners": tcp_listeners(),
        "network": network(gateway),
        "env_names": std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect::<BTreeSet<_>>(),
        "env_names_all_processes": env_names_all(),
        "run_sandtop_extra": run_sandtop_extra(),
        "pid1": cmdline(1),
        "zombies": zombies(),
        "processes": processes(),
    })
}

/// Docker's and containerd's sockets, where they usually are.
fn docker_sockets() -> Vec<&'static str> {
    [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/var/run/docker",
        "/run/containerd/containerd.sock",
    ]
    .into_iter()
    .filter(|p| Path::new(p).exists())
    .collect()
}

/// Setuid/setgid files and directories on the root filesystem (like
/// `find / -xdev -perm /6000`).
fn setid_files() -> (Vec<String>, u64, Vec<String>) {
    let mut found = Vec::new();
    let mut walked = 0u64;
    let mut errors = Vec::new();
    let Ok(root) = std::fs::symlink_metadata("/") else {
        return (found, 0, vec!["/".to_string()]);
    };
    let dev = root.dev();
    let mut stack = vec![PathBuf::from("/")];
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                errors.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        for e in rd.flatten() {
            walked += 1;
            let p = e.path();
            let m = match std::fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(e) => {
                    errors.push(format!("{}: {e}", p.display()));
                    continue;
                }
            };
            if m.file_type().is_symlink() {
                continue;
            }
            if m.mode() & 0o6000 != 0 {
                found.push(p.to_string_lossy().into_owned());
            }
            if m.is_dir() && m.dev() == dev {
                stack.push(p);
            }
        }
    }
    found.sort();
    (found, walked, errors)
}

fn find_programs(names: &[&str]) -> Vec<String> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        dirs.push(PathBuf::from(d));
    }
    let mut out = BTreeSet::new();
    for n in names {
        for d in &dirs {
            let p = d.join(n);
            if std::fs::metadata(&p)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            {
                out.insert(p.to_string_lossy().into_owned());
            }
        }
    }
    out.into_iter().collect()
}

/// Files left in apt's caches and lists (C11: none).
fn package_caches() -> Vec<String> {
    let mut out = Vec::new();
    for d in [
        "/var/cache/apt",
        "/var/lib/apt/lists",
        "/root/.cache",
        "/root/.cargo",
    ] {
        let mut stack = vec![PathBuf::from(d)];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                match e.file_type() {
                    Ok(t) if t.is_dir() => stack.push(p),
                    Ok(t) if t.is_file() => {
                        let name = e.file_name();
                        if name != "lock" {
                            out.push(p.to_string_lossy().into_owned());
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out.sort();
    out
}

/// One line of /proc/self/mountinfo, parsed.
fn mounts() -> Vec<Value> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(json!({
                "mount": unescape(l.get(4)?),
                "root": unescape(l.get(3)?),
                "options": l.get(5)?.split(',').collect::<Vec<_>>(),
                "fstype": r.first()?,
                "source": r.get(1)?,
                "super_options": r.get(2).map(|s| s.split(',').collect::<Vec<_>>()).unwrap_or_default(),
            }))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn root_readonly() -> Value {
    let m = mounts();
    let root = m.iter().rev().find(|x| x["mount"] == "/");
    let ro = root.is_some_and(|r| {
        r["options"]
            .as_array()
            .is_some_and(|o| o.iter().any(|v| v == "ro"))
    });
    json!(ro)
}

/// Tries to create a file in a few places; the error (or "ok").
fn write_tests() -> Value {
    let mut out = serde_json::Map::new();
    for d in [
        "/",
        "/usr/local/bin",
        "/etc",
        "/var/tmp",
        "/tmp",
        "/home/user",
        "/run/sandtop",
    ] {
        let p = Path::new(d).join(format!(".sandtop-probe-{}", std::process::id()));
        let r = match std::fs::write(&p, b"x") {
            Ok(()) => {
                let _ = std::fs::remove_file(&p);
                "ok".to_string()
            }
            Err(e) => e.to_string(),
        };
        out.insert(d.to_string(), json!(r));
    }
    Value::Object(out)
}

fn tmpfs(mounts: &[Value]) -> Vec<Value> {
    mounts
        .iter()
        .filter(|m| m["fstype"] == "tmpfs")
        .map(|m| {
            let opts: Vec<String> = m["options"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let sopts: Vec<String> = m["super_options"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let size = sopts
                .iter()
                .find_map(|o| o.strip_prefix("size="))
                .map(String::from);
            json!({
                "mount": m["mount"],
                "size": size,
                "nosuid": opts.iter().any(|o| o == "nosuid"),
                "nodev": opts.iter().any(|o| o == "nodev"),
                "noexec": opts.iter().any(|o| o == "noexec"),
                "options": opts,
            })
        })
        .collect()
}

/// Copies a program into each writable place and tries to run it.
fn noexec_effective() -> Value {
    let mut out = serde_json::Map::new();
    let Ok(bytes) = std::fs::read("/bin/true") else {
        return json!({ "error": "no /bin/true" });
    };
    for d in ["/tmp", "/home/user", "/dev/shm", "/run/sandtop"] {
        let p = Path::new(d).join(format!(".sandtop-probe-exec-{}", std::process::id()));
        let r = match std::fs::write(&p, &bytes)
            .and_then(|()| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)))
        {
            Err(e) => format!("cannot write: {e}"),
            Ok(()) => match Command::new(&p).stdin(Stdio::null()).status() {
                Ok(s) => format!("ran ({s})"),
                Err(e) => format!("refused: {e}"),
            },
        };
        let _ = std::fs::remove_file(&p);
        out.insert(d.to_string(), json!(r));
    }
    Value::Object(out)
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn cgroup() -> Value {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        json!({
            "version": 2,
            "memory_max": read_trim("/sys/fs/cgroup/memory.max"),
            "memory_swap_max": read_trim("/sys/fs/cgroup/memory.swap.max"),
            "pids_max": read_trim("/sys/fs/cgroup/pids.max"),
            "cpu_max": read_trim("/sys/fs/cgroup/cpu.max"),
        })
    } else {
        json!({
            "version": 1,
            "memory_limit_bytes": read_trim("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
            "memsw_limit_bytes": read_trim("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
            "pids_max": read_trim("/sys/fs/cgroup/pids/pids.max"),
            "cpu_quota_us": read_trim("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
                .or_else(|| read_trim("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")),
            "cpu_period_us": read_trim("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
                .or_else(|| read_trim("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")),
        })
    }
}

/// Character and block device nodes under /dev.
fn devices() -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from("/dev")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_char_device() || t.is_block_device() {
                out.push(e.path().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// X's TCP ports 6000-6010 that accept a connection on loopback.
fn x_tcp() -> Vec<u16> {
    (6000..=6010)
        .filter(|p| {
            let a = SocketAddr::from(([127, 0, 0, 1], *p));
            TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok()
        })
        .collect()
}

/// Listening TCP sockets in the guest's network namespace, as
/// `address:port` (hex addresses decoded for IPv4; IPv6 left in hex).
fn tcp_listeners() -> Vec<String> {
    let mut out = Vec::new();
    for (file, v4) in [("/proc/net/tcp", true), ("/proc/net/tcp6", false)] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(3) != Some(&"0A") {
                continue;
            }
            let Some((addr, port)) = f.get(1).and_then(|a| a.split_once(':')) else {
                continue;
            };
            let port = u16::from_str_radix(port, 16).unwrap_or(0);
            let addr = if v4 {
                u32::from_str_radix(addr, 16)
                    .map(|a| std::net::Ipv4Addr::from(a.swap_bytes()).to_string())
                    .unwrap_or_else(|_| addr.to_string())
            } else {
                format!("[{addr}]")
            };
            out.push(format!("{addr}:{port}"));
        }
    }
    out
}

fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Value {
    let t = Instant::now();
    let r = f();
    let ms = t.elapsed().as_millis() as u64;
    match r {
        Ok(_) => json!({ "ok": true, "ms": ms }),
        Err(e) => json!({ "ok": false, "error": e, "ms": ms }),
    }
}

fn connect(addr: &str) -> Result<(), String> {
    let a: SocketAddr = addr.parse().map_err(|e| format!("{e}"))?;
    TcpStream::connect_timeout(&a, Duration::from_secs(3))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn network(gateway: Option<&str>) -> Value {
    let dns = timed(|| {
        // The resolver has no timeout of its own here: give it one.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(
                ("example.com", 443)
                    .to_socket_addrs()
                    .map(|a| a.count())
                    .map_err(|e| e.to_string()),
            );
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(r) => r,
            Err(_) => Err("timed out after 5 s".to_string()),
        }
    });
    let gw = gateway.unwrap_or("172.17.0.1");
    let interfaces: Vec<String> = std::fs::read_to_string("/proc/net/dev")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|s| s.trim().to_string()))
        .collect();
    let routes = std::fs::read_to_string("/proc/net/route")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .count();
    json!({
        "dns": dns,
        "internet_1_1_1_1_443": timed(|| connect("1.1.1.1:443")),
        "gateway": gw,
        "gateway_reach": timed(|| connect(&format!("{gw}:2375")).or_else(|e| {
            // Refused means a packet came back: the gateway is reachable.
            if e.contains("refused") { Ok(()) } else { Err(e) }
        })),
        "interfaces": interfaces,
        "ipv4_routes": routes,
    })
}

fn env_names_all() -> Vec<String> {
    let mut names = BTreeSet::new();
    for pid in pids() {
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            for kv in env.split(|b| *b == 0) {
                if let Some(i) = kv.iter().position(|b| *b == b'=') {
                    names.insert(String::from_utf8_lossy(&kv[..i]).into_owned());
                }
            }
        }
    }
    names.into_iter().collect()
}

fn run_sandtop_extra() -> Value {
    match std::fs::read_dir("/run/sandtop") {
        Ok(rd) => {
            let mut v: Vec<String> = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "token" && n != "sandtopd.sock" && n != "egress.sock")
                .collect();
            v.sort();
            json!(v)
        }
        Err(e) => json!({ "error": e.to_string() }),
    }
}

fn pids() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// (state, comm, ppid) from /proc/PID/stat.
fn stat(pid: u32) -> Option<(String, String, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.to_string();
    let ppid = rest.next()?.parse().ok()?;
    Some((state, comm, ppid))
}

fn processes() -> Vec<Value> {
    pids()
        .into_iter()
        .filter_map(|pid| {
            let (state, comm, ppid) = stat(pid)?;
            let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
            let argv0 = cmdline(pid).split(' ').next().unwrap_or("").to_string();
            // Where a sleeping process waits in the kernel (empty when
            // the kernel does not tell this reader).
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            Some(json!({ "pid": pid, "ppid": ppid, "uid": uid, "state": state, "comm": comm, "argv0": argv0, "wchan": wchan }))
        })
        .collect()
}

fn zombies() -> Vec<Value> {
    processes()
        .into_iter()
        .filter(|p| p["state"] == "Z")
        .collect()
}

/// Leaves `sleep` orphaned (its parent shell exits at once), waits for it
/// to end, and reports the zombies then: with an init that reaps, none.
fn orphans() -> Value {
    let spawned = Command::new("/bin/sh")
        .args(["-c", "sleep 1 >/dev/null 2>&1 </dev/null & echo $!; exit 0"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let orphan: Option<u32> = spawned
        .as_ref()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    let parent_after = orphan.and_then(|p| {
        std::thread::sleep(Duration::from_millis(100));
        stat(p).map(|s| s.2)
    });
    std::thread::sleep(Duration::from_millis(2000));
    let left = orphan.and_then(stat).map(|s| s.0);
    json!({
        "orphan_pid": orphan,
        "orphan_parent": parent_after,
        "orphan_state_after_exit": left,
        "zombies": zombies(),
        "pid1": cmdline(1),
    })
}
