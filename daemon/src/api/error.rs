//! The one place errors become HTTP responses.
//!
//! Our own errors carry an [`ErrorBody`] whose code fixes the status
//! (`ErrorCode::http_status`). Responses produced by axum or tower-http
//! (404, 405, 413 from the body limit, 504 from the timeout, a caught
//! panic) are rewritten by [`normalize`] into the same `{code, message}`
//! shape, so a client never has to parse anything else. Messages never
//! carry paths, backtraces or tokens (A12).

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use axum::response::IntoResponse;
use sandtop_protocol::{ErrorBody, ErrorCode};

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError(pub ErrorBody);

impl IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        json_error(self.0)
    }
}

/// The JSON response of an error body.
pub fn json_error(body: ErrorBody) -> axum::response::Response {
    let status =
        StatusCode::from_u16(body.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

fn code_for(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        400 => ErrorCode::BadRequest,
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        405 => ErrorCode::MethodNotAllowed,
        408 | 504 => ErrorCode::Timeout,
        409 => ErrorCode::Busy,
        413 => ErrorCode::PayloadTooLarge,
        415 => ErrorCode::UnsupportedMediaType,
        422 => ErrorCode::InvalidAction,
        503 => ErrorCode::Overloaded,
        _ => ErrorCode::Internal,
    }
}

fn message_for(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::NotFound => "no such endpoint",
        ErrorCode::MethodNotAllowed => "method not allowed on this endpoint",
        ErrorCode::PayloadTooLarge => "the request body is larger than the daemon accepts",
        ErrorCode::Timeout => "the request took longer than its deadline",
        ErrorCode::UnsupportedMediaType => "the body must be JSON",
        ErrorCode::BadRequest => "the request could not be read",
        _ => "the request failed",
    }
}

/// Rewrites any error response that is not already JSON into an
/// [`ErrorBody`].
pub async fn normalize(resp: Response<Body>) -> Response<Body> {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if status.as_u16() < 400 || is_json {
        return resp;
    }
    let code = code_for(status);
    // The status follows from the code, as for every other error.
    let mut out = json_error(ErrorBody::new(code, message_for(code)));
    if let Some(allow) = resp.headers().get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

/// A handler panicked: log (once, without the payload's details reaching
/// the client) and answer `internal`.
pub fn panic_response(_payload: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    tracing::error!("a request handler panicked");
    json_error(ErrorBody::new(
        ErrorCode::Internal,
        "internal error; the daemon is still running",
    ))
}
