//! The E tier of the guest's network policy (issue 5; docs/security.md N1-N6;
//! docs/contract.md rule 21), on real guests under Docker.
//!
//! The world it builds, all on this machine and removed afterwards:
//! - a bridge network `sandtop-test-net-<run>` and on it a "fake internet":
//!   a container from the local base image (`sandtop-base:bookworm-*`, found
//!   by the `sandtop.packages-hash` label the build script sets; the guest
//!   image otherwise) running a small Python server on ports 80 and 8080
//!   (HTTP) and 443 and 8443 (HTTPS with a self-signed certificate made by
//!   openssl in the container at start). Every answer names the virtual
//!   host (Host header), the TLS server name (SNI), the port and the path,
//!   and every request served is logged, so a test can prove where a
//!   request landed and that a refused one landed nowhere. The container is
//!   also attached to Docker's default bridge, for the `open` mode case;
//! - two TCP "host services" of the test process: one on the test
//!   network's gateway address (the host as containers on that network see
//!   it), one on 127.0.0.1; both record every request;
//! - guests started the way a user does, with the `host-cli` binary (`guest
//!   start --network ... --allow-private CIDR --egress-resolve NAME=IP`), so
//!   that the egress proxy is the real `host-cli egress-proxy` process. The
//!   names `allowed.test`, `blocked.test`, ... are pinned to the fake
//!   internet's address with `--egress-resolve`; nothing is ever resolved by
//!   a real DNS server and no outside address is ever contacted.
//!
//! Requests are made from inside the guest, as the guest's uid, by a Python client
//! run through a Docker exec (argv, no shell): `urllib` with the proxy
//! variables (the way tools use the proxy), and raw sockets for the crafted
//! cases (a CONNECT whose SNI names another host, a Host header that
//! disagrees with the target, IP literals).
//!
//! Harness: the E tier's (`sandtop_tests::harness`, on libtest-mimic), like
//! e2e.rs: the cases share the world set up once and run one after the
//! other, each failure is reported, and after the last case the run
//! removes its guests, the fake internet and the network, then checks that
//! nothing of the run is left (containers labelled `sandtop.session` of this
//! run's state directory, the fake internet, the network, egress proxy
//! processes). Skipped with `SKIP docker: ...` when no engine answers or the
//! guest image is missing (a failure when `SANDTOP_REQUIRE` lists docker).
//! Needs the `host-cli` binary of this workspace (`cargo build -p host-cli`;
//! `make test` builds it). Arguments: libtest's (a substring selects cases,
//! `--exact`, `--skip`, `--list`); `--ignored` / `--include-ignored` run the
//! cases listed in [`IGNORED`] (they fail because of a reported product bug).
//! `SANDTOP_NETWORK_VERBOSE=1` prints every result of the guest's client.
//!
//! Size (~2,400 lines): the fake internet, the host services, the guest
//! client and the cases are one world built once per run (a bridge
//! network and containers that every case shares); splitting the file
//! would split that world's setup from the cases that read it.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HostConfig, NetworkConnectRequest, NetworkCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, InspectNetworkOptions,
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, ListNetworksOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use host_cli::egress::proxy::Answer;
use host_cli::egress::service::{self, Attached, Paths};
use host_cli::guest::docker::channel::ChannelMode;
use host_cli::guest::docker::{self, DockerBackend};
use host_cli::guest::{self, ids};
use host_cli::session::{SessionDir, SessionRecord, Store};
use sandtop_testkit::skip;
use sandtop_tests::cases;
use sandtop_tests::harness::Suite;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The fake internet: HTTP on 80 and 8080, HTTPS on 443 and 8443.
const SERVER_PY: &str = r#"
import json, ssl, subprocess, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "/tmp/key.pem",
    "-out", "/tmp/cert.pem", "-days", "2", "-subj", "/CN=allowed.test",
    "-addext", "subjectAltName=DNS:allowed.test,DNS:blocked.test"],
    check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
snis = {}
def on_sni(sock, name, _ctx):
    snis[id(sock)] = name
ctx.sni_callback = on_sni

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        tls = isinstance(self.connection, ssl.SSLSocket)
        sni = snis.pop(id(self.connection), None) if tls else None
        vhost = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        body = json.dumps({"vhost": vhost, "sni": sni, "tls": tls,
            "port": self.server.server_address[1], "path": self.path}).encode()
        print("served " + body.decode(), flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

class Server(ThreadingHTTPServer):
    daemon_threads = True
    tls = False
    def finish_request(self, request, client_address):
        request.settimeout(10)
        if self.tls:
            try:
                request = ctx.wrap_socket(request, server_side=True)
            except Exception as e:
                print("tls handshake failed: " + repr(e), flush=True)
                return
        super().finish_request(request, client_address)

for port, tls in [(80, False), (8080, False), (443, True), (8443, True)]:
    s = Server(("0.0.0.0", port), Handler)
    s.tls = tls
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// The client in the guest: `python3 -c CLIENT_PY '[{"op": ...}, ...]'`
/// prints one JSON result per operation (with `ms`, the time it took).
const CLIENT_PY: &str = r#"
import json, os, socket, ssl, sys, threading, time, urllib.error, urllib.request

PROXY = ("127.0.0.1", 3128)
T = 20

def tls_ctx():
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    return c

def read_response(s, eof):
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            break
        head += b
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    length = None
    for l in lines[1:]:
        k, _, v = l.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    body = b""
    if length is not None:
        while len(body) < length:
            b = s.recv(length - len(body))
            if not b:
                break
            body += b
    elif eof and status is not None:
        while True:
            b = s.recv(65536)
            if not b:
                break
            body += b
    return status, body.decode("utf-8", "replace")

def op_get(o):
    # An absolute-form request to the proxy.
    s = socket.create_connection(PROXY, timeout=T)
    auth = o["authority"]
    s.sendall(("GET http://%s%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
        % (auth, o.get("path", "/"), o.get("host", auth))).encode())
    status, body = read_response(s, True)
    return {"status": status, "body": body}

def op_tls(o):
    # CONNECT, then TLS with a chosen server name, then a GET.
    auth = o["authority"]
    s = socket.create_connection(PROXY, timeout=T)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"
        % (auth, o.get("connect_host", auth))).encode())
    status, body = read_response(s, False)
    r = {"connect_status": status}
    if status != 200:
        r["body"] = body
        return r
    sni = o.get("sni", auth.rsplit(":", 1)[0])
    try:
        t = tls_ctx().wrap_socket(s, server_hostname=sni)
    except Exception as e:
        r["tls_error"] = repr(e)
        return r
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
        % (o.get("path", "/"), o.get("host", sni))).encode())
    r["status"], r["body"] = read_response(t, True)
    return r

def op_urllib(o):
    # What tools do: the proxy from the environment.
    os.environ["http_proxy"] = os.environ["https_proxy"] = "http://127.0.0.1:3128"
    try:
        r = urllib.request.urlopen(o["url"], context=tls_ctx(), timeout=T)
        return {"status": r.status, "body": r.read().decode("utf-8", "replace")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode("utf-8", "replace")}

def op_direct(o):
    # Straight to an address, skipping the proxy.
    if o.get("udp"):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(b"sandtop", (o["ip"], o["port"]))
        return {"ok": True}
    s = socket.create_connection((o["ip"], o["port"]), timeout=3)
    r = {"ok": True}
    if "path" in o:
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
            % (o["path"], o.get("host", o["ip"]))).encode())
        r["status"], r["body"] = read_response(s, True)
    return r

def op_dns(o):
    res = {}
    def run():
        try:
            res["addrs"] = sorted({a[4][0] for a in socket.getaddrinfo(o["name"], 80)})
        except Exception as e:
            res["error"] = repr(e)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(5)
    if th.is_alive():
        return {"ok": False, "error": "timed out after 5 s"}
    if "error" in res:
        return {"ok": False, "error": res["error"]}
    return {"ok": True, "addrs": res["addrs"]}

def op_ifaces(o):
    names = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
    routes = len(open("/proc/net/route").read().splitlines()) - 1
    try:
        v6 = [l.split()[-1] for l in open("/proc/net/if_inet6").read().splitlines()]
    except OSError:
        v6 = []
    return {"interfaces": names, "ipv4_routes": routes, "ipv6_interfaces": v6}

def op_relay(o):
    # The relay at 127.0.0.1:3128 without a proxy behind it.
    try:
        s = socket.create_connection(PROXY, timeout=3)
    except Exception as e:
        return {"connected": False, "error": repr(e), "bytes": 0}
    data = b""
    try:
        s.sendall(b"GET http://allowed.test/n1-relay HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        return {"connected": True, "closed": True, "bytes": len(data)}
    except socket.timeout:
        return {"connected": True, "closed": False, "error": "timeout", "bytes": len(data)}
    except Exception as e:
        return {"connected": True, "closed": True, "error": repr(e), "bytes": len(data)}

def desktop_env():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if open("/proc/%s/comm" % pid).read().strip() != "sandtopd":
                continue
            raw = open("/proc/%s/environ" % pid, "rb").read()
        except OSError:
            continue
        env = dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)
        return pid, env
    return None, {}

