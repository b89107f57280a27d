//! Screenshots from the daemon, checked before anything decodes them
//! (docs/contract.md rule 3a; docs/security.md L4).
//!
//! The daemon is untrusted: a reply of a few hundred bytes can claim any
//! size in its PNG header, and a decoder that sizes its output buffer from
//! that header allocates what the guest chose. So, in this order:
//!
//! 1. [`check_screenshot`]: the reply is self-consistent. Its ScaleMap is
//!    valid (every side within `1..=MAX_DIMENSION`), the declared size is
//!    the map's image size, the base64 text is no longer than an image of
//!    that size can take ([`max_encoded_bytes`]), and the image header
//!    (PNG IHDR, read by the png crate without any pixel data; WebP VP8L;
//!    the JPEG frame header) states that size — and, for a PNG, 8-bit RGB
//!    without interlacing, for a JPEG, baseline, 8-bit, three components:
//!    the only kinds the daemon writes.
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
//!    beyond the expected size. A JPEG ([`decode_jpeg`]) is decoded only
//!    once its frame header states the expected size, baseline and 8-bit
//!    YCbCr; the decoder's planes and output are sized from that header
//!    (about twice the size's RGB bytes at most) and its output is capped
//!    at the size's RGB bytes.
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
        ImageFormat::Jpeg => jpeg_size(&bytes),
    }
    .ok_or_else(|| format!("screenshot bytes are not a {:?} image", s.format))?;
    if (w, h) != (s.width, s.height) {
        return Err(format!(
            "screenshot declares {}x{} but the image is {w}x{h}",
            s.width, s.height
        ));
    }
    match s.format {
        ImageFormat::Png => {
            png_header(&bytes, size).map_err(|e| format!("screenshot PNG: {e}"))?;
        }
        ImageFormat::Jpeg => {
            jpeg_header(&bytes, size).map_err(|e| format!("screenshot JPEG: {e}"))?;
        }
        ImageFormat::Webp => {}
    }
    Ok(bytes)
}

