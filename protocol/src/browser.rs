//! The browser driver's wire types: `POST /v1/browser/state` and
//! `POST /v1/browser/call` (daemon/openapi.yaml).
//!
//! The daemon owns a Firefox it started itself and speaks WebDriver BiDi to
//! it; the host owns the toolset rules (member selection, confirmation, URL
//! policy, result validation, the model-facing shapes). These types carry a
//! call from the second to the first and its raw result back:
//! - [`BrowserCall`]: one member with its validated arguments (the host has
//!   already checked them; the daemon checks again, strictly);
//! - [`BrowserReply`]: the member's [`BrowserOutcome`] and the browser's
//!   [`BrowserState`] read after the call, so that a call costs one round
//!   trip, state included.
//!
//! Tab URLs travel in full here (the host reduces them to origins before
//! the model sees them) and are capped by the daemon at
//! [`MAX_URL_BYTES`]; titles at [`MAX_TITLE_BYTES`].
//!
//! Layout: tests apart (`browser/tests.rs`): the two endpoints' wire types,
//! kept together so each of `BrowserCall`'s 31 members sits beside its limits
//! and its `check`. If it grows, the page read's types (`BrowserRead`,
//! `ReadElement`, ...) are the natural split.

use serde::{Deserialize, Serialize};

mod request;
pub use request::{BrowserRequest, ExpectedPage, ExpectedTarget, MAX_POLICY_ORIGINS};

/// The members a toolset offers by default, in the seed's order.
pub const DEFAULT_MEMBERS: [&str; 18] = [
    "navigate",
    "read_page",
    "get_page_text",
    "find",
    "click",
    "type",
    "key",
    "scroll",
    "select_option",
    "hover",
    "screenshot",
    "zoom",
    "new_tab",
    "list_tabs",
    "switch_tab",
    "close_tab",
    "scroll_to",
    "wait_for",
];

/// Longest tab URL the daemon reports, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Longest tab title the daemon reports, in bytes (cut at a character).
pub const MAX_TITLE_BYTES: usize = 1024;
/// Longest element ref (and tab id the model names): in `limits`, which
/// the sign-in checks share.
pub use crate::limits::MAX_REF_BYTES;
/// Longest label in a read report, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// Longest value in a read report, in bytes.
pub const MAX_VALUE_BYTES: usize = 512;
/// Most elements in one read report.
pub const MAX_READ_ELEMENTS: usize = 500;
/// Most bytes of visible text in one read report.
pub const MAX_READ_TEXT_BYTES: usize = 32 * 1024;
/// Most tabs the daemon lets the model have open.
pub const MAX_TABS: usize = 32;
/// `wait_for`: the longest timeout, in milliseconds.
pub const MAX_WAIT_MS: u32 = 30_000;
/// `wait_for`: the longest text, in bytes after whitespace normalisation.
pub const MAX_WAIT_TEXT_BYTES: usize = 256;
/// `scroll`: the largest distance, in CSS pixels.
pub const MAX_SCROLL_PIXELS: u64 = 100_000;

/// One tab, as the daemon reports it (URLs in full, bounded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserTab {
    pub id: String,
    pub title: String,
    pub url: String,
    pub active: bool,
    /// The daemon cut the title at [`MAX_TITLE_BYTES`].
    #[serde(default)]
    pub title_truncated: bool,
}

/// Every tab of the daemon's browser; exactly one is active when any exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserState {
    pub tabs: Vec<BrowserTab>,
}

/// `read_page`'s filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFilter {
    All,
    Interactive,
}

/// `click_at`'s button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointerButton {
    Left,
    Right,
    Middle,
}

/// A modifier held during `click_at` or `drag_path` (the seed's spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Modifier {
    Control,
    Alt,
    Meta,
    Shift,
}

/// One point of a `drag_path`, in CSS pixels of the whole viewport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathPoint {
    pub x: u64,
    pub y: u64,
}

/// `drag_path`: the fewest and most points.
pub const DRAG_PATH_POINTS: std::ops::RangeInclusive<usize> = 2..=100;
/// `hold_keys`: the most keys.
pub const MAX_HOLD_KEYS: usize = 8;
/// `hold_keys`: the longest hold, in milliseconds.
pub const MAX_HOLD_MS: u32 = 3000;

/// `scroll`'s direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScrollDirection {
    Up,
    Down,
    Left,
    Right,
}