def op_proxy_env(o):
    # What the desktop (sandtopd, and so the browser it starts) was given.
    pid, env = desktop_env()
    keys = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "SANDTOP_EGRESS"]
    return {"pid": pid, "env": {k: env.get(k) for k in keys}}

def op_scan(o):
    # Where a secret's value could hide: environments, command lines, files.
    # (This process carries the needles in its own argv: skipped.)
    needles = [n.encode() for n in o["needles"]]
    hits, unreadable, read = [], 0, 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for f in ("environ", "cmdline"):
            try:
                b = open("/proc/%s/%s" % (pid, f), "rb").read()
                read += 1
            except OSError:
                unreadable += 1
                continue
            hits += ["/proc/%s/%s" % (pid, f) for n in needles if n in b]
    for root in ("/run/sandtop", "/home/user", "/tmp"):
        for d, _, files in os.walk(root):
            for f in files:
                p = os.path.join(d, f)
                try:
                    if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > 4 << 20:
                        continue
                    b = open(p, "rb").read()
                    read += 1
                except OSError:
                    unreadable += 1
                    continue
                hits += [p for n in needles if n in b]
    return {"hits": hits, "read": read, "unreadable": unreadable}

def op_par(o):
    out = [None] * len(o["ops"])
    def one(i, sub):
        out[i] = run(sub)
    ths = [threading.Thread(target=one, args=(i, s)) for i, s in enumerate(o["ops"])]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return {"results": out}

def run(o):
    t0 = time.monotonic()
    try:
        r = globals()["op_" + o["op"]](o)
    except Exception as e:
        r = {"ok": False, "error": repr(e)}
    r["ms"] = int((time.monotonic() - t0) * 1000)
    r["req"] = o
    return r

print(json.dumps([run(o) for o in json.loads(sys.argv[1])]))
"#;

/// A client in the fake internet's network (the positive control of N4).
const CONTROL_PY: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(("GET %s HTTP/1.1\r\nHost: control\r\nConnection: close\r\n\r\n" % sys.argv[3]).encode())
print(s.recv(4096).decode("latin-1").split("\r\n")[0])
"#;

const LONG: Duration = Duration::from_secs(60);
/// Labels of what this file creates besides guests.
const LABEL_RUN: &str = "sandtop.test-run";
const LABEL_PID: &str = "sandtop.test-pid";

// ---------------------------------------------------------------------------
// The world.

/// What is there before the fake internet.
#[derive(Debug, Clone)]
struct Base {
    backend: DockerBackend,
    store: Store,
    state_dir: PathBuf,
    host_cli: PathBuf,
    /// Short random id of this run.
    run: String,
}

/// The test network and the fake internet on it.
#[derive(Debug)]
struct TestNet {
    name: String,
    subnet: String,
    gateway: IpAddr,
    fake_name: String,
    fake_id: String,
    /// The fake internet's address on the test network.
    fake_ip: IpAddr,
    /// Its address on Docker's default bridge (for the `open` case).
    fake_bridge_ip: Option<IpAddr>,
    removed: bool,
}

/// A TCP service of the host that records the first line of each request.
#[derive(Debug, Clone)]
struct HostService {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl HostService {
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

struct Ctx {
    base: Base,
    /// `allow:` with the test network and 169.254.0.0/16 listed as private
    /// ranges the proxy may reach, started with secrets in host-cli's
    /// environment (N6).
    main: Guest,
    /// The same allowlist and pins, without `--allow-private`.
    noprivate: Guest,
    net: TestNet,
    /// On the test network's gateway address.
    host_gw: HostService,
    /// On 127.0.0.1.
    host_lo: HostService,
    /// The values of `OPENAI_API_KEY` and `SANDTOPD_TOKEN` given to `guest
    /// start` of `main`.
    secrets: Vec<String>,
}

/// Cases that fail because of a product bug (reported; not fixed here).
const IGNORED: &[(&str, &str)] = &[];

fn ignored_because(case: &str) -> Option<&'static str> {
    IGNORED.iter().find(|(n, _)| *n == case).map(|(_, r)| *r)
}

fn main() -> ExitCode {
    let t0 = Instant::now();
    let cases = cases![
        allowed_origin_over_http_and_https,
        blocked_prefix_port_ip_literal_host_and_sni_tricks_fail,
        private_and_metadata_addresses_fail_even_when_listed,
        no_bypass_direct_udp_dns_or_interfaces,
        default_none_has_no_way_out,
        host_services_are_unreachable,
        nothing_published_and_the_proxy_has_no_tcp_port,
        secrets_never_reach_the_guest_or_the_proxy,
        decisions_are_journalled_with_reasons,
        open_mode_reaches_the_fake_internet_directly,
        ask_mode_with_a_scripted_operator,
        ask_mode_refuses_ip_literals_in_disguise,
    ]
    .into_iter()
    .map(|c| {
        let reason = ignored_because(c.name);
        c.ignored_because(reason)
    })
    .collect();
    let code = Suite {
        name: "network",
        final_check: "nothing_of_this_run_is_left",
        cases,
    }
    .run(
        |rt, tmp| {
            let Some(base) = rt.block_on(base(tmp))? else {
                return Ok(None); // skipped, reason printed
            };
            match rt.block_on(setup(base.clone())) {
                Ok(ctx) => {
                    println!(
                        "\nnetwork run {}; fake internet {} on {}, setup {:.1} s",
                        ctx.base.run,
                        ctx.net.fake_ip,
                        ctx.net.subnet,
                        t0.elapsed().as_secs_f64()
                    );
                    Ok(Some(ctx))
                }
                Err(e) => {
                    let _ = rt.block_on(leftovers(&base));
                    Err(e)
                }
            }
        },
        // Tear down, then the suite's promise: nothing of this run is left.
        |rt, ctx| {
            let base = ctx.base.clone();
            match Arc::try_unwrap(ctx) {
                Ok(ctx) => {
                    if let Err(e) = rt.block_on(ctx.teardown()) {
                        println!("network: teardown: {e:#}");
                    }
                }
                Err(ctx) => drop(ctx), // a case still holds it: the guards clean up
            }
            rt.block_on(leftovers(&base))
        },
    );
    println!("network: {:.1} s in all", t0.elapsed().as_secs_f64());
    code
}

/// Docker, the image, host-cli; `None` when the tier is skipped.
async fn base(tmp: &Path) -> anyhow::Result<Option<Base>> {
    let backend = match DockerBackend::connect().await {
        Ok(b) => b
            .with_image(docker::DEFAULT_IMAGE)
            .with_channel(ChannelMode::Auto),
        Err(e) => {
            skip::skip("docker", &e.chain());
            return Ok(None);
        }
    };
    if let Err(e) = backend.image_info().await {
        skip::skip(
            "docker",
            &format!("{} (make test builds it: make guest-image)", e.chain()),
        );
        return Ok(None);
    }
    let me = std::env::current_exe().context("current_exe")?;
    // target/debug/deps/network-HASH -> target/debug/host-cli
    let host_cli = me
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("host-cli"))
        .context("no target folder")?;
    ensure!(
        host_cli.is_file(),
        "{} is missing: build it first (cargo build -p host-cli; make test does)",
        host_cli.display()
    );
    warn_if_stale(&host_cli);
    let state_dir = tmp.join("state");
    let store = Store::at(state_dir.clone())?;
    let run = host_cli::session::new_name()?
        .trim_start_matches('s')
        .to_string();
    Ok(Some(Base {
        backend,
        store,
        state_dir,
        host_cli,
        run,
    }))
}

/// The binary is what runs the egress proxy: say so when it is older than
/// the sources it is built from.
fn warn_if_stale(bin: &Path) {
    let newest = |dir: &Path| -> Option<std::time::SystemTime> {
        let mut best = None;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).ok()?.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                    best = best.max(Some(m));
                }
            }
        }
        best
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../host-cli/src");
    if let (Some(s), Ok(b)) = (
        newest(&src),
        std::fs::metadata(bin).and_then(|m| m.modified()),
    ) && s > b
    {
        eprintln!(
            "network: warning: {} is older than host-cli/src: `cargo build -p host-cli` to test the current code",
            bin.display()
        );
    }
}

