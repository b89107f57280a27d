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

fn jpeg(w: u16, h: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let rgb = vec![90u8; usize::from(w) * usize::from(h) * 3];
    sandtop_imaging::jpeg_rgb(&mut out, &rgb, (w.into(), h.into()), 70).unwrap();
    out
}

#[test]
fn jpeg_size_reads_the_frame_header_and_refuses_what_is_not_jpeg() {
    assert_eq!(jpeg_size(&jpeg(321, 123)), Some((321, 123)));
    assert_eq!(jpeg_size(&png(10, 10)), None);
    assert_eq!(jpeg_size(b"\xff\xd8"), None);
    // A marker length pointing past the end.
    assert_eq!(jpeg_size(b"\xff\xd8\xff\xe0\xff\xff\x00"), None);
    // Truncated before the SOF's size fields.
    let j = jpeg(40, 30);
    let sof = j.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
    assert_eq!(jpeg_size(&j[..sof + 6]), None);
}

#[test]
fn a_frame_must_be_the_size_its_map_and_header_say() {
    use base64::Engine as _;
    use sandtop_protocol::frame::{FrameFormat, FrameImage};
    let screen = Size::new(640, 400);
    let map = ScaleMap::fit(
        screen,
        None,
        Some(Size::new(320, 200)),
        sandtop_protocol::Fit::Stretch,
    )
    .unwrap();
    let frame = |bytes: &[u8], w, h| FrameImage {
        format: FrameFormat::Jpeg,
        width: w,
        height: h,
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
        scale_map: map,
        capture_ms: 0.0,
        encode_ms: 0.0,
    };
    assert!(check_frame(&frame(&jpeg(320, 200), 320, 200), screen).is_ok());
    // The header states another size.
    let e = check_frame(&frame(&jpeg(300, 200), 320, 200), screen).unwrap_err();
    assert!(e.contains("300x200"), "{e}");
    // The declared size disagrees with the map.
    assert!(check_frame(&frame(&jpeg(100, 100), 100, 100), screen).is_err());
    // Another screen than the reply's.
    assert!(check_frame(&frame(&jpeg(320, 200), 320, 200), Size::new(1280, 800)).is_err());
    // PNG bytes declared as JPEG.
    assert!(check_frame(&frame(&png(320, 200), 320, 200), screen).is_err());
}

/// A real JPEG screenshot as the daemon writes it: `w` x `h`, baseline,
/// quality 85, from BGRX.
fn jpeg_q85(w: u32, h: u32) -> Vec<u8> {
    let bgrx: Vec<u8> = (0..w * h * 4).map(|i| (i % 241) as u8).collect();
    let mut out = Vec::new();
    sandtop_imaging::jpeg(
        &mut out,
        sandtop_imaging::Layout::Bgrx,
        &bgrx,
        (w, h),
        ImageFormat::JPEG_QUALITY,
    )
    .unwrap();
    out
}

/// Where `b`'s first SOF0 segment starts (its 0xff).
fn sof0(b: &[u8]) -> usize {
    b.windows(2).position(|w| w == [0xff, 0xc0]).unwrap()
}

/// `jpeg_q85(w, h)` with its frame header claiming `cw` x `ch`.
fn lying_jpeg(w: u32, h: u32, cw: u16, ch: u16) -> Vec<u8> {
    let mut b = jpeg_q85(w, h);
    let i = sof0(&b);
    b[i + 5..i + 7].copy_from_slice(&ch.to_be_bytes());
    b[i + 7..i + 9].copy_from_slice(&cw.to_be_bytes());
    b
}

fn jpeg_shot(bytes: &[u8], map: ScaleMap) -> Screenshot {
    Screenshot {
        format: ImageFormat::Jpeg,
        ..shot(bytes, map)
    }
}

