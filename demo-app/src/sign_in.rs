//! The sign-in flow: a password, then a one-time code, then a page that
//! only a signed-in browser may see. It exists so that the offline exercise
//! can test "sign-in out of band": the host fills the credentials into
//! these pages through the browser driver, and the model never sees them.
//! One flow in one file (about 800 lines and its tests): the pages, the
//! three handlers, the accounts file and the in-memory pending logins and
//! sessions only make sense together; the record is the shared `Store`.
//!
//! How a sign-in flows:
//!
//! 1. `GET /login` answers [`login_page`]: inputs `email` (type `email`,
//!    autocomplete `username`) and `password` (type `password`,
//!    autocomplete `current-password`), button `sign-in`.
//! 2. `POST /login` (urlencoded UTF-8, at most
//!    [`LOGIN_BODY_LIMIT`](crate::LOGIN_BODY_LIMIT) bytes,
//!    exactly the fields [`LOGIN_FIELDS`], else 415/413/400) reads the
//!    accounts file again (so the host may write it after the app
//!    started): a JSON array of `{"email", "password", "code"}` objects,
//!    unknown keys refused, no empty value, no email twice, at most
//!    [`ACCOUNTS_LIMIT`] bytes. An absent file means no accounts; any other
//!    problem answers 500 with a reason that never quotes the file. The
//!    email must match exactly and the password is compared in constant
//!    time, against every account. A match records `password_ok`, sets the
//!    cookie [`PENDING_COOKIE`] and answers 303 to `/login/code`; otherwise
//!    it records `password_wrong` (with the email as given, at most
//!    [`RECORD_EMAIL_CHARS`] characters) and answers 401 with the sign-in
//!    page and "Wrong email or password.". Neither value is echoed back.
//! 3. `GET /login/code` needs a live pending sign-in (else 303 to
//!    `/login`) and answers [`code_page`]: input `code` (type `text`,
//!    inputmode `numeric`, autocomplete `one-time-code`), button `verify`.
//! 4. `POST /login/code` (exactly the field `code`) checks the code of the
//!    pending account (the accounts file read again) in constant time; a
//!    code works once per process (used codes are remembered in memory). A
//!    match records `code_ok`, drops the pending sign-in and its cookie,
//!    sets the cookie [`SESSION_COOKIE`] and answers 303 to `/account`. A
//!    mismatch records `code_wrong` and answers 401 with the code page and
//!    "Wrong code."; the [`MAX_CODE_ATTEMPTS`]th wrong code drops the
//!    pending sign-in and answers 401 with the sign-in page and "Too many
//!    wrong codes. Sign in again.". Without a live pending sign-in: 303 to
//!    `/login`.
//! 5. `GET /account` needs a live session (else 303 to `/login`), records
//!    `protected_page` each time and answers [`account_page`]: "Signed in
//!    as EMAIL".
//! 6. `GET /sign-ins` answers the record as one JSON array.
//!
//! Every record line is `{"seq":N,"received_at":"RFC3339","event":..,
//! "email":..}` ([`SignInRecord`]), appended and fsynced by a [`Store`]:
//! never a password or a code, not even a wrong one. A step whose line
//! cannot be written fails with 500 and changes nothing.
//!
//! Tokens are 32 bytes from `/dev/urandom`, hex-encoded; pending sign-ins
//! and sessions live in memory behind a mutex, at most [`MAX_TOKENS`] of
//! each (the oldest dropped first), and end with the process. Cookies are
//! `HttpOnly; SameSite=Strict; Path=/`. Nothing here logs an email, a
//! password, a code or a token.

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::{AppState, Store, escape_html, html, is_utf8_form, list_json, parse_fields, text};

/// The fields of `POST /login`, in the order they appear on the page.
pub const LOGIN_FIELDS: [&str; 2] = ["email", "password"];

/// The one field of `POST /login/code`.
pub const CODE_FIELDS: [&str; 1] = ["code"];