async fn setup(base: Base) -> anyhow::Result<Ctx> {
    let docker = base.backend.docker().clone();
    remove_stale(&docker).await;
    let net = TestNet::create(&docker, &base.run).await?;
    let host_gw = host_service(net.gateway).await?;
    let host_lo = host_service("127.0.0.1".parse()?).await?;
    let secrets = vec![
        format!("sk-network-{}-never-in-the-guest", base.run),
        format!("daemon-token-{}-never-in-the-guest", base.run),
    ];
    let env = [
        ("OPENAI_API_KEY", secrets[0].as_str()),
        (sandtop_protocol::session::TOKEN_ENV, secrets[1].as_str()),
    ];
    let (main_args, noprivate_args) = (
        allow_args(&net, &host_gw, &host_lo, true),
        allow_args(&net, &host_gw, &host_lo, false),
    );
    let (main, noprivate) = tokio::join!(
        Guest::start(&base, "allow", &main_args, &env),
        Guest::start(&base, "nopriv", &noprivate_args, &[]),
    );
    let (main, noprivate) = match (main, noprivate) {
        (Ok(m), Ok(n)) => (m.0, n.0),
        (m, n) => {
            // The guards of whichever started stop it.
            let e = [m.err(), n.err()].into_iter().flatten().next();
            bail!("starting the guests: {:#}", e.unwrap())
        }
    };
    Ok(Ctx {
        base,
        main,
        noprivate,
        net,
        host_gw,
        host_lo,
        secrets,
    })
}

/// The allowlist of `main` and `noprivate`; every name pinned.
fn allow_args(
    net: &TestNet,
    host_gw: &HostService,
    host_lo: &HostService,
    private: bool,
) -> Vec<String> {
    let fake = net.fake_ip;
    let mut a = vec![
        "--network".to_string(),
        format!(
            "allow:http://allowed.test,https://allowed.test,http://host.test:{},http://loop.test:{},http://meta.test",
            host_gw.addr.port(),
            host_lo.addr.port()
        ),
    ];
    for (n, ip) in [
        ("allowed.test", fake.to_string()),
        ("blocked.test", fake.to_string()),
        ("allowed.test.evil.test", fake.to_string()),
        ("host.test", net.gateway.to_string()),
        ("loop.test", "127.0.0.1".to_string()),
        ("meta.test", "169.254.169.254".to_string()),
    ] {
        a.push("--egress-resolve".into());
        a.push(format!("{n}={ip}"));
    }
    if private {
        for c in [net.subnet.as_str(), "169.254.0.0/16"] {
            a.push("--allow-private".into());
            a.push(c.to_string());
        }
    }
    a
}

impl Ctx {
    async fn teardown(self) -> anyhow::Result<()> {
        let Ctx {
            main,
            noprivate,
            mut net,
            ..
        } = self;
        let (a, b) = tokio::join!(main.stop(), noprivate.stop());
        let c = net.remove().await;
        a.and(b).and(c)
    }
}

/// Removes test networks and fake internets of runs whose process is gone
/// (a run killed before its cleanup).
async fn remove_stale(docker: &Docker) {
    let alive = |labels: Option<&HashMap<String, String>>| {
        labels
            .and_then(|l| l.get(LABEL_PID))
            .is_some_and(|p| Path::new(&format!("/proc/{p}")).exists())
    };
    let filter = HashMap::from([("label", vec![LABEL_PID.to_string()])]);
    if let Ok(list) = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filter)
                .build(),
        ))
        .await
    {
        for c in list.into_iter().filter(|c| !alive(c.labels.as_ref())) {
            if let Some(id) = c.id {
                let _ = docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptionsBuilder::new().force(true).build()),
                    )
                    .await;
            }
        }
    }
    if let Ok(list) = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::new().filters(&filter).build(),
        ))
        .await
    {
        for n in list.into_iter().filter(|n| !alive(n.labels.as_ref())) {
            if let Some(name) = n.name {
                let _ = docker.remove_network(&name).await;
            }
        }
    }
}

/// The image of the fake internet: the local base image, else the guest's.
async fn fake_image(docker: &Docker) -> String {
    let filter = HashMap::from([("label", vec!["sandtop.packages-hash".to_string()])]);
    let images = docker
        .list_images(Some(
            ListImagesOptionsBuilder::new().filters(&filter).build(),
        ))
        .await
        .unwrap_or_default();
    images
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .find(|t| t.starts_with("sandtop-base:"))
        .unwrap_or_else(|| docker::DEFAULT_IMAGE.to_string())
}

impl TestNet {
    async fn create(docker: &Docker, run: &str) -> anyhow::Result<TestNet> {
        let labels = HashMap::from([
            (LABEL_RUN.to_string(), run.to_string()),
            (LABEL_PID.to_string(), std::process::id().to_string()),
        ]);
        let name = format!("sandtop-test-net-{run}");
        docker
            .create_network(NetworkCreateRequest {
                name: name.clone(),
                driver: Some("bridge".into()),
                labels: Some(labels.clone()),
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating the network {name}"))?;
        let mut net = TestNet {
            name: name.clone(),
            subnet: String::new(),
            gateway: IpAddr::from([0, 0, 0, 0]),
            fake_name: format!("sandtop-test-fake-{run}"),
            fake_id: String::new(),
            fake_ip: IpAddr::from([0, 0, 0, 0]),
            fake_bridge_ip: None,
            removed: false,
        };
        // From here on, `net`'s guard removes what exists.
        let n = docker
            .inspect_network(&name, None::<InspectNetworkOptions>)
            .await?;
        let cfg = n
            .ipam
            .and_then(|i| i.config)
            .and_then(|c| c.into_iter().find(|c| c.subnet.is_some()))
            .context("the test network has no IPAM config")?;
        net.subnet = cfg.subnet.context("no subnet")?;
        net.gateway = cfg
            .gateway
            .context("no gateway")?
            .parse()
            .context("the gateway")?;
        let image = fake_image(docker).await;
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint: Some(vec!["python3".into(), "-c".into(), SERVER_PY.into()]),
            cmd: Some(Vec::new()),
            user: Some("0:0".into()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(name.clone()),
                cap_drop: Some(vec!["ALL".into()]),
                cap_add: Some(vec!["NET_BIND_SERVICE".into()]),
                security_opt: Some(vec!["no-new-privileges:true".into()]),
                memory: Some(256 << 20),
                pids_limit: Some(256),
                auto_remove: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = docker
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::new()
                        .name(&net.fake_name)
                        .build(),
                ),
                body,
            )
            .await
            .with_context(|| format!("creating the fake internet from {image}"))?;
        net.fake_id = created.id;
        docker
            .connect_network(
                "bridge",
                NetworkConnectRequest {
                    container: net.fake_id.clone(),
                    endpoint_config: None,
                },
            )
            .await
            .context("attaching the fake internet to the default bridge")?;
        docker
            .start_container(&net.fake_id, None)
            .await
            .context("starting the fake internet")?;
        let c = docker
            .inspect_container(&net.fake_id, None::<InspectContainerOptions>)
            .await?;
        let nets = c
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default();
        let ip_on = |n: &str| -> Option<IpAddr> {
            nets.get(n)
                .and_then(|e| e.ip_address.as_deref())
                .and_then(|s| s.parse().ok())
        };
        net.fake_ip = ip_on(&name).context("the fake internet has no address")?;
        net.fake_bridge_ip = ip_on("bridge");
        // Ready when it answers the host (the egress proxy's side).
        let addr = SocketAddr::new(net.fake_ip, 80);
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = host_get(addr, "allowed.test", "/ready").await
                && r.contains("\"vhost\": \"allowed.test\"")
            {
                break;
            }
            if Instant::now() > end {
                let logs = fake_logs(docker, &net.fake_id).await.unwrap_or_default();
                bail!(
                    "the fake internet did not answer on {addr} within 30 s; its log:\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(net)
    }

    async fn remove(&mut self) -> anyhow::Result<()> {
        self.removed = true;
        let b = DockerBackend::connect().await?;
        if !self.fake_id.is_empty() {
            b.remove(&self.fake_id).await?;
        }
        match b.docker().remove_network(&self.name).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing the network {}", self.name)),
        }
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (name, fake) = (self.name.clone(), self.fake_id.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let Ok(b) = DockerBackend::connect().await else {
                    return;
                };
                if !fake.is_empty() {
                    let _ = b.remove(&fake).await;
                }
                if let Err(e) = b.docker().remove_network(&name).await {
                    eprintln!("network: removing {name}: {e}");
                }
            });
        })
        .join();
    }
}

/// The requests the fake internet served (`{"vhost", "sni", "tls",
/// "port", "path"}`).
async fn fake_logs(docker: &Docker, id: &str) -> anyhow::Result<Vec<String>> {
    let mut s = docker.logs(
        id,
        Some(LogsOptionsBuilder::new().stdout(true).stderr(true).build()),
    );
    let mut text = String::new();
    while let Some(item) = s.next().await {
        match item? {
            LogOutput::StdOut { message }
            | LogOutput::StdErr { message }
            | LogOutput::Console { message } => text.push_str(&String::from_utf8_lossy(&message)),
            LogOutput::StdIn { .. } => {}
        }
    }
    Ok(text.lines().map(String::from).collect())
}

impl Ctx {
    fn docker(&self) -> &Docker {
        self.base.backend.docker()
    }

    /// Requests the fake internet served whose path starts with `prefix`.
    async fn landed(&self, prefix: &str) -> anyhow::Result<Vec<Value>> {
        Ok(fake_logs(self.docker(), &self.net.fake_id)
            .await?
            .iter()
            .filter_map(|l| l.strip_prefix("served "))
            .filter_map(|j| serde_json::from_str::<Value>(j).ok())
            .filter(|v| v["path"].as_str().is_some_and(|p| p.starts_with(prefix)))
            .collect())
    }
}

