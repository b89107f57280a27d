//! `sandtop-demo`: the small web form that the offline exercise fills in
//! inside the Sandtop guest, the store that records what was submitted, and
//! a sign-in flow (password, then a one-time code) for the exercise's
//! "sign-in out of band": the host fills the credentials into the page
//! through the browser driver, and the model never sees them.
//!
//! The guest's entry script starts it on a loopback address (127.0.0.1:8080)
//! before `sandtopd`; Firefox in the guest opens it, and the computer-use
//! model fills the form in. Nothing outside the guest can reach it (the guest
//! runs with `--network none`, and [`check_listen_addr`] refuses anything but
//! loopback addresses).
//!
//! How a request flows:
//!
//! 1. `GET /` answers [`FORM_PAGE`]: a UTF-8 HTML form with the fields
//!    `name`, `email` and `message` (big fonts, stacked, labelled, ids equal
//!    to the field names, the button is `submit`).
//! 2. The browser posts it to `POST /submit` as
//!    `application/x-www-form-urlencoded`. The body is capped at
//!    [`BODY_LIMIT`] bytes before it is read (413 above). [`parse_form`]
//!    decodes it strictly: every field exactly once, no other field, valid
//!    percent-encoding and valid UTF-8, else 400 with a plain-text reason.
//!    Text is never normalised, so accents, CJK and emoji survive byte-exact
//!    (including the CRLF line breaks browsers send for textareas).
//! 3. [`Store::append`] (on a blocking thread) assigns the next sequence
//!    number, appends one JSON line
//!    `{"seq":N,"received_at":"RFC3339","name":..,"email":..,"message":..}`
//!    to the store file and fsyncs it before answering "Saved submission N",
//!    with every value escaped as HTML.
//! 4. `GET /submissions` answers the stored lines as one JSON array, for
//!    the checker that compares what the model typed with what was asked.
//!
//! The form page also links to the sign-in ("Sign in", `#sign-in-link`).
//! How a sign-in flows (details in [`sign_in`]):
//!
//! 5. `GET /login` answers the sign-in page: `email` and `password`
//!    inputs, button `sign-in`. `POST /login` takes exactly those two
//!    fields (same strict parsing, capped at [`LOGIN_BODY_LIMIT`] bytes).
//!    The accounts file (`--accounts`, a JSON array of
//!    `{"email","password","code"}`) is read again on every attempt, so the
//!    host may write it after the app started; absent means no accounts, a
//!    malformed one answers 500 with a reason that never quotes the file.
//!    The password is compared in constant time. A match sets the random
//!    `pending_login` cookie and answers 303 to `/login/code`; a mismatch
//!    answers 401 with the page again and "Wrong email or password.".
//! 6. `GET /login/code` (pending cookie needed, else 303 to `/login`)
//!    answers the code page: input `code`, button `verify`. `POST
//!    /login/code` takes exactly `code`; the account's code works once per
//!    process. A match drops the pending cookie, sets the random `session`
//!    cookie and answers 303 to `/account`; a mismatch answers 401 with
//!    "Wrong code."; the fifth wrong code drops the pending sign-in (401
//!    with the sign-in page).
//! 7. `GET /account` (session cookie needed, else 303 to `/login`) answers
//!    "Signed in as EMAIL".
//! 8. Each step appends one fsynced JSON line to the sign-in record
//!    (`--sign-ins`): `{"seq":N,"received_at":"RFC3339","event":..,
//!    "email":..}` with the events `password_ok`, `password_wrong`,
//!    `code_ok`, `code_wrong` and `protected_page` — never a password or a
//!    code. `GET /sign-ins` answers the record as one JSON array.
//!
//! Layout: inline tests at the end: the form, its
//! strict parser, the `Store` and the router, with the helpers `sign_in` uses
//! too (`parse_fields`, `html`, `list_json`, ...). If it grows, the parser or
//! the `Store` would be the next module.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

/// Largest request body accepted by `POST /submit`, in bytes (64 KiB).
pub const BODY_LIMIT: usize = 64 * 1024;

