//! Keys after a shortcut reach what the shortcut opened (docs/contract.md
//! rule 2b): a program that answers Ctrl+L by mapping a
//! window a moment later and focusing it gets the text typed behind the
//! shortcut, in the same batch, in that new window.

use std::time::Duration;

use sandtop_testkit::opener::{Opened, Opener};
use sandtop_testkit::recorder::Recorder;

use super::*;

/// The shortcut, the text, and Enter, as a model sends them in one call.
fn batch(text: &str) -> Value {
    json!([
        {"type": "keypress", "keys": ["CTRL", "L"]},
        {"type": "type", "text": text},
        {"type": "keypress", "keys": ["ENTER"]}
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn text_typed_after_a_shortcut_lands_in_the_window_it_opened() {
    let Some(x) = Xvfb::start(1024, 768) else {
        return;
    };
    let d = Daemon::attach(&x.display);
    // A program that reacts at once, one that is busy for a while first
    // (well inside the settle's cap), five times each.
    for delay_ms in [0u64, 40, 120] {
        for rep in 0..5 {
            let o = Opener::start(&x.display, Duration::from_millis(delay_ms));
            let text = format!("http://example.test/{delay_ms}/{rep}");
            d.act(batch(&text), None).await;
            let want = format!("{text}\n");
            let got = o.wait_until(LONG, |o: &Opened| Recorder::typed_text(&o.second) == want);
            assert_eq!(
                Recorder::typed_text(&got.second),
                want,
                "delay {delay_ms} ms, #{rep}: the new window got the wrong text; \
                 the first got {:?}",
                Recorder::typed_text(&got.first)
            );
            // The first window saw the shortcut and nothing typed after it.
            let first: Vec<u32> = got
                .first
                .iter()
                .filter_map(|r| match r {
                    Rec::Key {
                        down: true, base, ..
                    } => Some(*base),
                    _ => None,
                })
                .collect();
            assert_eq!(
                first,
                vec![xkeysym::key::Control_L, u32::from(b'l')],
                "delay {delay_ms} ms, #{rep}: keys the first window got: {first:x?}"
            );
            eprintln!(
                "delay {delay_ms} ms #{rep}: focused after {:?}",
                got.focused_after
            );
        }
    }
}