/// A GET from this process (not from a guest).
async fn host_get(addr: SocketAddr, host: &str, path: &str) -> anyhow::Result<String> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        anyhow::Ok(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(3), io)
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))?
}

/// Listens on `ip` (an ephemeral port) and answers `host-service` to
/// anything, recording each request's first line.
async fn host_service(ip: IpAddr) -> anyhow::Result<HostService> {
    let l = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .with_context(|| format!("listening on {ip}"))?;
    let addr = l.local_addr()?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let seen = Arc::clone(&s2);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]);
                let first = req.lines().next().unwrap_or("<no request>").to_string();
                seen.lock().unwrap().push(first);
                let body = "host-service";
                let _ = c
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    Ok(HostService { addr, seen })
}

/// Containers, networks and egress proxies of this run that still exist.
async fn leftovers(base: &Base) -> anyhow::Result<Vec<String>> {
    let docker = base.backend.docker();
    let mut left = Vec::new();
    let sessions = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&HashMap::from([(
                    "label",
                    vec![docker::LABEL_SESSION.to_string()],
                )]))
                .build(),
        ))
        .await?;
    let prefix = base.state_dir.to_string_lossy().into_owned();
    for c in sessions {
        if c.labels
            .as_ref()
            .and_then(|l| l.get(docker::LABEL_SESSION_DIR))
            .is_some_and(|d| d.starts_with(&prefix))
        {
            left.push(format!("guest container {:?}", c.names));
            if let Some(id) = c.id {
                let _ = base.backend.remove(&id).await;
            }
        }
    }
    let mine = HashMap::from([("label", vec![format!("{LABEL_RUN}={}", base.run)])]);
    for c in docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&mine)
                .build(),
        ))
        .await?
    {
        left.push(format!("fake internet {:?}", c.names));
        if let Some(id) = c.id {
            let _ = base.backend.remove(&id).await;
        }
    }
    for n in docker
        .list_networks(Some(ListNetworksOptionsBuilder::new().build()))
        .await?
    {
        // Ours, or one whose run is gone (another live run keeps its own).
        let name = n.name.unwrap_or_default();
        let owner_alive = n
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_PID))
            .is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if name == format!("sandtop-test-net-{}", base.run)
            || (name.starts_with("sandtop-test-net-") && !owner_alive)
        {
            left.push(format!("network {name}"));
            let _ = docker.remove_network(&name).await;
        }
    }
    for p in host_pids_with_cmdline(&prefix) {
        left.push(format!("process {p} (an egress proxy of this run?)"));
    }
    Ok(left)
}

/// Host processes whose command line contains `needle`.
fn host_pids_with_cmdline(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| *p != me)
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Guests.

/// A running guest; stopped (with its egress proxy) when dropped.
#[derive(Debug)]
struct Guest {
    base: Base,
    rec: SessionRecord,
    dir: SessionDir,
    stopped: bool,
}

impl Guest {
    /// `host-cli guest start --json --name net-RUN-TAG ARGS` with a scrubbed
    /// environment plus `env`; returns the guest and host-cli's stderr.
    async fn start(
        base: &Base,
        tag: &str,
        args: &[String],
        env: &[(&str, &str)],
    ) -> anyhow::Result<(Guest, String)> {
        let name = format!("net-{}-{tag}", base.run);
        let mut c = tokio::process::Command::new(&base.host_cli);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SANDTOP_STATE_DIR", &base.state_dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .args(["guest", "start", "--json", "--name", &name])
            .args(args);
        if let Some(h) = std::env::var_os("DOCKER_HOST") {
            c.env("DOCKER_HOST", h);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().await?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // Adopt whatever exists, so that the guard removes it.
        let adopted = base
            .store
            .get(&name)
            .and_then(|dir| Ok((dir.load()?, dir)))
            .map(|(rec, dir)| Guest {
                base: base.clone(),
                rec,
                dir,
                stopped: false,
            });
        ensure!(
            out.status.success(),
            "guest start {args:?} failed: {stderr}"
        );
        let g = adopted?;
        let started: Value = serde_json::from_slice(&out.stdout)?;
        ensure!(started["container_id"] == g.id(), "{started}");
        Ok((g, stderr))
    }

    fn id(&self) -> &str {
        self.rec
            .docker()
            .map(|d| d.container_id.as_str())
            .unwrap_or("")
    }

    fn paths(&self) -> Paths {
        Paths::new(&self.dir.path, &self.dir.guest_path())
    }

    /// Runs the client's operations inside the guest, as the guest's uid.
    async fn py(&self, ops: &Value) -> anyhow::Result<Vec<Value>> {
        py_in(&self.base.backend, self.id(), ops).await
    }

    async fn probe(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut argv = vec!["/usr/local/bin/sandtop-probe"];
        argv.extend_from_slice(args);
        let r = self
            .base
            .backend
            .exec(self.id(), &argv, None, Duration::from_secs(120))
            .await?;
        ensure!(
            r.exit_code == 0,
            "sandtop-probe exited {}: {}",
            r.exit_code,
            String::from_utf8_lossy(&r.stderr)
        );
        serde_json::from_slice(&r.stdout).context("the probe's JSON")
    }

    async fn inspect(&self) -> anyhow::Result<bollard::models::ContainerInspectResponse> {
        Ok(self
            .base
            .backend
            .docker()
            .inspect_container(self.id(), None::<InspectContainerOptions>)
            .await?)
    }

    /// The entries of `egress.jsonl` after the first `skip`.
    fn journal(&self, skip: usize) -> anyhow::Result<Vec<Value>> {
        let text = std::fs::read_to_string(self.paths().journal).unwrap_or_default();
        text.lines()
            .skip(skip)
            .map(|l| serde_json::from_str(l).with_context(|| format!("a journal line: {l}")))
            .collect()
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        let pid = self.rec.egress_pid;
        guest::stop(&self.base.store, &self.dir, &self.rec).await?;
        if let Some(pid) = pid {
            // The proxy goes with the guest.
            wait_for(
                "the egress proxy to exit",
                Duration::from_secs(10),
                || async { (!Path::new(&format!("/proc/{pid}")).exists()).then_some(()) },
            )
            .await?;
        }
        Ok(())
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let (store, dir, rec) = (self.base.store.clone(), self.dir.clone(), self.rec.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Err(e) = guest::stop(&store, &dir, &rec).await {
                    eprintln!("network: removing {}: {}", rec.name, e.chain());
                }
            });
        })
        .join();
    }
}

