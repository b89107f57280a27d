//! Frame -> (cursor) -> scale -> PNG/JPEG from the scaled BGRX (its RGB
//! made inside the encoders, on every core) or RGB -> WebP (screenshots),
//! RGB -> JPEG/PNG (the live view's frames) -> base64 (a screenshot's in
//! bands on every core).
//!
//! Pixels arrive as B, G, R, X with an X byte that is not reliably 0xff, so
//! nothing downstream treats it as alpha: scaling runs with alpha handling
//! off and the encoders get packed RGB. Buffers live in [`Renderer`] and are
//! reused from one screenshot to the next.

use std::sync::Arc;
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

/// Reusable buffers, the resizer, and the threads they run on.
pub struct Renderer {
    /// Scaling and PNG split their work across these threads (rayon).
    /// The pool is made with the renderer, at the daemon's start, and
    /// every render runs inside it: rayon's global pool would be made at
    /// the first screenshot instead, and when that fails (a guest whose
    /// tasks are at its pids limit) it stays failed for the daemon's life,
    /// every later screenshot an `internal` error.
    pool: Arc<rayon::ThreadPool>,
    scaler: Scaler,
    /// The frame with the cursor drawn in, or with row padding removed.
    packed: Vec<u8>,
    scaled: Vec<u8>,
    rgb: Vec<u8>,
    encoded: Vec<u8>,
    png: sandtop_imaging::PngEncoder,
    jpeg: sandtop_imaging::JpegEncoder,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer").finish_non_exhaustive()
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// One worker per core; when no thread can be started, the calling
/// thread alone (rayon runs the work inline on it). That fallback pool
/// works only on the thread that built it: a renderer is made and used on
/// one thread (the desktop's), never moved to another.
fn render_pool() -> rayon::ThreadPool {
    let many = rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("render-{i}"))
        .build();
    many.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "no render threads: screenshots use one thread");
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .use_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("a pool of the current thread alone failed: {e}"))
    })
}

impl Default for Renderer {
    fn default() -> Renderer {
        Renderer::with_pool(render_pool())
    }
}

impl Renderer {
    pub fn new() -> Renderer {
        Renderer::default()
    }

    /// A renderer whose scaling and PNG run on `pool`.
    pub fn with_pool(pool: rayon::ThreadPool) -> Renderer {
        Renderer {
            pool: Arc::new(pool),
            scaler: Scaler::default(),
            packed: Vec::new(),
            scaled: Vec::new(),
            rgb: Vec::new(),
            encoded: Vec::new(),
            png: sandtop_imaging::PngEncoder::default(),
            jpeg: sandtop_imaging::JpegEncoder::default(),
        }
    }

    /// Runs `work` on the renderer's threads.
    fn on_pool<T: Send>(&mut self, work: impl FnOnce(&mut Self) -> T + Send) -> T {
        let pool = Arc::clone(&self.pool);
        pool.install(|| work(self))
    }

    /// Steps 1-2: the captured region, with the cursor, scaled to the
    /// map's image, as packed BGRX; returns where it lies (read it with
    /// [`bgrx`]).
    fn pack_bgrx(
        &mut self,
        frame: FrameView<'_>,
        cursor: Option<&CursorImage>,
        map: &ScaleMap,
    ) -> Result<Pixels, RenderError> {
        let (w, h) = (frame.width, frame.height);
        let row = w as usize * 4;
        // 1. A contiguous BGRX view, with the cursor when asked.
        let (src, at): (&[u8], Pixels) = if cursor.is_some() || frame.stride != row {
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
            (&self.packed, Pixels::Packed)
        } else {
            (&frame.data[..row * h as usize], Pixels::Frame)
        };
        // 2. Scale.
        let (iw, ih) = (map.image.width, map.image.height);
        if (iw, ih) == (w, h) {
            return Ok(at);
        }
        // Hamming when shrinking, Catmull-Rom when enlarging; the X byte
        // is never read as alpha.
        self.scaler
            .scale(Layout::Bgrx, src, (w, h), &mut self.scaled, (iw, ih))
            .map_err(|e| RenderError::Scale(e.to_string()))?;
        Ok(Pixels::Scaled)
    }

