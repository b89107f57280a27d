//! Frame -> (cursor) -> scale -> RGB -> PNG/WebP (screenshots) or
//! JPEG/PNG (the live view's frames) -> base64.
//!
//! Pixels arrive as B, G, R, X with an X byte that is not reliably 0xff, so
//! nothing downstream treats it as alpha: scaling runs with alpha handling
//! off and the encoders get packed RGB. Buffers live in [`Renderer`] and are
//! reused from one screenshot to the next.

use std::time::Instant;

use base64::Engine as _;
use sandtop_imaging::{Layout, Scaler};
use sandtop_protocol::frame::FrameFormat;
use sandtop_protocol::{ImageFormat, ScaleMap, Screenshot};

use crate::driver::{CursorImage, FrameView};

/// Why an image could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("scaling failed: {0}")]
    Scale(String),
    #[error("encoding failed: {0}")]
    Encode(String),
}

/// Milliseconds spent per phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderTimings {
    pub scale_ms: f64,
    pub encode_ms: f64,
}

/// Reusable buffers and the resizer.
#[derive(Default)]
pub struct Renderer {
    scaler: Scaler,
    /// The frame with the cursor drawn in, or with row padding removed.
    packed: Vec<u8>,
    scaled: Vec<u8>,
    rgb: Vec<u8>,
    encoded: Vec<u8>,
    png: sandtop_imaging::PngEncoder,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer").finish_non_exhaustive()
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

impl Renderer {
    pub fn new() -> Renderer {
        Renderer::default()
    }

    /// Steps 1-3: the captured region, with the cursor, scaled to the
    /// map's image and packed as RGB into `self.rgb`; returns the time.
    fn pack_rgb(
        &mut self,
        frame: FrameView<'_>,
        cursor: Option<&CursorImage>,
        map: &ScaleMap,
    ) -> Result<f64, RenderError> {
        let t = Instant::now();
        let (w, h) = (frame.width, frame.height);
        let row = w as usize * 4;
        // 1. A contiguous BGRX view, with the cursor when asked.
        let src: &[u8] = if cursor.is_some() || frame.stride != row {
            self.packed.clear();
            for y in 0..h as usize {
                let start = y * frame.stride;
                self.packed
                    .extend_from_slice(&frame.data[start..start + row]);
            }
            if let Some(c) = cursor {
                draw_cursor(
                    &mut self.packed,
                    w,
                    h,
                    c,
                    (map.region.x as i32, map.region.y as i32),
                );
            }
            &self.packed
        } else {
            &frame.data[..row * h as usize]
        };
        // 2. Scale.
        let (iw, ih) = (map.image.width, map.image.height);
        let pixels: &[u8] = if (iw, ih) != (w, h) {
            // Hamming when shrinking, Catmull-Rom when enlarging; the X
            // byte is never read as alpha.
            self.scaler
                .scale(Layout::Bgrx, src, (w, h), &mut self.scaled, (iw, ih))
                .map_err(|e| RenderError::Scale(e.to_string()))?;
            &self.scaled
        } else {
            src
        };
        // 3. BGRX -> RGB.
        // Indexed writes into a sized buffer vectorise; pushing does not.
        self.rgb.resize(iw as usize * ih as usize * 3, 0);
        for (out, px) in self.rgb.chunks_exact_mut(3).zip(pixels.chunks_exact(4)) {
            out[0] = px[2];
            out[1] = px[1];
            out[2] = px[0];
        }
        Ok(ms(t))
    }

    /// Renders a captured region into the screenshot `map` describes.
    /// `frame` must be the capture of `map.region`.
    pub fn render(
        &mut self,
        frame: FrameView<'_>,
        cursor: Option<&CursorImage>,
        map: &ScaleMap,
        format: ImageFormat,
    ) -> Result<(Screenshot, RenderTimings), RenderError> {
        let scale_ms = self.pack_rgb(frame, cursor, map)?;
        let (iw, ih) = (map.image.width, map.image.height);
        // 4. Encode, 5. base64.
        let t = Instant::now();
        self.encoded.clear();
        match format {
            ImageFormat::Png => encode_png(&mut self.png, &mut self.encoded, &self.rgb, iw, ih)?,
            ImageFormat::Webp => {
                image_webp::WebPEncoder::new(&mut self.encoded)
                    .encode(&self.rgb, iw, ih, image_webp::ColorType::Rgb8)
                    .map_err(|e| RenderError::Encode(e.to_string()))?;
            }
        }
        let data = base64::engine::general_purpose::STANDARD.encode(&self.encoded);
        let encode_ms = ms(t);
        Ok((
            Screenshot {
                format,
                width: iw,
                height: ih,
                data,
                scale_map: *map,
            },
            RenderTimings {
                scale_ms,
                encode_ms,
            },
        ))
    }

    /// The encoded bytes of the last render (before base64).
    pub fn last_encoded(&self) -> &[u8] {
        &self.encoded
    }