/// Largest accounts file read, in bytes (1 MiB).
pub const ACCOUNTS_LIMIT: usize = 1024 * 1024;

/// Most pending sign-ins, and most sessions, kept at once; beyond that the
/// oldest is dropped.
pub const MAX_TOKENS: usize = 1024;

/// Wrong codes after which a pending sign-in is dropped.
pub const MAX_CODE_ATTEMPTS: u32 = 5;

/// Characters of a wrongly signed-in email kept in the record.
pub const RECORD_EMAIL_CHARS: usize = 256;

/// Cookie naming a pending sign-in (password right, code still due).
pub const PENDING_COOKIE: &str = "pending_login";

/// Cookie naming a session (password and code right).
pub const SESSION_COOKIE: &str = "session";

/// Shown on the sign-in page after a wrong email or password.
pub const WRONG_PASSWORD: &str = "Wrong email or password.";

/// Shown on the code page after a wrong (or already used) code.
pub const WRONG_CODE: &str = "Wrong code.";

/// Shown on the sign-in page when a pending sign-in got too many wrong codes.
pub const TOO_MANY_CODES: &str = "Too many wrong codes. Sign in again.";

/// What happened, in one line of the sign-in record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignInEvent {
    /// `POST /login` with an account's email and password.
    PasswordOk,
    /// `POST /login` with an unknown email or a wrong password.
    PasswordWrong,
    /// `POST /login/code` with the account's unused code.
    CodeOk,
    /// `POST /login/code` with another code (or one already used).
    CodeWrong,
    /// `GET /account` served to a session.
    ProtectedPage,
}

/// One line of the sign-in record. Holds no password and no code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInRecord {
    /// 1-based sequence number, increasing across restarts.
    pub seq: u64,
    /// Time of the event, RFC 3339 UTC.
    pub received_at: String,
    /// What happened.
    pub event: SignInEvent,
    /// The account's email; for `password_wrong` the email as given, cut to
    /// [`RECORD_EMAIL_CHARS`] characters.
    pub email: String,
}

/// One entry of the accounts file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Account {
    email: String,
    password: String,
    code: String,
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Account")
            .field("email", &self.email)
            .field("password", &"<redacted>")
            .field("code", &"<redacted>")
            .finish()
    }
}

/// Why the accounts file could not be used. The text never quotes the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AccountsError {
    /// Opening or reading it failed (other than being absent).
    Unreadable(io::ErrorKind),
    /// Larger than [`ACCOUNTS_LIMIT`].
    TooLarge,
    /// Not a JSON array of `{"email","password","code"}` strings; where
    /// the parser stopped.
    Malformed { line: usize, column: usize },
    /// An account with an empty email, password or code.
    EmptyValue,
    /// Two accounts with the same email.
    DuplicateEmail,
}

impl fmt::Display for AccountsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable(kind) => write!(f, "the accounts file could not be read ({kind})"),
            Self::TooLarge => write!(f, "the accounts file is larger than {ACCOUNTS_LIMIT} bytes"),
            Self::Malformed { line, column } => write!(
                f,
                "the accounts file is malformed: it must be a JSON array of objects with \
                 exactly the string fields email, password and code (error at line {line}, \
                 column {column})"
            ),
            Self::EmptyValue => f.write_str(
                "the accounts file is malformed: an account has an empty email, password or code",
            ),
            Self::DuplicateEmail => {
                f.write_str("the accounts file is malformed: an email is listed twice")
            }
        }
    }
}

