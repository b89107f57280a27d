//! Writing the two replies that carry a screenshot, fast.
//!
//! A screenshot's `data` is ~0.5 MB of base64 that serde_json would scan
//! byte by byte for characters to escape; base64's alphabet has none, so
//! the field is copied as is and only the small parts go through serde.
//! The output is the same JSON serde writes (a test holds them equal).

use sandtop_protocol::{BatchResponse, Screenshot, ScreenshotResponse};

fn write_screenshot(out: &mut Vec<u8>, s: &Screenshot) -> serde_json::Result<()> {
    debug_assert!(
        s.data
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')),
        "screenshot data must be base64"
    );
    out.extend_from_slice(b"{\"format\":");
    serde_json::to_writer(&mut *out, &s.format)?;
    out.extend_from_slice(
        format!(",\"width\":{},\"height\":{},\"data\":\"", s.width, s.height).as_bytes(),
    );
    out.extend_from_slice(s.data.as_bytes());
    out.extend_from_slice(b"\",\"scale_map\":");
    serde_json::to_writer(&mut *out, &s.scale_map)?;
    out.push(b'}');
    Ok(())
}

/// `BatchResponse` as JSON.
pub fn batch(r: &BatchResponse) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(r.screenshot.as_ref().map_or(0, |s| s.data.len()) + 512);
    out.extend_from_slice(format!("{{\"executed\":{},\"screenshot\":", r.executed).as_bytes());
    match &r.screenshot {
        Some(s) => write_screenshot(&mut out, s)?,
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"timings\":");
    serde_json::to_writer(&mut out, &r.timings)?;
    out.push(b'}');
    Ok(out)
}

/// `ScreenshotResponse` as JSON.
pub fn screenshot(r: &ScreenshotResponse) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(r.screenshot.data.len() + 512);
    out.extend_from_slice(b"{\"screenshot\":");
    write_screenshot(&mut out, &r.screenshot)?;
    out.extend_from_slice(b",\"timings\":");
    serde_json::to_writer(&mut out, &r.timings)?;
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::{Fit, ImageFormat, Rect, ScaleMap, Size, Timings};

    fn shot() -> Screenshot {
        Screenshot {
            format: ImageFormat::Webp,
            width: 640,
            height: 360,
            data: "iVBORw0KGgoAAAANSUhEUg+/==".into(),
            scale_map: ScaleMap::fit(
                Size::new(1920, 1080),
                Some(Rect {
                    x: 0,
                    y: 0,
                    width: 1920,
                    height: 1080,
                }),
                Some(Size::new(640, 360)),
                Fit::Contain,
            )
            .unwrap(),
        }
    }

    #[test]
    fn the_fast_writers_write_what_serde_writes() {
        let timings = Timings {
            total_ms: 7.25,
            settled: true,
            ..Timings::default()
        };
        for r in [
            BatchResponse {
                executed: 3,
                screenshot: Some(shot()),
                timings,
            },
            BatchResponse {
                executed: 0,
                screenshot: None,
                timings,
            },
        ] {
            let fast: serde_json::Value = serde_json::from_slice(&batch(&r).unwrap()).unwrap();
            assert_eq!(fast, serde_json::to_value(&r).unwrap());
            let back: BatchResponse = serde_json::from_slice(&batch(&r).unwrap()).unwrap();
            assert_eq!(back, r);
        }
        let r = ScreenshotResponse {
            screenshot: shot(),
            timings,
        };
        let back: ScreenshotResponse = serde_json::from_slice(&screenshot(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&screenshot(&r).unwrap()).unwrap(),
            serde_json::to_value(&r).unwrap()
        );
    }
}
