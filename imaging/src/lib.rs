//! Pixel work the daemon and host-cli share: scaling packed RGB or BGRX
//! images (fast_image_resize's convolutions, with its SSE4.1/AVX2 paths,
//! on every core), PNG compressed in bands on every core, and baseline
//! JPEG encoding (in bands on every core, joined by restart markers, for
//! screenshots).
//!
//! The functions here are not generic, so that the libraries' generic code
//! is instantiated and optimised once, in this crate, for one pixel type
//! (4 bytes), while the rest of the dependency tree compiles; called from
//! host-cli and sandtopd it was compiled again inside each of them, for all
//! 13 pixel types, and made up a third of their machine code
//! (BENCHMARKS.md "make guest").

mod jpeg_bands;
mod png_bands;

pub use jpeg_bands::JpegEncoder;
pub use png_bands::{PngEncoder, png_rgb};

use fast_image_resize as fr;
use fast_image_resize::pixels::U8x4;

/// How the bytes of an image are laid out (rows packed, no padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// R, G, B.
    Rgb,
    /// B, G, R, X: the fourth byte is carried along but never read as
    /// alpha (X servers leave it undefined).
    Bgrx,
}

impl Layout {
    /// Bytes per pixel.
    pub fn bytes(self) -> usize {
        match self {
            Layout::Rgb => 3,
            Layout::Bgrx => 4,
        }
    }
}

/// Why an image could not be scaled or encoded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The buffer does not hold `width x height` pixels of its layout.
    #[error("{width}x{height} needs {needed} bytes, the buffer has {got}")]
    Size {
        width: u32,
        height: u32,
        needed: usize,
        got: usize,
    },
    #[error("scaling: {0}")]
    Scale(String),
    #[error("JPEG: {0}")]
    Jpeg(String),
    #[error("PNG: {0}")]
    Png(String),
}

/// Scales images; keeps the resizer's buffers from one call to the next.
#[derive(Default)]
pub struct Scaler {
    resizer: fr::Resizer,
    /// RGB images widened to 4 bytes a pixel, before and after scaling.
    wide_src: Vec<u8>,
    wide_dst: Vec<u8>,
}

impl std::fmt::Debug for Scaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scaler").finish_non_exhaustive()
    }
}

fn check(layout: Layout, buf: &[u8], width: u32, height: u32) -> Result<(), Error> {
    let needed = width as usize * height as usize * layout.bytes();
    if buf.len() < needed {
        return Err(Error::Size {
            width,
            height,
            needed,
            got: buf.len(),
        });
    }
    Ok(())
}

impl Scaler {
    pub fn new() -> Scaler {
        Scaler::default()
    }

    /// Scales `src` (`width x height`, `layout`) to `to_width x to_height`
    /// into `dst`, which is resized to fit. Hamming when making smaller (it
    /// costs what bilinear costs and keeps text about as sharp as bicubic),
    /// Catmull-Rom when making larger (where Hamming is poor). Alpha is
    /// never applied. Equal sizes copy.
    pub fn scale(
        &mut self,
        layout: Layout,
        src: &[u8],
        (width, height): (u32, u32),
        dst: &mut Vec<u8>,
        (to_width, to_height): (u32, u32),
    ) -> Result<(), Error> {
        check(layout, src, width, height)?;
        let filter = if to_width <= width && to_height <= height {
            fr::FilterType::Hamming
        } else {
            fr::FilterType::CatmullRom
        };
        let opts = fr::ResizeOptions::new()
            .resize_alg(fr::ResizeAlg::Convolution(filter))
            .use_alpha(false);
        match layout {
            Layout::Bgrx => self.scale_4(src, (width, height), dst, (to_width, to_height), &opts),
            Layout::Rgb => {
                // One pixel type (4 bytes) is compiled, not two: RGB (the
                // reports', only ever made smaller) is widened, scaled and
                // packed again, which costs little next to the convolution.
                let mut wide_src = std::mem::take(&mut self.wide_src);
                let mut wide_dst = std::mem::take(&mut self.wide_dst);
                wide_src.clear();
                for px in src[..width as usize * height as usize * 3].chunks_exact(3) {
                    wide_src.extend_from_slice(&[px[0], px[1], px[2], 0]);
                }
                let r = self.scale_4(
                    &wide_src,
                    (width, height),
                    &mut wide_dst,
                    (to_width, to_height),
                    &opts,
                );
                dst.resize(to_width as usize * to_height as usize * 3, 0);
                for (out, px) in dst.chunks_exact_mut(3).zip(wide_dst.chunks_exact(4)) {
                    out.copy_from_slice(&px[..3]);
                }
                self.wide_src = wide_src;
                self.wide_dst = wide_dst;
                r
            }
        }
    }

