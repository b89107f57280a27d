//! Which containers are whose, and `guest gc`'s judgement of the Docker
//! guests: owner labels (this host, this user), then removal of only those
//! whose session is provably gone (docs/security.md C13): by the container's
//! own state, or by what its visible folder says, never by a folder this
//! process cannot see (docs/security.md C14, [`judge`]).

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
/// run by anyone else leaves it alone (docs/security.md C13).
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
/// cannot be seen from here (docs/security.md C13).
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
            sandtop_hostkit::term::safe(host)
        ));
    }
    let me = rustix::process::geteuid();
    if !me.is_root() && *uid != me.as_raw().to_string() {
        return Some(format!(
            "it belongs to uid {}",
            sandtop_hostkit::term::safe(uid)
        ));
    }
    None
}

/// What `guest gc` can see, from where it runs, of a container's session
/// folder (named by the container's label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The container has no session-folder label.
    NoLabel,
    /// No folder there, as this process sees the file system (another
    /// mount namespace may well have it).
    NotVisible,
    /// The folder cannot be checked (the reason).
    Unreadable(String),
    /// The folder's record names this container.
    Ours,
    /// The folder's record names another container.
    Other,
    /// The folder has no record; its creator runs (`Some(true)`), is gone
    /// (`Some(false)`), or cannot be told from here (`None`: another PID
    /// namespace, [`SessionDir::owner_state`]).
    NoRecord(Option<bool>),
}

/// `guest gc`'s judgement of one container of this host and user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Removed, for this reason.
    Remove(&'static str),
    /// Left alone: a live session (`None`), or why nothing is proven.
    Keep(Option<String>),
}

/// Whether a container's state proves its guest gone: it exited or is
/// dead. A created, running, paused or restarting one is not.
pub fn stopped(state: &str) -> bool {
    matches!(state, "exited" | "dead")
}

/// Judges one container from its state and what can be seen of its folder
/// (docs/security.md C14). "Gone" means proven gone: a container whose guest
/// stopped, or a running one whose visible folder says it is not its
/// session's (its record names another container, or it has no record and
/// its creator is gone). A running container is never removed because its
/// folder cannot be seen from here: `guest gc` run in another mount
/// namespace (as root, say) sees no folder of a live session.
pub fn judge(stopped: bool, seen: &Seen) -> Verdict {
    let keep = |why: &str| Verdict::Keep(Some(why.to_string()));
    match (stopped, seen) {
        (_, Seen::Unreadable(e)) => {
            Verdict::Keep(Some(format!("its session folder cannot be checked ({e})")))
        }
        (_, Seen::Other) => Verdict::Remove("its session belongs to another container"),
        (_, Seen::NoRecord(Some(true))) => Verdict::Keep(None),
        (true, Seen::NoLabel) => Verdict::Remove("it stopped and has no session-folder label"),
        (true, Seen::NotVisible) => Verdict::Remove("it stopped and its session folder is gone"),
        (true, Seen::Ours) => Verdict::Remove("its guest is not running"),
        (true, Seen::NoRecord(_)) => Verdict::Remove("it stopped and its session has no record"),
        (false, Seen::NoRecord(Some(false))) => {
            Verdict::Remove("the host-cli that started it is gone")
        }
        (false, Seen::Ours) => Verdict::Keep(None),
        (false, Seen::NoLabel) => {
            keep("it runs and has no session-folder label: nothing proves its session gone")
        }
        (false, Seen::NotVisible) => keep(
            "it runs and its session folder is not visible from here (another mount \
             namespace?): nothing proves its session gone",
        ),
        (false, Seen::NoRecord(None)) => keep(
            "it runs and the host-cli that started it cannot be checked from here \
             (another PID namespace)",
        ),
    }
}

/// Whether a session folder beside `folder` has a record naming
/// container `id`: a pool guest claimed under another name keeps its
/// first folder's label (labels cannot change), and the claim renamed
/// that folder within the same `sessions/` (a pool's claim, docs/contract.md rule 72).
fn renamed_to_a_sibling(folder: &Path, id: &str) -> bool {
    let Some(Ok(entries)) = folder.parent().map(std::fs::read_dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let dir = SessionDir {
            name: e.file_name().to_string_lossy().into_owned(),
            path: e.path(),
        };
        dir.load()
            .ok()
            .is_some_and(|r| r.docker().is_some_and(|d| d.container_id == id))
    })
}

