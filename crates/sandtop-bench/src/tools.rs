//! `host-cli bench --browser`: the same task — fill in and submit the demo
//! form — done by the offline scripted model through the computer tool and
//! through the browser tools, one fresh guest each, side by side: steps
//! (model requests), tool calls, wall time, and the input the model would
//! have read.
//!
//! The scripted model spends no tokens, so input tokens are estimated from
//! the request bodies it received, as the API counts them: text at 4 bytes
//! a token (tool definitions included), and each image by the published
//! high-detail rule — scaled to fit 2048x2048, then its shortest side to
//! 768, 170 tokens per 512-px tile plus 85. What is measured exactly is
//! the number of requests, the number and pixel size of images, and the
//! bytes sent.

use std::time::Instant;

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

use super::{Started, ms, open};
use sandtop_agent::approve::Approvals;
use sandtop_agent::runner::{Interrupt, Runner};
use sandtop_guest::docker::channel::ChannelMode;
use sandtop_runfolder::trajectory::Recorder;

/// One way of doing the task.
#[derive(Debug, Clone, Serialize)]
pub struct Way {
    pub tool: &'static str,
    pub ending: String,
    /// Model requests.
    pub steps: u32,
    /// Tool calls answered.
    pub calls: usize,
    pub wall_ms: f64,
    /// Images in all request inputs (resent history included).
    pub images: usize,
    /// Bytes of all request bodies.
    pub request_bytes: usize,
    /// Estimated input tokens, text and images, over all requests.
    pub input_tokens_text: u64,
    pub input_tokens_images: u64,
    pub input_tokens: u64,
}

/// Tokens of one image of `w` x `h` pixels by the high-detail tile rule.
pub fn image_tokens(w: u32, h: u32) -> u64 {
    let (mut w, mut h) = (f64::from(w.max(1)), f64::from(h.max(1)));
    let fit = (2048.0 / w.max(h)).min(1.0);
    w *= fit;
    h *= fit;
    let short = (768.0 / w.min(h)).min(1.0);
    w *= short;
    h *= short;
    let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
    85 + 170 * tiles as u64
}

/// The pixel size of a PNG data URL, from its header.
fn png_size(url: &str) -> Option<(u32, u32)> {
    let b64 = url.split_once(";base64,")?.1;
    let head = base64::engine::general_purpose::STANDARD
        .decode(b64.get(..44)?)
        .ok()?;
    if head.get(..8)? != b"\x89PNG\r\n\x1a\n" {
        return None;
    }
    let w = u32::from_be_bytes(head.get(16..20)?.try_into().ok()?);
    let h = u32::from_be_bytes(head.get(20..24)?.try_into().ok()?);
    Some((w, h))
}

/// (text bytes, image tokens, images) of one request body.
pub fn input_cost(body: &Value) -> (usize, u64, usize) {
    fn walk(v: &Value, text: &mut usize, tokens: &mut u64, images: &mut usize) {
        match v {
            Value::String(s) if s.starts_with("data:image/") => {
                *images += 1;
                if let Some((w, h)) = png_size(s) {
                    *tokens += image_tokens(w, h);
                }
            }
            Value::String(s) => *text += s.len(),
            Value::Array(a) => a.iter().for_each(|x| walk(x, text, tokens, images)),
            Value::Object(o) => o.iter().for_each(|(k, x)| {
                *text += k.len();
                walk(x, text, tokens, images)
            }),
            other => *text += other.to_string().len(),
        }
    }
    let (mut text, mut tokens, mut images) = (0, 0, 0);
    for key in ["input", "tools", "instructions"] {
        if let Some(v) = body.get(key) {
            walk(v, &mut text, &mut tokens, &mut images);
        }
    }
    (text, tokens, images)
}

