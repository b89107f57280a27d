//! The mapping between a screenshot the model saw and the screen.
//!
//! A screenshot is a region of the screen (the whole screen unless it was
//! cropped) scaled to an image size. The model's coordinates are pixels of
//! that image. [`ScaleMap::to_screen`] is the one function that maps them
//! back: scale first, then add the crop offset (docs/contract.md rule 4). The
//! bounds check happens in model space, before any arithmetic, so a point
//! the model could not have seen is refused rather than clamped.
//!
//! All arithmetic is on integers (exact rationals), so the same inputs map
//! the same way on every machine.

use serde::{Deserialize, Serialize};

use crate::limits;

/// A width and height in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Size {
    pub width: u32,
    pub height: u32,
}

impl Size {
    pub const fn new(width: u32, height: u32) -> Size {
        Size { width, height }
    }

    /// Parses `WxH` (e.g. `1280x720`), as the CLIs take it.
    pub fn parse(s: &str) -> Result<Size, crate::Invalid> {
        let (w, h) = s
            .split_once(['x', 'X'])
            .ok_or_else(|| format!("`{s}` is not WIDTHxHEIGHT (e.g. 1280x720)"))?;
        let width: u32 = w
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: width `{w}` is not a number"))?;
        let height: u32 = h
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: height `{h}` is not a number"))?;
        let size = Size { width, height };
        size.check()?;
        Ok(size)
    }

    /// Both sides within `1..=MAX_DIMENSION`.
    pub fn check(&self) -> Result<(), crate::Invalid> {
        let ok = |v: u32| (1..=limits::MAX_DIMENSION).contains(&v);
        if ok(self.width) && ok(self.height) {
            Ok(())
        } else {
            Err(crate::invalid!(
                "size {}x{} is outside 1..={} per side",
                self.width,
                self.height,
                limits::MAX_DIMENSION
            ))
        }
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// A rectangle of the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

impl Rect {
    pub fn full(size: Size) -> Rect {
        Rect {
            x: 0,
            y: 0,
            width: size.width,
            height: size.height,
        }
    }

    pub fn size(&self) -> Size {
        Size::new(self.width, self.height)
    }
}

/// How a region is fitted into a requested size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    /// Keep the aspect ratio; the image fits inside the requested size.
    #[default]
    Contain,
    /// Exactly the requested size; the scale may differ per axis.
    Stretch,
}

/// Why a ScaleMap could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleError(pub String);

impl std::fmt::Display for ScaleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScaleError {}

/// A model coordinate outside the image it refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds {
    pub x: i64,
    pub y: i64,
    pub image: Size,
}

impl std::fmt::Display for OutOfBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "coordinate ({}, {}) is outside the {} screenshot",
            self.x, self.y, self.image
        )
    }
}

/// The mapping that came with one screenshot: which screen region it shows
/// and at what image size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleMap {
    /// The whole screen at capture time.
    pub screen: Size,
    /// The captured part of the screen (the whole screen unless cropped).
    pub region: Rect,
    /// The size of the image the model sees.
    pub image: Size,
}

impl ScaleMap {
    /// The identity map of a whole screen.
    pub fn identity(screen: Size) -> ScaleMap {
        ScaleMap {
            screen,
            region: Rect::full(screen),
            image: screen,
        }
    }

    /// Builds the map for a capture of `region` (default: the whole screen)
    /// fitted into `target` (default: the region's own size).
    pub fn fit(
        screen: Size,
        region: Option<Rect>,
        target: Option<Size>,
        fit: Fit,
    ) -> Result<ScaleMap, ScaleError> {
        screen.check().map_err(|e| ScaleError(e.into()))?;
        let region = region.unwrap_or_else(|| Rect::full(screen));
        if region.width == 0 || region.height == 0 {
            return Err(ScaleError("the region is empty".into()));
        }
        let inside = u64::from(region.x) + u64::from(region.width) <= u64::from(screen.width)
            && u64::from(region.y) + u64::from(region.height) <= u64::from(screen.height);
        if !inside {
            return Err(ScaleError(format!(
                "region {}x{}+{}+{} is not inside the {} screen",
                region.width, region.height, region.x, region.y, screen
            )));
        }
        let image = match target {
            None => region.size(),
            Some(t) => {
                t.check().map_err(|e| ScaleError(e.into()))?;
                match fit {
                    Fit::Stretch => t,
                    Fit::Contain => contain(region.size(), t),
                }
            }
        };
        Ok(ScaleMap {
            screen,
            region,
            image,
        })
    }

    /// Checks that a map received over the wire is self-consistent.
    pub fn check(&self) -> Result<(), ScaleError> {
        let again = ScaleMap::fit(
            self.screen,
            Some(self.region),
            Some(self.image),
            Fit::Stretch,
        )?;
        debug_assert_eq!(&again, self);
        Ok(())
    }

    /// Whether this map scales at all.
    pub fn is_identity(&self) -> bool {
        self.region == Rect::full(self.screen) && self.image == self.screen
    }

    /// Screen pixels per image pixel, per axis (informative; the mapping
    /// itself uses exact integer arithmetic).
    pub fn scale(&self) -> (f64, f64) {
        (
            f64::from(self.region.width) / f64::from(self.image.width),
            f64::from(self.region.height) / f64::from(self.image.height),
        )
    }

