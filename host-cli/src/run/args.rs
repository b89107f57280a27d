//! The options of `host-cli run`, and the words they take.

use super::*;

/// Options of `host-cli run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task for the model. Without OPENAI_API_KEY (ANTHROPIC_API_KEY
    /// with --provider anthropic) the offline exercise runs instead (and
    /// no task is needed).
    pub task: Option<String>,
    /// Run against this session (otherwise a guest is booted and removed
    /// at the end).
    #[arg(long)]
    pub session: Option<String>,
    /// Keep the guest this run boots.
    #[arg(long)]
    pub keep: bool,
    /// Take a ready guest from the warm pool (`host-cli pool start`)
    /// instead of booting one; it is removed at the end like a booted one.
    #[arg(long, conflicts_with_all = ["session", "backend", "image", "memory", "cpus", "pids", "ready_timeout"])]
    pub pool: bool,
    /// The model (default: gpt-5.5, or computer-use-preview with that
    /// tool; with --provider anthropic, claude-opus-5-5).
    #[arg(long)]
    pub model: Option<String>,
    /// The model's API: `openai` (the Responses API, OPENAI_API_KEY,
    /// OPENAI_BASE_URL) or `anthropic` (the Messages API with the
    /// computer toolset, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL; the same
    /// checks, approvals, budgets and record).
    #[arg(long, value_enum, default_value_t = Provider::Openai)]
    pub provider: Provider,
    /// The tools the model gets: the computer tool (`computer`, or the
    /// older `computer-use-preview` shape), the browser tools (`browser`),
    /// or both (`both`: the computer tool and the browser tools). Default:
    /// `computer`, or `browser` with --browser.
    #[arg(long = "tool", value_enum)]
    pub tool: Option<ToolChoice>,
    /// Offer the browser tools (`browser_<member>`, over the guest's
    /// Firefox): refs instead of pixels. Alone it means `--tool browser`:
    /// no screenshot goes to the model unless it asks for one, so a step
    /// costs far fewer input tokens (BENCHMARKS.md, "The form task");
    /// give `--tool both` when the task also needs the desktop.
    #[arg(long)]
    pub browser: bool,
    /// Offer only these browser members (comma-separated; an empty value
    /// offers none).
    #[arg(long, value_name = "MEMBERS", conflicts_with = "browser_add")]
    pub browser_members: Option<String>,
    /// Offer these opt-in browser members besides the defaults
    /// (comma-separated).
    #[arg(long, value_name = "MEMBERS")]
    pub browser_add: Option<String>,
    /// The origins browser_navigate and browser_new_tab may open
    /// (comma-separated `scheme://host[:port]`, compared exactly). Needed
    /// whenever those members are offered; the network policy still
    /// applies.
    #[arg(long, value_name = "ORIGINS")]
    pub url_policy: Option<String>,
    /// Ask before these browser reads too (comma-separated read members:
    /// read_page, get_page_text, find, screenshot, zoom, list_tabs,
    /// wait_for).
    #[arg(long, value_name = "MEMBERS")]
    pub confirm_reads: Option<String>,
    /// A file the model may upload once (`upload:ID=PATH`: a regular file
    /// of yours, at most 512 KiB) or a directory it may save one download
    /// into (`download:ID=DIR`: a directory of yours that group and others
    /// cannot write; never overwritten). The model names it by ID through
    /// browser_upload_file / browser_download_file (add them with
    /// --browser-add); every use is confirmed. Repeatable.
    #[arg(long = "grant", value_name = "KIND:ID=PATH")]
    pub grants: Vec<String>,
    /// Store responses server-side (`store: true`) and continue each turn
    /// with previous_response_id. Without it (the default) nothing is
    /// stored: the conversation is resent within the context budget.
    #[arg(long)]
    pub store: bool,
    /// (The default; accepted for compatibility.)
    #[arg(long, hide = true, conflicts_with = "store")]
    pub no_store: bool,
    /// Stream responses (server-sent events).
    #[arg(long)]
    pub stream: bool,
    /// Most requests to the model (the last one cannot start effects),
    /// 1 to 10000.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_steps: u32,
    /// Wall-clock limit of the run, e.g. 30m or 90s (at most 24h).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30m",
        value_parser = crate::units::duration_between(Duration::from_secs(1), Duration::from_secs(24 * 3600))
    )]
    pub max_time: Duration,
    /// (The old spelling of --max-time, in seconds; kept for one release.)
    #[arg(long, hide = true, conflicts_with = "max_time", value_parser = clap::value_parser!(u64).range(1..=24 * 3600))]
    pub max_seconds: Option<u64>,
    /// Screenshots for the model are scaled to fit this size (default: the
    /// guest's screen, unscaled).
    #[arg(long, value_parser = Size::parse)]
    pub size: Option<Size>,
    /// Ask before each action, and before each final screenshot.
    #[arg(long)]
    pub confirm_actions: bool,
    /// What a failed action does: `stop` the run (ending `action_failed`,
    /// exit status 5), or `report` it to the model, skip the later calls
    /// of that response and go on (failures are counted in the summary).
    #[arg(long, value_enum, default_value_t = OnActionError::Stop)]
    pub on_action_error: OnActionError,
    /// Decide approvals from this JSON policy file when no one is asked.
    #[arg(long)]
    pub approve_policy: Option<PathBuf>,
    /// Approve the safety checks the offline scripted model raises (refused
    /// with a real model).
    #[arg(long)]
    pub approve_scripted_checks: bool,
    /// The run folder (default: the state directory's runs/).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Continue the run recorded in this folder.
    #[arg(long, conflicts_with = "task")]
    pub resume: Option<PathBuf>,
    /// With --resume: what became of an action of unknown outcome, as you
    /// checked on the screen.
    #[arg(long, value_enum, requires = "resume")]
    pub reconcile: Option<Reconcile>,
    /// Most screenshots resent per request (without --store), 1 to 100.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100).map(usize::from))]
    pub context_images: usize,
    /// Most input bytes per request (without --store), 64 KiB to 256 MiB.
    #[arg(long, default_value_t = 16 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(64 * 1024..=256 * 1024 * 1024).map(|v| v as usize))]
    pub context_bytes: usize,
    /// Responses compaction: `auto` asks the API to compact the context
    /// (`context_management`) and, as the seed says, then leaves the
    /// local context budget (--context-images, --context-bytes) off: the
    /// history goes out whole until the API compacts it; a model that
    /// refuses compaction gets the local budget. `off`: the local budget
    /// alone.
    #[arg(long, value_enum, default_value_t = Compaction::Auto)]
    pub compaction: Compaction,
    /// Do not offer the model the ask_user tool (the official SDK's runner
    /// has none).
    #[arg(long)]
    pub no_ask_user: bool,
    /// Do not offer the model the request_sign_in tool (offered with the
    /// browser tools: values go only into page inputs the browser driver
    /// binds, never typed at the desktop's keyboard focus).
    #[arg(long, conflicts_with = "credentials")]
    pub no_sign_in: bool,
    /// Sign-in values for the request_sign_in tool: a JSON file keyed by
    /// exact origin (`{"https://example.com": {"email": "..", "password":
    /// ".."}}`), mode 0600 and owned by you. Without an entry for the
    /// origin, the terminal is asked (echo off); with neither, declined.
    /// Needs the browser tools (--tool browser or both); the terminal and
    /// the view are told which origin got which fields.
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Send the task without a screenshot of the desktop: the model asks
    /// for one with its first action, as with the official SDK's runner.
    #[arg(long)]
    pub no_initial_screenshot: bool,
    /// With --provider anthropic: offer the computer as the older
    /// `computer_20251124` tool (one tool named `computer` whose input
    /// names the action; its display size is the screenshots') instead of
    /// the computer toolset, for models that still use it.
    #[arg(long = "computer-20251124", conflicts_with = "no_initial_screenshot")]
    pub computer_20251124: bool,
    /// Extra instructions for the model.
    #[arg(long)]
    pub instructions: Option<String>,
    /// Screen size of a guest this run boots, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", alias = "display", default_value = "1280x800", value_parser = Size::parse)]
    pub screen: Size,
    /// Backend of a guest this run boots.
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    #[command(flatten)]
    pub guest: crate::guest::options::GuestArgs,
    /// No progress lines on stderr (one per step by default).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Also print every event of the run on stdout, one JSON object per
    /// line (`event` says which); the summary is the last line.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub events: Option<EventsFormat>,
    #[command(flatten)]
    pub net: crate::egress::service::NetworkArgs,
    /// The options given on the command line or by their environment
    /// variable (not left at their defaults), as `cli::parse` found them:
    /// `run` without a key refuses those the offline exercise would not
    /// use instead of dropping them.
    #[arg(skip)]
    pub given: Vec<Given>,
}

/// An option given on the command line or by its environment variable,
/// rather than left at its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// clap's id (the field's name).
    pub id: String,
    /// As the user spells it: `--max-steps`, or `the task` for the
    /// positional argument.
    pub shown: String,
}

/// The tools a run offers (`--tool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The computer tool, GA shape (batched actions).
    Computer,
    /// The computer tool, `computer_use_preview` shape (also spelt as the
    /// API does, `computer_use_preview`).
    #[value(alias = "computer_use_preview")]
    ComputerUsePreview,
    /// The browser tools alone.
    Browser,
    /// The computer tool (GA shape) and the browser tools.
    Both,
}
