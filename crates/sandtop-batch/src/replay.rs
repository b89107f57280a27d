//! `host-cli replay` of a task's run folder.
//!
//! A batch records in each run folder the task it ran ([`TASK_FILE`]: its
//! id, instruction, setup steps, checks, step budget and network, in the
//! task file's own shape; never its solution). Replaying such a folder
//! boots a guest of that network, runs the setup steps on it as the batch
//! did, then replays the model's actions on it (`sandtop_replay`), so the
//! first screen is the one the run began with. The file is read back
//! through the task file's own rules ([`crate::task`]): a run folder from
//! elsewhere cannot make a replay write outside the guest's home or start
//! a program a task could not.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;

use sandtop_guest::docker::DockerBackend;
use sandtop_guest::session::{BackendKind, Store, lock_session};
use sandtop_replay::ReplayArgs;

use crate::task::{CheckSpec, Entry, Setup, Task};

/// The task's record in its run folder.
pub const TASK_FILE: &str = "task.json";
/// The largest record read back (a task file's lines have no limit, but
/// its files are 1 MiB each at most).
const MAX_RECORD_BYTES: u64 = 256 << 20;

/// What [`TASK_FILE`] holds: a line of a task file in Sandtop's shape.
#[derive(Debug, Serialize)]
struct Recorded<'a> {
    id: &'a str,
    instruction: &'a str,
    setup: &'a [Setup],
    checks: &'a [CheckSpec],
    max_steps: u32,
    network: &'a str,
}

/// Writes `t`'s record into its run folder.
pub fn record(run_dir: &Path, t: &Task) -> anyhow::Result<()> {
    let r = Recorded {
        id: &t.id,
        instruction: &t.instruction,
        setup: &t.setup,
        checks: &t.checks,
        max_steps: t.max_steps,
        network: &t.network,
    };
    let path = run_dir.join(TASK_FILE);
    std::fs::write(&path, format!("{}\n", serde_json::to_string_pretty(&r)?))
        .with_context(|| format!("writing {}", path.display()))
}

/// The task recorded in `run`, if it has one: read with the task file's
/// rules. A record that breaks them is an error naming the file.
pub fn recorded(run: &Path) -> anyhow::Result<Option<Task>> {
    let path = run.join(TASK_FILE);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    anyhow::ensure!(
        meta.is_file(),
        "{}: not a regular file (a run folder's files are never followed through links)",
        path.display()
    );
    anyhow::ensure!(
        meta.len() <= MAX_RECORD_BYTES,
        "{}: over {} MiB: not a task's record",
        path.display(),
        MAX_RECORD_BYTES >> 20
    );
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    match crate::task::native(value, 1) {
        Ok(Entry::Task(t)) => Ok(Some(t)),
        Ok(Entry::Unsupported { names, .. }) => anyhow::bail!(
            "{}: a task this Sandtop cannot set up ({})",
            path.display(),
            names.join(", ")
        ),
        Err(e) => anyhow::bail!("{}: {e}", path.display()),
    }
}