    /// THE mapping from a model (image) pixel to a screen pixel.
    ///
    /// 1. Bounds are checked in model space: `0 <= x < image.width`,
    ///    `0 <= y < image.height`.
    /// 2. Scale: the centre of image pixel `x` lies at
    ///    `(x + 1/2) * region.width / image.width` in the region; its floor
    ///    is always a pixel of the region.
    /// 3. Then add the crop offset.
    pub fn to_screen(&self, x: i64, y: i64) -> Result<(u32, u32), OutOfBounds> {
        let inside = |v: i64, n: u32| v >= 0 && v < i64::from(n);
        if !inside(x, self.image.width) || !inside(y, self.image.height) {
            return Err(OutOfBounds {
                x,
                y,
                image: self.image,
            });
        }
        // Both values are in range, so the casts are exact.
        let axis = |v: i64, image: u32, region: u32, offset: u32| -> u32 {
            let v = v as u64;
            let scaled = ((2 * v + 1) * u64::from(region)) / (2 * u64::from(image));
            // scaled < region because v < image; the sum fits in u32
            // because the region lies inside the screen.
            offset + scaled as u32
        };
        Ok((
            axis(x, self.image.width, self.region.width, self.region.x),
            axis(y, self.image.height, self.region.height, self.region.y),
        ))
    }

    /// The inverse: the image pixel that shows a screen pixel, or `None`
    /// when the screen pixel is outside the captured region. Used to mark
    /// targets on a screenshot and by tests.
    pub fn to_image(&self, sx: u32, sy: u32) -> Option<(u32, u32)> {
        let axis = |s: u32, offset: u32, region: u32, image: u32| -> Option<u32> {
            let rel = s.checked_sub(offset)?;
            if rel >= region {
                return None;
            }
            // The centre of the screen pixel, as in `to_screen`.
            Some((((2 * u64::from(rel) + 1) * u64::from(image)) / (2 * u64::from(region))) as u32)
        };
        Some((
            axis(sx, self.region.x, self.region.width, self.image.width)?,
            axis(sy, self.region.y, self.region.height, self.image.height)?,
        ))
    }
}

/// The largest size with `src`'s aspect ratio that fits in `target`
/// (rounded to the nearest pixel, at least 1).
fn contain(src: Size, target: Size) -> Size {
    let (sw, sh) = (u64::from(src.width), u64::from(src.height));
    let (tw, th) = (u64::from(target.width), u64::from(target.height));
    // Compare tw/sw with th/sh without floating point.
    if tw * sh <= th * sw {
        // Width-limited.
        let h = ((sh * tw * 2 + sw) / (2 * sw)).clamp(1, th);
        Size::new(target.width, h as u32)
    } else {
        let w = ((sw * th * 2 + sh) / (2 * sh)).clamp(1, tw);
        Size::new(w as u32, target.height)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contain_keeps_aspect_ratio() {
        let m = ScaleMap::fit(
            Size::new(1920, 1080),
            None,
            Some(Size::new(1024, 768)),
            Fit::Contain,
        )
        .unwrap();
        assert_eq!(m.image, Size::new(1024, 576));
        let m = ScaleMap::fit(
            Size::new(1920, 1080),
            None,
            Some(Size::new(1280, 720)),
            Fit::Contain,
        )
        .unwrap();
        assert_eq!(m.image, Size::new(1280, 720));
    }

    #[test]
    fn half_scale_maps_to_pixel_centres() {
        let m = ScaleMap::fit(
            Size::new(1600, 1200),
            None,
            Some(Size::new(800, 600)),
            Fit::Contain,
        )
        .unwrap();
        assert_eq!(m.to_screen(0, 0).unwrap(), (1, 1));
        assert_eq!(m.to_screen(799, 599).unwrap(), (1599, 1199));
        assert_eq!(m.to_screen(400, 300).unwrap(), (801, 601));
    }

    #[test]
    fn crop_offset_is_added_after_scaling() {
        let region = Rect {
            x: 100,
            y: 50,
            width: 400,
            height: 200,
        };
        let m = ScaleMap::fit(
            Size::new(1920, 1080),
            Some(region),
            Some(Size::new(200, 100)),
            Fit::Contain,
        )
        .unwrap();
        assert_eq!(m.to_screen(0, 0).unwrap(), (101, 51));
        assert_eq!(m.to_screen(199, 99).unwrap(), (499, 249));
    }

    #[test]
    fn bounds_are_checked_in_model_space() {
        let m = ScaleMap::fit(
            Size::new(1920, 1080),
            None,
            Some(Size::new(1280, 720)),
            Fit::Contain,
        )
        .unwrap();
        // (1300, 700) is a valid screen pixel but not a pixel of the image.
        assert!(m.to_screen(1300, 700).is_err());
        assert!(m.to_screen(-1, 0).is_err());
        assert!(m.to_screen(1279, 720).is_err());
        assert!(m.to_screen(1279, 719).is_ok());
    }

    #[test]
    fn region_outside_screen_is_refused() {
        let r = Rect {
            x: 1900,
            y: 0,
            width: 100,
            height: 10,
        };
        assert!(ScaleMap::fit(Size::new(1920, 1080), Some(r), None, Fit::Contain).is_err());
    }

    #[test]
    fn size_parse_errors_are_clear() {
        assert_eq!(Size::parse("1280x720").unwrap(), Size::new(1280, 720));
        assert!(
            Size::parse("1280")
                .unwrap_err()
                .to_string()
                .contains("WIDTHxHEIGHT")
        );
        assert!(Size::parse("0x720").is_err());
        assert!(
            Size::parse("axb")
                .unwrap_err()
                .to_string()
                .contains("not a number")
        );
    }
}
