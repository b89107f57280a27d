//! `host-cli exercise` (and `host-cli run` without a key) once its
//! options are read: the offline exercise with the scripted model against
//! a real guest (booted, claimed from the pool, or `--session`), checked
//! against the demo app's own records.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandtop_agent::launch::{Attended, Provider, create_run, exit_status, operator};
use sandtop_agent::model::Model;
use sandtop_agent::model::anthropic::ComputerTool;
use sandtop_agent::model::anthropic::scripted::ScriptedMessages;
use sandtop_agent::progress::{EventsFormat, Progress};
use sandtop_agent::runner::Runner;
use sandtop_agent::sign_in::rules::Credentials;
use sandtop_guest::docker::DockerBackend;
use sandtop_guest::options::GuestArgs;
use sandtop_guest::session::{self, BackendKind, SessionDir, SessionRecord, Store};
use sandtop_hostkit::term;
use sandtop_pool::acquire::session_for;
use sandtop_protocol::Size;
use sandtop_runfolder::trajectory::{self as record, Entry, Started};

use crate as exercise;
use crate::{Pace, exercise_setup};

/// The screen the exercise's script is written for.
pub const SCREEN: Size = Size::new(1280, 800);

/// What `host-cli exercise` was asked (its `--help` says more).
#[derive(Debug)]
pub struct ExerciseOptions {
    /// Whose API shapes the scripted model speaks.
    pub provider: Provider,
    /// With Anthropic's shapes: the older `computer_20251124` tool.
    pub computer_20251124: bool,
    /// This running session instead of a guest of its own.
    pub session: Option<String>,
    /// Keep the guest this exercise boots.
    pub keep: bool,
    /// A ready guest of the warm pool instead of a boot.
    pub pool: bool,
    /// Approve the script's safety check without a terminal.
    pub approve_scripted_checks: bool,
    /// The run folder.
    pub record: Option<PathBuf>,
    /// The approvals' policy file.
    pub approve_policy: Option<PathBuf>,
    /// The browser exercise (and its sign-in).
    pub browser: bool,
    /// The sign-in's values (with `browser`).
    pub credentials: Option<PathBuf>,
    /// Where a guest this exercise boots runs, and how it boots.
    pub backend: BackendKind,
    pub guest: GuestArgs,
    /// No progress lines on stderr.
    pub quiet: bool,
    /// Every event of the run on stdout too.
    pub events: Option<EventsFormat>,
}

/// Whether the exercise can run on this backend.
fn check_backend(backend: BackendKind, browser: bool) -> anyhow::Result<()> {
    match backend {
        BackendKind::Docker => Ok(()),
        // The VM boots the same image; the browser exercise provisions its
        // account through `docker exec`, which a VM does not have.
        BackendKind::Qemu if !browser => Ok(()),
        BackendKind::Qemu => bail!(
            "the browser exercise (--browser) needs a Docker guest: it provisions the demo \
             account through docker exec, and a VM guest has no exec path"
        ),
        BackendKind::Local => bail!(
            "the exercise needs a guest built from the image (--backend docker or qemu): its \
             browser, editor and demo app live there"
        ),
    }
}