/// Largest request body accepted by `POST /login` and `POST /login/code`,
/// in bytes (4 KiB).
pub const LOGIN_BODY_LIMIT: usize = 4 * 1024;

/// The three fields of the form, in the order they appear on the page.
pub const FIELDS: [&str; 3] = ["name", "email", "message"];

/// Content-Security-Policy of every HTML page: no scripts at all, inline
/// styles only, and the form may only post back to this origin.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   base-uri 'none'; frame-ancestors 'none'";

/// Shared style of the pages: big fonts, fields stacked, easy to click.
/// A macro so that [`FORM_PAGE`] can stay one `concat!`ed constant.
macro_rules! style {
    () => {
        "body { font-family: 'DejaVu Sans', sans-serif; font-size: 24px; margin: 32px; max-width: 900px; }
h1 { font-size: 32px; margin: 0 0 24px 0; }
label { display: block; font-weight: bold; margin: 20px 0 8px 0; }
input, textarea { display: block; box-sizing: border-box; width: 100%; font: inherit; padding: 10px; border: 2px solid #444; border-radius: 6px; }
textarea { height: 200px; resize: vertical; }
button { margin-top: 28px; font: inherit; font-weight: bold; padding: 14px 48px; min-height: 64px; border: 2px solid #1d4ed8; border-radius: 6px; background: #2563eb; color: #fff; cursor: pointer; }
dt { font-weight: bold; margin-top: 16px; }
dd { margin: 4px 0 0 0; white-space: pre-wrap; word-break: break-word; border: 1px solid #bbb; padding: 8px; }
a { font-size: 24px; }
nav { float: right; }
.error { color: #b91c1c; font-weight: bold; }
"
    };
}

pub mod sign_in;

pub use sign_in::SignIn;

/// The page served by `GET /`.
pub const FORM_PAGE: &str = concat!(
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
    "<title>Contact form</title>\n<style>\n",
    style!(),
    "</style>\n</head>\n<body>\n",
    // Floats right of the heading: the form below keeps its place.
    "<nav><a id=\"sign-in-link\" href=\"/login\">Sign in</a></nav>\n",
    "<h1>Contact form</h1>\n",
    "<form method=\"post\" action=\"/submit\" accept-charset=\"utf-8\" autocomplete=\"off\">\n",
    "<label for=\"name\">Name</label>\n",
    "<input id=\"name\" name=\"name\" type=\"text\" autofocus spellcheck=\"false\">\n",
    "<label for=\"email\">Email</label>\n",
    "<input id=\"email\" name=\"email\" type=\"text\" inputmode=\"email\" spellcheck=\"false\">\n",
    "<label for=\"message\">Message</label>\n",
    "<textarea id=\"message\" name=\"message\" rows=\"6\" spellcheck=\"false\"></textarea>\n",
    "<button id=\"submit\" type=\"submit\">Submit</button>\n",
    "</form>\n</body>\n</html>\n",
);

/// Refuses every listen address that is not loopback (127.0.0.0/8 or ::1):
/// the form must never be reachable from outside the guest.
pub fn check_listen_addr(addr: SocketAddr) -> anyhow::Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        bail!(
            "refusing to listen on {addr}: sandtop-demo only binds loopback addresses \
             (127.0.0.0/8 or [::1]); use e.g. --listen 127.0.0.1:8080"
        )
    }
}

/// The decoded fields of one form submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmissionForm {
    /// `name` field.
    pub name: String,
    /// `email` field.
    pub email: String,
    /// `message` field (textarea; browsers send CRLF line breaks).
    pub message: String,
}

/// Why a form body was refused. Shown to the client as plain text; never
/// quotes a value (a refused sign-in form must not echo its password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormError {
    /// A field that is not one of the form's fields (name truncated for
    /// display), with the fields the form has.
    UnknownField(String, &'static [&'static str]),
    /// One of the form's fields is absent, with the fields the form has.
    MissingField(&'static str, &'static [&'static str]),
    /// One of the form's fields appears more than once.
    DuplicateField(&'static str),
    /// A `%` not followed by two hex digits.
    BadPercentEncoding,
    /// A name or value that does not decode to valid UTF-8.
    InvalidUtf8,
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

impl fmt::Display for FormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownField(name, fields) => write!(
                f,
                "unknown field {name:?}: the form has exactly the fields {}",
                fields.join(", ")
            ),
            Self::MissingField(name, fields) => write!(
                f,
                "missing field {name:?}: the form needs {}",
                and_list(fields)
            ),
            Self::DuplicateField(name) => write!(f, "field {name:?} given more than once"),
            Self::BadPercentEncoding => {
                f.write_str("malformed percent-encoding: '%' must be followed by two hex digits")
            }
            Self::InvalidUtf8 => f.write_str("form data is not valid UTF-8"),
        }
    }
}

