//! The guests of one server session: the one it is bound to
//! (`--session`), the ones it started (removed at exit unless `--keep`),
//! and which is the default; an open channel and the run lock per guest
//! in use (one driver per session, docs/contract.md rule 6).

use std::collections::BTreeMap;

use anyhow::Context as _;
use sandtop_protocol::Size;
use serde_json::{Value, json};

use sandtop_channel::Channel;
use sandtop_control::served::{FinishOnDrop, Hello, Served};
use sandtop_egress::policy::NetworkMode;
use sandtop_egress::service::EgressConfig;
use sandtop_guest::session::RunLock;
use sandtop_guest::session::{self, BackendKind, SessionDir, SessionRecord, Store};
use sandtop_guest::{self as guest, StartRequest, State};

/// A guest in use: its folder, record, lock and (once opened) channel.
#[derive(Debug)]
pub struct InUse {
    pub dir: SessionDir,
    pub rec: SessionRecord,
    pub channel: Option<Channel>,
    pub started_here: bool,
    /// The guest's control socket, served while this server holds its run
    /// lock: `host-cli view` shows the questions a client cannot ask with
    /// buttons (mcp/approval.rs). Finished (socket removed) when the
    /// guest leaves this server.
    pub control: Option<Served>,
    _control: Option<FinishOnDrop>,
    /// With `--network ask`: the person attached to its egress proxy
    /// (stopped when the guest leaves this server).
    _egress: Option<Detach>,
    /// Last: fields drop in order, so the control socket is gone before
    /// the lock is (a run that takes the lock next binds its own).
    _lock: RunLock,
}

/// Stops the attachment to a guest's proxy when dropped.
#[derive(Debug)]
struct Detach(tokio::task::JoinHandle<()>);

impl Drop for Detach {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a guest's origin questions go (`--network ask`): who is asked,
/// and the run folder that records them.
#[derive(Debug, Clone)]
pub struct OriginQuestions {
    pub asker: std::sync::Arc<super::origins::Asker>,
    pub run: std::path::PathBuf,
}

impl InUse {
    /// The channel, opened on first use (and again after a failure
    /// dropped it).
    pub async fn channel(&mut self) -> anyhow::Result<&mut Channel> {
        if self.channel.is_none() {
            let ch = guest::open_channel(&self.dir, &self.rec).await?;
            self.channel = Some(ch);
        }
        self.channel
            .as_mut()
            .context("the guest's channel is not open")
    }
}

/// The server's guests.
#[derive(Debug)]
pub struct Guests {
    store: Store,
    bound: Option<String>,
    /// The default guest: the bound one, else the last one started.
    current: Option<String>,
    in_use: BTreeMap<String, InUse>,
    origins: Option<OriginQuestions>,
    /// The server session's run folder (named to the view).
    run: std::path::PathBuf,
}

impl Guests {
    /// With `--session NAME`: that session must exist and run, and its
    /// lock is taken now (a run on it is refused before any tool runs).
    pub async fn new(
        store: Store,
        bound: Option<&str>,
        origins: Option<OriginQuestions>,
        run: std::path::PathBuf,
    ) -> anyhow::Result<Guests> {
        let mut g = Guests {
            store,
            bound: bound.map(str::to_string),
            current: bound.map(str::to_string),
            in_use: BTreeMap::new(),
            origins,
            run,
        };
        if let Some(name) = bound {
            let dir = g.store.get(name)?;
            let rec = dir.load()?;
            let st = guest::state(&dir, &rec).await;
            if st != State::Running {
                anyhow::bail!("session {name} is {} (not running)", st.as_str());
            }
            g.take(dir, rec, false)?;
        }
        Ok(g)
    }

