//! The boundary between a guest and the host's other users:
//!
//! - docs/security.md C12: a host process of uid 1000 (the first human account on most
//!   hosts) can neither read the session's token nor connect to the
//!   daemon's socket, through the session folder or through
//!   `/proc/PID/root` of the guest's processes; one of the guest's own uid
//!   cannot reach the session folder and finds no token file;
//! - docs/security.md F3: the guest's `/run/sandtop` is a size-capped, `noexec` tmpfs
//!   that shows no host path in the guest's `/proc/self/mountinfo`.
//!
//! The host-side attempts run in a child process of this test binary (the
//! "host probe", [`host_probe`]) started with another uid and gid and no
//! supplementary groups (std's `CommandExt::uid`/`gid`, which drop them
//! when the parent is root), from a copy every uid may execute wherever
//! the checkout is (`sandtop_testkit::other_uid`); the same probe run as
//! root is the control that shows each attempt can succeed.

use sandtop_protocol::session;
use sandtop_testkit::other_uid::Runnable;

use super::*;

/// Set in a child run of this binary: run [`host_probe`] instead of the
/// cases. Its arguments are `read:PATH`, `connect:PATH` and `remove:PATH`.
pub const HOST_PROBE_ENV: &str = "SANDTOP_E2E_HOST_PROBE";

/// The host probe: one JSON object per argument, in order, on one line:
/// `{"op": "read"|"connect"|"remove", "path": P, "ok": bool, "error": "..."}`.
pub fn host_probe(args: &[String]) -> ExitCode {
    let mut out = Vec::new();
    for a in args {
        let (op, path) = a.split_once(':').unwrap_or(("?", a));
        let r: std::io::Result<()> = match op {
            "read" => std::fs::read(path).map(|_| ()),
            "connect" => std::os::unix::net::UnixStream::connect(path).map(|_| ()),
            "remove" => std::fs::remove_dir_all(path),
            _ => Err(std::io::Error::other("unknown op")),
        };
        out.push(json!({
            "op": op,
            "path": path,
            "ok": r.is_ok(),
            "error": r.err().map(|e| e.to_string()),
        }));
    }
    println!("{}", Value::Array(out));
    ExitCode::SUCCESS
}