impl std::error::Error for FormError {}

/// Decodes an `application/x-www-form-urlencoded` body strictly: `+` is a
/// space, `%XX` a byte, the decoded bytes must be UTF-8 (never replaced with
/// U+FFFD), and each of `fields` must appear exactly once with no other
/// field. Empty values are allowed; empty `&&` segments are ignored. The
/// values come back in the order of `fields`.
pub fn parse_fields<const N: usize>(
    body: &[u8],
    fields: &'static [&'static str; N],
) -> Result<[String; N], FormError> {
    let mut values: [Option<String>; N] = [const { None }; N];
    for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (raw_key, raw_value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let key = percent_decode(raw_key)?;
        let Some(index) = fields.iter().position(|f| *f == key) else {
            return Err(FormError::UnknownField(
                key.chars().take(64).collect(),
                fields,
            ));
        };
        if values[index].is_some() {
            return Err(FormError::DuplicateField(fields[index]));
        }
        values[index] = Some(percent_decode(raw_value)?);
    }
    if let Some(index) = values.iter().position(Option::is_none) {
        return Err(FormError::MissingField(fields[index], fields));
    }
    Ok(values.map(Option::unwrap_or_default))
}

/// Decodes the contact form (each of [`FIELDS`] exactly once, see
/// [`parse_fields`]).
pub fn parse_form(body: &[u8]) -> Result<SubmissionForm, FormError> {
    let [name, email, message] = parse_fields(body, &FIELDS)?;
    Ok(SubmissionForm {
        name,
        email,
        message,
    })
}

fn percent_decode(input: &[u8]) -> Result<String, FormError> {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = input.get(i + 1).copied().and_then(hex);
                let lo = input.get(i + 2).copied().and_then(hex);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                    _ => return Err(FormError::BadPercentEncoding),
                }
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| FormError::InvalidUtf8)
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Formats a time as RFC 3339 in UTC with millisecond precision, e.g.
/// `2026-05-08T09:41:07.123Z`. Times before 1970 are clamped to the epoch.
pub fn rfc3339_utc(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// One stored submission: exactly one line of the store file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    /// 1-based sequence number, increasing across restarts.
    pub seq: u64,
    /// Arrival time, RFC 3339 UTC.
    pub received_at: String,
    /// `name` field as submitted.
    pub name: String,
    /// `email` field as submitted.
    pub email: String,
    /// `message` field as submitted.
    pub message: String,
}

/// An append-only JSON-lines file of records, each one line with a 1-based
/// `seq` and a `received_at` time: the submissions, and (a second store)
/// the sign-in record.
///
/// One writer per file is assumed (the one `sandtop-demo` process); within
/// the process a mutex orders appends and reads.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    inner: Mutex<StoreInner>,
}

#[derive(Debug)]
struct StoreInner {
    file: File,
    next_seq: u64,
}

