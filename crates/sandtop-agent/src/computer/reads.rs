//! The loop's reads: computer calls that look at the screen and change
//! nothing (docs/contract.md rule 69), Sandtop's own action types beside
//! the daemon's (rule 66), offered to a model whose tools have members
//! that need them (the Anthropic computer toolset's `cursor_position` and
//! `zoom`; [`crate::model::Model::own_actions`]).
//!
//! A read is the whole of its call (one action, nothing else in the
//! call), runs through the daemon's read endpoints (`POST /v1/cursor`,
//! `POST /v1/screenshot` with a region), never through a batch, and is
//! answered with what it read, not with a screenshot after it. It is not
//! desktop input: the trajectory's ledger records it under `read`, not
//! `actions`, so a replay passes over it as it passes over a browser call.

use sandtop_protocol::{Fit, ImageFormat, Rect, ScaleMap, ScreenshotOptions, Size};
use serde_json::{Value, json};

/// The action types of the reads.
pub const TYPES: &[&str] = &["cursor_position", "zoom"];

/// One read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Where the pointer is, in the last screenshot's space
    /// (`{"type": "cursor_position"}`).
    CursorPosition,
    /// A region of the last screenshot (`[x0, y0, x1, y1]`, x1 and y1
    /// exclusive) at full screen resolution, fitted into the screenshot's
    /// own size (`{"type": "zoom", "region": [x0, y0, x1, y1]}`).
    Zoom { region: [i64; 4] },
}

impl Read {
    /// The action's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Read::CursorPosition => "cursor_position",
            Read::Zoom { .. } => "zoom",
        }
    }

    /// The action as the model's output and the ledger carry it.
    pub fn to_value(&self) -> Value {
        match self {
            Read::CursorPosition => json!({"type": "cursor_position"}),
            Read::Zoom { region } => json!({"type": "zoom", "region": region}),
        }
    }

    /// Parses a read strictly (a field it does not define is refused by
    /// name); `None` when `value` is not a read at all.
    pub fn from_value(value: &Value) -> Option<Result<Read, String>> {
        let obj = value.as_object()?;
        let kind = obj.get("type")?.as_str()?;
        if !TYPES.contains(&kind) {
            return None;
        }
        let allowed: &[&str] = match kind {
            "zoom" => &["type", "region"],
            _ => &["type"],
        };
        if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            let k: String = k.chars().take(40).collect();
            return Some(Err(format!("unknown field `{k}`")));
        }
        Some(match kind {
            "zoom" => match obj
                .get("region")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                Some([a, b, c, d]) => match (a.as_i64(), b.as_i64(), c.as_i64(), d.as_i64()) {
                    (Some(x0), Some(y0), Some(x1), Some(y1)) => Ok(Read::Zoom {
                        region: [x0, y0, x1, y1],
                    }),
                    _ => Err("invalid `zoom` action: region must be four integers".into()),
                },
                _ => Err("invalid `zoom` action: region [x0, y0, x1, y1] is required".into()),
            },
            _ => Ok(Read::CursorPosition),
        })
    }

    /// What the read asks the daemon for, in the space of `map` (the last
    /// screenshot's). For a zoom: the screen region (the model's region
    /// mapped outward through `map`, so the zoom covers at least what the
    /// model named) and the size it is fitted into (the screenshot's own),
    /// in `format`; refused when the region is not inside the screenshot.
    pub fn zoom_options(
        region: [i64; 4],
        map: &ScaleMap,
        format: ImageFormat,
    ) -> Result<ScreenshotOptions, String> {
        let [x0, y0, x1, y1] = region;
        let (iw, ih) = (i64::from(map.image.width), i64::from(map.image.height));
        if !(0 <= x0 && x0 < x1 && x1 <= iw && 0 <= y0 && y0 < y1 && y1 <= ih) {
            return Err(format!(
                "zoom: region [{x0}, {y0}, {x1}, {y1}] must satisfy 0 <= x0 < x1 <= {iw} and 0 <= y0 < y1 <= {ih} (the screenshot's size)"
            ));
        }
        let r = map.region;
        // Both bounds checked above: the products fit in u64.
        let lo = |v: i64, n: i64, size: u32| (v as u64 * u64::from(size)) / n as u64;
        let hi = |v: i64, n: i64, size: u32| (v as u64 * u64::from(size)).div_ceil(n as u64);
        let (sx0, sx1) = (lo(x0, iw, r.width), hi(x1, iw, r.width));
        let (sy0, sy1) = (lo(y0, ih, r.height), hi(y1, ih, r.height));
        Ok(ScreenshotOptions {
            size: Some(Size::new(map.image.width, map.image.height)),
            fit: Fit::Contain,
            region: Some(Rect {
                x: r.x + sx0 as u32,
                y: r.y + sy0 as u32,
                width: (sx1 - sx0) as u32,
                height: (sy1 - sy0) as u32,
            }),
            format,
            cursor: false,
        })
    }
}

