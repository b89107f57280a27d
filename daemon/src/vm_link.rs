//! `sandtopd vm-link`: the guest end of a VM guest's link (issue 16; the
//! design is in the `sandtop_vmlink` crate). Run by the VM's PID 1 as the
//! guest user:
//!
//! 1. opens the virtio-serial port, reads the session token the host sends
//!    first, and writes it to the token file (0600, created exclusively)
//!    that sandtopd reads;
//! 2. starts the entry program (`sandtop-entry`: the demo app, then
//!    `sandtopd serve`) as its child;
//! 3. carries the streams: the host's become connections to sandtopd's
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
    /// The entry program and its arguments.
    #[arg(last = true, required = true)]
    pub entry: Vec<String>,
}

pub async fn run(a: VmLinkArgs) -> anyhow::Result<()> {
    let mut port = Port::open(&a.port).with_context(|| format!("opening {}", a.port.display()))?;
    let line = read_preamble(&mut port, Duration::from_millis(50))
        .await
        .context("reading the token from the host")?;
    let text = std::str::from_utf8(&line).context("the token is not text")?;
    Token::parse(text)?.write_new(&a.token_file)?;
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
