//! Screenshots from the daemon, checked before anything decodes them
//! (issue 11 item 3; docs/security.md L4).
//!
//! The daemon is untrusted: a reply of a few hundred bytes can claim any
//! size in its PNG header, and a decoder that sizes its output buffer from
//! that header allocates what the guest chose. So, in this order:
//!
//! 1. [`check_screenshot`]: the reply is self-consistent. Its ScaleMap is
//!    valid (every side within `1..=MAX_DIMENSION`), the declared size is
//!    the map's image size, the base64 text is no longer than an image of
//!    that size can take ([`max_encoded_bytes`]), and the image header
//!    (PNG IHDR, read by the png crate without any pixel data; WebP VP8L)
//!    states that size — and, for a PNG, 8-bit RGB without interlacing,
//!    the only kind the daemon writes.
//! 2. [`check_reply`]: the same, and the reply is what the request asked
//!    for: the format asked, and exactly the map `ScaleMap::fit` gives for
//!    the request on the reply's screen (the size asked for, or the screen
//!    or region when unscaled); for a batch that named the map its
//!    coordinates refer to, that map.
//! 3. [`decode_png`] / [`decode_png_within`]: decoding with limits set
//!    from the expected size: the header is compared with it before the
//!    decoder runs, the png crate's own allocations are capped by
//!    `png::Limits` (a row of the expected width and 64 KiB of metadata),
//!    and the pixel buffer grows only as rows are really decoded, never
//!    beyond the expected size.
//!
//! `channel` runs step 2 on every screenshot that arrives (`screenshot`
//! and `act`), so the runner never holds an unchecked one.

use base64::Engine as _;
use sandtop_protocol::{ImageFormat, ScaleMap, Screenshot, ScreenshotOptions, Size, limits};

/// Room for signature, header, chunk framing and the like in an encoded
/// screenshot, beyond its pixels.
const ENCODED_SLACK: u64 = 64 * 1024;

/// What the png decoder may allocate beyond one output row: the ancillary
/// chunks it keeps (text, colour profile). The daemon writes none.
const METADATA_BUDGET: usize = 64 * 1024;

/// The largest image any screenshot can be (`MAX_DIMENSION` per side).
pub const MAX_SIZE: Size = Size::new(limits::MAX_DIMENSION, limits::MAX_DIMENSION);

/// The most bytes an encoded (PNG or WebP) screenshot of `size` may take:
/// twice its raw 8-bit RGB rows (a filter byte each) plus 64 KiB. Real
/// screenshots are far smaller; an incompressible one stays under the raw
/// size plus framing.
pub fn max_encoded_bytes(size: Size) -> u64 {
    let raw = u64::from(size.height) * (1 + 3 * u64::from(size.width));
    2 * raw + ENCODED_SLACK
}

/// The most base64 characters an encoded screenshot of `size` may take.
pub fn max_base64_len(size: Size) -> u64 {
    max_encoded_bytes(size).div_ceil(3) * 4
}

fn describe(m: &ScaleMap) -> String {
    let r = m.region;
    format!(
        "{} of the region {}x{}+{}+{} of a {} screen",
        m.image, r.width, r.height, r.x, r.y, m.screen
    )
}

/// Checks a screenshot against the request it answers, then its bytes
/// ([`check_screenshot`]); returns the encoded image. `expect_map` is the
/// batch's `expect_scale_map`: the daemon refuses a batch whose map is
/// stale, so a successful reply carries exactly that map.
pub fn check_reply(
    s: &Screenshot,
    asked: &ScreenshotOptions,
    expect_map: Option<&ScaleMap>,
) -> Result<Vec<u8>, String> {
    check_shape(s)?;
    if s.format != asked.format {
        return Err(format!(
            "a {:?} screenshot was asked for, the reply is {:?}",
            asked.format, s.format
        ));
    }
    let want = ScaleMap::fit(s.scale_map.screen, asked.region, asked.size, asked.fit)
        .map_err(|e| format!("the request does not fit the reply's screen: {e}"))?;
    if s.scale_map != want {
        return Err(format!(
            "the request asks for {}, the reply is {}",
            describe(&want),
            describe(&s.scale_map)
        ));
    }
    if let Some(m) = expect_map
        && *m != s.scale_map
    {
        return Err(format!(
            "the batch's coordinates refer to {}, the reply is {}",
            describe(m),
            describe(&s.scale_map)
        ));
    }
    check_bytes(s)
}

