//! Totals (tokens, time per phase) and network decisions.

use std::fmt::Write as _;

use sandtop_protocol::Timings;
use serde_json::Value;

use super::html::verdict;
use super::html::{esc, facts, ms, utc};
use super::load::Run;
use super::overlay::short;

/// Totals: tokens per request and over the run, time per phase.
pub fn totals(run: &Run) -> String {
    let mut out = String::from(
        "<h2 id=\"totals\">Totals</h2>\n<h3>Usage per request</h3>\n<table>\n\
        <tr><th>Step</th><th>Response</th><th>Input</th><th>Output</th><th>Total</th><th>Model time</th><th>Attempts</th></tr>\n",
    );
    let (mut i, mut o, mut t, mut model_ms, mut missing) = (0u64, 0u64, 0u64, 0f64, 0);
    for s in &run.steps {
        let Some(u) = &s.usage else { continue };
        model_ms += u.duration_ms;
        let cells = match &u.usage {
            Some(x) => {
                i += x.input_tokens;
                o += x.output_tokens;
                t += x.total_tokens;
                format!(
                    "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
                    x.input_tokens, x.output_tokens, x.total_tokens
                )
            }
            None => {
                missing += 1;
                "<td colspan=\"3\" class=\"muted\">not reported</td>".into()
            }
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"n\">{}</td><td>{}</td>{cells}<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            s.n,
            esc(&u.call_id),
            ms(u.duration_ms),
            u.attempts
        );
    }
    let _ = writeln!(
        out,
        "<tr><th colspan=\"2\">Total{}</th><td class=\"n\">{i}</td><td class=\"n\">{o}</td><td class=\"n\">{t}</td><td class=\"n\">{}</td><td></td></tr>\n</table>",
        if missing > 0 {
            " (a floor: some requests reported no usage)"
        } else {
            ""
        },
        ms(model_ms)
    );
    if let Some((f, _)) = &run.finished {
        let u = &f.usage_totals;
        let _ = writeln!(
            out,
            "<p class=\"muted\">As the run counted them: {} request(s), {} input, {} output, {} total tokens{}; {} action failure(s).</p>",
            u.requests,
            u.input_tokens,
            u.output_tokens,
            u.total_tokens,
            if u.incomplete { " (incomplete)" } else { "" },
            f.action_failures
        );
    }
    out.push_str(&phases(run, model_ms));
    out
}

fn phases(run: &Run, model_ms: f64) -> String {
    let all: Vec<&Timings> = run.steps.iter().flat_map(|s| &s.daemon).collect();
    let sum = |f: fn(&Timings) -> f64| all.iter().map(|t| f(t)).sum::<f64>();
    let daemon_total = sum(|t| t.total_ms);
    let mut rows: Vec<(&str, String)> = vec![("Model requests", ms(model_ms))];
    if !all.is_empty() {
        rows.push(("Daemon: actions", ms(sum(|t| t.actions_ms))));
        rows.push(("Daemon: settle (screen quiet)", ms(sum(|t| t.settle_ms))));
        rows.push(("Daemon: capture", ms(sum(|t| t.capture_ms))));
        rows.push(("Daemon: scale", ms(sum(|t| t.scale_ms))));
        rows.push(("Daemon: encode", ms(sum(|t| t.encode_ms))));
        rows.push(("Daemon: total", ms(daemon_total)));
    }
    let calls: f64 = run
        .diagnostics
        .iter()
        .filter(|d| d.stage == "action")
        .map(|d| d.duration_ms)
        .sum();
    if calls > 0.0 {
        rows.push(("Computer calls, measured on the host", ms(calls)));
    }
    if let (Some(a), Some(b)) = (run.t_first, run.t_last) {
        let wall = b.saturating_sub(a) as f64;
        rows.push(("Whole run (wall clock)", ms(wall)));
        rows.push((
            "Rest: operator, host and loop",
            ms((wall - model_ms - calls.max(daemon_total)).max(0.0)),
        ));
    }
    let rows: Vec<(&str, String)> = rows.into_iter().map(|(k, v)| (k, esc(&v))).collect();
    format!(
        "<h3>Time per phase</h3>\n{}<p class=\"muted\">{} completed computer call(s) with daemon timings.</p>\n",
        facts(&rows),
        all.len()
    )
}

/// Network decisions: `entries` with where they came from, or none.
pub fn network(run: &Run, entries: &[(Value, Option<u64>)], source: Option<&str>) -> String {
    let mut out = String::from("<h2 id=\"network\">Network decisions</h2>\n");
    if !run.origin_questions.is_empty() {
        out.push_str("<h3>Origins asked about on the run's terminal</h3>\n<table>\n<tr><th>Origin</th><th>Answer</th></tr>\n");
        for (origin, answer) in &run.origin_questions {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(origin),
                esc(answer)
            );
        }
        out.push_str("</table>\n");
    }
    let Some(source) = source else {
        out.push_str(
            "<p class=\"muted\">No network journal: the run recorded no egress decision, \
                      and its session's journal was not found.</p>\n",
        );
        return out;
    };
    let _ = writeln!(
        out,
        "<p class=\"muted\">From {}; {} entries.</p>",
        esc(source),
        entries.len()
    );
    out.push_str("<table>\n<tr><th>Time</th><th>Kind</th><th>Origin</th><th>Via</th><th>Decision</th><th>Reason / detail</th></tr>\n");
    for (v, t) in entries {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let kind = s("kind");
        let detail = if kind == "egress" {
            s("reason")
        } else {
            short(&v.to_string(), 400)
        };
        let decision = s("decision");
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&t.map(utc).unwrap_or_default()),
            esc(&kind),
            esc(&s("origin")),
            esc(&s("via")),
            if decision.is_empty() {
                String::new()
            } else {
                verdict(decision == "allowed", &decision)
            },
            esc(&detail)
        );
    }
    out.push_str("</table>\n");
    out
}
