//! A guest for one command (`run`, `exercise`, `replay`, `batch`): the
//! session it names, else one claimed from the warm pool, else a fresh
//! boot. What it claimed or booted comes back as [`Booted`], which the
//! command removes when it is done (unless asked to keep it).

use sandtop_guest::options::{GuestArgs, start_configured};
use sandtop_guest::session::{self, BackendKind, SessionDir, SessionRecord, Store};
use sandtop_guest::{StartRequest, stop};
use sandtop_protocol::Size;

use crate::PoolError;
use crate::client::{CLAIM_WAIT, claim};
use crate::wire::Want;

/// A guest this command claimed or booted.
#[derive(Debug)]
pub struct Booted {
    store: Store,
    dir: SessionDir,
    rec: SessionRecord,
    keep: bool,
}

impl Booted {
    /// The guest of `dir` as this command's to remove: a resumed run
    /// inherits the guest the run it continues booted.
    pub fn adopt(store: &Store, dir: &SessionDir, rec: &SessionRecord, keep: bool) -> Booted {
        Booted {
            store: store.clone(),
            dir: dir.clone(),
            rec: rec.clone(),
            keep,
        }
    }

    /// Whether [`Booted::remove`] keeps the guest (`--keep`).
    pub fn keeps(&self) -> bool {
        self.keep
    }

    /// Removes the guest even if `--keep` asked to keep it: a guest
    /// nobody can trust (a script whose outcome is unknown).
    pub async fn discard(mut self) {
        self.keep = false;
        self.remove().await;
    }

    /// Removes the guest (or says it is kept, with `--keep`). A failed
    /// removal is reported on stderr; `guest gc` finds what it left.
    pub async fn remove(self) {
        if self.keep {
            eprintln!("host-cli: keeping session {}", self.rec.name);
            return;
        }
        if let Err(e) = stop(&self.store, &self.dir, &self.rec).await {
            eprintln!(
                "host-cli: removing session {}: {}",
                self.rec.name,
                sandtop_hostkit::term::safe(&e.chain())
            );
        }
    }
}

/// The session `name` when given (the caller's, never removed by it),
/// else a guest of the warm pool when `pool` (of this screen and network),
/// else a fresh `backend` guest configured by `options`.
pub async fn session_for(
    store: &Store,
    name: Option<&str>,
    backend: BackendKind,
    (screen, options): (Size, &GuestArgs),
    (keep, pool): (bool, bool),
    network: sandtop_egress::service::EgressConfig,
) -> Result<(SessionDir, SessionRecord, Option<Booted>), PoolError> {
    if let Some(n) = name {
        let dir = store.get(n)?;
        let rec = dir.load()?;
        return Ok((dir, rec, None));
    }
    let booted = |dir: &SessionDir, rec: &SessionRecord| Booted::adopt(store, dir, rec, keep);
    if pool {
        // The pool's guest must be what this command would have booted:
        // its screen and network (the rest is the pool's to choose).
        let want = Want {
            screen: Some(screen),
            network: Some(network),
            ..Default::default()
        };
        let (dir, rec) = claim(store, &session::new_name()?, CLAIM_WAIT, want).await?;
        eprintln!("host-cli: took {} from the warm pool", rec.name);
        let b = booted(&dir, &rec);
        return Ok((dir, rec, Some(b)));
    }
    let req = StartRequest {
        name: session::new_name()?,
        screen,
        network,
    };
    eprintln!("host-cli: booting a {backend} guest ({screen})");
    let rec = start_configured(store, backend, options, &req, &[], None).await?;
    let dir = store.get(&rec.name)?;
    let b = booted(&dir, &rec);
    Ok((dir, rec, Some(b)))
}
