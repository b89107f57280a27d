//! The report's sections, from a [`Run`].

use std::fmt::Write as _;

use sandtop_protocol::Action;
use serde_json::Value;

use super::events::events;
use super::html::{MAX_ARGS, esc, facts, json_word, ms, pre, utc, verdict};
use super::image;
use super::load::{Obs, Run, Step};
use super::overlay::{Drawn, figure, short};
use sandtop_runfolder::items::{self as wire, OutputItem};

/// The header: what the run was and how it ended.
pub fn header(run: &Run) -> String {
    let mut out = String::from("<h1>Sandtop run report</h1>\n");
    let s = run.started.clone().unwrap_or_default();
    let mut rows: Vec<(&str, String)> = vec![
        ("Task", format!("<div class=\"pre\">{}</div>", esc(&s.task))),
        ("Session", esc(&s.session)),
        ("Model", esc(s.model.as_deref().unwrap_or("(not recorded)"))),
    ];
    if let Some(api) = &s.model_api {
        rows.push(("Model API", esc(api)));
    }
    if let Some(tool) = s.tool {
        rows.push(("Tool", esc(&json_word(&tool))));
    }
    rows.push(("Run folder", esc(&run.dir.display().to_string())));
    if let Some(t) = run.t_first {
        rows.push(("Started", esc(&utc(t))));
    }
    let end = run.finished.as_ref().and_then(|(_, t)| *t).or(run.t_last);
    if let Some(t) = end {
        rows.push(("Ended", esc(&utc(t))));
    }
    if let (Some(a), Some(b)) = (run.t_first, end) {
        rows.push(("Duration", esc(&ms(b.saturating_sub(a) as f64))));
    }
    rows.push(("Steps (requests)", run.steps.len().to_string()));
    if !run.resumed.is_empty() {
        let at: Vec<String> = run.resumed.iter().map(u32::to_string).collect();
        rows.push(("Resumed after step", esc(&at.join(", "))));
    }
    rows.push(("Ending", ending(run)));
    out.push_str(&facts(&rows));
    out
}

fn ending(run: &Run) -> String {
    match &run.finished {
        Some((f, _)) => {
            let class = if f.ending.success() { "ok" } else { "bad" };
            format!(
                "<span class=\"{class}\">{}</span>: {}",
                esc(&json_word(&f.ending)),
                esc(&f.message)
            )
        }
        None => "<span class=\"bad\">not finished</span> (no run_finished entry: the run \
                 is still going, or host-cli was killed)"
            .into(),
    }
}