#[test]
fn a_real_jpeg_screenshot_passes_and_decodes_at_its_size() {
    let map = ScaleMap::identity(Size::new(64, 40));
    let s = jpeg_shot(&jpeg_q85(64, 40), map);
    assert!(check_screenshot(&s).is_ok());
    let img = decode_screenshot(&s).unwrap();
    assert_eq!(
        (img.width, img.height, img.rgb.len()),
        (64, 40, 64 * 40 * 3)
    );
    // Asked as JPEG: accepted; asked as PNG: refused.
    let asked = ScreenshotOptions {
        format: ImageFormat::Jpeg,
        ..ScreenshotOptions::default()
    };
    let s = jpeg_shot(&jpeg_q85(1280, 800), ScaleMap::identity(SCREEN));
    assert!(check_reply(&s, &asked, None).is_ok());
    let e = check_reply(&s, &ScreenshotOptions::default(), None).unwrap_err();
    assert!(e.contains("Png screenshot was asked for"), "{e}");
    // PNG bytes declared as JPEG.
    let e = check_screenshot(&jpeg_shot(&png(64, 40), map)).unwrap_err();
    assert!(e.contains("not a Jpeg image"), "{e}");
}

#[test]
fn a_jpeg_frame_header_lying_about_the_size_is_refused_before_decoding() {
    let size = Size::new(64, 40);
    let b = lying_jpeg(64, 40, 64, 41);
    let e = check_screenshot(&jpeg_shot(&b, ScaleMap::identity(size))).unwrap_err();
    assert!(e.contains("the image is 64x41"), "{e}");
    let e = decode_jpeg(&b, size).unwrap_err();
    assert!(e.contains("the image is 64x41, 64x40 was expected"), "{e}");
    // A header that agrees with the declared size, over the scan of a
    // smaller image: the decoder's output is the checked size, never
    // more (the missing blocks are an error or left blank).
    let b = lying_jpeg(64, 40, 64, 80);
    match decode_jpeg(&b, Size::new(64, 80)) {
        Ok(img) => assert_eq!(img.rgb.len(), 64 * 80 * 3),
        Err(e) => assert!(e.contains("damaged"), "{e}"),
    }
}

#[test]
fn a_jpeg_of_another_kind_is_refused_from_its_frame_header() {
    let size = Size::new(64, 40);
    let map = ScaleMap::identity(size);
    // (what is patched in the SOF segment, the byte, what is said)
    for (what, offset, byte, said) in [
        ("progressive (SOF2)", 1, 0xc2, "SOF 0xc2"),
        ("extended sequential (SOF1)", 1, 0xc1, "SOF 0xc1"),
        ("12-bit", 4, 12, "12 bits"),
        ("one component (grey)", 9, 1, "1 components"),
    ] {
        let mut b = jpeg_q85(64, 40);
        let i = sof0(&b);
        b[i + offset] = byte;
        let e = check_screenshot(&jpeg_shot(&b, map)).unwrap_err();
        assert!(
            e.contains("not baseline 8-bit YCbCr") && e.contains(said),
            "{what}: {e}"
        );
        let e = decode_jpeg(&b, size).unwrap_err();
        assert!(e.contains(said), "{what}: {e}");
    }
    // No frame header before the scan: not a JPEG of any size.
    assert_eq!(jpeg_size(b"\xff\xd8\xff\xda\x00\x02"), None);
}

#[test]
fn a_tiny_jpeg_claiming_60000x60000_is_refused_before_allocation() {
    let b = lying_jpeg(8, 8, 60_000, 60_000);
    assert!(b.len() < 1000, "{}", b.len());
    // Control: an unlimited decoder believes the header (10.8 GB of RGB).
    let mut unlimited = jpeg_decoder::Decoder::new(&b[..]);
    unlimited.read_info().unwrap();
    let info = unlimited.info().unwrap();
    assert_eq!((info.width, info.height), (60_000, 60_000));
    // The checked decoder compares the header with the size expected.
    let e = decode_jpeg(&b, SCREEN).unwrap_err();
    assert!(e.contains("the image is 60000x60000"), "{e}");
    let e = decode_jpeg(&b, Size::new(60_000, 60_000)).unwrap_err();
    assert!(e.contains("larger than"), "{e}");
    // As a reply it never gets that far.
    let e = check_screenshot(&jpeg_shot(&b, ScaleMap::identity(SCREEN))).unwrap_err();
    assert!(e.contains("the image is 60000x60000"), "{e}");
}
