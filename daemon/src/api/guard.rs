//! Who may talk to the daemon.
//!
//! 1. No browser: a request with `Origin` or any `Sec-Fetch-*` header was
//!    made by a web page (possibly one the agent is visiting) and is refused.
//! 2. No foreign Host: only `localhost`, loopback literals and `sandtopd`
//!    (what host-cli sends) are accepted, which defeats DNS rebinding
//!    against a loopback TCP listener.
//! 3. The bearer token on every endpoint but health, compared in constant
//!    time. Rejections have no side effect and are logged rate-limited.
//! 4. At most `MAX_IN_FLIGHT` requests in flight; more get `overloaded`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandtop_protocol::{ErrorBody, ErrorCode, paths};

use super::ApiState;
use super::error::ApiError;

/// Host names accepted (any port).
const ALLOWED_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]", "::1", "sandtopd"];

fn host_allowed(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [::1]:port
        rest.split(']').next().map(|h| format!("[{h}]"))
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map(|(h, _)| h.to_string())
            .or_else(|| Some(host.to_string()))
    };
    name.is_some_and(|n| ALLOWED_HOSTS.iter().any(|a| a.eq_ignore_ascii_case(&n)))
}

fn refuse(state: &ApiState, code: ErrorCode, message: &'static str, why: &str) -> Response {
    if let Some(suppressed) = state.log_limit.allow() {
        tracing::warn!(reason = why, suppressed, "refused a request");
    }
    ApiError(ErrorBody::new(code, message)).into_response()
}

/// The guard middleware.
pub async fn guard(State(state): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let browser = headers.contains_key(header::ORIGIN)
        || headers.keys().any(|k| k.as_str().starts_with("sec-fetch-"));
    if browser {
        return refuse(
            &state,
            ErrorCode::Forbidden,
            "browser-originated requests are refused",
            "browser headers",
        );
    }
    // Every Host header, and one at most (RFC 9112 section 3.2): a second
    // one must not smuggle a foreign name past a check of the first.
    let mut hosts = headers.get_all(header::HOST).iter();
    if let Some(host) = hosts.next() {
        let ok = host.to_str().is_ok_and(host_allowed) && hosts.next().is_none();
        if !ok {
            return refuse(
                &state,
                ErrorCode::Forbidden,
                "unexpected Host header",
                "foreign host",
            );
        }
    }
    if req.uri().path() == paths::HEALTH {
        return next.run(req).await;
    }
    let ok = headers.get(header::AUTHORIZATION).is_some_and(|v| {
        state
            .token
            .get()
            .is_some_and(|t| t.matches_header(v.as_bytes()))
    });
    if !ok {
        return refuse(
            &state,
            ErrorCode::Unauthorized,
            "missing or wrong bearer token",
            "bad token",
        );
    }
    // 4. Shed load past MAX_IN_FLIGHT requests, across all endpoints.
    let Ok(_permit) = Arc::clone(&state.in_flight).try_acquire_owned() else {
        return refuse(
            &state,
            ErrorCode::Overloaded,
            "too many requests in flight; retry shortly",
            "overloaded",
        );
    };
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn hosts() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "sandtopd",
            "LOCALHOST",
        ] {
            assert!(host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.test",
            "localhost.evil.test",
            "127.0.0.1.nip.io:80",
            "[::2]:1",
            "10.0.0.1",
            "",
        ] {
            assert!(!host_allowed(bad), "{bad}");
        }
    }
}
