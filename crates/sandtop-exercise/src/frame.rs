//! What the offline exercise's script sees in a screenshot: the frame
//! decoded from the model's input, and the recognisers for the windows it
//! waits on (the editor, with or without tabs; the Save dialog). Tests in
//! the parent module (`exercise.rs`), with the script that uses them.

use base64::Engine as _;
use serde_json::Value;

/// GTK's (Adwaita) selection colour: the Save dialog's selected place.
pub const GTK_SELECTED: [u8; 3] = [53, 132, 228];
/// Rows above this are the editor's title, menu and tab bars.
const DIALOG_TOP: u32 = 100;
/// The window manager's title bar of a maximised window (openbox's theme
/// in guest-image: 22 rows).
const TITLE_BAR_ROWS: u32 = 22;

/// The pixels that show the windows' names ([`Frame::window_names`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowNames {
    pub title: Vec<u8>,
    pub panel: Option<Vec<u8>>,
}

impl WindowNames {
    /// Whether both show something else than `before`: the title bar, and
    /// the window list when `before` had one.
    pub fn renamed_from(&self, before: &WindowNames) -> bool {
        self.title != before.title && (before.panel.is_none() || self.panel != before.panel)
    }
}

/// An RGB image decoded from a screenshot.
#[derive(Debug, Clone)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

impl Frame {
    /// Decodes a `data:image/png;base64,...` URL.
    pub fn from_data_url(url: &str) -> Option<Frame> {
        let b64 = url.strip_prefix("data:image/png;base64,")?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        // The reply decoder's limits: 8-bit RGB, bounded, checked first.
        let img = sandtop_channel::image_check::decode_png_within(
            &bytes,
            sandtop_channel::image_check::MAX_SIZE,
        )
        .ok()?;
        Some(Frame {
            width: img.width,
            height: img.height,
            rgb: img.rgb,
        })
    }

    /// Pixels of exactly this colour.
    pub fn count(&self, color: [u8; 3]) -> usize {
        self.count_in(0, self.height, color)
    }

    /// Pixels of exactly this colour in rows `y0..y1` (clamped to the
    /// frame).
    pub fn count_in(&self, y0: u32, y1: u32, color: [u8; 3]) -> usize {
        self.rows(y0, y1)
            .chunks_exact(3)
            .filter(|p| *p == color)
            .count()
    }

    /// The share of pure white pixels in rows `y0..y1`.
    pub fn white_share(&self, y0: u32, y1: u32) -> f64 {
        let pixels = self.rows(y0, y1).len() / 3;
        self.count_in(y0, y1, [255; 3]) as f64 / pixels.max(1) as f64
    }

    /// The bytes of rows `y0..y1`, clamped to the frame.
    fn rows(&self, y0: u32, y1: u32) -> &[u8] {
        let row = self.width as usize * 3;
        let (y0, y1) = (
            y0.min(self.height),
            y1.min(self.height).max(y0.min(self.height)),
        );
        &self.rgb[y0 as usize * row..y1 as usize * row]
    }

    /// A maximised plain text editor: just below its menu bar, rows of
    /// nothing but white (a browser has its toolbar there, a dialog its
    /// own widgets). When the editor holds two documents, a tab bar sits
    /// there instead, its current tab underlined in the selection colour,
    /// and the white page begins below it.
    pub fn editor_visible(&self) -> bool {
        if self.white_share(70, 100) > 0.95 {
            return true;
        }
        let tab_line =
            (80..96).any(|y| self.count_in(y, y + 1, GTK_SELECTED) >= self.width as usize / 4);
        tab_line && self.white_share(100, 130) > 0.95
    }

    /// The editor with no dialog over it: not the dialog's selected place,
    /// and the middle of the screen (where a dialog sits, whether focused
    /// or behind its completion popup, when its selection turns grey) is
    /// the editor's blank page below the note's few lines.
    pub fn editor_alone(&self) -> bool {
        !self.save_dialog_visible()
            && self.white_share(self.height * 3 / 8, self.height * 5 / 8) > 0.95
    }

