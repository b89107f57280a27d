//! `host-cli batch TASKS.jsonl`: its options, then
//! `sandtop_batch::run::run` (each task on its own fresh guest, judged by
//! checks of the guest's state; docs/tasks.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::run::Provider;

/// Options of `host-cli batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The task file: one JSON task a line, Sandtop's shape or OSWorld's
    /// (docs/tasks.md).
    pub tasks: PathBuf,
    /// Run this many tasks at once, each on its own guest (1 to 16).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub parallel: u16,
    /// The output folder (results.json, index.html, runs/ID/ per task);
    /// default: batches/NAME-UNIXTIME in the state directory. It must not
    /// hold results already.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The model's API when a key is set: `openai` (OPENAI_API_KEY) or
    /// `anthropic` (ANTHROPIC_API_KEY). Without that key, tasks with a
    /// scripted solution run it and the others are skipped.
    #[arg(long, value_enum, default_value_t = Provider::Openai)]
    pub provider: Provider,
    /// The model (with a key; default as `host-cli run`).
    #[arg(long)]
    pub model: Option<String>,
    /// Decide the model's safety checks from this JSON policy file (a
    /// batch has no terminal: without a policy every check is denied).
    #[arg(long, value_name = "FILE")]
    pub approve_policy: Option<PathBuf>,
    /// Each task's time budget, e.g. 300 (seconds).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(10..=7200))]
    pub max_seconds: u64,
    /// Take each task's guest from the warm pool (`host-cli pool start`,
    /// its guests 1280x800). A task whose network is not the pool's, or a
    /// claim the pool refuses, gets a guest booted as without `--pool`
    /// (said on stderr; results.json's `guest` tells which).
    #[arg(long)]
    pub pool: bool,
    #[command(flatten)]
    pub guest: crate::guest::options::GuestArgs,
}

/// `host-cli batch`.
pub async fn batch(a: BatchArgs) -> anyhow::Result<ExitCode> {
    let options = sandtop_batch::run::BatchOptions {
        tasks: a.tasks,
        parallel: a.parallel,
        out: a.out,
        provider: a.provider,
        model: a.model,
        approve_policy: a.approve_policy,
        max_seconds: a.max_seconds,
        pool: a.pool,
        guest: a.guest,
    };
    Ok(ExitCode::from(sandtop_batch::run::run(options).await?))
}
