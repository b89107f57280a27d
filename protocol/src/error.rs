//! Error codes on the wire. Every failure the daemon answers carries a JSON
//! body `{code, message}`; the HTTP status follows from the code
//! ([`ErrorCode::http_status`]), in this one place.

use serde::{Deserialize, Serialize};

/// Defines [`ErrorCode`] from one table — variant, wire name, HTTP status —
/// so that the enum, [`ErrorCode::ALL`], [`ErrorCode::as_str`] and
/// [`ErrorCode::http_status`] cannot disagree, and a new code is in `ALL`
/// (and so in every table test) by construction.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident = $wire:literal => $status:literal,)*) => {
        /// A stable, machine-readable error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ErrorCode {
            $($(#[$doc])* #[serde(rename = $wire)] $name,)*
        }

        impl ErrorCode {
            /// Every code, for table tests.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name),*];

            /// The HTTP status for this code. The only code-to-status table.
            pub fn http_status(self) -> u16 {
                match self {
                    $(ErrorCode::$name => $status,)*
                }
            }

            /// The wire name (the same string serde writes).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $wire,)*
                }
            }
        }
    };
}

error_codes! {
    /// Malformed JSON, an unknown field, a wrong type.
    BadRequest = "bad_request" => 400,
    /// An action that is structurally wrong or whose text cannot be typed.
    InvalidAction = "invalid_action" => 422,
    /// A coordinate outside the screenshot the model saw.
    OutOfBounds = "out_of_bounds" => 422,
    /// A key name the daemon does not know.
    UnknownKey = "unknown_key" => 422,
    /// A limit in `limits` was exceeded.
    LimitExceeded = "limit_exceeded" => 422,
    /// The expected ScaleMap no longer matches the screen.
    StaleScaleMap = "stale_scale_map" => 409,
    /// Missing or wrong bearer token.
    Unauthorized = "unauthorized" => 401,
    /// A browser-originated request or an unexpected Host.
    Forbidden = "forbidden" => 403,
    NotFound = "not_found" => 404,
    MethodNotAllowed = "method_not_allowed" => 405,
    /// The body is larger than `limits::MAX_BODY_BYTES`.
    PayloadTooLarge = "payload_too_large" => 413,
    UnsupportedMediaType = "unsupported_media_type" => 415,
    /// Another input call is running on this desktop.
    Busy = "busy" => 409,
    /// Too many requests in flight.
    Overloaded = "overloaded" => 503,
    /// The request's deadline passed.
    Timeout = "timeout" => 504,
    /// The request was cancelled (client gone, daemon draining).
    Cancelled = "cancelled" => 499,
    /// The X display is not reachable.
    DisplayUnavailable = "display_unavailable" => 503,
    /// Input could not be delivered in order: another client kept the
    /// pointer or keyboard frozen (a synchronous grab) past the deadline,
    /// so the next event was not sent (it would have been misplaced).
    InputBlocked = "input_blocked" => 409,
    /// Browser: the element ref does not name an element of the tab's
    /// current document that is still attached and visible (another
    /// document, tab or load, or the element was replaced or hidden).
    /// Nothing was done.
    StaleTarget = "stale_target" => 409,
    /// Browser: the element cannot take this action (covered by another
    /// element, not editable, not a select). Nothing was done.
    NotActionable = "not_actionable" => 409,
    /// Browser: the document the call would act on is not of an origin of
    /// the host's URL policy (a redirect or the page's own navigation took
    /// the tab there), or a navigation ended outside it. Nothing was done
    /// on that document.
    OutOfPolicy = "out_of_policy" => 409,
    /// Browser: no open tab has this id.
    NoSuchTab = "no_such_tab" => 404,
    /// `/v1/files/read`: the guest has no such file.
    NoSuchFile = "no_such_file" => 404,
    /// Browser: `wait_for`'s text did not appear within its timeout.
    WaitTimedOut = "wait_timed_out" => 422,
    /// Browser: this daemon has no browser (started without one), or it
    /// could not be started.
    BrowserUnavailable = "browser_unavailable" => 503,
    /// Browser: the browser refused or failed the command.
    BrowserFailed = "browser_failed" => 502,
    /// The daemon is shutting down.
    ShuttingDown = "shutting_down" => 503,
    /// The peer speaks another major protocol version.
    VersionMismatch = "version_mismatch" => 400,
    Internal = "internal" => 500,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every failed request.
///
/// For a batch, `index` names the action that failed or was refused,
/// `executed` counts the actions that completed before it, and `partial`
/// says whether the failing action had already started injecting input
/// (an effect that may not be undoable, docs/contract.md rule 8). A refusal at
/// validation always has `executed: 0` and `partial: false`: nothing ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code,
            message: message.into(),
            index: None,
            executed: None,
            partial: None,
        }
    }
}

impl std::fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(i) = self.index {
            write!(f, " (action {i}")?;
            if let Some(e) = self.executed {
                write!(f, ", {e} executed before it")?;
            }
            if self.partial == Some(true) {
                write!(f, ", partly carried out")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A value that breaks the protocol's rules, with the reason (one line for
/// the peer or the operator: which field, and what is wrong with it). What
/// the `check` methods of requests and replies return.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(String);

impl Invalid {
    pub fn new(reason: impl Into<String>) -> Invalid {
        Invalid(reason.into())
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.0
    }
}

impl From<String> for Invalid {
    fn from(reason: String) -> Invalid {
        Invalid(reason)
    }
}

impl From<&str> for Invalid {
    fn from(reason: &str) -> Invalid {
        Invalid(reason.to_string())
    }
}

impl From<Invalid> for String {
    fn from(e: Invalid) -> String {
        e.0
    }
}
