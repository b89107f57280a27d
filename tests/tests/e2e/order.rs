//! Input ordering in the real guest (docs/contract.md rule 2a):
//! one batch clicks three fields of the demo form out of order, types into
//! each, and submits; the demo app's own record must hold each text in its
//! own field. Repeated with the browser focused, with another window
//! focused at the start, and with the guest's CPU kept busy.
//!
//! The fields are found in a screenshot (the 2 px #444 borders of the
//! form's boxes above the blue submit button), never from fixed
//! coordinates, so a change of layout fails loudly instead of clicking
//! beside the fields.

use host_cli::agent::exercise::{Frame, STORE_PATH};
use sandtop_protocol::ScreenshotOptions;

use super::*;

/// Repetitions per condition: docs/contract.md rule 2a's 20 by default,
/// `SANDTOP_ORDER_REPS` to change it (at least 1).
pub(crate) fn reps() -> usize {
    std::env::var("SANDTOP_ORDER_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
        .max(1)
}

const FORM_URL: &str = "http://127.0.0.1:8080/";
pub(crate) const BUTTON: [u8; 3] = [0x25, 0x63, 0xeb];
const BORDER: [u8; 3] = [0x44, 0x44, 0x44];

/// Where the form's parts are on the screen.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    pub(crate) name: (i64, i64),
    pub(crate) email: (i64, i64),
    pub(crate) message: (i64, i64),
    pub(crate) submit: (i64, i64),
}

fn px(f: &Frame, x: u32, y: u32) -> [u8; 3] {
    let i = (y as usize * f.width as usize + x as usize) * 3;
    [f.rgb[i], f.rgb[i + 1], f.rgb[i + 2]]
}

/// Finds the form: the submit button's box, then, in a column just inside
/// the fields' left edge, the border rows of the three boxes above it.
pub(crate) fn find_form(f: &Frame) -> Option<Form> {
    let (mut x0, mut y0, mut x1, mut y1) = (u32::MAX, u32::MAX, 0, 0);
    let mut n = 0;
    for y in 0..f.height {
        for x in 0..f.width {
            if px(f, x, y) == BUTTON {
                (x0, y0, x1, y1) = (x0.min(x), y0.min(y), x1.max(x), y1.max(y));
                n += 1;
            }
        }
    }
    if n < 500 {
        return None;
    }
    // A border row: 200 pixels of the border colour from the column on
    // (text never draws that).
    let col = x0 + 30;
    // Any one colour but white counts: the boxes' #444 borders, and the
    // focused box's focus ring, whose colour Firefox picks; rows a few
    // pixels apart (a ring beside its border) are one edge.
    let border_row = |y: u32| {
        let first = px(f, col, y);
        first != [255, 255, 255] && (col..(col + 200).min(f.width)).all(|x| px(f, x, y) == first)
    };
    // Upwards from the button: the first six edges are the three boxes'
    // (the browser's own toolbars, higher up, have uniform rows too).
    let mut up: Vec<(u32, u32)> = Vec::new();
    for y in (0..y0).rev() {
        if border_row(y) {
            match up.last_mut() {
                Some(g) if g.0 <= y + 4 => g.0 = y,
                _ => up.push((y, y)),
            }
        }
    }
    let mut groups: Vec<(u32, u32)> = up.into_iter().take(6).collect();
    groups.reverse();
    if groups.len() != 6 {
        return None;
    }
    // The right edge of the boxes: where the top border row ends.
    // An unfocused box's top border (the email box is never focused here).
    let top = groups[2].1;
    let mut right = col;
    while right + 1 < f.width && px(f, right + 1, top) == BORDER {
        right += 1;
    }
    let cx = i64::from((x0 + right) / 2);
    let centre = |a: (u32, u32), b: (u32, u32)| (cx, i64::from((a.1 + b.0) / 2));
    // A fresh form: nothing typed in any box yet (its middle row is white
    // from a third of the way in to near its right edge).
    let empty = groups.chunks(2).all(|g| {
        let y = (g[0].1 + g[1].0) / 2;
        ((x0 + (right - x0) / 3)..right.saturating_sub(12)).all(|x| px(f, x, y) == [255, 255, 255])
    });
    if !empty {
        return None;
    }
    Some(Form {
        name: centre(groups[0], groups[1]),
        email: centre(groups[2], groups[3]),
        message: centre(groups[4], groups[5]),
        submit: (i64::from((x0 + x1) / 2), i64::from((y0 + y1) / 2)),
    })
}

