//! The E tier: the real guest under Docker.
//!
//! What it checks: docs/security.md C1-C11, N1, N5 and N6 from inside the guest
//! (`sandtop-probe`, run through a Docker exec) and from outside (bollard's
//! inspect of the container and the image); H2 (Xvfb and the window manager
//! killed inside the guest are detected within 2 s and come back); H3
//! (readiness, and a readiness timeout that shows the log tail and leaves
//! nothing behind); a `kill -9` of host-cli during `guest start` followed by
//! `guest gc` leaves no container; 4 guests side by side; the typing corpus
//! typed into an xterm inside the guest comes out byte-exact and runs
//! nothing; both channel paths (socket and exec); batched input lands in
//! order (the demo form filled out of order in one batch, focused,
//! unfocused and with the guest's CPU busy: `e2e/order.rs`).
//!
//! How it runs: the E tier's harness (`sandtop_tests::harness`, on
//! libtest-mimic): the cases share one setup and run one after the other
//! (a 2-core host runs them faster that way than racing), each failure is
//! reported, and after the last case the run checks that no container of
//! this run is left. Every run has its own state directory
//! (a temporary folder, `SANDTOP_STATE_DIR` for the host-cli processes it
//! spawns), so a user's own sessions are never touched; every guest is
//! removed by its guard when a case ends, however it ends.
//!
//! Prerequisites: a Docker engine (else `SKIP docker: ...`, or a failure
//! when `SANDTOP_REQUIRE` lists docker), the guest image
//! `sandtop-guest:latest` (`make test` builds it; `make guest-image`; or
//! the tag `SANDTOP_IMAGE` names), and
//! the `host-cli` binary of this workspace (`cargo build -p host-cli`).
//! Arguments: libtest's (a substring selects cases, `--exact`, `--skip`,
//! `--list`, `--ignored`).
//!
//! Size (~1,270 lines): the harness, the shared `Guest` fixture and the
//! cases that need only them; cases with their own helpers live in
//! `e2e/` submodules (`order`, `desktop`, `boundary`, ...).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use bollard::query_parameters::{InspectContainerOptions, ListContainersOptionsBuilder};
use host_cli::channel::Channel;
use host_cli::guest::docker::channel::{ChannelMode, PathUsed};
use host_cli::guest::docker::{self, DockerBackend};
use host_cli::guest::{self, StartRequest, ids, limits};
use host_cli::secret::Secret;
use host_cli::session::guest_folder;
use host_cli::session::{SessionDir, SessionRecord, Store};
use sandtop_protocol::{Action, BatchRequest, HealthStatus, ScreenshotOptions, Size};
use sandtop_testkit::skip;
use sandtop_tests::cases;
use sandtop_tests::harness::Suite;
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(30);

#[path = "e2e/order.rs"]
mod order;
use order::batched_form_input_lands_in_each_field;
#[path = "e2e/shortcut.rs"]
mod shortcut;
use shortcut::keys_after_a_shortcut_reach_what_it_opened_in_firefox;
#[path = "e2e/browser.rs"]
mod browser;
use browser::browser_fills_the_demo_form_through_refs;
#[path = "e2e/boundary.rs"]
mod boundary;
#[path = "e2e/desktop.rs"]
mod desktop;
use boundary::{
    a_non_root_guest_folder_is_capped_and_gc_leaves_nothing,
    gc_removes_only_what_its_own_user_left, other_host_users_cannot_reach_a_guest,
    the_guest_folder_is_capped_noexec_and_anonymous,
    the_other_uid_cases_pass_from_a_checkout_in_a_private_folder,
};
use desktop::the_desktop_shows_a_panel_whose_launchers_open_apps;
use sandtop_testkit::corpus::TYPING as CORPUS;

/// What every case gets.
struct Ctx {
    backend: DockerBackend,
    store: Store,
    state_dir: PathBuf,
    host_cli: PathBuf,
    /// Short random id of this run (part of every session name).
    run: String,
}

fn main() -> ExitCode {
    if std::env::var_os(boundary::HOST_PROBE_ENV).is_some() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        return boundary::host_probe(&args);
    }
    Suite {
        name: "e2e",
        final_check: "no_container_of_this_run_is_left",
        cases: cases![
            security_from_inside_and_outside,
            limits_hold_against_a_fork_bomb_and_a_memory_hog,
            killed_display_is_detected_and_restarted,
            readiness_and_its_timeout,
            kill9_during_start_then_gc_leaves_nothing,
            four_guests_side_by_side,
            typed_corpus_in_guest_xterm_is_byte_exact,
            both_channel_paths_work,
            batched_form_input_lands_in_each_field,
            keys_after_a_shortcut_reach_what_it_opened_in_firefox,
            browser_fills_the_demo_form_through_refs,
            other_host_users_cannot_reach_a_guest,
            the_guest_folder_is_capped_noexec_and_anonymous,
            a_non_root_guest_folder_is_capped_and_gc_leaves_nothing,
            gc_removes_only_what_its_own_user_left,
            the_other_uid_cases_pass_from_a_checkout_in_a_private_folder,
            the_desktop_shows_a_panel_whose_launchers_open_apps,
        ],
    }
    .run(
        |rt, tmp| {
            let ctx = rt.block_on(setup(tmp))?;
            if let Some(c) = &ctx {
                println!("\ne2e run {}", c.run);
            }
            Ok(ctx)
        },
        // C9 / the suite's own promise: nothing of this run is left.
        |rt, ctx| {
            let left = rt.block_on(leftovers(&ctx))?;
            if !left.is_empty() {
                let _ = rt.block_on(guest::gc(&ctx.store));
                for id in &left {
                    let _ = rt.block_on(ctx.backend.remove(id));
                }
            }
            Ok(left)
        },
    )
}