/// `host-cli replay`: a task's run folder gets its setup first (see the
/// module docs); any other run folder is replayed as it is.
pub async fn replay(mut a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let Some(task) = recorded(&a.run)? else {
        return Ok(sandtop_replay::replay(a).await?);
    };
    if a.session.is_some() {
        eprintln!(
            "host-cli: replay: the run is task {}'s; on --session its {} setup step(s) are \
             not run: the session's screen must start as they left it",
            sandtop_hostkit::term::safe_line(&task.id),
            task.setup.len()
        );
        return Ok(sandtop_replay::replay(a).await?);
    }
    let plan = sandtop_replay::plan::plan(&a.run)?;
    let network: sandtop_egress::policy::NetworkMode = task
        .network
        .parse()
        .map_err(|e| anyhow::anyhow!("{}: network: {e}", TASK_FILE))?;
    let config = sandtop_egress::service::EgressConfig {
        mode: network,
        ..sandtop_egress::service::EgressConfig::none()
    };
    let store = Store::open()?;
    let (dir, rec, booted) = sandtop_pool::acquire::session_for(
        &store,
        None,
        BackendKind::Docker,
        (sandtop_replay::screen_of(&plan), &a.guest),
        (a.keep, false),
        config,
    )
    .await
    .context("booting the replay's guest")?;
    let booted = booted.context("the replay's guest was not booted by it")?;
    let setup = async {
        let docker = DockerBackend::connect().await?;
        let container = rec
            .docker()
            .map(|d| d.container_id.clone())
            .context("the replay's guest has no container")?;
        let _lock = lock_session(&dir)?;
        let mut channel = sandtop_guest::open_channel(&dir, &rec).await?;
        let mut g = crate::setup::Guest {
            channel: &mut channel,
            docker: Some((&docker, container.as_str())),
        };
        crate::setup::run(&mut g, &task.setup).await?;
        anyhow::Ok(())
    }
    .await;
    let result = match setup {
        Ok(()) => {
            eprintln!(
                "host-cli: replay: task {}: its {} setup step(s) ran",
                sandtop_hostkit::term::safe_line(&task.id),
                task.setup.len()
            );
            a.session = Some(rec.name.clone());
            sandtop_replay::replay(a).await.map_err(anyhow::Error::from)
        }
        Err(e) => Err(e.context(format!("task {}: its setup on the replay's guest", task.id))),
    };
    booted.remove().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(line: &str) -> Task {
        match crate::task::native(serde_json::from_str(line).unwrap(), 1).unwrap() {
            Entry::Task(t) => t,
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_recorded_task_reads_back_the_same_without_its_solution() {
        let dir = tempfile::tempdir().unwrap();
        let t = task(
            r#"{"id": "t1", "instruction": "Do it.", "network": "allow:http://127.0.0.1:8080",
                "setup": [{"put_file": {"path": "/home/user/a.txt", "text": "x"}},
                          {"launch": ["mousepad", "/home/user/a.txt"]},
                          {"wait_window": {"title": "a.txt", "timeout_s": 20}},
                          {"open_url": "http://127.0.0.1:8080/"}, {"sleep": 1.5}],
                "checks": [{"file_equals": {"path": "/home/user/a.txt", "text": "y"}},
                           {"tabs": {"count": 1}}],
                "max_steps": 7, "solution": [[{"type": "wait"}]]}"#,
        );
        record(dir.path(), &t).unwrap();
        let back = recorded(dir.path()).unwrap().unwrap();
        assert_eq!(back.setup, t.setup);
        assert_eq!(back.checks, t.checks);
        assert_eq!(
            (back.id.as_str(), back.max_steps, back.network.as_str()),
            ("t1", 7, "allow:http://127.0.0.1:8080")
        );
        assert_eq!(back.solution, None, "a solution is never recorded");
        let tempty = tempfile::tempdir().unwrap();
        assert!(recorded(tempty.path()).unwrap().is_none());
    }

    #[test]
    fn a_record_is_held_to_the_task_files_rules() {
        let dir = tempfile::tempdir().unwrap();
        let write = |body: &str| std::fs::write(dir.path().join(TASK_FILE), body).unwrap();
        let base = |setup: &str| {
            format!(
                r#"{{"id": "t", "instruction": "x", "setup": [{setup}],
                    "checks": [{{"page_text": {{"contains": "a"}}}}]}}"#
            )
        };
        write(&base(
            r#"{"put_file": {"path": "/etc/passwd", "text": "x"}}"#,
        ));
        let e = recorded(dir.path()).unwrap_err().to_string();
        assert!(e.contains("task.json") && e.contains("put_file"), "{e}");
        write(&base(r#"{"launch": ["sh", "-c", "id"]}"#));
        let e = recorded(dir.path()).unwrap_err().to_string();
        assert!(e.contains("launch:sh"), "{e}");
        write("not json");
        assert!(recorded(dir.path()).is_err());
        std::fs::remove_file(dir.path().join(TASK_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join(TASK_FILE)).unwrap();
        let e = recorded(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
