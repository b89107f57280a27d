//! `host-cli batch TASKS.jsonl` once its options are read: each task of
//! a file on its own fresh guest, in its own run folder, judged by checks
//! of the guest's state (docs/tasks.md).
//!
//! Per task: boot a Docker guest (the task's network), take its run lock,
//! run the setup steps, run the loop (the real model with a key; without
//! one the task's scripted solution through the scripted model, or
//! `skipped`), run the checks, record them in the run folder, write the
//! run's report (`host-cli report`'s page), remove the guest (always:
//! also on errors). `parallel` runs that many tasks at once, each with its
//! own guest. The end: `results.json` and `index.html` (one row a task,
//! each linking its report, [`crate::table`]) in the output folder.
//!
//! Ctrl-C (or SIGTERM, SIGHUP) stops the batch: the runs under way end
//! between operations, as `host-cli run`'s does, the tasks not begun are
//! not begun, every guest is removed, and the results and the table are
//! written with those tasks `interrupted` (exit 130).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use sandtop_protocol::{ScreenshotOptions, Size};

use sandtop_agent::approve::{Approvals, Policy};
use sandtop_agent::launch::{DEFAULT_INSTRUCTIONS, Provider};
use sandtop_agent::model::anthropic::AnthropicModel;
use sandtop_agent::model::anthropic::scripted::ScriptedMessages;
use sandtop_agent::model::{Model, OpenAiModel, RetryPolicy};
use sandtop_agent::progress::Progress;
use sandtop_agent::runner::{
    Compaction, ContextBudget, Interrupt, OnActionError, Outcome, RunOptions, Runner,
};
use sandtop_guest::docker::DockerBackend;
use sandtop_guest::options::GuestArgs;
use sandtop_guest::session::{self, BackendKind, Store};
use sandtop_hostkit::secret::Secret;
use sandtop_hostkit::term;
use sandtop_runfolder::items::ToolShape;
use sandtop_runfolder::outcome::Ending;
use sandtop_runfolder::trajectory::{Entry as Record, Recorder, Started};

use crate::results::{self, Status, Summary, TaskResult};
use crate::task::{Entry, Task};
use crate::{checks, script, setup};

/// The exit status of a usage error: a task file that cannot be read,
/// bad options (clap's own status for its errors).
pub const USAGE: u8 = 2;

/// The screen every task's guest has (solutions are written for it).
const SCREEN: Size = Size::new(1280, 800);

/// What `host-cli batch` was asked.
#[derive(Debug)]
pub struct BatchOptions {
    /// The task file: one JSON task a line, Sandtop's shape or OSWorld's.
    pub tasks: PathBuf,
    /// How many tasks run at once, each on its own guest.
    pub parallel: u16,
    /// The output folder; default: batches/NAME-UNIXTIME in the state
    /// directory. It must not hold results already.
    pub out: Option<PathBuf>,
    /// The model's API when its key is set.
    pub provider: Provider,
    /// The model (with a key; default as `host-cli run`).
    pub model: Option<String>,
    /// The policy that decides the model's safety checks (none: every
    /// check is denied).
    pub approve_policy: Option<PathBuf>,
    /// Each task's time budget in seconds.
    pub max_seconds: u64,
    /// Each task's guest from the warm pool when it can be.
    pub pool: bool,
    /// How the guests are booted.
    pub guest: GuestArgs,
}

/// What every task of a batch shares.
struct Shared {
    store: Store,
    /// Set when the batch is stopped (a signal): shared by every run.
    interrupt: Interrupt,
    /// The engine, when some task runs (none: nothing boots).
    docker: Option<DockerBackend>,
    key: Option<Secret>,
    args: BatchOptions,
    out: PathBuf,
    policy: Option<PathBuf>,
}