/// Docker, the image, host-cli; `None` when the tier is skipped.
async fn setup(tmp: &Path) -> anyhow::Result<Option<Ctx>> {
    // The image: `SANDTOP_IMAGE` when set (a build of one's own tree under
    // its own tag), else the default, as host-cli picks it.
    let backend = match DockerBackend::connect().await {
        Ok(b) => b.with_channel(ChannelMode::Auto),
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
    // target/debug/deps/e2e-HASH -> target/debug/host-cli
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
    let state_dir = tmp.join("state");
    let store = Store::at(state_dir.clone())?;
    let run = host_cli::session::new_name()?
        .trim_start_matches('s')
        .to_string();
    Ok(Some(Ctx {
        backend,
        store,
        state_dir,
        host_cli,
        run,
    }))
}

/// Containers whose session folder lies in this run's state directory.
async fn leftovers(ctx: &Ctx) -> anyhow::Result<Vec<String>> {
    let list = ctx
        .backend
        .docker()
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&std::collections::HashMap::from([(
                    "label",
                    vec![docker::LABEL_SESSION.to_string()],
                )]))
                .build(),
        ))
        .await?;
    let prefix = ctx.state_dir.to_string_lossy().into_owned();
    Ok(list
        .into_iter()
        .filter(|c| {
            c.labels
                .as_ref()
                .and_then(|l| l.get(docker::LABEL_SESSION_DIR))
                .is_some_and(|d| d.starts_with(&prefix))
        })
        .filter_map(|c| c.id)
        .collect())
}

/// A running guest; removed when dropped.
struct Guest {
    ctx: Arc<Ctx>,
    rec: SessionRecord,
    dir: SessionDir,
    stopped: bool,
}

impl Guest {
    async fn start(ctx: &Arc<Ctx>, tag: &str) -> anyhow::Result<Guest> {
        Guest::start_with(ctx, tag, &ctx.backend).await
    }

    async fn start_with(ctx: &Arc<Ctx>, tag: &str, b: &DockerBackend) -> anyhow::Result<Guest> {
        let req = StartRequest {
            name: format!("e2e-{}-{tag}", ctx.run),
            screen: Size::new(1280, 800),
            network: host_cli::egress::service::EgressConfig::none(),
        };
        let rec = guest::start(&ctx.store, b, &req).await?;
        Guest::adopt(ctx, rec)
    }

    fn adopt(ctx: &Arc<Ctx>, rec: SessionRecord) -> anyhow::Result<Guest> {
        let dir = ctx.store.get(&rec.name)?;
        Ok(Guest {
            ctx: Arc::clone(ctx),
            rec,
            dir,
            stopped: false,
        })
    }

    fn id(&self) -> &str {
        self.rec
            .docker()
            .map(|d| d.container_id.as_str())
            .unwrap_or("")
    }

    fn token(&self) -> anyhow::Result<Secret> {
        Ok(Secret::read(&self.dir.token_path())?)
    }

    async fn channel(&self, mode: ChannelMode) -> anyhow::Result<Channel> {
        let c = self.ctx.backend.connector_with(mode, &self.dir, self.id());
        Ok(Channel::open(Box::new(c), self.token()?).await?)
    }

    async fn exec(&self, argv: &[&str]) -> anyhow::Result<docker::ExecResult> {
        Ok(self.ctx.backend.exec(self.id(), argv, None, LONG).await?)
    }

    async fn probe(&self, args: &[&str], user: &str) -> anyhow::Result<Value> {
        let mut argv = vec!["/usr/local/bin/sandtop-probe"];
        argv.extend_from_slice(args);
        let r = self
            .ctx
            .backend
            .exec_as(self.id(), user, &argv, None, Duration::from_secs(120))
            .await?;
        ensure!(
            r.exit_code == 0,
            "sandtop-probe {args:?} exited {}: {} (is the image current? make guest-image)",
            r.exit_code,
            String::from_utf8_lossy(&r.stderr)
        );
        serde_json::from_slice(&r.stdout).context("the probe's JSON")
    }

    async fn processes(&self) -> anyhow::Result<Vec<Value>> {
        let v = self.probe(&["ps"], &ids::guest_user()).await?;
        Ok(v["processes"].as_array().cloned().unwrap_or_default())
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        Ok(guest::stop(&self.ctx.store, &self.dir, &self.rec).await?)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let ctx = Arc::clone(&self.ctx);
        let (dir, rec) = (self.dir.clone(), self.rec.clone());
        // Drop cannot await, and may run on a runtime thread: a thread of
        // its own with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Err(e) = guest::stop(&ctx.store, &dir, &rec).await {
                    eprintln!("e2e: removing {}: {}", rec.name, e.chain());
                }
            });
        })
        .join();
    }
}

fn actions(v: Value) -> anyhow::Result<Vec<Action>> {
    serde_json::from_value(v).context("actions")
}

async fn act(ch: &mut Channel, v: Value) -> anyhow::Result<usize> {
    let r = ch
        .act(&BatchRequest::new(
            actions(v)?,
            ScreenshotOptions::default(),
        ))
        .await?;
    Ok(r.executed)
}