/// What can be seen of the session folder `folder` of container `id`.
fn seen(id: &str, session: &str, folder: Option<&Path>) -> Seen {
    let Some(f) = folder else {
        return Seen::NoLabel;
    };
    match std::fs::symlink_metadata(f) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Seen::NotVisible,
        Ok(m) if !m.is_dir() => Seen::NotVisible,
        // Unreadable: nothing is proven, nothing is removed.
        Err(e) => Seen::Unreadable(e.to_string()),
        Ok(_) => {
            let dir = SessionDir {
                name: session.to_string(),
                path: f.to_path_buf(),
            };
            match dir.load() {
                Ok(rec) => match rec.docker() {
                    Some(d) if d.container_id == id => Seen::Ours,
                    _ => Seen::Other,
                },
                Err(_) => Seen::NoRecord(dir.owner_state()),
            }
        }
    }
}

impl DockerBackend {
    /// Removes orphaned session containers of this host and user (see
    /// [`not_ours`]; the others are reported and left alone) whose session
    /// is proven gone (`judge`): the container stopped, or its visible
    /// folder's record names another container, or the folder has no
    /// record and the host-cli that created it died (pid and start time
    /// in `owner`, in this PID namespace). A running container whose
    /// folder this process cannot see is left alone and said so.
    /// Folders are removed only inside `store` (a label names a path but
    /// is not trusted to delete one). Adds one line per removal, and per
    /// failure, to `report` (a failure does not stop the others).
    pub async fn gc_containers(
        &self,
        store: &Store,
        report: &mut crate::GcReport,
    ) -> crate::Result<()> {
        self.gc_labelled(store, report, LABEL_SESSION.to_string())
            .await
    }