    fn take(
        &mut self,
        dir: SessionDir,
        rec: SessionRecord,
        started_here: bool,
    ) -> anyhow::Result<()> {
        let lock = sandtop_guest::session::hold_session(&dir, "host-cli mcp")?;
        // The run lock is ours: a control socket left in the folder is a
        // stale one, and `host-cli view` of this guest attaches to ours.
        let control = match Served::bind(
            &dir.path,
            Hello {
                session: rec.name.clone(),
                run_folder: self.run.display().to_string(),
                task: "host-cli mcp: the calls of an MCP client".into(),
                max_steps: 0,
            },
        ) {
            Ok(s) => {
                s.update(|e| e.phase(sandtop_control::wire::Phase::Model));
                s.refuse_takeover(
                    "host-cli mcp drives this guest for an MCP client and does not hand the \
                     desktop over; stop the MCP server (or its client) to take control",
                );
                Some(s)
            }
            Err(e) => {
                eprintln!(
                    "host-cli mcp: no live view questions for session {}: {}",
                    rec.name,
                    crate::said(e)
                );
                None
            }
        };
        // The seam `run --network ask` answers through: the session's
        // proxy asks, the person answers (mcp/origins.rs).
        let egress = match (&self.origins, rec.egress_pid) {
            (Some(o), Some(_)) => {
                let paths = sandtop_egress::service::Paths::new(&dir.path, &dir.guest_path());
                Some(Detach(super::origins::attach(
                    paths.control,
                    std::sync::Arc::clone(&o.asker),
                    o.run.clone(),
                    control.clone().map(|c| (c, dir.path.clone())),
                )))
            }
            _ => None,
        };
        self.in_use.insert(
            rec.name.clone(),
            InUse {
                dir,
                rec,
                _lock: lock,
                channel: None,
                started_here,
                _control: control.clone().map(FinishOnDrop),
                control,
                _egress: egress,
            },
        );
        Ok(())
    }

    /// The guest a call names, or the default one: bound, else the last
    /// started, else the only running session of the host.
    pub async fn resolve(&mut self, name: Option<&str>) -> Result<&mut InUse, String> {
        let name = match name.or(self.current.as_deref()) {
            Some(n) => n.to_string(),
            None => {
                let (dir, rec) = guest::resolve_session(&self.store, None)
                    .await
                    .map_err(|e| format!("{}; start one with sandtop_guest_start", e.chain()))?;
                let n = rec.name.clone();
                if !self.in_use.contains_key(&n) {
                    self.take(dir, rec, false).map_err(crate::said)?;
                }
                n
            }
        };
        if !self.in_use.contains_key(&name) {
            session::check_name(&name).map_err(|e| e.to_string())?;
            let dir = self.store.get(&name).map_err(|e| e.to_string())?;
            let rec = dir.load().map_err(|e| e.to_string())?;
            self.take(dir, rec, false).map_err(crate::said)?;
        }
        self.in_use
            .get_mut(&name)
            .ok_or_else(|| format!("no session {name}"))
    }

    /// Boots a guest and makes it the default.
    pub async fn start(
        &mut self,
        (backend, options, pool): (BackendKind, &sandtop_guest::options::GuestArgs, bool),
        name: Option<String>,
        screen: Size,
        network: EgressConfig,
    ) -> anyhow::Result<Value> {
        let name = match name {
            Some(n) => {
                session::check_name(&n)?;
                n
            }
            None => session::new_name()?,
        };
        let rec = if pool {
            let want = sandtop_pool::wire::Want {
                screen: Some(screen),
                network: Some(network),
                ..Default::default()
            };
            sandtop_pool::client::claim(&self.store, &name, sandtop_pool::client::CLAIM_WAIT, want)
                .await?
                .1
        } else {
            let req = StartRequest {
                name,
                screen,
                network,
            };
            guest::options::start_configured(&self.store, backend, options, &req, &[], None).await?
        };
        let dir = self.store.get(&rec.name)?;
        let row = entry(&rec, State::Running, true, false);
        if let Err(e) = self.take(dir.clone(), rec.clone(), true) {
            let _ = guest::stop(&self.store, &dir, &rec).await;
            return Err(e);
        }
        self.current = Some(rec.name.clone());
        Ok(row)
    }