    /// Steps 1-3: [`Renderer::pack_bgrx`], then BGRX -> RGB into
    /// `self.rgb`; returns the time.
    fn pack_rgb(
        &mut self,
        frame: FrameView<'_>,
        cursor: Option<&CursorImage>,
        map: &ScaleMap,
    ) -> Result<f64, RenderError> {
        let t = Instant::now();
        let at = self.pack_bgrx(frame, cursor, map)?;
        let (iw, ih) = (map.image.width, map.image.height);
        let pixels = bgrx(frame, &self.packed, &self.scaled, at, map);
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
        self.on_pool(|r| r.render_here(frame, cursor, map, format))
    }

    fn render_here(
        &mut self,
        frame: FrameView<'_>,
        cursor: Option<&CursorImage>,
        map: &ScaleMap,
        format: ImageFormat,
    ) -> Result<(Screenshot, RenderTimings), RenderError> {
        let (iw, ih) = (map.image.width, map.image.height);
        let (scale_ms, t) = match format {
            ImageFormat::Jpeg | ImageFormat::Png => {
                // Both encoders read BGRX themselves: no RGB pass of its
                // own (the PNG's filter makes the RGB, band by band).
                let t = Instant::now();
                let at = self.pack_bgrx(frame, cursor, map)?;
                let scale_ms = ms(t);
                // 4. Encode, 5. base64.
                let t = Instant::now();
                self.encoded.clear();
                let pixels = bgrx(frame, &self.packed, &self.scaled, at, map);
                if format == ImageFormat::Png {
                    self.png
                        .encode_layout(&mut self.encoded, Layout::Bgrx, pixels, (iw, ih))
                        .map_err(|e| RenderError::Encode(e.to_string()))?;
                } else {
                    self.jpeg
                        .encode(
                            &mut self.encoded,
                            Layout::Bgrx,
                            pixels,
                            (iw, ih),
                            ImageFormat::JPEG_QUALITY,
                        )
                        .map_err(|e| RenderError::Encode(e.to_string()))?;
                }
                (scale_ms, t)
            }
            ImageFormat::Webp => {
                let scale_ms = self.pack_rgb(frame, cursor, map)?;
                let t = Instant::now();
                self.encoded.clear();
                image_webp::WebPEncoder::new(&mut self.encoded)
                    .encode(&self.rgb, iw, ih, image_webp::ColorType::Rgb8)
                    .map_err(|e| RenderError::Encode(e.to_string()))?;
                (scale_ms, t)
            }
        };
        let data = base64_bands(&self.encoded)?;
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
        self.on_pool(|r| r.render_frame_here(frame, cursor, map, format, quality))
    }