/// A host-cli process with this run's state directory and a scrubbed
/// environment plus `env`.
fn host_cli(ctx: &Ctx, env: &[(&str, &str)]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(&ctx.host_cli);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SANDTOP_STATE_DIR", &ctx.state_dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(h) = std::env::var_os("DOCKER_HOST") {
        c.env("DOCKER_HOST", h);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
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

/// Polls health (every 50 ms, at most [`LONG`]) until `pred` holds.
async fn health_until(
    ch: &mut Channel,
    pred: impl Fn(&sandtop_protocol::Health) -> bool,
) -> anyhow::Result<sandtop_protocol::Health> {
    let end = Instant::now() + LONG;
    loop {
        if let Ok(h) = ch.health().await
            && pred(&h)
        {
            return Ok(h);
        }
        ensure!(Instant::now() < end, "timed out after {LONG:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

/// Every host process's command line that contains `needle`.
fn host_cmdlines_containing(needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = e.path().join("cmdline");
        if let Ok(b) = std::fs::read(&p)
            && String::from_utf8_lossy(&b).contains(needle)
        {
            hits.push(p.display().to_string());
        }
    }
    hits
}

// ---------------------------------------------------------------------------
// C1-C11, N1, N5, N6.

async fn security_from_inside_and_outside(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    // Started the way a user does, with an API key in host-cli's
    // environment that must not reach the guest (N6).
    let key = format!("sk-e2e-{}-never-in-the-guest", ctx.run);
    let name = format!("e2e-{}-sec", ctx.run);
    let out = host_cli(&ctx, &[("OPENAI_API_KEY", &key)])
        .args(["guest", "start", "--json", "--name", &name])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "guest start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        started["container"] == format!("sandtop-{name}"),
        "{started}"
    );
    ensure!(started["backend"] == "docker", "{started}");
    let g = Guest::adopt(&ctx, ctx.store.get(&name)?.load()?)?;
    ensure!(started["container_id"] == g.id());
    let token = g.token()?;
    let docker = ctx.backend.docker();

    // --- Outside: the container as the engine has it.
    let c = docker
        .inspect_container(g.id(), None::<InspectContainerOptions>)
        .await?;
    let whole = serde_json::to_string(&c)?;
    ensure!(
        !whole.contains(token.expose()),
        "the token is in docker inspect"
    );
    ensure!(!whole.contains(&key), "the API key is in docker inspect");
    let h = c.host_config.clone().context("HostConfig")?;
    let cfg = c.config.clone().context("Config")?;
    ensure!(
        cfg.user.as_deref() == Some(ids::guest_user().as_str()),
        "C1 user {:?}",
        cfg.user
    );
    ensure!(
        h.cap_drop == Some(vec!["ALL".to_string()]),
        "C2 {:?}",
        h.cap_drop
    );
    ensure!(
        h.cap_add.as_ref().is_none_or(|v| v.is_empty()),
        "C2 cap_add"
    );
    let sec = h.security_opt.clone().unwrap_or_default();
    ensure!(
        sec.iter().any(|s| s.starts_with("no-new-privileges")),
        "C3 {sec:?}"
    );
    ensure!(!sec.iter().any(|s| s.contains("seccomp")), "C4 {sec:?}");
    ensure!(h.privileged != Some(true), "C5 privileged");
    ensure!(
        h.devices.as_ref().is_none_or(|d| d.is_empty()),
        "C5 devices"
    );
    let mounts = c.mounts.clone().unwrap_or_default();
    ensure!(mounts.len() == 1, "C5 mounts {mounts:?}");
    ensure!(
        mounts[0].destination.as_deref() == Some(ids::GUEST_MOUNT)
            && mounts[0].source.as_deref() == g.dir.guest_path().to_str(),
        "C5 the only mount is the session's guest folder: {mounts:?}"
    );
    ensure!(h.binds.as_ref().is_none_or(|b| b.is_empty()), "C5 binds");
    ensure!(h.readonly_rootfs == Some(true), "C6 read-only root");
    let tmpfs = h.tmpfs.clone().unwrap_or_default();
    ensure!(tmpfs.len() == 2, "C6 tmpfs {tmpfs:?}");
    for (p, o) in &tmpfs {
        for want in ["nosuid", "nodev", "noexec", "size="] {
            ensure!(o.contains(want), "C6 {p}: {o}");
        }
    }
    let mem = h.memory.unwrap_or(0);
    ensure!(
        mem > 0 && h.memory_swap == Some(mem),
        "C7 memory {mem} swap {:?}",
        h.memory_swap
    );
    ensure!(h.pids_limit.unwrap_or(0) > 0, "C7 pids");
    ensure!(h.nano_cpus.unwrap_or(0) > 0, "C7 cpus");
    ensure!(h.shm_size.unwrap_or(0) > 0, "C7 shm");
    let labels = cfg.labels.clone().unwrap_or_default();
    ensure!(labels.get(docker::LABEL_SESSION) == Some(&name), "C9 label");
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "N1 network {:?}",
        h.network_mode
    );
    ensure!(
        h.port_bindings.as_ref().is_none_or(|p| p.is_empty()) && h.publish_all_ports != Some(true),
        "N5 ports"
    );
    let ports = c.network_settings.as_ref().and_then(|n| n.ports.clone());
    ensure!(
        ports.as_ref().is_none_or(|p| p.is_empty()),
        "N5 published {ports:?}"
    );
    let env = cfg.env.clone().unwrap_or_default();
    let env_names: Vec<&str> = env.iter().filter_map(|e| e.split('=').next()).collect();
    ensure!(
        env_names.iter().all(|n| [
            "SANDTOP_SCREEN",
            "SANDTOP_EGRESS",
            "PATH",
            "HOME",
            "LANG",
            "DISPLAY"
        ]
        .contains(n)),
        "N6 the container's environment: {env_names:?}"
    );
    // C11: the image.
    let img = docker.inspect_image(docker::DEFAULT_IMAGE).await?;
    let icfg = img.config.context("image config")?;
    ensure!(
        icfg.healthcheck
            .as_ref()
            .and_then(|hc| hc.test.as_ref())
            .is_some_and(|t| !t.is_empty()),
        "C11 HEALTHCHECK"
    );
    let iuser = icfg.user.unwrap_or_default();
    ensure!(
        !iuser.is_empty() && !iuser.starts_with('0') && iuser != "root",
        "C11 USER {iuser}"
    );

    // --- Inside, as the desktop user.
    let gateway = docker
        .inspect_network(
            "bridge",
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .ok()
        .and_then(|n| n.ipam?.config?.into_iter().find_map(|c| c.gateway))
        .unwrap_or_else(|| "172.17.0.1".to_string());
    let p = g
        .probe(&["--gateway", &gateway], &ids::guest_user())
        .await?;
    let text = p.to_string();
    ensure!(
        !text.contains(token.expose()),
        "the probe saw the token's value"
    );
    ensure!(
        p["ids"]["uid"] == ids::GUEST_UID && p["ids"]["gid"] == ids::GUEST_GID,
        "C1 {}",
        p["ids"]
    );
    ensure!(strs(&p["sudo"]).is_empty(), "C1 sudo {}", p["sudo"]);
    ensure!(
        strs(&p["setid_files"]).is_empty(),
        "C1 setid {}",
        p["setid_files"]
    );
    let zero = "0000000000000000";
    for k in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
        ensure!(p["caps"][k] == zero, "C2 {k} {}", p["caps"][k]);
    }
    ensure!(p["no_new_privs"] == 1, "C3 {}", p["no_new_privs"]);
    ensure!(p["seccomp"] == 2, "C4 seccomp {}", p["seccomp"]);
    ensure!(
        strs(&p["docker_sockets"]).is_empty(),
        "C5 {}",
        p["docker_sockets"]
    );
    for d in strs(&p["devices"]) {
        let basic = [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/tty",
            "/dev/console",
            "/dev/ptmx",
            "/dev/pts/ptmx",
        ];
        ensure!(
            basic.contains(&d.as_str()) || d.starts_with("/dev/pts/"),
            "C5 device node {d}"
        );
    }
    for m in p["mounts"].as_array().cloned().unwrap_or_default() {
        let (mp, fs) = (
            m["mount"].as_str().unwrap_or(""),
            m["fstype"].as_str().unwrap_or(""),
        );
        let virtual_fs = [
            "proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2",
        ];
        let docker_files = ["/etc/resolv.conf", "/etc/hostname", "/etc/hosts"];
        ensure!(
            mp == "/"
                || virtual_fs.contains(&fs)
                || docker_files.contains(&mp)
                || mp == ids::GUEST_MOUNT,
            "C5 unexpected mount {m}"
        );
    }
    ensure!(p["root_readonly"] == true, "C6 root");
    for d in ["/", "/etc", "/usr/local/bin", "/var/tmp"] {
        let r = p["write_tests"][d].as_str().unwrap_or("");
        ensure!(r.contains("Read-only"), "C6 writing in {d}: {r}");
    }
    let tmpfs_in: Vec<Value> = p["tmpfs"].as_array().cloned().unwrap_or_default();
    for want in ["/tmp", "/home/user"] {
        let t = tmpfs_in
            .iter()
            .find(|t| t["mount"] == want)
            .with_context(|| format!("C6 no tmpfs on {want}"))?;
        ensure!(
            t["nosuid"] == true
                && t["nodev"] == true
                && t["noexec"] == true
                && t["size"].is_string(),
            "C6 {t}"
        );
        let ran = p["noexec_effective"][want].as_str().unwrap_or("");
        ensure!(
            ran.starts_with("refused"),
            "C6 a program copied to {want}: {ran}"
        );
    }
    let cg = &p["cgroup"];
    let (mem_in, pids_in) = match cg["version"].as_u64() {
        Some(2) => (cg["memory_max"].clone(), cg["pids_max"].clone()),
        _ => (cg["memory_limit_bytes"].clone(), cg["pids_max"].clone()),
    };
    let as_num = |v: &Value| v.as_str().and_then(|s| s.parse::<i64>().ok());
    ensure!(
        as_num(&mem_in) == Some(mem),
        "C7 memory seen inside {mem_in}"
    );
    ensure!(as_num(&pids_in) == h.pids_limit, "C7 pids inside {pids_in}");
    if cg["version"] == 1 {
        ensure!(
            as_num(&cg["memsw_limit_bytes"]) == Some(mem),
            "C7 swap inside {cg}"
        );
    }
    ensure!(
        p["pid1"]
            .as_str()
            .is_some_and(|s| s.starts_with("/usr/bin/tini")),
        "C8 PID 1 {}",
        p["pid1"]
    );
    ensure!(
        p["x_tcp_open"].as_array().is_some_and(|a| a.is_empty()),
        "C10 {}",
        p["x_tcp_open"]
    );
    let xvfb = p["processes"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["comm"] == "Xvfb").cloned())
        .context("Xvfb not running")?;
    let xpid = xvfb["pid"].as_u64().unwrap_or(0).to_string();
    let xargs = g.exec(&["cat", &format!("/proc/{xpid}/cmdline")]).await?;
    ensure!(
        String::from_utf8_lossy(&xargs.stdout)
            .replace('\0', " ")
            .contains("-nolisten tcp"),
        "C10 Xvfb arguments"
    );
    ensure!(
        strs(&p["compilers"]).is_empty(),
        "C11 compilers {}",
        p["compilers"]
    );
    ensure!(
        strs(&p["package_caches"]).is_empty(),
        "C11 caches {}",
        p["package_caches"]
    );
    let net = &p["network"];
    for k in ["dns", "internet_1_1_1_1_443", "gateway_reach"] {
        ensure!(net[k]["ok"] == false, "N1 {k} succeeded: {}", net[k]);
        ensure!(
            net[k]["ms"].as_u64().unwrap_or(u64::MAX) < 2000,
            "N1 {k} is not fast: {}",
            net[k]
        );
    }
    ensure!(
        strs(&net["interfaces"]) == vec!["lo".to_string()],
        "N1 {}",
        net["interfaces"]
    );
    for l in strs(&p["tcp_listeners"]) {
        ensure!(
            l.starts_with("127.") || l.starts_with("[00000000000000000000000001000000]"),
            "N5 a listener off loopback: {l}"
        );
    }
    let all_env = strs(&p["env_names_all_processes"]);
    for secret in host_cli::SECRET_ENV {
        ensure!(
            !all_env.iter().any(|n| n == secret),
            "N6 {secret} in the guest"
        );
        ensure!(
            !strs(&p["env_names"]).iter().any(|n| n == secret),
            "N6 {secret}"
        );
    }
    ensure!(
        p["run_sandtop_extra"]
            .as_array()
            .is_some_and(|a| a.is_empty()),
        "/run/sandtop holds more than token and socket: {}",
        p["run_sandtop_extra"]
    );

    // --- Inside, as root in the container: still no capabilities, and
    // the walk for setuid/setgid files reaches every folder.
    let r = g.probe(&[], "0:0").await?;
    for k in ["CapEff", "CapPrm", "CapBnd"] {
        ensure!(r["caps"][k] == zero, "C2 root {k} {}", r["caps"][k]);
    }
    ensure!(r["no_new_privs"] == 1 && r["seccomp"] == 2, "C3/C4 root");
    ensure!(
        strs(&r["setid_files"]).is_empty(),
        "C1 setid (root walk) {}",
        r["setid_files"]
    );
    ensure!(
        r["setid_walk"]["errors"] == 0,
        "C1 the root walk missed folders: {}",
        r["setid_walk"]["unreadable"]
    );

    // --- C8: an orphan is reaped by the init.
    let o = g.probe(&["orphans"], &ids::guest_user()).await?;
    ensure!(o["orphan_pid"].is_u64(), "C8 {o}");
    ensure!(
        o["orphan_parent"] == 1,
        "C8 the orphan's parent {}",
        o["orphan_parent"]
    );
    ensure!(
        o["orphan_state_after_exit"].is_null(),
        "C8 the orphan was not reaped: {o}"
    );
    ensure!(
        o["zombies"].as_array().is_some_and(|a| a.is_empty()),
        "C8 zombies {o}"
    );

    // --- Never in logs or host process lists.
    let logs = host_cli(&ctx, &[])
        .args(["guest", "logs", &name])
        .output()
        .await?;
    ensure!(logs.status.success(), "guest logs failed");
    let logs = String::from_utf8_lossy(&logs.stdout);
    ensure!(logs.contains("sandtopd is serving"), "guest logs: {logs}");
    ensure!(
        !logs.contains(token.expose()) && !logs.contains(&key),
        "a secret in the log"
    );
    ensure!(
        host_cmdlines_containing(token.expose()).is_empty(),
        "the token in a host command line"
    );

    // `guest ls --json` shows the container; `guest stop` removes it.
    let ls = host_cli(&ctx, &[])
        .args(["guest", "ls", "--json"])
        .output()
        .await?;
    let ls: Value = serde_json::from_slice(&ls.stdout)?;
    let row = ls
        .as_array()
        .and_then(|a| a.iter().find(|r| r["name"] == name.as_str()).cloned())
        .context("ls misses the session")?;
    ensure!(
        row["container"] == format!("sandtop-{name}") && row["state"] == "running",
        "{row}"
    );
    let id = g.id().to_string();
    let mut g = g;
    g.stopped = true;
    let stop = host_cli(&ctx, &[])
        .args(["guest", "stop", &name])
        .output()
        .await?;
    ensure!(
        stop.status.success(),
        "guest stop: {}",
        String::from_utf8_lossy(&stop.stderr)
    );
    ensure!(
        !ctx.backend.running(&id).await?,
        "C9 still running after stop"
    );
    let gone = docker
        .inspect_container(&id, None::<InspectContainerOptions>)
        .await
        .is_err();
    ensure!(gone, "C9 the container is still there after stop");
    ensure!(
        ctx.store.get(&name).is_err(),
        "the session folder is still there"
    );
    Ok(())
}

