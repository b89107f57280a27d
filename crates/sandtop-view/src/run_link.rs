//! The view's side of a run's control socket (`control::wire`): the run's
//! events go to the pages, the operator's commands go to the run. With no
//! run attached the view answers `take`/`act`/`give` itself: it takes the
//! session's run lock (so no run starts meanwhile) and sends the
//! operator's actions to the daemon through the same checked action API.

use std::sync::Arc;
use std::time::Duration;

use sandtop_protocol::{BatchRequest, ScreenshotOptions};
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::hub::Hub;
use sandtop_channel::Channel;
use sandtop_control::line::{fill_line, parse_actions};
use sandtop_control::wire::{Command, Event, SOCKET_NAME};
use sandtop_guest::session::SessionDir;
use sandtop_guest::session::{RunLock, hold_session};

/// How often the view looks for a run's socket while none is attached.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Runs until the process ends.
pub async fn link<F, Fut>(
    hub: Arc<Hub>,
    dir: SessionDir,
    mut commands: mpsc::Receiver<Command>,
    mut open: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Channel, crate::Error>>,
{
    let path = dir.path.join(SOCKET_NAME);
    let mut local = Local::default();
    loop {
        if local.lock.is_none()
            && let Ok(stream) = UnixStream::connect(&path).await
        {
            {
                hub.cache().run_attached = true;
            }
            hub.announce_view();
            attached(&hub, stream, &mut commands).await;
            hub.run_detached();
            continue;
        }
        tokio::select! {
            cmd = commands.recv() => match cmd {
                Some(cmd) => local.handle(&hub, &dir, cmd, &mut open).await,
                None => return,
            },
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Relays until the run closes its socket.
async fn attached(hub: &Hub, stream: UnixStream, commands: &mut mpsc::Receiver<Command>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        tokio::select! {
            // Cancel-safe: a command sent while an event is half arrived
            // loses none of it.
            n = fill_line(&mut read, &mut line) => {
                match n {
                    Ok(true) => {}
                    _ => return,
                }
                let event = serde_json::from_slice::<Event>(&line);
                line.clear();
                match event {
                    Ok(e) => hub.run_event(e),
                    Err(e) => {
                        tracing::warn!(error = %e, "an unreadable line from the run's control socket");
                        return;
                    }
                }
            }
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { return };
                let Ok(mut text) = serde_json::to_vec(&cmd) else { continue };
                text.push(b'\n');
                if write.write_all(&text).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The operator's control without a run.
#[derive(Default)]
struct Local {
    lock: Option<RunLock>,
    channel: Option<Channel>,
}

impl Local {
    async fn handle<F, Fut>(&mut self, hub: &Hub, dir: &SessionDir, cmd: Command, open: &mut F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Channel, crate::Error>>,
    {
        let refuse = |what: &str, why: String| {
            hub.run_event(Event::Refused {
                what: what.into(),
                why,
            });
        };
        match cmd {
            Command::Answer { .. } => refuse("answer", "no run is attached".into()),
            Command::Take {} => match hold_session(dir, "host-cli view") {
                Ok(lock) => {
                    self.lock = Some(lock);
                    hub.cache().local_control = true;
                    hub.announce_view();
                }
                Err(e) => refuse("take", sandtop_hostkit::chain::chain(&e)),
            },
            Command::Give {} => {
                self.lock = None;
                self.channel = None;
                hub.cache().local_control = false;
                hub.announce_view();
            }
            Command::Act { actions } => {
                if self.lock.is_none() {
                    refuse("act", "take control first".into());
                    return;
                }
                let actions = match parse_actions(&actions) {
                    Ok(a) => a,
                    Err(e) => {
                        hub.run_event(Event::Acted {
                            ok: false,
                            executed: 0,
                            error: Some(e),
                        });
                        return;
                    }
                };
                let ch = match self.channel.as_mut() {
                    Some(ch) => ch,
                    None => match open().await {
                        Ok(ch) => self.channel.insert(ch),
                        Err(e) => {
                            hub.run_event(Event::Acted {
                                ok: false,
                                executed: 0,
                                error: Some(format!(
                                    "cannot reach the daemon: {}",
                                    sandtop_hostkit::chain::chain(&e)
                                )),
                            });
                            return;
                        }
                    },
                };
                let mut req = BatchRequest::new(actions, ScreenshotOptions::default());
                req.final_screenshot = false;
                let ev = match ch.act(&req).await {
                    Ok(r) => Event::Acted {
                        ok: true,
                        executed: r.executed,
                        error: None,
                    },
                    Err(e) => {
                        if !matches!(e, sandtop_channel::ChannelError::Daemon { .. }) {
                            self.channel = None;
                        }
                        Event::Acted {
                            ok: false,
                            executed: 0,
                            error: Some(sandtop_hostkit::term::safe_line(&e.to_string())),
                        }
                    }
                };
                hub.run_event(ev);
            }
        }
    }
}
