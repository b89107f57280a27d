//! The one-time loopback page where the person types a sign-in's values
//! (`request_sign_in` by URL-mode elicitation; docs/security.md,
//! `host-cli mcp`).
//!
//! One page per request, on its own port of 127.0.0.1, for as long as the
//! request waits:
//!
//! - its URL holds a one-time token (256 bits, `/s/TOKEN`); that URL is
//!   what the client is asked to open, so it is in an MCP message: it
//!   opens a form, and it cannot read anything back;
//! - every request must name `127.0.0.1:PORT` in `Host` (the view's check,
//!   [`sandtop_view::auth::Loopback`]: DNS rebinding); the answer (a POST)
//!   must also carry `Origin: http://127.0.0.1:PORT` (a page elsewhere
//!   cannot post to it);
//! - the first answer spends the token (submit or decline); later ones
//!   are refused;
//! - the values never leave this process except as the daemon's
//!   `sign_in_fill`: the body is read into zeroized memory, each value
//!   becomes a [`Secret`], nothing here logs or echoes one;
//! - the page shows the origin the values go to, the fields by their
//!   labels (the model's words, escaped and marked as such) and loads
//!   nothing (a strict Content-Security-Policy, no script).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandtop_protocol::sign_in::{CredentialKind, MAX_SECRET_TOTAL_BYTES, Secret};
use tokio::sync::oneshot;
use zeroize::Zeroizing;

use sandtop_agent::sign_in::rules::Request as SignInRequest;
use sandtop_report::html::esc;
use sandtop_view::auth::{Loopback, random_hex, same};

/// The largest answer read (every value percent-encoded at worst).
const MAX_BODY: usize = 3 * MAX_SECRET_TOTAL_BYTES + 16 * 1024;

/// What the person answered on the page.
#[derive(Debug)]
pub enum PageAnswer {
    /// Values by field id (only fields of the request; empty ones left
    /// out), and the option chosen.
    Submit {
        option: Option<String>,
        values: Vec<(String, Secret)>,
    },
    /// The person declined on the page.
    Decline,
}

/// A page being served; dropping it stops the server.
#[derive(Debug)]
pub struct Page {
    url: String,
    answer: Option<oneshot::Receiver<PageAnswer>>,
    _stop: oneshot::Sender<()>,
}

impl Page {
    /// The URL the person opens (holds the one-time token).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Waits for the person's answer (`None`: the page went away).
    pub async fn answer(&mut self) -> Option<PageAnswer> {
        match self.answer.take() {
            Some(rx) => rx.await.ok(),
            None => None,
        }
    }
}

struct PageState {
    place: Loopback,
    token: Zeroizing<String>,
    form: String,
    fields: Vec<(String, CredentialKind)>,
    options: Vec<String>,
    answer: Mutex<Option<oneshot::Sender<PageAnswer>>>,
}

/// Serves the page for `req` on a free port of 127.0.0.1.
pub async fn start(req: &SignInRequest) -> anyhow::Result<Page> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .context("listening on 127.0.0.1 for the sign-in page")?;
    let addr = listener.local_addr()?;
    let place = Loopback::new(addr)?;
    let token = Zeroizing::new(random_hex()?);
    let url = format!("{}/s/{}", place.origin(), token.as_str());
    let (tx, rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let state = Arc::new(PageState {
        place,
        token,
        form: form(req),
        fields: req.fields.iter().map(|f| (f.id.clone(), f.kind)).collect(),
        options: req.options.iter().map(|o| o.id.clone()).collect(),
        answer: Mutex::new(Some(tx)),
    });
    let app = Router::new().fallback(handle).with_state(state);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .await;
    });
    Ok(Page {
        url,
        answer: Some(rx),
        _stop: stop_tx,
    })
}

fn input_type(kind: CredentialKind) -> &'static str {
    match kind {
        CredentialKind::Email => "email",
        CredentialKind::Password | CredentialKind::Code => "password",
        CredentialKind::Text => "text",
    }
}

