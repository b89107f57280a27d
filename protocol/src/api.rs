//! Request and reply bodies of the daemon's HTTP API (`/v1/...`), described
//! for humans and tools in `daemon/openapi.yaml`.

use serde::{Deserialize, Serialize};

use crate::{Action, Fit, Rect, ScaleMap, Size};

/// The protocol version this build speaks. The major number is in every
/// path (`/v1/`); a peer with another major is refused clearly (A14).
pub const PROTOCOL_VERSION: &str = "1.2";
/// The major part of [`PROTOCOL_VERSION`].
pub const PROTOCOL_MAJOR: u32 = 1;

/// Paths of the API.
pub mod paths {
    pub const HEALTH: &str = "/v1/health";
    pub const INFO: &str = "/v1/info";
    pub const ACTIONS: &str = "/v1/actions";
    pub const SCREENSHOT: &str = "/v1/screenshot";
    pub const BROWSER_STATE: &str = "/v1/browser/state";
    pub const BROWSER_CALL: &str = "/v1/browser/call";
    pub const FRAME: &str = "/v1/frame";
    pub const FILES_READ: &str = "/v1/files/read";
    pub const CLOCK: &str = "/v1/clock";
    pub const CURSOR: &str = "/v1/cursor";
}

/// A peer whose protocol version this build cannot speak with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("the peer reports an unreadable protocol version `{0}`")]
    Unreadable(String),
    #[error(
        "the peer speaks protocol {theirs}, this build speaks {PROTOCOL_VERSION}: \
         upgrade the older side (major versions must match)"
    )]
    Mismatch { theirs: String },
}

/// Checks that a peer's protocol version has our major number.
pub fn check_protocol(theirs: &str) -> Result<(), VersionError> {
    let major = theirs
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .ok_or_else(|| VersionError::Unreadable(theirs.to_string()))?;
    if major == PROTOCOL_MAJOR {
        Ok(())
    } else {
        Err(VersionError::Mismatch {
            theirs: theirs.to_string(),
        })
    }
}

/// An encoded image format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageFormat {
    /// PNG, RGB 8-bit, fast compression.
    #[default]
    Png,
    /// WebP lossless, RGB.
    Webp,
    /// JPEG, baseline, 8-bit YCbCr, quality [`ImageFormat::JPEG_QUALITY`]
    /// (lossy: docs/contract.md 3a states how far from the PNG). Since 1.2.
    Jpeg,
}

impl ImageFormat {
    /// The quality (1-100) of every JPEG screenshot: fixed, not asked for.
    /// Below 90 the chroma is subsampled 2x2 (4:2:0).
    pub const JPEG_QUALITY: u8 = 85;

    pub fn mime(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Webp => "image/webp",
            ImageFormat::Jpeg => "image/jpeg",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Webp => "webp",
            ImageFormat::Jpeg => "jpg",
        }
    }
}

/// How to take a screenshot. Also the coordinate space of a batch: the
/// actions of a batch are in the space of the screenshot these options
/// produce (the one the model saw).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScreenshotOptions {
    /// Scale to fit this size; `None` keeps screen pixels.
    pub size: Option<Size>,
    /// How the region is fitted into `size`.
    pub fit: Fit,
    /// Capture only this part of the screen (crop); `None` is the whole screen.
    pub region: Option<Rect>,
    pub format: ImageFormat,
    /// Draw the pointer into the image.
    pub cursor: bool,
}

/// `POST /v1/actions`: run actions in order, then take one screenshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub actions: Vec<Action>,
    /// The final screenshot, and the coordinate space of `actions`.
    #[serde(default)]
    pub screenshot: ScreenshotOptions,
    /// The map of the screenshot the coordinates refer to. When given and
    /// the screen no longer matches it, nothing runs (`stale_scale_map`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_scale_map: Option<ScaleMap>,
    /// Take the final screenshot (default). A host that must confirm each
    /// action, and the screenshot, separately (docs/contract.md rule 11) runs
    /// actions without it and then asks for it with an empty batch.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub final_screenshot: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl BatchRequest {
    /// A batch with the final screenshot taken with `screenshot` options.
    pub fn new(actions: Vec<Action>, screenshot: ScreenshotOptions) -> BatchRequest {
        BatchRequest {
            actions,
            screenshot,
            expect_scale_map: None,
            final_screenshot: true,
        }
    }
}

