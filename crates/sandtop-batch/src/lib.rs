//! Batch runs: `host-cli batch TASKS.jsonl` runs each task of a file on
//! its own fresh guest, in its own run folder, and judges it by checks of
//! the guest's state (docs/tasks.md).
//!
//! - [`read`]: the task file, read strictly (every bad line named), each
//!   line in Sandtop's shape ([`task`]) or OSWorld's ([`osworld`] maps it;
//!   what it cannot honour makes the task unsupported, by name);
//! - [`setup`]: a task's setup steps on its guest (the browser driver
//!   through the channel; files, programs and the window list through the
//!   Docker engine's exec, argv only);
//! - [`checks`]: what the checks read after the run and their verdicts;
//! - [`script`]: a task's scripted solution as the scripted model's
//!   script (no key: the loop runs for real with fixed answers);
//! - [`results`]: the results, their totals and the exit status;
//! - [`replay`]: `host-cli replay` of a task's run folder: its setup
//!   first, on a guest of its network, recorded in the folder's
//!   `task.json`;
//! - [`run`]: the batch itself (per task a guest, the setup, the loop,
//!   the checks, the run's report; `results.json` and the HTML table of
//!   [`table`] at the end), from the options `host-cli batch` read.

pub mod checks;
pub mod osworld;
pub mod read;
pub mod replay;
pub mod results;
pub mod run;
pub mod script;
pub mod setup;
pub mod table;
pub mod task;
