//! Property tests of the one coordinate mapping (ScaleMap::to_screen).

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use sandtop_protocol::{Fit, Rect, ScaleMap, Size};

/// Screen sizes at the usual scales (screen px per image px):
/// 1, 1.5, 2, 2.5, with the image fixed at 1280x720 or 800x600.
fn named_scales() -> Vec<ScaleMap> {
    let mut maps = Vec::new();
    for (num, den) in [(1u32, 1u32), (3, 2), (2, 1), (5, 2)] {
        for image in [
            Size::new(1280, 720),
            Size::new(800, 600),
            Size::new(333, 211),
        ] {
            let screen = Size::new(image.width * num / den, image.height * num / den);
            let m = ScaleMap::fit(screen, None, Some(image), Fit::Stretch).unwrap();
            maps.push(m);
        }
    }
    maps
}

fn arb_map() -> impl Strategy<Value = ScaleMap> {
    (
        64u32..4000,
        64u32..3000,
        1u32..4000,
        1u32..3000,
        any::<bool>(),
        0u32..32,
        0u32..32,
    )
        .prop_map(|(sw, sh, iw, ih, crop, cx, cy)| {
            let screen = Size::new(sw, sh);
            let region = crop.then(|| Rect {
                x: cx,
                y: cy,
                width: sw - cx,
                height: sh - cy,
            });
            ScaleMap::fit(screen, region, Some(Size::new(iw, ih)), Fit::Stretch).unwrap()
        })
}

fn check_map(m: &ScaleMap, x: u32, y: u32) {
    let (sx, sy) = m.to_screen(i64::from(x), i64::from(y)).unwrap();
    // Every model pixel maps inside the captured region, hence the screen.
    assert!(
        sx >= m.region.x && sx < m.region.x + m.region.width,
        "{m:?} {x} -> {sx}"
    );
    assert!(
        sy >= m.region.y && sy < m.region.y + m.region.height,
        "{m:?} {y} -> {sy}"
    );
    assert!(sx < m.screen.width && sy < m.screen.height);
    // Model -> screen -> model comes back to the same pixel when the image
    // is not larger than the region. When it is larger (zoomed in), several
    // model pixels share one screen pixel; the round trip then lands on the
    // same screen pixel.
    let (bx, by) = m.to_image(sx, sy).unwrap();
    if m.image.width <= m.region.width {
        assert_eq!(bx, x, "{m:?} x {x} -> {sx} -> {bx}");
    }
    if m.image.height <= m.region.height {
        assert_eq!(by, y, "{m:?} y {y} -> {sy} -> {by}");
    }
    let (sx2, sy2) = m.to_screen(i64::from(bx), i64::from(by)).unwrap();
    assert!(
        sx2.abs_diff(sx) <= 1 && sy2.abs_diff(sy) <= 1,
        "{m:?} ({sx},{sy}) -> ({sx2},{sy2})"
    );
}

#[test]
fn named_scales_every_pixel_inside_and_round_trips() {
    for m in named_scales() {
        for x in 0..m.image.width {
            check_map(&m, x, m.image.height / 2);
        }
        for y in 0..m.image.height {
            check_map(&m, m.image.width / 2, y);
        }
        // Screen -> model -> screen stays within one screen pixel for
        // scales up to 3.
        for sx in 0..m.screen.width {
            let (ix, iy) = m.to_image(sx, 0).unwrap();
            let (bx, _) = m.to_screen(i64::from(ix), i64::from(iy)).unwrap();
            assert!(
                bx.abs_diff(sx) <= 1,
                "{m:?}: screen {sx} -> image {ix} -> screen {bx}"
            );
        }
    }
}

proptest! {
    #[test]
    fn any_map_keeps_model_pixels_inside(m in arb_map(), fx in 0.0f64..1.0, fy in 0.0f64..1.0) {
        let x = ((f64::from(m.image.width) * fx) as u32).min(m.image.width - 1);
        let y = ((f64::from(m.image.height) * fy) as u32).min(m.image.height - 1);
        check_map(&m, x, y);
        check_map(&m, 0, 0);
        check_map(&m, m.image.width - 1, m.image.height - 1);
    }

    #[test]
    fn non_uniform_scales_round_trip(sw in 100u32..3000, sh in 100u32..3000, iw in 50u32..2000, ih in 50u32..2000) {
        let m = ScaleMap::fit(Size::new(sw, sh), None, Some(Size::new(iw, ih)), Fit::Stretch).unwrap();
        for (x, y) in [(0, 0), (iw - 1, ih - 1), (iw / 2, ih / 3)] {
            check_map(&m, x, y);
        }
    }

    #[test]
    fn out_of_model_space_is_always_refused(m in arb_map(), dx in 0i64..10_000, neg in any::<bool>()) {
        let x = if neg { -1 - dx } else { i64::from(m.image.width) + dx };
        prop_assert!(m.to_screen(x, 0).is_err());
        prop_assert!(m.to_screen(0, x.min(-1)).is_err());
    }

    #[test]
    fn contain_never_exceeds_the_target(sw in 1u32..8000, sh in 1u32..8000, tw in 1u32..8000, th in 1u32..8000) {
        let m = ScaleMap::fit(Size::new(sw, sh), None, Some(Size::new(tw, th)), Fit::Contain).unwrap();
        prop_assert!(m.image.width <= tw && m.image.height <= th);
        prop_assert!(m.image.width >= 1 && m.image.height >= 1);
        prop_assert!(m.image.width == tw || m.image.height == th);
    }
}
