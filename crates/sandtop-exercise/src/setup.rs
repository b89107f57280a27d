//! The exercise as the loop runs it: its scripted model and the loop's
//! options, shared by `host-cli exercise` and `host-cli bench`.

use std::time::Duration;

use sandtop_agent::browser::toolset::{Toolset, UrlPolicy};
use sandtop_agent::model::scripted::ScriptedModel;
use sandtop_agent::runner::{Compaction, ContextBudget, OnActionError, RunOptions};
use sandtop_protocol::ScreenshotOptions;
use sandtop_runfolder::items::ToolShape;

use crate as exercise;
use crate::{ExerciseScript, Pace};

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
