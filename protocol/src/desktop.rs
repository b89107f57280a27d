//! The guest desktop's fixed geometry, shared by the guest's panel
//! configuration (guest-image/), the offline exercise and `host-cli
//! replay`: a panel along the bottom edge of the screen, its clock at the
//! right end. A replay ignores the clock's rectangle when it compares a
//! screen with the recorded one (the time of day is not an effect of the
//! run).

use crate::{Rect, Size};

/// The panel's background colour (guest-image/tint2/sandtop.tint2rc):
/// the offline exercise finds the panel, and its launchers on it, by it.
pub const PANEL_BACKGROUND: [u8; 3] = [0x2e, 0x34, 0x40];

/// The desktop's colour behind the windows (`sandtopd --background` in
/// guest-image/sandtop-entry).
pub const DESKTOP_BACKGROUND: [u8; 3] = [0x4c, 0x6a, 0x88];

/// The panel's height in screen pixels, at every screen size.
pub const PANEL_HEIGHT: u32 = 30;

/// The width of the panel's right end that holds the clock, in screen
/// pixels (the clock is right-aligned inside it).
pub const CLOCK_WIDTH: u32 = 120;

/// The rectangle of the screen the clock may draw in, in screen pixels.
/// Clamped to the screen: a screen narrower or shorter than the panel
/// gets what is left of it.
pub fn clock_rect(screen: Size) -> Rect {
    let w = CLOCK_WIDTH.min(screen.width);
    let h = PANEL_HEIGHT.min(screen.height);
    Rect {
        x: screen.width - w,
        y: screen.height - h,
        width: w,
        height: h,
    }
}

/// The panel's rectangle, in screen pixels.
pub fn panel_rect(screen: Size) -> Rect {
    let h = PANEL_HEIGHT.min(screen.height);
    Rect {
        x: 0,
        y: screen.height - h,
        width: screen.width,
        height: h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_sits_in_the_bottom_right_corner_inside_the_panel() {
        let s = Size {
            width: 1280,
            height: 800,
        };
        let c = clock_rect(s);
        assert_eq!((c.x, c.y, c.width, c.height), (1160, 770, 120, 30));
        let p = panel_rect(s);
        assert_eq!((p.x, p.y, p.width, p.height), (0, 770, 1280, 30));
        assert!(c.x >= p.x && c.x + c.width <= p.x + p.width && c.y == p.y);
    }

    #[test]
    fn a_tiny_screen_gets_what_is_left() {
        let c = clock_rect(Size {
            width: 50,
            height: 10,
        });
        assert_eq!((c.x, c.y, c.width, c.height), (0, 0, 50, 10));
    }
}
