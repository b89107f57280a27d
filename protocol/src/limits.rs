//! Limits both sides enforce. The daemon refuses what exceeds them before
//! anything runs; the host checks replies against them.

/// Largest request body the daemon reads, in bytes (checked before reading).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Most actions in one batch.
pub const MAX_ACTIONS: usize = 64;
/// Most points in one drag path.
pub const MAX_DRAG_POINTS: usize = 1024;
/// Most characters (Unicode scalar values) in one `type` action.
pub const MAX_TYPE_CHARS: usize = 10_000;
/// Most keys held or pressed in one action.
pub const MAX_KEYS: usize = 16;
/// Longest key name, in bytes.
pub const MAX_KEY_NAME_BYTES: usize = 64;
/// Largest scroll distance per axis, in the API's pixel-like units.
pub const MAX_SCROLL_DISTANCE: u64 = 10_000;
/// Scroll distance per wheel click. The API's `scroll_x`/`scroll_y` are
/// pixel-like distances; one wheel click scrolls roughly 50 px in Firefox
/// and GTK applications (3 lines), so 300 becomes 6 clicks, never 300.
pub const SCROLL_PIXELS_PER_CLICK: u64 = 50;
/// Longest `hold_key` action, in milliseconds (well inside
/// [`REQUEST_DEADLINE_MS`], with the rest of its batch).
pub const MAX_HOLD_KEY_MS: u64 = 10_000;
/// A button `mouse_down` left held is released by the daemon once no
/// request came for this long (a client that never sent `mouse_up`).
pub const HELD_BUTTON_IDLE_MS: u64 = 60_000;
/// Largest screen or image side.
pub const MAX_DIMENSION: u32 = 8192;
/// Largest reply the host reads from the daemon, in bytes.
pub const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
/// Deadline of one daemon request, in milliseconds.
pub const REQUEST_DEADLINE_MS: u64 = 30_000;
/// Settling before the final screenshot of a batch (docs/contract.md 2c):
/// when nothing was drawn since the batch began, the screen must have been
/// quiet (no X damage) for this long after the input was processed: a
/// program's first paint is waited for this long. Short on purpose: most
/// reactions to input (an echoed key, a hover, a menu) paint within a few
/// milliseconds; a page that loads for longer is what the `wait` action
/// is for.
pub const SETTLE_QUIET_MS: u64 = 15;
/// ... when something was drawn (the reaction is under way): quiet for
/// this long after the last damage, or for [`SETTLE_STRETCH`] times the
/// reaction's longest interval so far (the input to its first damage,
/// one damage to the next) when that is longer, never more than
/// [`SETTLE_QUIET_MS`].
pub const SETTLE_DRAWN_QUIET_MS: u64 = 4;
/// See [`SETTLE_DRAWN_QUIET_MS`].
pub const SETTLE_STRETCH: u32 = 2;
/// ... but the final screenshot never waits longer than this for quiet
/// (an animation or a video never goes quiet).
pub const SETTLE_CAP_MS: u64 = 1_000;
/// The `wait` action: quiet for this long ...
pub const WAIT_QUIET_MS: u64 = 300;
/// ... capped at this.
pub const WAIT_CAP_MS: u64 = 3_000;
/// Keys after a shortcut (a keypress holding Ctrl, Alt, Super, Meta or
/// Hyper, or a function key) in the same batch wait until the programs
/// reacted to it: the first X damage or input-focus change after the
/// shortcut was delivered, then this long without either. Firefox runs a
/// browser shortcut only after its page has seen the key, so keys sent
/// right behind CTRL+L reached the page, not the address bar (docs/contract.md rule 2b).
pub const SHORTCUT_QUIET_MS: u64 = 50;
/// ... never longer than this after the shortcut (a shortcut that changes
/// nothing visible, or a screen that never goes quiet). A program that
/// starts a process first (a window manager's launcher) takes longer than
/// any bounded settle: a `wait` action is for that.
pub const SHORTCUT_CAP_MS: u64 = 300;
/// Longest wait for input to be delivered before the next event is sent:
/// a window manager's click-to-focus grab freezes the pointer from a press
/// until it replays the click (well under a millisecond when idle); a
/// device still frozen after this long fails the action with
/// `input_blocked` instead of letting later events overtake it.
pub const INPUT_DELIVERY_MS: u64 = 2_000;
/// Longest element ref (and tab id the model names), in bytes.
pub const MAX_REF_BYTES: usize = 256;