/// A screenshot with the actions drawn over it, or why it is missing.
fn shot(run: &Run, obs: &Obs, actions: &[Drawn<'_>]) -> String {
    match image::observation(&run.dir, &obs.file, &obs.map) {
        Ok(e) => figure(&e, &obs.file, actions),
        Err(e) => format!(
            "<p class=\"bad\">The screenshot could not be shown: {}</p>\n",
            esc(&e)
        ),
    }
}

/// One computer call's actions, parsed as the loop parses them.
struct Call {
    call_id: String,
    actions: Vec<Result<Shown, sandtop_protocol::Invalid>>,
}

/// One action of a call: a batch's action, or a read (which draws
/// nothing over the screenshot).
enum Shown {
    Action(Action),
    Read(String),
}

/// One step.
pub fn step(run: &Run, s: &Step, next_start: Option<u64>) -> String {
    let mut out = format!("<section class=\"step\" id=\"step-{}\">\n", s.n);
    let wall = match (s.t_start, next_start.or(s.t_last)) {
        (Some(a), Some(b)) => format!(
            " <span class=\"muted\">{}</span>",
            ms(b.saturating_sub(a) as f64)
        ),
        _ => String::new(),
    };
    let _ = writeln!(out, "<h2>Step {}{wall}</h2>", s.n);
    let items = s.response.as_ref().map(|(id, status, output)| {
        wire::parse_response(&serde_json::json!({"id": id, "status": status, "output": output}))
    });
    let parsed = match &items {
        Some(Ok(r)) => r.items.clone(),
        Some(Err(e)) => {
            let _ = writeln!(
                out,
                "<p class=\"bad\">The response could not be read: {}</p>",
                esc(&e.to_string())
            );
            Vec::new()
        }
        None => Vec::new(),
    };
    // An Anthropic model's computer calls speak Sandtop's own action
    // types and the loop's reads too (docs/contract.md rule 69).
    let own = run.started.as_ref().and_then(|s| s.provider.as_deref()) == Some("anthropic");
    let read = |a: &serde_json::Value| -> Option<Shown> {
        if !own {
            return None;
        }
        match a["type"].as_str()? {
            "cursor_position" => Some(Shown::Read("read where the pointer is".into())),
            "zoom" => Some(Shown::Read(format!("zoom into {}", a["region"]))),
            _ => None,
        }
    };
    let calls: Vec<Call> = parsed
        .iter()
        .filter_map(|i| match i {
            OutputItem::ComputerCall {
                call_id, actions, ..
            } => Some(Call {
                call_id: call_id.clone(),
                actions: actions
                    .iter()
                    .map(|a| match Action::from_model_value_with(a, own) {
                        Ok(action) => Ok(Shown::Action(action)),
                        Err(e) => read(a).ok_or(e),
                    })
                    .collect(),
            }),
            _ => None,
        })
        .collect();
    let mut drawn = Vec::new();
    let mut number = 0;
    for c in &calls {
        for a in &c.actions {
            number += 1;
            if let Ok(Shown::Action(action)) = a {
                drawn.push(Drawn { number, action });
            }
        }
    }
    match &s.seen {
        Some(obs) => out.push_str(&shot(run, obs, &drawn)),
        None => out.push_str(
            "<p class=\"muted\">The model was shown no screenshot with this request.</p>\n",
        ),
    }
    // The model's words and calls, in its order.
    if let Some((id, status, output)) = &s.response {
        let _ = writeln!(
            out,
            "<h3>Response <span class=\"tag\">{}</span> <span class=\"tag\">{}</span></h3>",
            esc(id),
            esc(status)
        );
        out.push_str(&reasoning(output));
    }
    let mut number = 0;
    for item in &parsed {
        match item {
            OutputItem::Message { text, final_answer } => {
                let what = if *final_answer {
                    "Message"
                } else {
                    "Commentary"
                };
                let _ = write!(out, "<h3>{what}</h3>\n{}", pre(text));
            }
            OutputItem::ComputerCall {
                call_id,
                pending_safety_checks,
                unfinished,
                ..
            } => {
                let _ = writeln!(
                    out,
                    "<h3>Computer call <span class=\"tag\">{}</span>{}</h3>",
                    esc(call_id),
                    unfinished
                        .as_ref()
                        .map(|u| format!(" <span class=\"bad\">{}</span>", esc(u)))
                        .unwrap_or_default()
                );
                out.push_str("<ol class=\"actions\">\n");
                if let Some(c) = calls.iter().find(|c| &c.call_id == call_id) {
                    for a in &c.actions {
                        number += 1;
                        let text = match a {
                            Ok(Shown::Action(a)) => describe(a),
                            Ok(Shown::Read(what)) => what.clone(),
                            Err(e) => format!("not an action the loop runs: {e}"),
                        };
                        let _ = writeln!(out, "<li value=\"{number}\">{}</li>", esc(&text));
                    }
                }
                out.push_str("</ol>\n");
                for c in pending_safety_checks {
                    let _ = writeln!(
                        out,
                        "<p>Pending safety check <span class=\"tag\">{}</span> {}: {}</p>",
                        esc(&c.id),
                        esc(c.code.as_deref().unwrap_or("")),
                        esc(c.message.as_deref().unwrap_or(""))
                    );
                }
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                let _ = write!(
                    out,
                    "<h3>Function call <span class=\"tag\">{}</span> {}</h3>\n{}",
                    esc(call_id),
                    esc(name),
                    pre(&short(arguments, MAX_ARGS))
                );
            }
            OutputItem::Compaction | OutputItem::Other => {}
        }
    }
    out.push_str(&events(run, &s.events));
    out.push_str(&step_usage(s));
    out.push_str("</section>\n");
    out
}

/// Reasoning summaries, when the response carried them.
fn reasoning(output: &[Value]) -> String {
    let mut out = String::new();
    for item in output.iter().filter(|i| i["type"] == "reasoning") {
        let texts: Vec<&str> = item
            .get("summary")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if !texts.is_empty() {
            let _ = write!(
                out,
                "<h3>Reasoning summary</h3>\n{}",
                pre(&texts.join("\n\n"))
            );
        }
    }
    out
}

/// An action in words, in the model's coordinates.
fn describe(a: &Action) -> String {
    let keys = |k: &Option<Vec<String>>| match k {
        Some(k) if !k.is_empty() => format!(", holding {}", k.join("+")),
        _ => String::new(),
    };
    match a {
        Action::Click {
            button,
            x,
            y,
            keys: k,
        } => {
            format!("click {} at ({x}, {y}){}", json_word(button), keys(k))
        }
        Action::DoubleClick { x, y, keys: k } => format!("double click at ({x}, {y}){}", keys(k)),
        Action::Drag { path, keys: k } => {
            let pts: Vec<String> = path.iter().map(|c| format!("({}, {})", c.x, c.y)).collect();
            format!("drag along {}{}", pts.join(" → "), keys(k))
        }
        Action::Keypress { keys } => format!("keypress {}", keys.join("+")),
        Action::Move { x, y, keys: k } => format!("move to ({x}, {y}){}", keys(k)),
        Action::Screenshot {} => "screenshot".into(),
        Action::Scroll {
            x,
            y,
            scroll_x,
            scroll_y,
            keys: k,
        } => {
            format!(
                "scroll at ({x}, {y}) by dx={scroll_x}, dy={scroll_y}{}",
                keys(k)
            )
        }
        Action::Type { text } => format!("type {text:?}"),
        Action::Wait {} => "wait".into(),
        Action::MouseDown { button } => format!("press {} (held)", json_word(button)),
        Action::MouseUp { button } => format!("release {}", json_word(button)),
        Action::HoldKey { keys, duration_ms } => {
            format!("hold {} for {duration_ms} ms", keys.join("+"))
        }
    }
}

fn step_usage(s: &Step) -> String {
    let mut out = String::new();
    if let Some(u) = &s.usage {
        let tokens = match &u.usage {
            Some(t) => format!(
                "{} input + {} output = {} tokens",
                t.input_tokens, t.output_tokens, t.total_tokens
            ),
            None => "no usage reported".into(),
        };
        let _ = writeln!(
            out,
            "<p class=\"muted\">Usage: {}; model {} ({} attempt(s))",
            esc(&tokens),
            ms(u.duration_ms),
            u.attempts
        );
        if let Some((images, bytes)) = s.input {
            let _ = write!(out, "; new input: {images} image(s), {bytes} bytes");
        }
        let daemon: f64 = s.daemon.iter().map(|t| t.total_ms).sum();
        if !s.daemon.is_empty() {
            let _ = write!(out, "; daemon {}", ms(daemon));
        }
        out.push_str("</p>\n");
    }
    out
}

/// The screen the run ended on, and the exercise's checks.
pub fn the_end(run: &Run) -> String {
    let mut out = format!(
        "<h2 id=\"ending\">The end</h2>\n<p class=\"ending\">{}</p>\n",
        ending(run)
    );
    if let Some(obs) = &run.final_screen {
        out.push_str("<h3>The last screenshot</h3>\n");
        out.push_str(&shot(run, obs, &[]));
    }
    if !run.exercise_checks.is_empty() {
        out.push_str("<h3>The exercise's checks</h3>\n<table>\n");
        for c in &run.exercise_checks {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.what),
                verdict(c.ok, if c.ok { "ok" } else { "failed" }),
                esc(&c.detail)
            );
        }
        out.push_str("</table>\n");
    }
    out
}