/// One call of a browser member, with its arguments. `tab_id: None` means
/// the active tab. `list_tabs` is no call: it is the state every reply
/// carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "member", rename_all = "snake_case", deny_unknown_fields)]
pub enum BrowserCall {
    Navigate {
        tab_id: Option<String>,
        url: String,
    },
    ReadPage {
        tab_id: Option<String>,
        filter: ReadFilter,
    },
    GetPageText {
        tab_id: Option<String>,
    },
    Find {
        tab_id: Option<String>,
        query: String,
    },
    Click {
        tab_id: Option<String>,
        target: String,
    },
    Type {
        tab_id: Option<String>,
        text: String,
        target: Option<String>,
    },
    Key {
        tab_id: Option<String>,
        keys: Vec<String>,
    },
    Scroll {
        tab_id: Option<String>,
        direction: ScrollDirection,
        amount: u64,
    },
    SelectOption {
        tab_id: Option<String>,
        target: String,
        values: Vec<String>,
    },
    Hover {
        tab_id: Option<String>,
        target: String,
    },
    Screenshot {
        tab_id: Option<String>,
    },
    Zoom {
        tab_id: Option<String>,
        region: [u64; 4],
    },
    NewTab {
        url: Option<String>,
    },
    SwitchTab {
        tab_id: String,
    },
    CloseTab {
        tab_id: String,
    },
    ScrollTo {
        tab_id: Option<String>,
        target: String,
    },
    WaitFor {
        tab_id: Option<String>,
        text: String,
        timeout_ms: u32,
    },
    /// Opt-in: a read of one section (`root`, a scope ref) or, with no
    /// root, of the page with its sections listed; `depth` DOM levels.
    ReadPageScoped {
        tab_id: Option<String>,
        root: Option<String>,
        depth: u8,
        filter: ReadFilter,
    },
    /// Opt-in: the tab's latest console entries or network requests,
    /// filtered, as a text-only read.
    ReadDiagnostics {
        tab_id: Option<String>,
        source: DiagnosticSource,
        limit: u8,
    },
    /// Opt-in: JavaScript run in the page's own realm (page privileges);
    /// its result must be a string.
    RunScript {
        tab_id: Option<String>,
        source: String,
        timeout_ms: u32,
    },
    /// Opt-in: a click at a viewport point (CSS pixels).
    ClickAt {
        tab_id: Option<String>,
        x: u64,
        y: u64,
        button: PointerButton,
        click_count: u8,
        keys: Vec<Modifier>,
    },
    /// Opt-in: a left-button drag along viewport points.
    DragPath {
        tab_id: Option<String>,
        path: Vec<PathPoint>,
        keys: Vec<Modifier>,
    },
    /// Opt-in: the pointer moved to a viewport point, no button held.
    HoverAt {
        tab_id: Option<String>,
        x: u64,
        y: u64,
    },
    /// Opt-in: keys held together for a while, then released.
    HoldKeys {
        tab_id: Option<String>,
        keys: Vec<String>,
        duration_ms: u32,
    },
    /// Opt-in: a checkbox or radio set to `checked` (idempotent).
    SetChecked {
        tab_id: Option<String>,
        target: String,
        checked: bool,
    },
    /// Sign-in (host only, never a model member): checks that the tab is
    /// on `origin` and that each target is a live input of its kind.
    SignInCheck {
        tab_id: Option<String>,
        origin: String,
        fields: Vec<crate::sign_in::SignInTarget>,
    },
    /// Sign-in (host only): the same checks again, then each value typed
    /// into its target, which stays masked in later reads.
    SignInFill {
        tab_id: Option<String>,
        origin: String,
        fields: Vec<crate::sign_in::SignInValue>,
    },
    /// File upload (host only: the model's `upload_file` names a grant,
    /// the host sends the granted file's basename and bytes). The daemon
    /// writes them into a private directory of the guest and sets that
    /// file on the tab's one file input (the focused `<input type=file>`,
    /// else the only one of the document).
    SetFile {
        tab_id: Option<String>,
        name: String,
        content_base64: String,
    },
    /// File download (host only): the newest complete file of the
    /// browser's download folder, read (not removed).
    TakeDownload {},
    /// File download (host only): removes a download the host has kept.
    RemoveDownload {
        name: String,
    },
    /// Host only (docs/contract.md rule 28a): the element `target` names in the
    /// tab's current document now, as a read reports it (one element),
    /// read again right before the operator is asked about a call on it.
    DescribeTarget {
        tab_id: Option<String>,
        target: String,
    },
    /// Host only (docs/contract.md rule 28b): the page a call would act on now, read
    /// right before the operator is asked about a call no ref binds: the
    /// tab (the active one for `tab_id: null`), its document's registry
    /// id and the keyboard focus ([`PageIdentity`]).
    DescribePage {
        tab_id: Option<String>,
    },
}