    fn scale_4(
        &mut self,
        src: &[u8],
        (width, height): (u32, u32),
        dst: &mut Vec<u8>,
        (to_width, to_height): (u32, u32),
        opts: &fr::ResizeOptions,
    ) -> Result<(), Error> {
        dst.resize(to_width as usize * to_height as usize * 4, 0);
        let e = |e: &dyn std::fmt::Display| Error::Scale(e.to_string());
        // Typed (`resize_typed`): `Resizer::resize` would compile the
        // convolutions for all 13 pixel types it can dispatch to.
        let s = fr::images::TypedImageRef::<U8x4>::from_buffer(width, height, src)
            .map_err(|x| e(&x))?;
        let mut d = fr::images::TypedImage::<U8x4>::from_buffer(to_width, to_height, dst)
            .map_err(|x| e(&x))?;
        self.resizer
            .resize_typed(&s, &mut d, opts)
            .map_err(|x| e(&x))
    }
}

/// Appends `rgb` (`width x height`, packed RGB) to `out` as a baseline JPEG
/// of `quality` (1-100).
pub fn jpeg_rgb(
    out: &mut Vec<u8>,
    rgb: &[u8],
    (width, height): (u32, u32),
    quality: u8,
) -> Result<(), Error> {
    jpeg(out, Layout::Rgb, rgb, (width, height), quality)
}

