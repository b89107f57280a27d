//! `host-cli run` with a model once its options are checked: the guest
//! (the session named or resumed, a pool's claim, or a boot), the run
//! folder (new, or the resumed run's with its unknown outcome reconciled),
//! the model, the operator, the egress proxy's questions, the loop, and
//! what becomes of the guest after (removed; kept for an unknown outcome;
//! discarded for a script in doubt).

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use sandtop_egress::policy::NetworkMode;
use sandtop_egress::service::EgressConfig;
use sandtop_guest::options::GuestArgs;
use sandtop_guest::session::{BackendKind, SessionDir, SessionRecord, Store, lock_session};
use sandtop_hostkit::secret::Secret;
use sandtop_hostkit::term;
use sandtop_pool::acquire::{Booted, session_for};
use sandtop_protocol::Size;
use sandtop_runfolder::items as wire;
use sandtop_runfolder::trajectory::{self as record, Entry, LedgerState, Recorder, Started};
use serde_json::json;

use super::{
    Attended, Provider, Reconcile, create_run, exit_status, is_function_call, operator,
    resume_hint, script_in_doubt,
};
use crate::browser::toolset as browser;
use crate::model::anthropic::{AnthropicModel, COMPUTER_20251124, ComputerTool};
use crate::model::{Model, OpenAiModel, RetryPolicy};
use crate::progress::{EventsFormat, Progress};
use crate::runner::{Resume, RunOptions, Runner};

/// What `host-cli run` asks once its options are checked.
#[derive(Debug)]
pub struct Task {
    /// The loop's options (`host-cli run`'s `run_options`).
    pub options: RunOptions,
    /// The model's API, and its key.
    pub provider: Provider,
    pub key: Secret,
    /// With Anthropic's API: the computer as the older `computer_20251124`
    /// tool instead of the toolset.
    pub computer_20251124: bool,
    /// The session to run on (else the resumed run's, else a guest of
    /// this run's own).
    pub session: Option<String>,
    /// A guest this run boots: its backend, screen and boot options, its
    /// network; whether it is kept, or claimed from the pool.
    pub backend: BackendKind,
    pub screen: Size,
    pub guest: GuestArgs,
    pub network: EgressConfig,
    pub keep: bool,
    pub pool: bool,
    /// The run folder to continue, and what became of its action of
    /// unknown outcome.
    pub resume: Option<PathBuf>,
    pub reconcile: Option<Reconcile>,
    /// The new run folder (default: the state directory's `runs/`).
    pub record: Option<PathBuf>,
    /// The approvals' policy file, the sign-in values' file.
    pub approve_policy: Option<PathBuf>,
    pub credentials: Option<PathBuf>,
    /// No progress lines; every event on stdout too.
    pub quiet: bool,
    pub events: Option<EventsFormat>,
}

/// The trajectory's `computer_tool` for this run.
fn computer_tool_name(t: &Task) -> Option<&'static str> {
    t.computer_20251124.then_some(COMPUTER_20251124)
}