impl Store {
    /// Opens (creating the parent directory and the file if needed) the
    /// store at `path`. The next sequence number continues after the
    /// largest one already stored; a torn last line (a crash mid-write) is
    /// terminated so that the next append starts on a line of its own.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            fs::create_dir_all(parent)
                .with_context(|| format!("creating the store directory {}", parent.display()))?;
        }
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .with_context(|| format!("opening the store {}", path.display()))?;
        let mut content = Vec::new();
        file.read_to_end(&mut content)
            .with_context(|| format!("reading the store {}", path.display()))?;
        /// The one field every record has (other fields ignored).
        #[derive(Deserialize)]
        struct Seq {
            seq: u64,
        }
        let mut max_seq = 0;
        for line in content.split(|&b| b == b'\n') {
            if let Ok(record) = serde_json::from_slice::<Seq>(line) {
                max_seq = max_seq.max(record.seq);
            }
        }
        if content.last().is_some_and(|&b| b != b'\n') {
            tracing::warn!(store = %path.display(), "store ends with a torn line; terminating it");
            file.write_all(b"\n")?;
            file.sync_all()?;
        }
        if !existed {
            file.sync_all()?;
            if let Some(parent) = parent {
                // Make the new directory entry durable too.
                File::open(parent)?.sync_all()?;
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            inner: Mutex::new(StoreInner {
                file,
                next_seq: max_seq + 1,
            }),
        })
    }

    /// Path of the store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one submission as a JSON line and fsyncs the file before
    /// returning it (see [`Store::append_record`]).
    pub fn append(&self, form: SubmissionForm, now: SystemTime) -> anyhow::Result<Submission> {
        self.append_record(now, |seq, received_at| Submission {
            seq,
            received_at,
            name: form.name,
            email: form.email,
            message: form.message,
        })
    }

    /// Appends one record as a JSON line and fsyncs the file before
    /// returning it. `make` builds the record from the next sequence number
    /// and `now` as RFC 3339; it must serialise to a JSON object with that
    /// `seq`. On a failed write the file is cut back to its previous length
    /// and the sequence number is not consumed.
    pub fn append_record<T: Serialize>(
        &self,
        now: SystemTime,
        make: impl FnOnce(u64, String) -> T,
    ) -> anyhow::Result<T> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let record = make(inner.next_seq, rfc3339_utc(now));
        let mut line = serde_json::to_vec(&record)?;
        line.push(b'\n');
        let before = inner.file.metadata()?.len();
        let written = inner
            .file
            .write_all(&line)
            .and_then(|()| inner.file.sync_all());
        if let Err(err) = written {
            // Best effort: do not leave half a line behind.
            let _ = inner.file.set_len(before);
            return Err(err).with_context(|| format!("appending to {}", self.path.display()));
        }
        inner.next_seq += 1;
        Ok(record)
    }

    /// Every stored line, parsed, in file order. Lines that do not parse
    /// (a torn write after a crash) are skipped with a warning.
    pub fn list(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut content = Vec::new();
        inner.file.seek(SeekFrom::Start(0))?;
        inner.file.read_to_end(&mut content)?;
        let mut out = Vec::new();
        for (index, line) in content.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<serde_json::Value>(line) {
                Ok(value) => out.push(value),
                Err(err) => {
                    tracing::warn!(line = index + 1, %err, "skipping unreadable store line")
                }
            }
        }
        Ok(out)
    }
}

/// What the handlers share: the submissions store and the sign-in state
/// (which holds the sign-in record).
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) store: Arc<Store>,
    pub(crate) sign_in: Arc<SignIn>,
}

/// Builds the HTTP router around the submissions store and the sign-in
/// state.
pub fn router(store: Arc<Store>, sign_in: Arc<SignIn>) -> Router {
    Router::new()
        .route("/", get(form_page))
        .route("/submit", post(submit))
        .route("/submissions", get(submissions))
        .route(
            "/login",
            get(sign_in::login_page_handler)
                .post(sign_in::login_handler)
                .layer(DefaultBodyLimit::max(LOGIN_BODY_LIMIT)),
        )
        .route(
            "/login/code",
            get(sign_in::code_page_handler)
                .post(sign_in::code_handler)
                .layer(DefaultBodyLimit::max(LOGIN_BODY_LIMIT)),
        )
        .route("/account", get(sign_in::account_handler))
        .route("/sign-ins", get(sign_in::sign_ins_handler))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(AppState { store, sign_in })
}

