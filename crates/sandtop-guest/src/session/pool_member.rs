//! A warm pool's mark on the sessions it keeps ready (docs/contract.md rules 71-75).
//!
//! A pool guest is an ordinary session whose folder holds `pool`: the
//! session's own name and the supervisor that keeps it (`PID STARTTIME
//! PIDNS`, as `owner`). While both hold (the folder still has that name
//! and that supervisor runs), the guest is the pool's; when the
//! supervisor is gone (killed with -9, say), `guest gc` removes it.
//! A claim renames the folder to the claimer's name first, which ends the
//! mark at once (its name no longer matches), then removes the file: so a
//! supervisor killed between the two never leaves a claimed guest for gc.

use super::SessionDir;

/// The marker's file name in a session folder.
pub const FILE: &str = "pool";

/// This process as a supervisor line (`PID STARTTIME PIDNS`).
fn me() -> String {
    let pid = std::process::id();
    format!(
        "{pid} {} {}",
        super::process_start_time(pid).unwrap_or(0),
        super::pid_namespace().unwrap_or(0)
    )
}

/// The marker naming `session` and this process as its supervisor.
pub fn marker_for(session: &str) -> String {
    format!("{session}\n{}\n", me())
}

/// Writes `marker` ([`marker_for`]) into the folder.
pub fn mark(dir: &SessionDir, marker: &str) -> std::io::Result<()> {
    std::fs::write(dir.path.join(FILE), marker)
}

/// Removes the mark (a claim, after the rename).
pub fn unmark(dir: &SessionDir) {
    let _ = std::fs::remove_file(dir.path.join(FILE));
}

/// Whether the folder is an unclaimed guest of a live pool (`Some(true)`),
/// of a pool whose supervisor is gone (`Some(false)`), or no pool's at
/// all or not to be told from here (`None`: unmarked, claimed, or a
/// supervisor in another PID namespace).
pub fn supervisor_alive(dir: &SessionDir) -> Option<bool> {
    let text = std::fs::read_to_string(dir.path.join(FILE)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != dir.name {
        return None;
    }
    let mut it = lines.next()?.split_whitespace();
    let pid = it.next()?.parse::<u32>().ok()?;
    let start = it.next()?.parse::<u64>().ok()?;
    if let Some(Ok(ns)) = it.next().map(str::parse::<u64>)
        && ns != 0
        && super::pid_namespace() != Some(ns)
    {
        return None;
    }
    Some(super::process_start_time(pid) == Some(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_holds_for_its_name_and_a_live_supervisor_only() {
        let tmp = tempfile::tempdir().unwrap();
        let store = super::super::Store::at(tmp.path().to_path_buf()).unwrap();
        let d = store.create("pool-a").unwrap();
        assert_eq!(supervisor_alive(&d), None, "unmarked");
        mark(&d, &marker_for("pool-a")).unwrap();
        assert_eq!(supervisor_alive(&d), Some(true));
        // Renamed by a claim: the mark names another session.
        let renamed = SessionDir {
            name: "mine".into(),
            path: d.path.clone(),
        };
        assert_eq!(supervisor_alive(&renamed), None);
        // A supervisor that is gone (same pid, another start time).
        let ns = crate::session::pid_namespace().unwrap_or(0);
        std::fs::write(
            d.path.join(FILE),
            format!("pool-a\n{} 1 {ns}\n", std::process::id()),
        )
        .unwrap();
        assert_eq!(supervisor_alive(&d), Some(false));
        unmark(&d);
        assert_eq!(supervisor_alive(&d), None);
    }
}