/// Time spent in each phase of a request, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    pub actions_ms: f64,
    pub settle_ms: f64,
    pub capture_ms: f64,
    pub scale_ms: f64,
    pub encode_ms: f64,
    pub total_ms: f64,
    /// Whether the screen went quiet before the settle cap.
    pub settled: bool,
    /// Whether the screenshot is the previous one again, unencoded anew:
    /// X reported no damage since it was captured and its region, size,
    /// format and pointer are the same (protocol 1.1; absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

/// An encoded screenshot and the map of its coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Screenshot {
    pub format: ImageFormat,
    pub width: u32,
    pub height: u32,
    /// The encoded image, base64 (standard alphabet, padded).
    pub data: String,
    pub scale_map: ScaleMap,
}

impl Screenshot {
    /// A `data:` URL, as `computer_screenshot.image_url` takes it.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.format.mime(), self.data)
    }
}

/// Reply of `POST /v1/actions` when every action ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchResponse {
    /// How many actions ran (all of them).
    pub executed: usize,
    /// The final screenshot; `null` when the request said
    /// `final_screenshot: false`.
    pub screenshot: Option<Screenshot>,
    pub timings: Timings,
}

/// Reply of `POST /v1/screenshot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotResponse {
    pub screenshot: Screenshot,
    pub timings: Timings,
}

/// Reply of `POST /v1/cursor` (whose body is the [`ScreenshotOptions`] of
/// the screenshot the position refers to): where the pointer is, in that
/// screenshot's space (`ScaleMap::to_image`), with the map. A pointer
/// outside the captured region is `out_of_bounds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CursorReply {
    pub x: u32,
    pub y: u32,
    pub scale_map: ScaleMap,
}

/// Overall health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// X answers and, when one is supervised, the window manager runs.
    Ok,
    /// X answers but the window manager is missing.
    Degraded,
    /// X does not answer.
    Down,
}

/// Reply of `GET /v1/health` (no token needed; no secrets inside).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub status: HealthStatus,
    pub x_connected: bool,
    pub display: Option<Size>,
    /// `None` when no window manager is supervised.
    pub window_manager: Option<bool>,
    /// How many times the display was restarted since the daemon started.
    pub display_restarts: u32,
    pub uptime_ms: u64,
}

/// What the display offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    pub xtest: bool,
    pub shm: bool,
    pub damage: bool,
    pub xfixes: bool,
    pub randr: bool,
    pub formats: Vec<ImageFormat>,
}

/// The limits the daemon enforces (the values of `crate::limits`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_actions: usize,
    pub max_drag_points: usize,
    pub max_type_chars: usize,
    pub max_keys: usize,
    pub max_scroll_distance: u64,
    pub scroll_pixels_per_click: u64,
    pub request_deadline_ms: u64,
    pub settle_quiet_ms: u64,
    pub settle_cap_ms: u64,
    pub wait_quiet_ms: u64,
    pub wait_cap_ms: u64,
}

impl Limits {
    pub fn current() -> Limits {
        use crate::limits as l;
        Limits {
            max_body_bytes: l::MAX_BODY_BYTES,
            max_actions: l::MAX_ACTIONS,
            max_drag_points: l::MAX_DRAG_POINTS,
            max_type_chars: l::MAX_TYPE_CHARS,
            max_keys: l::MAX_KEYS,
            max_scroll_distance: l::MAX_SCROLL_DISTANCE,
            scroll_pixels_per_click: l::SCROLL_PIXELS_PER_CLICK,
            request_deadline_ms: l::REQUEST_DEADLINE_MS,
            settle_quiet_ms: l::SETTLE_QUIET_MS,
            settle_cap_ms: l::SETTLE_CAP_MS,
            wait_quiet_ms: l::WAIT_QUIET_MS,
            wait_cap_ms: l::WAIT_CAP_MS,
        }
    }
}

