//! `host-cli bench`: the guest's figures, measured on this host with the
//! Docker backend (BENCHMARKS.md, "Guest (Docker)", records them).
//!
//! Flow:
//! 1. **boot**: `--boots` times, start a guest and wait until its daemon's
//!    health is ok (what `guest start` does), then stop it; p50/min/max.
//! 2. **idle memory**: a fresh guest left alone for `--idle-secs`, then the
//!    container's working set as `docker stats` computes it (usage minus
//!    inactive page cache; the browser is not running).
//! 3. **step**: on that guest, an xterm is opened the way a model would
//!    (Super+T), then `--steps` steps of 3 actions (move, click, type one
//!    character) plus the final screenshot (1280x800 PNG), once over the
//!    socket path and once over the exec path; client-side wall time,
//!    with the daemon's own total beside it. Also the time to open a
//!    channel (connect + `/v1/info`) on each path.
//! 4. **side by side**: `--guests` guests started at once; each then
//!    answers one step and one screenshot; boot time, step time and the
//!    sum of their memory.
//!
//! With `--browser`, instead: the demo form done through the computer
//! tool and through the browser tools, side by side ([`tools`]).
//!
//! Every guest the bench starts is stopped again, on error and on Ctrl-C
//! too.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use sandtop_protocol::{Action, BatchRequest, ScreenshotOptions, Size};
use serde::Serialize;
use serde_json::json;

use sandtop_channel::Channel;
use sandtop_guest::docker::DockerBackend;
use sandtop_guest::docker::channel::ChannelMode;
use sandtop_guest::session::{self, SessionRecord, Store};
use sandtop_guest::{self as guest, StartRequest};
use sandtop_hostkit::secret::Secret;
use sandtop_hostkit::signals::until_interrupted;

mod pool;
mod tools;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Boots to measure.
    #[arg(long, default_value_t = 10)]
    pub boots: usize,
    /// Guests to run side by side (0 skips).
    #[arg(long, default_value_t = 8)]
    pub guests: usize,
    /// Steps per channel path.
    #[arg(long, default_value_t = 60)]
    pub steps: usize,
    /// How long a fresh guest idles before its memory is read, e.g. 10s.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = sandtop_hostkit::units::duration_between(Duration::ZERO, Duration::from_secs(3600))
    )]
    pub idle: Duration,
    /// (The old spelling of --idle, in seconds; kept for one release.)
    #[arg(long, hide = true, conflicts_with = "idle", value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub idle_secs: Option<u64>,
    /// Screen size of the guests, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", alias = "display", default_value = "1280x800", value_parser = Size::parse)]
    pub screen: Size,
    /// Print the figures as JSON.
    #[arg(long)]
    pub json: bool,
    /// Instead of the guest's figures: the demo form done by the scripted
    /// model through the computer tool and through the browser tools, side
    /// by side (steps, calls, images, estimated input tokens).
    #[arg(long)]
    pub browser: bool,
    /// Instead of the guest's figures: a warm pool of this many guests,
    /// a claim to an answered action against a cold start, side by side,
    /// and the memory of an idle pool guest (0: not this).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// Rounds of claim and cold start (with --pool).
    #[arg(long, default_value_t = 10)]
    pub claims: usize,
    /// The pool starts each guest's Firefox ahead; the first browser call
    /// on a claimed guest and on a cold one are timed too (with --pool).
    #[arg(long)]
    pub prewarm_browser: bool,
    #[command(flatten)]
    pub guest: sandtop_guest::options::GuestArgs,
}

impl BenchArgs {
    /// How long a fresh guest idles (`--idle`, or the old `--idle-secs`).
    pub fn idle(&self) -> Duration {
        self.idle_secs.map_or(self.idle, Duration::from_secs)
    }
}

/// Summary of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stats {
    pub n: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// p50 etc. of durations in ms (nearest-rank percentiles).
