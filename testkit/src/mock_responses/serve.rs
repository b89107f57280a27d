//! Serving: the HTTP handler, what it decides for each request, and the
//! replies as JSON or server-sent events.

use super::*;

pub(super) fn api_error(
    status: StatusCode,
    kind: &str,
    code: Option<&str>,
    message: &str,
) -> Response {
    api_error_param(status, kind, code, None, message)
}

pub(super) fn api_error_param(
    status: StatusCode,
    kind: &str,
    code: Option<&str>,
    param: Option<&str>,
    message: &str,
) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
            .to_string(),
    )
        .into_response()
}

/// What to send, decided under the lock, sent after it.
pub(super) enum Answer {
    Now(Response),
    Later(Duration, Box<Answer>),
}

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut answer = decide(&shared, &headers, &body);
    loop {
        match answer {
            Answer::Now(r) => return r,
            Answer::Later(d, next) => {
                tokio::time::sleep(d).await;
                answer = *next;
            }
        }
    }
}

pub(super) fn decide(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Answer {
    let mut script = shared.lock();
    script.received += 1;
    let n = script.received;
    let raw_body = String::from_utf8_lossy(body).into_owned();
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let mut rec = Recorded {
        n,
        at: Instant::now(),
        body: parsed.clone().unwrap_or(Value::Null),
        raw_body,
        headers: headers
            .iter()
            .filter(|(k, _)| *k != header::AUTHORIZATION)
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        authorized: authorization == format!("Bearer {}", shared.key),
        validation_errors: Vec::new(),
        problems: Vec::new(),
        answer: String::new(),
        response: None,
        authorization,
    };
    if !rec.authorized {
        rec.problems
            .push("the Authorization header is not `Bearer <the key>`".into());
        rec.answer = "status 401".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
        ));
    }
    let Some(req) = parsed else {
        rec.validation_errors
            .push("the request body is not JSON".into());
        rec.answer = "status 400".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "We could not parse the JSON body of your request.",
        ));
    };
    rec.validation_errors = errors(create_response_validator(), &req);
    if !rec.validation_errors.is_empty() {
        let msg = format!("Invalid request: {}", rec.validation_errors[0]);
        rec.answer = "status 400 (schema)".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            &msg,
        ));
    }
    let wants_compaction = req.get("context_management").is_some_and(|c| !c.is_null());
    if script.no_compaction && wants_compaction {
        rec.answer = "status 400 (no compaction for this model)".into();
        script.record(rec);
        return Answer::Now(api_error_param(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("unsupported_parameter"),
            Some("context_management"),
            "Unsupported parameter: 'context_management' is not supported with this model.",
        ));
    }
    let mut refused = api_rules(&req, &script.stored);
    refused.extend(compaction_rules(&req, &script.compactions));
    if let Some((status, _)) = refused.first() {
        let status = *status;
        rec.problems = refused.into_iter().map(|(_, m)| m).collect();
        let msg = rec.problems[0].clone();
        rec.answer = format!("status {status} (api rules)");
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            "invalid_request_error",
            None,
            &msg,
        ));
    }
    let Some(reply) = script.queue.pop_front() else {
        rec.problems
            .push("a request arrived with no reply queued".into());
        rec.answer = "status 400 (nothing queued)".into();
        script.record(rec);
        return Answer::Now(api_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            "mock: no reply queued for this request",
        ));
    };
    let answer = serve(reply, &req, &mut rec, &mut script.stored);
    // The compaction items served, for `compaction_rules` later.
    if let Some(out) = rec.response.as_ref().and_then(|r| r["output"].as_array()) {
        for item in out.iter().filter(|i| i["type"] == "compaction") {
            if let (Some(id), Some(content)) =
                (item["id"].as_str(), item["encrypted_content"].as_str())
            {
                script
                    .compactions
                    .insert(id.to_string(), content.to_string());
            }
        }
    }
    script.record(rec);
    answer
}

/// Compaction's rules beyond the schema: `context_management` entries
/// are of type `compaction` (the only one the API supports), and a
/// compaction item in the input carries the encrypted content the API
/// produced for it, unchanged (items are resent as they came).
pub fn compaction_rules(req: &Value, served: &HashMap<String, String>) -> Vec<(u16, String)> {
    let mut refused = Vec::new();
    if let Some(entries) = req.get("context_management").and_then(Value::as_array) {
        for (i, e) in entries.iter().enumerate() {
            if e["type"] != "compaction" {
                refused.push((
                    400,
                    format!(
                        "Invalid value for 'context_management[{i}].type': only 'compaction' is supported."
                    ),
                ));
            }
        }
    }
    let input = req.get("input").and_then(Value::as_array);
    for (i, item) in input.into_iter().flatten().enumerate() {
        if item["type"] != "compaction" {
            continue;
        }
        let content = item["encrypted_content"].as_str();
        let unchanged = match (item["id"].as_str(), content) {
            (Some(id), Some(c)) => served.get(id).is_some_and(|k| k == c),
            // `CompactionSummaryItemParam`: the id is optional.
            (None, Some(c)) => served.values().any(|k| k == c),
            _ => false,
        };
        match unchanged {
            true => {}
            false => refused.push((
                400,
                format!(
                    "Invalid 'input[{i}]': the compaction item's encrypted_content is not the one the API produced."
                ),
            )),
        }
    }
    refused
}