/// The form; it posts to its own URL.
fn form(req: &SignInRequest) -> String {
    let mut fields = String::new();
    for f in &req.fields {
        fields.push_str(&format!(
            "<p><label>{label}{req} <small>({kind}; the model's label)</small><br>\
             <input name=\"f.{id}\" type=\"{ty}\" autocomplete=\"off\" spellcheck=\"false\"></label></p>\n",
            label = esc(&f.label),
            req = if f.required { " *" } else { "" },
            kind = f.kind.as_str(),
            id = esc(&f.id),
            ty = input_type(f.kind),
        ));
    }
    let mut options = String::new();
    for (i, o) in req.options.iter().enumerate() {
        options.push_str(&format!(
            "<p><label><input type=\"radio\" name=\"option\" value=\"{id}\"{checked}> {label} \
             <small>(fields: {ids})</small></label></p>\n",
            id = esc(&o.id),
            checked = if i == 0 { " checked" } else { "" },
            label = esc(&o.label),
            ids = esc(&o.field_ids.join(", ")),
        ));
    }
    let reason = req
        .reason
        .as_deref()
        .map(|r| {
            format!(
                "<p>The model's reason (its words, not Sandtop's): <q>{}</q></p>",
                esc(r)
            )
        })
        .unwrap_or_default();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Sandtop sign-in</title>\
         <meta name=\"referrer\" content=\"no-referrer\"></head><body>\
         <h1>Sandtop: sign in to {origin}</h1>\
         <p>The values you type here go only into the inputs the browser driver bound, on a page \
         of the guest's browser loaded from <b>{origin}</b>. The MCP client and its model get \
         only &ldquo;submitted&rdquo; or &ldquo;declined&rdquo;.</p>{reason}\
         <form method=\"post\" action=\"\">{options}{fields}\
         <p><button type=\"submit\" name=\"action\" value=\"submit\">Sign in</button> \
         <button type=\"submit\" name=\"action\" value=\"decline\" formnovalidate>Decline</button></p>\
         </form></body></html>",
        origin = esc(&req.origin.to_string()),
    )
}

fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text.to_string(),
    )
        .into_response()
}

fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn handle(State(s): State<Arc<PageState>>, req: Request) -> Response {
    secure(route(&s, req).await)
}

async fn route(s: &PageState, req: Request) -> Response {
    if s.place.check_host(req.headers()).is_err() {
        return plain(
            StatusCode::FORBIDDEN,
            &format!("this page answers only to Host {}", s.place.host()),
        );
    }
    let token_ok = req
        .uri()
        .path()
        .strip_prefix("/s/")
        .is_some_and(|t| same(t, &s.token));
    if !token_ok {
        return plain(StatusCode::NOT_FOUND, "no such page");
    }
    let open = s.answer.lock().unwrap_or_else(|p| p.into_inner()).is_some();
    if !open {
        return plain(
            StatusCode::GONE,
            "this sign-in page was already answered; it works once",
        );
    }
    if req.method() == Method::GET {
        (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            s.form.clone(),
        )
            .into_response()
    } else if req.method() == Method::POST {
        answer(s, req).await
    } else {
        plain(StatusCode::METHOD_NOT_ALLOWED, "GET or POST")
    }
}

async fn answer(s: &PageState, req: Request) -> Response {
    if s.place.check_origin(req.headers()).is_err() {
        return plain(
            StatusCode::FORBIDDEN,
            &format!(
                "the answer must come from this page itself (Origin {})",
                s.place.origin()
            ),
        );
    }
    let form_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';').next().is_some_and(|t| {
                t.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        });
    if !form_type {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the answer is a form (application/x-www-form-urlencoded)",
        );
    }
    let body: Body = req.into_body();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => Zeroizing::new(b.to_vec()),
        Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "the answer is too large"),
    };
    let parsed = match parse(s, &bytes) {
        Ok(a) => a,
        Err(why) => return plain(StatusCode::BAD_REQUEST, &why),
    };
    let Some(tx) = s.answer.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return plain(
            StatusCode::GONE,
            "this sign-in page was already answered; it works once",
        );
    };
    let words = match &parsed {
        PageAnswer::Submit { .. } => {
            "Sent to Sandtop: the values go into the page's inputs now. You can close this tab."
        }
        PageAnswer::Decline => "Declined: nothing is typed. You can close this tab.",
    };
    if tx.send(parsed).is_err() {
        return plain(
            StatusCode::GONE,
            "the sign-in request ended before this answer arrived; nothing is typed",
        );
    }
    plain(StatusCode::OK, words)
}

