//! C7, C9, H2, H3: limits, a display killed and restarted, readiness, a kill -9 during a start, four guests side by side.

use super::*;

/// C7: a fork bomb and a memory hog inside do not take the daemon down.
pub(crate) async fn limits_hold_against_a_fork_bomb_and_a_memory_hog(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let limits = limits::Limits {
        memory_bytes: 768 * 1024 * 1024,
        pids: 256,
        ..limits::Limits::default()
    };
    let b = ctx.backend.clone().with_limits(limits);
    let g = Guest::start_with(&ctx, "lim", &b).await?;
    let daemon_pid = |ps: &[Value]| {
        ps.iter()
            .find(|p| p["comm"] == "sandtopd")
            .and_then(|p| p["pid"].as_u64())
    };
    let before = daemon_pid(&g.processes().await?).context("no sandtopd")?;
    // Tasks (processes and threads) the guest runs when nothing else does.
    let calm = ctx.backend.memory_use(g.id()).await?.pids;
    // The stress is test-only shell run through exec; nothing of it ships
    // in the image. A fork bomb in its own process group (its id on the
    // first line): `sleep`s until the kernel refuses a fork (the shell
    // then dies), one line per start.
    let bomb = g
        .exec(&[
            "/bin/sh",
            "-c",
            "setsid /bin/sh -c 'echo pgid $$; i=0; \
             while [ $i -lt 100000 ]; do /bin/sleep 120 </dev/null >/dev/null 2>&1 & \
             i=$((i+1)); echo $i; done'; true",
        ])
        .await?;
    let out = String::from_utf8_lossy(&bomb.stdout);
    let pgid: u32 = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("pgid "))
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("the fork bomb did not say its group: {:?}", bomb.stdout))?;
    let started: u64 = out
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    let refused = String::from_utf8_lossy(&bomb.stderr).to_lowercase();
    ensure!(
        started > 10 && started < 256 && refused.contains("fork"),
        "the pids limit did not stop the fork bomb: {started} started, stderr {refused:?}"
    );
    let mut ch = g.channel(ChannelMode::Socket).await?;
    let h = ch.health().await?;
    ensure!(
        h.status == HealthStatus::Ok,
        "health after the fork bomb: {h:?}"
    );
    ensure!(act(&mut ch, json!([{"type": "move", "x": 5, "y": 5}])).await? == 1);
    // The group's `sleep`s hold all but a pid or two: the kill is one
    // process that forks nothing (a shell's `$(...)` could not fork), and
    // it is tried again while a thread of the guest holds the last pid.
    let group = format!("-{pgid}");
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let killed = g.exec(&["/bin/kill", "-KILL", "--", &group]).await;
        match killed {
            Ok(k) if k.exit_code == 0 => break,
            other => ensure!(
                Instant::now() < end,
                "killing the fork bomb's group {pgid} for 60 s: last {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // kill(2) returns before the group has died and been reaped; until
    // then its tasks still count against the pids limit, and the next
    // exec's shell could not fork (the memory hog would end with the
    // shell's status 2, not the OOM kill's).
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let pids = ctx.backend.memory_use(g.id()).await?.pids;
        if pids <= calm + 16 {
            break;
        }
        ensure!(
            Instant::now() < end,
            "the fork bomb's group was not reaped within 60 s: {pids} tasks, {calm} before it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A memory hog: `tail` keeps a line without a newline whole, so it
    // grows until the memory limit's OOM kill (128 + 9).
    let hog = ctx
        .backend
        .exec(
            g.id(),
            &[
                "/bin/sh",
                "-c",
                "head -c 4096M /dev/zero | tail -n 1 >/dev/null",
            ],
            None,
            Duration::from_secs(120),
        )
        .await?;
    ensure!(
        hog.exit_code == 137 || hog.exit_code == 9,
        "the memory hog was not killed (status {}): {}",
        hog.exit_code,
        String::from_utf8_lossy(&hog.stderr)
    );
    let h = ch.health().await?;
    ensure!(
        h.status == HealthStatus::Ok,
        "health after the memory hog: {h:?}"
    );
    let after = daemon_pid(&g.processes().await?).context("sandtopd is gone")?;
    ensure!(
        before == after,
        "the daemon was replaced ({before} -> {after})"
    );
    ensure!(act(&mut ch, json!([{"type": "move", "x": 9, "y": 9}])).await? == 1);
    g.stop().await
}

/// H2: Xvfb killed inside the guest is seen within 2 s and restarted; the
/// same for the window manager.
pub(crate) async fn killed_display_is_detected_and_restarted(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "h2").await?;
    let mut ch = g.channel(ChannelMode::Socket).await?;
    let h0 = ch.health().await?;
    ensure!(h0.status == HealthStatus::Ok, "{h0:?}");
    for (victim, bad) in [
        ("Xvfb", HealthStatus::Down),
        ("openbox", HealthStatus::Degraded),
    ] {
        let ps = g.processes().await?;
        let daemon = ps.iter().find(|p| p["comm"] == "sandtopd").cloned();
        let pid = ps
            .iter()
            .find(|p| p["comm"] == victim)
            .and_then(|p| p["pid"].as_u64())
            .with_context(|| format!("{victim} is not running"))?
            .to_string();
        // As the guest's uid, the daemon's own user; the pid travels as data.
        let k = g
            .exec(&["/bin/sh", "-c", "kill -9 \"$1\"", "sh", &pid])
            .await?;
        ensure!(
            k.exit_code == 0,
            "kill {victim}: {}",
            String::from_utf8_lossy(&k.stderr)
        );
        let t = Instant::now();
        // The supervisor may restart the window manager between two polls
        // (it takes a few ms), so `degraded` is never seen: a new openbox
        // pid is proof too that the death was noticed.
        let seen = loop {
            if let Ok(h) = ch.health().await
                && h.status != HealthStatus::Ok
            {
                break Some(h);
            }
            if victim == "openbox"
                && g.processes().await?.iter().any(|p| {
                    p["comm"] == victim
                        && p["pid"].as_u64().map(|n| n.to_string()) != Some(pid.clone())
                })
            {
                break None;
            }
            ensure!(
                t.elapsed() < LONG,
                "health to notice that {victim} died: timed out after {LONG:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let took = t.elapsed();
        ensure!(
            took <= Duration::from_secs(2),
            "H2: {victim}'s death took {took:?} to show in health"
        );
        if victim == "Xvfb" {
            let seen = seen.context("Xvfb's death did not show in health")?;
            ensure!(seen.status == bad || !seen.x_connected, "{seen:?}");
        } else if let Some(seen) = &seen {
            ensure!(seen.status == bad, "{seen:?}");
        }
        let back = health_until(&mut ch, |h| h.status == HealthStatus::Ok)
            .await
            .with_context(|| format!("{victim} to come back"))?;
        if victim == "Xvfb" {
            ensure!(back.display_restarts > h0.display_restarts, "{back:?}");
        }
        let ps = g.processes().await?;
        ensure!(
            ps.iter()
                .find(|p| p["comm"] == "sandtopd")
                .map(|p| &p["pid"])
                == daemon.as_ref().map(|d| &d["pid"]),
            "the daemon did not survive"
        );
        ensure!(
            ps.iter().any(|p| p["comm"] == victim),
            "{victim} was not restarted"
        );
        // And it works again.
        let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
        ensure!(
            shot.screenshot.width == 1280,
            "screenshot after the restart"
        );
    }
    g.stop().await
}

/// H3: ready means X answers; a start that times out shows the log tail
/// and leaves nothing behind.
pub(crate) async fn readiness_and_its_timeout(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "h3").await?;
    let mut ch = g.channel(ChannelMode::Socket).await?;
    let h = ch.health().await?;
    ensure!(
        h.status == HealthStatus::Ok && h.x_connected,
        "ready but {h:?}"
    );
    ensure!(h.window_manager == Some(true), "{h:?}");
    ensure!(
        ch.info().capabilities.xtest && ch.info().capabilities.shm,
        "capabilities"
    );
    let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
    ensure!((shot.screenshot.width, shot.screenshot.height) == (1280, 800));
    g.stop().await?;

    let name = format!("e2e-{}-h3t", ctx.run);
    let out = host_cli(&ctx, &[])
        .args(["guest", "start", "--name", &name, "--ready-timeout", "0s"])
        .output()
        .await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "a zero readiness timeout succeeded");
    ensure!(
        err.contains("did not become ready") && err.contains("its log ends with"),
        "H3 message: {err}"
    );
    ensure!(
        ctx.store.get(&name).is_err(),
        "the folder of the failed start is left"
    );
    let left = leftovers(&ctx).await?;
    ensure!(
        left.is_empty(),
        "containers left after the failed start: {left:?}"
    );
    Ok(())
}

/// C9: kill -9 of host-cli while it starts a guest, then `guest gc`.
pub(crate) async fn kill9_during_start_then_gc_leaves_nothing(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let name = format!("e2e-{}-k9", ctx.run);
    let mut child = host_cli(&ctx, &[])
        .args(["guest", "start", "--name", &name])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pid = child.id().context("no pid")?;
    let docker = ctx.backend.docker().clone();
    let label = format!("{}={name}", docker::LABEL_SESSION);
    wait_for("the container to be created", LONG, || {
        let docker = docker.clone();
        let label = label.clone();
        async move {
            let l = docker
                .list_containers(Some(
                    ListContainersOptionsBuilder::new()
                        .all(true)
                        .filters(&std::collections::HashMap::from([("label", vec![label])]))
                        .build(),
                ))
                .await
                .ok()?;
            (!l.is_empty()).then_some(())
        }
    })
    .await?;
    let pid = rustix::process::Pid::from_raw(pid as i32).context("pid")?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)?;
    let _ = child.wait().await;
    ensure!(
        !leftovers(&ctx).await?.is_empty(),
        "the killed start left no container: nothing for gc to do (the test proves nothing)"
    );
    let gc = host_cli(&ctx, &[]).args(["guest", "gc"]).output().await?;
    let said = String::from_utf8_lossy(&gc.stdout);
    ensure!(
        gc.status.success(),
        "gc: {}",
        String::from_utf8_lossy(&gc.stderr)
    );
    ensure!(
        said.contains(&name),
        "gc did not say what it removed: {said}"
    );
    let left = leftovers(&ctx).await?;
    ensure!(left.is_empty(), "C9 containers left after gc: {left:?}");
    ensure!(
        !ctx.state_dir.join("sessions").join(&name).exists(),
        "the session folder is left after gc"
    );
    Ok(())
}