/// Runs the host probe as `uid:gid` (`None`: as this process). Another
/// uid runs a [`Runnable`] copy of this binary: it may not reach the
/// build folder (docs/security.md C12).
fn run_host_probe(ids: Option<(u32, u32)>, ops: &[String]) -> anyhow::Result<Vec<Value>> {
    let copy;
    let mut cmd = match ids {
        Some((u, g)) => {
            copy = Runnable::current_exe().context("a copy of the test binary")?;
            copy.command_as(u, g)
        }
        None => std::process::Command::new(std::env::current_exe()?),
    };
    cmd.args(ops)
        .env(HOST_PROBE_ENV, "1")
        .current_dir("/")
        .stdin(std::process::Stdio::null());
    let out = cmd.output().context("running the host probe")?;
    ensure!(
        out.status.success(),
        "the host probe as {ids:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).context("the host probe's JSON")?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

/// The pid, on the host, of a container's first process.
async fn host_pid(ctx: &Ctx, id: &str) -> anyhow::Result<i64> {
    let c = ctx
        .backend
        .docker()
        .inspect_container(id, None::<InspectContainerOptions>)
        .await?;
    c.state
        .and_then(|s| s.pid)
        .filter(|p| *p > 0)
        .context("the container has no pid")
}

/// docs/security.md C12: neither uid 1000 nor the guest's uid reaches the
/// token or the daemon's socket from the host.
pub async fn other_host_users_cannot_reach_a_guest(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    if !rustix::process::geteuid().is_root() {
        println!("  SKIP: running the probe as other uids needs root");
        return Ok(());
    }
    // No host account has the guest's ids (guest start checks it too).
    ids::check_guest_ids_unused()?;
    let g = Guest::start(&ctx, "uid").await?;
    let cfg = ctx
        .backend
        .docker()
        .inspect_container(g.id(), None::<InspectContainerOptions>)
        .await?
        .config
        .context("Config")?;
    ensure!(
        cfg.user.as_deref() == Some(ids::guest_user().as_str()),
        "the container runs as {:?}",
        cfg.user
    );
    let p = g.probe(&[], &ids::guest_user()).await?;
    ensure!(
        p["ids"]["uid"] == ids::GUEST_UID && p["ids"]["gid"] == ids::GUEST_GID,
        "the guest's processes run as {}",
        p["ids"]
    );
    // The guest's copy of the token is gone once the daemon answered.
    ensure!(
        !g.dir.guest_path().join(session::TOKEN_NAME).exists(),
        "the token is still in the guest's folder"
    );
    let pid = host_pid(&ctx, g.id()).await?;
    let via_proc = format!("/proc/{pid}/root{}", ids::GUEST_MOUNT);
    let host_token = g.dir.token_path().display().to_string();
    let host_socket = g
        .dir
        .guest_path()
        .join(session::SOCKET_NAME)
        .display()
        .to_string();
    let ops = vec![
        format!("read:{host_token}"),
        format!("connect:{host_socket}"),
        format!("read:{via_proc}/{}", session::TOKEN_NAME),
        format!("connect:{via_proc}/{}", session::SOCKET_NAME),
    ];
    // Control: root gets the host's token and the socket by both paths (the
    // guest's token copy is gone for everyone).
    let root = run_host_probe(None, &ops)?;
    let ok: Vec<bool> = root.iter().map(|r| r["ok"] == true).collect();
    ensure!(
        ok == [true, true, false, true],
        "control as root: {}",
        Value::Array(root)
    );
    ensure!(
        root[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("No such file")),
        "control as root: {}",
        root[2]
    );
    // uid 1000 (the first human account on most hosts, the guest's uid
    // once; docs/security.md C12): refused everywhere.
    let first = run_host_probe(Some((1000, 1000)), &ops)?;
    for r in &first {
        ensure!(
            r["ok"] == false,
            "uid 1000 reached {}: {}",
            r["path"],
            Value::Array(first.clone())
        );
    }
    for r in [&first[0], &first[1], &first[3]] {
        ensure!(
            r["error"]
                .as_str()
                .is_some_and(|e| e.contains("Permission denied")),
            "uid 1000: {r}"
        );
    }
    // The guest's uid on the host: the session folder is out of reach, and
    // no file holds the token any more. Through /proc/PID/root it is the
    // guest itself (it can reach its own socket from inside anyway); that
    // is why no host account may have this uid.
    let guest = run_host_probe(Some((ids::GUEST_UID, ids::GUEST_GID)), &ops)?;
    for r in &guest[..3] {
        ensure!(
            r["ok"] == false,
            "the guest's uid reached {}: {}",
            r["path"],
            Value::Array(guest.clone())
        );
    }
    println!(
        "  as uid 1000: {}\n  as the guest's uid: {}",
        Value::Array(first),
        Value::Array(guest)
    );
    g.stop().await
}

/// Runs `script` with `sh -c` in the guest as the guest's user; its
/// stdout (stderr appended).
async fn sh(g: &Guest, script: &str) -> anyhow::Result<String> {
    let r = g.exec(&["/bin/sh", "-c", script]).await?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    ))
}

/// `name=NUMBER` from a script's output.
fn figure(out: &str, name: &str) -> anyhow::Result<i64> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {name}= in: {out}"))
}

