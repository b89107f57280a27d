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
#[path = "e2e/security.rs"]
mod security;
use security::security_from_inside_and_outside;
#[path = "e2e/health.rs"]
mod health;
use health::{
    four_guests_side_by_side, kill9_during_start_then_gc_leaves_nothing,
    killed_display_is_detected_and_restarted, limits_hold_against_a_fork_bomb_and_a_memory_hog,
    readiness_and_its_timeout,
};
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