/// Runs the task; its exit status ([`exit_status`]).
pub async fn run(t: Task) -> anyhow::Result<u8> {
    let store = Store::open()?;
    if t.session.is_some() && t.network.mode != NetworkMode::None {
        bail!(
            "--network applies to a guest this run boots; session {} keeps the policy it was started with",
            t.session.as_deref().unwrap_or("")
        );
    }
    let resume_point = t.resume.as_deref().map(record::resume_point).transpose()?;
    let session_name = match (&t.session, &resume_point) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(p)) => Some(p.started.session.clone()),
        _ => None,
    };
    if resume_point.is_none() && t.options.task.trim().is_empty() {
        bail!(
            "give the task to run (host-cli run \"...\"), or unset {} for the offline exercise",
            t.provider.key_var()
        );
    }
    let (dir, rec, mut booted) = session_for(
        &store,
        session_name.as_deref(),
        t.backend,
        (t.screen, &t.guest),
        (t.keep, t.pool),
        t.network.clone(),
    )
    .await?;
    // A resumed run inherits the guest that the run it continues booted
    // (and kept only because an outcome was unknown).
    if booted.is_none()
        && let Some(p) = &resume_point
        && p.started.booted == Some(true)
    {
        booted = Some(Booted::adopt(
            &store,
            &dir,
            &rec,
            t.keep || p.started.keep == Some(true),
        ));
    }
    let mut run_folder = None;
    let result = run_on(
        &store,
        &dir,
        &rec,
        &t,
        resume_point,
        booted.as_ref().map(|b| b.keeps()),
        &mut run_folder,
    )
    .await;
    // An action whose outcome is unknown: the guest is the only place to
    // find out what happened, so it stays, and the operator is told how
    // to resume.
    let unsettled = run_folder.as_deref().and_then(|run| {
        record::resume_point(run)
            .ok()
            .and_then(|p| p.unsettled)
            .map(|u| (run.to_path_buf(), u))
    });
    // A script whose outcome is unknown (its wait timed out; it may still
    // be running in the page) leaves a guest nobody can trust: discarded,
    // even with --keep (seed: discard the session if in doubt; contract
    // rule 41a). A run with run_script always booted its guest.
    let script = unsettled
        .as_ref()
        .is_some_and(|(run, (_, call))| script_in_doubt(run, call));
    if script {
        if let Some((_, (step, call))) = &unsettled {
            eprintln!(
                "host-cli: the outcome of script call {} (step {step}) is unknown (it may still be \
                 running in the page): removing session {}, which no later run may trust",
                term::safe_line(call),
                term::safe_line(&rec.name)
            );
        }
        if let Some(b) = booted {
            b.discard().await;
        }
        return result;
    }
    if let Some((run, (step, call))) = &unsettled {
        eprintln!(
            "{}",
            resume_hint(&rec.name, run, *step, call, booted.is_some())
        );
    }
    if let Some(b) = booted
        && unsettled.is_none()
    {
        b.remove().await;
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn run_on(
    store: &Store,
    dir: &SessionDir,
    rec: &SessionRecord,
    t: &Task,
    resume_point: Option<record::ResumePoint>,
    // Some(keep) when the run booted its guest.
    booted: Option<bool>,
    run_folder: &mut Option<PathBuf>,
) -> anyhow::Result<u8> {
    // Known from the start when resuming, so that a refused resume (no
    // --reconcile) still keeps the guest.
    *run_folder = t.resume.clone();
    let _lock = lock_session(dir)?;
    let mut channel = sandtop_guest::open_channel(dir, rec).await?;
    let opts = t.options.clone();
    let (shape, model_name) = (opts.shape, opts.model.clone());
    let key = t.key.clone();
    let mut model: Box<dyn Model> = match t.provider {
        Provider::Openai => Box::new(OpenAiModel::new(key, opts.stream, RetryPolicy::default())?),
        Provider::Anthropic => Box::new(
            AnthropicModel::new(key, RetryPolicy::default())?.with_computer_tool(
                if t.computer_20251124 {
                    ComputerTool::Computer20251124
                } else {
                    ComputerTool::Toolset
                },
            ),
        ),
    };
    let (mut recorder, resume) = match (&t.resume, resume_point) {
        (Some(run), Some(p)) => {
            if p.finished {
                bail!(
                    "the run in {} already finished; nothing to resume",
                    run.display()
                );
            }
            let recorded = p.started.provider.as_deref().unwrap_or("openai");
            if recorded != t.provider.as_str() {
                bail!(
                    "the run in {} talked to the {recorded} API: resume it with --provider {recorded}",
                    run.display()
                );
            }
            if p.started.computer_tool.as_deref() != computer_tool_name(t) {
                bail!(
                    "the run in {} offered the computer {}: resume it {}",
                    run.display(),
                    if t.computer_20251124 {
                        "as the toolset"
                    } else {
                        "as computer_20251124"
                    },
                    if t.computer_20251124 {
                        "without --computer-20251124"
                    } else {
                        "with --computer-20251124"
                    },
                );
            }
            let mut rec_ = Recorder::open(run)?;
            let mut next_input = p.pending_outputs.clone();
            if let Some((step, call)) = &p.unsettled {
                let Some(answer) = t.reconcile else {
                    bail!(
                        "the actions of call {call} (step {step}) were sent but their outcome is unknown. \
                         Look at the guest's screen, then resume with --reconcile done or --reconcile not-done"
                    );
                };
                let state = if answer == Reconcile::Done {
                    LedgerState::Done
                } else {
                    LedgerState::Failed
                };
                rec_.ledger(
                    *step,
                    call,
                    state,
                    json!({"reconciled_by_operator": answer.as_str()}),
                )?;
                if is_function_call(&p.conversation, call) {
                    // A browser call: answered with the tabs as they are now.
                    let state = channel
                        .browser_state()
                        .await
                        .context("reading the browser's state to answer the reconciled call")?;
                    let state = browser::project_state(&state).map_err(anyhow::Error::msg)?;
                    let result = if answer == Reconcile::Done {
                        Ok(serde_json::Value::Null)
                    } else {
                        Err("Not executed: the operator found that it did not take effect.".into())
                    };
                    next_input.push(browser::output(call, Some(state), result, None));
                } else {
                    // Answer the call with the screen as it is now.
                    let shot = channel.screenshot(&opts.screenshot).await?.screenshot;
                    next_input.push(wire::computer_call_output(call, &shot.data_url(), &[]));
                }
                let note = if answer == Reconcile::Done {
                    format!(
                        "The actions of call {call} ran (confirmed by the operator after an interruption)."
                    )
                } else {
                    format!(
                        "The actions of call {call} did not run (confirmed by the operator after an interruption)."
                    )
                };
                next_input.push(wire::user_message(&note, None));
            }
            rec_.write(&Entry::RunResumed {
                steps_done: p.steps_done,
            })?;
            let resume = Resume {
                previous_response_id: p.last_response_id.clone(),
                steps_done: p.steps_done,
                next_input,
                conversation: p.conversation.clone(),
            };
            (rec_, Some(resume))
        }
        _ => {
            let mut r = create_run(store.root(), t.record.clone(), &rec.name)?;
            r.write(&Entry::RunStarted(Box::new(Started {
                task: opts.task.clone(),
                session: rec.name.clone(),
                model: Some(model_name),
                tool: Some(shape),
                store: Some(opts.store),
                stream: Some(opts.stream),
                max_steps: Some(opts.max_steps),
                screenshot: Some(opts.screenshot),
                confirm_actions: Some(opts.confirm_actions),
                model_api: Some(model.describe()),
                provider: Some(t.provider.as_str().into()),
                computer_tool: computer_tool_name(t).map(str::to_string),
                booted: booted.map(|_| true),
                keep: booted,
                ..Started::default()
            })))?;
            (r, None)
        }
    };
    let mut op = operator(t.approve_policy.as_ref(), false, t.credentials.as_ref())?;
    let dir_path = recorder.dir().to_path_buf();
    *run_folder = Some(dir_path.clone());
    let attended = Attended::begin(&mut op, (&dir.path, &rec.name), &dir_path, &opts).await;
    if Attended::unanswered(&op) {
        eprintln!(
            "host-cli: no terminal, no --approve-policy and no view: any safety check will be denied"
        );
    }
    // The session's egress proxy asks about new origins through this run,
    // and its decisions go into this run's trajectory.
    let egress = match rec.egress_pid {
        Some(_) => {
            let paths = sandtop_egress::service::Paths::new(&dir.path, &dir.guest_path());
            sandtop_egress::service::attach(
                &paths.control,
                Box::new(OriginOperator {
                    terminal: op.terminal.clone(),
                    view: op.view.clone(),
                    journal: Recorder::open(&dir_path)?,
                }),
                // A cancelled origin question refuses that request only
                // (docs/security.md N9): the run goes on.
                Box::new(|| {}),
            )
            .await
        }
        None => None,
    };
    let interrupt = attended.interrupt();
    let runner = Runner::new(
        model.as_mut(),
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        interrupt,
    )
    .with_progress(Progress::for_cli(t.quiet, t.events));
    let outcome = attended.run(runner, resume).await;
    if let Some(task) = egress {
        task.abort();
    }
    Ok(exit_status(outcome?.ending))
}

/// Answers the egress proxy's origin questions on the run's terminal and
/// records its decisions in the run's trajectory.
struct OriginOperator {
    terminal: Option<crate::approve::SharedTerminal>,
    view: Option<sandtop_control::served::Served>,
    journal: Recorder,
}

impl sandtop_egress::service::Attached for OriginOperator {
    fn answer(&mut self, origin: &str) -> sandtop_egress::proxy::Answer {
        let answer = crate::approve::ask_origin(self.terminal.as_ref(), self.view.as_ref(), origin);
        let _ = self.journal.write(&Entry::OriginQuestion {
            origin: origin.to_string(),
            answer: serde_json::to_value(answer)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        });
        answer
    }

    fn journal(&mut self, entry: &serde_json::Value) {
        if let Some(v) = &self.view {
            v.network(entry.clone());
        }
        let _ = self.journal.write(&Entry::Egress {
            entry: entry.clone(),
        });
    }
}
