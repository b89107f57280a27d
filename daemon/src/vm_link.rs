//! `sandtopd vm-link`: the guest end of a VM guest's link (the
//! design is in the `sandtop_vmlink` crate). Run by the VM's PID 1 as the
//! guest user:
//!
//! 1. starts the entry program (`sandtop-entry`: the demo app, then
//!    `sandtopd serve --await-token`) as its child, and waits until the
//!    daemon's health (unauthenticated, on its local socket) is `ok`: the
//!    desktop is up;
//! 2. only then opens the virtio-serial port: that is the moment host-cli
//!    takes a VM snapshot (docs/contract.md rule 85; QEMU reports the port open), so
//!    a snapshot holds the desktop up and no token;
//! 3. reads the session token the host sends first, waits for `--wait-file`
//!    (the VM's PID 1 writes it once the clock is the host's and, in a VM
//!    from a snapshot, the kernel has reseeded its random state), and
//!    writes the token to the token file (0600, created exclusively) that
//!    sandtopd is waiting for;
//! 4. carries the streams: the host's become connections to sandtopd's
//!    socket; connections to the egress socket become streams to the host.
//!
//! It exits when the entry program or the link ends; PID 1 then exits and
//! the VM powers off (`panic=-1` and QEMU's `-no-reboot`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandtop_client::Token;
use sandtop_protocol::session;
use sandtop_vmlink::{Mode, Port, Routes, bridge, read_preamble};

/// Options of `sandtopd vm-link`.
#[derive(Debug, Clone, clap::Args)]
pub struct VmLinkArgs {
    /// The virtio-serial port's device.
    #[arg(long)]
    pub port: PathBuf,
    /// Where the token the host sends is written (must not exist).
    #[arg(long, default_value = session::TOKEN_PATH)]
    pub token_file: PathBuf,
    /// sandtopd's API socket: the host's streams are connected to it.
    #[arg(long, default_value = session::SOCKET_PATH)]
    pub daemon_socket: PathBuf,
    /// Served here: each connection becomes a stream to the host's egress
    /// proxy (sandtopd's `--egress-relay` connects to it).
    #[arg(long, default_value = session::EGRESS_SOCKET_PATH)]
    pub egress_socket: PathBuf,
    /// Before the token is written and the streams carried, wait for this
    /// file to exist (PID 1's mark; up to 120 s, then give up).
    #[arg(long)]
    pub wait_file: Option<PathBuf>,
    /// The entry program and its arguments.
    #[arg(last = true, required = true)]
    pub entry: Vec<String>,
}

pub async fn run(a: VmLinkArgs) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(&a.egress_socket);
    let egress = tokio::net::UnixListener::bind(&a.egress_socket)
        .with_context(|| format!("binding {}", a.egress_socket.display()))?;
    let Some((program, args)) = a.entry.split_first() else {
        bail!("no entry program");
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    tokio::select! {
        status = child.wait() => bail!("{program} exited: {}", status?),
        () = desktop_up(&a.daemon_socket) => {}
    }
    let mut port = Port::open(&a.port).with_context(|| format!("opening {}", a.port.display()))?;
    let line = read_preamble(&mut port, Duration::from_millis(50))
        .await
        .context("reading the token from the host")?;
    let text = std::str::from_utf8(&line).context("the token is not text")?;
    let token = Token::parse(text)?;
    if let Some(f) = &a.wait_file {
        let t0 = std::time::Instant::now();
        while !f.exists() {
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("{} never appeared", f.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    token.write_new(&a.token_file)?;
    let routes = Routes {
        listen: Some(egress),
        connect: Some(a.daemon_socket.clone()),
    };
    tokio::select! {
        status = child.wait() => bail!("{program} exited: {}", status?),
        r = bridge(port, Mode::Server, routes) => {
            let _ = child.start_kill();
            r.context("the link to the host ended")?;
            bail!("the host closed the link")
        }
    }
}

/// Returns once the daemon on `socket` says its health is `ok` (the
/// display and the window manager serving), or after 300 s whatever it
/// says (the host then sees the daemon itself).
async fn desktop_up(socket: &std::path::Path) {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(300) {
        let ok = async {
            let mut c = sandtop_client::Client::connect(socket, None).await.ok()?;
            let (status, body) = c
                .request(http::Method::GET, sandtop_protocol::paths::HEALTH, None)
                .await
                .ok()?;
            let h: sandtop_protocol::Health = serde_json::from_slice(&body).ok()?;
            Some(status.is_success() && h.status == sandtop_protocol::HealthStatus::Ok)
        };
        if tokio::time::timeout(Duration::from_secs(5), ok)
            .await
            .ok()
            .flatten()
            == Some(true)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
