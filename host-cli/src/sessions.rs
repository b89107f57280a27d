//! What the session commands share (`guest stop --force`, `guest reset`,
//! `guest ls`, `guest start`, the pool's claims): ending the run that holds
//! a session, and a session's `guest ls` entry. Below `cli` and `pool`,
//! which both use it.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::guest::State;
use crate::session::{SessionDir, SessionRecord};

/// Ends the run holding a session as Ctrl-C does (SIGINT to its host-cli:
/// it stops between operations, records how it ended and releases the
/// session), and waits until that process is gone.
pub(crate) async fn end_run(dir: &SessionDir, holder: &str) -> anyhow::Result<()> {
    let pid = holder
        .parse::<i32>()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .with_context(|| format!("the run lock of session {} names no process", dir.name))?;
    eprintln!(
        "host-cli: ending the run on session {} (host-cli pid {holder}) first",
        dir.name
    );
    rustix::process::kill_process(pid, rustix::process::Signal::INT)
        .with_context(|| format!("signalling host-cli pid {holder}"))?;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let gone = !Path::new(&format!("/proc/{holder}")).exists()
            || std::fs::read_to_string(format!("/proc/{holder}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
        if gone && crate::agent::cmd::session_holder(dir).is_none() {
            return Ok(());
        }
        if std::time::Instant::now() > end {
            bail!("the run (host-cli pid {holder}) did not end within 30 s after Ctrl-C");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

pub(crate) fn ls_entry(rec: &SessionRecord, state: State) -> Value {
    let mut v = json!({
        "name": rec.name,
        "backend": rec.backend(),
        "state": state,
        "screen": rec.screen.to_string(),
        // The screen size under its old name, kept for one release.
        "display": rec.screen.to_string(),
        "created_unix": rec.created_unix,
    });
    if let Some(d) = rec.docker() {
        v["container"] = json!(d.container_name);
        v["container_id"] = json!(d.container_id);
    }
    if let Some(l) = rec.local() {
        v["pid"] = json!(l.pid);
    }
    v
}