impl BrowserCall {
    /// The member's name, as in [`DEFAULT_MEMBERS`].
    pub fn member(&self) -> &'static str {
        match self {
            BrowserCall::Navigate { .. } => "navigate",
            BrowserCall::ReadPage { .. } => "read_page",
            BrowserCall::GetPageText { .. } => "get_page_text",
            BrowserCall::Find { .. } => "find",
            BrowserCall::Click { .. } => "click",
            BrowserCall::Type { .. } => "type",
            BrowserCall::Key { .. } => "key",
            BrowserCall::Scroll { .. } => "scroll",
            BrowserCall::SelectOption { .. } => "select_option",
            BrowserCall::Hover { .. } => "hover",
            BrowserCall::Screenshot { .. } => "screenshot",
            BrowserCall::Zoom { .. } => "zoom",
            BrowserCall::NewTab { .. } => "new_tab",
            BrowserCall::SwitchTab { .. } => "switch_tab",
            BrowserCall::CloseTab { .. } => "close_tab",
            BrowserCall::ScrollTo { .. } => "scroll_to",
            BrowserCall::WaitFor { .. } => "wait_for",
            BrowserCall::ReadPageScoped { .. } => "read_page_scoped",
            BrowserCall::RunScript { .. } => "run_script",
            BrowserCall::ReadDiagnostics { .. } => "read_diagnostics",
            BrowserCall::ClickAt { .. } => "click_at",
            BrowserCall::DragPath { .. } => "drag_path",
            BrowserCall::HoverAt { .. } => "hover_at",
            BrowserCall::HoldKeys { .. } => "hold_keys",
            BrowserCall::SetChecked { .. } => "set_checked",
            BrowserCall::SignInCheck { .. } => "sign_in_check",
            BrowserCall::SignInFill { .. } => "sign_in_fill",
            BrowserCall::SetFile { .. } => "set_file",
            BrowserCall::TakeDownload {} => "take_download",
            BrowserCall::RemoveDownload { .. } => "remove_download",
            BrowserCall::DescribeTarget { .. } => "describe_target",
            BrowserCall::DescribePage { .. } => "describe_page",
        }
    }

    /// The limits the daemon and the host both enforce, with a message that
    /// names the field. (Schema-level rules — types, required fields,
    /// unknown fields — are serde's.)
    pub fn check(&self) -> Result<(), crate::Invalid> {
        match self {
            BrowserCall::WaitFor {
                text, timeout_ms, ..
            } => {
                let n = normalize_space(text);
                if n.is_empty() || n.len() > MAX_WAIT_TEXT_BYTES {
                    return Err(crate::invalid!(
                        "`text`: 1 to {MAX_WAIT_TEXT_BYTES} bytes after whitespace normalisation, got {}",
                        n.len()
                    ));
                }
                if !(1..=MAX_WAIT_MS).contains(timeout_ms) {
                    return Err(crate::invalid!(
                        "`timeout_ms`: 1 to {MAX_WAIT_MS}, got {timeout_ms}"
                    ));
                }
            }
            BrowserCall::Zoom { region, .. } => {
                let [l, t, r, b] = *region;
                if l >= r || t >= b {
                    return Err(
                        "`region`: [left, top, right, bottom] needs left < right and top < bottom"
                            .into(),
                    );
                }
            }
            BrowserCall::Scroll { amount, .. } if *amount > MAX_SCROLL_PIXELS => {
                return Err(crate::invalid!(
                    "`amount`: at most {MAX_SCROLL_PIXELS}, got {amount}"
                ));
            }
            BrowserCall::Type { text, .. } => {
                crate::check_text(text).map_err(|e| format!("`text`: {e}"))?
            }
            BrowserCall::Key { keys, .. } => {
                if keys.is_empty() || keys.len() > crate::limits::MAX_KEYS {
                    return Err(crate::invalid!(
                        "`keys`: 1 to {} key names, got {}",
                        crate::limits::MAX_KEYS,
                        keys.len()
                    ));
                }
                for k in keys {
                    if k.is_empty() || k.len() > crate::limits::MAX_KEY_NAME_BYTES {
                        return Err(crate::invalid!(
                            "`keys`: a key name is 1 to {} bytes",
                            crate::limits::MAX_KEY_NAME_BYTES
                        ));
                    }
                }
            }
            BrowserCall::SelectOption { values, .. } if values.is_empty() || values.len() > 256 => {
                return Err(crate::invalid!(
                    "`values`: 1 to 256 values, got {}",
                    values.len()
                ));
            }
            BrowserCall::ReadDiagnostics { limit, .. }
                if !(1..=MAX_DIAGNOSTICS).contains(limit) =>
            {
                return Err(crate::invalid!(
                    "`limit`: 1 to {MAX_DIAGNOSTICS}, got {limit}"
                ));
            }
            BrowserCall::RunScript {
                source, timeout_ms, ..
            } => {
                if source.trim().is_empty() || source.len() > MAX_SCRIPT_BYTES {
                    return Err(crate::invalid!(
                        "`source`: 1 to {MAX_SCRIPT_BYTES} bytes of code, got {}",
                        source.len()
                    ));
                }
                if source.contains('\0') {
                    return Err("`source`: no NUL characters".into());
                }
                if !(1..=MAX_WAIT_MS).contains(timeout_ms) {
                    return Err(crate::invalid!(
                        "`timeout_ms`: 1 to {MAX_WAIT_MS}, got {timeout_ms}"
                    ));
                }
            }
            BrowserCall::SignInCheck { origin, fields, .. } => {
                crate::sign_in::check_targets(origin, fields.iter().map(|f| f.target.as_str()))?
            }
            BrowserCall::SignInFill { origin, fields, .. } => {
                crate::sign_in::check_targets(origin, fields.iter().map(|f| f.target.as_str()))?;
                crate::sign_in::check_values(fields)?
            }
            BrowserCall::SetFile {
                name,
                content_base64,
                ..
            } => {
                check_file_name(name).map_err(|e| format!("`name`: {e}"))?;
                if content_base64.len() > base64_len(MAX_UPLOAD_BYTES) {
                    return Err(crate::invalid!(
                        "`content_base64`: at most {MAX_UPLOAD_BYTES} bytes of content"
                    ));
                }
            }
            BrowserCall::RemoveDownload { name } => {
                check_file_name(name).map_err(|e| format!("`name`: {e}"))?
            }
            BrowserCall::ReadPageScoped { root, depth, .. } => {
                if !(1..=MAX_SCOPE_DEPTH).contains(depth) {
                    return Err(crate::invalid!(
                        "`depth`: 1 to {MAX_SCOPE_DEPTH}, got {depth}"
                    ));
                }
                if let Some(r) = root
                    && (r.is_empty() || r.len() > MAX_REF_BYTES)
                {
                    return Err(crate::invalid!("`root`: 1 to {MAX_REF_BYTES} bytes"));
                }
            }
            BrowserCall::ClickAt {
                click_count, keys, ..
            } => {
                if !(1..=3).contains(click_count) {
                    return Err(crate::invalid!(
                        "`click_count`: 1, 2 or 3, got {click_count}"
                    ));
                }
                unique_modifiers(keys)?;
            }
            BrowserCall::DragPath { path, keys, .. } => {
                if !DRAG_PATH_POINTS.contains(&path.len()) {
                    return Err(crate::invalid!(
                        "`path`: {} to {} points, got {}",
                        DRAG_PATH_POINTS.start(),
                        DRAG_PATH_POINTS.end(),
                        path.len()
                    ));
                }
                unique_modifiers(keys)?;
            }
            BrowserCall::HoldKeys {
                keys, duration_ms, ..
            } => {
                if keys.is_empty() || keys.len() > MAX_HOLD_KEYS {
                    return Err(crate::invalid!(
                        "`keys`: 1 to {MAX_HOLD_KEYS} key names, got {}",
                        keys.len()
                    ));
                }
                for (i, k) in keys.iter().enumerate() {
                    if k.is_empty() || k.len() > crate::limits::MAX_KEY_NAME_BYTES {
                        return Err(crate::invalid!(
                            "`keys`: a key name is 1 to {} bytes",
                            crate::limits::MAX_KEY_NAME_BYTES
                        ));
                    }
                    if keys[..i].contains(k) {
                        return Err("`keys`: each key once".into());
                    }
                }
                if !(1..=MAX_HOLD_MS).contains(duration_ms) {
                    return Err(crate::invalid!(
                        "`duration_ms`: 1 to {MAX_HOLD_MS}, got {duration_ms}"
                    ));
                }
            }
            _ => {}
        }
        for (name, value) in self.refs() {
            if value.is_empty() || value.len() > MAX_REF_BYTES {
                return Err(crate::invalid!("`{name}`: 1 to {MAX_REF_BYTES} bytes"));
            }
        }
        Ok(())
    }

    /// The element refs and tab ids the call names, with their field names.
    fn refs(&self) -> Vec<(&'static str, &str)> {
        let mut out = Vec::new();
        match self {
            BrowserCall::Click { target, .. }
            | BrowserCall::SetChecked { target, .. }
            | BrowserCall::Hover { target, .. }
            | BrowserCall::ScrollTo { target, .. }
            | BrowserCall::DescribeTarget { target, .. }
            | BrowserCall::SelectOption { target, .. } => out.push(("target", target.as_str())),
            BrowserCall::Type {
                target: Some(t), ..
            } => out.push(("target", t.as_str())),
            BrowserCall::SwitchTab { tab_id } | BrowserCall::CloseTab { tab_id } => {
                out.push(("tab_id", tab_id.as_str()))
            }
            _ => {}
        }
        if let Some(t) = self.tab_id() {
            out.push(("tab_id", t));
        }
        out
    }

    /// The optional tab the call targets (`None`: the active tab).
    pub fn tab_id(&self) -> Option<&str> {
        match self {
            BrowserCall::Navigate { tab_id, .. }
            | BrowserCall::ReadPage { tab_id, .. }
            | BrowserCall::GetPageText { tab_id }
            | BrowserCall::Find { tab_id, .. }
            | BrowserCall::Click { tab_id, .. }
            | BrowserCall::Type { tab_id, .. }
            | BrowserCall::Key { tab_id, .. }
            | BrowserCall::Scroll { tab_id, .. }
            | BrowserCall::SelectOption { tab_id, .. }
            | BrowserCall::Hover { tab_id, .. }
            | BrowserCall::Screenshot { tab_id }
            | BrowserCall::Zoom { tab_id, .. }
            | BrowserCall::ScrollTo { tab_id, .. }
            | BrowserCall::WaitFor { tab_id, .. }
            | BrowserCall::ReadPageScoped { tab_id, .. }
            | BrowserCall::RunScript { tab_id, .. }
            | BrowserCall::ReadDiagnostics { tab_id, .. }
            | BrowserCall::ClickAt { tab_id, .. }
            | BrowserCall::DragPath { tab_id, .. }
            | BrowserCall::HoverAt { tab_id, .. }
            | BrowserCall::HoldKeys { tab_id, .. }
            | BrowserCall::SetChecked { tab_id, .. }
            | BrowserCall::SignInCheck { tab_id, .. }
            | BrowserCall::SignInFill { tab_id, .. }
            | BrowserCall::SetFile { tab_id, .. }
            | BrowserCall::DescribeTarget { tab_id, .. }
            | BrowserCall::DescribePage { tab_id } => tab_id.as_deref(),
            BrowserCall::TakeDownload {} | BrowserCall::RemoveDownload { .. } => None,
            BrowserCall::NewTab { .. }
            | BrowserCall::SwitchTab { .. }
            | BrowserCall::CloseTab { .. } => None,
        }
    }
}