pub(crate) fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    let mut body = body.into();
    body.push('\n');
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn form_page() -> Response {
    tracing::debug!("served the form");
    html(StatusCode::OK, FORM_PAGE.to_owned())
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found: try GET /, POST /submit, GET /submissions, GET /login or GET /sign-ins",
    )
}

/// Accepts `application/x-www-form-urlencoded` with no charset or UTF-8.
pub(crate) fn is_utf8_form(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mut parts = value.split(';').map(str::trim);
    let is_form = parts
        .next()
        .is_some_and(|m| m.eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    is_form
        && parts.all(|param| match param.split_once('=') {
            Some((key, val)) if key.trim().eq_ignore_ascii_case("charset") => {
                val.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
            }
            _ => true,
        })
}

async fn submit(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if !is_utf8_form(&headers) {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "POST /submit expects Content-Type: application/x-www-form-urlencoded (UTF-8)",
        );
    }
    let form = match parse_form(&body) {
        Ok(form) => form,
        Err(err) => return text(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let now = SystemTime::now();
    let store = state.store;
    let saved = tokio::task::spawn_blocking(move || store.append(form, now)).await;
    let sub = match saved {
        Ok(Ok(sub)) => sub,
        Ok(Err(err)) => {
            tracing::error!("saving a submission failed: {err:#}");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the submission could not be saved",
            );
        }
        Err(err) => {
            tracing::error!("the store task failed: {err}");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the submission could not be saved",
            );
        }
    };
    tracing::info!(seq = sub.seq, "saved a submission");
    html(StatusCode::OK, saved_page(&sub))
}

/// The page answered after a successful `POST /submit`: what was
/// submitted, without the time it was received (that stays in the stored
/// record), so that the page of a replayed run is the recorded one
/// (`host-cli replay` compares screens).
pub fn saved_page(sub: &Submission) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>Saved submission {seq}</title>\n<style>\n{style}</style>\n</head>\n<body>\n\
         <h1 id=\"result\" data-seq=\"{seq}\">Saved submission {seq}</h1>\n<dl>\n\
         <dt>Name</dt><dd id=\"saved-name\">{name}</dd>\n\
         <dt>Email</dt><dd id=\"saved-email\">{email}</dd>\n\
         <dt>Message</dt><dd id=\"saved-message\">{message}</dd>\n</dl>\n\
         <p><a id=\"again\" href=\"/\">New submission</a></p>\n</body>\n</html>\n",
        seq = sub.seq,
        name = escape_html(&sub.name),
        email = escape_html(&sub.email),
        message = escape_html(&sub.message),
        style = style!(),
    )
}

async fn submissions(State(state): State<AppState>) -> Response {
    tracing::debug!("listing the submissions");
    list_json(state.store, "the submissions could not be read").await
}