    /// Stops a guest this server started.
    pub async fn stop(&mut self, name: &str) -> Result<(), String> {
        match self.in_use.get(name) {
            Some(g) if g.started_here => {}
            Some(_) if self.bound.as_deref() == Some(name) => {
                return Err(format!(
                    "session {name} is the one this server is bound to (--session): the operator stops it"
                ));
            }
            _ => {
                return Err(format!(
                    "session {name} was not started by this server: sandtop_guest_stop stops only those"
                ));
            }
        }
        let Some(g) = self.in_use.remove(name) else {
            return Err(format!("no session {name}"));
        };
        let InUse { dir, rec, .. } = g;
        if self.current.as_deref() == Some(name) {
            self.current = self.bound.clone();
        }
        guest::stop(&self.store, &dir, &rec)
            .await
            .map_err(|e| format!("stopping {name}: {}", e.chain()))
    }

    /// Every session of the host, marked.
    pub async fn list(&self) -> anyhow::Result<Vec<Value>> {
        let mut rows = Vec::new();
        for (dir, rec) in self.store.list()? {
            let st = guest::state(&dir, &rec).await;
            let here = self.in_use.get(&rec.name).is_some_and(|g| g.started_here);
            let bound = self.bound.as_deref() == Some(rec.name.as_str());
            rows.push(entry(&rec, st, here, bound));
        }
        Ok(rows)
    }

    /// The default guest's name, if any.
    pub fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// At exit: removes the guests this server started, unless `keep`.
    pub async fn finish(&mut self, keep: bool) {
        let names: Vec<String> = self.in_use.keys().cloned().collect();
        for name in names {
            let Some(g) = self.in_use.remove(&name) else {
                continue;
            };
            if !g.started_here {
                continue;
            }
            if keep {
                eprintln!("host-cli mcp: keeping session {name}");
                continue;
            }
            let InUse {
                dir,
                rec,
                _control,
                _lock,
                ..
            } = g;
            drop(_control);
            drop(_lock);
            if let Err(e) = guest::stop(&self.store, &dir, &rec).await {
                eprintln!(
                    "host-cli mcp: removing session {name}: {}",
                    sandtop_hostkit::term::safe(&e.chain())
                );
            }
        }
    }
}

/// The network a `sandtop_guest_start` call asks for, within the
/// operator's: `none`, or `allow:` with origins the operator allowed.
pub fn network_within(
    asked: Option<&str>,
    operator: &EgressConfig,
) -> Result<EgressConfig, String> {
    let asked = asked.unwrap_or("none");
    let mode: NetworkMode = asked
        .parse()
        .map_err(|e: sandtop_egress::policy::PolicyError| format!("network: {e}"))?;
    match (&mode, &operator.mode) {
        (NetworkMode::None, _) => Ok(EgressConfig::none()),
        (NetworkMode::Allow { origins }, NetworkMode::Allow { origins: allowed }) => {
            if let Some(o) = origins.iter().find(|o| !allowed.contains(o)) {
                return Err(format!(
                    "network: {o} is not among the origins the operator allowed (host-cli mcp --network)"
                ));
            }
            Ok(EgressConfig {
                mode,
                allow_private: operator.allow_private.clone(),
                resolve: operator.resolve.clone(),
            })
        }
        // `ask`: the operator's own ask (its allow list and its questions
        // to the person), nothing more.
        (NetworkMode::Ask { origins }, NetworkMode::Ask { .. }) if origins.is_empty() => {
            Ok(operator.clone())
        }
        _ => Err(
            "network: only `none`, `allow:` with origins the operator allowed \
             (host-cli mcp --network allow:...), or `ask` when the operator chose \
             --network ask, may be asked for"
                .into(),
        ),
    }
}

fn entry(rec: &SessionRecord, st: State, started_here: bool, bound: bool) -> Value {
    json!({
        "name": rec.name,
        "backend": rec.backend(),
        "state": st,
        "screen": rec.screen.to_string(),
        "started_here": started_here,
        "bound": bound,
    })
}
