//! Sign-in out of band (seed 004, "authenticated tasks"; docs/contract.md
//! rule 47): the model asks for a sign-in, the operator answers it, and the
//! values go into the page without ever passing through the model.
//!
//! 1. The model calls the `request_sign_in` function tool with the
//!    credential origin, a reason, the fields it needs (`id`, `label`,
//!    `type` email|password|code|text, `required`, and the element ref the
//!    browser driver gave it as `target`, required: values are never typed
//!    at the desktop's keyboard focus) and, optionally, sign-in methods
//!    (`options`: `id`, `label`, `field_ids`). [`parse_request`] checks the
//!    arguments exactly; every refusal names the field.
//! 2. The runner refuses a request whose origin is missing, unparsable,
//!    outside the URL policy or not the active tab's origin, and has the
//!    daemon check that every target is an input of the field's kind
//!    (`sign_in_check`) before the operator is asked anything.
//! 3. The operator answers: an entry of `--credentials FILE` for the exact
//!    origin ([`Credentials`]: the file must be a regular file of mode 0600
//!    owned by the user running host-cli), or the controlling terminal with
//!    echo off. Neither: declined.
//! 4. The values go to the daemon's `sign_in_fill` (which checks every
//!    target again and types them), and are zeroized when dropped
//!    ([`Secret`]). The model receives only `submitted` (with the option
//!    chosen), `declined` or `cancelled` ([`model_output`]); the trajectory
//!    records the request's shape and the outcome, never a value.
//!
//! Layout: tests apart (`sign_in/tests.rs`): one request's path, from the
//! tool's schema through `parse_request` and `check_answer` to
//! `model_output`, then the credentials file (~165 lines, its own section),
//! the first part to move out (`sign_in/credentials.rs`) if it grows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandtop_protocol::sign_in::{
    CredentialKind, MAX_FIELD_ID_BYTES, MAX_SECRET_CHARS, MAX_SECRET_TOTAL_BYTES,
    MAX_SIGN_IN_FIELDS, Secret,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use sandtop_egress::policy::Origin;

/// The name of the function tool.
pub const TOOL: &str = "request_sign_in";

/// Longest label, reason or option label the model may send (characters).
pub const MAX_LABEL_CHARS: usize = 256;
/// Longest reason (characters).
pub const MAX_REASON_CHARS: usize = 1024;
/// Most sign-in methods in one request.
pub const MAX_OPTIONS: usize = 6;

/// The function tool offered to the model (strict schema).
pub fn tool() -> Value {
    let nullable_string =
        |description: &str| json!({"type": ["string", "null"], "description": description});
    json!({
        "type": "function",
        "name": TOOL,
        "strict": true,
        "description": "Ask the human operator to sign in to a site on the page. The operator \
            enters the values outside this conversation; you never see or type them. Read the \
            page first and name each input by the ref the browser tools gave you: the values go \
            only into those inputs, on a page loaded from the credential origin. The result is \
            only whether the values were submitted; check the page afterwards. Use it for \
            email, password and verification-code fields only; never ask for credentials any \
            other way (not through ask_user, not in your messages).",
        "parameters": {
            "type": "object",
            "properties": {
                "credential_origin": nullable_string("The origin the credentials are for (scheme://host[:port]); it must be the active tab's origin."),
                "reason": nullable_string("Why the sign-in is needed, in one sentence."),
                "fields": {
                    "type": "array",
                    "description": "The inputs to fill (at most 6).",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "An id you choose for the field."},
                            "label": {"type": "string", "description": "The field's label as the page shows it."},
                            "type": {"type": "string", "enum": ["email", "password", "code", "text"]},
                            "required": {"type": "boolean"},
                            "target": {"type": "string", "description": "The input's ref from read_page or find."},
                        },
                        "required": ["id", "label", "type", "required", "target"],
                        "additionalProperties": false,
                    },
                },
                "options": {
                    "type": ["array", "null"],
                    "description": "Sign-in methods to choose from, when the page offers several; null otherwise.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "label": {"type": "string"},
                            "field_ids": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["id", "label", "field_ids"],
                        "additionalProperties": false,
                    },
                },
            },
            "required": ["credential_origin", "reason", "fields", "options"],
            "additionalProperties": false,
        },
    })
}