/// Reads and checks the accounts file; an absent file is no accounts.
fn load_accounts(path: &Path) -> Result<Vec<Account>, AccountsError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(AccountsError::Unreadable(err.kind())),
    };
    let mut content = Vec::new();
    file.take(ACCOUNTS_LIMIT as u64 + 1)
        .read_to_end(&mut content)
        .map_err(|err| AccountsError::Unreadable(err.kind()))?;
    if content.len() > ACCOUNTS_LIMIT {
        return Err(AccountsError::TooLarge);
    }
    // serde_json's messages may quote the input: keep only the position.
    let accounts: Vec<Account> =
        serde_json::from_slice(&content).map_err(|err| AccountsError::Malformed {
            line: err.line(),
            column: err.column(),
        })?;
    for (i, account) in accounts.iter().enumerate() {
        if account.email.is_empty() || account.password.is_empty() || account.code.is_empty() {
            return Err(AccountsError::EmptyValue);
        }
        if accounts[..i].iter().any(|a| a.email == account.email) {
            return Err(AccountsError::DuplicateEmail);
        }
    }
    Ok(accounts)
}

/// Compares two byte strings in time that depends only on their lengths:
/// every byte is looked at, with no early exit.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    diff == 0
}

/// 32 bytes from `/dev/urandom`, as 64 lower-case hex digits.
fn random_token() -> io::Result<String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let mut out = String::with_capacity(64);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(out)
}

/// Whether `value` looks like a token made by [`random_token`].
fn is_token(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Tokens and what they stand for, oldest first, at most [`MAX_TOKENS`].
struct Tokens<V> {
    entries: VecDeque<(String, V)>,
}

impl<V> Tokens<V> {
    fn new() -> Self {
        Self {
            entries: VecDeque::new(),
        }
    }

    /// Adds a token, dropping the oldest beyond [`MAX_TOKENS`].
    fn insert(&mut self, token: String, value: V) {
        while self.entries.len() >= MAX_TOKENS {
            self.entries.pop_front();
        }
        self.entries.push_back((token, value));
    }

    /// Where `token` is; every stored token is compared in constant time.
    fn position(&self, token: &str) -> Option<usize> {
        let mut found = None;
        for (i, (stored, _)) in self.entries.iter().enumerate() {
            if constant_time_eq(stored.as_bytes(), token.as_bytes()) && found.is_none() {
                found = Some(i);
            }
        }
        found
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut V> {
        self.entries.get_mut(index).map(|(_, v)| v)
    }

    fn remove(&mut self, index: usize) -> Option<V> {
        self.entries.remove(index).map(|(_, v)| v)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A sign-in whose password was right and whose code is still due.
struct Pending {
    email: String,
    wrong_codes: u32,
}

/// The in-memory part of the sign-in state.
struct Sessions {
    pending: Tokens<Pending>,
    /// Session token to email.
    sessions: Tokens<String>,
    /// `(email, code)` pairs already used to sign in. Grows by one per
    /// successful sign-in only, which takes a code from the accounts file.
    used_codes: Vec<(String, String)>,
}

/// The sign-in flow's state: where the accounts are read from, the record
/// of events, and the pending sign-ins and sessions (in memory).
pub struct SignIn {
    accounts: PathBuf,
    record: Arc<Store>,
    state: Mutex<Sessions>,
}

impl fmt::Debug for SignIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("SignIn")
            .field("accounts", &self.accounts)
            .field("record", &self.record.path())
            .field("pending", &state.pending.len())
            .field("sessions", &state.sessions.len())
            .finish_non_exhaustive()
    }
}

/// Why a sign-in step failed (500). The text quotes no secret.
#[derive(Debug)]
pub(crate) enum SignInError {
    Accounts(AccountsError),
    Record(anyhow::Error),
    Random(io::Error),
    Task(tokio::task::JoinError),
}

impl SignInError {
    /// The plain-text reason answered to the client.
    fn reason(&self) -> String {
        match self {
            Self::Accounts(err) => err.to_string(),
            Self::Record(_) => "the sign-in could not be recorded".to_owned(),
            Self::Random(_) => "no random token could be made".to_owned(),
            Self::Task(_) => "the sign-in step failed".to_owned(),
        }
    }
}

/// For the log: quotes no secret either (the accounts error is a kind or a
/// position, the others are about the record, the RNG or the task).
impl fmt::Display for SignInError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Accounts(err) => write!(f, "{err}"),
            Self::Record(err) => write!(f, "recording the sign-in event: {err:#}"),
            Self::Random(err) => write!(f, "reading /dev/urandom: {err}"),
            Self::Task(err) => write!(f, "the sign-in task: {err}"),
        }
    }
}