pub(crate) async fn screen(ch: &mut Channel) -> anyhow::Result<Frame> {
    let r = ch.screenshot(&ScreenshotOptions::default()).await?;
    let url = format!("data:image/png;base64,{}", r.screenshot.data);
    Frame::from_data_url(&url).context("decoding the screenshot")
}

/// Opens the form afresh (Super+B the first time, then the address bar)
/// and returns where its empty fields are.
pub(crate) async fn open_form(
    ch: &mut Channel,
    g: &Guest,
    first: bool,
    tag: &str,
) -> anyhow::Result<Form> {
    // Firefox's first start can take long on a loaded host: wait for its
    // page generously, but press Super+B again only while no Firefox
    // process exists (openbox binds its keys a little after the daemon is
    // up; a second Firefox started while the first is still starting
    // would only show "Firefox is already running").
    let end = Instant::now() + if first { 3 * LONG } else { LONG };
    if first {
        loop {
            act(ch, json!([{"type": "keypress", "keys": ["SUPER", "B"]}])).await?;
            let started = wait_for("Firefox to start", Duration::from_secs(3), || async {
                let ps = g.processes().await.ok()?;
                ps.iter()
                    .any(|p| p["comm"].as_str().is_some_and(|c| c.starts_with("firefox")))
                    .then_some(())
            })
            .await;
            if started.is_ok() {
                break;
            }
            ensure!(Instant::now() < end, "Super+B never started Firefox");
        }
    } else {
        // The previous submission's page must have replaced the form
        // before the form is asked for again (else the old form, still
        // on screen, would be taken for the new one).
        loop {
            let f = screen(ch).await?;
            let button = f.rgb.chunks_exact(3).filter(|p| *p == BUTTON).count();
            if button < 50 {
                break;
            }
            ensure!(
                Instant::now() < end,
                "{tag}: the submitted form never went away (the last screen: {})",
                keep(&f, tag)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut asked = None::<Instant>;
    loop {
        if !first && asked.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
            // One batch, as a model sends it: the daemon lets Firefox run
            // the shortcut before the address is typed (contract rule 2b).
            act(
                ch,
                json!([
                    {"type": "keypress", "keys": ["CTRL", "L"]},
                    {"type": "type", "text": format!("{FORM_URL}\n")}
                ]),
            )
            .await?;
            asked = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut shown = screen(ch).await?;
        if find_form(&shown).is_some() {
            // Drawn is not loaded: the page's autofocus (the name field)
            // comes a moment later and would take the focus from a click
            // made before it, as from a person's. Let the screen settle
            // (the `wait` action), then look again.
            act(ch, json!([{"type": "wait"}])).await?;
            shown = screen(ch).await?;
            if let Some(form) = find_form(&shown) {
                return Ok(form);
            }
        }
        ensure!(
            Instant::now() < end,
            "{tag}: the demo form never showed (the last screen: {})",
            keep(&shown, tag)
        );
    }
}

/// Saves a screen for a failure's message as a binary PPM (no image
/// library needed; image viewers and ImageMagick read it) in the
/// temporary folder, and says where.
pub(crate) fn keep(f: &Frame, tag: &str) -> String {
    let path = std::env::temp_dir().join(format!("sandtop-order-{}-{tag}.ppm", std::process::id()));
    let mut ppm = format!("P6\n{} {}\n255\n", f.width, f.height).into_bytes();
    ppm.extend_from_slice(&f.rgb);
    match std::fs::write(&path, ppm) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("not saved: {e}"),
    }
}

pub(crate) async fn submissions(g: &Guest) -> anyhow::Result<Vec<Value>> {
    let r = g.exec(&["cat", STORE_PATH]).await?;
    if r.exit_code != 0 {
        return Ok(Vec::new()); // nothing stored yet
    }
    Ok(String::from_utf8_lossy(&r.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// A small xterm in the bottom right corner takes the focus (a newly
/// mapped window gets it), away from the form; the previous one goes.
async fn focus_elsewhere(ch: &mut Channel, g: &Guest) -> anyhow::Result<()> {
    let r = g
        .exec(&[
            "/bin/sh",
            "-c",
            "kill $(cat /tmp/order-xterm.pid 2>/dev/null) 2>/dev/null; \
             DISPLAY=:0 setsid xterm -geometry 20x4-0-0 -e sleep 600 >/dev/null 2>&1 & \
             echo $! > /tmp/order-xterm.pid; echo $!",
        ])
        .await?;
    ensure!(r.exit_code == 0, "starting an xterm in the guest");
    let pid: i64 = String::from_utf8_lossy(&r.stdout)
        .trim()
        .parse()
        .context("the xterm's pid")?;
    wait_for("the xterm", LONG, || async {
        let ps = g.processes().await.ok()?;
        ps.iter()
            .any(|p| p["pid"] == pid && p["comm"] == "xterm")
            .then_some(())
    })
    .await?;
    // Mapped and focused by the window manager a moment after it starts
    // (seconds on a loaded machine: a fixed pause let the xterm take the
    // focus in the middle of the next form's batch). Firefox, maximised,
    // owns the title bar across the top: openbox draws it blue while
    // Firefox has the focus, grey once the xterm took it.
    let end = Instant::now() + LONG;
    loop {
        let f = screen(ch).await?;
        let [r, _, b] = px(&f, 300, 6);
        if u16::from(b) < u16::from(r) + 30 {
            return Ok(());
        }
        ensure!(
            Instant::now() < end,
            "the xterm never took the focus from Firefox (the last screen: {})",
            keep(&f, "focus")
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Test-only load: two busy loops (the guest has two CPUs), for ten
/// minutes at most; they go with the guest.
async fn load(g: &Guest) -> anyhow::Result<()> {
    let r = g
        .exec(&[
            "/bin/sh",
            "-c",
            "for i in 1 2; do setsid timeout 600 /bin/sh -c 'while :; do :; done' \
             >/dev/null 2>&1 & done",
        ])
        .await?;
    ensure!(r.exit_code == 0, "starting the load in the guest");
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Focused,
    Unfocused,
    Busy,
}

pub(crate) async fn batched_form_input_lands_in_each_field(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let reps = reps();
    let t0 = Instant::now();
    for cond in [Condition::Focused, Condition::Unfocused, Condition::Busy] {
        // A fresh guest per condition (the load of `Busy` goes with it);
        // within one, the form is opened afresh for every batch.
        let g = Guest::start(&ctx, &format!("order-{cond:?}").to_lowercase()).await?;
        let mut ch = g.channel(ChannelMode::Auto).await?;
        let mut stored = submissions(&g).await?.len();
        let mut first = true;
        if cond == Condition::Busy {
            load(&g).await?;
        }
        for rep in 0..reps {
            let tag = format!("{cond:?}-{rep}");
            let form = open_form(&mut ch, &g, first, &tag).await?;
            first = false;
            let unfocus = match cond {
                Condition::Focused => false,
                Condition::Unfocused => true,
                // Busy: both ways, alternately.
                Condition::Busy => rep % 2 == 0,
            };
            if unfocus {
                focus_elsewhere(&mut ch, &g).await?;
            }
            let (name, email, message) = (
                format!("name-{tag}"),
                format!("mail-{tag}"),
                format!("msg-{tag}"),
            );
            let click =
                |(x, y): (i64, i64)| json!({"type": "click", "button": "left", "x": x, "y": y});
            let n = act(
                &mut ch,
                json!([
                    click(form.email),
                    {"type": "type", "text": email},
                    click(form.message),
                    {"type": "type", "text": message},
                    click(form.name),
                    {"type": "type", "text": name},
                    click(form.submit),
                ]),
            )
            .await?;
            ensure!(n == 7, "{n} of 7 actions ran");
            let all = wait_for("the submission", LONG, || async {
                let s = submissions(&g).await.ok()?;
                (s.len() > stored).then_some(s)
            })
            .await?;
            ensure!(
                all.len() == stored + 1,
                "{cond:?} #{rep}: one batch stored {} submissions",
                all.len() - stored
            );
            stored = all.len();
            let got = &all[stored - 1];
            let field = |k: &str| got[k].as_str().unwrap_or("").to_string();
            ensure!(
                (field("name"), field("email"), field("message")) == (name, email, message),
                "{cond:?} #{rep}: misplaced input: stored {got}"
            );
        }
        g.stop().await?;
    }
    println!(
        "  {} batches ({reps} per condition) in {:.1} s, zero misplacements",
        3 * reps,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
