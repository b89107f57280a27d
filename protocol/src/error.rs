//! Error codes on the wire. Every failure the daemon answers carries a JSON
//! body `{code, message}`; the HTTP status follows from the code
//! ([`ErrorCode::http_status`]), in this one place.

use serde::{Deserialize, Serialize};

/// A stable, machine-readable error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed JSON, an unknown field, a wrong type.
    BadRequest,
    /// An action that is structurally wrong or whose text cannot be typed.
    InvalidAction,
    /// A coordinate outside the screenshot the model saw.
    OutOfBounds,
    /// A key name the daemon does not know.
    UnknownKey,
    /// A limit in `limits` was exceeded.
    LimitExceeded,
    /// The expected ScaleMap no longer matches the screen.
    StaleScaleMap,
    /// Missing or wrong bearer token.
    Unauthorized,
    /// A browser-originated request or an unexpected Host.
    Forbidden,
    NotFound,
    MethodNotAllowed,
    /// The body is larger than `limits::MAX_BODY_BYTES`.
    PayloadTooLarge,
    UnsupportedMediaType,
    /// Another input call is running on this desktop.
    Busy,
    /// Too many requests in flight.
    Overloaded,
    /// The request's deadline passed.
    Timeout,
    /// The request was cancelled (client gone, daemon draining).
    Cancelled,
    /// The X display is not reachable.
    DisplayUnavailable,
    /// Input could not be delivered in order: another client kept the
    /// pointer or keyboard frozen (a synchronous grab) past the deadline,
    /// so the next event was not sent (it would have been misplaced).
    InputBlocked,
    /// The daemon is shutting down.
    ShuttingDown,
    /// The peer speaks another major protocol version.
    VersionMismatch,
    Internal,
}

impl ErrorCode {
    /// The HTTP status for this code. The only code-to-status table.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::InvalidAction
            | ErrorCode::OutOfBounds
            | ErrorCode::UnknownKey
            | ErrorCode::LimitExceeded => 422,
            ErrorCode::StaleScaleMap => 409,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::Busy => 409,
            ErrorCode::Overloaded => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Cancelled => 499,
            ErrorCode::DisplayUnavailable => 503,
            ErrorCode::InputBlocked => 409,
            ErrorCode::ShuttingDown => 503,
            ErrorCode::VersionMismatch => 400,
            ErrorCode::Internal => 500,
        }
    }

    /// Every code, for table tests.
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::BadRequest,
        ErrorCode::InvalidAction,
        ErrorCode::OutOfBounds,
        ErrorCode::UnknownKey,
        ErrorCode::LimitExceeded,
        ErrorCode::StaleScaleMap,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Busy,
        ErrorCode::Overloaded,
        ErrorCode::Timeout,
        ErrorCode::Cancelled,
        ErrorCode::DisplayUnavailable,
        ErrorCode::InputBlocked,
        ErrorCode::ShuttingDown,
        ErrorCode::VersionMismatch,
        ErrorCode::Internal,
    ];

    /// The wire name (the same string serde writes).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidAction => "invalid_action",
            ErrorCode::OutOfBounds => "out_of_bounds",
            ErrorCode::UnknownKey => "unknown_key",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::StaleScaleMap => "stale_scale_map",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Busy => "busy",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::DisplayUnavailable => "display_unavailable",
            ErrorCode::InputBlocked => "input_blocked",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::VersionMismatch => "version_mismatch",
            ErrorCode::Internal => "internal",
        }
    }
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