    /// [`DockerBackend::gc_containers`] over the containers Docker's
    /// `label` filter `filter` selects (tests judge their own only).
    async fn gc_labelled(
        &self,
        store: &Store,
        report: &mut crate::GcReport,
        filter: String,
    ) -> crate::Result<()> {
        let filters = HashMap::from([("label", vec![filter])]);
        let list = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(crate::GuestError::docker("listing sandtop containers"))?;
        let sessions_root = store.root().join("sessions");
        for c in list {
            let Some(id) = c.id.clone() else { continue };
            let labels = c.labels.clone().unwrap_or_default();
            let session = labels.get(LABEL_SESSION).cloned().unwrap_or_default();
            // No state reported: not proven stopped.
            let state = c.state.as_ref().map(|s| s.to_string()).unwrap_or_default();
            let folder = labels.get(LABEL_SESSION_DIR).map(PathBuf::from);
            let short = id.chars().take(12).collect::<String>();
            // Labels of another user's container are that user's text.
            let shown = sandtop_hostkit::term::safe(&session);
            if let Some(whose) = not_ours(&labels, folder.as_deref(), &sessions_root) {
                report.done(format!(
                    "left container {short} (session {shown}) alone: {whose}"
                ));
                continue;
            }
            let mut seen = seen(&id, &session, folder.as_deref());
            if seen == Seen::NotVisible
                && folder
                    .as_deref()
                    .is_some_and(|f| renamed_to_a_sibling(f, &id))
            {
                seen = Seen::Ours;
            }
            let why = match judge(stopped(&state), &seen) {
                Verdict::Remove(why) => why,
                Verdict::Keep(None) => continue,
                Verdict::Keep(Some(why)) => {
                    report.done(format!(
                        "left container {short} (session {shown}) alone: {why}"
                    ));
                    continue;
                }
            };
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
                if !other_live && dir.owner_state() == Some(false) {
                    match crate::remove_folder(store, &dir, Some(self)).await {
                        Ok(how) => report.done(format!("removed session folder {shown}{how}")),
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

    /// docs/security.md C14: a running container is removed only on proof from
    /// a folder gc can see; a stopped one always (its state is the proof).
    #[test]
    fn gone_means_proven_gone_never_a_folder_not_seen_from_here() {
        let running = ["running", "created", "paused", "restarting", "removing", ""];
        for state in running {
            assert!(!stopped(state), "{state}");
            for seen in [
                Seen::NotVisible,
                Seen::NoLabel,
                Seen::NoRecord(None),
                Seen::Unreadable("permission denied".into()),
            ] {
                let v = judge(stopped(state), &seen);
                assert!(
                    matches!(v, Verdict::Keep(Some(_))),
                    "{state} {seen:?}: {v:?}"
                );
            }
            assert_eq!(judge(false, &Seen::Ours), Verdict::Keep(None));
            assert_eq!(
                judge(false, &Seen::NoRecord(Some(true))),
                Verdict::Keep(None)
            );
            assert!(matches!(judge(false, &Seen::Other), Verdict::Remove(_)));
            assert!(matches!(
                judge(false, &Seen::NoRecord(Some(false))),
                Verdict::Remove(_)
            ));
        }
        let Verdict::Keep(Some(why)) = judge(false, &Seen::NotVisible) else {
            panic!("a running container without a visible folder is kept");
        };
        assert!(why.contains("not visible from here"), "{why}");
        for state in ["exited", "dead"] {
            assert!(stopped(state));
            for seen in [Seen::NotVisible, Seen::NoLabel, Seen::Ours, Seen::Other] {
                assert!(matches!(judge(true, &seen), Verdict::Remove(_)), "{seen:?}");
            }
            // A live creator still holds it; an unreadable folder proves
            // nothing either way.
            assert_eq!(
                judge(true, &Seen::NoRecord(Some(true))),
                Verdict::Keep(None)
            );
            assert!(matches!(
                judge(true, &Seen::Unreadable("x".into())),
                Verdict::Keep(Some(_))
            ));
        }
    }

    /// The same against a real engine: a running container labelled as a
    /// session of this host and user whose folder is not visible here (as
    /// from another mount namespace) survives `gc_containers`; once it has
    /// stopped, it goes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gc_keeps_a_running_container_whose_folder_it_cannot_see() {
        if !sandtop_testkit::skip::docker_guest() {
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let store = Store::at(state.path().to_path_buf()).unwrap();
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).unwrap();
        let name = format!("gc-unseen-{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3]);
        // Another namespace's state directory: nothing of it exists here.
        let folder = Path::new("/nonexistent-namespace/sessions").join(&name);
        let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--rm=false".into()];
        for (k, v) in session_labels(&name, &folder) {
            args.push("--label".into());
            args.push(format!("{k}={v}"));
        }
        args.extend(
            [
                "--network",
                "none",
                "--entrypoint",
                "sleep",
                "sandtop-guest:latest",
                "600",
            ]
            .map(String::from),
        );
        let out = std::process::Command::new("docker")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        struct Gone(String);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::process::Command::new("docker")
                    .args(["rm", "-f", &self.0])
                    .output();
            }
        }
        let _gone = Gone(id.clone());
        let exists = || {
            std::process::Command::new("docker")
                .args(["inspect", &id])
                .output()
                .unwrap()
                .status
                .success()
        };
        // Only this test's container is judged: others on this engine are
        // other people's.
        let only = format!("{LABEL_SESSION}={name}");
        let docker = DockerBackend::connect().await.unwrap();
        let mut report = crate::GcReport::default();
        docker
            .gc_labelled(&store, &mut report, only.clone())
            .await
            .unwrap();
        assert!(exists(), "gc removed a running container: {report:?}");
        let short: String = id.chars().take(12).collect();
        let line = report
            .lines
            .iter()
            .find(|l| l.contains(&short))
            .unwrap_or_else(|| panic!("gc said nothing of {short}: {report:?}"));
        assert!(
            line.contains("left container") && line.contains("not visible"),
            "{line}"
        );
        // Stopped: its state proves it gone.
        let out = std::process::Command::new("docker")
            .args(["kill", &id])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut report = crate::GcReport::default();
        docker.gc_labelled(&store, &mut report, only).await.unwrap();
        assert!(!exists(), "a stopped container stayed: {report:?}");
        assert!(
            report
                .lines
                .iter()
                .any(|l| l.contains(&short) && l.contains("removed container")),
            "{report:?}"
        );
    }
}