/// A compaction output item, as the API adds one to a response when it
/// compacted the context (`CompactionBody`).
pub fn compaction(id: &str) -> Value {
    json!({
        "type": "compaction",
        "id": id,
        "encrypted_content": base64::engine::general_purpose::STANDARD
            .encode(format!("compacted context {id}").as_bytes()),
    })
}

pub(super) fn serve(
    reply: Reply,
    req: &Value,
    rec: &mut Recorded,
    stored: &mut HashMap<String, Vec<Value>>,
) -> Answer {
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    match reply {
        Reply::Delayed(d, inner) => Answer::Later(d, Box::new(serve(*inner, req, rec, stored))),
        Reply::Output(out) => {
            let resp = build_response(req, &out);
            rec.answer = format!("response {}", resp["id"].as_str().unwrap_or("?"));
            if req.get("store").and_then(Value::as_bool) != Some(false)
                && out.status == "completed"
                && let Some(id) = resp["id"].as_str()
            {
                stored.insert(id.to_string(), out.items.clone());
            }
            rec.response = Some(resp.clone());
            Answer::Now(if stream {
                sse(&sse_events(&resp), None)
            } else {
                json_200(resp.to_string())
            })
        }
        Reply::Raw(v) => {
            rec.answer = "raw response".into();
            rec.response = Some(v.clone());
            Answer::Now(if stream {
                let ev = json!({"type": "response.completed", "sequence_number": 0, "response": v});
                sse(&[ev], None)
            } else {
                json_200(v.to_string())
            })
        }
        Reply::Status {
            status,
            message,
            retry_after,
        } => {
            rec.answer = format!("status {status}");
            let (kind, code) = match status {
                429 => ("requests", Some("rate_limit_exceeded")),
                500..=599 => ("server_error", None),
                401 => ("invalid_request_error", Some("invalid_api_key")),
                _ => ("invalid_request_error", None),
            };
            let mut r = api_error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                kind,
                code,
                &message,
            );
            if let Some(after) = retry_after
                && let Ok(v) = after.parse()
            {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            Answer::Now(r)
        }
        Reply::Malformed(text) => {
            rec.answer = "malformed".into();
            Answer::Now(if stream {
                sse_raw(
                    vec![Ok(Bytes::from(format!(
                        "event: response.created\ndata: {text}\n\n"
                    )))],
                    None,
                )
            } else {
                json_200(text)
            })
        }
        Reply::Cut(out, how) => {
            let resp = build_response(req, &out);
            rec.answer = format!("cut {}", resp["id"].as_str().unwrap_or("?"));
            rec.response = Some(resp.clone());
            let abort = (how == Cut::Abort).then_some(());
            Answer::Now(if stream {
                let mut events = sse_events(&resp);
                events.pop();
                sse(&events, abort)
            } else {
                let text = resp.to_string();
                let half = text.len() / 2;
                let mut cut = half;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                match abort {
                    Some(()) => sse_raw(
                        vec![
                            Ok(Bytes::from(text[..cut].to_string())),
                            Err(std::io::Error::other("cut")),
                        ],
                        Some("application/json"),
                    ),
                    None => json_200(text[..cut].to_string()),
                }
            })
        }
        Reply::StreamError(message) => {
            rec.answer = "stream error".into();
            let out = Output {
                items: Vec::new(),
                usage: None,
                status: "in_progress".into(),
                id: None,
            };
            let resp = build_response(req, &out);
            let events = vec![
                json!({"type": "response.created", "sequence_number": 0, "response": resp}),
                json!({"type": "error", "sequence_number": 1, "code": "server_error",
                       "message": message, "param": null}),
            ];
            Answer::Now(sse(&events, None))
        }
    }
}

pub(super) fn json_200(text: String) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::HeaderName::from_static("x-request-id"), "req_mock"),
        ],
        text,
    )
        .into_response()
}

pub(super) fn sse(events: &[Value], abort: Option<()>) -> Response {
    let mut chunks: Vec<Result<Bytes, std::io::Error>> = events
        .iter()
        .map(|e| {
            let kind = e["type"].as_str().unwrap_or("message");
            Ok(Bytes::from(format!("event: {kind}\ndata: {e}\n\n")))
        })
        .collect();
    if abort.is_some() {
        chunks.push(Err(std::io::Error::other("the mock aborted the stream")));
    }
    sse_raw(chunks, None)
}

pub(super) fn sse_raw(
    chunks: Vec<Result<Bytes, std::io::Error>>,
    content_type: Option<&str>,
) -> Response {
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            content_type.unwrap_or("text/event-stream; charset=utf-8"),
        )
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