/// C7: a fork bomb and a memory hog inside do not take the daemon down.
async fn limits_hold_against_a_fork_bomb_and_a_memory_hog(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let limits = limits::Limits {
        memory_bytes: 768 * 1024 * 1024,
        pids: 256,
        ..limits::Limits::default()
    };
    let b = ctx.backend.clone().with_limits(limits);
    let g = Guest::start_with(&ctx, "lim", &b).await?;
    let daemon_pid = |ps: &[Value]| {
        ps.iter()
            .find(|p| p["comm"] == "sandtopd")
            .and_then(|p| p["pid"].as_u64())
    };
    let before = daemon_pid(&g.processes().await?).context("no sandtopd")?;
    // Tasks (processes and threads) the guest runs when nothing else does.
    let calm = ctx.backend.memory_use(g.id()).await?.pids;
    // The stress is test-only shell run through exec; nothing of it ships
    // in the image. A fork bomb in its own process group (its id on the
    // first line): `sleep`s until the kernel refuses a fork (the shell
    // then dies), one line per start.
    let bomb = g
        .exec(&[
            "/bin/sh",
            "-c",
            "setsid /bin/sh -c 'echo pgid $$; i=0; \
             while [ $i -lt 100000 ]; do /bin/sleep 120 </dev/null >/dev/null 2>&1 & \
             i=$((i+1)); echo $i; done'; true",
        ])
        .await?;
    let out = String::from_utf8_lossy(&bomb.stdout);
    let pgid: u32 = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("pgid "))
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("the fork bomb did not say its group: {:?}", bomb.stdout))?;
    let started: u64 = out
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    let refused = String::from_utf8_lossy(&bomb.stderr).to_lowercase();
    ensure!(
        started > 10 && started < 256 && refused.contains("fork"),
        "the pids limit did not stop the fork bomb: {started} started, stderr {refused:?}"
    );
    let mut ch = g.channel(ChannelMode::Socket).await?;
    let h = ch.health().await?;
    ensure!(
        h.status == HealthStatus::Ok,
        "health after the fork bomb: {h:?}"
    );
    ensure!(act(&mut ch, json!([{"type": "move", "x": 5, "y": 5}])).await? == 1);
    // The group's `sleep`s hold all but a pid or two: the kill is one
    // process that forks nothing (a shell's `$(...)` could not fork), and
    // it is tried again while a thread of the guest holds the last pid.
    let group = format!("-{pgid}");
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let killed = g.exec(&["/bin/kill", "-KILL", "--", &group]).await;
        match killed {
            Ok(k) if k.exit_code == 0 => break,
            other => ensure!(
                Instant::now() < end,
                "killing the fork bomb's group {pgid} for 60 s: last {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // kill(2) returns before the group has died and been reaped; until
    // then its tasks still count against the pids limit, and the next
    // exec's shell could not fork (the memory hog would end with the
    // shell's status 2, not the OOM kill's).
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let pids = ctx.backend.memory_use(g.id()).await?.pids;
        if pids <= calm + 16 {
            break;
        }
        ensure!(
            Instant::now() < end,
            "the fork bomb's group was not reaped within 60 s: {pids} tasks, {calm} before it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A memory hog: `tail` keeps a line without a newline whole, so it
    // grows until the memory limit's OOM kill (128 + 9).
    let hog = ctx
        .backend
        .exec(
            g.id(),
            &[
                "/bin/sh",
                "-c",
                "head -c 4096M /dev/zero | tail -n 1 >/dev/null",
            ],
            None,
            Duration::from_secs(120),
        )
        .await?;
    ensure!(
        hog.exit_code == 137 || hog.exit_code == 9,
        "the memory hog was not killed (status {}): {}",
        hog.exit_code,
        String::from_utf8_lossy(&hog.stderr)
    );
    let h = ch.health().await?;
    ensure!(
        h.status == HealthStatus::Ok,
        "health after the memory hog: {h:?}"
    );
    let after = daemon_pid(&g.processes().await?).context("sandtopd is gone")?;
    ensure!(
        before == after,
        "the daemon was replaced ({before} -> {after})"
    );
    ensure!(act(&mut ch, json!([{"type": "move", "x": 9, "y": 9}])).await? == 1);
    g.stop().await
}

/// H2: Xvfb killed inside the guest is seen within 2 s and restarted; the
/// same for the window manager.
async fn killed_display_is_detected_and_restarted(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "h2").await?;
    let mut ch = g.channel(ChannelMode::Socket).await?;
    let h0 = ch.health().await?;
    ensure!(h0.status == HealthStatus::Ok, "{h0:?}");
    for (victim, bad) in [
        ("Xvfb", HealthStatus::Down),
        ("openbox", HealthStatus::Degraded),
    ] {
        let ps = g.processes().await?;
        let daemon = ps.iter().find(|p| p["comm"] == "sandtopd").cloned();
        let pid = ps
            .iter()
            .find(|p| p["comm"] == victim)
            .and_then(|p| p["pid"].as_u64())
            .with_context(|| format!("{victim} is not running"))?
            .to_string();
        // As the guest's uid, the daemon's own user; the pid travels as data.
        let k = g
            .exec(&["/bin/sh", "-c", "kill -9 \"$1\"", "sh", &pid])
            .await?;
        ensure!(
            k.exit_code == 0,
            "kill {victim}: {}",
            String::from_utf8_lossy(&k.stderr)
        );
        let t = Instant::now();
        // The supervisor may restart the window manager between two polls
        // (it takes a few ms), so `degraded` is never seen: a new openbox
        // pid is proof too that the death was noticed.
        let seen = loop {
            if let Ok(h) = ch.health().await
                && h.status != HealthStatus::Ok
            {
                break Some(h);
            }
            if victim == "openbox"
                && g.processes().await?.iter().any(|p| {
                    p["comm"] == victim
                        && p["pid"].as_u64().map(|n| n.to_string()) != Some(pid.clone())
                })
            {
                break None;
            }
            ensure!(
                t.elapsed() < LONG,
                "health to notice that {victim} died: timed out after {LONG:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let took = t.elapsed();
        ensure!(
            took <= Duration::from_secs(2),
            "H2: {victim}'s death took {took:?} to show in health"
        );
        if victim == "Xvfb" {
            let seen = seen.context("Xvfb's death did not show in health")?;
            ensure!(seen.status == bad || !seen.x_connected, "{seen:?}");
        } else if let Some(seen) = &seen {
            ensure!(seen.status == bad, "{seen:?}");
        }
        let back = health_until(&mut ch, |h| h.status == HealthStatus::Ok)
            .await
            .with_context(|| format!("{victim} to come back"))?;
        if victim == "Xvfb" {
            ensure!(back.display_restarts > h0.display_restarts, "{back:?}");
        }
        let ps = g.processes().await?;
        ensure!(
            ps.iter()
                .find(|p| p["comm"] == "sandtopd")
                .map(|p| &p["pid"])
                == daemon.as_ref().map(|d| &d["pid"]),
            "the daemon did not survive"
        );
        ensure!(
            ps.iter().any(|p| p["comm"] == victim),
            "{victim} was not restarted"
        );
        // And it works again.
        let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
        ensure!(
            shot.screenshot.width == 1280,
            "screenshot after the restart"
        );
    }
    g.stop().await
}

/// H3: ready means X answers; a start that times out shows the log tail
/// and leaves nothing behind.
async fn readiness_and_its_timeout(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "h3").await?;
    let mut ch = g.channel(ChannelMode::Socket).await?;
    let h = ch.health().await?;
    ensure!(
        h.status == HealthStatus::Ok && h.x_connected,
        "ready but {h:?}"
    );
    ensure!(h.window_manager == Some(true), "{h:?}");
    ensure!(
        ch.info().capabilities.xtest && ch.info().capabilities.shm,
        "capabilities"
    );
    let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
    ensure!((shot.screenshot.width, shot.screenshot.height) == (1280, 800));
    g.stop().await?;

    let name = format!("e2e-{}-h3t", ctx.run);
    let out = host_cli(&ctx, &[])
        .args(["guest", "start", "--name", &name, "--ready-timeout", "0s"])
        .output()
        .await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "a zero readiness timeout succeeded");
    ensure!(
        err.contains("did not become ready") && err.contains("its log ends with"),
        "H3 message: {err}"
    );
    ensure!(
        ctx.store.get(&name).is_err(),
        "the folder of the failed start is left"
    );
    let left = leftovers(&ctx).await?;
    ensure!(
        left.is_empty(),
        "containers left after the failed start: {left:?}"
    );
    Ok(())
}

/// C9: kill -9 of host-cli while it starts a guest, then `guest gc`.
async fn kill9_during_start_then_gc_leaves_nothing(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let name = format!("e2e-{}-k9", ctx.run);
    let mut child = host_cli(&ctx, &[])
        .args(["guest", "start", "--name", &name])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pid = child.id().context("no pid")?;
    let docker = ctx.backend.docker().clone();
    let label = format!("{}={name}", docker::LABEL_SESSION);
    wait_for("the container to be created", LONG, || {
        let docker = docker.clone();
        let label = label.clone();
        async move {
            let l = docker
                .list_containers(Some(
                    ListContainersOptionsBuilder::new()
                        .all(true)
                        .filters(&std::collections::HashMap::from([("label", vec![label])]))
                        .build(),
                ))
                .await
                .ok()?;
            (!l.is_empty()).then_some(())
        }
    })
    .await?;
    let pid = rustix::process::Pid::from_raw(pid as i32).context("pid")?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)?;
    let _ = child.wait().await;
    ensure!(
        !leftovers(&ctx).await?.is_empty(),
        "the killed start left no container: nothing for gc to do (the test proves nothing)"
    );
    let gc = host_cli(&ctx, &[]).args(["guest", "gc"]).output().await?;
    let said = String::from_utf8_lossy(&gc.stdout);
    ensure!(
        gc.status.success(),
        "gc: {}",
        String::from_utf8_lossy(&gc.stderr)
    );
    ensure!(
        said.contains(&name),
        "gc did not say what it removed: {said}"
    );
    let left = leftovers(&ctx).await?;
    ensure!(left.is_empty(), "C9 containers left after gc: {left:?}");
    ensure!(
        !ctx.state_dir.join("sessions").join(&name).exists(),
        "the session folder is left after gc"
    );
    Ok(())
}

