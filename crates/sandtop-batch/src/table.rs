//! The batch's HTML table: one self-contained page (the report's style
//! and Content-Security-Policy, no script), one row a task, each linking
//! its run's report by a relative path.

use std::fmt::Write as _;

use crate::results::{Status, Summary};

use sandtop_report::html::{esc, facts, page as html_page, utc, verdict};

/// The page of a batch's summary.
pub fn page(s: &Summary<'_>) -> String {
    let t = s.totals;
    let mut body = String::from("<h1>Sandtop batch</h1>\n");
    body.push_str(&facts(&[
        ("tasks file", esc(&s.tasks_file)),
        ("model", esc(&s.mode)),
        ("started", esc(&utc(s.started_unix_ms))),
        ("wall time", format!("{:.1} s", s.wall_seconds)),
        ("parallel", s.parallel.to_string()),
        (
            "totals",
            format!(
                "{} tasks: {} passed, {} failed, {} unsupported, {} skipped, {} errors, \
                 {} interrupted",
                t.tasks, t.passed, t.failed, t.unsupported, t.skipped, t.error, t.interrupted
            ),
        ),
    ]));
    body.push_str(
        "<table>\n<tr><th>id</th><th>result</th><th>steps</th><th>tokens</th>\
         <th>time</th><th>ending</th><th>checks</th><th>why</th><th>report</th></tr>\n",
    );
    for r in s.tasks {
        let ok = r.status == Status::Passed;
        let neutral = matches!(
            r.status,
            Status::Unsupported | Status::Skipped | Status::Interrupted
        );
        let word = if neutral {
            format!("<span class=\"muted\">{}</span>", esc(r.status.word()))
        } else {
            verdict(ok, r.status.word())
        };
        let checks = if r.checks.is_empty() {
            String::new()
        } else {
            format!(
                "{}/{}",
                r.checks.iter().filter(|c| c.ok).count(),
                r.checks.len()
            )
        };
        let report = r
            .report
            .as_deref()
            .map(|p| format!("<a href=\"{}\">report</a>", esc(p)))
            .unwrap_or_default();
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td>{word}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{:.1} s</td><td>{}</td><td class=\"n\">{checks}</td><td>{}</td><td>{report}</td></tr>",
            esc(&r.id),
            r.steps,
            r.total_tokens,
            r.seconds,
            esc(r.ending.as_deref().unwrap_or("")),
            esc(r.reason.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</table>\n");
    html_page("Sandtop batch", &body)
}

#[cfg(test)]
mod tests {
    use crate::results::{TaskResult, totals};

    use super::*;

    #[test]
    fn every_row_is_escaped_and_links_its_report() {
        let mut a = TaskResult::new("a<b", 1, Status::Passed);
        a.report = Some("runs/a<b/report.html".into());
        let mut b = TaskResult::new("c", 2, Status::Unsupported);
        b.reason = Some("unsupported: evaluator:compare_table".into());
        let rows = [a, b];
        let s = Summary {
            version: 1,
            tasks_file: "t.jsonl".into(),
            parallel: 2,
            mode: "scripted".into(),
            started_unix_ms: 0,
            wall_seconds: 1.0,
            totals: totals(&rows),
            tasks: &rows,
        };
        let html = page(&s);
        assert!(html.contains("<td>a&lt;b</td>"));
        assert!(html.contains("href=\"runs/a&lt;b/report.html\""));
        assert!(html.contains("evaluator:compare_table"));
        assert!(!html.contains("<script"));
    }
}
