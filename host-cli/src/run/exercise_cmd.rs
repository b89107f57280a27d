//! `host-cli exercise` (and `host-cli run` without a key): the offline
//! exercise with the scripted model against a real guest, checked
//! against the demo app's own records.

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

/// `host-cli exercise`.
pub async fn exercise(a: ExerciseArgs) -> anyhow::Result<ExitCode> {
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
        (EXERCISE_SCREEN, &a.guest),
        (a.keep, a.pool),
        crate::egress::service::EgressConfig::none(),
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

pub(super) async fn exercise_on(
    store: &Store,
    dir: &SessionDir,
    rec: &SessionRecord,
    a: &ExerciseArgs,
) -> anyhow::Result<ExitCode> {
    check_backend(rec.backend(), a.browser)?;
    let pace = match rec.qemu().map(|q| q.accel) {
        Some(crate::session::Accel::Tcg) => Pace::Emulated,
        _ => Pace::Native,
    };
    let _lock = lock_session(dir)?;
    let mut channel = guest::open_channel(dir, rec).await?;
    let mut recorder = create_run(store, a.record.clone(), &rec.name)?;
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
    let control = serve_control(dir, &rec.name, &run, &opts.task, opts.max_steps).await;
    op.view = control.as_ref().map(|c| c.0.clone());
    if op.terminal.is_none()
        && op.policy.is_none()
        && !a.approve_scripted_checks
        && op.view.as_ref().is_none_or(|v| v.viewers() == 0)
    {
        eprintln!(
            "host-cli: no terminal or view to approve the exercise's safety check on; pass --approve-scripted-checks"
        );
    }
    let interrupt = Interrupt::default();
    watch_ctrl_c(&interrupt);
    let mut runner = Runner::new(
        model.as_mut(),
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        interrupt,
    )
    .with_progress(Progress::for_cli(a.quiet, a.events));
    if let Some(c) = &control {
        runner = runner.with_control(c.0.clone());
    }
    let outcome = runner.run(None).await?;
    let mut progress = runner.into_progress();
    if let Some(c) = &control {
        c.0.finish(&ending_word(outcome.ending));
    }
    print_outcome(&outcome, &run, &mut progress);
    if !outcome.ending.success() {
        // The run's own exit code: 3 when a check was denied, 130 on
        // Ctrl-C, 4 for a budget, as `host-cli run` with a model.
        return Ok(exit_for(outcome.ending));
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
        crate::out!(
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
    Ok(if checks.iter().all(|c| c.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