/// Reads the form: `action` (submit|decline), `option` (when the request
/// offers options), `f.ID` per field. Never quotes a value.
fn parse(s: &PageState, body: &[u8]) -> Result<PageAnswer, String> {
    let mut action = None;
    let mut option = None;
    let mut values: Vec<(String, Secret)> = Vec::new();
    for (k, v) in form_urlencoded::parse(body) {
        match &*k {
            "action" => action = Some(v.into_owned()),
            "option" => {
                if !s.options.iter().any(|o| *o == v) {
                    return Err("that option is not one of the request's".into());
                }
                option = Some(v.into_owned());
            }
            k => {
                let Some(id) = k.strip_prefix("f.") else {
                    return Err("the form has a field it did not offer".into());
                };
                if !s.fields.iter().any(|(f, _)| f == id) {
                    return Err("the form has a field it did not offer".into());
                }
                if values.iter().any(|(f, _)| f == id) {
                    return Err("a field was sent twice".into());
                }
                let value = Secret::new(v.into_owned());
                if !value.is_empty() {
                    values.push((id.to_string(), value));
                }
            }
        }
    }
    match action.as_deref() {
        Some("decline") => Ok(PageAnswer::Decline),
        Some("submit") => Ok(PageAnswer::Submit { option, values }),
        _ => Err("the form has no action".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SignInRequest {
        sandtop_agent::sign_in::rules::parse_request(
            &serde_json::json!({
                "credential_origin": "http://127.0.0.1:8080",
                "reason": "<script>alert(1)</script> needs it",
                "fields": [
                    {"id": "email", "label": "E<b>mail", "type": "email", "required": true, "target": "g1-email"},
                    {"id": "password", "label": "Password", "type": "password", "required": true, "target": "g1-password"},
                ],
                "options": null,
            })
            .to_string(),
        )
        .unwrap()
    }

    async fn send(
        client: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut s = tokio::net::TcpStream::connect(client).await.unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        (status, out)
    }

    #[tokio::test]
    async fn the_page_takes_one_answer_from_itself_and_never_echoes_a_value() {
        let mut page = start(&request()).await.unwrap();
        let url = page.url().to_string();
        let addr = url
            .strip_prefix("http://")
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let path = url.split(&addr).nth(1).unwrap().to_string();
        let origin = format!("http://{addr}");
        let host = ("Host", addr.as_str());
        // The form, inert.
        let (st, html) = send(&addr, "GET", &path, &[host], "").await;
        assert_eq!(st, 200, "{html}");
        assert!(html.contains("type=\"password\""), "{html}");
        assert!(
            !html.contains("<script>") && !html.contains("E<b>mail"),
            "{html}"
        );
        assert!(
            html.contains("content-security-policy: default-src 'none'"),
            "{html}"
        );
        // A wrong token, a foreign Host, a foreign or missing Origin.
        let wrong = format!("/s/{}", "0".repeat(64));
        assert_eq!(send(&addr, "GET", &wrong, &[host], "").await.0, 404);
        let (st, _) = send(&addr, "GET", &path, &[("Host", "evil.test")], "").await;
        assert_eq!(st, 403);
        let form = ("Content-Type", "application/x-www-form-urlencoded");
        let canary = "canary-Page-9d2e";
        let body = format!("action=submit&f.email=a%40b.test&f.password={canary}");
        for bad in [
            vec![host, form],
            vec![host, form, ("Origin", "http://evil.test")],
        ] {
            let (st, text) = send(&addr, "POST", &path, &bad, &body).await;
            assert_eq!(st, 403, "{text}");
            assert!(!text.contains(canary));
        }
        // A field it did not offer.
        let own = ("Origin", origin.as_str());
        let (st, text) = send(
            &addr,
            "POST",
            &path,
            &[host, form, own],
            "action=submit&f.x=1",
        )
        .await;
        assert_eq!(st, 400, "{text}");
        // The answer, once.
        let (st, text) = send(&addr, "POST", &path, &[host, form, own], &body).await;
        assert_eq!(st, 200, "{text}");
        assert!(
            !text.contains(canary) && !text.contains("a@b.test"),
            "{text}"
        );
        match page.answer().await {
            Some(PageAnswer::Submit { option, values }) => {
                assert_eq!(option, None);
                let got: Vec<(&str, &str)> = values
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.expose()))
                    .collect();
                assert_eq!(got, [("email", "a@b.test"), ("password", canary)]);
            }
            other => panic!("{other:?}"),
        }
        let (st, _) = send(&addr, "POST", &path, &[host, form, own], &body).await;
        assert_eq!(st, 410);
        assert_eq!(send(&addr, "GET", &path, &[host], "").await.0, 410);
    }

    #[tokio::test]
    async fn a_decline_on_the_page_is_a_decline() {
        let mut page = start(&request()).await.unwrap();
        let url = page.url().to_string();
        let addr = url[7..].split('/').next().unwrap().to_string();
        let path = url.split(&addr).nth(1).unwrap().to_string();
        let origin = format!("http://{addr}");
        let (st, _) = send(
            &addr,
            "POST",
            &path,
            &[
                ("Host", &addr),
                ("Origin", &origin),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            "action=decline",
        )
        .await;
        assert_eq!(st, 200);
        assert!(matches!(page.answer().await, Some(PageAnswer::Decline)));
    }
}
