//! The frame pump: while a page is open, long-polls the daemon's
//! `/v1/frame` (pushed on X damage, protocol `frame`) and publishes the
//! newest frame; with no page open it asks for nothing.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sandtop_protocol::frame::{FrameFormat, FrameRequest, MAX_FRAME_WAIT_MS};

use super::hub::{Frame, Hub};
use sandtop_channel::Channel;

/// JPEG quality of the stream.
const QUALITY: u8 = 70;

/// Runs until the process ends. `open` makes a fresh channel (after an
/// error the old one is dropped).
pub async fn pump<F, Fut>(hub: Arc<Hub>, max_width: Option<u32>, mut open: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Channel, crate::Error>>,
{
    let mut channel: Option<Channel> = None;
    let mut seq = 0u64;
    loop {
        if hub.client_count() == 0 {
            let arrived = hub.client_arrived.notified();
            if hub.client_count() == 0 {
                arrived.await;
            }
            // A new page needs a frame now, not at the next change.
            seq = 0;
        }
        let ch = match channel.as_mut() {
            Some(ch) => ch,
            None => match open().await {
                Ok(ch) => channel.insert(ch),
                Err(e) => {
                    problem(
                        &hub,
                        Some(format!(
                            "cannot reach the guest's daemon: {}",
                            sandtop_hostkit::chain::chain(&e)
                        )),
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let req = FrameRequest {
            after: seq,
            wait_ms: MAX_FRAME_WAIT_MS,
            max_width,
            format: FrameFormat::Jpeg,
            quality: Some(QUALITY),
        };
        match ch.frame(&req).await {
            Ok((reply, bytes)) => {
                problem(&hub, None);
                seq = reply.seq;
                if let (Some(img), Some(bytes)) = (reply.image, bytes) {
                    hub.frame.send_replace(Some(Frame {
                        seq: reply.seq,
                        width: img.width,
                        height: img.height,
                        screen: reply.screen,
                        scale_map: img.scale_map,
                        jpeg: Bytes::from(bytes),
                        at_unix_ms: now_ms(),
                    }));
                }
            }
            Err(e) => {
                channel = None;
                problem(&hub, Some(format!("frames from the guest failed: {e}")));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

fn problem(hub: &Hub, p: Option<String>) {
    let changed = {
        let mut c = hub.cache();
        let changed = c.problem != p;
        c.problem = p;
        changed
    };
    if changed {
        hub.announce_view();
    }
}

pub fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