pub(super) fn wants_encrypted_reasoning(req: &Value) -> bool {
    req.get("include")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "reasoning.encrypted_content"))
}

/// The whole `Response` object for `out`, with the request's own fields
/// echoed the way the API echoes them.
pub fn build_response(req: &Value, out: &Output) -> Value {
    let id = out.id.clone().unwrap_or_else(|| new_id("resp"));
    let now = now_unix();
    let encrypted = wants_encrypted_reasoning(req);
    let items: Vec<Value> = out
        .items
        .iter()
        .map(|item| {
            let mut item = item.clone();
            if item["type"] == "reasoning" && item.get("encrypted_content").is_none() {
                item["encrypted_content"] = if encrypted {
                    json!(
                        base64::engine::general_purpose::STANDARD
                            .encode(format!("encrypted reasoning of {}", item["id"]).as_bytes())
                    )
                } else {
                    Value::Null
                };
            }
            item
        })
        .collect();
    let field = |name: &str| req.get(name).cloned().unwrap_or(Value::Null);
    let mut resp = json!({
        "id": id,
        "object": "response",
        "created_at": now,
        "status": out.status,
        "completed_at": if out.status == "completed" { json!(now) } else { Value::Null },
        "error": Value::Null,
        "incomplete_details": Value::Null,
        "instructions": field("instructions"),
        "max_output_tokens": Value::Null,
        "model": req.get("model").cloned().unwrap_or(json!("gpt-5.5")),
        "output": items,
        "parallel_tool_calls": true,
        "previous_response_id": field("previous_response_id"),
        "reasoning": {"effort": "medium", "summary": Value::Null},
        "store": req.get("store").cloned().unwrap_or(json!(true)),
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": req.get("tools").cloned().unwrap_or(json!([])),
        "top_p": 1.0,
        "truncation": req.get("truncation").cloned().unwrap_or(json!("disabled")),
        "metadata": {},
    });
    match out.status.as_str() {
        "incomplete" => {
            resp["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        "failed" => {
            resp["error"] = json!({"code": "server_error", "message": "The model failed to produce a response."});
        }
        _ => {}
    }
    if let Some(u) = &out.usage {
        resp["usage"] = u.clone();
    }
    resp
}

/// The server-sent events of a response, in order: `response.created`,
/// `response.in_progress`, per item `response.output_item.added` (then the
/// text events of a message) and `response.output_item.done`, and last
/// `response.completed` (`.incomplete`, `.failed`) with the whole response.
pub fn sse_events(resp: &Value) -> Vec<Value> {
    let mut seq = 0u64;
    let mut next = || {
        let s = seq;
        seq += 1;
        s
    };
    let mut start = resp.clone();
    start["status"] = json!("in_progress");
    start["output"] = json!([]);
    start["completed_at"] = Value::Null;
    start["error"] = Value::Null;
    start["incomplete_details"] = Value::Null;
    if let Some(o) = start.as_object_mut() {
        o.remove("usage");
    }
    let mut events = vec![
        json!({"type": "response.created", "sequence_number": next(), "response": start}),
        json!({"type": "response.in_progress", "sequence_number": next(), "response": start}),
    ];
    let items = resp["output"].as_array().cloned().unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        let mut added = item.clone();
        if added.get("status").is_some() {
            added["status"] = json!("in_progress");
        }
        if item["type"] == "message" {
            added["content"] = json!([]);
        }
        events.push(
            json!({"type": "response.output_item.added", "output_index": i,
                           "sequence_number": next(), "item": added}),
        );
        if item["type"] == "message" {
            let item_id = item["id"].clone();
            for (c, part) in item["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let text = part["text"].as_str().unwrap_or("");
                let mut empty = part.clone();
                empty["text"] = json!("");
                events.push(json!({"type": "response.content_part.added", "item_id": item_id,
                    "output_index": i, "content_index": c, "sequence_number": next(), "part": empty}));
                let mid = text
                    .char_indices()
                    .nth(text.chars().count() / 2)
                    .map_or(0, |(b, _)| b);
                for delta in [&text[..mid], &text[mid..]] {
                    events.push(
                        json!({"type": "response.output_text.delta", "item_id": item_id,
                        "output_index": i, "content_index": c, "delta": delta, "logprobs": [],
                        "sequence_number": next()}),
                    );
                }
                events.push(
                    json!({"type": "response.output_text.done", "item_id": item_id,
                    "output_index": i, "content_index": c, "text": text, "logprobs": [],
                    "sequence_number": next()}),
                );
                events.push(json!({"type": "response.content_part.done", "item_id": item_id,
                    "output_index": i, "content_index": c, "sequence_number": next(), "part": part}));
            }
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": i,
                           "sequence_number": next(), "item": item}),
        );
    }
    let last = match resp["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        Some("failed") => "response.failed",
        _ => "response.completed",
    };
    events.push(json!({"type": last, "sequence_number": next(), "response": resp}));
    events
}