async fn py_in(
    backend: &DockerBackend,
    container: &str,
    ops: &Value,
) -> anyhow::Result<Vec<Value>> {
    let arg = ops.to_string();
    let r = backend
        .exec(container, &["python3", "-c", CLIENT_PY, &arg], None, LONG)
        .await?;
    ensure!(
        r.exit_code == 0,
        "the client exited {}: {}",
        r.exit_code,
        String::from_utf8_lossy(&r.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&r.stdout).with_context(|| {
        format!(
            "the client's output: {}",
            String::from_utf8_lossy(&r.stdout)
        )
    })?;
    ensure!(
        v.len() == ops.as_array().map_or(0, Vec::len),
        "one result per operation"
    );
    if std::env::var_os("SANDTOP_NETWORK_VERBOSE").is_some() {
        for r in &v {
            eprintln!("  {r}");
        }
    }
    Ok(v)
}

async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > end {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// Checks on results.

/// The fake internet's answer in a result's body.
fn answer(r: &Value) -> Value {
    r["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null)
}

/// A request that got through and landed on `vhost` (and, over TLS, with
/// that server name) at `port`.
fn landed_on(r: &Value, vhost: &str, port: u16, tls: bool) -> anyhow::Result<()> {
    ensure!(r["status"] == 200, "expected 200: {r}");
    let a = answer(r);
    ensure!(
        a["vhost"] == vhost && a["port"] == port && a["tls"] == tls,
        "landed elsewhere: {a} ({r})"
    );
    if tls {
        ensure!(a["sni"] == vhost, "TLS server name {} ({r})", a["sni"]);
    }
    Ok(())
}

/// A request the proxy refused with 403 and a reason containing `why`.
fn refused(r: &Value, why: &str) -> anyhow::Result<()> {
    let (status, body) = if r["req"]["op"] == "tls" {
        (&r["connect_status"], &r["body"])
    } else {
        (&r["status"], &r["body"])
    };
    ensure!(status == 403, "expected 403: {r}");
    let body = body.as_str().unwrap_or("");
    ensure!(
        body.starts_with("sandtop egress proxy:") && body.contains(why),
        "expected the proxy's reason `{why}`: {r}"
    );
    Ok(())
}

/// A direct attempt that failed, fast.
fn failed_fast(r: &Value) -> anyhow::Result<()> {
    ensure!(r["ok"] == false, "it succeeded: {r}");
    ensure!(
        r["ms"].as_u64().unwrap_or(u64::MAX) < 2000,
        "it failed, but not fast: {r}"
    );
    Ok(())
}

fn get(authority: &str, path: &str) -> Value {
    json!({"op": "get", "authority": authority, "path": path})
}

fn tls(authority: &str, path: &str) -> Value {
    json!({"op": "tls", "authority": authority, "path": path})
}

fn urllib(url: &str) -> Value {
    json!({"op": "urllib", "url": url})
}

fn direct(ip: IpAddr, port: u16) -> Value {
    json!({"op": "direct", "ip": ip.to_string(), "port": port})
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// N2: the allowlist.

async fn allowed_origin_over_http_and_https(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let r = ctx
        .main
        .py(&json!([
            urllib("http://allowed.test/n2ok-http"),
            urllib("https://allowed.test/n2ok-https"),
            tls("allowed.test:443", "/n2ok-raw-tls"),
            {"op": "proxy_env"},
        ]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false).context("http through the proxy")?;
    landed_on(&r[1], "allowed.test", 443, true).context("https through CONNECT")?;
    landed_on(&r[2], "allowed.test", 443, true).context("a raw CONNECT")?;
    // The desktop (and the browser it starts) is pointed at the proxy.
    let env = &r[3]["env"];
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        ensure!(env[k] == "http://127.0.0.1:3128", "{k}: {}", r[3]);
    }
    ensure!(env["SANDTOP_EGRESS"] == "proxy", "{}", r[3]);
    // Exactly those three requests reached the fake internet.
    let landed = ctx.landed("/n2ok-").await?;
    let paths: BTreeSet<String> = landed
        .iter()
        .filter_map(|v| v["path"].as_str().map(String::from))
        .collect();
    ensure!(
        landed.len() == 3
            && paths
                == BTreeSet::from([
                    "/n2ok-http".to_string(),
                    "/n2ok-https".into(),
                    "/n2ok-raw-tls".into()
                ]),
        "landed: {landed:?}"
    );
    Ok(())
}

async fn blocked_prefix_port_ip_literal_host_and_sni_tricks_fail(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let ip = ctx.net.fake_ip.to_string();
    let r = ctx
        .main
        .py(&json!([
            get("blocked.test", "/n2x-blocked"),
            tls("blocked.test:443", "/n2x-blocked-tls"),
            urllib("http://blocked.test/n2x-blocked-urllib"),
            get("allowed.test.evil.test", "/n2x-prefix"),
            tls("allowed.test.evil.test:443", "/n2x-prefix-tls"),
            get("allowed.test:8080", "/n2x-port"),
            tls("allowed.test:8443", "/n2x-port-tls"),
            get(&ip, "/n2x-ip"),
            tls(&format!("{ip}:443"), "/n2x-ip-tls"),
            // CONNECT to the allowed host, TLS naming the blocked one.
            {"op": "tls", "authority": "allowed.test:443", "sni": "blocked.test",
             "host": "blocked.test", "path": "/n2x-sni"},
            // A Host header that names another host than the target.
            {"op": "get", "authority": "allowed.test", "host": "blocked.test", "path": "/n2x-host"},
            {"op": "tls", "authority": "allowed.test:443", "connect_host": "blocked.test:443",
             "path": "/n2x-host-tls"},
            // User info in the authority.
            get("allowed.test@blocked.test", "/n2x-userinfo"),
        ]))
        .await?;
    refused(&r[0], "is not on the allowlist")?;
    refused(&r[1], "is not on the allowlist")?;
    refused(&r[2], "is not on the allowlist")?;
    refused(
        &r[3],
        "http://allowed.test.evil.test is not on the allowlist",
    )?;
    refused(
        &r[4],
        "https://allowed.test.evil.test is not on the allowlist",
    )?;
    refused(&r[5], "http://allowed.test:8080 is not on the allowlist")?;
    refused(&r[6], "https://allowed.test:8443 is not on the allowlist")?;
    refused(&r[7], "IP literals are refused")?;
    refused(&r[8], "IP literals are refused")?;
    let sni = &r[9];
    ensure!(
        sni["connect_status"] == 200 && sni["tls_error"].is_string() && sni["status"].is_null(),
        "the SNI mismatch got through: {sni}"
    );
    refused(&r[10], "disagrees with the target")?;
    refused(&r[11], "disagrees with the target")?;
    let ui = r[12]["status"].as_u64().unwrap_or(0);
    ensure!((400..500).contains(&ui), "user info: {}", r[12]);
    // None of them landed anywhere.
    let landed = ctx.landed("/n2x-").await?;
    ensure!(landed.is_empty(), "refused requests landed: {landed:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// N3: private ranges and the metadata address.

async fn private_and_metadata_addresses_fail_even_when_listed(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    // `main` lists 169.254.0.0/16 with --allow-private; the metadata
    // address is refused anyway. loop.test is listed, pinned to 127.0.0.1.
    let cfg = ctx
        .main
        .rec
        .network
        .clone()
        .context("main has no network")?;
    ensure!(
        cfg.allow_private
            .iter()
            .any(|c| format!("{}/{}", c.addr, c.prefix) == "169.254.0.0/16"),
        "{cfg:?}"
    );
    let lo = ctx.host_lo.addr.port();
    let r = ctx
        .main
        .py(&json!([
            get("meta.test", "/n3-meta"),
            get(&format!("loop.test:{lo}"), "/n3-loop"),
        ]))
        .await?;
    refused(&r[0], "resolves to the metadata address 169.254.169.254")?;
    refused(&r[1], "resolves to the non-public address 127.0.0.1")?;
    // Without --allow-private, the allowed names pinned to the test network
    // are refused too.
    let gw = ctx.host_gw.addr.port();
    let fake = ctx.net.fake_ip;
    let r = ctx
        .noprivate
        .py(&json!([
            urllib("http://allowed.test/n3-np-http"),
            urllib("https://allowed.test/n3-np-https"),
            get("allowed.test", "/n3-np-get"),
            tls("allowed.test:443", "/n3-np-tls"),
            get(&format!("host.test:{gw}"), "/n3-np-host"),
            get("meta.test", "/n3-np-meta"),
        ]))
        .await?;
    refused(&r[0], &format!("resolves to the non-public address {fake}"))?;
    // urllib reports a refused CONNECT as an error, not a status.
    ensure!(
        r[1]["error"].as_str().is_some_and(|e| e.contains("403")),
        "https without --allow-private: {}",
        r[1]
    );
    refused(&r[2], "non-public address")?;
    refused(&r[3], "non-public address")?;
    refused(&r[4], &format!("non-public address {}", ctx.net.gateway))?;
    refused(&r[5], "metadata address")?;
    let landed = ctx.landed("/n3-").await?;
    ensure!(landed.is_empty(), "refused requests landed: {landed:?}");
    ensure!(
        !ctx.host_gw.seen().iter().any(|l| l.contains("/n3-"))
            && !ctx.host_lo.seen().iter().any(|l| l.contains("/n3-")),
        "a host service was reached"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// No way around the proxy.

async fn no_bypass_direct_udp_dns_or_interfaces(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let c = ctx.main.inspect().await?;
    let h = c.host_config.clone().context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "{:?}",
        h.network_mode
    );
    let nets: Vec<String> = c
        .network_settings
        .and_then(|s| s.networks)
        .unwrap_or_default()
        .into_keys()
        .collect();
    ensure!(nets == vec!["none".to_string()], "networks {nets:?}");
    let (fake, gw) = (ctx.net.fake_ip, ctx.net.gateway);
    let gw_before = ctx.host_gw.seen().len();
    let mut ops = vec![
        direct(fake, 80),
        direct(fake, 443),
        direct(gw, ctx.host_gw.addr.port()),
        json!({"op": "direct", "udp": true, "ip": fake.to_string(), "port": 53}),
        json!({"op": "dns", "name": "allowed.test"}),
        json!({"op": "dns", "name": "sandtop-dns-check.test"}),
        json!({"op": "ifaces"}),
    ];
    if let Some(b) = ctx.net.fake_bridge_ip {
        ops.push(direct(b, 80));
    }
    let r = ctx.main.py(&json!(ops)).await?;
    for x in r.iter().filter(|x| x["req"]["op"] != "ifaces") {
        failed_fast(x)?;
    }
    let i = r.iter().find(|x| x["req"]["op"] == "ifaces").unwrap();
    ensure!(strs(&i["interfaces"]) == vec!["lo".to_string()], "{i}");
    ensure!(i["ipv4_routes"] == 0, "{i}");
    ensure!(strs(&i["ipv6_interfaces"]).iter().all(|n| n == "lo"), "{i}");
    ensure!(
        ctx.host_gw.seen().len() == gw_before,
        "the gateway service saw {:?}",
        ctx.host_gw.seen()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// N1: the default.

async fn default_none_has_no_way_out(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let (g, _) = Guest::start(&ctx.base, "none", &[], &[]).await?;
    ensure!(
        g.rec.network.is_none() && g.rec.egress_pid.is_none(),
        "{:?}",
        g.rec
    );
    let h = g.inspect().await?.host_config.context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "{:?}",
        h.network_mode
    );
    let p = g.paths();
    for f in [&p.config, &p.guest_socket, &p.control, &p.journal, &p.log] {
        ensure!(!f.exists(), "{} exists without a policy", f.display());
    }
    ensure!(
        host_pids_with_cmdline(&g.dir.path.to_string_lossy()).is_empty(),
        "a process for this session runs on the host"
    );
    let fake = ctx.net.fake_ip;
    let r = g
        .py(&json!([
            direct(fake, 80),
            json!({"op": "direct", "udp": true, "ip": fake.to_string(), "port": 53}),
            json!({"op": "dns", "name": "allowed.test"}),
            json!({"op": "ifaces"}),
            json!({"op": "relay"}),
            json!({"op": "proxy_env"}),
        ]))
        .await?;
    for x in &r[..3] {
        failed_fast(x)?;
    }
    ensure!(
        strs(&r[3]["interfaces"]) == vec!["lo".to_string()],
        "{}",
        r[3]
    );
    ensure!(r[3]["ipv4_routes"] == 0, "{}", r[3]);
    // The proxy port answers nothing: closed at once, no bytes.
    let relay = &r[4];
    ensure!(
        relay["bytes"] == 0
            && relay["closed"] != false
            && relay["ms"].as_u64().unwrap_or(9999) < 1000,
        "the proxy path: {relay}"
    );
    let env = &r[5]["env"];
    ensure!(
        env["http_proxy"].is_null() && env["SANDTOP_EGRESS"] == "direct",
        "{}",
        r[5]
    );
    let ls = g
        .base
        .backend
        .exec(g.id(), &["ls", "-A", ids::GUEST_MOUNT], None, LONG)
        .await?;
    let names = String::from_utf8_lossy(&ls.stdout).into_owned();
    ensure!(!names.contains("egress"), "/run/sandtop: {names}");
    ensure!(ctx.landed("/n1-").await?.is_empty());
    g.stop().await
}

// ---------------------------------------------------------------------------
// N4: host services.

async fn host_services_are_unreachable(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let (gw, gwp, lop) = (
        ctx.net.gateway,
        ctx.host_gw.addr.port(),
        ctx.host_lo.addr.port(),
    );
    // The positive control: a container on the test network reaches the
    // service on the gateway; so the guest's failures below are its own.
    let ctl = ctx
        .base
        .backend
        .exec_as(
            &ctx.net.fake_id,
            "0:0",
            &[
                "python3",
                "-c",
                CONTROL_PY,
                &gw.to_string(),
                &gwp.to_string(),
                "/n4-control",
            ],
            None,
            LONG,
        )
        .await?;
    ensure!(
        ctl.exit_code == 0 && String::from_utf8_lossy(&ctl.stdout).contains("200"),
        "the control did not reach {gw}:{gwp}: {} {}",
        String::from_utf8_lossy(&ctl.stdout),
        String::from_utf8_lossy(&ctl.stderr)
    );
    let mut ops = vec![
        json!({"op": "direct", "ip": gw.to_string(), "port": gwp, "path": "/n4-direct"}),
        get(&format!("{gw}:{gwp}"), "/n4-ip"),
        get(&format!("loop.test:{lop}"), "/n4-loop"),
        get(&format!("blocked.test:{gwp}"), "/n4-unlisted"),
        // Listed, pinned to the gateway, in a range the operator allowed:
        // the explicit way in.
        get(&format!("host.test:{gwp}"), "/n4-explicit"),
    ];
    // Docker's default bridge gateway, where a daemon API might listen.
    let bridge_gw = ctx
        .docker()
        .inspect_network("bridge", None::<InspectNetworkOptions>)
        .await
        .ok()
        .and_then(|n| n.ipam?.config?.into_iter().find_map(|c| c.gateway));
    if let Some(b) = &bridge_gw {
        ops.push(json!({"op": "direct", "ip": b, "port": 2375}));
    }
    let r = ctx.main.py(&json!(ops)).await?;
    failed_fast(&r[0])?;
    refused(&r[1], "IP literals are refused")?;
    refused(&r[2], "non-public address 127.0.0.1")?;
    refused(&r[3], "is not on the allowlist")?;
    ensure!(
        r[4]["status"] == 200 && r[4]["body"] == "host-service",
        "explicitly allowed: {}",
        r[4]
    );
    if bridge_gw.is_some() {
        failed_fast(&r[5])?;
    }
    let np = ctx
        .noprivate
        .py(&json!([get(&format!("host.test:{gwp}"), "/n4-np")]))
        .await?;
    refused(&np[0], "non-public address")?;
    let seen: Vec<String> = ctx
        .host_gw
        .seen()
        .into_iter()
        .filter(|l| l.contains("/n4-"))
        .collect();
    ensure!(
        seen == vec![
            "GET /n4-control HTTP/1.1".to_string(),
            "GET /n4-explicit HTTP/1.1".to_string()
        ],
        "the gateway service saw {seen:?}"
    );
    ensure!(
        ctx.host_lo.seen().is_empty(),
        "the loopback service saw {:?}",
        ctx.host_lo.seen()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// N5: nothing published; the proxy's sockets.

/// Socket inodes of a process.
fn socket_inodes(pid: i32) -> anyhow::Result<BTreeSet<u64>> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        if let Ok(t) = std::fs::read_link(e.path())
            && let Some(n) = t
                .to_str()
                .and_then(|s| s.strip_prefix("socket:["))
                .and_then(|s| s.strip_suffix(']'))
        {
            out.insert(n.parse()?);
        }
    }
    Ok(out)
}

/// `(inode, state)` of the sockets in a /proc/net/{tcp,udp}* table.
fn inet_sockets(table: &str) -> Vec<(u64, String, String)> {
    std::fs::read_to_string(format!("/proc/net/{table}"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.get(9)?.parse().ok()?,
                f.get(3)?.to_string(),
                f.get(1)?.to_string(),
            ))
        })
        .collect()
}

/// `(inode, listening, path)` of the Unix sockets.
fn unix_sockets() -> Vec<(u64, bool, String)> {
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            Some((
                f.get(6)?.parse().ok()?,
                flags & 0x10000 != 0,
                f.get(7).map(|s| s.to_string()).unwrap_or_default(),
            ))
        })
        .collect()
}

async fn nothing_published_and_the_proxy_has_no_tcp_port(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = &ctx.main;
    let c = g.inspect().await?;
    let h = c.host_config.clone().context("HostConfig")?;
    ensure!(
        h.port_bindings.as_ref().is_none_or(|p| p.is_empty()) && h.publish_all_ports != Some(true),
        "port bindings {:?}",
        h.port_bindings
    );
    let ports = c.network_settings.as_ref().and_then(|n| n.ports.clone());
    ensure!(
        ports.as_ref().is_none_or(|p| p.is_empty()),
        "published {ports:?}"
    );
    ensure!(h.network_mode.as_deref() == Some("none"));
    // The proxy process: host-cli egress-proxy, alive, on Unix sockets only.
    let pid = g.rec.egress_pid.context("no egress proxy pid")?;
    let cmdline =
        std::fs::read(format!("/proc/{pid}/cmdline")).context("the egress proxy is not running")?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    ensure!(cmdline.contains("egress-proxy"), "pid {pid}: {cmdline}");
    let mine = socket_inodes(pid)?;
    ensure!(!mine.is_empty(), "the proxy has no socket");
    for table in ["tcp", "tcp6", "udp", "udp6"] {
        let hits: Vec<_> = inet_sockets(table)
            .into_iter()
            .filter(|(i, _, _)| mine.contains(i))
            .collect();
        ensure!(hits.is_empty(), "the proxy has {table} sockets: {hits:?}");
    }
    let p = g.paths();
    let listening: BTreeSet<String> = unix_sockets()
        .into_iter()
        .filter(|(i, l, _)| *l && mine.contains(i))
        .map(|(_, _, path)| path)
        .collect();
    let want = BTreeSet::from([
        p.control.to_string_lossy().into_owned(),
        p.guest_socket.to_string_lossy().into_owned(),
    ]);
    ensure!(listening == want, "the proxy listens on {listening:?}");
    // Modes the code sets.
    // (mode in octal, uid, gid)
    let mode = |f: &Path| -> anyhow::Result<(String, u32, u32)> {
        let m = std::fs::symlink_metadata(f).with_context(|| f.display().to_string())?;
        Ok((format!("{:o}", m.mode() & 0o7777), m.uid(), m.gid()))
    };
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    ensure!(
        mode(&p.control)? == ("600".into(), euid, egid),
        "control {:?}",
        mode(&p.control)?
    );
    let guest_owner = if rustix::process::geteuid().is_root() {
        (ids::GUEST_UID, ids::GUEST_GID)
    } else {
        (euid, egid)
    };
    // Only the guest's uid may connect; when the host user is neither root
    // nor that uid, "others" (the 0700 session folder keeps host users out).
    let guest_mode = if rustix::process::geteuid().is_root() || euid == ids::GUEST_UID {
        "600"
    } else {
        "666"
    };
    ensure!(
        mode(&p.guest_socket)? == (guest_mode.into(), guest_owner.0, guest_owner.1),
        "guest socket {:?}",
        mode(&p.guest_socket)?
    );
    ensure!(
        mode(&p.journal)?.0 == "600",
        "journal {:?}",
        mode(&p.journal)?
    );
    ensure!(
        mode(&g.dir.path)?.0 == "700",
        "session folder {:?}",
        mode(&g.dir.path)?
    );
    // Inside: the relay listens on loopback only.
    let probe = g
        .probe(&["--gateway", &ctx.net.gateway.to_string()])
        .await?;
    let listeners = strs(&probe["tcp_listeners"]);
    ensure!(
        listeners.iter().any(|l| l == "127.0.0.1:3128"),
        "no relay: {listeners:?}"
    );
    for l in &listeners {
        ensure!(
            l.starts_with("127.") || l.starts_with("[00000000000000000000000001000000]"),
            "a listener off loopback: {l}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// N6: secrets.

async fn secrets_never_reach_the_guest_or_the_proxy(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = &ctx.main;
    let c = g.inspect().await?;
    let whole = serde_json::to_string(&c)?;
    for s in &ctx.secrets {
        ensure!(!whole.contains(s.as_str()), "docker inspect holds {s}");
    }
    // Inside: no process has the names; nothing readable holds the values.
    let probe = g.probe(&[]).await?;
    let names = strs(&probe["env_names_all_processes"]);
    ensure!(!names.is_empty(), "the probe read no environment");
    for n in host_cli::SECRET_ENV {
        ensure!(!names.iter().any(|x| x == n), "{n} in the guest");
    }
    let r = g
        .py(&json!([{"op": "scan", "needles": ctx.secrets}]))
        .await?;
    ensure!(strs(&r[0]["hits"]).is_empty(), "in the guest: {}", r[0]);
    ensure!(r[0]["read"].as_u64().unwrap_or(0) > 10, "{}", r[0]);
    // The proxy: not in its environment nor command line.
    let pid = g.rec.egress_pid.context("no egress proxy")?;
    for f in ["environ", "cmdline"] {
        let b = std::fs::read(format!("/proc/{pid}/{f}"))?;
        let text = String::from_utf8_lossy(&b);
        for s in &ctx.secrets {
            ensure!(!text.contains(s.as_str()), "the proxy's {f} holds {s}");
        }
        for n in host_cli::SECRET_ENV {
            ensure!(
                !text.split('\0').any(|kv| kv.starts_with(&format!("{n}="))),
                "the proxy's {f} has {n}"
            );
        }
    }
    // Nor any file of the session.
    for e in std::fs::read_dir(&g.dir.path)?
        .chain(std::fs::read_dir(g.dir.guest_path())?)
        .flatten()
    {
        let p = e.path();
        if e.file_type()?.is_file() {
            let b = std::fs::read(&p)?;
            for s in &ctx.secrets {
                ensure!(
                    !String::from_utf8_lossy(&b).contains(s.as_str()),
                    "{} holds {s}",
                    p.display()
                );
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The journal.

async fn decisions_are_journalled_with_reasons(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = &ctx.main;
    let before = g.journal(0)?.len();
    let fake = ctx.net.fake_ip.to_string();
    let r = g
        .py(&json!([
            get("allowed.test", "/j-http"),
            tls("allowed.test:443", "/j-tls"),
            get("blocked.test", "/j-blocked"),
            tls("allowed.test.evil.test:443", "/j-prefix"),
            get("allowed.test:8080", "/j-port"),
            get(&fake, "/j-ip"),
            {"op": "tls", "authority": "allowed.test:443", "sni": "blocked.test", "path": "/j-sni"},
            get("meta.test", "/j-meta"),
            {"op": "get", "authority": "allowed.test", "host": "blocked.test", "path": "/j-host"},
        ]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false)?;
    landed_on(&r[1], "allowed.test", 443, true)?;
    // (origin, via, decision, reason, addresses)
    let fake_addrs = json!([fake]);
    let ip_origin = format!("http://{fake}");
    let want: Vec<(&str, &str, &str, String, Value)> = vec![
        (
            "http://allowed.test",
            "http",
            "allowed",
            "allowed".into(),
            fake_addrs.clone(),
        ),
        (
            "https://allowed.test",
            "connect",
            "allowed",
            "allowed".into(),
            fake_addrs.clone(),
        ),
        (
            "http://blocked.test",
            "http",
            "denied",
            "is not on the allowlist".into(),
            json!([]),
        ),
        (
            "https://allowed.test.evil.test",
            "connect",
            "denied",
            "is not on the allowlist".into(),
            json!([]),
        ),
        (
            "http://allowed.test:8080",
            "http",
            "denied",
            "is not on the allowlist".into(),
            json!([]),
        ),
        (
            &ip_origin,
            "http",
            "denied",
            "IP literals are refused".into(),
            json!([]),
        ),
        // The SNI check comes after the origin was allowed: both are logged.
        (
            "https://allowed.test",
            "connect",
            "denied",
            "TLS server name Name(\"blocked.test\") does not match".into(),
            fake_addrs.clone(),
        ),
        (
            "http://meta.test",
            "http",
            "denied",
            "metadata address 169.254.169.254".into(),
            json!(["169.254.169.254"]),
        ),
        (
            "http://allowed.test",
            "http",
            "denied",
            "the Host header `blocked.test` disagrees".into(),
            json!([]),
        ),
    ];
    let entries = wait_for("the journal entries", Duration::from_secs(10), || async {
        let e = g.journal(before).ok()?;
        (e.len() > want.len()).then_some(e)
    })
    .await?;
    // One entry per decision; the allowed SNI-mismatch CONNECT has two.
    ensure!(
        entries.len() == want.len() + 1,
        "{} entries: {entries:#?}",
        entries.len()
    );
    let mut last_t = 0;
    for e in &entries {
        ensure!(e["kind"] == "egress", "{e}");
        let t = e["t_unix_ms"].as_u64().context("no time")?;
        ensure!(t >= last_t, "out of order: {e}");
        last_t = t;
    }
    for (origin, via, decision, reason, addrs) in &want {
        ensure!(
            entries.iter().any(|e| e["origin"] == *origin
                && e["via"] == *via
                && e["decision"] == *decision
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(reason.as_str()))
                && e["addresses"] == *addrs),
            "no entry {origin} {via} {decision} `{reason}` {addrs} in {entries:#?}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// `open`.

async fn open_mode_reaches_the_fake_internet_directly(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let ip = ctx
        .net
        .fake_bridge_ip
        .context("the fake internet is not on Docker's default bridge")?;
    let (g, stderr) =
        Guest::start(&ctx.base, "open", &["--network".into(), "open".into()], &[]).await?;
    ensure!(stderr.contains("unfiltered"), "no warning: {stderr}");
    ensure!(g.rec.egress_pid.is_none() && !g.paths().guest_socket.exists());
    let h = g.inspect().await?.host_config.context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("bridge"),
        "{:?}",
        h.network_mode
    );
    let r = g
        .py(&json!([{"op": "direct", "ip": ip.to_string(), "port": 80,
                     "host": "allowed.test", "path": "/open-direct"}]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false).context("open mode")?;
    ensure!(ctx.landed("/open-direct").await?.len() == 1);
    g.stop().await
}

// ---------------------------------------------------------------------------
// `ask` with a scripted operator.

/// Approves allowed.test (http and https), cancels stop.test, denies the
/// rest; holds its first answer until the test releases it.
struct Operator {
    asked: Arc<Mutex<Vec<String>>>,
    journal: Arc<Mutex<Vec<Value>>>,
    gate: Option<std::sync::mpsc::Receiver<()>>,
}

impl Attached for Operator {
    fn answer(&mut self, origin: &str) -> Answer {
        self.asked.lock().unwrap().push(origin.to_string());
        if let Some(g) = self.gate.take() {
            let _ = g.recv_timeout(Duration::from_secs(60));
        }
        match origin {
            "http://allowed.test" | "https://allowed.test" => Answer::Approve,
            "http://stop.test" => Answer::Cancel,
            _ => Answer::Deny,
        }
    }

    fn journal(&mut self, entry: &Value) {
        self.journal.lock().unwrap().push(entry.clone());
    }
}

async fn ask_mode_with_a_scripted_operator(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let fake = ctx.net.fake_ip;
    let mut args = vec![
        "--network".to_string(),
        "ask".to_string(),
        "--allow-private".to_string(),
        ctx.net.subnet.clone(),
    ];
    for n in [
        "allowed.test",
        "blocked.test",
        "stop.test",
        "later.test",
        "fresh.test",
    ] {
        args.push("--egress-resolve".into());
        args.push(format!("{n}={fake}"));
    }
    let (g, _) = Guest::start(&ctx.base, "ask", &args, &[]).await?;
    let h = g.inspect().await?.host_config.context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "{:?}",
        h.network_mode
    );

    // 1. Nobody attached: an undecided origin is denied, at once.
    let r = g.py(&json!([get("later.test", "/ask-later")])).await?;
    refused(&r[0], "the operator answered Deny for http://later.test")?;
    ensure!(
        r[0]["ms"].as_u64().unwrap_or(u64::MAX) < 5000,
        "not at once: {}",
        r[0]
    );

    // 2. A scripted operator attaches to the control socket.
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let cancels = Arc::new(AtomicUsize::new(0));
    let (release, gate) = std::sync::mpsc::channel();
    let c2 = Arc::clone(&cancels);
    let attached = service::attach(
        &g.paths().control,
        Box::new(Operator {
            asked: Arc::clone(&asked),
            journal: Arc::clone(&seen),
            gate: Some(gate),
        }),
        Box::new(move || {
            c2.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .await
    .context("attaching to the control socket")?;
    attached_when_journal_arrives(&g, &seen, fake).await?;
    ensure!(asked.lock().unwrap().is_empty());

    // 3. Two concurrent requests to an undecided origin wait for the one
    // question; the operator holds the answer for a while.
    let backend = g.base.backend.clone();
    let id = g.id().to_string();
    let started = Instant::now();
    let pending = tokio::spawn(async move {
        py_in(
            &backend,
            &id,
            &json!([{"op": "par", "ops": [
                get("allowed.test", "/ask-a"),
                get("allowed.test", "/ask-b"),
            ]}]),
        )
        .await
    });
    wait_for("the question", Duration::from_secs(20), || async {
        (!asked.lock().unwrap().is_empty()).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ensure!(
        !pending.is_finished(),
        "the requests did not wait for the answer"
    );
    ensure!(
        ctx.landed("/ask-a").await?.is_empty(),
        "landed before the answer"
    );
    release.send(()).ok();
    let r = pending.await??;
    ensure!(started.elapsed() >= Duration::from_millis(1500));
    for x in r[0]["results"].as_array().context("par")? {
        landed_on(x, "allowed.test", 80, false).context("approved")?;
        ensure!(x["ms"].as_u64().unwrap_or(0) >= 1500, "did not wait: {x}");
    }
    ensure!(
        *asked.lock().unwrap() == vec!["http://allowed.test".to_string()],
        "asked {:?}",
        asked.lock().unwrap()
    );

    // 4. Decided origins are not asked again; others are, once each.
    let r = g
        .py(&json!([
            get("allowed.test", "/ask-c"),
            urllib("https://allowed.test/ask-d"),
            get("blocked.test", "/ask-e"),
            get("blocked.test", "/ask-f"),
            get("stop.test", "/ask-g"),
            get("allowed.test", "/ask-h"),
        ]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false)?;
    landed_on(&r[1], "allowed.test", 443, true)?;
    refused(&r[2], "the operator answered Deny for http://blocked.test")?;
    refused(&r[3], "denied by the operator earlier in this session")?;
    refused(&r[4], "the operator answered Cancel for http://stop.test")?;
    landed_on(&r[5], "allowed.test", 80, false)?;
    ensure!(
        *asked.lock().unwrap()
            == vec![
                "http://allowed.test".to_string(),
                "https://allowed.test".into(),
                "http://blocked.test".into(),
                "http://stop.test".into(),
            ],
        "asked {:?}",
        asked.lock().unwrap()
    );
    // Cancel refuses that request only; the run goes on (seed 004;
    // issue 11 item 9): `on_cancel` is no longer called.
    ensure!(
        cancels.load(Ordering::SeqCst) == 0,
        "on_cancel ran {} times",
        cancels.load(Ordering::SeqCst)
    );
    let landed: BTreeSet<String> = ctx
        .landed("/ask-")
        .await?
        .iter()
        .filter_map(|v| v["path"].as_str().map(String::from))
        .collect();
    let want: BTreeSet<String> = ["/ask-a", "/ask-b", "/ask-c", "/ask-d", "/ask-h"]
        .into_iter()
        .map(String::from)
        .collect();
    ensure!(landed == want, "landed {landed:?}");
    // The attached run received the decisions (for its trajectory).
    let got = seen.lock().unwrap().clone();
    for (origin, decision) in [
        ("http://allowed.test", "allowed"),
        ("https://allowed.test", "allowed"),
        ("http://blocked.test", "denied"),
        ("http://stop.test", "denied"),
    ] {
        ensure!(
            got.iter().any(|e| e["kind"] == "egress"
                && e["origin"] == origin
                && e["decision"] == decision),
            "the operator got no {decision} entry for {origin}: {got:#?}"
        );
    }

    // 5. Detached again: an undecided origin is denied without a question.
    attached.abort();
    let _ = attached.await;
    let r = g.py(&json!([get("fresh.test", "/ask-fresh")])).await?;
    refused(&r[0], "the operator answered Deny for http://fresh.test")?;
    ensure!(
        asked.lock().unwrap().len() == 4,
        "asked {:?}",
        asked.lock().unwrap()
    );

    // The session's journal has every answer.
    let answers: Vec<(String, String)> = g
        .journal(0)?
        .into_iter()
        .filter(|e| e["kind"] == "egress_answer")
        .map(|e| {
            (
                e["origin"].as_str().unwrap_or("").to_string(),
                e["answer"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("http://later.test", "deny"),
        ("http://allowed.test", "approve"),
        ("https://allowed.test", "approve"),
        ("http://blocked.test", "deny"),
        ("http://stop.test", "cancel"),
        ("http://fresh.test", "deny"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    ensure!(answers == want, "answers {answers:?}");
    g.stop().await
}

/// Waits until the attached operator receives journal entries: an IP
/// literal is refused without a question, and its entry is sent to the
/// attached client once the proxy has accepted it.
async fn attached_when_journal_arrives(
    g: &Guest,
    seen: &Arc<Mutex<Vec<Value>>>,
    fake: IpAddr,
) -> anyhow::Result<()> {
    let mut n = 0;
    wait_for(
        "the operator to be attached",
        Duration::from_secs(10),
        || {
            n += 1;
            let path = format!("/ask-ready-{n}");
            async move {
                g.py(&json!([get(&fake.to_string(), &path)])).await.ok()?;
                (!seen.lock().unwrap().is_empty()).then_some(())
            }
        },
    )
    .await
}

/// Approves every question.
struct ApproveAll {
    asked: Arc<Mutex<Vec<String>>>,
    journal: Arc<Mutex<Vec<Value>>>,
}

impl Attached for ApproveAll {
    fn answer(&mut self, origin: &str) -> Answer {
        self.asked.lock().unwrap().push(origin.to_string());
        Answer::Approve
    }

    fn journal(&mut self, entry: &Value) {
        self.journal.lock().unwrap().push(entry.clone());
    }
}

/// An IP literal is refused unless listed, also in ask mode, also when it
/// is spelled the way inet_aton reads it (hex): it must never become a
/// question that looks like a name.
async fn ask_mode_refuses_ip_literals_in_disguise(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let IpAddr::V4(v4) = ctx.net.fake_ip else {
        bail!("the fake internet has no IPv4 address");
    };
    let args = vec![
        "--network".to_string(),
        "ask".to_string(),
        "--allow-private".to_string(),
        ctx.net.subnet.clone(),
    ];
    let (g, _) = Guest::start(&ctx.base, "ask-hex", &args, &[]).await?;
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let attached = service::attach(
        &g.paths().control,
        Box::new(ApproveAll {
            asked: Arc::clone(&asked),
            journal: Arc::clone(&seen),
        }),
        Box::new(|| {}),
    )
    .await
    .context("attaching to the control socket")?;
    attached_when_journal_arrives(&g, &seen, ctx.net.fake_ip).await?;
    let o = v4.octets();
    let packed = format!("0x{:08x}", u32::from(v4));
    let dotted = format!("0x{:x}.0x{:x}.0x{:x}.0x{:x}", o[0], o[1], o[2], o[3]);
    let r = g
        .py(&json!([
            get(&packed, "/hex-packed"),
            get(&dotted, "/hex-dotted"),
            {"op": "tls", "authority": format!("{packed}:443"), "sni": packed, "path": "/hex-tls"},
        ]))
        .await?;
    attached.abort();
    let landed = ctx.landed("/hex-").await?;
    let asked = asked.lock().unwrap().clone();
    g.stop().await?;
    for x in &r {
        let status = if x["req"]["op"] == "tls" {
            &x["connect_status"]
        } else {
            &x["status"]
        };
        ensure!(
            status.as_u64().is_some_and(|s| (400..500).contains(&s)),
            "an IP literal in hex was not refused: {x}"
        );
    }
    ensure!(
        asked.is_empty(),
        "the operator was asked about IP literals: {asked:?}"
    );
    ensure!(landed.is_empty(), "IP literals in hex landed: {landed:?}");
    Ok(())
}
