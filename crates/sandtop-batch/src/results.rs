//! A batch's results: one record per task, the totals, the exit status.

use serde::Serialize;

use sandtop_runfolder::parts::Check;

/// How a task came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The run finished and every check passed.
    Passed,
    /// The run did not finish (budget, denial, failed action, ...) or a
    /// check failed: the agent's failure.
    Failed,
    /// The task needs what Sandtop does not do (named): never run.
    Unsupported,
    /// Not run: no API key and no scripted solution.
    Skipped,
    /// Sandtop could not run it (the guest did not boot, a setup step
    /// failed): not the agent's failure, but no pass either.
    Error,
    /// The batch was stopped (Ctrl-C, SIGTERM) before the task's run
    /// ended, or before it began: its checks were not run.
    Interrupted,
}

impl Status {
    pub fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Unsupported => "unsupported",
            Status::Skipped => "skipped",
            Status::Error => "error",
            Status::Interrupted => "interrupted",
        }
    }
}

/// One task's result.
#[derive(Debug, Clone, Serialize)]
pub struct TaskResult {
    pub id: String,
    /// Its line in the task file.
    pub line: usize,
    pub status: Status,
    /// Why, in words, when it did not pass (the unsupported names, the
    /// error, the ending or the first failed check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
    /// `scripted` (the task's solution, no key) or the model's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How the run ended (the runner's word: `finished`, `step_budget`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ending: Option<String>,
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// From the guest's boot to its removal, seconds.
    pub seconds: f64,
    /// Where the task's guest came from: `pool` (claimed from the warm
    /// pool, `--pool`) or `booted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest: Option<&'static str>,
    /// The guest's boot (or claim), the setup, the loop and the checks,
    /// seconds.
    pub boot_seconds: f64,
    pub setup_seconds: f64,
    pub run_seconds: f64,
    pub checks: Vec<Check>,
    /// The task's run folder, and its report (`host-cli report`'s page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_folder: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}

impl TaskResult {
    /// A result with nothing measured yet.
    pub fn new(id: &str, line: usize, status: Status) -> TaskResult {
        TaskResult {
            id: id.to_string(),
            line,
            status,
            reason: None,
            unsupported: Vec::new(),
            model: None,
            ending: None,
            steps: 0,
            input_tokens: 0,
            output_tokens: 0,
            total_tokens: 0,
            seconds: 0.0,
            guest: None,
            boot_seconds: 0.0,
            setup_seconds: 0.0,
            run_seconds: 0.0,
            checks: Vec::new(),
            run_folder: None,
            report: None,
        }
    }
}

/// The counts of each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub tasks: usize,
    pub passed: usize,
    pub failed: usize,
    pub unsupported: usize,
    pub skipped: usize,
    pub error: usize,
    pub interrupted: usize,
}

pub fn totals(results: &[TaskResult]) -> Totals {
    let mut t = Totals {
        tasks: results.len(),
        ..Totals::default()
    };
    for r in results {
        match r.status {
            Status::Passed => t.passed += 1,
            Status::Failed => t.failed += 1,
            Status::Unsupported => t.unsupported += 1,
            Status::Skipped => t.skipped += 1,
            Status::Error => t.error += 1,
            Status::Interrupted => t.interrupted += 1,
        }
    }
    t
}

/// The exit status of a batch that was stopped (as `host-cli run`'s).
pub const INTERRUPTED: u8 = 130;

/// The batch's exit status: 0 when every task that ran passed (the
/// unsupported and skipped ones ran nothing), 1 when one failed or could
/// not be run, [`INTERRUPTED`] when the batch was stopped before every
/// task had ended. Usage errors (a bad task file, bad options) are 2,
/// before anything runs.
pub fn exit_status(results: &[TaskResult]) -> u8 {
    let t = totals(results);
    if t.interrupted > 0 {
        INTERRUPTED
    } else if t.failed + t.error == 0 {
        0
    } else {
        1
    }
}

/// The results file's body.
#[derive(Debug, Serialize)]
pub struct Summary<'a> {
    pub version: u32,
    pub tasks_file: String,
    pub parallel: usize,
    /// `scripted` (no key: the tasks' solutions) or the provider.
    pub mode: String,
    pub started_unix_ms: u64,
    pub wall_seconds: f64,
    pub totals: Totals,
    pub tasks: &'a [TaskResult],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_and_errors_fail_the_batch() {
        let r = |s| TaskResult::new("a", 1, s);
        assert_eq!(
            exit_status(&[
                r(Status::Passed),
                r(Status::Unsupported),
                r(Status::Skipped)
            ]),
            0
        );
        assert_eq!(exit_status(&[r(Status::Passed), r(Status::Failed)]), 1);
        assert_eq!(exit_status(&[r(Status::Error)]), 1);
        let t = totals(&[r(Status::Passed), r(Status::Failed), r(Status::Failed)]);
        assert_eq!((t.tasks, t.passed, t.failed), (3, 1, 2));
        // A stopped batch says so whatever else came out.
        assert_eq!(
            exit_status(&[r(Status::Passed), r(Status::Failed), r(Status::Interrupted)]),
            INTERRUPTED
        );
        assert_eq!(totals(&[r(Status::Interrupted)]).interrupted, 1);
    }
}
