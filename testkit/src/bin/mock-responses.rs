//! `mock-responses`: the scripted mock of OpenAI's Responses API
//! ([`sandtop_testkit::mock_responses`]) as a process, for clients that are
//! not Rust (the Python SDK exercise, `python/tests/test_sdk_exercise.py`).
//!
//! ```text
//! mock-responses --record FILE [--replies FILE]
//! ```
//!
//! - Listens on `127.0.0.1` (a free port) and prints its base URL
//!   (`http://127.0.0.1:PORT`) as the first line of stdout.
//! - Reads the expected API key from the first line of stdin (never from
//!   argv or the environment), then one reply per line, queued in order:
//!   `{"items": [...]}` (a completed response with these output items),
//!   `{"done": "text"}` (a final assistant message), `{"status": 500,
//!   "message": "..."}` (an API error), `{"raw": {...}}` (this exact body).
//!   `--replies FILE` queues a JSON array of the same before the first
//!   request. End of stdin stops the server.
//! - Appends every request it answered to `--record FILE`, one JSON object
//!   per line: `n`, `body`, `authorized`, `validation_errors` (against
//!   `CreateResponse` of the vendored OpenAPI), `problems` (what the real
//!   API would refuse beyond the schema), `answer`, `response`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use sandtop_testkit::mock_responses::{MockResponses, Recorded, Reply};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

fn usage() -> ExitCode {
    eprintln!(
        "usage: mock-responses --record FILE [--replies FILE]  (API key on the first line of stdin)"
    );
    ExitCode::from(2)
}

/// One reply from its JSON description.
fn reply(v: &Value) -> Result<Reply, String> {
    let obj = v.as_object().ok_or("a reply must be a JSON object")?;
    if obj.len() != 1 && !(obj.len() == 2 && obj.contains_key("status")) {
        return Err("a reply has exactly one of items, done, status (+message), raw".into());
    }
    if let Some(items) = obj.get("items") {
        let items = items.as_array().ok_or("items must be an array")?;
        return Ok(Reply::output(items.clone()));
    }
    if let Some(text) = obj.get("done") {
        return Ok(Reply::done(text.as_str().ok_or("done must be a string")?));
    }
    if let Some(status) = obj.get("status") {
        let status = status
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| (400..=599).contains(s))
            .ok_or("status must be 400..=599")?;
        let message = obj
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("scripted error");
        return Ok(Reply::status(status, message));
    }
    if let Some(raw) = obj.get("raw") {
        return Ok(Reply::Raw(raw.clone()));
    }
    Err("unknown reply kind (items, done, status, raw)".into())
}

fn record_line(r: &Recorded) -> String {
    json!({
        "n": r.n,
        "body": r.body,
        "authorized": r.authorized,
        "validation_errors": r.validation_errors,
        "problems": r.problems,
        "answer": r.answer,
        "response": r.response,
    })
    .to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut record, mut replies): (Option<PathBuf>, Option<PathBuf>) = (None, None);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--record", Some(p)) => record = Some(p.into()),
            ("--replies", Some(p)) => replies = Some(p.into()),
            _ => return usage(),
        }
    }
    let Some(record) = record else {
        return usage();
    };
    let mut initial = Vec::new();
    if let Some(p) = replies {
        let parsed = std::fs::read(&p)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).map_err(|e| e.to_string()));
        match parsed.and_then(|list| list.iter().map(reply).collect::<Result<Vec<_>, _>>()) {
            Ok(list) => initial = list,
            Err(e) => {
                eprintln!("mock-responses: {}: {e}", p.display());
                return ExitCode::from(2);
            }
        }
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let key = match lines.next_line().await {
        Ok(Some(k)) if !k.trim().is_empty() => k.trim().to_string(),
        _ => {
            eprintln!("mock-responses: the API key must be the first line of stdin");
            return ExitCode::from(2);
        }
    };
    let mut out = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&record)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mock-responses: {}: {e}", record.display());
            return ExitCode::from(2);
        }
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mock = match MockResponses::start_on(addr, &key, initial).await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("mock-responses: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", mock.base_url());
    let _ = std::io::stdout().flush();
    let mut written = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut open = true;
    let mut status = ExitCode::SUCCESS;
    while open {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(l)) if l.trim().is_empty() => {}
                Ok(Some(l)) => match serde_json::from_str::<Value>(&l).map_err(|e| e.to_string()).and_then(|v| reply(&v)) {
                    Ok(r) => mock.push(r),
                    Err(e) => {
                        eprintln!("mock-responses: a reply on stdin is invalid: {e}");
                        status = ExitCode::from(2);
                        open = false;
                    }
                },
                _ => open = false,
            },
            _ = tick.tick() => {}
        }
        let requests = mock.requests();
        for r in requests.iter().skip(written) {
            // Answered requests only: a recorded request has its answer.
            if r.answer.is_empty() {
                break;
            }
            if writeln!(out, "{}", record_line(r))
                .and_then(|()| out.flush())
                .is_err()
            {
                eprintln!("mock-responses: cannot write {}", record.display());
                return ExitCode::FAILURE;
            }
            written += 1;
        }
    }
    for r in mock.requests().iter().skip(written) {
        let _ = writeln!(out, "{}", record_line(r));
    }
    let _ = out.flush();
    mock.stop().await;
    status
}