impl From<AccountsError> for SignInError {
    fn from(err: AccountsError) -> Self {
        Self::Accounts(err)
    }
}

/// What `POST /login` came to.
pub(crate) enum PasswordOutcome {
    /// Right: the new pending sign-in's token.
    Pending(String),
    /// Unknown email or wrong password.
    Wrong,
}

/// What `POST /login/code` came to.
pub(crate) enum CodeOutcome {
    /// No live pending sign-in for the cookie.
    NoPending,
    /// Right: the new session's token.
    SignedIn(String),
    /// Wrong or used code; the pending sign-in stays.
    Wrong,
    /// Wrong or used code, the last allowed: the pending sign-in is gone.
    TooManyWrong,
}

impl SignIn {
    /// Opens the sign-in record at `record` (created with its parent if
    /// needed, see [`Store::open`]); the accounts file at `accounts` is
    /// only read at each sign-in attempt.
    pub fn open(accounts: &Path, record: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            accounts: accounts.to_path_buf(),
            record: Arc::new(Store::open(record)?),
            state: Mutex::new(Sessions {
                pending: Tokens::new(),
                sessions: Tokens::new(),
                used_codes: Vec::new(),
            }),
        })
    }

    /// Path of the accounts file.
    pub fn accounts_path(&self) -> &Path {
        &self.accounts
    }

    /// The sign-in record.
    pub fn record(&self) -> &Arc<Store> {
        &self.record
    }

    fn append(&self, event: SignInEvent, email: &str, now: SystemTime) -> Result<(), SignInError> {
        let record = self
            .record
            .append_record(now, |seq, received_at| SignInRecord {
                seq,
                received_at,
                event,
                email: email.to_owned(),
            })
            .map_err(SignInError::Record)?;
        tracing::info!(seq = record.seq, event = ?record.event, "sign-in event");
        Ok(())
    }

    /// The password step (blocking: reads the file, fsyncs the record).
    pub(crate) fn password(
        &self,
        email: &str,
        password: &str,
        now: SystemTime,
    ) -> Result<PasswordOutcome, SignInError> {
        let accounts = load_accounts(&self.accounts)?;
        // Every account's password is compared, whichever email matches.
        let mut matched = None;
        for account in &accounts {
            let password_ok = constant_time_eq(account.password.as_bytes(), password.as_bytes());
            if password_ok && account.email == email && matched.is_none() {
                matched = Some(account);
            }
        }
        let Some(account) = matched else {
            let given: String = email.chars().take(RECORD_EMAIL_CHARS).collect();
            self.append(SignInEvent::PasswordWrong, &given, now)?;
            return Ok(PasswordOutcome::Wrong);
        };
        let token = random_token().map_err(SignInError::Random)?;
        self.append(SignInEvent::PasswordOk, &account.email, now)?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.pending.insert(
            token.clone(),
            Pending {
                email: account.email.clone(),
                wrong_codes: 0,
            },
        );
        Ok(PasswordOutcome::Pending(token))
    }

    /// Whether `token` names a live pending sign-in.
    pub(crate) fn has_pending(&self, token: &str) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.pending.position(token).is_some()
    }

    /// The code step (blocking). The state stays locked throughout, so a
    /// code cannot be used twice by two requests at once.
    pub(crate) fn code(
        &self,
        pending: &str,
        code: &str,
        now: SystemTime,
    ) -> Result<CodeOutcome, SignInError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(index) = state.pending.position(pending) else {
            return Ok(CodeOutcome::NoPending);
        };
        let Some(email) = state.pending.get_mut(index).map(|p| p.email.clone()) else {
            return Ok(CodeOutcome::NoPending);
        };
        let accounts = load_accounts(&self.accounts)?;
        let code_ok = accounts
            .iter()
            .find(|a| a.email == email)
            .is_some_and(|a| constant_time_eq(a.code.as_bytes(), code.as_bytes()));
        let unused = !state
            .used_codes
            .iter()
            .any(|(e, c)| *e == email && c == code);
        if code_ok && unused {
            let session = random_token().map_err(SignInError::Random)?;
            self.append(SignInEvent::CodeOk, &email, now)?;
            state.pending.remove(index);
            state.used_codes.push((email.clone(), code.to_owned()));
            state.sessions.insert(session.clone(), email);
            return Ok(CodeOutcome::SignedIn(session));
        }
        self.append(SignInEvent::CodeWrong, &email, now)?;
        let Some(pending) = state.pending.get_mut(index) else {
            return Ok(CodeOutcome::NoPending);
        };
        pending.wrong_codes += 1;
        if pending.wrong_codes >= MAX_CODE_ATTEMPTS {
            state.pending.remove(index);
            Ok(CodeOutcome::TooManyWrong)
        } else {
            Ok(CodeOutcome::Wrong)
        }
    }

    /// The email of the session `token`, recording `protected_page`
    /// (blocking); `None` without a live session.
    pub(crate) fn account(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<Option<String>, SignInError> {
        let email = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match state.sessions.position(token) {
                Some(index) => state.sessions.get_mut(index).cloned(),
                None => None,
            }
        };
        let Some(email) = email else {
            return Ok(None);
        };
        self.append(SignInEvent::ProtectedPage, &email, now)?;
        Ok(Some(email))
    }
}