/// Where the daemon is in its life (docs/contract.md rule 7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonState {
    /// Serving: new actions are accepted.
    #[default]
    Open,
    /// A stop was requested: new actions, screenshots and browser calls are
    /// refused (`shutting_down`), and one that came earlier is still in
    /// flight (it may still have effects).
    Draining,
    /// A stop was requested and nothing is in flight any more: the daemon
    /// stops listening and shuts its display down.
    Closed,
}

impl DaemonState {
    /// The word used on the wire and by `host-cli guest ls`.
    pub fn as_str(self) -> &'static str {
        match self {
            DaemonState::Open => "open",
            DaemonState::Draining => "draining",
            DaemonState::Closed => "closed",
        }
    }
}

impl std::fmt::Display for DaemonState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a daemon is: its version, display, capabilities and limits (the
/// fixed part of `GET /v1/info`, see [`InfoReply`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Info {
    pub protocol: String,
    pub daemon_version: String,
    pub display: Option<Size>,
    /// The X display the daemon drives (`:N`), as its guest names it: on a
    /// local session that is this host's display, where a developer can
    /// start an app; absent from a daemon older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_display: Option<String>,
    pub capabilities: Capabilities,
    pub limits: Limits,
}

/// Reply of `GET /v1/info`: [`Info`] and the daemon's lifecycle state, as
/// one flat JSON object (`{protocol, ..., limits, state}`), read as
/// strictly as every reply (unknown fields refused). A daemon older than
/// `state` does not send it; it is then `open` (it answered, so it
/// serves), so a serialized [`Info`] is a valid reply too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "InfoWire", into = "InfoWire")]
pub struct InfoReply {
    pub info: Info,
    pub state: DaemonState,
}

/// The wire shape of [`InfoReply`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InfoWire {
    protocol: String,
    daemon_version: String,
    display: Option<Size>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    x_display: Option<String>,
    capabilities: Capabilities,
    limits: Limits,
    #[serde(default)]
    state: DaemonState,
}

impl From<InfoWire> for InfoReply {
    fn from(w: InfoWire) -> InfoReply {
        InfoReply {
            info: Info {
                protocol: w.protocol,
                daemon_version: w.daemon_version,
                display: w.display,
                x_display: w.x_display,
                capabilities: w.capabilities,
                limits: w.limits,
            },
            state: w.state,
        }
    }
}

impl From<InfoReply> for InfoWire {
    fn from(r: InfoReply) -> InfoWire {
        let Info {
            protocol,
            daemon_version,
            display,
            x_display,
            capabilities,
            limits,
        } = r.info;
        InfoWire {
            protocol,
            daemon_version,
            display,
            x_display,
            capabilities,
            limits,
            state: r.state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Info {
        Info {
            protocol: PROTOCOL_VERSION.to_string(),
            daemon_version: "0.1.0".into(),
            display: Some(Size::new(640, 480)),
            x_display: None,
            capabilities: Capabilities {
                xtest: true,
                shm: false,
                damage: false,
                xfixes: false,
                randr: false,
                formats: vec![ImageFormat::Png],
            },
            limits: Limits::current(),
        }
    }

    #[test]
    fn info_reply_is_one_flat_strict_object_whose_state_defaults_to_open() {
        for state in [
            DaemonState::Open,
            DaemonState::Draining,
            DaemonState::Closed,
        ] {
            let reply = InfoReply {
                info: info(),
                state,
            };
            let v = serde_json::to_value(&reply).unwrap();
            assert_eq!(v["state"], state.as_str());
            assert_eq!(v["protocol"], PROTOCOL_VERSION);
            assert_eq!(serde_json::from_value::<InfoReply>(v).unwrap(), reply);
        }
        // An older daemon's reply (no `state`) reads as open.
        let old = serde_json::to_value(info()).unwrap();
        let read: InfoReply = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(read.state, DaemonState::Open);
        assert_eq!(read.info, info());
        // Unknown fields and unknown states are refused.
        let mut extra = old.clone();
        extra["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<InfoReply>(extra).is_err());
        let mut odd = old;
        odd["state"] = serde_json::json!("sleeping");
        assert!(serde_json::from_value::<InfoReply>(odd).is_err());
    }
}
