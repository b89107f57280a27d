//! A guest on the test networks, and the checks of what its client saw.

use super::*;

/// A running guest; stopped (with its egress proxy) when dropped.
#[derive(Debug)]
pub(crate) struct Guest {
    pub(crate) base: Base,
    pub(crate) rec: SessionRecord,
    pub(crate) dir: SessionDir,
    pub(crate) stopped: bool,
}

impl Guest {
    /// `host-cli guest start --json --name net-RUN-TAG ARGS` with a scrubbed
    /// environment plus `env`; returns the guest and host-cli's stderr.
    pub(crate) async fn start(
        base: &Base,
        tag: &str,
        args: &[String],
        env: &[(&str, &str)],
    ) -> anyhow::Result<(Guest, String)> {
        let name = format!("net-{}-{tag}", base.run);
        let mut c = tokio::process::Command::new(&base.host_cli);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SANDTOP_STATE_DIR", &base.state_dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .args(["guest", "start", "--json", "--name", &name])
            .args(args);
        if let Some(h) = std::env::var_os("DOCKER_HOST") {
            c.env("DOCKER_HOST", h);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().await?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        // Adopt whatever exists, so that the guard removes it.
        let adopted = base
            .store
            .get(&name)
            .and_then(|dir| Ok((dir.load()?, dir)))
            .map(|(rec, dir)| Guest {
                base: base.clone(),
                rec,
                dir,
                stopped: false,
            });
        ensure!(
            out.status.success(),
            "guest start {args:?} failed: {stderr}"
        );
        let g = adopted?;
        let started: Value = serde_json::from_slice(&out.stdout)?;
        ensure!(started["container_id"] == g.id(), "{started}");
        Ok((g, stderr))
    }

    pub(crate) fn id(&self) -> &str {
        self.rec
            .docker()
            .map(|d| d.container_id.as_str())
            .unwrap_or("")
    }

    pub(crate) fn paths(&self) -> Paths {
        Paths::new(&self.dir.path, &self.dir.guest_path())
    }

    /// Runs the client's operations inside the guest, as the guest's uid.
    pub(crate) async fn py(&self, ops: &Value) -> anyhow::Result<Vec<Value>> {
        py_in(&self.base.backend, self.id(), ops).await
    }

    pub(crate) async fn probe(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut argv = vec!["/usr/local/bin/sandtop-probe"];
        argv.extend_from_slice(args);
        let r = self
            .base
            .backend
            .exec(self.id(), &argv, None, Duration::from_secs(120))
            .await?;
        ensure!(
            r.exit_code == 0,
            "sandtop-probe exited {}: {}",
            r.exit_code,
            String::from_utf8_lossy(&r.stderr)
        );
        serde_json::from_slice(&r.stdout).context("the probe's JSON")
    }

    pub(crate) async fn inspect(
        &self,
    ) -> anyhow::Result<bollard::models::ContainerInspectResponse> {
        Ok(self
            .base
            .backend
            .docker()
            .inspect_container(self.id(), None::<InspectContainerOptions>)
            .await?)
    }

    /// The entries of `egress.jsonl` after the first `skip`.
    pub(crate) fn journal(&self, skip: usize) -> anyhow::Result<Vec<Value>> {
        let text = std::fs::read_to_string(self.paths().journal).unwrap_or_default();
        text.lines()
            .skip(skip)
            .map(|l| serde_json::from_str(l).with_context(|| format!("a journal line: {l}")))
            .collect()
    }

    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        let pid = self.rec.egress_pid;
        guest::stop(&self.base.store, &self.dir, &self.rec).await?;
        if let Some(pid) = pid {
            // The proxy goes with the guest.
            wait_for(
                "the egress proxy to exit",
                Duration::from_secs(10),
                || async { (!Path::new(&format!("/proc/{pid}")).exists()).then_some(()) },
            )
            .await?;
        }
        Ok(())
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let (store, dir, rec) = (self.base.store.clone(), self.dir.clone(), self.rec.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Err(e) = guest::stop(&store, &dir, &rec).await {
                    eprintln!("network: removing {}: {}", rec.name, e.chain());
                }
            });
        })
        .join();
    }
}

pub(crate) async fn py_in(
    backend: &DockerBackend,
    container: &str,
    ops: &Value,
) -> anyhow::Result<Vec<Value>> {
    let arg = ops.to_string();
    let r = backend
        .exec(container, &["python3", "-c", CLIENT_PY, &arg], None, LONG)
        .await?;
    ensure!(
        r.exit_code == 0,
        "the client exited {}: {}",
        r.exit_code,
        String::from_utf8_lossy(&r.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&r.stdout).with_context(|| {
        format!(
            "the client's output: {}",
            String::from_utf8_lossy(&r.stdout)
        )
    })?;
    ensure!(
        v.len() == ops.as_array().map_or(0, Vec::len),
        "one result per operation"
    );
    if std::env::var_os("SANDTOP_NETWORK_VERBOSE").is_some() {
        for r in &v {
            eprintln!("  {r}");
        }
    }
    Ok(v)
}

pub(crate) async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > end {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// Checks on results.

/// The fake internet's answer in a result's body.
pub(crate) fn answer(r: &Value) -> Value {
    r["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null)
}

/// A request that got through and landed on `vhost` (and, over TLS, with
/// that server name) at `port`.
pub(crate) fn landed_on(r: &Value, vhost: &str, port: u16, tls: bool) -> anyhow::Result<()> {
    ensure!(r["status"] == 200, "expected 200: {r}");
    let a = answer(r);
    ensure!(
        a["vhost"] == vhost && a["port"] == port && a["tls"] == tls,
        "landed elsewhere: {a} ({r})"
    );
    if tls {
        ensure!(a["sni"] == vhost, "TLS server name {} ({r})", a["sni"]);
    }
    Ok(())
}

/// A request the proxy refused with 403 and a reason containing `why`.
pub(crate) fn refused(r: &Value, why: &str) -> anyhow::Result<()> {
    let (status, body) = if r["req"]["op"] == "tls" {
        (&r["connect_status"], &r["body"])
    } else {
        (&r["status"], &r["body"])
    };
    ensure!(status == 403, "expected 403: {r}");
    let body = body.as_str().unwrap_or("");
    ensure!(
        body.starts_with("sandtop egress proxy:") && body.contains(why),
        "expected the proxy's reason `{why}`: {r}"
    );
    Ok(())
}

/// A direct attempt that failed, fast.
pub(crate) fn failed_fast(r: &Value) -> anyhow::Result<()> {
    ensure!(r["ok"] == false, "it succeeded: {r}");
    ensure!(
        r["ms"].as_u64().unwrap_or(u64::MAX) < 2000,
        "it failed, but not fast: {r}"
    );
    Ok(())
}

pub(crate) fn get(authority: &str, path: &str) -> Value {
    json!({"op": "get", "authority": authority, "path": path})
}

pub(crate) fn tls(authority: &str, path: &str) -> Value {
    json!({"op": "tls", "authority": authority, "path": path})
}

pub(crate) fn urllib(url: &str) -> Value {
    json!({"op": "urllib", "url": url})
}

pub(crate) fn direct(ip: IpAddr, port: u16) -> Value {
    json!({"op": "direct", "ip": ip.to_string(), "port": port})
}

pub(crate) fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