/// One field of a request, as the model named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub id: String,
    pub label: String,
    #[serde(rename = "type")]
    pub kind: CredentialKind,
    pub required: bool,
    /// The element ref of the input (the browser driver binds it at
    /// entry). There is no other way in: a value is never typed at the
    /// desktop's keyboard focus (docs/security.md L14).
    pub target: String,
}

/// A sign-in method the operator may choose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInOption {
    pub id: String,
    pub label: String,
    pub field_ids: Vec<String>,
}

/// The arguments as the model sent them (before any check).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    credential_origin: Option<String>,
    reason: Option<String>,
    fields: Vec<Field>,
    options: Option<Vec<SignInOption>>,
}

/// A checked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub origin: Origin,
    pub reason: Option<String>,
    pub fields: Vec<Field>,
    /// Empty: no choice of method.
    pub options: Vec<SignInOption>,
}

impl Request {
    /// The fields of an option (all fields when there are no options).
    pub fn fields_of(&self, option: Option<&str>) -> Vec<&Field> {
        match option.and_then(|id| self.options.iter().find(|o| o.id == id)) {
            Some(o) => self
                .fields
                .iter()
                .filter(|f| o.field_ids.contains(&f.id))
                .collect(),
            None => self.fields.iter().collect(),
        }
    }

    /// The request's shape for the trajectory: no value, ever.
    pub fn shape(&self) -> Value {
        json!({
            "origin": self.origin.to_string(),
            "fields": self.fields.iter().map(|f| json!({
                "id": f.id, "label": f.label, "type": f.kind.as_str(), "required": f.required,
                "target": f.target,
            })).collect::<Vec<_>>(),
            "options": self.options.iter().map(|o| json!({
                "id": o.id, "label": o.label, "field_ids": o.field_ids,
            })).collect::<Vec<_>>(),
        })
    }
}

fn short(field: &str, s: &str, max: usize) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err(format!("`{field}` is empty"));
    }
    if s.chars().count() > max {
        return Err(format!("`{field}` is longer than {max} characters"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("`{field}` holds a control character"));
    }
    Ok(())
}

fn id_ok(field: &str, id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > MAX_FIELD_ID_BYTES
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(format!(
            "`{field}` must be 1 to {MAX_FIELD_ID_BYTES} letters, digits, `_`, `-` or `.`"
        ));
    }
    Ok(())
}