/// Appends `pixels` (`width x height`, packed in `layout`) to `out` as a
/// baseline JPEG of `quality` (1-100): 8-bit YCbCr, the standard Huffman
/// tables, 4:2:0 chroma below quality 90 and 4:4:4 from 90 on (the
/// encoder's rule). A BGRX image is read as it is (its X byte ignored),
/// without a pass to RGB first.
pub fn jpeg(
    out: &mut Vec<u8>,
    layout: Layout,
    pixels: &[u8],
    (width, height): (u32, u32),
    quality: u8,
) -> Result<(), Error> {
    check(layout, pixels, width, height)?;
    let side =
        |v: u32| u16::try_from(v).map_err(|_| Error::Jpeg(format!("{v} pixels is over 65535")));
    let (w, h) = (side(width)?, side(height)?);
    let used = width as usize * height as usize * layout.bytes();
    let color = match layout {
        Layout::Rgb => jpeg_encoder::ColorType::Rgb,
        // "Bgra": its fourth byte is never read (no alpha in a JPEG).
        Layout::Bgrx => jpeg_encoder::ColorType::Bgra,
    };
    jpeg_encoder::Encoder::new(out, quality)
        .encode(&pixels[..used], w, h, color)
        .map_err(|e| Error::Jpeg(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Left half black, right half white, `w x h`, in `layout`.
    fn halves(layout: Layout, w: u32, h: u32) -> Vec<u8> {
        let n = layout.bytes();
        let mut v = vec![0u8; w as usize * h as usize * n];
        for y in 0..h as usize {
            for x in w as usize / 2..w as usize {
                let p = (y * w as usize + x) * n;
                v[p..p + 3].fill(255);
            }
        }
        v
    }

    /// A JPEG of quality 85: at most this mean absolute difference per
    /// channel from its source (of 255)...
    const JPEG_MEAN_TOLERANCE: f64 = 4.0;
    /// ...and at most this share of channel values more than 32 apart.
    const JPEG_FAR_SHARE: f64 = 0.025;

    #[test]
    fn scaling_on_many_threads_gives_the_pixels_of_one() {
        // A busy picture: every pixel differs from its neighbours.
        let (w, h) = (1920u32, 1080u32);
        let src: Vec<u8> = (0..w * h * 4)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut results = Vec::new();
        for threads in [1, 2, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for to in [(1280, 720), (2400, 1350)] {
                let mut dst = Vec::new();
                pool.install(|| {
                    Scaler::new()
                        .scale(Layout::Bgrx, &src, (w, h), &mut dst, to)
                        .unwrap();
                });
                results.push((threads, to, dst));
            }
        }
        for (threads, to, dst) in &results[2..] {
            let (_, _, one) = results.iter().find(|(t, s, _)| *t == 1 && s == to).unwrap();
            assert!(
                dst == one,
                "{threads} threads, {to:?}: pixels differ from one thread's"
            );
        }
    }

    #[test]
    fn scaling_keeps_the_picture_in_both_layouts_and_both_directions() {
        for layout in [Layout::Rgb, Layout::Bgrx] {
            let n = layout.bytes();
            for (from, to) in [((64, 32), (16, 8)), ((16, 8), (64, 32))] {
                let src = halves(layout, from.0, from.1);
                let mut dst = Vec::new();
                Scaler::new()
                    .scale(layout, &src, from, &mut dst, to)
                    .unwrap();
                assert_eq!(
                    dst.len(),
                    (to.0 * to.1) as usize * n,
                    "{layout:?} {from:?}->{to:?}"
                );
                let px = |x: u32, y: u32| dst[(y * to.0 + x) as usize * n];
                // Far from the edge the halves stay black and white.
                assert!(
                    px(0, to.1 / 2) < 16,
                    "{layout:?} {from:?}->{to:?}: {}",
                    px(0, 0)
                );
                assert!(px(to.0 - 1, to.1 / 2) > 239, "{layout:?} {from:?}->{to:?}");
            }
        }
    }

    #[test]
    fn rgb_scales_as_its_bgrx_twin_does_channel_for_channel() {
        let (w, h) = (37u32, 23u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 97 % 251) as u8).collect();
        let wide: Vec<u8> = rgb
            .chunks_exact(3)
            .flat_map(|p| [p[0], p[1], p[2], 0])
            .collect();
        for to in [(11, 7), (80, 50)] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mut s = Scaler::new();
            s.scale(Layout::Rgb, &rgb, (w, h), &mut a, to).unwrap();
            s.scale(Layout::Bgrx, &wide, (w, h), &mut b, to).unwrap();
            let packed: Vec<u8> = b.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
            assert_eq!(a, packed, "{to:?}");
        }
    }

    #[test]
    fn a_buffer_too_small_for_its_size_is_an_error_not_a_panic() {
        let mut dst = Vec::new();
        let err = Scaler::new()
            .scale(Layout::Bgrx, &[0; 15], (2, 2), &mut dst, (1, 1))
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Size {
                    needed: 16,
                    got: 15,
                    ..
                }
            ),
            "{err}"
        );
        let err = jpeg_rgb(&mut Vec::new(), &[0; 11], (2, 2), 70).unwrap_err();
        assert!(matches!(err, Error::Size { needed: 12, .. }), "{err}");
        let err = jpeg_rgb(&mut Vec::new(), &[0; 3 * 70_000], (70_000, 1), 70).unwrap_err();
        assert!(matches!(err, Error::Jpeg(_)), "{err}");
    }

    /// A screen-like picture, packed RGB: a dark title bar, a gradient,
    /// text-like stripes (dark on light, two pixels wide), coloured
    /// buttons with hard edges, and a noisy "photo" in one corner.
    pub(crate) fn screen_like(w: u32, h: u32) -> Vec<u8> {
        picture(w, h, true)
    }

    /// [`screen_like`], with its corner of noise or without it.
    pub(crate) fn picture(w: u32, h: u32, noise: bool) -> Vec<u8> {
        let mut v = Vec::with_capacity((w * h * 3) as usize);
        let mut seed = 0x2545_f491_u32;
        for y in 0..h {
            for x in 0..w {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let px = if y < h / 10 {
                    [40, 44, 52]
                } else if noise && x > w * 3 / 4 && y > h * 3 / 4 {
                    [seed as u8, (seed >> 8) as u8, (seed >> 16) as u8]
                } else if (y / 4) % 6 == 1 && (x / 2) % 5 != 0 && x < w / 2 {
                    [20, 20, 20]
                } else if (x / 64) % 4 == 1 && (y / 32) % 5 == 2 {
                    [200, 40, 40]
                } else {
                    [(x * 255 / w) as u8, (y * 255 / h) as u8, 200]
                };
                v.extend_from_slice(&px);
            }
        }
        v
    }

    /// How far `got` is from `want` (packed RGB, same size): the mean
    /// absolute difference per channel, and the share of channel values
    /// more than `far` apart.
    pub(crate) fn distance(want: &[u8], got: &[u8], far: u8) -> (f64, f64) {
        assert_eq!(want.len(), got.len());
        let mut sum = 0u64;
        let mut many = 0usize;
        for (a, b) in want.iter().zip(got) {
            let d = a.abs_diff(*b);
            sum += u64::from(d);
            many += usize::from(d > far);
        }
        (
            sum as f64 / want.len() as f64,
            many as f64 / want.len() as f64,
        )
    }

    fn decode_jpeg(bytes: &[u8]) -> (jpeg_decoder::ImageInfo, Vec<u8>) {
        let mut d = jpeg_decoder::Decoder::new(bytes);
        let px = d.decode().unwrap();
        (d.info().unwrap(), px)
    }

    #[test]
    fn a_jpeg_of_bgrx_decodes_to_its_size_within_the_stated_tolerance() {
        for (w, h, noise) in [
            (1280u32, 720u32, false),
            (1283, 719, false),
            (320, 200, false),
            (1280, 720, true),
        ] {
            let rgb = picture(w, h, noise);
            let bgrx: Vec<u8> = rgb
                .chunks_exact(3)
                .flat_map(|p| [p[2], p[1], p[0], 0x5a])
                .collect();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            jpeg(&mut a, Layout::Bgrx, &bgrx, (w, h), 85).unwrap();
            jpeg_rgb(&mut b, &rgb, (w, h), 85).unwrap();
            let (info, px) = decode_jpeg(&a);
            assert_eq!((u32::from(info.width), u32::from(info.height)), (w, h));
            assert_eq!(info.pixel_format, jpeg_decoder::PixelFormat::RGB24);
            assert_eq!(
                info.coding_process,
                jpeg_decoder::CodingProcess::DctSequential
            );
            assert_eq!(px, decode_jpeg(&b).1, "{w}x{h}: BGRX and RGB differ");
            let (mean, share) = distance(&rgb, &px, 32);
            eprintln!(
                "{w}x{h} noise {noise}: mean {mean:.2}, {:.3}% > 32",
                share * 100.0
            );
            if noise {
                // A sixteenth of the picture random: what JPEG cannot
                // keep. Bounded only loosely (a swapped channel or a
                // wrong quality would still fail).
                assert!(mean <= 2.0 * JPEG_MEAN_TOLERANCE, "{w}x{h}: mean {mean:.2}");
                continue;
            }
            // docs/contract.md 3a: the stated tolerance of a JPEG
            // screenshot at quality 85.
            assert!(mean <= JPEG_MEAN_TOLERANCE, "{w}x{h}: mean {mean:.2}");
            assert!(share <= JPEG_FAR_SHARE, "{w}x{h}: {share:.4} far off");
        }
    }

    #[test]
    fn jpeg_appends_a_baseline_jpeg() {
        let mut out = b"keep".to_vec();
        jpeg_rgb(&mut out, &halves(Layout::Rgb, 32, 16), (32, 16), 70).unwrap();
        assert_eq!(&out[..4], b"keep");
        assert_eq!(&out[4..7], &[0xff, 0xd8, 0xff], "SOI");
        assert!(out.windows(2).any(|w| w == [0xff, 0xc0]), "SOF0: baseline");
        assert_eq!(&out[out.len() - 2..], &[0xff, 0xd9], "EOI");
    }
}
