//! Which containers are whose, and `guest gc`'s judgement of the Docker
//! guests: owner labels (this host, this user), then removal of only those
//! whose session is provably gone (issue 12 item 5).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::query_parameters::ListContainersOptionsBuilder;

use super::{DockerBackend, LABEL_OWNER_HOST, LABEL_OWNER_UID, LABEL_SESSION, LABEL_SESSION_DIR};
use crate::session::{SessionDir, Store};

/// This host, for [`LABEL_OWNER_HOST`]: `/etc/machine-id` (one per
/// installation, unlike a host name), else the kernel's host name.
pub fn host_id() -> String {
    let id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let id = id.trim();
    if !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return format!("machine-id:{id}");
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("hostname:{}", name.trim())
}

/// The labels of a session's container: the session, its folder, and its
/// owner (this host and this process's effective uid), so that `guest gc`
/// run by anyone else leaves it alone (issue 12 item 5).
pub fn session_labels(session: &str, folder: &Path) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_SESSION.to_string(), session.to_string()),
        (
            LABEL_SESSION_DIR.to_string(),
            folder.to_string_lossy().into_owned(),
        ),
        (LABEL_OWNER_HOST.to_string(), host_id()),
        (
            LABEL_OWNER_UID.to_string(),
            rustix::process::geteuid().as_raw().to_string(),
        ),
    ])
}

/// Why a container is not this caller's to judge, or `None` when it is:
/// its owner labels must name this host and this user (root judges every
/// user's containers of this host: it can read their folders). A container
/// from before the owner labels is judged only when its session folder is
/// in this caller's store. Another host's or another user's live session on
/// a shared engine therefore never counts as orphaned because its folder
/// cannot be seen from here (issue 12 item 5).
pub fn not_ours(
    labels: &HashMap<String, String>,
    folder: Option<&Path>,
    sessions_root: &Path,
) -> Option<String> {
    let (Some(host), Some(uid)) = (labels.get(LABEL_OWNER_HOST), labels.get(LABEL_OWNER_UID))
    else {
        return match folder {
            Some(f) if f.parent() == Some(sessions_root) => None,
            _ => {
                Some("it has no owner labels and its folder is not in this state directory".into())
            }
        };
    };
    if *host != host_id() {
        return Some(format!(
            "it belongs to another host ({})",
            crate::term::safe(host)
        ));
    }
    let me = rustix::process::geteuid();
    if !me.is_root() && *uid != me.as_raw().to_string() {
        return Some(format!("it belongs to uid {}", crate::term::safe(uid)));
    }
    None
}