/// docs/security.md F3: `/run/sandtop` is a tmpfs of its own: writing stops at
/// its size (and its inodes), nothing there runs, and the guest's
/// mountinfo shows no host path.
pub async fn the_guest_folder_is_capped_noexec_and_anonymous(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    if !rustix::process::geteuid().is_root() {
        println!("  SKIP: the guest folder is a tmpfs only when host-cli runs as root");
        return Ok(());
    }
    let g = Guest::start(&ctx, "fold").await?;
    let m = ids::GUEST_MOUNT;

    // On the host: a tmpfs of the configured size, not the host's disk.
    let st = rustix::fs::statvfs(g.dir.guest_path())?;
    let host_bytes = st.f_blocks * st.f_frsize;
    ensure!(
        host_bytes == guest_folder::GUEST_FOLDER_BYTES,
        "the guest folder's filesystem holds {host_bytes} bytes"
    );

    // Exec refused: a copy of /bin/true, mode 0755, does not run, neither
    // directly nor through the dynamic loader (mmap PROT_EXEC refused).
    let out = sh(
        &g,
        &format!(
            "cp /bin/true {m}/t && chmod 0755 {m}/t && ls -l {m}/t; /bin/true; echo control=$?; \
             {m}/t; echo direct=$?; \
             if [ -x /lib64/ld-linux-x86-64.so.2 ]; then /lib64/ld-linux-x86-64.so.2 {m}/t; \
             echo loader=$?; else echo loader=1; fi; rm -f {m}/t"
        ),
    )
    .await?;
    ensure!(
        out.contains("-rwxr-xr-x"),
        "the copy is not executable: {out}"
    );
    ensure!(figure(&out, "control")? == 0, "control: {out}");
    ensure!(figure(&out, "direct")? == 126, "exec from {m}: {out}");
    ensure!(figure(&out, "loader")? != 0, "exec through ld.so: {out}");

    // Write until refused: stops at the folder's size.
    let out = sh(
        &g,
        &format!(
            "dd if=/dev/zero of={m}/fill bs=65536 count=1024; echo dd=$?; \
             echo size=$(stat -c %s {m}/fill); rm -f {m}/fill"
        ),
    )
    .await?;
    let size = figure(&out, "size")?;
    ensure!(
        figure(&out, "dd")? != 0 && out.contains("No space left"),
        "dd was not refused: {out}"
    );
    ensure!(
        size > 0 && size as u64 <= guest_folder::GUEST_FOLDER_BYTES,
        "wrote {size} bytes: {out}"
    );
    // And files until refused: stops at the folder's inodes.
    let out = sh(
        &g,
        &format!(
            "i=0; while [ $i -lt 1000 ]; do touch {m}/n$i 2>/dev/null || break; i=$((i+1)); done; \
             echo made=$i; rm -f {m}/n*"
        ),
    )
    .await?;
    let made = figure(&out, "made")?;
    ensure!(
        made > 0 && (made as u64) < guest_folder::GUEST_FOLDER_INODES,
        "made {made} files: {out}"
    );
    println!(
        "  refused after {size} bytes ({} MiB cap) and {made} files ({} inodes)",
        guest_folder::GUEST_FOLDER_BYTES / (1024 * 1024),
        guest_folder::GUEST_FOLDER_INODES
    );

    // The guest's mountinfo: /run/sandtop is the root of a tmpfs, noexec,
    // and no line names the host's state directory, home or user.
    let info = sh(&g, "cat /proc/self/mountinfo").await?;
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(m))
        .with_context(|| format!("no {m} in the guest's mountinfo:\n{info}"))?;
    let f: Vec<&str> = line.split(' ').collect();
    let after = line.split(" - ").nth(1).unwrap_or("");
    ensure!(f[3] == "/", "the mount's root is {:?}: {line}", f[3]);
    ensure!(after.starts_with("tmpfs sandtop "), "{line}");
    for want in ["noexec", "nosuid", "nodev"] {
        ensure!(f[5].split(',').any(|o| o == want), "{want}: {line}");
    }
    let mut secrets = vec![
        ctx.state_dir.display().to_string(),
        "sandtop-e2e-".to_string(),
        "/sessions/".to_string(),
    ];
    if let Some(home) = std::env::var_os("HOME").filter(|h| h.len() > 1) {
        secrets.push(format!("{}/", Path::new(&home).display()));
    }
    if let Ok(user) = std::env::var("USER")
        && !user.is_empty()
    {
        secrets.push(format!("/{user}/"));
    }
    for s in &secrets {
        ensure!(
            !info.contains(s.as_str()),
            "the guest's mountinfo shows {s:?}:\n{info}"
        );
    }

    // The daemon still answers through its socket in that folder.
    let mut ch = g.channel(ChannelMode::Socket).await?;
    ensure!(ch.health().await?.status == HealthStatus::Ok, "health");
    // Stopping unmounts the tmpfs on the host.
    let path = g.dir.guest_path().display().to_string();
    g.stop().await?;
    let host = std::fs::read_to_string("/proc/self/mountinfo")?;
    ensure!(
        !host
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(path.as_str())),
        "the tmpfs is still mounted on {path}"
    );
    Ok(())
}

