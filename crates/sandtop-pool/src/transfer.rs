//! Handing a pool guest over: its session folder renamed to the
//! claimer's name.
//!
//! `renameat2(RENAME_NOREPLACE)` is atomic: it never replaces an existing
//! session, and a folder renamed away is not there to be renamed twice,
//! so no two claims get one guest even if two supervisors raced. The
//! guest does not notice: a Docker guest's `/run/sandtop` is a mount (or
//! the engine's tmpfs) already resolved, the egress proxy holds its
//! sockets and journal open, and every host path of the session is
//! derived from the folder at each use.

use rustix::fs::{CWD, RenameFlags};
use sandtop_guest::session::{self, SessionDir, SessionError, Store, pool_member};

/// Why a hand-over failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("a session named `{0}` already exists (host-cli guest ls)")]
    Exists(String),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("renaming the pool guest's folder {from} to {to}: {source}")]
    Rename {
        from: String,
        to: String,
        #[source]
        source: std::io::Error,
    },
}

/// Makes pool session `from` the session `to`: the folder renamed (never
/// over an existing one), the record's name rewritten, the pool's mark
/// removed.
pub fn transfer(store: &Store, from: &str, to: &str) -> Result<SessionDir, TransferError> {
    session::check_name(to)?;
    let src = store.get(from)?;
    let dst_path = src.path.with_file_name(to);
    match rustix::fs::renameat_with(CWD, &src.path, CWD, &dst_path, RenameFlags::NOREPLACE) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => return Err(TransferError::Exists(to.to_string())),
        Err(e) => {
            return Err(TransferError::Rename {
                from: from.to_string(),
                to: to.to_string(),
                source: e.into(),
            });
        }
    }
    let dst = SessionDir {
        name: to.to_string(),
        path: dst_path,
    };
    let mut rec = dst.load()?;
    rec.name = to.to_string();
    dst.save(&rec)?;
    pool_member::unmark(&dst);
    Ok(dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_guest::session::{BackendRecord, DockerRecord, SessionRecord};

    #[test]
    fn a_guest_is_handed_over_once_and_never_over_a_session() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().to_path_buf()).unwrap();
        let d = store.create("pool-1").unwrap();
        d.save(&SessionRecord {
            name: "pool-1".into(),
            screen: sandtop_protocol::Size::new(800, 600),
            created_unix: 1,
            guest: BackendRecord::Docker(DockerRecord {
                container_id: "c1".into(),
                container_name: "sandtop-pool-1".into(),
                image: "i".into(),
            }),
            network: None,
            egress_pid: None,
        })
        .unwrap();
        pool_member::mark(&d, &pool_member::marker_for("pool-1")).unwrap();
        store.create("taken").unwrap();
        assert!(matches!(
            transfer(&store, "pool-1", "taken"),
            Err(TransferError::Exists(_))
        ));
        let got = transfer(&store, "pool-1", "mine").unwrap();
        assert_eq!(got.load().unwrap().name, "mine");
        assert_eq!(pool_member::supervisor_alive(&got), None);
        assert!(!got.path.join(pool_member::FILE).exists());
        // Gone from the pool's name: a second hand-over finds nothing.
        assert!(matches!(
            transfer(&store, "pool-1", "other"),
            Err(TransferError::Session(SessionError::NotFound(_)))
        ));
    }
}
