//! When two screenshots show the same screen: a perceptual difference in
//! cells, with a stated threshold, ignoring given rectangles (the clock).
//!
//! Both images are cut into [`CELL`]x[`CELL`] pixel cells; a cell differs
//! when the mean absolute difference of its pixels (over R, G and B) is
//! over [`CELL_THRESHOLD`] levels of 255. Differing cells that touch (4
//! neighbours) form a region; a region of fewer than [`MIN_CELLS`] cells is
//! noise (a text caret, an antialiased edge) and does not count. Two
//! screens match when no region counts.

use sandtop_protocol::Rect;

use sandtop_channel::image_check::Rgb8;

/// A cell's side, in image pixels.
pub const CELL: u32 = 8;
/// A cell differs over this mean difference (levels of 255).
pub const CELL_THRESHOLD: u32 = 12;
/// A region of differing cells counts from this many cells (4 cells: a
/// 16x16 px patch; a caret is 1-3).
pub const MIN_CELLS: usize = 4;

/// How two screenshots differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// The regions that count, in image pixels.
    pub regions: Vec<Rect>,
    /// Differing cells, those in noise included.
    pub cells: usize,
}

impl Diff {
    pub fn matches(&self) -> bool {
        self.regions.is_empty()
    }
}

/// Compares `a` with `b` (same size, else an error), cells whose centre
/// is in an `ignore` rectangle left out.
pub fn compare(a: &Rgb8, b: &Rgb8, ignore: &[Rect]) -> Result<Diff, String> {
    if (a.width, a.height) != (b.width, b.height) {
        return Err(format!(
            "the screenshots differ in size: {}x{} and {}x{}",
            a.width, a.height, b.width, b.height
        ));
    }
    let (cw, ch) = (a.width.div_ceil(CELL), a.height.div_ceil(CELL));
    let mut differs = vec![false; (cw * ch) as usize];
    for cy in 0..ch {
        for cx in 0..cw {
            let (x0, y0) = (cx * CELL, cy * CELL);
            let (x1, y1) = ((x0 + CELL).min(a.width), (y0 + CELL).min(a.height));
            let (mx, my) = ((x0 + x1) / 2, (y0 + y1) / 2);
            if ignore
                .iter()
                .any(|r| mx >= r.x && mx < r.x + r.width && my >= r.y && my < r.y + r.height)
            {
                continue;
            }
            let mut sum = 0u32;
            for y in y0..y1 {
                let row = (y * a.width) as usize * 3;
                for i in row + x0 as usize * 3..row + x1 as usize * 3 {
                    sum += u32::from(a.rgb[i].abs_diff(b.rgb[i]));
                }
            }
            let n = (x1 - x0) * (y1 - y0) * 3;
            differs[(cy * cw + cx) as usize] = sum > CELL_THRESHOLD * n;
        }
    }
    let cells = differs.iter().filter(|d| **d).count();
    // Regions: 4-connected components of differing cells.
    let mut seen = vec![false; differs.len()];
    let mut regions = Vec::new();
    for start in 0..differs.len() {
        if !differs[start] || seen[start] {
            continue;
        }
        let (mut minx, mut miny, mut maxx, mut maxy) = (u32::MAX, u32::MAX, 0, 0);
        let mut n = 0;
        let mut stack = vec![start];
        seen[start] = true;
        while let Some(i) = stack.pop() {
            n += 1;
            let (x, y) = (i as u32 % cw, i as u32 / cw);
            (minx, miny, maxx, maxy) = (minx.min(x), miny.min(y), maxx.max(x), maxy.max(y));
            let mut push = |nx: u32, ny: u32| {
                let j = (ny * cw + nx) as usize;
                if differs[j] && !seen[j] {
                    seen[j] = true;
                    stack.push(j);
                }
            };
            if x > 0 {
                push(x - 1, y);
            }
            if x + 1 < cw {
                push(x + 1, y);
            }
            if y > 0 {
                push(x, y - 1);
            }
            if y + 1 < ch {
                push(x, y + 1);
            }
        }
        if n >= MIN_CELLS {
            let (x, y) = (minx * CELL, miny * CELL);
            regions.push(Rect {
                x,
                y,
                width: ((maxx + 1) * CELL).min(a.width) - x,
                height: ((maxy + 1) * CELL).min(a.height) - y,
            });
        }
    }
    Ok(Diff { regions, cells })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(w: u32, h: u32, f: impl Fn(u32, u32) -> [u8; 3]) -> Rgb8 {
        let mut rgb = Vec::new();
        for y in 0..h {
            for x in 0..w {
                rgb.extend_from_slice(&f(x, y));
            }
        }
        Rgb8 {
            width: w,
            height: h,
            rgb,
        }
    }

    #[test]
    fn a_caret_and_small_noise_match_a_window_does_not() {
        let base = img(200, 100, |_, _| [76, 106, 136]);
        // Same picture, slightly different levels everywhere (JPEG-like).
        let noisy = img(200, 100, |x, _| [76 + (x % 5) as u8, 106, 136]);
        assert!(compare(&base, &noisy, &[]).unwrap().matches());
        // A caret: 2 px wide, 17 px high.
        let caret = img(200, 100, |x, y| {
            if (50..52).contains(&x) && (10..27).contains(&y) {
                [0; 3]
            } else {
                [76, 106, 136]
            }
        });
        let d = compare(&base, &caret, &[]).unwrap();
        assert!(d.matches(), "{d:?}");
        assert!(d.cells > 0);
        // A window: one region, where it is.
        let window = img(200, 100, |x, y| {
            if (40..120).contains(&x) && (20..60).contains(&y) {
                [255; 3]
            } else {
                [76, 106, 136]
            }
        });
        let d = compare(&base, &window, &[]).unwrap();
        assert_eq!(
            d.regions,
            vec![Rect {
                x: 40,
                y: 16,
                width: 80,
                height: 48
            }]
        );
        // Ignored where the clock is.
        let ignore = [Rect {
            x: 32,
            y: 8,
            width: 100,
            height: 60,
        }];
        assert!(compare(&base, &window, &ignore).unwrap().matches());
        assert!(compare(&base, &img(10, 10, |_, _| [0; 3]), &[]).is_err());
    }
}
