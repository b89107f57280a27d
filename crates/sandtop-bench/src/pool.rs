//! `host-cli bench --pool N`: a claim from a warm pool against a cold
//! `guest start`, side by side in one run (BENCHMARKS.md, "Warm pool").
//!
//! A supervisor (`host-cli pool start --size N`, a child process as a
//! user would run it) fills the pool; after `--idle`, the working set of
//! each ready guest (`docker stats`). Then `--claims` rounds, each with
//! the pool full and nothing starting: a claim, the channel opened and one
//! action answered (a click with its screenshot), timed from before the
//! claim; then a cold start of the same configuration timed the same way.
//! With `--prewarm-browser` the pool starts each guest's Firefox ahead,
//! and each round also times the first browser call (`browser_state`) on
//! the claimed guest and on the cold one.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sandtop_pool::{PoolPaths, client};
use sandtop_protocol::{Action, BatchRequest, ScreenshotOptions};
use serde_json::{Value, json};

use super::{BenchArgs, ms, stats};
use sandtop_guest::session::{BackendKind, SessionRecord, Store};
use sandtop_guest::{self as guest, StartRequest};

/// One click and its screenshot: "a guest that answers an action".
async fn answer(store: &Store, rec: &SessionRecord) -> anyhow::Result<()> {
    let dir = store.get(&rec.name)?;
    let mut ch = guest::open_channel(&dir, rec).await?;
    let click: Vec<Action> =
        serde_json::from_value(json!([{"type": "click", "button": "left", "x": 10, "y": 10}]))?;
    ch.act(&BatchRequest::new(click, ScreenshotOptions::default()))
        .await?;
    Ok(())
}

async fn first_browser_call(store: &Store, rec: &SessionRecord) -> anyhow::Result<f64> {
    let dir = store.get(&rec.name)?;
    let mut ch = guest::open_channel(&dir, rec).await?;
    let t = Instant::now();
    ch.browser_state().await?;
    Ok(ms(t.elapsed()))
}

async fn remove(store: &Store, name: &str) {
    if let Ok(dir) = store.get(name)
        && let Ok(rec) = dir.load()
        && let Err(e) = guest::stop(store, &dir, &rec).await
    {
        eprintln!("host-cli bench: removing {name}: {}", e.chain());
    }
}

/// Waits until the pool has `size` ready and nothing starting.
async fn full(store: &Store, size: usize) -> anyhow::Result<()> {
    let end = Instant::now() + Duration::from_secs(600);
    loop {
        if let Ok(s) = client::status(store).await {
            if let Some(h) = s.halted {
                bail!("the pool stopped refilling: {h}");
            }
            if s.ready.len() == size && s.starting.is_empty() {
                return Ok(());
            }
        }
        if Instant::now() > end {
            bail!("the pool did not fill within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn compare(args: &BenchArgs, tag: &str) -> anyhow::Result<Value> {
    let store = Store::open()?;
    let paths = PoolPaths::of(&store);
    if client::running(&paths).await {
        bail!("a pool already runs for this state directory: stop it (host-cli pool stop) first");
    }
    let size = args.pool;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args(["pool", "start", "--size", &size.to_string()])
        .args(["--image", &args.guest.image])
        .args(["--memory", &args.guest.memory.to_string()])
        .args(["--screen", &args.screen.to_string()]);
    if args.prewarm_browser {
        cmd.args(["--prewarm", "browser"]);
    }
    {
        use std::os::unix::process::CommandExt as _;
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .process_group(0);
    }
    let mut sup = cmd.spawn().context("starting the pool's supervisor")?;
    let result = rounds(args, &store, size, tag).await;
    if client::stop(&store, Duration::from_secs(120))
        .await
        .is_err()
    {
        let _ = sup.kill();
    }
    let _ = sup.wait();
    result
}

async fn rounds(args: &BenchArgs, store: &Store, size: usize, tag: &str) -> anyhow::Result<Value> {
    let t = Instant::now();
    full(store, size).await?;
    eprintln!("pool of {size} full in {:.1} s", t.elapsed().as_secs_f64());
    tokio::time::sleep(args.idle()).await;
    let docker = args.guest.docker().await?;
    let mut idle_mb = Vec::new();
    for m in client::status(store).await?.ready {
        let rec = store.get(&m.name)?.load()?;
        if let Some(d) = rec.docker() {
            idle_mb.push(docker.memory_use(&d.container_id).await?.working_set_bytes as f64 / 1e6);
        }
    }
    let mem = stats(&idle_mb);
    eprintln!(
        "idle pool guest: {:.1} MB working set p50 ({} guests)",
        mem.p50_ms, mem.n
    );
    let (mut warm, mut claim_only, mut cold) = (Vec::new(), Vec::new(), Vec::new());
    let (mut warm_browser, mut cold_browser) = (Vec::new(), Vec::new());
    for i in 0..args.claims {
        full(store, size).await?;
        let name = format!("bench-{tag}-w{i}");
        let t = Instant::now();
        let (_, rec) = client::claim(store, &name, Duration::from_secs(60), Default::default())
            .await
            .context("claiming from the pool")?;
        claim_only.push(ms(t.elapsed()));
        let r = answer(store, &rec).await;
        warm.push(ms(t.elapsed()));
        let b = if r.is_ok() && args.prewarm_browser {
            Some(first_browser_call(store, &rec).await)
        } else {
            None
        };
        remove(store, &name).await;
        r?;
        if let Some(b) = b {
            warm_browser.push(b?);
        }

        full(store, size).await?;
        let name = format!("bench-{tag}-c{i}");
        let req = StartRequest {
            name: name.clone(),
            screen: args.screen,
            network: sandtop_egress::service::EgressConfig::none(),
        };
        let t = Instant::now();
        let started = guest::options::start_configured(
            store,
            BackendKind::Docker,
            &args.guest,
            &req,
            &[],
            None,
        )
        .await;
        let r = match &started {
            Ok(rec) => answer(store, rec).await,
            Err(_) => Ok(()),
        };
        cold.push(ms(t.elapsed()));
        let b = match (&started, &r) {
            (Ok(rec), Ok(())) if args.prewarm_browser => Some(first_browser_call(store, rec).await),
            _ => None,
        };
        remove(store, &name).await;
        started?;
        r?;
        if let Some(b) = b {
            cold_browser.push(b?);
        }
        eprintln!(
            "round {}/{}: warm claim to an answered action {:.0} ms, cold start {:.0} ms",
            i + 1,
            args.claims,
            warm[i],
            cold[i]
        );
    }
    Ok(json!({
        "pool_size": size,
        "prewarm_browser": args.prewarm_browser,
        "claim_to_answered_action": stats(&warm),
        "claim_alone": stats(&claim_only),
        "cold_start_to_answered_action": stats(&cold),
        "idle_pool_guest_working_set_mb": mem,
        "first_browser_call_claimed": stats(&warm_browser),
        "first_browser_call_cold": stats(&cold_browser),
        "load_average": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    }))
}