/// Runs the batch; its exit status (0 every task that ran passed, 1 a
/// task failed or could not be run, [`USAGE`] a bad task file or
/// options). The results and the table are in the output folder.
pub async fn run(a: BatchOptions) -> anyhow::Result<u8> {
    let text = match std::fs::read_to_string(&a.tasks) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("host-cli: reading {}: {e}", a.tasks.display());
            return Ok(USAGE);
        }
    };
    let entries = match crate::read::parse(&text) {
        Ok(e) => e,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!(
                    "host-cli: {}:{}: {}",
                    a.tasks.display(),
                    e.line,
                    term::safe_line(&e.message)
                );
            }
            eprintln!(
                "host-cli: {} bad line(s) in {}: nothing was run",
                errors.0.len(),
                a.tasks.display()
            );
            return Ok(USAGE);
        }
    };
    if let Some(p) = &a.approve_policy {
        Policy::load(p)?;
    }
    let key = std::env::var(a.provider.key_var())
        .ok()
        .filter(|k| !k.trim().is_empty())
        .map(Secret::new);
    let store = Store::open()?;
    if a.pool && !sandtop_pool::client::running(&sandtop_pool::PoolPaths::of(&store)).await {
        eprintln!(
            "host-cli: --pool: no pool is running for this state directory: start one with \
             `host-cli pool start` (its guests must be 1280x800), or leave out --pool"
        );
        return Ok(USAGE);
    }
    let out = match &a.out {
        Some(o) => o.clone(),
        None => {
            let stem = a
                .tasks
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "tasks".into());
            store
                .root()
                .join("batches")
                .join(format!("{stem}-{}", session::now_unix()))
        }
    };
    if out.join("results.json").exists() || out.join("runs").exists() {
        eprintln!(
            "host-cli: {} already holds a batch's results: give another --out",
            out.display()
        );
        return Ok(USAGE);
    }
    std::fs::create_dir_all(out.join("runs"))
        .with_context(|| format!("creating {}", out.display()))?;
    let runs = |e: &Entry| matches!(e, Entry::Task(t) if key.is_some() || t.solution.is_some());
    let docker = if entries.iter().any(runs) {
        Some(DockerBackend::connect().await?)
    } else {
        None
    };
    let mode = match &key {
        Some(_) => a.provider.as_str().to_string(),
        None => "scripted".to_string(),
    };
    if key.is_none() {
        eprintln!(
            "host-cli: {} is not set: tasks with a scripted solution run it (scripted model, \
             real guests); the others are skipped",
            a.provider.key_var()
        );
    }
    let interrupt = Interrupt::default();
    watch_signals(&interrupt);
    let shared = Shared {
        store,
        interrupt,
        docker,
        key,
        policy: a.approve_policy.clone(),
        out: out.clone(),
        args: a,
    };
    let started_ms = now_ms();
    let t0 = Instant::now();
    let parallel = usize::from(shared.args.parallel);
    let total = entries.len();
    let mut results: Vec<TaskResult> = futures_util::stream::iter(entries.iter())
        .map(|e| run_entry(&shared, e))
        .buffer_unordered(parallel)
        .inspect(|r| {
            eprintln!(
                "host-cli: {} {}{}",
                r.status.word(),
                term::safe_line(&r.id),
                r.reason
                    .as_deref()
                    .map(|w| w
                        .strip_prefix(r.status.word())
                        .map_or(w, |w| w.trim_start_matches(':').trim_start()))
                    .map(|w| format!(": {}", term::safe_line(w)))
                    .unwrap_or_default()
            );
        })
        .collect()
        .await;
    let order: Vec<&str> = entries.iter().map(Entry::id).collect();
    results.sort_by_key(|r| order.iter().position(|id| *id == r.id));
    let summary = Summary {
        version: 1,
        tasks_file: shared.args.tasks.display().to_string(),
        parallel,
        mode,
        started_unix_ms: started_ms,
        wall_seconds: t0.elapsed().as_secs_f64(),
        totals: results::totals(&results),
        tasks: &results,
    };
    let json = serde_json::to_string_pretty(&summary)?;
    std::fs::write(out.join("results.json"), format!("{json}\n"))
        .with_context(|| format!("writing {}", out.join("results.json").display()))?;
    let html = crate::table::page(&summary);
    std::fs::write(out.join("index.html"), html)
        .with_context(|| format!("writing {}", out.join("index.html").display()))?;
    let t = summary.totals;
    sandtop_hostkit::out!(
        "{}",
        serde_json::json!({
            "totals": t,
            "wall_seconds": (summary.wall_seconds * 10.0).round() / 10.0,
            "results": out.join("results.json"),
            "table": out.join("index.html"),
        })
    );
    eprintln!(
        "host-cli: {total} tasks in {:.1} s: {} passed, {} failed, {} unsupported, {} skipped, {} errors, \
         {} interrupted",
        summary.wall_seconds, t.passed, t.failed, t.unsupported, t.skipped, t.error, t.interrupted
    );
    Ok(results::exit_status(&results))
}

