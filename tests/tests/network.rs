//! The E tier of the guest's network policy (docs/security.md N1-N6;
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

// The cases, by property; the world, the guests and the checks on results
// are here, above them.
#[path = "network/allowlist.rs"]
mod allowlist;
#[path = "network/modes.rs"]
mod modes;
#[path = "network/no_way_out.rs"]
mod no_way_out;
#[path = "network/secrets_and_journal.rs"]
mod secrets_and_journal;
use allowlist::*;
use modes::*;
use no_way_out::*;
use secrets_and_journal::*;

/// The fake internet: HTTP on 80 and 8080, HTTPS on 443 and 8443.
const SERVER_PY: &str = include_str!("network/server.py");

/// The client in the guest: `python3 -c CLIENT_PY '[{"op": ...}, ...]'`
/// prints one JSON result per operation (with `ms`, the time it took).
const CLIENT_PY: &str = include_str!("network/client.py");

/// A client in the fake internet's network (the positive control of N4).
const CONTROL_PY: &str = include_str!("network/control.py");

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

#[path = "network/on_guest.rs"]
mod on_guest;
use on_guest::*;