/// Checks a live-view frame (`/v1/frame`) like a screenshot: its map
/// consistent with its size and the reply's screen, base64 within the
/// size's bound, and bytes whose header (JPEG SOF or PNG IHDR) states that
/// size; returns the encoded image.
pub fn check_frame(
    f: &sandtop_protocol::frame::FrameImage,
    screen: Size,
) -> Result<Vec<u8>, String> {
    use sandtop_protocol::frame::FrameFormat;
    f.scale_map
        .check()
        .map_err(|e| format!("inconsistent scale map: {e}"))?;
    if (f.width, f.height) != (f.scale_map.image.width, f.scale_map.image.height)
        || f.scale_map.screen != screen
    {
        return Err(format!(
            "a {}x{} frame of a {screen} screen with a map for {}",
            f.width,
            f.height,
            describe(&f.scale_map)
        ));
    }
    let size = Size::new(f.width, f.height);
    let most = max_base64_len(size);
    if f.data.len() as u64 > most {
        return Err(format!(
            "{} bytes of base64 for a {size} frame (at most {most})",
            f.data.len()
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&f.data)
        .map_err(|e| format!("frame is not base64: {e}"))?;
    let (w, h) = match f.format {
        FrameFormat::Jpeg => jpeg_size(&bytes),
        FrameFormat::Png => png_size(&bytes),
    }
    .ok_or_else(|| format!("frame bytes are not a {:?} image", f.format))?;
    if (w, h) != (f.width, f.height) {
        return Err(format!(
            "frame declares {}x{} but the image is {w}x{h}",
            f.width, f.height
        ));
    }
    Ok(bytes)
}

/// The size a JPEG's first frame header (SOFn) states: the markers are
/// walked by their lengths from the start, nothing is decoded.
pub fn jpeg_size(b: &[u8]) -> Option<(u32, u32)> {
    let f = jpeg_frame(b)?;
    Some((f.width, f.height))
}

/// A JPEG's first frame header (SOFn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct JpegFrame {
    /// The SOF marker's second byte: 0xc0 is baseline.
    marker: u8,
    precision: u8,
    width: u32,
    height: u32,
    components: u8,
}

/// The first frame header, found by walking the markers by their lengths
/// from the start (nothing is decoded); `None` for what is not a JPEG or
/// has no frame header before its first scan.
fn jpeg_frame(b: &[u8]) -> Option<JpegFrame> {
    if b.len() < 4 || b[0] != 0xff || b[1] != 0xd8 {
        return None;
    }
    let mut i = 2usize;
    while i + 4 <= b.len() {
        if b[i] != 0xff {
            return None;
        }
        let marker = b[i + 1];
        if marker == 0xff {
            // Fill byte.
            i += 1;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
        if len < 2 {
            return None;
        }
        let sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
        if sof {
            let h = u32::from(u16::from_be_bytes([*b.get(i + 5)?, *b.get(i + 6)?]));
            let w = u32::from(u16::from_be_bytes([*b.get(i + 7)?, *b.get(i + 8)?]));
            return Some(JpegFrame {
                marker,
                precision: *b.get(i + 4)?,
                width: w,
                height: h,
                components: *b.get(i + 9)?,
            });
        }
        if marker == 0xda || marker == 0xd9 {
            // Scan data or the end before any frame header.
            return None;
        }
        i += 2 + len;
    }
    None
}

/// Checks a JPEG's frame header states `size` and the only kind the
/// daemon writes: baseline (SOF0), 8-bit, three components (YCbCr).
fn jpeg_header(bytes: &[u8], size: Size) -> Result<(), String> {
    let f = jpeg_frame(bytes).ok_or("no frame header")?;
    let found = Size::new(f.width, f.height);
    if found != size {
        return Err(format!("the image is {found}, {size} was expected"));
    }
    if f.marker != 0xc0 || f.precision != 8 || f.components != 3 {
        return Err(format!(
            "not baseline 8-bit YCbCr (SOF 0x{:02x}, {} bits, {} components)",
            f.marker, f.precision, f.components
        ));
    }
    Ok(())
}

/// Decodes a baseline 8-bit YCbCr JPEG that must be exactly `expected`
/// (the size the request asked for, or a checked screenshot's declared
/// size): the frame header is checked first ([`jpeg_header`]), then the
/// decoder runs with its output capped at `expected`'s RGB bytes, and
/// what it found is compared again.
pub fn decode_jpeg(bytes: &[u8], expected: Size) -> Result<Rgb8, String> {
    if expected.check().is_err() {
        return Err(format!("a JPEG of {expected} is larger than {MAX_SIZE}"));
    }
    jpeg_header(bytes, expected)?;
    // Both sides are at most MAX_DIMENSION: no overflow.
    let total = expected.width as usize * expected.height as usize * 3;
    let mut dec = jpeg_decoder::Decoder::new(std::io::Cursor::new(bytes));
    dec.set_max_decoding_buffer_size(total);
    dec.read_info().map_err(|e| format!("damaged: {e}"))?;
    let info = dec.info().ok_or("no frame header")?;
    if (u32::from(info.width), u32::from(info.height)) != (expected.width, expected.height)
        || info.pixel_format != jpeg_decoder::PixelFormat::RGB24
        || info.coding_process != jpeg_decoder::CodingProcess::DctSequential
    {
        return Err(format!(
            "the decoder reads {}x{} {:?} {:?}, {expected} baseline RGB was expected",
            info.width, info.height, info.pixel_format, info.coding_process
        ));
    }
    let rgb = dec.decode().map_err(|e| format!("damaged: {e}"))?;
    if rgb.len() != total {
        return Err(format!("{} bytes of pixels, {total} expected", rgb.len()));
    }
    Ok(Rgb8 {
        width: expected.width,
        height: expected.height,
        rgb,
    })
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
/// size, PNG, WebP or JPEG.
pub fn decode_screenshot(s: &Screenshot) -> Result<Rgb8, String> {
    let bytes = check_screenshot(s)?;
    let size = Size::new(s.width, s.height);
    match s.format {
        ImageFormat::Png => decode_png(&bytes, size).map_err(|e| e.to_string()),
        ImageFormat::Webp => decode_webp(&bytes, size),
        ImageFormat::Jpeg => decode_jpeg(&bytes, size).map_err(|e| format!("screenshot JPEG: {e}")),
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
mod tests;