/// Stops the batch on Ctrl-C, SIGTERM or SIGHUP (once: a run under way
/// still ends between operations and its guest is removed).
fn watch_signals(interrupt: &Interrupt) {
    let i = interrupt.clone();
    tokio::spawn(async move {
        if let Err(signal) =
            sandtop_hostkit::signals::until_interrupted(std::future::pending::<()>()).await
        {
            eprintln!(
                "\nhost-cli: stopping the batch ({signal}): the runs under way end, their \
                 guests are removed, the tasks not begun are not begun"
            );
            i.trigger();
        }
    });
}

/// A task the batch was stopped before (or while) running.
fn interrupted(r: &mut TaskResult, what: &str) {
    r.status = Status::Interrupted;
    r.reason = Some(format!("interrupted: {what}"));
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

async fn run_entry(shared: &Shared, e: &Entry) -> TaskResult {
    match e {
        Entry::Unsupported {
            id, line, names, ..
        } => {
            let mut r = TaskResult::new(id, *line, Status::Unsupported);
            r.reason = Some(format!("unsupported: {}", names.join(", ")));
            r.unsupported = names.clone();
            r
        }
        Entry::Task(t) if shared.key.is_none() && t.solution.is_none() => {
            let mut r = TaskResult::new(&t.id, t.line, Status::Skipped);
            r.reason = Some(format!(
                "skipped: no API key ({}) and no scripted solution",
                shared.args.provider.key_var()
            ));
            r
        }
        Entry::Task(t) if shared.interrupt.is_set() => {
            let mut r = TaskResult::new(&t.id, t.line, Status::Interrupted);
            interrupted(&mut r, "the batch was stopped before it began");
            r
        }
        Entry::Task(t) => {
            let t0 = Instant::now();
            let mut r = TaskResult::new(&t.id, t.line, Status::Error);
            if let Err(err) = run_task(shared, t, &mut r).await {
                let why = sandtop_hostkit::chain::chain(err.as_ref());
                if shared.interrupt.is_set() {
                    // The signal reached what was under way too (a
                    // guest's boot gives up on it).
                    interrupted(&mut r, &format!("the batch was stopped ({why})"));
                } else {
                    r.status = Status::Error;
                    r.reason = Some(why);
                }
            }
            r.seconds = t0.elapsed().as_secs_f64();
            r
        }
    }
}

/// Boots the task's guest, runs it there, removes the guest.
async fn run_task(shared: &Shared, t: &Task, r: &mut TaskResult) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let network: sandtop_egress::policy::NetworkMode = t
        .network
        .parse()
        .map_err(|e| anyhow::anyhow!("network: {e}"))?;
    let config = sandtop_egress::service::EgressConfig {
        mode: network,
        ..sandtop_egress::service::EgressConfig::none()
    };
    let guest = |pool: bool| {
        sandtop_pool::acquire::session_for(
            &shared.store,
            None,
            BackendKind::Docker,
            (SCREEN, &shared.args.guest),
            // Never kept: a task's guest is removed after it.
            (false, pool),
            config.clone(),
        )
    };
    let claimed = if shared.args.pool {
        match guest(true).await {
            Ok(g) => Some(g),
            // The pool's guests are not what this task needs (its
            // network), none came in time, or the pool has gone since the
            // batch began: a guest of its own.
            Err(
                e @ (sandtop_pool::PoolError::Refused(_)
                | sandtop_pool::PoolError::NotRunning { .. }
                | sandtop_pool::PoolError::Io { .. }),
            ) => {
                eprintln!(
                    "host-cli: task {}: {}; booting one",
                    term::safe_line(&t.id),
                    term::safe_line(&e.to_string())
                );
                None
            }
            Err(e) => return Err(anyhow::Error::new(e).context("claiming the task's guest")),
        }
    } else {
        None
    };
    r.guest = Some(if claimed.is_some() { "pool" } else { "booted" });
    let (dir, rec, booted) = match claimed {
        Some(g) => g,
        None => guest(false).await.context("booting the task's guest")?,
    };
    let booted = booted.context("the task's guest was not booted by this batch")?;
    r.boot_seconds = t0.elapsed().as_secs_f64();
    let result = on_guest(shared, t, r, &dir, &rec).await;
    booted.remove().await;
    result
}

