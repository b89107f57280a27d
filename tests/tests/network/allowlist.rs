//! N2 and N3: the allowlist; private ranges and the metadata address.

use super::*;

// ---------------------------------------------------------------------------
// N2: the allowlist.

pub(crate) async fn allowed_origin_over_http_and_https(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let r = ctx
        .main
        .py(&json!([
            urllib("http://allowed.test/n2ok-http"),
            urllib("https://allowed.test/n2ok-https"),
            tls("allowed.test:443", "/n2ok-raw-tls"),
            {"op": "proxy_env"},
        ]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false).context("http through the proxy")?;
    landed_on(&r[1], "allowed.test", 443, true).context("https through CONNECT")?;
    landed_on(&r[2], "allowed.test", 443, true).context("a raw CONNECT")?;
    // The desktop (and the browser it starts) is pointed at the proxy.
    let env = &r[3]["env"];
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        ensure!(env[k] == "http://127.0.0.1:3128", "{k}: {}", r[3]);
    }
    ensure!(env["SANDTOP_EGRESS"] == "proxy", "{}", r[3]);
    // Exactly those three requests reached the fake internet.
    let landed = ctx.landed("/n2ok-").await?;
    let paths: BTreeSet<String> = landed
        .iter()
        .filter_map(|v| v["path"].as_str().map(String::from))
        .collect();
    ensure!(
        landed.len() == 3
            && paths
                == BTreeSet::from([
                    "/n2ok-http".to_string(),
                    "/n2ok-https".into(),
                    "/n2ok-raw-tls".into()
                ]),
        "landed: {landed:?}"
    );
    Ok(())
}

pub(crate) async fn blocked_prefix_port_ip_literal_host_and_sni_tricks_fail(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let ip = ctx.net.fake_ip.to_string();
    let r = ctx
        .main
        .py(&json!([
            get("blocked.test", "/n2x-blocked"),
            tls("blocked.test:443", "/n2x-blocked-tls"),
            urllib("http://blocked.test/n2x-blocked-urllib"),
            get("allowed.test.evil.test", "/n2x-prefix"),
            tls("allowed.test.evil.test:443", "/n2x-prefix-tls"),
            get("allowed.test:8080", "/n2x-port"),
            tls("allowed.test:8443", "/n2x-port-tls"),
            get(&ip, "/n2x-ip"),
            tls(&format!("{ip}:443"), "/n2x-ip-tls"),
            // CONNECT to the allowed host, TLS naming the blocked one.
            {"op": "tls", "authority": "allowed.test:443", "sni": "blocked.test",
             "host": "blocked.test", "path": "/n2x-sni"},
            // A Host header that names another host than the target.
            {"op": "get", "authority": "allowed.test", "host": "blocked.test", "path": "/n2x-host"},
            {"op": "tls", "authority": "allowed.test:443", "connect_host": "blocked.test:443",
             "path": "/n2x-host-tls"},
            // User info in the authority.
            get("allowed.test@blocked.test", "/n2x-userinfo"),
        ]))
        .await?;
    refused(&r[0], "is not on the allowlist")?;
    refused(&r[1], "is not on the allowlist")?;
    refused(&r[2], "is not on the allowlist")?;
    refused(
        &r[3],
        "http://allowed.test.evil.test is not on the allowlist",
    )?;
    refused(
        &r[4],
        "https://allowed.test.evil.test is not on the allowlist",
    )?;
    refused(&r[5], "http://allowed.test:8080 is not on the allowlist")?;
    refused(&r[6], "https://allowed.test:8443 is not on the allowlist")?;
    refused(&r[7], "IP literals are refused")?;
    refused(&r[8], "IP literals are refused")?;
    let sni = &r[9];
    ensure!(
        sni["connect_status"] == 200 && sni["tls_error"].is_string() && sni["status"].is_null(),
        "the SNI mismatch got through: {sni}"
    );
    refused(&r[10], "disagrees with the target")?;
    refused(&r[11], "disagrees with the target")?;
    let ui = r[12]["status"].as_u64().unwrap_or(0);
    ensure!((400..500).contains(&ui), "user info: {}", r[12]);
    // None of them landed anywhere.
    let landed = ctx.landed("/n2x-").await?;
    ensure!(landed.is_empty(), "refused requests landed: {landed:?}");
    Ok(())
}

// ---------------------------------------------------------------------------
// N3: private ranges and the metadata address.

pub(crate) async fn private_and_metadata_addresses_fail_even_when_listed(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    // `main` lists 169.254.0.0/16 with --allow-private; the metadata
    // address is refused anyway. loop.test is listed, pinned to 127.0.0.1.
    let cfg = ctx
        .main
        .rec
        .network
        .clone()
        .context("main has no network")?;
    ensure!(
        cfg.allow_private
            .iter()
            .any(|c| format!("{}/{}", c.addr, c.prefix) == "169.254.0.0/16"),
        "{cfg:?}"
    );
    let lo = ctx.host_lo.addr.port();
    let r = ctx
        .main
        .py(&json!([
            get("meta.test", "/n3-meta"),
            get(&format!("loop.test:{lo}"), "/n3-loop"),
        ]))
        .await?;
    refused(&r[0], "resolves to the metadata address 169.254.169.254")?;
    refused(&r[1], "resolves to the non-public address 127.0.0.1")?;
    // Without --allow-private, the allowed names pinned to the test network
    // are refused too.
    let gw = ctx.host_gw.addr.port();
    let fake = ctx.net.fake_ip;
    let r = ctx
        .noprivate
        .py(&json!([
            urllib("http://allowed.test/n3-np-http"),
            urllib("https://allowed.test/n3-np-https"),
            get("allowed.test", "/n3-np-get"),
            tls("allowed.test:443", "/n3-np-tls"),
            get(&format!("host.test:{gw}"), "/n3-np-host"),
            get("meta.test", "/n3-np-meta"),
        ]))
        .await?;
    refused(&r[0], &format!("resolves to the non-public address {fake}"))?;
    // urllib reports a refused CONNECT as an error, not a status.
    ensure!(
        r[1]["error"].as_str().is_some_and(|e| e.contains("403")),
        "https without --allow-private: {}",
        r[1]
    );
    refused(&r[2], "non-public address")?;
    refused(&r[3], "non-public address")?;
    refused(&r[4], &format!("non-public address {}", ctx.net.gateway))?;
    refused(&r[5], "metadata address")?;
    let landed = ctx.landed("/n3-").await?;
    ensure!(landed.is_empty(), "refused requests landed: {landed:?}");
    ensure!(
        !ctx.host_gw.seen().iter().any(|l| l.contains("/n3-"))
            && !ctx.host_lo.seen().iter().any(|l| l.contains("/n3-")),
        "a host service was reached"
    );
    Ok(())
}
