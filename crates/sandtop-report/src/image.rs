//! Screenshots of a run folder as small JPEG `data:` URIs.
//!
//! The files are read as untrusted: a screenshot named by an observation
//! is checked against its ScaleMap's image size before it is decoded (the
//! same [`sandtop_channel::image_check`] path the loop uses), and any other image
//! (the marked screenshots of an approval) only up to the largest size a
//! screenshot can have.

use std::path::Path;

use base64::Engine as _;
use sandtop_imaging::Layout;
use sandtop_protocol::{ImageFormat, ScaleMap, Screenshot};

use sandtop_channel::image_check::{self, Rgb8};

/// The widest image embedded; wider screenshots are scaled down.
pub const MAX_WIDTH: u32 = 1024;
/// JPEG quality: text on a 1024-pixel-wide desktop stays readable.
pub const QUALITY: u8 = 70;

/// An embedded image.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// `data:image/jpeg;base64,...`
    pub uri: String,
    /// The size it is shown at (after scaling down).
    pub width: u32,
    pub height: u32,
    /// The size of the file it was made from (the model's coordinates).
    pub source_width: u32,
    pub source_height: u32,
}

/// A file name the trajectory gave: one plain name inside the run folder.
pub fn checked_name(name: &str) -> Result<&str, String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') || name.contains('\0') {
        return Err(format!("`{name}` is not a file of the run folder"));
    }
    Ok(name)
}

/// Decodes the screenshot `name` of `dir` the model saw with `map`.
pub fn observation(dir: &Path, name: &str, map: &ScaleMap) -> Result<Embedded, String> {
    let bytes = read(dir, name)?;
    let format = if name.ends_with(".webp") {
        ImageFormat::Webp
    } else if name.ends_with(".jpg") {
        ImageFormat::Jpeg
    } else {
        ImageFormat::Png
    };
    let shot = Screenshot {
        format,
        width: map.image.width,
        height: map.image.height,
        data: base64::engine::general_purpose::STANDARD.encode(&bytes),
        scale_map: *map,
    };
    let img = image_check::decode_screenshot(&shot).map_err(|e| format!("{name}: {e}"))?;
    embed(&img)
}

/// Decodes a PNG of the run folder that has no ScaleMap (a marked
/// screenshot).
pub fn png_file(dir: &Path, name: &str) -> Result<Embedded, String> {
    let bytes = read(dir, name)?;
    let img = image_check::decode_png_within(&bytes, image_check::MAX_SIZE)
        .map_err(|e| format!("{name}: {e}"))?;
    embed(&img)
}

/// A plain name of `dir`, read only if it is a regular file (never
/// through a symbolic link: [`super::files`]).
fn read(dir: &Path, name: &str) -> Result<Vec<u8>, String> {
    let name = checked_name(name)?;
    super::files::read_regular(dir, name).map_err(|e| e.sentence())
}

/// Scales `img` down to at most [`MAX_WIDTH`] wide and encodes it.
pub fn embed(img: &Rgb8) -> Result<Embedded, String> {
    let (w, h) = (img.width, img.height);
    let (tw, th) = fit(w, h);
    let mut scaled = Vec::new();
    let pixels = if (tw, th) == (w, h) {
        &img.rgb
    } else {
        // Only ever smaller (`fit`): Hamming.
        sandtop_imaging::Scaler::new()
            .scale(Layout::Rgb, &img.rgb, (w, h), &mut scaled, (tw, th))
            .map_err(|e| e.to_string())?;
        &scaled
    };
    let mut jpeg = Vec::new();
    sandtop_imaging::jpeg_rgb(&mut jpeg, pixels, (tw, th), QUALITY).map_err(|e| e.to_string())?;
    Ok(Embedded {
        uri: format!(
            "data:image/jpeg;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(jpeg)
        ),
        width: tw,
        height: th,
        source_width: w,
        source_height: h,
    })
}

/// The size shown: at most [`MAX_WIDTH`] wide, the aspect kept.
fn fit(w: u32, h: u32) -> (u32, u32) {
    if w <= MAX_WIDTH {
        return (w, h);
    }
    let th = (u64::from(h) * u64::from(MAX_WIDTH) / u64::from(w)).max(1) as u32;
    (MAX_WIDTH, th)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_images_are_scaled_down_with_their_aspect() {
        assert_eq!(fit(1280, 800), (1024, 640));
        assert_eq!(fit(800, 600), (800, 600));
        assert_eq!(fit(4000, 1), (1024, 1));
        let img = Rgb8 {
            width: 1280,
            height: 800,
            rgb: vec![90; 1280 * 800 * 3],
        };
        let e = embed(&img).unwrap();
        assert_eq!((e.width, e.height), (1024, 640));
        assert_eq!((e.source_width, e.source_height), (1280, 800));
        assert!(
            e.uri.starts_with("data:image/jpeg;base64,/9j/"),
            "{}",
            &e.uri[..40]
        );
    }

    #[test]
    fn names_outside_the_run_folder_are_refused() {
        for bad in ["../x.png", "/etc/passwd", ".hidden", "a/b.png", ""] {
            assert!(checked_name(bad).is_err(), "{bad}");
        }
        assert!(checked_name("step-001-call_1.png").is_ok());
    }
}