/// What is wrong with arguments that do not parse, naming the argument but
/// never quoting a value (serde's messages may).
fn argument_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let name = text
        .split('`')
        .nth(1)
        .filter(|f| {
            !f.is_empty()
                && f.len() <= 32
                && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .unwrap_or("?");
    if text.starts_with("unknown field") {
        format!("`{name}` is not an argument of request_sign_in")
    } else if text.starts_with("missing field") {
        format!("`{name}` is missing")
    } else if text.starts_with("unknown variant") {
        "a field's `type` must be email, password, code or text".into()
    } else {
        format!(
            "the arguments do not match request_sign_in (a wrong type or value near column {}): \
             credential_origin, reason, fields [{{id, label, type, required, target}}] and options",
            e.column()
        )
    }
}

/// Checks the model's arguments. The error is the model-facing reason and
/// names the field; it never quotes what the model sent.
pub fn parse_request(arguments: &str) -> Result<Request, String> {
    let value: Value = serde_json::from_str(arguments).map_err(|e| argument_error(&e))?;
    // Strict mode: every argument present, `null` where allowed (serde
    // would take a missing optional one for null).
    if let Some(obj) = value.as_object() {
        for key in ["credential_origin", "reason", "fields", "options"] {
            if !obj.contains_key(key) {
                return Err(format!("`{key}` is missing"));
            }
        }
        for (i, f) in obj["fields"].as_array().into_iter().flatten().enumerate() {
            match f.as_object().map(|f| f.get("target")) {
                Some(None) => {
                    return Err(format!(
                        "`fields[{i}].target` is missing: name the input's ref from read_page or find"
                    ));
                }
                Some(Some(Value::Null)) => {
                    return Err(format!(
                        "`fields[{i}].target` is null: sign-in values go only into page inputs the \
                         browser tools bound, never into whatever has the keyboard focus; name the \
                         input's ref from read_page or find"
                    ));
                }
                _ => {}
            }
        }
    }
    let raw: RawRequest = serde_json::from_value(value).map_err(|e| argument_error(&e))?;
    let origin_text = raw
        .credential_origin
        .as_deref()
        .filter(|o| !o.trim().is_empty())
        .ok_or("`credential_origin` is missing: name the origin the credentials are for")?;
    if origin_text.len() > sandtop_protocol::sign_in::MAX_ORIGIN_BYTES {
        return Err("`credential_origin` is too long".into());
    }
    let origin: Origin = origin_text.parse().map_err(|_| {
        "`credential_origin` is not an origin (scheme://host[:port], http or https, nothing after)"
            .to_string()
    })?;
    if let Some(r) = &raw.reason {
        short("reason", r, MAX_REASON_CHARS)?;
    }
    let options = raw.options.unwrap_or_default();
    if raw.fields.len() > MAX_SIGN_IN_FIELDS {
        return Err(format!("`fields`: at most {MAX_SIGN_IN_FIELDS} fields"));
    }
    if raw.fields.is_empty() && options.is_empty() {
        return Err("`fields` is empty and there are no `options`: nothing to ask".into());
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut targets = std::collections::BTreeSet::new();
    for (i, f) in raw.fields.iter().enumerate() {
        id_ok(&format!("fields[{i}].id"), &f.id)?;
        if !ids.insert(f.id.as_str()) {
            return Err(format!("`fields[{i}].id` repeats an earlier id"));
        }
        short(&format!("fields[{i}].label"), &f.label, MAX_LABEL_CHARS)?;
        let t = &f.target;
        if t.is_empty() || t.len() > sandtop_protocol::browser::MAX_REF_BYTES {
            return Err(format!(
                "`fields[{i}].target` must be an element ref of 1 to {} bytes",
                sandtop_protocol::browser::MAX_REF_BYTES
            ));
        }
        if !targets.insert(t.as_str()) {
            return Err(format!(
                "`fields[{i}].target` names the same input as an earlier field"
            ));
        }
    }
    if options.len() > MAX_OPTIONS {
        return Err(format!("`options`: at most {MAX_OPTIONS} options"));
    }
    let mut option_ids = std::collections::BTreeSet::new();
    for (i, o) in options.iter().enumerate() {
        id_ok(&format!("options[{i}].id"), &o.id)?;
        if !option_ids.insert(o.id.as_str()) {
            return Err(format!("`options[{i}].id` repeats an earlier id"));
        }
        short(&format!("options[{i}].label"), &o.label, MAX_LABEL_CHARS)?;
        let mut seen = std::collections::BTreeSet::new();
        for (j, id) in o.field_ids.iter().enumerate() {
            if !ids.contains(id.as_str()) {
                return Err(format!(
                    "`options[{i}].field_ids[{j}]` is not the id of a field"
                ));
            }
            if !seen.insert(id.as_str()) {
                return Err(format!("`options[{i}].field_ids[{j}]` is listed twice"));
            }
        }
    }
    Ok(Request {
        origin,
        reason: raw.reason,
        fields: raw.fields,
        options,
    })
}

/// The operator's answer to a request.
#[derive(Debug)]
pub enum Answer {
    /// Values for the fields of the chosen option (or of the request), by
    /// field id, in the request's order.
    Submit {
        option: Option<String>,
        values: Vec<(String, Secret)>,
        /// `file` or `terminal`, for the trajectory.
        source: &'static str,
    },
    /// Nobody answered, or the operator said no; `why` is for the
    /// operator's record (never a value).
    Decline { why: String },
}

/// Checks the operator's values against the request (the seed's
/// submission rules): the option exists when options exist, only its
/// fields, every required one non-empty, within the size limits, no control
/// characters. The error never quotes a value.
pub fn check_answer(
    req: &Request,
    option: Option<&str>,
    values: &[(String, Secret)],
) -> Result<(), String> {
    match (req.options.is_empty(), option) {
        (true, Some(_)) => return Err("an option was chosen, but the request offers none".into()),
        (false, None) => return Err("the request offers options: choose one".into()),
        (false, Some(o)) if !req.options.iter().any(|x| x.id == o) => {
            return Err("the chosen option is not one of the request's".into());
        }
        _ => {}
    }
    let allowed = req.fields_of(option);
    let mut total = 0usize;
    for (id, v) in values {
        let Some(f) = allowed.iter().find(|f| &f.id == id) else {
            return Err(format!("`{id}` is not a field of the chosen option"));
        };
        if v.chars() > MAX_SECRET_CHARS {
            return Err(format!(
                "the value of `{}` is longer than {MAX_SECRET_CHARS} characters",
                f.id
            ));
        }
        if v.expose().chars().any(char::is_control) {
            return Err(format!("the value of `{}` holds a control character", f.id));
        }
        total += v.expose().len();
    }
    if total > MAX_SECRET_TOTAL_BYTES {
        return Err(format!(
            "the values exceed {MAX_SECRET_TOTAL_BYTES} bytes together"
        ));
    }
    for f in &allowed {
        let given = values.iter().find(|(id, _)| *id == f.id);
        if f.required && given.is_none_or(|(_, v)| v.is_empty()) {
            return Err(format!("the required field `{}` has no value", f.id));
        }
    }
    if !allowed.is_empty() && values.iter().all(|(_, v)| v.is_empty()) {
        return Err("no value for any field".into());
    }
    Ok(())
}

/// What the model is told: `submitted` (with the chosen option),
/// `declined` or `cancelled`, and nothing else of the answer.
pub fn model_output(status: Status, option: Option<&str>) -> Value {
    let mut v = json!({"status": status.as_str()});
    if let (Status::Submitted, Some(o)) = (status, option) {
        v["selected_option"] = json!(o);
    }
    v
}

/// Why the daemon refused a `sign_in_check` or `sign_in_fill`, from its
/// code alone (never the guest's text).
pub fn daemon_refusal(code: sandtop_protocol::ErrorCode) -> String {
    use sandtop_protocol::ErrorCode;
    match code {
        ErrorCode::StaleTarget => {
            "a target is stale: read the page again and name its inputs".into()
        }
        ErrorCode::InvalidAction => {
            "a target is not an input for its field's type (a password only into a password input), \
             or the page in the tab was not loaded from the credential origin"
                .into()
        }
        code => crate::browser::toolset::error_text(code).to_string(),
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The values went into the page (which says whether they were right).
    Submitted,
    /// The operator declined, or nobody could answer.
    Declined,
    /// Accepted by the operator, but the page changed before the values
    /// went in (nothing was typed), or the run stopped.
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Submitted => "submitted",
            Status::Declined => "declined",
            Status::Cancelled => "cancelled",
        }
    }
}

// ---------------------------------------------------------------------
// The credentials file
// ---------------------------------------------------------------------

/// `--credentials FILE`: JSON, an object keyed by exact origin; each entry
/// maps a field id or a field type (`email`, `password`, `code`, `text`)
/// to its value, and may name the sign-in method (`"option": "ID"`):
///
/// ```json
/// {"https://accounts.example.com": {"email": "ada@example.com", "password": "..."}}
/// ```
///
/// The file must be a regular file owned by the user running host-cli,
/// with no permission for group or others (0600 or 0400). It is checked at
/// start and read again, and checked again, at each request, so the values
/// are in memory only while one request is answered.
#[derive(Debug, Clone)]
pub struct Credentials {
    path: PathBuf,
}

/// The most bytes of a credentials file.
pub const MAX_CREDENTIALS_FILE: u64 = 1024 * 1024;

/// Why a credentials file was refused or could not be read. No message
/// quotes a value of the file: a malformed one is named by the position
/// of the fault only (serde's own message could quote a value, so it is
/// not kept as a source).
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("--credentials {}: cannot open it (a symbolic link is refused)", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--credentials {}: reading it", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--credentials {}: not a regular file", path.display())]
    NotRegular { path: PathBuf },
    #[error("--credentials {}: owned by uid {owner}, not by you (uid {uid}); refused", path.display())]
    NotYours { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "--credentials {shown}: mode {mode:04o} lets other users read or change it; run `chmod 600 {shown}`",
        shown = path.display()
    )]
    Shared { path: PathBuf, mode: u32 },
    #[error("--credentials {}: larger than {MAX_CREDENTIALS_FILE} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error(
        "--credentials {}: not a JSON object of origin -> {{field id or type -> value}} (line {line}, column {column})",
        path.display()
    )]
    Malformed {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    /// `key` is made inert for a terminal.
    #[error("--credentials {}: `{key}` is not an origin (scheme://host[:port])", path.display())]
    NotAnOrigin { path: PathBuf, key: String },
    #[error("--credentials {}: the origin {origin} is listed twice", path.display())]
    Twice { path: PathBuf, origin: String },
}

