//! No way around the proxy (N1, N4, N5): the default, host services, nothing published.

use super::*;

// ---------------------------------------------------------------------------
// No way around the proxy.

pub(crate) async fn no_bypass_direct_udp_dns_or_interfaces(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let c = ctx.main.inspect().await?;
    let h = c.host_config.clone().context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "{:?}",
        h.network_mode
    );
    let nets: Vec<String> = c
        .network_settings
        .and_then(|s| s.networks)
        .unwrap_or_default()
        .into_keys()
        .collect();
    ensure!(nets == vec!["none".to_string()], "networks {nets:?}");
    let (fake, gw) = (ctx.net.fake_ip, ctx.net.gateway);
    let gw_before = ctx.host_gw.seen().len();
    let mut ops = vec![
        direct(fake, 80),
        direct(fake, 443),
        direct(gw, ctx.host_gw.addr.port()),
        json!({"op": "direct", "udp": true, "ip": fake.to_string(), "port": 53}),
        json!({"op": "dns", "name": "allowed.test"}),
        json!({"op": "dns", "name": "sandtop-dns-check.test"}),
        json!({"op": "ifaces"}),
    ];
    if let Some(b) = ctx.net.fake_bridge_ip {
        ops.push(direct(b, 80));
    }
    let r = ctx.main.py(&json!(ops)).await?;
    for x in r.iter().filter(|x| x["req"]["op"] != "ifaces") {
        failed_fast(x)?;
    }
    let i = r.iter().find(|x| x["req"]["op"] == "ifaces").unwrap();
    ensure!(strs(&i["interfaces"]) == vec!["lo".to_string()], "{i}");
    ensure!(i["ipv4_routes"] == 0, "{i}");
    ensure!(strs(&i["ipv6_interfaces"]).iter().all(|n| n == "lo"), "{i}");
    ensure!(
        ctx.host_gw.seen().len() == gw_before,
        "the gateway service saw {:?}",
        ctx.host_gw.seen()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// N1: the default.

pub(crate) async fn default_none_has_no_way_out(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let (g, _) = Guest::start(&ctx.base, "none", &[], &[]).await?;
    ensure!(
        g.rec.network.is_none() && g.rec.egress_pid.is_none(),
        "{:?}",
        g.rec
    );
    let h = g.inspect().await?.host_config.context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "{:?}",
        h.network_mode
    );
    let p = g.paths();
    for f in [&p.config, &p.guest_socket, &p.control, &p.journal, &p.log] {
        ensure!(!f.exists(), "{} exists without a policy", f.display());
    }
    ensure!(
        host_pids_with_cmdline(&g.dir.path.to_string_lossy()).is_empty(),
        "a process for this session runs on the host"
    );
    let fake = ctx.net.fake_ip;
    let r = g
        .py(&json!([
            direct(fake, 80),
            json!({"op": "direct", "udp": true, "ip": fake.to_string(), "port": 53}),
            json!({"op": "dns", "name": "allowed.test"}),
            json!({"op": "ifaces"}),
            json!({"op": "relay"}),
            json!({"op": "proxy_env"}),
        ]))
        .await?;
    for x in &r[..3] {
        failed_fast(x)?;
    }
    ensure!(
        strs(&r[3]["interfaces"]) == vec!["lo".to_string()],
        "{}",
        r[3]
    );
    ensure!(r[3]["ipv4_routes"] == 0, "{}", r[3]);
    // The proxy port answers nothing: closed at once, no bytes.
    let relay = &r[4];
    ensure!(
        relay["bytes"] == 0
            && relay["closed"] != false
            && relay["ms"].as_u64().unwrap_or(9999) < 1000,
        "the proxy path: {relay}"
    );
    let env = &r[5]["env"];
    ensure!(
        env["http_proxy"].is_null() && env["SANDTOP_EGRESS"] == "direct",
        "{}",
        r[5]
    );
    let ls = g
        .base
        .backend
        .exec(g.id(), &["ls", "-A", ids::GUEST_MOUNT], None, LONG)
        .await?;
    let names = String::from_utf8_lossy(&ls.stdout).into_owned();
    ensure!(!names.contains("egress"), "/run/sandtop: {names}");
    ensure!(ctx.landed("/n1-").await?.is_empty());
    g.stop().await
}