pub fn stats(samples: &[f64]) -> Stats {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let pick = |p: f64| -> f64 {
        if n == 0 {
            return f64::NAN;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        v[rank - 1]
    };
    Stats {
        n,
        p50_ms: pick(0.5),
        p90_ms: pick(0.9),
        min_ms: v.first().copied().unwrap_or(f64::NAN),
        max_ms: v.last().copied().unwrap_or(f64::NAN),
        mean_ms: if n == 0 {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / n as f64
        },
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The guests this bench started, stopped on every way out.
struct Started<'a> {
    store: &'a Store,
    backend: &'a DockerBackend,
    recs: Vec<SessionRecord>,
}

impl Started<'_> {
    async fn start(&mut self, name: String, screen: Size) -> anyhow::Result<(SessionRecord, f64)> {
        let t = Instant::now();
        let rec = guest::start(
            self.store,
            self.backend,
            &StartRequest {
                name,
                screen,
                network: sandtop_egress::service::EgressConfig::none(),
            },
        )
        .await?;
        let took = ms(t.elapsed());
        self.recs.push(rec.clone());
        Ok((rec, took))
    }

    async fn stop(&mut self, name: &str) -> anyhow::Result<()> {
        if let Some(i) = self.recs.iter().position(|r| r.name == name) {
            let rec = self.recs.remove(i);
            let dir = self.store.get(&rec.name)?;
            guest::stop(self.store, &dir, &rec).await?;
        }
        Ok(())
    }

    async fn stop_all(&mut self) {
        let names: Vec<String> = self.recs.iter().map(|r| r.name.clone()).collect();
        for n in names {
            if let Err(e) = self.stop(&n).await {
                eprintln!("host-cli bench: stopping {n}: {e:#}");
            }
        }
    }
}

fn step_request(i: usize, screen: Size) -> anyhow::Result<BatchRequest> {
    let (x, y) = (
        i64::from(screen.width / 2) + (i % 7) as i64,
        i64::from(screen.height / 2),
    );
    let actions: Vec<Action> = serde_json::from_value(json!([
        {"type": "move", "x": x, "y": y},
        {"type": "click", "button": "left", "x": x, "y": y},
        {"type": "type", "text": "a"},
    ]))
    .context("building the bench actions")?;
    Ok(BatchRequest::new(actions, ScreenshotOptions::default()))
}

async fn open(
    backend: &DockerBackend,
    store: &Store,
    rec: &SessionRecord,
    mode: ChannelMode,
) -> anyhow::Result<Channel> {
    let dir = store.get(&rec.name)?;
    let container = rec
        .docker()
        .map(|d| d.container_id.clone())
        .context("not a docker session")?;
    let token = Secret::read(&dir.token_path())?;
    let c = backend.connector_with(mode, &dir, &container);
    Channel::open(Box::new(c), token)
        .await
        .with_context(|| format!("opening the {mode} channel to {}", rec.name))
}

/// Runs the bench; prints the figures.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let backend = args.guest.docker().await?;
    let engine = backend.engine().await?;
    let image = backend.image_info().await?;
    let store = Store::open()?;
    let mut started = Started {
        store: &store,
        backend: &backend,
        recs: Vec::new(),
    };
    let tag = session::new_name()?;
    if args.pool > 0 {
        let figures = match until_interrupted(pool::compare(&args, &tag)).await {
            Ok(r) => r?,
            Err(sig) => bail!("interrupted by {sig}"),
        };
        let all = json!({ "host": {"engine": engine, "image": image}, "figures": figures });
        sandtop_hostkit::out!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    let out = if args.browser {
        until_interrupted(tools::compare(&backend, &mut started, &tag)).await
    } else {
        until_interrupted(measure(&args, &backend, &mut started, &tag)).await
    };
    started.stop_all().await;
    let figures = match out {
        Ok(r) => r?,
        Err(sig) => bail!("interrupted by {sig}; the bench's guests were removed"),
    };
    let host = json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "mem_total_mb": meminfo("MemTotal:").map(|k| k / 1024),
        "engine": engine,
        "image": image,
        "limits": backend.limits(),
    });
    let all = json!({ "host": host, "figures": figures });
    if args.json || args.browser {
        sandtop_hostkit::out!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print_text(&all);
    }
    Ok(ExitCode::SUCCESS)
}