pub(crate) async fn four_guests_side_by_side(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let starts = (0..4).map(|i| {
        let ctx = Arc::clone(&ctx);
        async move { Guest::start(&ctx, &format!("four{i}")).await }
    });
    let results = futures_util::future::join_all(starts).await;
    let mut guests = Vec::new();
    for r in results {
        guests.push(r?);
    }
    let mut ids: Vec<&str> = guests.iter().map(Guest::id).collect();
    ids.sort_unstable();
    ids.dedup();
    ensure!(ids.len() == 4, "4 distinct containers");
    for (i, g) in guests.iter().enumerate() {
        let mut ch = g.channel(ChannelMode::Auto).await?;
        let n = act(
            &mut ch,
            json!([
                {"type": "move", "x": 100 + i * 10, "y": 100},
                {"type": "click", "button": "left", "x": 100 + i * 10, "y": 100},
                {"type": "type", "text": format!("guest {i}")},
            ]),
        )
        .await?;
        ensure!(n == 3, "guest {i} ran {n} actions");
        let shot = ch
            .screenshot(&ScreenshotOptions {
                size: Some(Size::new(640, 400)),
                ..ScreenshotOptions::default()
            })
            .await?;
        ensure!(
            (shot.screenshot.width, shot.screenshot.height) == (640, 400),
            "guest {i} screenshot {}x{}",
            shot.screenshot.width,
            shot.screenshot.height
        );
    }
    for g in guests {
        g.stop().await?;
    }
    Ok(())
}