// ---------------------------------------------------------------------------
// N4: host services.

pub(crate) async fn host_services_are_unreachable(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let (gw, gwp, lop) = (
        ctx.net.gateway,
        ctx.host_gw.addr.port(),
        ctx.host_lo.addr.port(),
    );
    // The positive control: a container on the test network reaches the
    // service on the gateway; so the guest's failures below are its own.
    let ctl = ctx
        .base
        .backend
        .exec_as(
            &ctx.net.fake_id,
            "0:0",
            &[
                "python3",
                "-c",
                CONTROL_PY,
                &gw.to_string(),
                &gwp.to_string(),
                "/n4-control",
            ],
            None,
            LONG,
        )
        .await?;
    ensure!(
        ctl.exit_code == 0 && String::from_utf8_lossy(&ctl.stdout).contains("200"),
        "the control did not reach {gw}:{gwp}: {} {}",
        String::from_utf8_lossy(&ctl.stdout),
        String::from_utf8_lossy(&ctl.stderr)
    );
    let mut ops = vec![
        json!({"op": "direct", "ip": gw.to_string(), "port": gwp, "path": "/n4-direct"}),
        get(&format!("{gw}:{gwp}"), "/n4-ip"),
        get(&format!("loop.test:{lop}"), "/n4-loop"),
        get(&format!("blocked.test:{gwp}"), "/n4-unlisted"),
        // Listed, pinned to the gateway, in a range the operator allowed:
        // the explicit way in.
        get(&format!("host.test:{gwp}"), "/n4-explicit"),
    ];
    // Docker's default bridge gateway, where a daemon API might listen.
    let bridge_gw = ctx
        .docker()
        .inspect_network("bridge", None::<InspectNetworkOptions>)
        .await
        .ok()
        .and_then(|n| n.ipam?.config?.into_iter().find_map(|c| c.gateway));
    if let Some(b) = &bridge_gw {
        ops.push(json!({"op": "direct", "ip": b, "port": 2375}));
    }
    let r = ctx.main.py(&json!(ops)).await?;
    failed_fast(&r[0])?;
    refused(&r[1], "IP literals are refused")?;
    refused(&r[2], "non-public address 127.0.0.1")?;
    refused(&r[3], "is not on the allowlist")?;
    ensure!(
        r[4]["status"] == 200 && r[4]["body"] == "host-service",
        "explicitly allowed: {}",
        r[4]
    );
    if bridge_gw.is_some() {
        failed_fast(&r[5])?;
    }
    let np = ctx
        .noprivate
        .py(&json!([get(&format!("host.test:{gwp}"), "/n4-np")]))
        .await?;
    refused(&np[0], "non-public address")?;
    let seen: Vec<String> = ctx
        .host_gw
        .seen()
        .into_iter()
        .filter(|l| l.contains("/n4-"))
        .collect();
    ensure!(
        seen == vec![
            "GET /n4-control HTTP/1.1".to_string(),
            "GET /n4-explicit HTTP/1.1".to_string()
        ],
        "the gateway service saw {seen:?}"
    );
    ensure!(
        ctx.host_lo.seen().is_empty(),
        "the loopback service saw {:?}",
        ctx.host_lo.seen()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// N5: nothing published; the proxy's sockets.

/// Socket inodes of a process.
fn socket_inodes(pid: i32) -> anyhow::Result<BTreeSet<u64>> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        if let Ok(t) = std::fs::read_link(e.path())
            && let Some(n) = t
                .to_str()
                .and_then(|s| s.strip_prefix("socket:["))
                .and_then(|s| s.strip_suffix(']'))
        {
            out.insert(n.parse()?);
        }
    }
    Ok(out)
}

/// `(inode, state)` of the sockets in a /proc/net/{tcp,udp}* table.
fn inet_sockets(table: &str) -> Vec<(u64, String, String)> {
    std::fs::read_to_string(format!("/proc/net/{table}"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.get(9)?.parse().ok()?,
                f.get(3)?.to_string(),
                f.get(1)?.to_string(),
            ))
        })
        .collect()
}

