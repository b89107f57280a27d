//! `guest start`: boot a guest, or take one from the warm pool (`--pool`);
//! `guest snapshot`: save a VM guest's booted state for later starts.

use std::process::ExitCode;

use anyhow::bail;

use super::{SnapshotArgs, StartArgs};
use crate::guest::ls_entry;
use crate::guest::{self, StartRequest, State};
use crate::session::{self, BackendKind, Store};

pub(super) async fn start(store: &Store, a: StartArgs) -> anyhow::Result<ExitCode> {
    let rec = if a.pool {
        sandtop_pool::command::claim(store, a.name, Default::default())
            .await?
            .1
    } else {
        let name = match a.name {
            Some(n) => n,
            None => session::new_name()?,
        };
        let network = a.net.config();
        if a.backend == BackendKind::Qemu
            && network.mode == crate::egress::policy::NetworkMode::Open
        {
            bail!(
                "--network open applies to docker guests; a VM guest has no network \
                 device (use allow: or ask, through the egress proxy)"
            );
        }
        if a.backend == BackendKind::Local
            && network.mode != crate::egress::policy::NetworkMode::None
        {
            bail!("--network applies to docker guests; a local session shares this host's network");
        }
        if network.mode == crate::egress::policy::NetworkMode::Open {
            eprintln!(
                "host-cli: --network open: the guest reaches any address Docker's bridge can, unfiltered"
            );
        }
        if a.backend == BackendKind::Local {
            eprintln!(
                "host-cli: the local backend runs the desktop as you, on this host: no isolation"
            );
        }
        let req = StartRequest {
            name,
            screen: a.screen,
            network,
        };
        guest::options::start_configured(store, a.backend, &a.guest, &req, &[], None).await?
    };
    if a.json {
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&ls_entry(&rec, State::Running))?
        );
    } else {
        crate::out!("{}", rec.name);
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn snapshot(store: &Store, a: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let network = a.net.config();
    if network.mode == crate::egress::policy::NetworkMode::Open {
        bail!(
            "--network open applies to docker guests; a VM guest has no network device \
             (use allow: or ask, through the egress proxy)"
        );
    }
    let req = StartRequest {
        name: "snapshot".into(),
        screen: a.screen,
        network,
    };
    let backend = a.guest.qemu()?;
    let store = store.clone();
    let t = std::time::Instant::now();
    // Ctrl-C (SIGTERM, SIGHUP) stops it: its QEMU is killed, its session
    // and partial files removed, before host-cli ends.
    let stop = std::sync::Arc::new(guest::qemu_snapshot::Stop::default());
    let making = {
        let stop = std::sync::Arc::clone(&stop);
        tokio::task::spawn_blocking(move || {
            guest::qemu_snapshot::make_until(&store, &backend, &req, &stop)
        })
    };
    tokio::pin!(making);
    let s = match sandtop_hostkit::signals::until_interrupted(&mut making).await {
        Ok(made) => made??,
        Err(signal) => {
            eprintln!("\nhost-cli: stopping the snapshot ({signal}): removing what it made");
            stop.stop(signal);
            match making.await? {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("host-cli: {e}");
                    return Ok(ExitCode::from(130));
                }
            }
        }
    };
    if a.json {
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "state": s.state,
                "meta": s.meta_path,
                "bytes": s.meta.bytes,
                "boot_ms": s.meta.boot_ms,
                "save_ms": s.meta.save_ms,
            }))?
        );
    } else {
        crate::out!(
            "{} ({} MiB; booted in {:.1} s, saved in {:.1} s, {:.1} s in all)",
            s.state.display(),
            s.meta.bytes / (1024 * 1024),
            s.meta.boot_ms as f64 / 1000.0,
            s.meta.save_ms as f64 / 1000.0,
            t.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}
