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
    /// Use this running session (otherwise a guest is booted and removed).
    #[arg(long)]
    pub session: Option<String>,
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

/// The exercise's scripted model and loop options: the computer
/// exercise (the form, then the note; `form_only` stops after the form),
/// or the browser exercise (the form through the browser tools, with the
/// URL policy limited to the demo app's origin).
pub fn exercise_setup(
    browser: bool,
    form_only: bool,
    pace: Pace,
) -> anyhow::Result<(ScriptedModel, RunOptions)> {
    let model = if browser {
        ScriptedModel::new(Box::new(exercise::browser::BrowserScript::new(!form_only)))
    } else {
        ScriptedModel::new(Box::new(ExerciseScript::new(form_only).at_pace(pace)))
    };
    let toolset = if browser {
        let policy =
            UrlPolicy::parse(exercise::browser::FORM_ORIGIN).map_err(anyhow::Error::msg)?;
        Some(Toolset::new(None, None, Some(policy), &[]).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let task = if browser {
        format!(
            "Fill in and submit the contact form of the demo app ({}) through the browser tools.",
            exercise::browser::FORM_URL
        )
    } else if form_only {
        "Fill in and submit the contact form in the browser.".into()
    } else {
        "Fill in and submit the contact form in the browser, then write a note in the text editor and save it.".into()
    };
    let opts = RunOptions {
        task,
        model: "sandtop-scripted-exercise".into(),
        shape: ToolShape::Computer,
        computer: !browser,
        browser: toolset,
        instructions: None,
        // Room for slow launches: a slow waiting turn is about a second, and
        // the script waits up to a minute per window (exercise.rs), four
        // under emulation.
        max_steps: match pace {
            Pace::Native => 150,
            Pace::Emulated => 500,
        },
        max_duration: Some(match pace {
            Pace::Native => Duration::from_secs(300),
            Pace::Emulated => Duration::from_secs(900),
        }),
        // As `run` with a model: nothing stored, the conversation resent.
        store: false,
        stream: false,
        screenshot: ScreenshotOptions::default(),
        confirm_actions: false,
        ask_user: false,
        // The browser exercise signs in to the demo app (not the bench).
        sign_in: browser && !form_only,
        initial_screenshot: true,
        context: ContextBudget::default(),
        // The scripted model is not the API: nothing to compact.
        compaction: Compaction::Off,
        // The script's actions must all work: a failure fails the exercise.
        on_action_error: OnActionError::Stop,
    };
    Ok((model, opts))
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
        a.keep,
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
        Provider::Anthropic => Box::new(ScriptedMessages::new(scripted)),
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