/// A page with the shared head and style; `title` is escaped, `body` is
/// inserted as is.
fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>\n{style}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        title = escape_html(title),
        style = style!(),
    )
}

/// The `#error` paragraph, or nothing.
fn error_paragraph(message: Option<&str>) -> String {
    message
        .map(|m| {
            format!(
                "<p id=\"error\" class=\"error\" role=\"alert\">{}</p>\n",
                escape_html(m)
            )
        })
        .unwrap_or_default()
}

/// The sign-in page (`GET /login`, and the 401 answers of a failed
/// attempt with `message`). Never holds a value typed before.
pub fn login_page(message: Option<&str>) -> String {
    page(
        "Sign in",
        &format!(
            "<h1>Sign in</h1>\n{error}\
             <form method=\"post\" action=\"/login\" accept-charset=\"utf-8\">\n\
             <label for=\"email\">Email</label>\n\
             <input id=\"email\" name=\"email\" type=\"email\" autocomplete=\"username\" \
             spellcheck=\"false\">\n\
             <label for=\"password\">Password</label>\n\
             <input id=\"password\" name=\"password\" type=\"password\" \
             autocomplete=\"current-password\">\n\
             <button id=\"sign-in\" type=\"submit\">Sign in</button>\n\
             </form>\n<p><a id=\"contact-link\" href=\"/\">Contact form</a></p>\n",
            error = error_paragraph(message),
        ),
    )
}

/// The code page (`GET /login/code`, and the 401 answer of a wrong code
/// with `message`).
pub fn code_page(message: Option<&str>) -> String {
    page(
        "Verification code",
        &format!(
            "<h1>Verification code</h1>\n{error}\
             <form method=\"post\" action=\"/login/code\" accept-charset=\"utf-8\">\n\
             <label for=\"code\">Code</label>\n\
             <input id=\"code\" name=\"code\" type=\"text\" inputmode=\"numeric\" \
             autocomplete=\"one-time-code\" spellcheck=\"false\">\n\
             <button id=\"verify\" type=\"submit\">Verify</button>\n</form>\n",
            error = error_paragraph(message),
        ),
    )
}