    /// The Save dialog: its selected place, a wide block of the selection
    /// colour below the editor's menu and tab bars (a tab's underline is
    /// that colour too).
    pub fn save_dialog_visible(&self) -> bool {
        self.count_in(DIALOG_TOP, self.height, GTK_SELECTED) > 2000
    }
}

impl Frame {
    /// The panel along the bottom edge: the rows `y0..y1` at the bottom
    /// that begin with the panel's colour (its left padding, which nothing
    /// is drawn in, however many windows its list shows); `None` when
    /// there is no such band (an image without the panel).
    pub fn panel(&self) -> Option<(u32, u32)> {
        let bg = sandtop_protocol::desktop::PANEL_BACKGROUND;
        let row = self.width as usize * 3;
        let starts_with_panel = |y: u32| {
            let at = y as usize * row;
            (0..self.width.min(4) as usize).all(|x| {
                let p = &self.rgb[at + x * 3..at + x * 3 + 3];
                (0..3).all(|c| p[c].abs_diff(bg[c]) <= 6)
            })
        };
        let mut y0 = self.height;
        while y0 > 0 && starts_with_panel(y0 - 1) {
            y0 -= 1;
        }
        (self.height - y0 >= 8).then_some((y0, self.height))
    }

    /// What shows the windows' names: the top window's title bar and the
    /// panel's window list (the panel without its right quarter, where
    /// the clock is; `None` without a panel). Both follow a window's name
    /// some time after the window itself has changed (Firefox's title
    /// seconds after its page under load; tint2 runs at nice 10), so a
    /// script that moves on when the window's content changed can leave a
    /// screen whose names are still the old ones, and a replay that waits
    /// there sees them change.
    pub fn window_names(&self) -> WindowNames {
        let panel = self.panel().map(|(y0, y1)| {
            let row = self.width as usize * 3;
            let keep = self.width as usize * 3 / 4 * 3;
            let mut out = Vec::with_capacity((y1 - y0) as usize * keep);
            for y in y0..y1 {
                let at = y as usize * row;
                out.extend_from_slice(&self.rgb[at..at + keep]);
            }
            out
        });
        WindowNames {
            title: self.rows(0, TITLE_BAR_ROWS).to_vec(),
            panel,
        }
    }

    /// The centres of the panel's launchers, left to right (the browser,
    /// the editor, the terminal): the leading marks on the panel (columns
    /// where something other than the panel's colour is drawn), each about
    /// as wide as the panel is high; the window list's wide buttons and
    /// the clock come after them.
    pub fn launchers(&self) -> Vec<(u32, u32)> {
        let Some((y0, y1)) = self.panel() else {
            return Vec::new();
        };
        let bg = sandtop_protocol::desktop::PANEL_BACKGROUND;
        let row = self.width as usize * 3;
        let ink = |x: u32| {
            (y0..y1).any(|y| {
                let i = y as usize * row + x as usize * 3;
                let p = &self.rgb[i..i + 3];
                let d: u32 = (0..3).map(|c| u32::from(p[c].abs_diff(bg[c]))).sum();
                d > 40
            })
        };
        // Runs of inked columns, joined across gaps of under 3 columns.
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for x in 0..self.width {
            if !ink(x) {
                continue;
            }
            match runs.last_mut() {
                Some((_, end)) if x - *end <= 3 => *end = x,
                _ => runs.push((x, x)),
            }
        }
        let band = y1 - y0;
        runs.into_iter()
            .take_while(|(a, b)| b - a < band * 3 / 2)
            .filter(|(a, b)| b - a + 1 >= band / 3)
            .map(|(a, b)| ((a + b) / 2, (y0 + y1) / 2))
            .collect()
    }
}

/// The newest screenshot in a request body: the last image URL in its
/// input (a computer call output or the first user message).
pub fn last_screenshot(request: &Value) -> Option<Frame> {
    let input = request.get("input")?.as_array()?;
    let mut url = None;
    for item in input {
        if let Some(u) = item.pointer("/output/image_url").and_then(Value::as_str) {
            url = Some(u);
        }
        if let Some(parts) = item.get("content").and_then(Value::as_array) {
            for p in parts {
                if let Some(u) = p.get("image_url").and_then(Value::as_str) {
                    url = Some(u);
                }
            }
        }
    }
    Frame::from_data_url(url?)
}