impl Credentials {
    /// Checks the file (mode, owner, size, that it parses) without keeping
    /// a value.
    pub fn open(path: &Path) -> Result<Credentials, CredentialsError> {
        let c = Credentials {
            path: path.to_path_buf(),
        };
        drop(c.load()?);
        Ok(c)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file, refusing one that others could read or change.
    fn load(&self) -> Result<BTreeMap<String, Entry>, CredentialsError> {
        use std::io::Read as _;
        use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
        let path = || self.path.clone();
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&self.path)
            .map_err(|source| CredentialsError::Open {
                path: path(),
                source,
            })?;
        let read = |source| CredentialsError::Read {
            path: path(),
            source,
        };
        let meta = f.metadata().map_err(read)?;
        if !meta.file_type().is_file() {
            return Err(CredentialsError::NotRegular { path: path() });
        }
        let uid = rustix::process::geteuid().as_raw();
        if meta.uid() != uid {
            return Err(CredentialsError::NotYours {
                path: path(),
                owner: meta.uid(),
                uid,
            });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(CredentialsError::Shared {
                path: path(),
                mode: meta.mode() & 0o7777,
            });
        }
        if meta.len() > MAX_CREDENTIALS_FILE {
            return Err(CredentialsError::TooLarge { path: path() });
        }
        let mut text = Zeroizing::new(String::new());
        f.read_to_string(&mut text).map_err(read)?;
        let raw: BTreeMap<String, Entry> =
            serde_json::from_str(&text).map_err(|e| CredentialsError::Malformed {
                path: path(),
                line: e.line(),
                column: e.column(),
            })?;
        let mut out = BTreeMap::new();
        for (key, entry) in raw {
            let origin: Origin = key.parse().map_err(|_| CredentialsError::NotAnOrigin {
                path: path(),
                key: sandtop_hostkit::term::safe_line(&key),
            })?;
            if out.insert(origin.to_string(), entry).is_some() {
                return Err(CredentialsError::Twice {
                    path: path(),
                    origin: origin.to_string(),
                });
            }
        }
        Ok(out)
    }

