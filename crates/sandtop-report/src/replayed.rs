//! A replay beside the recording (`host-cli report RUN --replay DIR`, DIR
//! being `host-cli replay`'s output folder): after each step's computer
//! call, the screen the run recorded and the one the replay saw, side by
//! side.

use std::path::Path;

use serde_json::Value;

use super::html::esc;
use super::image;
use super::load::Step;
use super::overlay::figure;
use sandtop_runfolder::trajectory::{Entry, FILE_MARK};

/// The file `host-cli replay` writes for the screen after input `who`
/// (a call id, or `operator`) of step `n`; `who` is kept to letters,
/// digits, `_` and `-`.
pub fn replayed_name(n: u32, who: &str) -> String {
    let who: String = who
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(48)
        .collect();
    format!("step-{n:03}-{who}-replayed.png")
}

/// The step's recorded screens after its computer calls, each beside the
/// replay's; empty when the step had none.
pub fn replayed(run_dir: &Path, s: &Step, replay_dir: &Path) -> String {
    let mut out = String::new();
    for e in &s.events {
        let Entry::CallOutput { item, .. } = e else {
            continue;
        };
        let call_id = item["call_id"].as_str().unwrap_or_default();
        let Some(file) = item
            .pointer("/output/image_url")
            .and_then(Value::as_str)
            .and_then(|u| u.strip_prefix(FILE_MARK))
        else {
            continue;
        };
        let cell = |dir: &Path, name: &str, what: &str| match image::png_file(dir, name) {
            Ok(e) => format!(
                "<div><p class=\"muted\">{}</p>{}</div>",
                esc(what),
                figure(&e, name, &[])
            ),
            Err(_) => format!("<div><p class=\"muted\">{}: none</p></div>", esc(what)),
        };
        out.push_str("<div class=\"replay\">\n");
        out.push_str(&cell(run_dir, file, "After the call, recorded"));
        out.push_str(&cell(
            replay_dir,
            &replayed_name(s.n, call_id),
            "After the call, replayed",
        ));
        out.push_str("</div>\n");
    }
    out
}