    fn render_frame_here(
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

/// Bytes below this are base64-encoded on one thread.
const MIN_BASE64_BAND: usize = 64 * 1024;

/// `bytes` as standard base64 (padded), in bands on every thread of the
/// current pool: each band a multiple of 3 bytes, so the bands' text,
/// side by side, is the text of the whole.
fn base64_bands(bytes: &[u8]) -> Result<String, RenderError> {
    use rayon::prelude::*;
    let engine = &base64::engine::general_purpose::STANDARD;
    let threads = rayon::current_num_threads().min(bytes.len() / MIN_BASE64_BAND);
    if threads < 2 {
        return Ok(engine.encode(bytes));
    }
    let band = bytes.len().div_ceil(threads).div_ceil(3) * 3;
    let len = base64::encoded_len(bytes.len(), true)
        .ok_or_else(|| RenderError::Encode("base64 of more than usize::MAX bytes".into()))?;
    let mut text = vec![0u8; len];
    text.par_chunks_mut(band / 3 * 4)
        .zip(bytes.par_chunks(band))
        .try_for_each(|(out, input)| engine.encode_slice(input, out).map(|_| ()))
        .map_err(|e| RenderError::Encode(format!("base64: {e}")))?;
    String::from_utf8(text).map_err(|e| RenderError::Encode(format!("base64: {e}")))
}

/// Where [`Renderer::pack_bgrx`] left the BGRX image.
#[derive(Debug, Clone, Copy)]
enum Pixels {
    /// The frame itself (unscaled, no cursor, no row padding).
    Frame,
    /// `Renderer::packed` (unscaled).
    Packed,
    /// `Renderer::scaled`.
    Scaled,
}

/// The BGRX image [`Renderer::pack_bgrx`] made, `map.image` in size.
fn bgrx<'a>(
    frame: FrameView<'a>,
    packed: &'a [u8],
    scaled: &'a [u8],
    at: Pixels,
    map: &ScaleMap,
) -> &'a [u8] {
    let len = map.image.width as usize * map.image.height as usize * 4;
    match at {
        Pixels::Frame => &frame.data[..len],
        Pixels::Packed => &packed[..len],
        Pixels::Scaled => &scaled[..len],
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
    fn a_renderer_on_its_own_thread_alone_gives_the_pixels_of_a_pool() {
        // The fallback when no render thread can be started: the calling
        // thread does the work inline (no thread is made for it).
        let alone = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .use_current_thread()
            .build()
            .unwrap();
        let (w, h) = (640, 400);
        let data: Vec<u8> = (0..w * h * 4)
            .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let view = FrameView {
            width: w,
            height: h,
            stride: w as usize * 4,
            data: &data,
        };
        let map = ScaleMap::fit(
            Size::new(w, h),
            None,
            Some(Size::new(320, 200)),
            Fit::Contain,
        )
        .unwrap();
        let mut one = Renderer::with_pool(alone);
        let (a, _) = one.render(view, None, &map, ImageFormat::Png).unwrap();
        let (b, _) = Renderer::new()
            .render(view, None, &map, ImageFormat::Png)
            .unwrap();
        let (info, px) = decode_png(&a.data);
        assert_eq!((info.width, info.height), (320, 200));
        assert!(
            px == decode_png(&b.data).1,
            "one thread's pixels differ from the pool's"
        );
        let (frame_b64, _) = one
            .render_frame(view, None, &map, FrameFormat::Png, 80)
            .unwrap();
        assert!(
            decode_png(&frame_b64).1 == px,
            "the live view's frame differs"
        );
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

    /// A screen-like BGRX frame (junk X byte): a title bar, a gradient,
    /// text-like stripes, red buttons with hard edges.
    fn screen_like(w: u32, h: u32) -> Vec<u8> {
        let mut f = Vec::with_capacity((w * h * 4) as usize);
        let mut seed = 0x2545_f491_u32;
        for y in 0..h {
            for x in 0..w {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let [r, g, b] = if y < h / 10 {
                    [40, 44, 52]
                } else if (y / 4) % 6 == 1 && (x / 2) % 5 != 0 && x < w / 2 {
                    [20, 20, 20]
                } else if (x / 64) % 4 == 1 && (y / 32) % 5 == 2 {
                    [200, 40, 40]
                } else {
                    [(x * 255 / w) as u8, (y * 255 / h) as u8, 200]
                };
                f.extend_from_slice(&[b, g, r, (seed >> 24) as u8]);
            }
        }
        f
    }

    /// The mean absolute difference per channel, and the share of channel
    /// values more than 32 apart.
    fn distance(want: &[u8], got: &[u8]) -> (f64, f64) {
        assert_eq!(want.len(), got.len());
        let (mut sum, mut far) = (0u64, 0usize);
        for (a, b) in want.iter().zip(got) {
            let d = a.abs_diff(*b);
            sum += u64::from(d);
            far += usize::from(d > 32);
        }
        (
            sum as f64 / want.len() as f64,
            far as f64 / want.len() as f64,
        )
    }

    #[test]
    fn a_jpeg_screenshot_is_the_pngs_pixels_within_the_stated_tolerance() {
        let (w, h) = (1920, 1080);
        let data = screen_like(w, h);
        let view = FrameView {
            width: w,
            height: h,
            stride: w as usize * 4,
            data: &data,
        };
        let map = ScaleMap::fit(
            Size::new(w, h),
            None,
            Some(Size::new(1280, 720)),
            Fit::Contain,
        )
        .unwrap();
        let mut r = Renderer::new();
        let (png, _) = r.render(view, None, &map, ImageFormat::Png).unwrap();
        let (jpeg, _) = r.render(view, None, &map, ImageFormat::Jpeg).unwrap();
        assert_eq!(jpeg.format, ImageFormat::Jpeg);
        assert_eq!((jpeg.width, jpeg.height), (1280, 720));
        assert_eq!(jpeg.scale_map, map);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&jpeg.data)
            .unwrap();
        let mut dec = jpeg_decoder::Decoder::new(&bytes[..]);
        let px = dec.decode().unwrap();
        let info = dec.info().unwrap();
        assert_eq!((info.width, info.height), (1280, 720));
        assert_eq!(
            info.coding_process,
            jpeg_decoder::CodingProcess::DctSequential,
            "baseline"
        );
        let (mean, far) = distance(&decode_png(&png.data).1, &px);
        eprintln!("JPEG vs PNG: mean {mean:.2}, {:.3}% > 32", far * 100.0);
        // docs/contract.md 3a: the tolerance stated for JPEG screenshots.
        assert!(mean <= 4.0, "mean absolute difference {mean:.2}");
        assert!(
            far <= 0.025,
            "{:.2}% of values more than 32 off",
            far * 100.0
        );
        // A cursor is drawn into a JPEG as into a PNG.
        let cursor = CursorImage {
            x: 600,
            y: 300,
            width: 16,
            height: 16,
            argb: vec![0xff00_ff00; 256],
        };
        let (with, _) = r
            .render(view, Some(&cursor), &map, ImageFormat::Jpeg)
            .unwrap();
        assert_ne!(with.data, jpeg.data, "the cursor is in the image");
    }

    #[test]
    fn base64_in_bands_is_the_base64_of_the_whole() {
        for threads in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for len in [0, 1, 2, 3, 65_535, 200_001, 200_002, 437_000, 1_000_003] {
                let bytes: Vec<u8> = (0..len)
                    .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
                    .collect();
                let text = pool.install(|| base64_bands(&bytes)).unwrap();
                assert!(
                    text == base64::engine::general_purpose::STANDARD.encode(&bytes),
                    "{len} bytes on {threads} threads"
                );
            }
        }
    }

    #[test]
    fn a_png_screenshot_has_the_pixels_of_its_rgb_encoded_apart() {
        // The PNG path turns BGRX into RGB inside its filter: the same
        // bytes as PNG-encoding the RGB the live view's frames use.
        let (w, h) = (1920, 1080);
        let data = screen_like(w, h);
        let view = FrameView {
            width: w,
            height: h,
            stride: w as usize * 4,
            data: &data,
        };
        let map = ScaleMap::fit(
            Size::new(w, h),
            None,
            Some(Size::new(1280, 720)),
            Fit::Contain,
        )
        .unwrap();
        let mut r = Renderer::new();
        let (shot, _) = r.render(view, None, &map, ImageFormat::Png).unwrap();
        let (frame_b64, _) = r
            .render_frame(view, None, &map, FrameFormat::Png, 80)
            .unwrap();
        assert!(shot.data == frame_b64, "the screenshot's PNG differs");
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
