//! Whether the screen changed around a call's targets between the
//! screenshot the operator was shown at approval and a fresh capture
//! taken before the approved actions run (docs/contract.md rule 12).
//!
//! A region is the square of [`RADIUS`] pixels around each point an
//! action touches, in screenshot pixels; a call that touches no point, or
//! that types or presses keys (they go wherever the focus is), is bound
//! to the whole screen as well. A region has
//! changed when more than [`CHANGED_SHARE`] of its pixels differ by more
//! than [`PIXEL_DELTA`] in some channel: a blinking caret or a ticking
//! clock stays below that, a window that moved or opened does not.

use sandtop_protocol::{Action, Rect, Size};
pub use sandtop_runfolder::parts::Changed;

use sandtop_channel::image_check::Rgb8;

/// Half the side of the square around a target, in screenshot pixels.
pub const RADIUS: u32 = 32;
/// A channel difference above this counts as a changed pixel.
pub const PIXEL_DELTA: u8 = 32;
/// A region whose changed pixels exceed this share has changed.
pub const CHANGED_SHARE: f64 = 0.02;

/// The regions a call's approval is bound to, in an image of `size`.
pub fn regions(actions: &[Action], size: Size) -> Vec<Rect> {
    let full = Rect::full(size);
    let mut out: Vec<Rect> = Vec::new();
    for a in actions {
        for p in a.points() {
            let Some(r) = around(p.x, p.y, size) else {
                continue;
            };
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    // Keys go wherever the focus is, which a window that came up meanwhile
    // can take: a call that types or presses keys is bound to the whole
    // screen as well.
    let keyboard = actions.iter().any(|a| {
        matches!(
            a,
            Action::Type { .. } | Action::Keypress { .. } | Action::HoldKey { .. }
        )
    });
    if (out.is_empty() || keyboard) && !out.contains(&full) {
        out.push(full);
    }
    out
}

/// The square around (x, y), clipped to the image; `None` when the point
/// is off the image (preflight refuses such actions anyway).
fn around(x: i64, y: i64, size: Size) -> Option<Rect> {
    if x < 0 || y < 0 || x >= i64::from(size.width) || y >= i64::from(size.height) {
        return None;
    }
    let r = i64::from(RADIUS);
    let x0 = (x - r).max(0);
    let y0 = (y - r).max(0);
    let x1 = (x + r).min(i64::from(size.width));
    let y1 = (y + r).min(i64::from(size.height));
    Some(Rect {
        x: x0 as u32,
        y: y0 as u32,
        width: (x1 - x0) as u32,
        height: (y1 - y0) as u32,
    })
}

/// The regions of `regions` that changed from `before` to `after`. Images
/// of different sizes changed everywhere.
pub fn changed(before: &Rgb8, after: &Rgb8, regions: &[Rect]) -> Vec<Changed> {
    if before.width != after.width || before.height != after.height {
        return regions
            .iter()
            .map(|&region| Changed { region, share: 1.0 })
            .collect();
    }
    let w = before.width as usize;
    let mut out = Vec::new();
    for &region in regions {
        let total = region.width as usize * region.height as usize;
        if total == 0 {
            continue;
        }
        let mut differ = 0usize;
        for y in region.y as usize..(region.y + region.height) as usize {
            let start = (y * w + region.x as usize) * 3;
            let end = start + region.width as usize * 3;
            let (a, b) = (&before.rgb[start..end], &after.rgb[start..end]);
            differ += a
                .chunks_exact(3)
                .zip(b.chunks_exact(3))
                .filter(|(p, q)| {
                    p.iter()
                        .zip(q.iter())
                        .any(|(u, v)| u.abs_diff(*v) > PIXEL_DELTA)
                })
                .count();
        }
        let share = differ as f64 / total as f64;
        if share > CHANGED_SHARE {
            out.push(Changed { region, share });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandtop_protocol::{Button, Coord};

    fn image(w: u32, h: u32, v: u8) -> Rgb8 {
        Rgb8 {
            width: w,
            height: h,
            rgb: vec![v; (w * h * 3) as usize],
        }
    }

    fn paint(img: &mut Rgb8, r: Rect, c: [u8; 3]) {
        for y in r.y..r.y + r.height {
            for x in r.x..r.x + r.width {
                let i = ((y * img.width + x) * 3) as usize;
                img.rgb[i..i + 3].copy_from_slice(&c);
            }
        }
    }

    fn click(x: i64, y: i64) -> Action {
        Action::Click {
            x,
            y,
            button: Button::Left,
            keys: None,
        }
    }

    #[test]
    fn a_target_is_bound_to_the_square_around_it_clipped_to_the_image() {
        let size = Size::new(320, 200);
        assert_eq!(
            regions(&[click(100, 100)], size),
            vec![Rect {
                x: 68,
                y: 68,
                width: 64,
                height: 64
            }]
        );
        assert_eq!(
            regions(&[click(5, 190)], size),
            vec![Rect {
                x: 0,
                y: 158,
                width: 37,
                height: 42
            }]
        );
        // A drag binds every point of its path; duplicates once.
        let drag = Action::Drag {
            path: vec![
                Coord { x: 10, y: 10 },
                Coord { x: 200, y: 150 },
                Coord { x: 10, y: 10 },
            ],
            keys: None,
        };
        assert_eq!(regions(&[drag], size).len(), 2);
    }

    #[test]
    fn actions_without_a_point_are_bound_to_the_whole_screen() {
        let size = Size::new(320, 200);
        let typing = Action::Type {
            text: "hello".into(),
        };
        assert_eq!(
            regions(std::slice::from_ref(&typing), size),
            vec![Rect::full(size)]
        );
        // A click then typing: the square and the whole screen.
        let both = regions(&[click(5, 5), typing], size);
        assert_eq!(both.len(), 2);
        assert!(both.contains(&Rect::full(size)));
        // A click alone: the square only.
        assert_eq!(regions(&[click(5, 5)], size).len(), 1);
    }

    #[test]
    fn a_window_that_moved_over_the_target_is_a_change_a_caret_is_not() {
        let before = image(320, 200, 40);
        let targets = regions(&[click(100, 100)], Size::new(320, 200));
        // A caret: 1 x 16 pixels of 4096.
        let mut caret = before.clone();
        paint(
            &mut caret,
            Rect {
                x: 100,
                y: 92,
                width: 1,
                height: 16,
            },
            [255, 255, 255],
        );
        assert!(changed(&before, &caret, &targets).is_empty());
        // Noise below the pixel threshold everywhere: no change either.
        let faint = image(320, 200, 40 + PIXEL_DELTA);
        assert!(changed(&before, &faint, &targets).is_empty());
        // A window edge that now covers a quarter of the square.
        let mut moved = before.clone();
        paint(
            &mut moved,
            Rect {
                x: 100,
                y: 100,
                width: 40,
                height: 40,
            },
            [240, 240, 240],
        );
        let c = changed(&before, &moved, &targets);
        assert_eq!(c.len(), 1);
        assert!((c[0].share - 32.0 * 32.0 / 4096.0).abs() < 1e-9, "{c:?}");
        // Elsewhere on the screen, the same window changes nothing bound.
        let mut far = before.clone();
        paint(
            &mut far,
            Rect {
                x: 200,
                y: 0,
                width: 100,
                height: 60,
            },
            [240, 240, 240],
        );
        assert!(changed(&before, &far, &targets).is_empty());
    }

    #[test]
    fn images_of_different_sizes_changed_everywhere() {
        let targets = regions(&[click(10, 10)], Size::new(320, 200));
        let c = changed(&image(320, 200, 0), &image(300, 200, 0), &targets);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].share, 1.0);
    }
}