/// Checks a screenshot on its own: a consistent ScaleMap, the declared
/// size its image size, base64 no longer than that size allows, and an
/// image header stating that size (nothing is decoded); returns the
/// encoded image.
pub fn check_screenshot(s: &Screenshot) -> Result<Vec<u8>, String> {
    check_shape(s)?;
    check_bytes(s)
}

fn check_shape(s: &Screenshot) -> Result<(), String> {
    s.scale_map
        .check()
        .map_err(|e| format!("inconsistent scale map: {e}"))?;
    if (s.width, s.height) != (s.scale_map.image.width, s.scale_map.image.height) {
        return Err(format!(
            "a {}x{} image with a scale map for {}",
            s.width, s.height, s.scale_map.image
        ));
    }
    Ok(())
}

fn check_bytes(s: &Screenshot) -> Result<Vec<u8>, String> {
    let size = Size::new(s.width, s.height);
    let most = max_base64_len(size);
    if s.data.len() as u64 > most {
        return Err(format!(
            "{} bytes of base64 for a {size} image (at most {most})",
            s.data.len()
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&s.data)
        .map_err(|e| format!("screenshot is not base64: {e}"))?;
    let (w, h) = match s.format {
        ImageFormat::Png => png_size(&bytes),
        ImageFormat::Webp => webp_size(&bytes),
    }
    .ok_or_else(|| format!("screenshot bytes are not a {:?} image", s.format))?;
    if (w, h) != (s.width, s.height) {
        return Err(format!(
            "screenshot declares {}x{} but the image is {w}x{h}",
            s.width, s.height
        ));
    }
    if s.format == ImageFormat::Png {
        png_header(&bytes, size).map_err(|e| format!("screenshot PNG: {e}"))?;
    }
    Ok(bytes)
}

/// The size an image's PNG IHDR states, read from its fixed place.
pub fn png_size(b: &[u8]) -> Option<(u32, u32)> {
    const SIG: &[u8] = b"\x89PNG\r\n\x1a\n";
    if b.len() < 24 || &b[..8] != SIG || &b[12..16] != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes(b[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(b[20..24].try_into().ok()?);
    Some((w, h))
}

/// The size a lossless WebP (RIFF, VP8L) header states.
pub fn webp_size(b: &[u8]) -> Option<(u32, u32)> {
    // RIFF....WEBPVP8L, then a signature byte 0x2f and 14-bit sizes - 1.
    if b.len() < 25 || &b[0..4] != b"RIFF" || &b[8..12] != b"WEBP" || &b[12..16] != b"VP8L" {
        return None;
    }
    if b[20] != 0x2f {
        return None;
    }
    let bits = u32::from_le_bytes(b[21..25].try_into().ok()?);
    Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
}

/// An 8-bit RGB image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: u32,
    pub height: u32,
    /// `width * height` pixels, three bytes each, rows top to bottom.
    pub rgb: Vec<u8>,
}

/// Why a PNG was not decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not a PNG image")]
    NotPng,
    #[error("the PNG is {found}, {expected} was expected")]
    WrongSize { found: Size, expected: Size },
    #[error("the PNG is {found}, larger than {most}")]
    TooLarge { found: Size, most: Size },
    #[error("the PNG is not 8-bit RGB without interlacing")]
    NotRgb8,
    #[error("decoding the PNG would allocate more than its limit")]
    Limits,
    #[error("the PNG is damaged: {0}")]
    Damaged(String),
}

fn damaged(e: png::DecodingError) -> DecodeError {
    match e {
        png::DecodingError::LimitsExceeded => DecodeError::Limits,
        e => DecodeError::Damaged(e.to_string()),
    }
}

/// What the png decoder may allocate for an image `width` pixels wide:
/// one 8-bit RGB row and [`METADATA_BUDGET`].
fn decoder_budget(width: u32) -> usize {
    3 * width as usize + 1 + METADATA_BUDGET
}

/// A png reader whose own allocations are capped by `png::Limits` set for
/// an image `width` pixels wide: a header claiming a wider image fails
/// with `LimitsExceeded` before its row buffer is allocated.
fn limited_reader(
    bytes: &[u8],
    width: u32,
) -> Result<png::Reader<std::io::Cursor<&[u8]>>, DecodeError> {
    let limits = png::Limits {
        bytes: decoder_budget(width),
    };
    png::Decoder::new_with_limits(std::io::Cursor::new(bytes), limits)
        .read_info()
        .map_err(damaged)
}

/// Reads a PNG's header (no pixel data) and checks it states `size`,
/// 8-bit RGB, no interlacing.
fn png_header(bytes: &[u8], size: Size) -> Result<(), DecodeError> {
    let mut dec = png::Decoder::new_with_limits(
        std::io::Cursor::new(bytes),
        png::Limits {
            bytes: decoder_budget(size.width),
        },
    );
    let info = dec.read_header_info().map_err(damaged)?;
    let found = Size::new(info.width, info.height);
    if found != size {
        return Err(DecodeError::WrongSize {
            found,
            expected: size,
        });
    }
    if info.color_type != png::ColorType::Rgb
        || info.bit_depth != png::BitDepth::Eight
        || info.interlaced
    {
        return Err(DecodeError::NotRgb8);
    }
    Ok(())
}

/// Decodes an 8-bit RGB PNG that must be exactly `expected` (the size the
/// request asked for, or a checked screenshot's declared size). The IHDR is
/// compared with `expected` before the decoder runs.
pub fn decode_png(bytes: &[u8], expected: Size) -> Result<Rgb8, DecodeError> {
    let (w, h) = png_size(bytes).ok_or(DecodeError::NotPng)?;
    let found = Size::new(w, h);
    if found != expected {
        return Err(DecodeError::WrongSize { found, expected });
    }
    decode_checked(bytes, found)
}

/// Decodes an 8-bit RGB PNG of at most `most` per side (for callers that
/// hold bytes of an already checked screenshot but not its size; pass
/// [`MAX_SIZE`] when nothing tighter is known). The buffer grows only with
/// rows actually decoded.
pub fn decode_png_within(bytes: &[u8], most: Size) -> Result<Rgb8, DecodeError> {
    let (w, h) = png_size(bytes).ok_or(DecodeError::NotPng)?;
    let found = Size::new(w, h);
    if w > most.width || h > most.height {
        return Err(DecodeError::TooLarge { found, most });
    }
    decode_checked(bytes, found)
}

/// Decodes a checked screenshot (see [`check_screenshot`]) at its declared
/// size, PNG or WebP.
pub fn decode_screenshot(s: &Screenshot) -> Result<Rgb8, String> {
    let bytes = check_screenshot(s)?;
    let size = Size::new(s.width, s.height);
    match s.format {
        ImageFormat::Png => decode_png(&bytes, size).map_err(|e| e.to_string()),
        ImageFormat::Webp => decode_webp(&bytes, size),
    }
}

/// Decodes a WebP image whose header states `size` (checked by
/// [`check_screenshot`]); the output buffer is that size's, RGB or RGBA,
/// and an alpha channel is dropped.
fn decode_webp(bytes: &[u8], size: Size) -> Result<Rgb8, String> {
    let mut dec = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("screenshot WebP: {e}"))?;
    if dec.dimensions() != (size.width, size.height) {
        return Err(format!(
            "screenshot WebP is {:?}, {size} was expected",
            dec.dimensions()
        ));
    }
    let channels = if dec.has_alpha() { 4 } else { 3 };
    let len = size.width as usize * size.height as usize * channels;
    let mut buf = vec![0u8; len];
    dec.read_image(&mut buf)
        .map_err(|e| format!("screenshot WebP: {e}"))?;
    let rgb = if channels == 3 {
        buf
    } else {
        buf.chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect()
    };
    Ok(Rgb8 {
        width: size.width,
        height: size.height,
        rgb,
    })
}

/// `size` is what the IHDR states and the caller accepted.
fn decode_checked(bytes: &[u8], size: Size) -> Result<Rgb8, DecodeError> {
    let mut rgb = Vec::new();
    decode_into(bytes, size, &mut rgb)?;
    Ok(Rgb8 {
        width: size.width,
        height: size.height,
        rgb,
    })
}

/// Decodes into `rgb` (empty), which grows only as rows are decoded.
fn decode_into(bytes: &[u8], size: Size, rgb: &mut Vec<u8>) -> Result<(), DecodeError> {
    if size.check().is_err() {
        return Err(DecodeError::TooLarge {
            found: size,
            most: MAX_SIZE,
        });
    }
    let mut reader = limited_reader(bytes, size.width)?;
    let info = reader.info();
    if (info.width, info.height) != (size.width, size.height) {
        return Err(DecodeError::WrongSize {
            found: Size::new(info.width, info.height),
            expected: size,
        });
    }
    if info.color_type != png::ColorType::Rgb
        || info.bit_depth != png::BitDepth::Eight
        || info.interlaced
    {
        return Err(DecodeError::NotRgb8);
    }
    // Both sides are at most MAX_DIMENSION: no overflow.
    let row = 3 * size.width as usize;
    let total = row * size.height as usize;
    if reader.output_buffer_size() != Some(total) {
        return Err(DecodeError::NotRgb8);
    }
    while let Some(r) = reader.next_row().map_err(damaged)? {
        let data = r.data();
        if data.len() != row || rgb.len() + row > total {
            return Err(DecodeError::Damaged("a row of the wrong length".into()));
        }
        if rgb.capacity() - rgb.len() < row {
            // Double, but never past the image's size.
            let target = (rgb.capacity() * 2).clamp(rgb.len() + row, total);
            rgb.reserve_exact(target - rgb.len());
        }
        rgb.extend_from_slice(data);
    }
    if rgb.len() != total {
        return Err(DecodeError::Damaged(format!(
            "{} of {} rows",
            rgb.len() / row,
            size.height
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::{Fit, Rect};

    /// A real PNG: `w` x `h`, 8-bit RGB, a gradient.
    fn png(w: u32, h: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().unwrap();
        let px: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        wr.write_image_data(&px).unwrap();
        wr.finish().unwrap();
        out
    }

    /// `png(w, h)` with its IHDR rewritten to claim `cw` x `ch` (CRC fixed,
    /// so only the size lies).
    fn lying(w: u32, h: u32, cw: u32, ch: u32) -> Vec<u8> {
        let mut b = png(w, h);
        b[16..20].copy_from_slice(&cw.to_be_bytes());
        b[20..24].copy_from_slice(&ch.to_be_bytes());
        let crc = crc32(&b[12..29]);
        b[29..33].copy_from_slice(&crc.to_be_bytes());
        b
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &x in data {
            c ^= u32::from(x);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    fn shot(bytes: &[u8], map: ScaleMap) -> Screenshot {
        Screenshot {
            format: ImageFormat::Png,
            width: map.image.width,
            height: map.image.height,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            scale_map: map,
        }
    }

    const SCREEN: Size = Size::new(1280, 800);

    #[test]
    fn a_real_screenshot_passes_and_decodes() {
        let s = shot(&png(64, 40), ScaleMap::identity(Size::new(64, 40)));
        assert!(check_screenshot(&s).is_ok());
        let img = decode_screenshot(&s).unwrap();
        assert_eq!(
            (img.width, img.height, img.rgb.len()),
            (64, 40, 64 * 40 * 3)
        );
        assert_eq!(img.rgb.capacity(), img.rgb.len(), "never past the size");
        assert_eq!(&img.rgb[..4], &[0, 1, 2, 3]);
    }

    #[test]
    fn a_reply_must_be_the_size_asked_for() {
        let asked = ScreenshotOptions {
            size: Some(Size::new(640, 400)),
            ..ScreenshotOptions::default()
        };
        let good = ScaleMap::fit(SCREEN, None, asked.size, Fit::Contain).unwrap();
        assert!(check_reply(&shot(&png(640, 400), good), &asked, None).is_ok());
        // Self-consistent, but the whole screen unscaled: not what was asked.
        let whole = shot(&png(1280, 800), ScaleMap::identity(SCREEN));
        assert!(check_screenshot(&whole).is_ok());
        let e = check_reply(&whole, &asked, None).unwrap_err();
        assert!(
            e.contains("asks for 640x400") && e.contains("reply is 1280x800"),
            "{e}"
        );
        // Unscaled request, scaled reply.
        let unscaled = ScreenshotOptions::default();
        assert!(check_reply(&whole, &unscaled, None).is_ok());
        let e = check_reply(&shot(&png(640, 400), good), &unscaled, None).unwrap_err();
        assert!(e.contains("asks for 1280x800"), "{e}");
        // A crop of the right size but another region.
        let region = Rect {
            x: 0,
            y: 0,
            width: 640,
            height: 400,
        };
        let crop = ScaleMap::fit(SCREEN, Some(region), None, Fit::Contain).unwrap();
        let e = check_reply(&shot(&png(640, 400), crop), &asked, None).unwrap_err();
        assert!(e.contains("region 640x400+0+0"), "{e}");
        // The wrong format.
        let webp = ScreenshotOptions {
            format: ImageFormat::Webp,
            ..asked
        };
        let e = check_reply(&shot(&png(640, 400), good), &webp, None).unwrap_err();
        assert!(e.contains("Webp screenshot was asked for"), "{e}");
    }

    #[test]
    fn a_batch_reply_carries_the_map_its_coordinates_refer_to() {
        let asked = ScreenshotOptions::default();
        let old = ScaleMap::identity(Size::new(1024, 768));
        let now = shot(&png(1280, 800), ScaleMap::identity(SCREEN));
        assert!(check_reply(&now, &asked, Some(&now.scale_map)).is_ok());
        let e = check_reply(&now, &asked, Some(&old)).unwrap_err();
        assert!(e.contains("refer to 1024x768"), "{e}");
    }

    #[test]
    fn a_scale_map_disagreeing_with_the_image_is_refused() {
        let mut s = shot(&png(640, 400), ScaleMap::identity(SCREEN));
        s.width = 640;
        s.height = 400;
        let e = check_screenshot(&s).unwrap_err();
        assert!(
            e.contains("640x400 image with a scale map for 1280x800"),
            "{e}"
        );
    }

    #[test]
    fn an_ihdr_lying_about_the_size_is_refused_before_decoding() {
        // The reply and its map say 64x40; the header says 64x41.
        let s = shot(
            &lying(64, 40, 64, 41),
            ScaleMap::identity(Size::new(64, 40)),
        );
        let e = check_screenshot(&s).unwrap_err();
        assert!(e.contains("the image is 64x41"), "{e}");
        // The decoder compares the header with what it expects first.
        assert_eq!(
            decode_png(&lying(64, 40, 64, 41), Size::new(64, 40)),
            Err(DecodeError::WrongSize {
                found: Size::new(64, 41),
                expected: Size::new(64, 40)
            })
        );
        // A header that agrees but pixel data for fewer rows: refused,
        // with no more than the rows present in the buffer.
        let e = decode_png(&lying(64, 40, 64, 80), Size::new(64, 80)).unwrap_err();
        assert!(matches!(e, DecodeError::Damaged(_)), "{e:?}");
    }

    #[test]
    fn a_png_of_another_kind_is_refused_from_its_header() {
        // Right size, but 16-bit RGBA: eight bytes per pixel instead of
        // three. Only the header is read.
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, 64, 40);
        enc.set_color(png::ColorType::Rgba);
        enc.set_depth(png::BitDepth::Sixteen);
        let mut wr = enc.write_header().unwrap();
        wr.write_image_data(&vec![7u8; 64 * 40 * 8]).unwrap();
        wr.finish().unwrap();
        let s = shot(&out, ScaleMap::identity(Size::new(64, 40)));
        let e = check_screenshot(&s).unwrap_err();
        assert!(e.contains("not 8-bit RGB"), "{e}");
        assert_eq!(
            decode_png(&out, Size::new(64, 40)),
            Err(DecodeError::NotRgb8)
        );
        // A corrupted IHDR (CRC) is refused by the png crate's header read.
        let mut b = png(64, 40);
        b[29] ^= 0xff;
        let e = check_screenshot(&shot(&b, ScaleMap::identity(Size::new(64, 40)))).unwrap_err();
        assert!(e.contains("screenshot PNG"), "{e}");
    }

    #[test]
    fn base64_longer_than_the_image_can_take_is_refused_before_decoding() {
        let size = Size::new(4, 4);
        let mut s = shot(&png(4, 4), ScaleMap::identity(size));
        let most = max_base64_len(size) as usize;
        // Not even valid base64: the length alone refuses it.
        s.data = "%".repeat(most + 1);
        let e = check_screenshot(&s).unwrap_err();
        assert!(e.contains("bytes of base64 for a 4x4 image"), "{e}");
        // A 1280x800 screenshot fits (its raw size, base64, is ~4 MB).
        let big = Size::new(1280, 800);
        assert!(max_base64_len(big) > 4 * (1280 * 800 * 3 + 800) / 3);
        assert!(max_base64_len(big) < limits::MAX_REPLY_BYTES as u64);
    }

    /// A 1x1 PNG (under 100 bytes) whose IHDR claims 60000x60000, 10.8 GB
    /// of RGB.
    fn huge() -> Vec<u8> {
        lying(1, 1, 60_000, 60_000)
    }

    #[test]
    fn a_tiny_png_claiming_60000x60000_is_refused_before_allocation() {
        let b = huge();
        assert!(b.len() < 100, "{}", b.len());
        // Control: what an unlimited decoder would size its buffer to.
        let reader = png::Decoder::new(std::io::Cursor::new(&b[..]))
            .read_info()
            .unwrap();
        assert_eq!(reader.output_buffer_size(), Some(60_000 * 60_000 * 3));
        // The checked decoders refuse on the header.
        assert_eq!(
            decode_png(&b, SCREEN),
            Err(DecodeError::WrongSize {
                found: Size::new(60_000, 60_000),
                expected: SCREEN
            })
        );
        assert!(matches!(
            decode_png_within(&b, MAX_SIZE),
            Err(DecodeError::TooLarge { .. })
        ));
        // And the png crate's limits, set for the expected width, refuse
        // the header's row buffer (180 kB) before it is allocated.
        assert!(matches!(
            limited_reader(&b, SCREEN.width),
            Err(DecodeError::Limits)
        ));
        // As a reply it never gets that far.
        let s = shot(&b, ScaleMap::identity(SCREEN));
        let e = check_screenshot(&s).unwrap_err();
        assert!(e.contains("the image is 60000x60000"), "{e}");
    }

    #[test]
    fn decoding_allocates_only_rows_that_arrive() {
        // The header says 2048x2048 (12 MB); the data holds 2 rows.
        let b = lying(2048, 2, 2048, 2048);
        let e = decode_png_within(&b, MAX_SIZE).unwrap_err();
        assert!(matches!(e, DecodeError::Damaged(_)), "{e:?}");
        let mut rgb = Vec::new();
        assert!(decode_into(&b, Size::new(2048, 2048), &mut rgb).is_err());
        assert_eq!(rgb.len(), 2 * 2048 * 3);
        assert!(rgb.capacity() <= 2 * 2048 * 3, "{}", rgb.capacity());
        // Rows grow the buffer geometrically, capped at the image size.
        let img = decode_png(&png(300, 200), Size::new(300, 200)).unwrap();
        assert_eq!(img.rgb.capacity(), 300 * 200 * 3);
    }
}