impl DockerBackend {
    /// Removes orphaned session containers of this host and user (see
    /// [`not_ours`]; the others are reported and left alone): no
    /// session-folder label, the folder is gone (not found: a folder that
    /// cannot be read proves nothing), the folder has no record and the
    /// host-cli that created it died (pid and start time in `owner`), the
    /// record names another container, or the guest is no longer running.
    /// Folders are removed only inside `store` (a label names a path but
    /// is not trusted to delete one). Adds one line per removal, and per
    /// failure, to `report` (a failure does not stop the others).
    pub async fn gc_containers(
        &self,
        store: &Store,
        report: &mut crate::guest::GcReport,
    ) -> crate::guest::Result<()> {
        let filters = HashMap::from([("label", vec![LABEL_SESSION.to_string()])]);
        let list = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(crate::guest::GuestError::docker(
                "listing sandtop containers",
            ))?;
        let sessions_root = store.root().join("sessions");
        for c in list {
            let Some(id) = c.id.clone() else { continue };
            let labels = c.labels.clone().unwrap_or_default();
            let session = labels.get(LABEL_SESSION).cloned().unwrap_or_default();
            let running = c.state.as_ref().is_some_and(|s| s.to_string() == "running");
            let folder = labels.get(LABEL_SESSION_DIR).map(PathBuf::from);
            let short = id.chars().take(12).collect::<String>();
            // Labels of another user's container are that user's text.
            let shown = crate::term::safe(&session);
            if let Some(whose) = not_ours(&labels, folder.as_deref(), &sessions_root) {
                report.done(format!(
                    "left container {short} (session {shown}) alone: {whose}"
                ));
                continue;
            }
            let verdict = match &folder {
                None => Some("it has no session-folder label"),
                Some(f) => match std::fs::symlink_metadata(f) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Some("its session folder is gone")
                    }
                    Ok(m) if !m.is_dir() => Some("its session folder is gone"),
                    // Unreadable: nothing is proven, nothing is removed.
                    Err(e) => {
                        report.done(format!(
                            "left container {short} (session {shown}) alone: its session \
                             folder cannot be checked ({e})"
                        ));
                        continue;
                    }
                    Ok(_) => {
                        let dir = SessionDir {
                            name: session.clone(),
                            path: f.clone(),
                        };
                        match dir.load() {
                            Ok(rec) => match rec.docker() {
                                Some(d) if d.container_id == id => {
                                    if running {
                                        None
                                    } else {
                                        Some("its guest is not running")
                                    }
                                }
                                _ => Some("its session belongs to another container"),
                            },
                            Err(_) if dir.owner_alive() => None,
                            Err(_) => Some("the host-cli that started it is gone"),
                        }
                    }
                },
            };
            let Some(why) = verdict else { continue };
            if let Err(e) = self.remove(&id).await {
                report.failed(format!(
                    "could not remove container {short} (session {shown}): {}",
                    e.chain()
                ));
                continue;
            }
            report.done(format!(
                "removed container {short} (session {shown}): {why}"
            ));
            // Its folder too, when it is one of ours and not a live session
            // of another container.
            if let Some(f) = folder
                && f.parent() == Some(sessions_root.as_path())
                && f.is_dir()
            {
                let dir = SessionDir {
                    name: session.clone(),
                    path: f,
                };
                let other_live = dir
                    .load()
                    .ok()
                    .and_then(|r| r.docker().cloned())
                    .is_some_and(|d| d.container_id != id);
                if !other_live && !dir.owner_alive() {
                    match store.remove(&dir) {
                        Ok(()) => report.done(format!("removed session folder {shown}")),
                        Err(e) => {
                            report.failed(format!("could not remove session folder {shown}: {e:#}"))
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gc judges only containers of this host and this user (root: of
    /// every user of this host); one from before the owner labels only
    /// when its folder is in this state directory.
    #[test]
    fn gc_judges_only_containers_of_this_host_and_user() {
        let root = Path::new("/state/sessions");
        let folder = root.join("a");
        let mine = session_labels("a", &folder);
        assert!(host_id().starts_with("machine-id:") || host_id().starts_with("hostname:"));
        assert_eq!(not_ours(&mine, Some(&folder), root), None);
        let elsewhere = Path::new("/elsewhere/sessions/a");
        assert_eq!(not_ours(&mine, Some(elsewhere), root), None);
        let mut host = mine.clone();
        host.insert(LABEL_OWNER_HOST.into(), "machine-id:0123".into());
        let why = not_ours(&host, Some(&folder), root).unwrap();
        assert!(why.contains("another host (machine-id:0123)"), "{why}");
        let mut user = mine.clone();
        let other = rustix::process::geteuid().as_raw() + 1;
        user.insert(LABEL_OWNER_UID.into(), other.to_string());
        let why = not_ours(&user, Some(&folder), root);
        if rustix::process::geteuid().is_root() {
            assert_eq!(why, None, "root judges every user's containers");
        } else {
            assert!(why.unwrap().contains(&format!("uid {other}")));
        }
        let mut legacy = mine.clone();
        legacy.remove(LABEL_OWNER_HOST);
        legacy.remove(LABEL_OWNER_UID);
        assert_eq!(not_ours(&legacy, Some(&folder), root), None);
        assert!(not_ours(&legacy, Some(elsewhere), root).is_some());
        assert!(not_ours(&legacy, None, root).is_some());
    }
}