async fn four_guests_side_by_side(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let starts = (0..4).map(|i| {
        let ctx = Arc::clone(&ctx);
        async move { Guest::start(&ctx, &format!("four{i}")).await }
    });
    let results = futures_util::future::join_all(starts).await;
    let mut guests = Vec::new();
    for r in results {
        guests.push(r?);
    }
    let mut ids: Vec<&str> = guests.iter().map(Guest::id).collect();
    ids.sort_unstable();
    ids.dedup();
    ensure!(ids.len() == 4, "4 distinct containers");
    for (i, g) in guests.iter().enumerate() {
        let mut ch = g.channel(ChannelMode::Auto).await?;
        let n = act(
            &mut ch,
            json!([
                {"type": "move", "x": 100 + i * 10, "y": 100},
                {"type": "click", "button": "left", "x": 100 + i * 10, "y": 100},
                {"type": "type", "text": format!("guest {i}")},
            ]),
        )
        .await?;
        ensure!(n == 3, "guest {i} ran {n} actions");
        let shot = ch
            .screenshot(&ScreenshotOptions {
                size: Some(Size::new(640, 400)),
                ..ScreenshotOptions::default()
            })
            .await?;
        ensure!(
            (shot.screenshot.width, shot.screenshot.height) == (640, 400),
            "guest {i} screenshot {}x{}",
            shot.screenshot.width,
            shot.screenshot.height
        );
    }
    for g in guests {
        g.stop().await?;
    }
    Ok(())
}