    /// The values of the entry for `origin` (by the key the file uses),
    /// if there is one.
    pub fn entry(
        &self,
        origin: &Origin,
    ) -> Result<Option<BTreeMap<String, Secret>>, CredentialsError> {
        Ok(self.load()?.remove(&origin.to_string()).map(|e| e.values))
    }

    /// The answer the file gives to `req`, if it has an entry for its
    /// origin: the option it names, or else the first option whose fields
    /// it all has; the values by field id, else by field type.
    pub fn answer(&self, req: &Request) -> Result<Option<Answer>, CredentialsError> {
        let mut all = self.load()?;
        let Some(entry) = all.remove(&req.origin.to_string()) else {
            return Ok(None);
        };
        drop(all);
        let value_for = |f: &Field| -> Option<Secret> {
            entry
                .values
                .get(&f.id)
                .or_else(|| entry.values.get(f.kind.as_str()))
                .cloned()
        };
        let option = if req.options.is_empty() {
            None
        } else if let Some(o) = &entry.option {
            Some(o.clone())
        } else {
            req.options
                .iter()
                .find(|o| {
                    o.field_ids.iter().all(|id| {
                        req.fields
                            .iter()
                            .find(|f| &f.id == id)
                            .is_some_and(|f| value_for(f).is_some())
                    })
                })
                .map(|o| o.id.clone())
        };
        if !req.options.is_empty() && option.is_none() {
            return Ok(Some(Answer::Decline {
                why: "the credentials file names no option, and has the values of none".into(),
            }));
        }
        let values: Vec<(String, Secret)> = req
            .fields_of(option.as_deref())
            .into_iter()
            .filter_map(|f| value_for(f).map(|v| (f.id.clone(), v)))
            .collect();
        Ok(Some(Answer::Submit {
            option,
            values,
            source: "file",
        }))
    }
}

/// One origin's entry of the file.
#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    option: Option<String>,
    #[serde(flatten)]
    values: BTreeMap<String, Secret>,
}

#[cfg(test)]
mod tests;