    /// Renders a live-view frame (`/v1/frame`): JPEG for the stream, PNG
    /// for a snapshot. Returns base64 and the timings.
    pub fn render_frame(
        &mut self,
        frame: FrameView<'_>,
        cursor: Option<&CursorImage>,
        map: &ScaleMap,
        format: FrameFormat,
        quality: u8,
    ) -> Result<(String, RenderTimings), RenderError> {
        let scale_ms = self.pack_rgb(frame, cursor, map)?;
        let (iw, ih) = (map.image.width, map.image.height);
        let t = Instant::now();
        self.encoded.clear();
        match format {
            FrameFormat::Png => encode_png(&mut self.png, &mut self.encoded, &self.rgb, iw, ih)?,
            FrameFormat::Jpeg => {
                sandtop_imaging::jpeg_rgb(&mut self.encoded, &self.rgb, (iw, ih), quality)
                    .map_err(|e| RenderError::Encode(e.to_string()))?;
            }
        }
        let data = base64::engine::general_purpose::STANDARD.encode(&self.encoded);
        Ok((
            data,
            RenderTimings {
                scale_ms,
                encode_ms: ms(t),
            },
        ))
    }
}

/// PNG, RGB 8-bit, compressed in bands on every core
/// ([`sandtop_imaging::PngEncoder`]; BENCHMARKS.md has the figures).
fn encode_png(
    png: &mut sandtop_imaging::PngEncoder,
    out: &mut Vec<u8>,
    rgb: &[u8],
    w: u32,
    h: u32,
) -> Result<(), RenderError> {
    png.encode(out, rgb, (w, h))
        .map_err(|e| RenderError::Encode(e.to_string()))
}

/// Blends a premultiplied ARGB cursor into a BGRX frame whose top left is
/// at screen position `origin`.
fn draw_cursor(frame: &mut [u8], w: u32, h: u32, c: &CursorImage, origin: (i32, i32)) {
    for cy in 0..c.height as i32 {
        let fy = c.y + cy - origin.1;
        if fy < 0 || fy >= h as i32 {
            continue;
        }
        for cx in 0..c.width as i32 {
            let fx = c.x + cx - origin.0;
            if fx < 0 || fx >= w as i32 {
                continue;
            }
            let argb = c.argb[(cy as u32 * c.width + cx as u32) as usize];
            let a = argb >> 24;
            if a == 0 {
                continue;
            }
            let i = (fy as usize * w as usize + fx as usize) * 4;
            let inv = 255 - a;
            // Premultiplied: out = src + dst * (1 - a).
            for (k, shift) in [(0usize, 0u32), (1, 8), (2, 16)] {
                let s = (argb >> shift) & 0xff;
                let d = u32::from(frame[i + k]);
                frame[i + k] = (s + (d * inv + 127) / 255).min(255) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::{Fit, Size};

    fn frame(w: u32, h: u32) -> Vec<u8> {
        let mut f = Vec::new();
        for y in 0..h {
            for x in 0..w {
                // B, G, R, X with a junk X byte.
                f.extend_from_slice(&[x as u8, y as u8, 200, 0x00]);
            }
        }
        f
    }

    fn decode_png(b64: &str) -> (png::OutputInfo, Vec<u8>) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info, buf)
    }

    #[test]
    fn png_is_opaque_rgb_with_exact_pixels() {
        let data = frame(64, 32);
        let view = FrameView {
            width: 64,
            height: 32,
            stride: 256,
            data: &data,
        };
        let map = ScaleMap::identity(Size::new(64, 32));
        let (shot, _) = Renderer::new()
            .render(view, None, &map, ImageFormat::Png)
            .unwrap();
        let (info, px) = decode_png(&shot.data);
        assert_eq!(
            info.color_type,
            png::ColorType::Rgb,
            "no alpha channel at all"
        );
        assert_eq!((info.width, info.height), (64, 32));
        // Pixel (10, 20): R=200, G=20, B=10.
        let i = (20 * 64 + 10) * 3;
        assert_eq!(&px[i..i + 3], &[200, 20, 10]);
    }

    #[test]
    fn scaled_image_has_the_map_size() {
        let data = frame(200, 100);
        let view = FrameView {
            width: 200,
            height: 100,
            stride: 800,
            data: &data,
        };
        let map = ScaleMap::fit(
            Size::new(200, 100),
            None,
            Some(Size::new(80, 80)),
            Fit::Contain,
        )
        .unwrap();
        let (shot, _) = Renderer::new()
            .render(view, None, &map, ImageFormat::Png)
            .unwrap();
        let (info, _) = decode_png(&shot.data);
        assert_eq!((info.width, info.height), (80, 40));
        assert_eq!((shot.width, shot.height), (80, 40));
        assert_eq!(shot.scale_map, map);
    }

    #[test]
    fn webp_is_lossless_riff() {
        let data = frame(16, 16);
        let view = FrameView {
            width: 16,
            height: 16,
            stride: 64,
            data: &data,
        };
        let map = ScaleMap::identity(Size::new(16, 16));
        let mut r = Renderer::new();
        let (shot, _) = r.render(view, None, &map, ImageFormat::Webp).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&shot.data)
            .unwrap();
        assert_eq!(&bytes[0..4], b"RIFF");
        assert_eq!(&bytes[8..12], b"WEBP");
        assert_eq!(&bytes[12..16], b"VP8L", "lossless bitstream");
    }

    #[test]
    fn cursor_is_drawn_where_it_is() {
        let data = vec![0u8; 8 * 8 * 4];
        let view = FrameView {
            width: 8,
            height: 8,
            stride: 32,
            data: &data,
        };
        let cursor = CursorImage {
            x: 2,
            y: 3,
            width: 1,
            height: 1,
            argb: vec![0xffff_0000],
        };
        let map = ScaleMap::identity(Size::new(8, 8));
        let (shot, _) = Renderer::new()
            .render(view, Some(&cursor), &map, ImageFormat::Png)
            .unwrap();
        let (_, px) = decode_png(&shot.data);
        let at = |x: usize, y: usize| &px[(y * 8 + x) * 3..(y * 8 + x) * 3 + 3];
        assert_eq!(at(2, 3), &[255, 0, 0]);
        assert_eq!(at(3, 3), &[0, 0, 0]);
    }
}
