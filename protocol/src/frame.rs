//! `POST /v1/frame`: the live view's frames (`host-cli view`), pushed on
//! X damage instead of polled.
//!
//! The daemon keeps a change counter (`seq`): it goes up when the X server
//! reports damage, when the pointer moves, and after every input batch. A
//! viewer asks for the frame after the `seq` it last saw; the request
//! waits (at most [`MAX_FRAME_WAIT_MS`]) until the counter passes it, then
//! the screen is captured with the pointer drawn in, scaled to at most
//! `max_width` and encoded (JPEG for speed, PNG for a full-resolution
//! snapshot). A wait that sees no change answers `changed: false` with no
//! image, so an idle desktop costs no capture and no encoding.
//!
//! A frame never takes the input gate: it reads the screen between input
//! jobs and never answers `busy`, so a viewer cannot slow the agent down
//! by more than one capture between two of its jobs.

use serde::{Deserialize, Serialize};

use crate::{ScaleMap, Size};

/// The longest a frame request waits for a change.
pub const MAX_FRAME_WAIT_MS: u32 = 2_000;

/// How a frame is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameFormat {
    /// Baseline JPEG, 4:2:0: small and fast, for the stream.
    #[default]
    Jpeg,
    /// PNG at full resolution: the on-demand snapshot.
    Png,
}

impl FrameFormat {
    pub fn mime(self) -> &'static str {
        match self {
            FrameFormat::Jpeg => "image/jpeg",
            FrameFormat::Png => "image/png",
        }
    }
}

/// `POST /v1/frame`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameRequest {
    /// The `seq` of the frame the viewer has; 0 for the first.
    #[serde(default)]
    pub after: u64,
    /// How long to wait for a change, at most [`MAX_FRAME_WAIT_MS`];
    /// 0 answers at once.
    #[serde(default)]
    pub wait_ms: u32,
    /// Scale down to at most this width (never up); `None` keeps screen
    /// pixels.
    #[serde(default)]
    pub max_width: Option<u32>,
    #[serde(default)]
    pub format: FrameFormat,
    /// JPEG quality, 1-100 (default 70).
    #[serde(default)]
    pub quality: Option<u8>,
}

impl FrameRequest {
    /// Checks the ranges; the message names the field.
    pub fn check(&self) -> Result<(), crate::Invalid> {
        if self.wait_ms > MAX_FRAME_WAIT_MS {
            return Err(crate::invalid!(
                "wait_ms: at most {MAX_FRAME_WAIT_MS}, got {}",
                self.wait_ms
            ));
        }
        if let Some(w) = self.max_width
            && !(16..=crate::limits::MAX_DIMENSION).contains(&w)
        {
            return Err(crate::invalid!(
                "max_width: 16 to {}, got {w}",
                crate::limits::MAX_DIMENSION
            ));
        }
        if let Some(q) = self.quality
            && !(1..=100).contains(&q)
        {
            return Err(crate::invalid!("quality: 1 to 100, got {q}"));
        }
        Ok(())
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameImage {
    pub format: FrameFormat,
    pub width: u32,
    pub height: u32,
    /// The encoded image, base64 (standard alphabet, padded).
    pub data: String,
    /// Image pixels <-> screen pixels.
    pub scale_map: ScaleMap,
    pub capture_ms: f64,
    pub encode_ms: f64,
}

/// Reply of `POST /v1/frame`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameReply {
    /// The change counter this frame shows (or, unchanged, still is).
    pub seq: u64,
    /// False when nothing changed within the wait: no image.
    pub changed: bool,
    pub screen: Size,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<FrameImage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_strict_and_ranges_named() {
        let r: FrameRequest = serde_json::from_str(r#"{"after":3,"wait_ms":500}"#).unwrap();
        assert_eq!(r.after, 3);
        assert_eq!(r.format, FrameFormat::Jpeg);
        assert!(r.check().is_ok());
        assert!(serde_json::from_str::<FrameRequest>(r#"{"after":1,"fps":9}"#).is_err());
        let long = FrameRequest {
            wait_ms: MAX_FRAME_WAIT_MS + 1,
            ..r
        };
        assert!(long.check().unwrap_err().to_string().starts_with("wait_ms"));
        let q = FrameRequest {
            quality: Some(0),
            ..r
        };
        assert!(q.check().unwrap_err().to_string().starts_with("quality"));
        let w = FrameRequest {
            max_width: Some(8),
            ..r
        };
        assert!(w.check().unwrap_err().to_string().starts_with("max_width"));
    }
}