/// A7 inside the guest: an xterm opened the way a model would (Super+T),
/// `cat > FILE` typed into its shell, then the corpus, then Ctrl-D. The
/// file holds exactly the corpus and nothing of it ran.
async fn typed_corpus_in_guest_xterm_is_byte_exact(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "type").await?;
    // The exec path on purpose (the other cases mostly use the socket).
    let mut ch = g.channel(ChannelMode::Exec).await?;
    // The window manager binds its keys a little after the daemon reports
    // it running (up to ~1 s here): press Super+T again until a terminal
    // shows up, as a model would after looking at the screen.
    let end = Instant::now() + LONG;
    loop {
        act(
            &mut ch,
            json!([{"type": "keypress", "keys": ["SUPER", "T"]}]),
        )
        .await?;
        let shell = wait_for("xterm's shell", Duration::from_millis(2500), || async {
            let ps = g.processes().await.ok()?;
            ps.iter().any(|p| p["comm"] == "bash").then_some(())
        })
        .await;
        if shell.is_ok() {
            break;
        }
        ensure!(Instant::now() < end, "Super+T never opened a terminal");
    }
    let out = "/tmp/typed.txt";
    act(
        &mut ch,
        json!([
            {"type": "move", "x": 640, "y": 400},
            {"type": "type", "text": format!("cat > {out}\n")},
        ]),
    )
    .await?;
    wait_for("cat to read the terminal", LONG, || async {
        let ps = g.processes().await.ok()?;
        ps.iter().any(|p| p["comm"] == "cat").then_some(())
    })
    .await?;
    let mark = format!("e2e{}", ctx.run);
    let text = CORPUS.replace("MARK", &mark);
    act(
        &mut ch,
        json!([
            {"type": "type", "text": text},
            {"type": "keypress", "keys": ["CTRL", "D"]},
        ]),
    )
    .await?;
    wait_for("cat to finish", LONG, || async {
        let ps = g.processes().await.ok()?;
        (!ps.iter().any(|p| p["comm"] == "cat")).then_some(())
    })
    .await?;
    let got = g.exec(&["cat", out]).await?;
    ensure!(got.exit_code == 0, "reading {out}");
    ensure!(
        got.stdout == text.as_bytes(),
        "the terminal received other bytes:\n got: {:?}\nwant: {:?}",
        String::from_utf8_lossy(&got.stdout),
        text
    );
    let pwned = g
        .exec(&["/bin/sh", "-c", "ls /tmp | grep -c sandtop-pwned || true"])
        .await?;
    ensure!(
        String::from_utf8_lossy(&pwned.stdout).trim() == "0",
        "a command in the typed text ran"
    );
    // The shell is still at its prompt: nothing else was typed into it.
    let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
    ensure!(shot.screenshot.width == 1280);
    g.stop().await
}

