//! docs/contract.md rule 52: the guest's desktop has visible affordances. A plain
//! non-black background, the tint2 panel (its process), three launchers
//! found in a screenshot the way the offline exercise finds them, and the
//! terminal's launcher opening a terminal when clicked where it was seen;
//! no per-user font cache written at boot (the image's is valid).

use super::*;
use host_cli::agent::exercise::Frame;
use sandtop_protocol::desktop::DESKTOP_BACKGROUND;

pub async fn the_desktop_shows_a_panel_whose_launchers_open_apps(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "desk").await?;
    let mut ch = g.channel(ChannelMode::Socket).await?;
    wait_for("the panel's process", LONG, || async {
        let ps = g.processes().await.ok()?;
        ps.iter().any(|p| p["comm"] == "tint2").then_some(())
    })
    .await?;
    // The panel draws a moment after it starts.
    let mut frame = None;
    let end = Instant::now() + LONG;
    while Instant::now() < end {
        let shot = ch.screenshot(&ScreenshotOptions::default()).await?;
        let f =
            Frame::from_data_url(&shot.screenshot.data_url()).context("decoding the screenshot")?;
        if f.launchers().len() == 3 {
            frame = Some(f);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let f = frame.context("no panel with three launchers within the time limit")?;
    ensure!(
        f.rgb[..3] == DESKTOP_BACKGROUND,
        "the desktop's corner is {:?}, not the background colour",
        &f.rgb[..3]
    );
    // The image's system font cache is valid for its font folders:
    // openbox and tint2, both up and drawn now, wrote no cache of their
    // own (each scanned every font at each boot while it was stale).
    let cache = g
        .exec(&["sh", "-c", "test ! -e \"$HOME/.cache/fontconfig\""])
        .await?;
    ensure!(
        cache.exit_code == 0,
        "the guest wrote a per-user font cache at boot: the image's system \
         cache is stale (Dockerfile.guest runs fc-cache for this)"
    );
    let (x, y) = f.launchers()[2];
    act(
        &mut ch,
        json!([{"type": "click", "button": "left", "x": x, "y": y}]),
    )
    .await?;
    wait_for(
        "the terminal's shell after a click on its launcher",
        LONG,
        || async {
            let ps = g.processes().await.ok()?;
            ps.iter().any(|p| p["comm"] == "xterm").then_some(())
        },
    )
    .await?;
    g.stop().await
}