/// A running container labelled like a session of `owner_uid` (on `host`,
/// this host when `None`) whose folder is `folder`: the guest image with
/// `sleep` as its only process, as the guest's user, no network.
async fn labelled_container(
    ctx: &Ctx,
    name: &str,
    folder: &Path,
    owner_uid: u32,
    host: Option<&str>,
) -> anyhow::Result<String> {
    let mut labels = docker::session_labels(name, folder);
    labels.insert(docker::LABEL_OWNER_UID.into(), owner_uid.to_string());
    if let Some(h) = host {
        labels.insert(docker::LABEL_OWNER_HOST.into(), h.to_string());
    }
    let body = bollard::models::ContainerCreateBody {
        image: Some(docker::DEFAULT_IMAGE.to_string()),
        user: Some(ids::guest_user()),
        entrypoint: Some(vec!["/bin/sleep".into()]),
        cmd: Some(vec!["600".into()]),
        labels: Some(labels),
        host_config: Some(bollard::models::HostConfig {
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let d = ctx.backend.docker();
    let id = d
        .create_container(
            Some(
                bollard::query_parameters::CreateContainerOptionsBuilder::new()
                    .name(&format!("sandtop-{name}"))
                    .build(),
            ),
            body,
        )
        .await?
        .id;
    d.start_container(&id, None).await?;
    Ok(id)
}

/// [`labelled_container`], then stopped: a session whose guest is gone
/// (docs/security.md C14: a stopped container is what proves it, not a folder
/// gc cannot see).
async fn stopped_container(
    ctx: &Ctx,
    name: &str,
    folder: &Path,
    owner_uid: u32,
    host: Option<&str>,
) -> anyhow::Result<String> {
    let id = labelled_container(ctx, name, folder, owner_uid, host).await?;
    ctx.backend
        .docker()
        .stop_container(
            &id,
            Some(
                bollard::query_parameters::StopContainerOptionsBuilder::new()
                    .t(0)
                    .build(),
            ),
        )
        .await?;
    Ok(id)
}

/// `host-cli guest gc --json` run as `uid` (primary group: the engine
/// socket's group, so that it may use Docker, and nothing else) with
/// `state` as its state directory: its report lines. It runs a
/// [`Runnable`] copy of host-cli (docs/security.md C12).
fn gc_as(ctx: &Ctx, uid: u32, docker_gid: u32, state: &Path) -> anyhow::Result<Vec<String>> {
    let copy = Runnable::of(&ctx.host_cli).context("a copy of host-cli")?;
    let mut cmd = copy.command_as(uid, docker_gid);
    cmd.args(["guest", "gc", "--json"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SANDTOP_STATE_DIR", state)
        .current_dir("/")
        .stdin(std::process::Stdio::null());
    if let Some(h) = std::env::var_os("DOCKER_HOST") {
        cmd.env("DOCKER_HOST", h);
    }
    let out = cmd.output()?;
    ensure!(
        out.status.success(),
        "gc as uid {uid}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("gc's JSON")
}

/// docs/security.md C13: two users of one host and engine; `guest gc` of each
/// removes only its own containers whose session is provably gone, never
/// the other's (live or not: its folder cannot be seen), nor another
/// host's.
pub async fn gc_removes_only_what_its_own_user_left(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    if !rustix::process::geteuid().is_root() {
        println!("  SKIP: acting as two users needs root");
        return Ok(());
    }
    let sock = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(String::from))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let docker_gid = std::fs::metadata(&sock)?.gid();
    ensure!(docker_gid != 0, "the engine's socket {sock} has no group");
    let (a, b) = (1000u32, 1001u32);
    // Each user's state directory, 0700 and theirs, under a folder both
    // may enter.
    let top = tempfile::Builder::new()
        .prefix("sandtop-e2e-users-")
        .tempdir()?;
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o711))?;
    let store_of = |uid: u32| -> anyhow::Result<(PathBuf, Store)> {
        let p = top.path().join(format!("u{uid}"));
        let store = Store::at(p.clone())?;
        Ok((p, store))
    };
    let (a_state, a_store) = store_of(a)?;
    let (b_state, b_store) = store_of(b)?;
    let run = &ctx.run;
    let mut ids: Vec<(String, String)> = Vec::new();
    let result =
        async {
            let a_live = live_session(&ctx, &a_store, a, format!("e2e-{run}-a-live")).await?;
            ids.push(("a-live".into(), a_live.clone()));
            let b_live = live_session(&ctx, &b_store, b, format!("e2e-{run}-b-live")).await?;
            ids.push(("b-live".into(), b_live.clone()));
            // A dead session of each user (its guest stopped, its folder is
            // gone), and one of another host.
            let gone = |state: &Path, n: &str| state.join("sessions").join(n);
            let n = format!("e2e-{run}-a-dead");
            let a_dead = stopped_container(&ctx, &n, &gone(&a_state, &n), a, None).await?;
            ids.push(("a-dead".into(), a_dead.clone()));
            let n = format!("e2e-{run}-b-dead");
            let b_dead = stopped_container(&ctx, &n, &gone(&b_state, &n), b, None).await?;
            ids.push(("b-dead".into(), b_dead.clone()));
            // A's session whose guest runs but whose folder A's gc cannot see
            // (as from another mount namespace): not proven gone (docs/security.md
            // C14).
            let n = format!("e2e-{run}-a-unseen");
            let a_unseen = labelled_container(&ctx, &n, &gone(&a_state, &n), a, None).await?;
            ids.push(("a-unseen".into(), a_unseen.clone()));
            let n = format!("e2e-{run}-far");
            let far = labelled_container(
                &ctx,
                &n,
                &gone(&a_state, &n),
                a,
                Some("machine-id:0123456789abcdef"),
            )
            .await?;
            ids.push(("far".into(), far.clone()));
            for (state, uid) in [(&a_state, a), (&b_state, b)] {
                chown_tree(state, uid)?;
            }
            // A's gc: only a-dead goes.
            let lines = gc_as(&ctx, a, docker_gid, &a_state)?;
            println!("  gc as uid {a}: {lines:?}");
            ensure!(
                !exists(&ctx, &a_dead).await,
                "a-dead is still there: {lines:?}"
            );
            for (what, id) in [
                ("a-live", &a_live),
                ("a-unseen", &a_unseen),
                ("b-live", &b_live),
                ("b-dead", &b_dead),
                ("far", &far),
            ] {
                ensure!(exists(&ctx, id).await, "A's gc removed {what}: {lines:?}");
            }
            ensure!(
                lines.iter().any(|l| l.contains("-a-unseen) alone: it runs")
                    && l.contains("not visible from here")),
                "{lines:?}"
            );
            ensure!(
                lines
                    .iter()
                    .any(|l| l.contains("-b-live) alone: it belongs to uid 1001")),
                "{lines:?}"
            );
            ensure!(
                lines
                    .iter()
                    .any(|l| l.contains("-far) alone: it belongs to another host")),
                "{lines:?}"
            );
            // B's gc: only b-dead goes.
            let lines = gc_as(&ctx, b, docker_gid, &b_state)?;
            println!("  gc as uid {b}: {lines:?}");
            ensure!(
                !exists(&ctx, &b_dead).await,
                "b-dead is still there: {lines:?}"
            );
            for (what, id) in [("a-live", &a_live), ("b-live", &b_live), ("far", &far)] {
                ensure!(exists(&ctx, id).await, "B's gc removed {what}: {lines:?}");
            }
            ensure!(
                a_store.get(&format!("e2e-{run}-a-live")).is_ok(),
                "A's folder"
            );
            anyhow::Ok(())
        }
        .await;
    for (_, id) in &ids {
        let _ = ctx.backend.remove(id).await;
    }
    result
}

/// docs/security.md C12 (its last sentences): the cases above run programs of the build folder as other
/// uids; they pass from a checkout in a private folder (mode 0700, as
/// `/root` is, or a `mktemp -d` folder), run as root as CI runs. The
/// checkout's build folder is this run's: its test binary and host-cli
/// linked (or copied, across filesystems) into
/// `PRIVATE/checkout/target/debug/` as cargo lays them out, so no second
/// build is needed; each case runs in a child run of that copy.
pub async fn the_other_uid_cases_pass_from_a_checkout_in_a_private_folder(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if !rustix::process::geteuid().is_root() {
        println!("  SKIP: the cases it runs need root");
        return Ok(());
    }
    let private = tempfile::Builder::new()
        .prefix("sandtop-e2e-private-")
        .tempdir()?;
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))?;
    let debug = private.path().join("checkout/target/debug");
    std::fs::create_dir_all(debug.join("deps"))?;
    let me = std::env::current_exe()?;
    let place = |src: &Path, dst: &Path| -> anyhow::Result<()> {
        if std::fs::hard_link(src, dst).is_err() {
            std::fs::copy(src, dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
        Ok(())
    };
    let copy = debug
        .join("deps")
        .join(me.file_name().context("no file name")?);
    place(&me, &copy)?;
    place(&ctx.host_cli, &debug.join("host-cli"))?;
    ensure!(
        !sandtop_testkit::other_uid::searchable_by_all(&debug),
        "{} is reachable by every uid: not the case to test",
        debug.display()
    );
    for case in [
        "other_host_users_cannot_reach_a_guest",
        "gc_removes_only_what_its_own_user_left",
        "a_non_root_guest_folder_is_capped_and_gc_leaves_nothing",
    ] {
        let out = tokio::process::Command::new(&copy)
            .args(["--exact", case])
            .current_dir(private.path())
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("running the copy")?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(
            out.status.success()
                && text.contains(&format!("test {case} ..."))
                && text.contains("test result: ok. 1 passed")
                && text.contains("e2e result: ok"),
            "{case} from {}: {}\n{text}",
            copy.display(),
            out.status
        );
        ensure!(!text.contains("SKIP"), "{case} skipped:\n{text}");
        println!("  {case}: ok from {}", copy.display());
    }
    Ok(())
}

/// Whether a container exists.
async fn exists(ctx: &Ctx, id: &str) -> bool {
    ctx.backend
        .docker()
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .is_ok()
}

/// A live session of `uid` in `store`: a folder with its record and its
/// running container.
async fn live_session(ctx: &Ctx, store: &Store, uid: u32, name: String) -> anyhow::Result<String> {
    let dir = store.create(&name)?;
    let id = labelled_container(ctx, &name, &dir.path, uid, None).await?;
    dir.save(&SessionRecord {
        name: name.clone(),
        screen: Size::new(1280, 800),
        created_unix: 1,
        guest: host_cli::session::BackendRecord::Docker(host_cli::session::DockerRecord {
            container_id: id.clone(),
            container_name: format!("sandtop-{name}"),
            image: docker::DEFAULT_IMAGE.into(),
        }),
        network: None,
        egress_pid: None,
    })?;
    Ok(id)
}

/// Gives `p` and everything under it to `uid:uid`, never through a link.
fn chown_tree(p: &Path, uid: u32) -> anyhow::Result<()> {
    use rustix::fs::{AtFlags, CWD, Gid, Uid};
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(uid));
    rustix::fs::chownat(CWD, p, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW)?;
    if std::fs::symlink_metadata(p)?.is_dir() {
        for e in std::fs::read_dir(p)? {
            chown_tree(&e?.path(), uid)?;
        }
    }
    Ok(())
}

/// The engine socket's group (`DOCKER_HOST`'s socket, else the local one):
/// a user of that group may use Docker without being root.
fn engine_gid() -> anyhow::Result<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let sock = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(String::from))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let gid = std::fs::metadata(&sock)?.gid();
    ensure!(gid != 0, "the engine's socket {sock} has no group");
    Ok(gid)
}

