//! Keys after a shortcut reach what the shortcut opened (docs/contract.md
//! rule 2b), in the guest's Firefox, with the focus in
//! the page: one batch each, as a model sends it.
//!
//! - CTRL+L, an address, Enter: the page changes to that address
//!   (alternately the form and `/submissions`, so a batch that navigated
//!   nowhere is seen);
//! - CTRL+T, the form's address, Enter: the new tab shows the form, and
//!   once it is closed (CTRL+W) the first tab still shows `/submissions`;
//! - CTRL+F, a word: Firefox's find highlights that word (alternately the
//!   label "Name" above the e-mail box and "Message" below it).
//!
//! `SANDTOP_ORDER_REPS` times each (20 by default). Nothing waits between
//! the shortcut and the keys but the daemon.

use host_cli::agent::exercise::Frame;

use super::order::{BUTTON, Form, find_form, keep, open_form, reps, screen, submissions};
use super::*;

const FORM_URL: &str = "http://127.0.0.1:8080/";
const LIST_URL: &str = "http://127.0.0.1:8080/submissions";

/// How long a page may take to show after its batch.
const PAGE: Duration = Duration::from_secs(15);

/// What the screen must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    /// The empty demo form.
    Form,
    /// Any page without the form's blue button (the submissions list).
    List,
}

fn shows(f: &Frame, page: Page) -> bool {
    match page {
        Page::Form => find_form(f).is_some(),
        Page::List => f.count(BUTTON) < 50,
    }
}

/// Takes screenshots until `page` shows; fails after [`PAGE`], the last
/// screen kept.
async fn expect(ch: &mut Channel, page: Page, tag: &str) -> anyhow::Result<Frame> {
    let end = Instant::now() + PAGE;
    loop {
        let f = screen(ch).await?;
        if shows(&f, page) {
            return Ok(f);
        }
        ensure!(
            Instant::now() < end,
            "{tag}: {page:?} never showed (the last screen: {})",
            keep(&f, tag)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Keys that reached the form instead (its name box has the focus) and
/// an Enter behind them submit it: the demo app's record stays empty.
async fn leaked_nothing(g: &Guest, tag: &str) -> anyhow::Result<()> {
    let s = submissions(g).await?;
    ensure!(
        s.is_empty(),
        "{tag}: keys after the shortcut reached the page's form and submitted it: {s:?}"
    );
    Ok(())
}

fn batch(shortcut: &str, text: &str) -> Value {
    json!([
        {"type": "keypress", "keys": ["CTRL", shortcut]},
        {"type": "type", "text": text}
    ])
}

/// Firefox's highlight of the found text (`ui.textSelectAttentionBackground`,
/// #38d878) and similar greens: the mean row of such pixels above the
/// submit button, if there are enough of them to be a word.
fn found_at(f: &Frame, form: &Form) -> Option<u32> {
    let bottom = u32::try_from(form.submit.1).unwrap_or(0).min(f.height);
    let (mut n, mut sum) = (0u64, 0u64);
    for y in 0..bottom {
        for x in 0..f.width {
            let i = (y as usize * f.width as usize + x as usize) * 3;
            let (r, g, b) = (f.rgb[i], f.rgb[i + 1], f.rgb[i + 2]);
            if g > 180 && r < 110 && b < 170 && g > b + 40 {
                n += 1;
                sum += u64::from(y);
            }
        }
    }
    (n >= 20).then(|| (sum / n) as u32)
}

pub(crate) async fn keys_after_a_shortcut_reach_what_it_opened_in_firefox(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let reps = reps();
    let g = Guest::start(&ctx, "shortcut").await?;
    let mut ch = g.channel(ChannelMode::Auto).await?;
    let t0 = Instant::now();
    // Firefox, on the form (its home page); the page has the focus (the
    // form's name box, autofocused).
    open_form(&mut ch, &g, true, "shortcut-start").await?;

    // CTRL+L: the page changes to the address typed.
    for rep in 0..reps {
        let (url, page) = if rep % 2 == 0 {
            (LIST_URL, Page::List)
        } else {
            (FORM_URL, Page::Form)
        };
        let tag = format!("ctrl-l-{rep}");
        let n = act(&mut ch, batch("L", &format!("{url}\n"))).await?;
        ensure!(n == 2, "{tag}: {n} of 2 actions ran");
        expect(&mut ch, page, &tag).await?;
        leaked_nothing(&g, &tag).await?;
    }
    println!(
        "  CTRL+L x{reps}: every address reached the address bar ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );

    // CTRL+T: the first tab shows the list; each new tab gets the form.
    let t1 = Instant::now();
    act(&mut ch, batch("L", &format!("{LIST_URL}\n"))).await?;
    expect(&mut ch, Page::List, "ctrl-t-start").await?;
    for rep in 0..reps {
        let tag = format!("ctrl-t-{rep}");
        let n = act(&mut ch, batch("T", &format!("{FORM_URL}\n"))).await?;
        ensure!(n == 2, "{tag}: {n} of 2 actions ran");
        expect(&mut ch, Page::Form, &tag).await?;
        act(
            &mut ch,
            json!([{"type": "keypress", "keys": ["CTRL", "W"]}]),
        )
        .await?;
        expect(&mut ch, Page::List, &format!("{tag}-closed")).await?;
        leaked_nothing(&g, &tag).await?;
    }
    println!(
        "  CTRL+T x{reps}: every address reached the new tab's address bar ({:.1} s)",
        t1.elapsed().as_secs_f64()
    );

    // CTRL+F: the word typed is the one found.
    let t2 = Instant::now();
    act(&mut ch, batch("L", &format!("{FORM_URL}\n"))).await?;
    let f = expect(&mut ch, Page::Form, "ctrl-f-start").await?;
    let form = find_form(&f).context("the form")?;
    let middle = u32::try_from(form.email.1).unwrap_or(0);
    for rep in 0..reps {
        let tag = format!("ctrl-f-{rep}");
        let (word, above) = if rep % 2 == 0 {
            ("Message", false)
        } else {
            ("Name", true)
        };
        let n = act(&mut ch, batch("F", word)).await?;
        ensure!(n == 2, "{tag}: {n} of 2 actions ran");
        let end = Instant::now() + PAGE;
        loop {
            let f = screen(&mut ch).await?;
            let at = found_at(&f, &form);
            if at.is_some_and(|y| (y < middle) == above) {
                break;
            }
            ensure!(
                Instant::now() < end,
                "{tag}: \"{word}\" was not found (highlight at {at:?}, the e-mail box at \
                 {middle}; the last screen: {})",
                keep(&f, &tag)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The find bar closes; the focus goes back to the page.
        act(&mut ch, json!([{"type": "keypress", "keys": ["ESCAPE"]}])).await?;
        leaked_nothing(&g, &tag).await?;
    }
    println!(
        "  CTRL+F x{reps}: every word reached the find bar ({:.1} s)",
        t2.elapsed().as_secs_f64()
    );
    g.stop().await?;
    Ok(())
}