/// The page only a session sees (`GET /account`).
pub fn account_page(email: &str) -> String {
    page(
        "Account",
        &format!(
            "<h1>Account</h1>\n<p id=\"signed-in-as\">Signed in as {email}</p>\n\
             <p><a id=\"contact-link\" href=\"/\">Contact form</a></p>\n",
            email = escape_html(email),
        ),
    )
}

/// The first value of cookie `name` shaped like a token.
fn cookie_token(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, value)| *key == name && is_token(value))
        .map(|(_, value)| value.to_owned())
}

/// `Set-Cookie` value setting `name` to `token`, or (`None`) removing it.
fn set_cookie(name: &str, token: Option<&str>) -> String {
    match token {
        Some(token) => format!("{name}={token}; HttpOnly; SameSite=Strict; Path=/"),
        None => format!("{name}=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/"),
    }
}

/// Adds `Set-Cookie` headers to a response.
fn with_cookies(mut response: Response, cookies: &[String]) -> Response {
    for cookie in cookies {
        match HeaderValue::from_str(cookie) {
            Ok(value) => {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            Err(_) => {
                tracing::error!("a cookie could not be set");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "a cookie could not be set",
                );
            }
        }
    }
    response
}

/// 303 See Other to `location`, not cached.
fn see_other(location: &'static str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, HeaderValue::from_static(location)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
    )
        .into_response()
}

/// 500 with the step's plain-text reason.
fn failed(err: &SignInError) -> Response {
    tracing::error!("a sign-in step failed: {err}");
    text(StatusCode::INTERNAL_SERVER_ERROR, err.reason())
}

/// Runs a blocking sign-in step on a blocking thread.
async fn blocking<T: Send + 'static>(
    step: impl FnOnce() -> Result<T, SignInError> + Send + 'static,
) -> Result<T, SignInError> {
    tokio::task::spawn_blocking(step)
        .await
        .map_err(SignInError::Task)?
}

fn form_refused(headers: &HeaderMap, route: &str) -> Option<Response> {
    (!is_utf8_form(headers)).then(|| {
        text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("POST {route} expects Content-Type: application/x-www-form-urlencoded (UTF-8)"),
        )
    })
}

/// `GET /login`.
pub(crate) async fn login_page_handler() -> Response {
    tracing::debug!("served the sign-in page");
    html(StatusCode::OK, login_page(None))
}

