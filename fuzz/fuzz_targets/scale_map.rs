//! The ScaleMap: any screen, region and target it accepts maps every model
//! pixel inside the screen (and inside the region).
#![no_main]
use sandtop_protocol::{Fit, Rect, ScaleMap, Size};

fn u(d: &[u8], i: usize) -> u32 {
    let b = [
        d.get(2 * i).copied().unwrap_or(0),
        d.get(2 * i + 1).copied().unwrap_or(0),
    ];
    u32::from(u16::from_le_bytes(b))
}

libfuzzer_sys::fuzz_target!(|d: &[u8]| {
    let screen = Size::new(u(d, 0) % 9000, u(d, 1) % 9000);
    let flags = d.get(40).copied().unwrap_or(0);
    let region = (flags & 1 != 0).then(|| Rect {
        x: u(d, 2),
        y: u(d, 3),
        width: u(d, 4),
        height: u(d, 5),
    });
    let target = (flags & 2 != 0).then(|| Size::new(u(d, 6), u(d, 7)));
    let fit = if flags & 4 != 0 {
        Fit::Stretch
    } else {
        Fit::Contain
    };
    let Ok(map) = ScaleMap::fit(screen, region, target, fit) else {
        return;
    };
    assert!(map.check().is_ok());
    let r = region.unwrap_or(Rect::full(screen));
    for k in 0..4 {
        let x = i64::from(u(d, 8 + 2 * k)) - 100;
        let y = i64::from(u(d, 9 + 2 * k)) - 100;
        if let Ok((sx, sy)) = map.to_screen(x, y) {
            assert!(
                sx < screen.width && sy < screen.height,
                "{x},{y} -> {sx},{sy} outside {screen}"
            );
            assert!(
                sx >= r.x && sy >= r.y && sx < r.x + r.width && sy < r.y + r.height,
                "outside the region"
            );
        }
    }
});