/// The socket and the exec path, through the library and through host-cli.
async fn both_channel_paths_work(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "paths").await?;
    for (mode, want) in [
        (ChannelMode::Socket, PathUsed::Socket),
        (ChannelMode::Exec, PathUsed::Exec),
        (ChannelMode::Auto, PathUsed::Socket),
    ] {
        let c = ctx.backend.connector_with(mode, &g.dir, g.id());
        let s = host_cli::channel::Connect::connect(&c).await?;
        drop(s);
        ensure!(c.last_path() == want, "{mode}: used {:?}", c.last_path());
        let mut ch = g.channel(mode).await?;
        ensure!(act(&mut ch, json!([{"type": "move", "x": 3, "y": 3}])).await? == 1);
        let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
        ensure!(shot.screenshot.height == 800, "{mode}");
    }
    let name = g.rec.name.clone();
    for path in ["socket", "exec"] {
        let out = host_cli(&ctx, &[("SANDTOP_CHANNEL", path)])
            .args([
                "act",
                "--session",
                &name,
                r#"{"type":"type","text":"héllo"}"#,
            ])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "host-cli act over {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        ensure!(v["ok"] == true && v["executed"] == 1, "{v}");
        let shot = ctx.state_dir.join(format!("shot-{path}.png"));
        let out = host_cli(&ctx, &[("SANDTOP_CHANNEL", path)])
            .args(["screenshot", "--session", &name, "-o"])
            .arg(&shot)
            .output()
            .await?;
        ensure!(out.status.success(), "host-cli screenshot over {path}");
        let bytes = std::fs::read(&shot)?;
        ensure!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    }
    // A socket path the guest replaced with a link is refused, not followed.
    let sock = g
        .dir
        .guest_path()
        .join(sandtop_protocol::session::SOCKET_NAME);
    let moved = g.dir.guest_path().join("real.sock");
    std::fs::rename(&sock, &moved)?;
    std::os::unix::fs::symlink(&moved, &sock)?;
    let refused = g.channel(ChannelMode::Socket).await;
    ensure!(refused.is_err(), "a symlinked socket was followed");
    std::fs::remove_file(&sock)?;
    std::fs::rename(&moved, &sock)?;
    ensure!(g.channel(ChannelMode::Socket).await.is_ok(), "socket back");
    g.stop().await
}