/// `POST /login`.
pub(crate) async fn login_handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = form_refused(&headers, "/login") {
        return refused;
    }
    let [email, password] = match parse_fields(&body, &LOGIN_FIELDS) {
        Ok(values) => values,
        Err(err) => return text(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let sign_in = state.sign_in;
    let now = SystemTime::now();
    match blocking(move || sign_in.password(&email, &password, now)).await {
        Ok(PasswordOutcome::Pending(token)) => with_cookies(
            see_other("/login/code"),
            &[set_cookie(PENDING_COOKIE, Some(&token))],
        ),
        Ok(PasswordOutcome::Wrong) => {
            html(StatusCode::UNAUTHORIZED, login_page(Some(WRONG_PASSWORD)))
        }
        Err(err) => failed(&err),
    }
}

/// `GET /login/code`.
pub(crate) async fn code_page_handler(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Response {
    let Some(token) = cookie_token(&headers, PENDING_COOKIE) else {
        return see_other("/login");
    };
    let sign_in = state.sign_in;
    // Blocking: the state's mutex may be held across a record's fsync.
    match blocking(move || Ok(sign_in.has_pending(&token))).await {
        Ok(true) => html(StatusCode::OK, code_page(None)),
        Ok(false) => see_other("/login"),
        Err(err) => failed(&err),
    }
}

/// `POST /login/code`.
pub(crate) async fn code_handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = form_refused(&headers, "/login/code") {
        return refused;
    }
    let [code] = match parse_fields(&body, &CODE_FIELDS) {
        Ok(values) => values,
        Err(err) => return text(StatusCode::BAD_REQUEST, err.to_string()),
    };
    let Some(pending) = cookie_token(&headers, PENDING_COOKIE) else {
        return see_other("/login");
    };
    let sign_in = state.sign_in;
    let now = SystemTime::now();
    let drop_pending = set_cookie(PENDING_COOKIE, None);
    match blocking(move || sign_in.code(&pending, &code, now)).await {
        Ok(CodeOutcome::NoPending) => with_cookies(see_other("/login"), &[drop_pending]),
        Ok(CodeOutcome::SignedIn(session)) => with_cookies(
            see_other("/account"),
            &[drop_pending, set_cookie(SESSION_COOKIE, Some(&session))],
        ),
        Ok(CodeOutcome::Wrong) => html(StatusCode::UNAUTHORIZED, code_page(Some(WRONG_CODE))),
        Ok(CodeOutcome::TooManyWrong) => with_cookies(
            html(StatusCode::UNAUTHORIZED, login_page(Some(TOO_MANY_CODES))),
            &[drop_pending],
        ),
        Err(err) => failed(&err),
    }
}

/// `GET /account`.
pub(crate) async fn account_handler(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(token) = cookie_token(&headers, SESSION_COOKIE) else {
        return see_other("/login");
    };
    let sign_in = state.sign_in;
    let now = SystemTime::now();
    match blocking(move || sign_in.account(&token, now)).await {
        Ok(Some(email)) => html(StatusCode::OK, account_page(&email)),
        Ok(None) => see_other("/login"),
        Err(err) => failed(&err),
    }
}

/// `GET /sign-ins`.
pub(crate) async fn sign_ins_handler(State(state): State<AppState>) -> Response {
    tracing::debug!("listing the sign-in record");
    list_json(
        Arc::clone(state.sign_in.record()),
        "the sign-in record could not be read",
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn compares_in_constant_time_shape() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"", b"x"));
        // Trailing zero bytes do not make a shorter string equal.
        assert!(!constant_time_eq(b"ab", b"ab\0"));
    }

    #[test]
    fn tokens_are_random_hex() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert!(is_token(&a) && is_token(&b), "{a} {b}");
        assert_ne!(a, b);
        assert!(!is_token(&a.to_uppercase()));
        assert!(!is_token(&a[1..]));
    }

    #[test]
    fn tokens_are_bounded_oldest_first() {
        let mut tokens = Tokens::new();
        for i in 0..MAX_TOKENS + 3 {
            tokens.insert(format!("t{i}"), i);
        }
        assert_eq!(tokens.len(), MAX_TOKENS);
        assert_eq!(tokens.position("t0"), None);
        assert_eq!(tokens.position("t2"), None);
        assert_eq!(tokens.position("t3"), Some(0));
        let last = format!("t{}", MAX_TOKENS + 2);
        let index = tokens.position(&last).unwrap();
        assert_eq!(tokens.remove(index), Some(MAX_TOKENS + 2));
        assert_eq!(tokens.position(&last), None);
    }

    #[test]
    fn loads_accounts_strictly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("accounts.json");
        assert!(load_accounts(&path).unwrap().is_empty());

        std::fs::write(
            &path,
            r#"[{"email":"a@x.test","password":"pw","code":"123456"}]"#,
        )
        .unwrap();
        let accounts = load_accounts(&path).unwrap();
        assert_eq!(accounts.len(), 1);
        assert_eq!(accounts[0].email, "a@x.test");
        let debug = format!("{accounts:?}");
        assert!(
            !debug.contains("pw") && !debug.contains("123456"),
            "{debug}"
        );

        let secret = "hunter2-do-not-quote";
        let bad = [
            format!(r#"{{"email":"a","password":"{secret}","code":"1"}}"#),
            format!(r#"[{{"email":"a","password":"{secret}","code":"1","admin":true}}]"#),
            format!(r#"[{{"email":"a","password":"{secret}"}}]"#),
            format!(r#"[{{"email":"a","password":{secret:?},"code":1}}]"#),
            format!(r#"[{{"email":"a","password":"{secret}","code":"1"}}"#),
            format!(r#"[{{"email":"a","password":"{secret}","code":""}}]"#),
            format!(
                r#"[{{"email":"a","password":"{secret}","code":"1"}},
                   {{"email":"a","password":"x","code":"2"}}]"#
            ),
            secret.to_owned(),
        ];
        for content in bad {
            std::fs::write(&path, &content).unwrap();
            let err = load_accounts(&path).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(shown.contains("malformed"), "{content}: {shown}");
            assert!(!shown.contains("hunter2"), "{content}: {shown}");
        }

        std::fs::write(&path, vec![b' '; ACCOUNTS_LIMIT + 1]).unwrap();
        assert_eq!(load_accounts(&path).unwrap_err(), AccountsError::TooLarge);
        assert!(matches!(
            load_accounts(dir.path()).unwrap_err(),
            AccountsError::Unreadable(_)
        ));
    }

    #[test]
    fn record_lines_have_no_secret_fields() {
        let record = SignInRecord {
            seq: 7,
            received_at: "1970-01-01T00:00:00.000Z".into(),
            event: SignInEvent::PasswordWrong,
            email: "a@x.test".into(),
        };
        assert_eq!(
            serde_json::to_string(&record).unwrap(),
            r#"{"seq":7,"received_at":"1970-01-01T00:00:00.000Z","event":"password_wrong","email":"a@x.test"}"#
        );
        for (event, name) in [
            (SignInEvent::PasswordOk, "password_ok"),
            (SignInEvent::CodeOk, "code_ok"),
            (SignInEvent::CodeWrong, "code_wrong"),
            (SignInEvent::ProtectedPage, "protected_page"),
        ] {
            assert_eq!(serde_json::to_value(event).unwrap(), name);
        }
    }

    #[test]
    fn a_code_works_once_and_the_record_continues() {
        let dir = tempfile::tempdir().unwrap();
        let accounts = dir.path().join("accounts.json");
        let record = dir.path().join("sign-ins.jsonl");
        std::fs::write(
            &accounts,
            r#"[{"email":"a@x.test","password":"pw","code":"42"}]"#,
        )
        .unwrap();
        let sign_in = SignIn::open(&accounts, &record).unwrap();
        let PasswordOutcome::Pending(p1) = sign_in.password("a@x.test", "pw", UNIX_EPOCH).unwrap()
        else {
            panic!("password refused")
        };
        let PasswordOutcome::Pending(p2) = sign_in.password("a@x.test", "pw", UNIX_EPOCH).unwrap()
        else {
            panic!("password refused")
        };
        assert!(matches!(
            sign_in.code(&p1, "42", UNIX_EPOCH).unwrap(),
            CodeOutcome::SignedIn(_)
        ));
        // The first pending sign-in is gone; the second cannot reuse the code.
        assert!(matches!(
            sign_in.code(&p1, "42", UNIX_EPOCH).unwrap(),
            CodeOutcome::NoPending
        ));
        assert!(matches!(
            sign_in.code(&p2, "42", UNIX_EPOCH).unwrap(),
            CodeOutcome::Wrong
        ));
        let debug = format!("{sign_in:?}");
        assert!(!debug.contains("42") && !debug.contains(&p2), "{debug}");
        drop(sign_in);
        let again = SignIn::open(&accounts, &record).unwrap();
        again
            .append(SignInEvent::PasswordOk, "a@x.test", UNIX_EPOCH)
            .unwrap();
        let seqs: Vec<u64> = again
            .record()
            .list()
            .unwrap()
            .iter()
            .map(|v| v["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
    }
}
