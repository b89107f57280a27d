//! MCP logging (`notifications/message`): what the server does, in its
//! own words, to a client that asked for it.
//!
//! - 2025-06-18 and 2025-11-25: `logging/setLevel` sets the least level
//!   sent (one level for the server: with `--http`, sessions share it);
//!   nothing is sent before a client asks.
//! - 2026-07-28: a request opts in with `_meta`'s
//!   `io.modelcontextprotocol/logLevel`, for that request only.
//!
//! A message says which tool ran on which guest, who approved it, how
//! it ended, and counts; never a typed text, a key, a URL path or query,
//! a page's words, a token or a sign-in value (docs/contract.md, `host-cli
//! mcp`). Logging is deprecated by the spec (SEP-2577) but the revisions
//! the server speaks still carry it, hence the `allow(deprecated)`.
#![allow(deprecated)]

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProtocolVersion};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

/// The level `logging/setLevel` set, if any.
#[derive(Debug, Default)]
pub struct Threshold(std::sync::Mutex<Option<LoggingLevel>>);

impl Threshold {
    pub fn set(&self, level: LoggingLevel) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    fn get(&self) -> Option<LoggingLevel> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The severity rank (debug lowest).
pub fn rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The least level this request's client wants, if it wants any.
pub fn wanted(ctx: &RequestContext<RoleServer>, set: &Threshold) -> Option<LoggingLevel> {
    let modern = ctx
        .protocol_version()
        .is_some_and(|v| !v.has_initialize() || v >= ProtocolVersion::V_2026_07_28);
    match ctx.meta.log_level() {
        Some(l) => Some(l),
        None if modern => None,
        None => set.get(),
    }
}

/// Sends one message if the client wants its level. `data` is the
/// server's own words (see the module's rules).
pub async fn send(
    ctx: &RequestContext<RoleServer>,
    set: &Threshold,
    level: LoggingLevel,
    data: Value,
) {
    let Some(least) = wanted(ctx, set) else {
        return;
    };
    if rank(level) < rank(least) {
        return;
    }
    let p = LoggingMessageNotificationParam::new(level, data).with_logger("sandtop");
    // A client that went away gets no more; the call goes on.
    let _ = ctx.peer.notify_logging_message(p).await;
}

pub use rmcp::model::LoggingLevel as Level;