/// `host-cli ARGS` run as `uid` (primary group `gid`, nothing else) with
/// `state` as its state directory, from a [`Runnable`] copy; its output.
fn host_cli_as(
    ctx: &Ctx,
    uid: u32,
    gid: u32,
    state: &Path,
    args: &[&str],
) -> anyhow::Result<std::process::Output> {
    let copy = Runnable::of(&ctx.host_cli).context("a copy of host-cli")?;
    let mut cmd = copy.command_as(uid, gid);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SANDTOP_STATE_DIR", state)
        .current_dir("/")
        .stdin(std::process::Stdio::null());
    for k in ["DOCKER_HOST", "SANDTOP_IMAGE"] {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    Ok(cmd.output()?)
}

/// Every path under `p` (itself included) owned by `uid`, never through a
/// link.
fn owned_by(p: &Path, uid: u32) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let mut out = Vec::new();
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return out;
    };
    if m.uid() == uid {
        out.push(p.to_path_buf());
    }
    if m.is_dir()
        && let Ok(rd) = std::fs::read_dir(p)
    {
        for e in rd.flatten() {
            out.extend(owned_by(&e.path(), uid));
        }
    }
    out
}

/// docs/security.md F4: host-cli run by a user who is not root (uid 1000, in
/// the engine socket's group only). The guest's `/run/sandtop` is the
/// engine's tmpfs: writing stops at 1 MiB and creating files before 64
/// inodes, the token there is read-only and emptied once the daemon
/// answers, the egress socket (bound read-only) still carries a request
/// to the host's proxy, and nothing the guest writes reaches the host: no
/// file of the guest's uid anywhere in the session folder, whose `guest/`
/// stays the user's, 0700. Then the guest dies and that user's `guest gc`
/// leaves nothing; and a folder of the old layout, holding a read-only
/// folder of the guest's uid the user cannot remove (what a guest could
/// leave before), is removed by `guest gc` as the guest's uid in a
/// throwaway container.
pub async fn a_non_root_guest_folder_is_capped_and_gc_leaves_nothing(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    if !rustix::process::geteuid().is_root() {
        println!("  SKIP: acting as a user who is not root needs root");
        return Ok(());
    }
    let gid = engine_gid()?;
    let uid = 1000u32;
    let top = tempfile::Builder::new()
        .prefix("sandtop-e2e-nonroot-")
        .tempdir()?;
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o711))?;
    let state = top.path().join(format!("u{uid}"));
    let store = Store::at(state.clone())?;
    chown_tree(&state, uid)?;
    let name = format!("e2e-{}-nonroot", ctx.run);
    let mut containers: Vec<String> = Vec::new();
    let result = async {
        let out = host_cli_as(
            &ctx,
            uid,
            gid,
            &state,
            &[
                "guest",
                "start",
                "--name",
                &name,
                "--network",
                "allow:https://allowed.test",
            ],
        )?;
        ensure!(
            out.status.success(),
            "guest start as uid {uid}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = store.get(&name)?;
        let rec = dir.load()?;
        let id = rec.docker().context("a docker record")?.container_id.clone();
        containers.push(id.clone());
        let sh = |script: String| {
            let b = &ctx.backend;
            let id = id.clone();
            async move {
                let r = b.exec(&id, &["/bin/sh", "-c", &script], None, LONG).await?;
                anyhow::Ok(format!(
                    "{}{}",
                    String::from_utf8_lossy(&r.stdout),
                    String::from_utf8_lossy(&r.stderr)
                ))
            }
        };
        let m = ids::GUEST_MOUNT;

        // Past the cap: 4 MiB asked, at most 1 MiB written.
        let out = sh(format!(
            "dd if=/dev/zero of={m}/fill bs=65536 count=64; echo dd=$?; \
             echo size=$(stat -c %s {m}/fill)"
        ))
        .await?;
        let size = figure(&out, "size")?;
        ensure!(
            figure(&out, "dd")? != 0 && out.contains("No space left"),
            "dd was not refused: {out}"
        );
        ensure!(
            size > 0 && size as u64 <= guest_folder::GUEST_FOLDER_BYTES,
            "wrote {size} bytes: {out}"
        );
        // Files until refused (the big one stays: it must not reach the
        // host either).
        let out = sh(format!(
            "i=0; while [ $i -lt 1000 ]; do touch {m}/n$i 2>/dev/null || break; i=$((i+1)); done; \
             echo made=$i"
        ))
        .await?;
        let made = figure(&out, "made")?;
        ensure!(
            made > 0 && (made as u64) < guest_folder::GUEST_FOLDER_INODES,
            "made {made} files: {out}"
        );
        let out = sh(format!("rm -f {m}/n*; mkdir -m 0500 {m}/trap; echo trap=$?")).await?;
        ensure!(figure(&out, "trap")? == 0, "{out}");
        println!(
            "  as uid {uid}: refused after {size} bytes ({} MiB cap) and {made} files ({} inodes)",
            guest_folder::GUEST_FOLDER_BYTES / (1024 * 1024),
            guest_folder::GUEST_FOLDER_INODES
        );
        // The guest's mountinfo: /run/sandtop is a tmpfs, noexec.
        let info = sh("cat /proc/self/mountinfo".into()).await?;
        let line = info
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(m))
            .with_context(|| format!("no {m} in the guest's mountinfo:\n{info}"))?;
        let f: Vec<&str> = line.split(' ').collect();
        ensure!(
            line.split(" - ").nth(1).unwrap_or("").starts_with("tmpfs "),
            "{line}"
        );
        for want in ["noexec", "nosuid", "nodev"] {
            ensure!(f[5].split(',').any(|o| o == want), "{want}: {line}");
        }
        // The token: emptied once the daemon answered, and read-only.
        let out = sh(format!(
            "echo len=$(wc -c < {m}/token); echo x > {m}/token; echo write=$?"
        ))
        .await?;
        ensure!(figure(&out, "len")? == 0, "the token is still there: {out}");
        ensure!(figure(&out, "write")? != 0, "the token was writable: {out}");
        // The egress socket, bound read-only, reaches the host's proxy: a
        // CONNECT outside the policy gets its refusal.
        let out = sh(format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); \
             s.connect('{m}/egress.sock'); \
             s.sendall(b'CONNECT blocked.test:443 HTTP/1.1\\r\\nHost: blocked.test:443\\r\\n\\r\\n'); \
             print('reply=' + s.recv(64).decode(errors='replace').splitlines()[0])\""
        ))
        .await?;
        ensure!(
            out.contains("reply=HTTP/1.1 403"),
            "the egress socket: {out}"
        );
        // Nothing of the guest's on the host.
        let mine = owned_by(&dir.path, ids::GUEST_UID);
        ensure!(mine.is_empty(), "the guest's files on the host: {mine:?}");
        let g = std::fs::metadata(dir.guest_path())?;
        ensure!(
            (g.uid(), g.mode() & 0o7777) == (uid, 0o700),
            "guest/ is {}:{:o}",
            g.uid(),
            g.mode() & 0o7777
        );
        let names: Vec<String> = std::fs::read_dir(dir.guest_path())?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        ensure!(
            names == vec![session::EGRESS_SOCKET_NAME.to_string()],
            "guest/ holds {names:?}"
        );

        // The guest dies (no `guest stop`): the user's gc leaves nothing.
        ctx.backend
            .docker()
            .kill_container(&id, None::<bollard::query_parameters::KillContainerOptions>)
            .await?;
        let out = host_cli_as(&ctx, uid, gid, &state, &["guest", "gc", "--json"])?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "gc as uid {uid}: {text}");
        println!("  gc as uid {uid}: {}", String::from_utf8_lossy(&out.stdout).trim());
        ensure!(!exists(&ctx, &id).await, "the container is left: {text}");
        ensure!(!dir.path.exists(), "the session folder is left: {text}");

        // The old layout's leftovers: a session folder whose guest/ was
        // open to the guest, which left a 0500 folder of its uid with a
        // file in it; its container is gone.
        let old = format!("e2e-{}-oldlayout", ctx.run);
        let odir = store.create(&old)?;
        odir.save(&SessionRecord {
            name: old.clone(),
            screen: Size::new(1280, 800),
            created_unix: 1,
            guest: host_cli::session::BackendRecord::Docker(host_cli::session::DockerRecord {
                container_id: "0".repeat(64),
                container_name: format!("sandtop-{old}"),
                image: docker::DEFAULT_IMAGE.into(),
            }),
            network: None,
            egress_pid: None,
        })?;
        chown_tree(&odir.path, uid)?;
        old_layout_guest(&odir.guest_path(), uid)?;
        // The control: the same layout elsewhere, which the user alone
        // cannot remove.
        let control = top.path().join("control");
        std::fs::create_dir(&control)?;
        chown_tree(&control, uid)?;
        old_layout_guest(&control.join("guest"), uid)?;
        let tried = run_host_probe(
            Some((uid, uid)),
            &[format!("remove:{}", control.join("guest").display())],
        )?;
        ensure!(
            tried[0]["ok"] == false && control.join("guest/trap").exists(),
            "the control: uid {uid} removed the old layout alone: {tried:?}"
        );
        let out = host_cli_as(&ctx, uid, gid, &state, &["guest", "gc", "--json"])?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("  gc of the old layout as uid {uid}: {}", text.trim());
        ensure!(out.status.success(), "gc as uid {uid}: {text}");
        ensure!(!odir.path.exists(), "the old folder is left: {text}");
        ensure!(text.contains("throwaway container"), "{text}");
        let left: Vec<String> = std::fs::read_dir(state.join("sessions"))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        ensure!(left.is_empty(), "sessions left: {left:?}");
        anyhow::Ok(())
    }
    .await;
    for id in &containers {
        let _ = ctx.backend.remove(id).await;
    }
    result
}

/// What a guest could leave in its `guest/` folder before the layout of docs/security.md F4,
/// when host-cli ran as `uid` (not root): the folder `g` of `uid`, mode
/// 0777, holding a file and a 0500 folder of the guest's uid with a folder
/// and a file in it.
fn old_layout_guest(g: &Path, uid: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir(g)?;
    chown_tree(g, uid)?;
    std::fs::set_permissions(g, std::fs::Permissions::from_mode(0o777))?;
    let trap = g.join("trap");
    std::fs::create_dir_all(trap.join("deep"))?;
    std::fs::write(trap.join("deep/fill"), vec![0u8; 4096])?;
    std::fs::write(g.join("loose"), b"x")?;
    chown_tree(&trap, ids::GUEST_UID)?;
    chown_tree(&g.join("loose"), ids::GUEST_UID)?;
    std::fs::set_permissions(trap.join("deep"), std::fs::Permissions::from_mode(0o500))?;
    std::fs::set_permissions(&trap, std::fs::Permissions::from_mode(0o500))?;
    Ok(())
}