/// Runs the exercise; its exit status (0 the run finished and every check
/// passed, 1 a check failed, else the run's own: `launch::exit_status`).
pub async fn run(a: ExerciseOptions) -> anyhow::Result<u8> {
    if a.computer_20251124 && a.provider != Provider::Anthropic {
        bail!("--computer-20251124 is an Anthropic tool: give --provider anthropic");
    }
    // A credentials file others could read is refused before a guest boots.
    if let Some(p) = &a.credentials {
        exercise::sign_in::Account::from_credentials(&Credentials::open(p)?)?;
    }
    // A guest this exercise cannot use is refused before it boots (for a
    // --session, by exercise_on).
    if a.session.is_none() {
        check_backend(a.backend, a.browser)?;
    }
    let store = Store::open()?;
    let t0 = std::time::Instant::now();
    let (dir, rec, booted) = session_for(
        &store,
        a.session.as_deref(),
        a.backend,
        (SCREEN, &a.guest),
        (a.keep, a.pool),
        sandtop_egress::service::EgressConfig::none(),
    )
    .await?;
    let result = exercise_on(&store, &dir, &rec, &a).await;
    if let Some(b) = booted {
        b.remove().await;
    }
    let code = result?;
    eprintln!(
        "host-cli: exercise took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(code)
}

async fn exercise_on(
    store: &Store,
    dir: &SessionDir,
    rec: &SessionRecord,
    a: &ExerciseOptions,
) -> anyhow::Result<u8> {
    check_backend(rec.backend(), a.browser)?;
    let pace = match rec.qemu().map(|q| q.accel) {
        Some(session::Accel::Tcg) => Pace::Emulated,
        _ => Pace::Native,
    };
    let _lock = session::lock_session(dir)?;
    let mut channel = sandtop_guest::open_channel(dir, rec).await?;
    let mut recorder = create_run(store.root(), a.record.clone(), &rec.name)?;
    let run = recorder.dir().to_path_buf();
    let (scripted, opts) = exercise_setup(a.browser, false, pace)?;
    let mut model: Box<dyn Model> = match a.provider {
        Provider::Openai => Box::new(scripted),
        Provider::Anthropic => Box::new(ScriptedMessages::new(scripted).with_computer_tool(
            if a.computer_20251124 {
                ComputerTool::Computer20251124
            } else {
                ComputerTool::Toolset
            },
        )),
    };
    if pace == Pace::Emulated {
        eprintln!(
            "host-cli: the guest runs under software emulation: the exercise gives a window at \
             least 4 min before it gives up, within a run budget of {} steps in {} s",
            opts.max_steps,
            opts.max_duration.map_or(0, |d| d.as_secs())
        );
    }
    recorder.write(&Entry::RunStarted(Box::new(Started {
        task: opts.task.clone(),
        session: rec.name.clone(),
        model: Some(opts.model.clone()),
        tool: Some(opts.shape),
        exercise: Some(true),
        model_api: Some(model.describe()),
        provider: Some(a.provider.as_str().into()),
        computer_tool: a
            .computer_20251124
            .then(|| sandtop_agent::model::anthropic::COMPUTER_20251124.to_string()),
        ..Started::default()
    })))?;
    // The sign-in's account: provisioned in the guest (through exec's
    // standard input), and the credentials file the operator answers from.
    let (account, temp_credentials, docker) = if a.browser {
        let docker = DockerBackend::connect().await?;
        let container = rec
            .docker()
            .map(|d| d.container_id.clone())
            .context("the session has no container")?;
        let (account, temp) = match &a.credentials {
            Some(p) => (
                exercise::sign_in::Account::from_credentials(&Credentials::open(p)?)?,
                None,
            ),
            None => {
                let account = exercise::sign_in::Account::generate()?;
                let temp = exercise::sign_in::TempCredentials::write(&account)?;
                (account, Some(temp))
            }
        };
        let r = docker
            .exec(
                &container,
                &[
                    "dd",
                    &format!("of={}", exercise::sign_in::ACCOUNTS_PATH),
                    "status=none",
                ],
                Some(&account.accounts_json()),
                Duration::from_secs(10),
            )
            .await?;
        if r.exit_code != 0 {
            bail!(
                "provisioning the demo account in the guest failed (exit {})",
                r.exit_code
            );
        }
        (Some(account), temp, Some((docker, container)))
    } else {
        (None, None, None)
    };
    let credentials_path = a
        .credentials
        .clone()
        .or_else(|| temp_credentials.as_ref().map(|t| t.path.clone()));
    let mut op = operator(
        a.approve_policy.as_ref(),
        a.approve_scripted_checks,
        credentials_path.as_ref(),
    )?;
    let attended = Attended::begin(&mut op, (&dir.path, &rec.name), &run, &opts).await;
    if Attended::unanswered(&op) && !a.approve_scripted_checks {
        eprintln!(
            "host-cli: no terminal or view to approve the exercise's safety check on; pass --approve-scripted-checks"
        );
    }
    let interrupt = attended.interrupt();
    let runner = Runner::new(
        model.as_mut(),
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        interrupt,
    )
    .with_progress(Progress::for_cli(a.quiet, a.events));
    let outcome = attended.run(runner, None).await?;
    if !outcome.ending.success() {
        // The run's own exit code: 3 when a check was denied, 130 on
        // Ctrl-C, 4 for a budget, as `host-cli run` with a model.
        return Ok(exit_status(outcome.ending));
    }
    drop(temp_credentials);
    // Check the real records inside the guest, read by its daemon (the
    // same path for a container and a VM).
    let mut read = async |path: &'static str| {
        channel
            .read_file(path)
            .await
            .with_context(|| format!("reading {path} in the guest"))
    };
    let store_bytes = read(exercise::STORE_PATH).await?.unwrap_or_default();
    let checks = if let (Some(account), Some((docker, container))) = (&account, &docker) {
        let sign_ins = read(exercise::sign_in::SIGN_INS_PATH)
            .await?
            .unwrap_or_default();
        // Where a value could have leaked to: every file of the run and
        // session folders (the egress journal among them), the guest's log.
        let mut places = exercise::sign_in::files_under(&run);
        places.extend(exercise::sign_in::files_under(&dir.path));
        places.push((
            "the container's log".into(),
            docker.all_logs(container).await?.into_bytes(),
        ));
        vec![
            exercise::check_submission(&store_bytes),
            exercise::browser::check_refusals(&record::read_trajectory(&run)?),
            exercise::sign_in::check_signed_in(&sign_ins, account.email.expose()),
            exercise::sign_in::check_absent(&account.secrets(), &places),
        ]
    } else {
        let note = read(exercise::NOTE_PATH).await?;
        vec![
            exercise::check_submission(&store_bytes),
            exercise::check_note(note.as_deref()),
        ]
    };
    for c in &checks {
        // The detail quotes what the guest's apps stored.
        sandtop_hostkit::out!(
            "{} {}: {}",
            if c.ok { "ok  " } else { "FAIL" },
            c.what,
            term::safe_line(&c.detail)
        );
    }
    recorder.write(&Entry::ExerciseChecks {
        checks: checks.clone(),
    })?;
    recorder.sync()?;
    Ok(if checks.iter().all(|c| c.ok) { 0 } else { 1 })
}