/// The text a `cursor_position` read answers (`_render.py`'s rendering of
/// `BetaComputerCursorPositionResult`).
pub fn cursor_text(x: u32, y: u32) -> String {
    format!("X={x},Y={y}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_parse_strictly_and_other_types_are_not_reads() {
        assert_eq!(
            Read::from_value(&json!({"type": "cursor_position"})),
            Some(Ok(Read::CursorPosition))
        );
        assert_eq!(
            Read::from_value(&json!({"type": "zoom", "region": [1, 2, 3, 4]})),
            Some(Ok(Read::Zoom {
                region: [1, 2, 3, 4]
            }))
        );
        for bad in [
            json!({"type": "cursor_position", "x": 1}),
            json!({"type": "zoom"}),
            json!({"type": "zoom", "region": [1, 2, 3]}),
            json!({"type": "zoom", "region": [1, 2, 3, "4"]}),
            json!({"type": "zoom", "region": [1, 2, 3, 4], "scale": 2}),
        ] {
            assert!(matches!(Read::from_value(&bad), Some(Err(_))), "{bad}");
        }
        assert_eq!(
            Read::from_value(&json!({"type": "move", "x": 1, "y": 1})),
            None
        );
        for r in [
            Read::CursorPosition,
            Read::Zoom {
                region: [0, 0, 1, 1],
            },
        ] {
            assert_eq!(Read::from_value(&r.to_value()), Some(Ok(r)));
        }
    }

    /// A half-size screenshot's region maps outward to screen pixels and
    /// is fitted into the screenshot's size; a region outside it, empty
    /// or reversed is refused.
    #[test]
    fn a_zoom_maps_its_region_through_the_screenshots_map() {
        let map = ScaleMap::fit(
            Size::new(1280, 800),
            None,
            Some(Size::new(640, 400)),
            Fit::Contain,
        )
        .unwrap();
        let o = Read::zoom_options([10, 20, 330, 220], &map, ImageFormat::Png).unwrap();
        assert_eq!(
            o.region,
            Some(Rect {
                x: 20,
                y: 40,
                width: 640,
                height: 400
            })
        );
        assert_eq!(o.size, Some(Size::new(640, 400)));
        assert_eq!(o.fit, Fit::Contain);
        // Odd coordinates of a 2:3 map round outward.
        let map = ScaleMap::fit(
            Size::new(300, 300),
            None,
            Some(Size::new(200, 200)),
            Fit::Contain,
        )
        .unwrap();
        let o = Read::zoom_options([1, 1, 2, 2], &map, ImageFormat::Png).unwrap();
        assert_eq!(
            o.region,
            Some(Rect {
                x: 1,
                y: 1,
                width: 2,
                height: 2
            })
        );
        for bad in [
            [0, 0, 201, 10],
            [-1, 0, 10, 10],
            [5, 5, 5, 10],
            [10, 0, 5, 10],
        ] {
            assert!(
                Read::zoom_options(bad, &map, ImageFormat::Png).is_err(),
                "{bad:?}"
            );
        }
    }
}
