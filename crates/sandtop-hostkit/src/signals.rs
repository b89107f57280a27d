//! Signals that end a command: Ctrl-C, SIGTERM, SIGHUP.

use std::future::Future;

/// Runs `f` until it finishes or Ctrl-C / SIGTERM / SIGHUP arrives (then
/// `Err(signal name)`; `f` is dropped).
pub async fn until_interrupted<F: Future>(f: F) -> Result<F::Output, &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return Ok(f.await);
    };
    tokio::select! {
        r = f => Ok(r),
        _ = int.recv() => Err("Ctrl-C"),
        _ = term.recv() => Err("SIGTERM"),
        _ = hup.recv() => Err("SIGHUP"),
    }
}