/// File transfer: the largest upload, in bytes. Its base64 form must fit
/// the daemon's request body limit ([`crate::limits::MAX_BODY_BYTES`],
/// 1 MiB), so uploads are capped at 512 KiB.
pub const MAX_UPLOAD_BYTES: usize = 512 * 1024;
/// File transfer: the largest download, in bytes (its base64 form fits the
/// host's reply limit, [`crate::limits::MAX_REPLY_BYTES`]).
pub const MAX_DOWNLOAD_BYTES: usize = 16 * 1024 * 1024;
/// File transfer: the longest file name, in bytes.
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// The length of `n` bytes in padded base64.
pub const fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// A file name both sides accept: a plain basename of 1 to
/// [`MAX_FILE_NAME_BYTES`] bytes, no `/`, no control characters, not `.`
/// or `..`, not hidden (no leading `.`).
pub fn check_file_name(name: &str) -> Result<(), crate::Invalid> {
    if name.is_empty() || name.len() > MAX_FILE_NAME_BYTES {
        return Err(crate::invalid!("1 to {MAX_FILE_NAME_BYTES} bytes"));
    }
    if name.contains(['/', '\\']) || name.chars().any(char::is_control) {
        return Err("a plain file name (no slash, no control characters)".into());
    }
    if name.starts_with('.') {
        return Err("not `.`, `..` or a hidden name".into());
    }
    Ok(())
}