/// `(inode, listening, path)` of the Unix sockets.
fn unix_sockets() -> Vec<(u64, bool, String)> {
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            Some((
                f.get(6)?.parse().ok()?,
                flags & 0x10000 != 0,
                f.get(7).map(|s| s.to_string()).unwrap_or_default(),
            ))
        })
        .collect()
}

pub(crate) async fn nothing_published_and_the_proxy_has_no_tcp_port(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let g = &ctx.main;
    let c = g.inspect().await?;
    let h = c.host_config.clone().context("HostConfig")?;
    ensure!(
        h.port_bindings.as_ref().is_none_or(|p| p.is_empty()) && h.publish_all_ports != Some(true),
        "port bindings {:?}",
        h.port_bindings
    );
    let ports = c.network_settings.as_ref().and_then(|n| n.ports.clone());
    ensure!(
        ports.as_ref().is_none_or(|p| p.is_empty()),
        "published {ports:?}"
    );
    ensure!(h.network_mode.as_deref() == Some("none"));
    // The proxy process: host-cli egress-proxy, alive, on Unix sockets only.
    let pid = g.rec.egress_pid.context("no egress proxy pid")?;
    let cmdline =
        std::fs::read(format!("/proc/{pid}/cmdline")).context("the egress proxy is not running")?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    ensure!(cmdline.contains("egress-proxy"), "pid {pid}: {cmdline}");
    let mine = socket_inodes(pid)?;
    ensure!(!mine.is_empty(), "the proxy has no socket");
    for table in ["tcp", "tcp6", "udp", "udp6"] {
        let hits: Vec<_> = inet_sockets(table)
            .into_iter()
            .filter(|(i, _, _)| mine.contains(i))
            .collect();
        ensure!(hits.is_empty(), "the proxy has {table} sockets: {hits:?}");
    }
    let p = g.paths();
    let listening: BTreeSet<String> = unix_sockets()
        .into_iter()
        .filter(|(i, l, _)| *l && mine.contains(i))
        .map(|(_, _, path)| path)
        .collect();
    let want = BTreeSet::from([
        p.control.to_string_lossy().into_owned(),
        p.guest_socket.to_string_lossy().into_owned(),
    ]);
    ensure!(listening == want, "the proxy listens on {listening:?}");
    // Modes the code sets.
    // (mode in octal, uid, gid)
    let mode = |f: &Path| -> anyhow::Result<(String, u32, u32)> {
        let m = std::fs::symlink_metadata(f).with_context(|| f.display().to_string())?;
        Ok((format!("{:o}", m.mode() & 0o7777), m.uid(), m.gid()))
    };
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    ensure!(
        mode(&p.control)? == ("600".into(), euid, egid),
        "control {:?}",
        mode(&p.control)?
    );
    let guest_owner = if rustix::process::geteuid().is_root() {
        (ids::GUEST_UID, ids::GUEST_GID)
    } else {
        (euid, egid)
    };
    // Only the guest's uid may connect; when the host user is neither root
    // nor that uid, "others" (the 0700 session folder keeps host users out).
    let guest_mode = if rustix::process::geteuid().is_root() || euid == ids::GUEST_UID {
        "600"
    } else {
        "666"
    };
    ensure!(
        mode(&p.guest_socket)? == (guest_mode.into(), guest_owner.0, guest_owner.1),
        "guest socket {:?}",
        mode(&p.guest_socket)?
    );
    ensure!(
        mode(&p.journal)?.0 == "600",
        "journal {:?}",
        mode(&p.journal)?
    );
    ensure!(
        mode(&g.dir.path)?.0 == "700",
        "session folder {:?}",
        mode(&g.dir.path)?
    );
    // Inside: the relay listens on loopback only.
    let probe = g
        .probe(&["--gateway", &ctx.net.gateway.to_string()])
        .await?;
    let listeners = strs(&probe["tcp_listeners"]);
    ensure!(
        listeners.iter().any(|l| l == "127.0.0.1:3128"),
        "no relay: {listeners:?}"
    );
    for l in &listeners {
        ensure!(
            l.starts_with("127.") || l.starts_with("[00000000000000000000000001000000]"),
            "a listener off loopback: {l}"
        );
    }
    Ok(())
}