/// Answers every line of `store` as one JSON array (`no-store`), or 500
/// with `failure` as the plain-text reason.
pub(crate) async fn list_json(store: Arc<Store>, failure: &'static str) -> Response {
    match tokio::task::spawn_blocking(move || store.list()).await {
        Ok(Ok(list)) => {
            let mut response = axum::Json(list).into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Ok(Err(err)) => {
            tracing::error!("reading the store failed: {err:#}");
            text(StatusCode::INTERNAL_SERVER_ERROR, failure)
        }
        Err(err) => {
            tracing::error!("the store task failed: {err}");
            text(StatusCode::INTERNAL_SERVER_ERROR, failure)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn loopback_only() {
        for ok in ["127.0.0.1:8080", "127.9.8.7:1", "[::1]:8080"] {
            assert!(check_listen_addr(ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in [
            "0.0.0.0:8080",
            "[::]:8080",
            "10.0.0.1:80",
            "[::ffff:127.0.0.1]:80",
        ] {
            let err = check_listen_addr(bad.parse().unwrap()).unwrap_err();
            assert!(err.to_string().contains("loopback"), "{bad}: {err}");
        }
    }

    #[test]
    fn parses_browser_encoding_byte_exact() {
        // What Firefox sends for: "José 中文 👋", "a+b@x.y", "l1\r\nl2 & <b>".
        let body = b"name=Jos%C3%A9+%E4%B8%AD%E6%96%87+%F0%9F%91%8B&email=a%2Bb%40x.y\
                     &message=l1%0D%0Al2+%26+%3Cb%3E";
        let form = parse_form(body).unwrap();
        assert_eq!(form.name, "José 中文 👋");
        assert_eq!(form.email, "a+b@x.y");
        assert_eq!(form.message, "l1\r\nl2 & <b>");
    }

    #[test]
    fn allows_empty_values_and_any_order() {
        let form = parse_form(b"message=&email=&name").unwrap();
        assert_eq!(form.name, "");
        assert_eq!(form.email, "");
        assert_eq!(form.message, "");
    }

    #[test]
    fn refuses_bad_forms() {
        let cases: [(&[u8], FormError); 6] = [
            (
                b"name=a&email=b",
                FormError::MissingField("message", &FIELDS),
            ),
            (
                b"name=a&email=b&message=c&x=1",
                FormError::UnknownField("x".into(), &FIELDS),
            ),
            (
                b"name=a&name=b&email=b&message=c",
                FormError::DuplicateField("name"),
            ),
            (b"name=%ZZ&email=b&message=c", FormError::BadPercentEncoding),
            (b"name=%4&email=b&message=c", FormError::BadPercentEncoding),
            (b"name=%FF&email=b&message=c", FormError::InvalidUtf8),
        ];
        for (body, want) in cases {
            assert_eq!(parse_form(body).unwrap_err(), want);
        }
        assert_eq!(
            FormError::MissingField("email", &FIELDS).to_string(),
            "missing field \"email\": the form needs name, email and message"
        );
        assert_eq!(
            FormError::UnknownField("x".into(), &FIELDS).to_string(),
            "unknown field \"x\": the form has exactly the fields name, email, message"
        );
        assert_eq!(
            parse_fields(b"code=1&code=2", &["code"]).unwrap_err(),
            FormError::DuplicateField("code")
        );
        assert_eq!(
            FormError::MissingField("password", &["email", "password"]).to_string(),
            "missing field \"password\": the form needs email and password"
        );
        assert_eq!(
            parse_fields(b"password=p%26&email=e", &["email", "password"]).unwrap(),
            ["e".to_owned(), "p&".to_owned()]
        );
    }

    #[test]
    fn escapes_html() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a> é"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt; é"
        );
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_000 + 86_399_999);
        assert_eq!(rfc3339_utc(t), "2000-02-29T23:59:59.999Z");
        let t = UNIX_EPOCH + Duration::from_secs(4_102_444_800);
        assert_eq!(rfc3339_utc(t), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn store_appends_fsyncs_and_continues_numbering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/submissions.jsonl");
        let form = SubmissionForm {
            name: "Zoë 😀".into(),
            email: "z@例え.jp".into(),
            message: "a\r\nb\"c\\".into(),
        };
        {
            let store = Store::open(&path).unwrap();
            assert_eq!(store.append(form.clone(), UNIX_EPOCH).unwrap().seq, 1);
            assert_eq!(store.append(form.clone(), UNIX_EPOCH).unwrap().seq, 2);
        }
        // A crash mid-write leaves a torn line; reopening repairs and continues.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"seq\":3,\"recei").unwrap();
        drop(file);
        let store = Store::open(&path).unwrap();
        let sub = store.append(form.clone(), UNIX_EPOCH).unwrap();
        assert_eq!(sub.seq, 3);
        let list = store.list().unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[2]["name"], "Zoë 😀");
        let content = fs::read_to_string(&path).unwrap();
        let last = content.lines().last().unwrap();
        assert_eq!(
            last,
            r#"{"seq":3,"received_at":"1970-01-01T00:00:00.000Z","name":"Zoë 😀","email":"z@例え.jp","message":"a\r\nb\"c\\"}"#
        );
    }
}