/// A `keys` list of modifiers names each at most once.
fn unique_modifiers(keys: &[Modifier]) -> Result<(), crate::Invalid> {
    for (i, k) in keys.iter().enumerate() {
        if keys[..i].contains(k) {
            return Err(crate::invalid!("`keys`: {k:?} twice"));
        }
    }
    Ok(())
}

/// Whitespace runs become one space; leading and trailing space goes.
pub fn normalize_space(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The roles a read report names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadRole {
    Button,
    Textbox,
    Combobox,
    Checkbox,
    Radio,
    Slider,
    Listbox,
}

/// Why a read report left something out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Omission {
    /// More elements than [`MAX_READ_ELEMENTS`].
    ReportLimit,
    /// Visible text beyond [`MAX_READ_TEXT_BYTES`].
    TextLimit,
    /// The document holds more refs than the driver keeps.
    TargetLimit,
    /// The walk stopped at its node budget.
    WorkLimit,
    /// Frames nested too deep, or too many.
    FrameLimit,
    /// The document is not an HTML page the driver reads (a viewer, an
    /// image, a privileged page).
    UnsupportedRoot,
    /// A control the roles cannot express (a file or colour input).
    UnsupportedControl,
    /// Content in a cross-origin frame: neither read nor actionable.
    RemoteAction,
    /// A password field's value (never reported).
    Private,
    /// A value longer than [`MAX_VALUE_BYTES`] was cut.
    Value,
    /// A label longer than [`MAX_LABEL_BYTES`] was cut, or an element
    /// without any accessible name was left out.
    NameLimit,
}