/// Runs the form task one way on a fresh guest.
async fn one_way(
    backend: &sandtop_guest::docker::DockerBackend,
    started: &mut Started<'_>,
    name: String,
    browser: bool,
) -> anyhow::Result<Way> {
    let (rec, _) = started
        .start(name.clone(), sandtop_protocol::Size::new(1280, 800))
        .await?;
    let mut channel = open(backend, started.store, &rec, ChannelMode::Auto).await?;
    let (mut model, opts) =
        sandtop_exercise::exercise_setup(browser, true, sandtop_exercise::Pace::Native)?;
    // The run folder stays, as any run's does.
    let dir = started
        .store
        .root()
        .join("runs")
        .join(format!("bench-{name}"));
    let mut recorder = Recorder::create(&dir)?;
    let mut op = Approvals {
        scripted_checks: true,
        ..Approvals::default()
    };
    let t = Instant::now();
    let outcome = {
        let mut runner = Runner::new(
            &mut model,
            &mut channel,
            &mut op,
            &mut recorder,
            opts,
            Interrupt::default(),
        );
        runner.run(None).await?
    };
    let wall_ms = ms(t.elapsed());
    started.stop(&name).await?;
    let mut way = Way {
        tool: if browser { "browser" } else { "computer" },
        ending: format!("{:?}", outcome.ending),
        steps: outcome.steps,
        calls: 0,
        wall_ms,
        images: 0,
        request_bytes: 0,
        input_tokens_text: 0,
        input_tokens_images: 0,
        input_tokens: 0,
    };
    for body in &model.seen {
        let (text, tokens, images) = input_cost(body);
        way.request_bytes += body.to_string().len();
        way.images += images;
        way.input_tokens_text += (text / 4) as u64;
        way.input_tokens_images += tokens;
    }
    // Without storage every request resends the history: count each
    // call once, from the last request.
    way.calls = model
        .seen
        .last()
        .and_then(|b| b["input"].as_array())
        .map(|i| {
            i.iter()
                .filter(|x| {
                    matches!(
                        x["type"].as_str(),
                        Some("computer_call_output" | "function_call_output")
                    )
                })
                .count()
        })
        .unwrap_or(0);
    way.input_tokens = way.input_tokens_text + way.input_tokens_images;
    if !outcome.ending.success() {
        anyhow::bail!(
            "the {} way ended {:?}: {}",
            way.tool,
            outcome.ending,
            outcome.message
        );
    }
    Ok(way)
}

/// Both ways, one after the other.
pub async fn compare(
    backend: &sandtop_guest::docker::DockerBackend,
    started: &mut Started<'_>,
    tag: &str,
) -> anyhow::Result<Value> {
    let computer = one_way(backend, started, format!("{tag}-computer"), false).await?;
    let browser = one_way(backend, started, format!("{tag}-browser"), true).await?;
    Ok(serde_json::json!({"form_task": [computer, browser]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tokens_follow_the_tile_rule() {
        // 1280x800 -> 768 shortest side: 1229x768 -> 3x2 tiles.
        assert_eq!(image_tokens(1280, 800), 85 + 170 * 6);
        assert_eq!(image_tokens(512, 512), 85 + 170);
        assert_eq!(image_tokens(64, 40), 85 + 170);
        // 4096x1024 -> 2048x512 (fits) -> 2048x512 -> 4x1 tiles.
        assert_eq!(image_tokens(4096, 1024), 85 + 170 * 4);
    }

    #[test]
    fn input_cost_counts_text_and_images() {
        let mut png = Vec::new();
        {
            let mut e = png::Encoder::new(&mut png, 1280, 800);
            e.set_color(png::ColorType::Rgb);
            let mut w = e.write_header().expect("header");
            w.write_image_data(&vec![0; 1280 * 800 * 3]).expect("data");
        }
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&png)
        );
        let body = serde_json::json!({"input": [{"type": "message", "content": [
            {"type": "input_text", "text": "abcd"},
            {"type": "input_image", "image_url": url}]}]});
        let (text, tokens, images) = input_cost(&body);
        assert_eq!(images, 1);
        assert_eq!(tokens, 85 + 170 * 6);
        assert!((4..200).contains(&text), "{text}");
    }
}