async fn on_guest(
    shared: &Shared,
    t: &Task,
    r: &mut TaskResult,
    dir: &session::SessionDir,
    rec: &session::SessionRecord,
) -> anyhow::Result<()> {
    if shared.interrupt.is_set() {
        interrupted(r, "the batch was stopped while its guest booted");
        return Ok(());
    }
    let _lock = session::lock_session(dir)?;
    let mut channel = sandtop_guest::open_channel(dir, rec).await?;
    let container = rec
        .docker()
        .map(|d| d.container_id.clone())
        .context("the task's guest has no container")?;
    let t_setup = Instant::now();
    {
        let mut g = setup::Guest {
            channel: &mut channel,
            docker: shared.docker.as_ref().map(|d| (d, container.as_str())),
        };
        setup::run(&mut g, &t.setup).await?;
    }
    r.setup_seconds = t_setup.elapsed().as_secs_f64();
    if shared.interrupt.is_set() {
        interrupted(r, "the batch was stopped during its setup");
        return Ok(());
    }
    let run_dir = shared.out.join("runs").join(&t.id);
    let mut recorder = Recorder::create(&run_dir)?;
    r.run_folder = Some(run_dir.display().to_string());
    // What `host-cli replay` of this folder sets up first.
    crate::replay::record(&run_dir, t)?;
    let (mut model, opts) = model_for(shared, t)?;
    r.model = Some(opts.model.clone());
    recorder.write(&Record::RunStarted(Box::new(Started {
        task: opts.task.clone(),
        session: rec.name.clone(),
        model: Some(opts.model.clone()),
        tool: Some(opts.shape),
        max_steps: Some(opts.max_steps),
        model_api: Some(model.describe()),
        provider: Some(shared.args.provider.as_str().into()),
        booted: Some(true),
        keep: Some(false),
        ..Started::default()
    })))?;
    // A batch has no terminal: a policy, or every question denied.
    let mut op = Approvals {
        policy: shared
            .policy
            .as_ref()
            .map(|p| Policy::load(p))
            .transpose()?,
        ..Approvals::default()
    };
    let t_run = Instant::now();
    let outcome: Outcome = Runner::new(
        model.as_mut(),
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        shared.interrupt.clone(),
    )
    .with_progress(Progress::for_cli(true, None))
    .run(None)
    .await?;
    r.run_seconds = t_run.elapsed().as_secs_f64();
    r.ending = Some(sandtop_report::html::json_word(&outcome.ending));
    r.steps = outcome.steps;
    r.input_tokens = outcome.usage.input_tokens;
    r.output_tokens = outcome.usage.output_tokens;
    r.total_tokens = outcome.usage.total_tokens;
    if outcome.ending == Ending::Interrupted {
        // Its checks would judge a run cut short: not run. The run folder
        // and its report stay.
        interrupted(
            r,
            &format!("the batch was stopped after {} step(s)", outcome.steps),
        );
        recorder.sync()?;
        drop(recorder);
        write_report(&run_dir, t, r);
        return Ok(());
    }
    let mut verdicts = Vec::new();
    for c in &t.checks {
        verdicts.push(checks::evaluate(&mut channel, c).await);
    }
    recorder.write(&Record::ExerciseChecks {
        checks: verdicts.clone(),
    })?;
    recorder.sync()?;
    drop(recorder);
    let failed = verdicts.iter().find(|c| !c.ok);
    r.status = if failed.is_none() {
        Status::Passed
    } else {
        Status::Failed
    };
    r.reason = failed.map(|c| format!("check failed: {}: {}", c.what, c.detail));
    r.checks = verdicts;
    write_report(&run_dir, t, r);
    Ok(())
}

