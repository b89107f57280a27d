//! N6: secrets; the journal of decisions.

use super::*;

// ---------------------------------------------------------------------------
// N6: secrets.

pub(crate) async fn secrets_never_reach_the_guest_or_the_proxy(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let g = &ctx.main;
    let c = g.inspect().await?;
    let whole = serde_json::to_string(&c)?;
    for s in &ctx.secrets {
        ensure!(!whole.contains(s.as_str()), "docker inspect holds {s}");
    }
    // Inside: no process has the names; nothing readable holds the values.
    let probe = g.probe(&[]).await?;
    let names = strs(&probe["env_names_all_processes"]);
    ensure!(!names.is_empty(), "the probe read no environment");
    for n in host_cli::SECRET_ENV {
        ensure!(!names.iter().any(|x| x == n), "{n} in the guest");
    }
    let r = g
        .py(&json!([{"op": "scan", "needles": ctx.secrets}]))
        .await?;
    ensure!(strs(&r[0]["hits"]).is_empty(), "in the guest: {}", r[0]);
    ensure!(r[0]["read"].as_u64().unwrap_or(0) > 10, "{}", r[0]);
    // The proxy: not in its environment nor command line.
    let pid = g.rec.egress_pid.context("no egress proxy")?;
    for f in ["environ", "cmdline"] {
        let b = std::fs::read(format!("/proc/{pid}/{f}"))?;
        let text = String::from_utf8_lossy(&b);
        for s in &ctx.secrets {
            ensure!(!text.contains(s.as_str()), "the proxy's {f} holds {s}");
        }
        for n in host_cli::SECRET_ENV {
            ensure!(
                !text.split('\0').any(|kv| kv.starts_with(&format!("{n}="))),
                "the proxy's {f} has {n}"
            );
        }
    }
    // Nor any file of the session.
    for e in std::fs::read_dir(&g.dir.path)?
        .chain(std::fs::read_dir(g.dir.guest_path())?)
        .flatten()
    {
        let p = e.path();
        if e.file_type()?.is_file() {
            let b = std::fs::read(&p)?;
            for s in &ctx.secrets {
                ensure!(
                    !String::from_utf8_lossy(&b).contains(s.as_str()),
                    "{} holds {s}",
                    p.display()
                );
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The journal.

pub(crate) async fn decisions_are_journalled_with_reasons(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = &ctx.main;
    let before = g.journal(0)?.len();
    let fake = ctx.net.fake_ip.to_string();
    let r = g
        .py(&json!([
            get("allowed.test", "/j-http"),
            tls("allowed.test:443", "/j-tls"),
            get("blocked.test", "/j-blocked"),
            tls("allowed.test.evil.test:443", "/j-prefix"),
            get("allowed.test:8080", "/j-port"),
            get(&fake, "/j-ip"),
            {"op": "tls", "authority": "allowed.test:443", "sni": "blocked.test", "path": "/j-sni"},
            get("meta.test", "/j-meta"),
            {"op": "get", "authority": "allowed.test", "host": "blocked.test", "path": "/j-host"},
        ]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false)?;
    landed_on(&r[1], "allowed.test", 443, true)?;
    // (origin, via, decision, reason, addresses)
    let fake_addrs = json!([fake]);
    let ip_origin = format!("http://{fake}");
    let want: Vec<(&str, &str, &str, String, Value)> = vec![
        (
            "http://allowed.test",
            "http",
            "allowed",
            "allowed".into(),
            fake_addrs.clone(),
        ),
        (
            "https://allowed.test",
            "connect",
            "allowed",
            "allowed".into(),
            fake_addrs.clone(),
        ),
        (
            "http://blocked.test",
            "http",
            "denied",
            "is not on the allowlist".into(),
            json!([]),
        ),
        (
            "https://allowed.test.evil.test",
            "connect",
            "denied",
            "is not on the allowlist".into(),
            json!([]),
        ),
        (
            "http://allowed.test:8080",
            "http",
            "denied",
            "is not on the allowlist".into(),
            json!([]),
        ),
        (
            &ip_origin,
            "http",
            "denied",
            "IP literals are refused".into(),
            json!([]),
        ),
        // The SNI check comes after the origin was allowed: both are logged.
        (
            "https://allowed.test",
            "connect",
            "denied",
            "TLS server name Name(\"blocked.test\") does not match".into(),
            fake_addrs.clone(),
        ),
        (
            "http://meta.test",
            "http",
            "denied",
            "metadata address 169.254.169.254".into(),
            json!(["169.254.169.254"]),
        ),
        (
            "http://allowed.test",
            "http",
            "denied",
            "the Host header `blocked.test` disagrees".into(),
            json!([]),
        ),
    ];
    let entries = wait_for("the journal entries", Duration::from_secs(10), || async {
        let e = g.journal(before).ok()?;
        (e.len() > want.len()).then_some(e)
    })
    .await?;
    // One entry per decision; the allowed SNI-mismatch CONNECT has two.
    ensure!(
        entries.len() == want.len() + 1,
        "{} entries: {entries:#?}",
        entries.len()
    );
    let mut last_t = 0;
    for e in &entries {
        ensure!(e["kind"] == "egress", "{e}");
        let t = e["t_unix_ms"].as_u64().context("no time")?;
        ensure!(t >= last_t, "out of order: {e}");
        last_t = t;
    }
    for (origin, via, decision, reason, addrs) in &want {
        ensure!(
            entries.iter().any(|e| e["origin"] == *origin
                && e["via"] == *via
                && e["decision"] == *decision
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(reason.as_str()))
                && e["addresses"] == *addrs),
            "no entry {origin} {via} {decision} `{reason}` {addrs} in {entries:#?}"
        );
    }
    Ok(())
}
