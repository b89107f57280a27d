//! `host-cli exercise` (and `host-cli run` without a key): its options,
//! then `sandtop_exercise::command::run` (the offline exercise with the
//! scripted model against a real guest, checked against the demo app's
//! own records).

use super::*;

/// Options of `host-cli exercise`.
#[derive(Debug, Args)]
pub struct ExerciseArgs {
    /// Whose API shapes the scripted model speaks: `openai` (Responses
    /// items, as the loop does) or `anthropic` (every request translated
    /// into the Messages body `--provider anthropic` sends and checked,
    /// every answer a `Message` of computer toolset members read back as
    /// the API's replies are).
    #[arg(long, value_enum, default_value_t = Provider::Openai)]
    pub provider: Provider,
    /// With --provider anthropic: the script's computer calls speak the
    /// older `computer_20251124` tool instead of the computer toolset.
    #[arg(long = "computer-20251124", conflicts_with = "browser")]
    pub computer_20251124: bool,
    /// Use this running session (otherwise a guest is booted and removed).
    #[arg(long)]
    pub session: Option<String>,
    /// Take a ready guest from the warm pool (`host-cli pool start`)
    /// instead of booting one; it is removed at the end like a booted one.
    #[arg(long, conflicts_with_all = ["session", "backend", "image", "memory", "cpus", "pids", "ready_timeout"])]
    pub pool: bool,
    /// Keep the guest this exercise boots.
    #[arg(long)]
    pub keep: bool,
    /// Approve the script's safety check without a terminal.
    #[arg(long)]
    pub approve_scripted_checks: bool,
    /// The run folder.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Decide approvals from this JSON policy file.
    #[arg(long)]
    pub approve_policy: Option<PathBuf>,
    /// The browser exercise: the demo form filled and submitted through
    /// the browser tools (read_page refs, type, click), with the URL
    /// policy limited to the demo app's origin, then a sign-in to the demo
    /// app's account page through request_sign_in.
    #[arg(long)]
    pub browser: bool,
    /// With --browser: the sign-in's values, from this credentials file's
    /// entry for http://127.0.0.1:8080 (`email`, `password`, `code`; mode
    /// 0600); the exercise provisions that account in the guest. Without
    /// it, a random account and a private temporary file are used.
    #[arg(long, value_name = "FILE", requires = "browser")]
    pub credentials: Option<PathBuf>,
    /// Where the guest this exercise boots runs.
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    #[command(flatten)]
    pub guest: crate::guest::options::GuestArgs,
    /// No progress lines on stderr (one per step by default).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Also print every event of the run on stdout, one JSON object per
    /// line (`event` says which); the checks and the summary follow.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub events: Option<EventsFormat>,
}

/// `host-cli exercise`.
pub async fn exercise(a: ExerciseArgs) -> anyhow::Result<ExitCode> {
    let options = sandtop_exercise::command::ExerciseOptions {
        provider: a.provider,
        computer_20251124: a.computer_20251124,
        session: a.session,
        keep: a.keep,
        pool: a.pool,
        approve_scripted_checks: a.approve_scripted_checks,
        record: a.record,
        approve_policy: a.approve_policy,
        browser: a.browser,
        credentials: a.credentials,
        backend: a.backend,
        guest: a.guest,
        quiet: a.quiet,
        events: a.events,
    };
    Ok(ExitCode::from(
        sandtop_exercise::command::run(options).await?,
    ))
}