/// The run's own report, linked from the table.
fn write_report(run_dir: &std::path::Path, t: &Task, r: &mut TaskResult) {
    let report = run_dir.join("report.html");
    match sandtop_report::render(run_dir, sandtop_report::Journal::None)
        .and_then(|html| sandtop_report::write_new(&report, &html, false))
    {
        Ok(()) => r.report = Some(format!("runs/{}/report.html", t.id)),
        Err(e) => eprintln!(
            "host-cli: task {}: no report: {}",
            term::safe_line(&t.id),
            term::safe_line(&sandtop_hostkit::chain::chain(&e))
        ),
    }
}

/// The task's model and loop options: the real model with a key, else the
/// task's solution through the scripted model.
fn model_for(shared: &Shared, t: &Task) -> anyhow::Result<(Box<dyn Model>, RunOptions)> {
    let a = &shared.args;
    let (model, name, scripted): (Box<dyn Model>, String, bool) = match (&shared.key, &t.solution) {
        (Some(key), _) => {
            let name = a.model.clone().unwrap_or_else(|| match a.provider {
                Provider::Anthropic => "claude-opus-5-5".into(),
                Provider::Openai => "gpt-5.5".into(),
            });
            let m: Box<dyn Model> = match a.provider {
                Provider::Openai => Box::new(OpenAiModel::new(
                    key.clone(),
                    false,
                    RetryPolicy::default(),
                )?),
                Provider::Anthropic => {
                    Box::new(AnthropicModel::new(key.clone(), RetryPolicy::default())?)
                }
            };
            (m, name, false)
        }
        (None, Some(turns)) => {
            let m = script::model(turns);
            let m: Box<dyn Model> = match a.provider {
                Provider::Openai => Box::new(m),
                Provider::Anthropic => Box::new(ScriptedMessages::new(m)),
            };
            (m, "sandtop-scripted-solution".into(), true)
        }
        (None, None) => anyhow::bail!("no API key and no scripted solution"),
    };
    let opts = RunOptions {
        task: t.instruction.clone(),
        model: name,
        shape: ToolShape::Computer,
        computer: true,
        browser: None,
        instructions: Some(DEFAULT_INSTRUCTIONS.into()),
        max_steps: t.max_steps,
        max_duration: Some(Duration::from_secs(a.max_seconds)),
        store: false,
        stream: false,
        screenshot: ScreenshotOptions::default(),
        confirm_actions: false,
        ask_user: false,
        sign_in: false,
        initial_screenshot: true,
        context: ContextBudget::default(),
        compaction: Compaction::Off,
        // A solution's actions must all work; a model is told of a
        // failed action and goes on.
        on_action_error: if scripted {
            OnActionError::Stop
        } else {
            OnActionError::Report
        },
    };
    Ok((model, opts))
}