/// One option of a combobox or listbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadOption {
    pub label: String,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<bool>,
}

/// One actionable element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadElement {
    #[serde(rename = "ref")]
    pub reference: String,
    pub role: ReadRole,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<ReadOption>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<bool>,
}

/// The seed's `BrowserReadV1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserRead {
    pub version: u8,
    pub text: String,
    pub elements: Vec<ReadElement>,
    pub omitted: Vec<Omission>,
    /// `read_page_scoped` only (BrowserScopedReadV1): the sections under
    /// the read's root, each a scope ref that can be the next read's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<ReadScope>>,
}

/// A section a scoped read found: its scope ref (never an element ref)
/// and a label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadScope {
    #[serde(rename = "ref")]
    pub reference: String,
    pub label: String,
}

/// `read_diagnostics`'s source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosticSource {
    Console,
    Network,
}

/// `read_diagnostics`: the most entries one call returns.
pub const MAX_DIAGNOSTICS: u8 = 100;

/// `run_script`: the longest source, in bytes.
pub const MAX_SCRIPT_BYTES: usize = 64 * 1024;
/// `run_script`: the longest text result, in bytes (cut at a character).
pub const MAX_SCRIPT_RESULT_BYTES: usize = 32 * 1024;

/// `read_page_scoped`: the deepest read, in DOM levels below the root.
pub const MAX_SCOPE_DEPTH: u8 = 32;

/// A viewport capture (PNG).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserImage {
    pub png_base64: String,
    pub width: u32,
    pub height: u32,
}

/// The page a call would act on now (`describe_page`): the tab, the
/// page agent's registry id of its document (new on every load), and the
/// keyboard focus: the ref of the element holding it, `none` (nothing
/// but the body) or `frame` (a frame the agent cannot look into).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageIdentity {
    pub tab_id: String,
    pub document: String,
    pub focus: String,
}

/// What one member returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BrowserOutcome {
    /// An action that returns nothing but its effect.
    Done,
    /// A short message from the driver (`wait_for`: the text appeared).
    Text {
        text: String,
    },
    Read(BrowserRead),
    Image(BrowserImage),
    /// The page a call would act on (`describe_page`).
    Page(PageIdentity),
    /// A download taken from the browser's download folder.
    File {
        name: String,
        content_base64: String,
    },
}

/// The daemon's answer to one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserReply {
    pub outcome: BrowserOutcome,
    pub state: BrowserState,
    /// Time spent in the browser for this call, state read included.
    pub elapsed_ms: u64,
}

#[cfg(test)]
mod tests;
