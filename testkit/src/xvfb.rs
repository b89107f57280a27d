//! A private Xvfb per test: its own display number (picked by the server
//! with `-displayfd`, so parallel tests never race), killed on drop.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::skip;

/// A running Xvfb.
#[derive(Debug)]
pub struct Xvfb {
    child: Child,
    /// `:N`
    pub display: String,
    pub width: u32,
    pub height: u32,
}

impl Xvfb {
    /// Starts Xvfb at `width`x`height`x24, or returns `None` after printing
    /// why (or panics when the x11 tier is required).
    pub fn start(width: u32, height: u32) -> Option<Xvfb> {
        if !skip::have("Xvfb") {
            skip::skip("x11", "Xvfb is not installed (make deps installs it)");
            return None;
        }
        let mut child = Command::new("Xvfb")
            .args(["-screen", "0", &format!("{width}x{height}x24")])
            .args(["-nolisten", "tcp", "-noreset", "-displayfd", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning Xvfb");
        let stdout = child.stdout.take().expect("Xvfb stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("Xvfb did not report its display within 10 s");
        let n: u32 = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("Xvfb reported `{line}` instead of a display number")
        });
        Some(Xvfb {
            child,
            display: format!(":{n}"),
            width,
            height,
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