/// A /proc/meminfo field in KiB.
fn meminfo(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn measure(
    args: &BenchArgs,
    backend: &DockerBackend,
    started: &mut Started<'_>,
    tag: &str,
) -> anyhow::Result<serde_json::Value> {
    let screen = args.screen;
    // 1. Boots.
    let mut boots = Vec::new();
    for i in 0..args.boots {
        let name = format!("bench-{tag}-b{i}");
        let (_, took) = started.start(name.clone(), screen).await?;
        boots.push(took);
        started.stop(&name).await?;
        eprintln!("boot {}/{}: {:.0} ms", i + 1, args.boots, took);
    }

    // 2. Idle memory of a fresh guest.
    let name = format!("bench-{tag}-s");
    let (rec, _) = started.start(name.clone(), screen).await?;
    let container = rec
        .docker()
        .map(|d| d.container_id.clone())
        .context("not a docker session")?;
    tokio::time::sleep(args.idle()).await;
    let idle = backend.memory_use(&container).await?;
    eprintln!(
        "idle memory after {} s: {:.1} MB working set",
        args.idle().as_secs_f64(),
        idle.working_set_bytes as f64 / 1e6
    );

    // 3. Steps through both paths, into an xterm opened like a model would.
    let mut ch = open(backend, started.store, &rec, ChannelMode::Socket).await?;
    let open_xterm: Vec<Action> =
        serde_json::from_value(json!([{"type": "keypress", "keys": ["SUPER", "T"]}]))?;
    ch.act(&BatchRequest::new(open_xterm, ScreenshotOptions::default()))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut paths = serde_json::Map::new();
    for mode in [ChannelMode::Socket, ChannelMode::Exec] {
        let mut opens = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let c = open(backend, started.store, &rec, mode).await?;
            opens.push(ms(t.elapsed()));
            drop(c);
        }
        let mut ch = open(backend, started.store, &rec, mode).await?;
        let (mut wall, mut daemon) = (Vec::new(), Vec::new());
        for i in 0..args.steps + 5 {
            let req = step_request(i, screen)?;
            let t = Instant::now();
            let r = ch.act(&req).await?;
            if i >= 5 {
                wall.push(ms(t.elapsed()));
                daemon.push(r.timings.total_ms);
            }
        }
        let w = stats(&wall);
        eprintln!("step via {mode}: p50 {:.1} ms over {} steps", w.p50_ms, w.n);
        paths.insert(
            mode.to_string(),
            json!({ "step": w, "daemon_total": stats(&daemon), "open": stats(&opens) }),
        );
    }
    drop(ch);
    started.stop(&name).await?;

    // 4. Side by side.
    let mut side = serde_json::Value::Null;
    if args.guests > 0 {
        let avail_before = meminfo("MemAvailable:");
        let t = Instant::now();
        let store = started.store;
        let mut futs = Vec::new();
        for i in 0..args.guests {
            let req = StartRequest {
                name: format!("bench-{tag}-g{i}"),
                screen,
                network: sandtop_egress::service::EgressConfig::none(),
            };
            futs.push(async move {
                let t = Instant::now();
                let r = guest::start(store, backend, &req).await;
                (r, ms(t.elapsed()))
            });
        }
        let results = futures_util::future::join_all(futs).await;
        let all_ready_ms = ms(t.elapsed());
        let mut boot_each = Vec::new();
        let mut first_err = None;
        for (r, took) in results {
            match r {
                Ok(rec) => {
                    started.recs.push(rec);
                    boot_each.push(took);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(anyhow::Error::from(e)
                .context(format!("starting {} guests side by side", args.guests)));
        }
        let recs = started.recs.clone();
        let mut steps = Vec::new();
        let mut shots = Vec::new();
        let mut mem = 0u64;
        for (i, rec) in recs.iter().enumerate() {
            let mut ch = open(backend, started.store, rec, backend.channel_mode()).await?;
            let t = Instant::now();
            ch.act(&step_request(i, screen)?).await?;
            steps.push(ms(t.elapsed()));
            let t = Instant::now();
            ch.screenshot(&ScreenshotOptions::default()).await?;
            shots.push(ms(t.elapsed()));
            if let Some(d) = rec.docker() {
                mem += backend.memory_use(&d.container_id).await?.working_set_bytes;
            }
        }
        let avail_after = meminfo("MemAvailable:");
        eprintln!(
            "{} guests side by side: all ready in {:.1} s, {:.0} MB together",
            args.guests,
            all_ready_ms / 1000.0,
            mem as f64 / 1e6
        );
        side = json!({
            "guests": args.guests,
            "all_ready_ms": all_ready_ms,
            "boot": stats(&boot_each),
            "step": stats(&steps),
            "screenshot": stats(&shots),
            "working_set_total_mb": mem as f64 / 1e6,
            "host_mem_available_drop_mb": match (avail_before, avail_after) {
                (Some(a), Some(b)) => json!(a.saturating_sub(b) as f64 / 1024.0),
                _ => json!(null),
            },
        });
        started.stop_all().await;
    }

    Ok(json!({
        "boot": stats(&boots),
        "idle_memory": {
            "after_secs": args.idle().as_secs_f64(),
            "working_set_mb": idle.working_set_bytes as f64 / 1e6,
            "usage_mb": idle.usage_bytes as f64 / 1e6,
            "pids": idle.pids,
        },
        "step_3_actions_plus_screenshot": paths,
        "side_by_side": side,
    }))
}

fn print_text(all: &serde_json::Value) {
    let f = &all["figures"];
    let h = &all["host"];
    sandtop_hostkit::out!(
        "host: {} CPUs, {} MB; engine {} (API {}); image {} {}",
        h["cpus"],
        h["mem_total_mb"],
        h["engine"]["server_version"].as_str().unwrap_or(""),
        h["engine"]["api_version"].as_str().unwrap_or(""),
        h["image"]["reference"].as_str().unwrap_or(""),
        h["image"]["input_hash"]
            .as_str()
            .map(|s| s.chars().take(12).collect::<String>())
            .unwrap_or_default(),
    );
    let line = |what: &str, s: &serde_json::Value| {
        sandtop_hostkit::out!(
            "{what:<44} p50 {:>8.1} ms  p90 {:>8.1}  min {:>8.1}  max {:>8.1}  (n={})",
            s["p50_ms"].as_f64().unwrap_or(f64::NAN),
            s["p90_ms"].as_f64().unwrap_or(f64::NAN),
            s["min_ms"].as_f64().unwrap_or(f64::NAN),
            s["max_ms"].as_f64().unwrap_or(f64::NAN),
            s["n"]
        );
    };
    line("boot to ready (image present)", &f["boot"]);
    for p in ["socket", "exec"] {
        let s = &f["step_3_actions_plus_screenshot"][p];
        line(&format!("step, 3 actions + screenshot ({p})"), &s["step"]);
        line(
            &format!("  of which in the daemon ({p})"),
            &s["daemon_total"],
        );
        line(&format!("channel open ({p})"), &s["open"]);
    }
    sandtop_hostkit::out!(
        "{:<44} {:.1} MB working set ({:.1} MB with page cache), {} pids",
        format!(
            "idle memory (no browser, after {} s)",
            f["idle_memory"]["after_secs"]
        ),
        f["idle_memory"]["working_set_mb"]
            .as_f64()
            .unwrap_or(f64::NAN),
        f["idle_memory"]["usage_mb"].as_f64().unwrap_or(f64::NAN),
        f["idle_memory"]["pids"],
    );
    let s = &f["side_by_side"];
    if !s.is_null() {
        sandtop_hostkit::out!(
            "{} guests side by side: all ready in {:.1} s, {:.0} MB working set together",
            s["guests"],
            s["all_ready_ms"].as_f64().unwrap_or(f64::NAN) / 1000.0,
            s["working_set_total_mb"].as_f64().unwrap_or(f64::NAN),
        );
        line("  boot each", &s["boot"]);
        line("  one step each", &s["step"]);
        line("  one screenshot each", &s["screenshot"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let s = stats(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.n, s.p50_ms, s.min_ms, s.max_ms), (5, 3.0, 1.0, 5.0));
        assert_eq!(s.p90_ms, 5.0);
        assert_eq!(s.mean_ms, 3.0);
        let s = stats(&[1.0, 2.0]);
        assert_eq!(s.p50_ms, 1.0);
        assert!(stats(&[]).p50_ms.is_nan());
    }

    #[test]
    fn step_is_three_actions() {
        let r = step_request(3, Size::new(1280, 800)).unwrap();
        assert_eq!(r.actions.len(), 3);
    }
}
