//! C1-C11, N1, N5, N6: what a guest can reach and hold, seen from inside and outside.

use super::*;

pub(crate) async fn security_from_inside_and_outside(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    // Started the way a user does, with an API key in host-cli's
    // environment that must not reach the guest (N6).
    let key = format!("sk-e2e-{}-never-in-the-guest", ctx.run);
    let name = format!("e2e-{}-sec", ctx.run);
    let out = host_cli(&ctx, &[("OPENAI_API_KEY", &key)])
        .args(["guest", "start", "--json", "--name", &name])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "guest start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started: Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        started["container"] == format!("sandtop-{name}"),
        "{started}"
    );
    ensure!(started["backend"] == "docker", "{started}");
    let g = Guest::adopt(&ctx, ctx.store.get(&name)?.load()?)?;
    ensure!(started["container_id"] == g.id());
    let token = g.token()?;
    let docker = ctx.backend.docker();

    // --- Outside: the container as the engine has it.
    let c = docker
        .inspect_container(g.id(), None::<InspectContainerOptions>)
        .await?;
    let whole = serde_json::to_string(&c)?;
    ensure!(
        !whole.contains(token.expose()),
        "the token is in docker inspect"
    );
    ensure!(!whole.contains(&key), "the API key is in docker inspect");
    let h = c.host_config.clone().context("HostConfig")?;
    let cfg = c.config.clone().context("Config")?;
    ensure!(
        cfg.user.as_deref() == Some(ids::guest_user().as_str()),
        "C1 user {:?}",
        cfg.user
    );
    ensure!(
        h.cap_drop == Some(vec!["ALL".to_string()]),
        "C2 {:?}",
        h.cap_drop
    );
    ensure!(
        h.cap_add.as_ref().is_none_or(|v| v.is_empty()),
        "C2 cap_add"
    );
    let sec = h.security_opt.clone().unwrap_or_default();
    ensure!(
        sec.iter().any(|s| s.starts_with("no-new-privileges")),
        "C3 {sec:?}"
    );
    ensure!(!sec.iter().any(|s| s.contains("seccomp")), "C4 {sec:?}");
    ensure!(h.privileged != Some(true), "C5 privileged");
    ensure!(
        h.devices.as_ref().is_none_or(|d| d.is_empty()),
        "C5 devices"
    );
    let mounts = c.mounts.clone().unwrap_or_default();
    ensure!(mounts.len() == 1, "C5 mounts {mounts:?}");
    ensure!(
        mounts[0].destination.as_deref() == Some(ids::GUEST_MOUNT)
            && mounts[0].source.as_deref() == g.dir.guest_path().to_str(),
        "C5 the only mount is the session's guest folder: {mounts:?}"
    );
    ensure!(h.binds.as_ref().is_none_or(|b| b.is_empty()), "C5 binds");
    ensure!(h.readonly_rootfs == Some(true), "C6 read-only root");
    let tmpfs = h.tmpfs.clone().unwrap_or_default();
    ensure!(tmpfs.len() == 2, "C6 tmpfs {tmpfs:?}");
    for (p, o) in &tmpfs {
        for want in ["nosuid", "nodev", "noexec", "size="] {
            ensure!(o.contains(want), "C6 {p}: {o}");
        }
    }
    let mem = h.memory.unwrap_or(0);
    ensure!(
        mem > 0 && h.memory_swap == Some(mem),
        "C7 memory {mem} swap {:?}",
        h.memory_swap
    );
    ensure!(h.pids_limit.unwrap_or(0) > 0, "C7 pids");
    ensure!(h.nano_cpus.unwrap_or(0) > 0, "C7 cpus");
    ensure!(h.shm_size.unwrap_or(0) > 0, "C7 shm");
    let labels = cfg.labels.clone().unwrap_or_default();
    ensure!(labels.get(docker::LABEL_SESSION) == Some(&name), "C9 label");
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "N1 network {:?}",
        h.network_mode
    );
    ensure!(
        h.port_bindings.as_ref().is_none_or(|p| p.is_empty()) && h.publish_all_ports != Some(true),
        "N5 ports"
    );
    let ports = c.network_settings.as_ref().and_then(|n| n.ports.clone());
    ensure!(
        ports.as_ref().is_none_or(|p| p.is_empty()),
        "N5 published {ports:?}"
    );
    let env = cfg.env.clone().unwrap_or_default();
    let env_names: Vec<&str> = env.iter().filter_map(|e| e.split('=').next()).collect();
    ensure!(
        env_names.iter().all(|n| [
            "SANDTOP_SCREEN",
            "SANDTOP_EGRESS",
            "PATH",
            "HOME",
            "LANG",
            "DISPLAY"
        ]
        .contains(n)),
        "N6 the container's environment: {env_names:?}"
    );
    // C11: the image.
    let img = docker.inspect_image(docker::DEFAULT_IMAGE).await?;
    let icfg = img.config.context("image config")?;
    ensure!(
        icfg.healthcheck
            .as_ref()
            .and_then(|hc| hc.test.as_ref())
            .is_some_and(|t| !t.is_empty()),
        "C11 HEALTHCHECK"
    );
    let iuser = icfg.user.unwrap_or_default();
    ensure!(
        !iuser.is_empty() && !iuser.starts_with('0') && iuser != "root",
        "C11 USER {iuser}"
    );

    // --- Inside, as the desktop user.
    let gateway = docker
        .inspect_network(
            "bridge",
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .ok()
        .and_then(|n| n.ipam?.config?.into_iter().find_map(|c| c.gateway))
        .unwrap_or_else(|| "172.17.0.1".to_string());
    let p = g
        .probe(&["--gateway", &gateway], &ids::guest_user())
        .await?;
    let text = p.to_string();
    ensure!(
        !text.contains(token.expose()),
        "the probe saw the token's value"
    );
    ensure!(
        p["ids"]["uid"] == ids::GUEST_UID && p["ids"]["gid"] == ids::GUEST_GID,
        "C1 {}",
        p["ids"]
    );
    ensure!(strs(&p["sudo"]).is_empty(), "C1 sudo {}", p["sudo"]);
    ensure!(
        strs(&p["setid_files"]).is_empty(),
        "C1 setid {}",
        p["setid_files"]
    );
    let zero = "0000000000000000";
    for k in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
        ensure!(p["caps"][k] == zero, "C2 {k} {}", p["caps"][k]);
    }
    ensure!(p["no_new_privs"] == 1, "C3 {}", p["no_new_privs"]);
    ensure!(p["seccomp"] == 2, "C4 seccomp {}", p["seccomp"]);
    ensure!(
        strs(&p["docker_sockets"]).is_empty(),
        "C5 {}",
        p["docker_sockets"]
    );
    for d in strs(&p["devices"]) {
        let basic = [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/tty",
            "/dev/console",
            "/dev/ptmx",
            "/dev/pts/ptmx",
        ];
        ensure!(
            basic.contains(&d.as_str()) || d.starts_with("/dev/pts/"),
            "C5 device node {d}"
        );
    }
    for m in p["mounts"].as_array().cloned().unwrap_or_default() {
        let (mp, fs) = (
            m["mount"].as_str().unwrap_or(""),
            m["fstype"].as_str().unwrap_or(""),
        );
        let virtual_fs = [
            "proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2",
        ];
        let docker_files = ["/etc/resolv.conf", "/etc/hostname", "/etc/hosts"];
        ensure!(
            mp == "/"
                || virtual_fs.contains(&fs)
                || docker_files.contains(&mp)
                || mp == ids::GUEST_MOUNT,
            "C5 unexpected mount {m}"
        );
    }
    ensure!(p["root_readonly"] == true, "C6 root");
    for d in ["/", "/etc", "/usr/local/bin", "/var/tmp"] {
        let r = p["write_tests"][d].as_str().unwrap_or("");
        ensure!(r.contains("Read-only"), "C6 writing in {d}: {r}");
    }
    let tmpfs_in: Vec<Value> = p["tmpfs"].as_array().cloned().unwrap_or_default();
    for want in ["/tmp", "/home/user"] {
        let t = tmpfs_in
            .iter()
            .find(|t| t["mount"] == want)
            .with_context(|| format!("C6 no tmpfs on {want}"))?;
        ensure!(
            t["nosuid"] == true
                && t["nodev"] == true
                && t["noexec"] == true
                && t["size"].is_string(),
            "C6 {t}"
        );
        let ran = p["noexec_effective"][want].as_str().unwrap_or("");
        ensure!(
            ran.starts_with("refused"),
            "C6 a program copied to {want}: {ran}"
        );
    }
    let cg = &p["cgroup"];
    let (mem_in, pids_in) = match cg["version"].as_u64() {
        Some(2) => (cg["memory_max"].clone(), cg["pids_max"].clone()),
        _ => (cg["memory_limit_bytes"].clone(), cg["pids_max"].clone()),
    };
    let as_num = |v: &Value| v.as_str().and_then(|s| s.parse::<i64>().ok());
    ensure!(
        as_num(&mem_in) == Some(mem),
        "C7 memory seen inside {mem_in}"
    );
    ensure!(as_num(&pids_in) == h.pids_limit, "C7 pids inside {pids_in}");
    if cg["version"] == 1 {
        ensure!(
            as_num(&cg["memsw_limit_bytes"]) == Some(mem),
            "C7 swap inside {cg}"
        );
    }
    ensure!(
        p["pid1"]
            .as_str()
            .is_some_and(|s| s.starts_with("/usr/bin/tini")),
        "C8 PID 1 {}",
        p["pid1"]
    );
    ensure!(
        p["x_tcp_open"].as_array().is_some_and(|a| a.is_empty()),
        "C10 {}",
        p["x_tcp_open"]
    );
    let xvfb = p["processes"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["comm"] == "Xvfb").cloned())
        .context("Xvfb not running")?;
    let xpid = xvfb["pid"].as_u64().unwrap_or(0).to_string();
    let xargs = g.exec(&["cat", &format!("/proc/{xpid}/cmdline")]).await?;
    ensure!(
        String::from_utf8_lossy(&xargs.stdout)
            .replace('\0', " ")
            .contains("-nolisten tcp"),
        "C10 Xvfb arguments"
    );
    ensure!(
        strs(&p["compilers"]).is_empty(),
        "C11 compilers {}",
        p["compilers"]
    );
    ensure!(
        strs(&p["package_caches"]).is_empty(),
        "C11 caches {}",
        p["package_caches"]
    );
    let net = &p["network"];
    for k in ["dns", "internet_1_1_1_1_443", "gateway_reach"] {
        ensure!(net[k]["ok"] == false, "N1 {k} succeeded: {}", net[k]);
        ensure!(
            net[k]["ms"].as_u64().unwrap_or(u64::MAX) < 2000,
            "N1 {k} is not fast: {}",
            net[k]
        );
    }
    ensure!(
        strs(&net["interfaces"]) == vec!["lo".to_string()],
        "N1 {}",
        net["interfaces"]
    );
    for l in strs(&p["tcp_listeners"]) {
        ensure!(
            l.starts_with("127.") || l.starts_with("[00000000000000000000000001000000]"),
            "N5 a listener off loopback: {l}"
        );
    }
    let all_env = strs(&p["env_names_all_processes"]);
    for secret in host_cli::SECRET_ENV {
        ensure!(
            !all_env.iter().any(|n| n == secret),
            "N6 {secret} in the guest"
        );
        ensure!(
            !strs(&p["env_names"]).iter().any(|n| n == secret),
            "N6 {secret}"
        );
    }
    ensure!(
        p["run_sandtop_extra"]
            .as_array()
            .is_some_and(|a| a.is_empty()),
        "/run/sandtop holds more than token and socket: {}",
        p["run_sandtop_extra"]
    );

    // --- Inside, as root in the container: still no capabilities, and
    // the walk for setuid/setgid files reaches every folder.
    let r = g.probe(&[], "0:0").await?;
    for k in ["CapEff", "CapPrm", "CapBnd"] {
        ensure!(r["caps"][k] == zero, "C2 root {k} {}", r["caps"][k]);
    }
    ensure!(r["no_new_privs"] == 1 && r["seccomp"] == 2, "C3/C4 root");
    ensure!(
        strs(&r["setid_files"]).is_empty(),
        "C1 setid (root walk) {}",
        r["setid_files"]
    );
    ensure!(
        r["setid_walk"]["errors"] == 0,
        "C1 the root walk missed folders: {}",
        r["setid_walk"]["unreadable"]
    );

    // --- C8: an orphan is reaped by the init.
    let o = g.probe(&["orphans"], &ids::guest_user()).await?;
    ensure!(o["orphan_pid"].is_u64(), "C8 {o}");
    ensure!(
        o["orphan_parent"] == 1,
        "C8 the orphan's parent {}",
        o["orphan_parent"]
    );
    ensure!(
        o["orphan_state_after_exit"].is_null(),
        "C8 the orphan was not reaped: {o}"
    );
    ensure!(
        o["zombies"].as_array().is_some_and(|a| a.is_empty()),
        "C8 zombies {o}"
    );

    // --- Never in logs or host process lists.
    let logs = host_cli(&ctx, &[])
        .args(["guest", "logs", &name])
        .output()
        .await?;
    ensure!(logs.status.success(), "guest logs failed");
    let logs = String::from_utf8_lossy(&logs.stdout);
    ensure!(logs.contains("sandtopd is serving"), "guest logs: {logs}");
    ensure!(
        !logs.contains(token.expose()) && !logs.contains(&key),
        "a secret in the log"
    );
    ensure!(
        host_cmdlines_containing(token.expose()).is_empty(),
        "the token in a host command line"
    );

    // `guest ls --json` shows the container; `guest stop` removes it.
    let ls = host_cli(&ctx, &[])
        .args(["guest", "ls", "--json"])
        .output()
        .await?;
    let ls: Value = serde_json::from_slice(&ls.stdout)?;
    let row = ls
        .as_array()
        .and_then(|a| a.iter().find(|r| r["name"] == name.as_str()).cloned())
        .context("ls misses the session")?;
    ensure!(
        row["container"] == format!("sandtop-{name}") && row["state"] == "running",
        "{row}"
    );
    let id = g.id().to_string();
    let mut g = g;
    g.stopped = true;
    let stop = host_cli(&ctx, &[])
        .args(["guest", "stop", &name])
        .output()
        .await?;
    ensure!(
        stop.status.success(),
        "guest stop: {}",
        String::from_utf8_lossy(&stop.stderr)
    );
    ensure!(
        !ctx.backend.running(&id).await?,
        "C9 still running after stop"
    );
    let gone = docker
        .inspect_container(&id, None::<InspectContainerOptions>)
        .await
        .is_err();
    ensure!(gone, "C9 the container is still there after stop");
    ensure!(
        ctx.store.get(&name).is_err(),
        "the session folder is still there"
    );
    Ok(())
}
