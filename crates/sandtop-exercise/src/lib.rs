//! The offline exercise: the scripted model drives the real guest through
//! the real loop, and the result is checked against the applications' own
//! records (docs/contract.md rule 26), never against screenshots or the model's
//! words.
//!
//! The script behaves like a cautious model: it raises one safety check on
//! its first call (so the approval path runs for real), opens the demo
//! form in the guest browser by clicking the browser's launcher on the
//! panel (found in the screenshot: the first mark on the panel's colour),
//! fills it in with non-ASCII text, submits it, opens the text editor
//! (Super+E), types a note and saves it through the Save dialog. It looks at each screenshot to decide when the
//! next window is ready (the form's blue button, the editor's blank page,
//! the dialog's selected place), waiting with `wait` actions, never with
//! sleeps of its own.
//!
//! Layout: the desktop script (one `Stage` per window it waits for, paced by
//! `Patience`) and the two checks of what it leaves (`check_submission`,
//! `check_note`), which share the constants it types. If it grows, the tests
//! go to `exercise/tests.rs`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sandtop_agent::model::scripted::{Script, computer_call, message};

pub mod browser;
pub mod command;
pub mod frame;
pub mod setup;
pub mod sign_in;

pub use frame::{Frame, last_screenshot};
pub use sandtop_runfolder::parts::Check;
pub use setup::exercise_setup;

/// What the exercise types into the form.
pub const FORM_NAME: &str = "Zoë Ångström-Łukasz 山田太郎";
pub const FORM_EMAIL: &str = "zoe.angstrom@example.test";
pub const FORM_MESSAGE: &str =
    "Grüße aus der Sandbox! Ça marche très bien — 日本語のテキスト ✓ 🙂 `$(not a command)`";
/// What the exercise types into the editor, and where it saves it.
pub const NOTE_TEXT: &str =
    "Sandtop exercise note\nÜmlaute und Akzente: àéîõü ñ ç\nCJK: 中文字 한국어, emoji: 🙂🚀\n";
pub const NOTE_PATH: &str = "/home/user/exercise-note.txt";
/// What the exercise types into the Save dialog: the bare name, saved in
/// the folder the dialog opens in (the editor runs in the guest user's
/// home, `NOTE_PATH`'s folder). A typed path also makes the dialog load
/// and complete each folder as it is typed, one more thing an Enter can
/// come before (the Enter itself waits for the typed name to be drawn:
/// see the script's Save stage).
pub const NOTE_NAME: &str = "exercise-note.txt";
/// Where the demo app stores submissions, inside the guest.
pub const STORE_PATH: &str = "/home/user/demo/submissions.jsonl";

/// The form's submit button colour (#2563eb).
const BUTTON: [u8; 3] = [0x25, 0x63, 0xeb];
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Start,
    WaitForm,
    WaitSaved,
    WaitEditor,
    WaitDialog,
    WaitDialogClosed,
    Done,
}

/// The exercise's script.
#[derive(Debug)]
pub struct ExerciseScript {
    stage: Stage,
    n: u32,
    tries: u32,
    /// When the current stage began, and when its window was last asked
    /// for (a key press).
    stage_started: Instant,
    last_ask: Instant,
    patience: Patience,
    /// Stop once the form is saved (`host-cli bench --browser` compares
    /// this with the browser exercise).
    form_only: bool,
    /// The safety check was raised (on the first call).
    checked: bool,
    /// The windows' names ([`Frame::window_names`]) before an input that
    /// renames a window (the form's submission, the note's save): the
    /// next stage ends only once they have changed.
    names_before: Option<frame::WindowNames>,
}

/// How long the script waits for a window, in turns and in time. A `wait`
/// ends once the screen has been quiet for a moment, so on a still screen
/// it is short: counting turns alone gives a slow launch (a loaded CI
/// machine) only seconds. Both bounds must be spent before the script
/// gives up, and a window is asked for again only when the last request
/// is old enough that the launch was plausibly lost: asking while a slow
/// launch is under way opens the editor twice (as a second tab, which
/// hides the page the script looks for).
#[derive(Debug, Clone, Copy)]
struct Patience {
    max_turns: u32,
    max_time: Duration,
    ask_again_after: Duration,
    /// Enter in the Save dialog is pressed again sooner: it launches
    /// nothing.
    confirm_again_after: Duration,
}

impl Patience {
    const DEFAULT: Patience = Patience {
        max_turns: 30,
        max_time: Duration::from_secs(60),
        ask_again_after: Duration::from_secs(10),
        confirm_again_after: Duration::from_secs(2),
    };
    /// A guest under software emulation (QEMU's TCG): Firefox takes
    /// 30-40 s to show the demo form here, against ~2 s in a container.
    /// A launch is asked for again only after 90 s, so a slow one is not
    /// doubled.
    const EMULATED: Patience = Patience {
        max_turns: 150,
        max_time: Duration::from_secs(240),
        ask_again_after: Duration::from_secs(90),
        confirm_again_after: Duration::from_secs(8),
    };
}

/// How fast the guest is: it sets the script's patience and the run's
/// budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pace {
    /// A container, or a VM with a hardware accelerator.
    #[default]
    Native,
    /// A VM under software emulation (TCG).
    Emulated,
}

/// The `wait` actions of one waiting turn: one while the window may just
/// be drawing (a quick answer when it does), then three quiet periods
/// (about a second on a still screen), so that the time bound fits the
/// step budget.
const QUICK_TURNS: u32 = 8;
const WAITS_PER_SLOW_TURN: usize = 3;

impl Default for ExerciseScript {
    fn default() -> ExerciseScript {
        ExerciseScript::new(false)
    }
}

impl ExerciseScript {
    /// The whole exercise, or (`form_only`) the form alone.
    pub fn new(form_only: bool) -> ExerciseScript {
        let now = Instant::now();
        ExerciseScript {
            stage: Stage::Start,
            n: 0,
            tries: 0,
            stage_started: now,
            last_ask: now,
            patience: Patience::DEFAULT,
            form_only,
            checked: false,
            names_before: None,
        }
    }

    /// The same script, as patient as `pace` needs.
    pub fn at_pace(mut self, pace: Pace) -> ExerciseScript {
        self.patience = match pace {
            Pace::Native => Patience::DEFAULT,
            Pace::Emulated => Patience::EMULATED,
        };
        self
    }
}

fn keypress(keys: &[&str]) -> Value {
    json!({"type": "keypress", "keys": keys})
}

fn type_text(text: &str) -> Value {
    json!({"type": "type", "text": text})
}

fn wait() -> Value {
    json!({"type": "wait"})
}

/// The browser's launcher: the first on the panel (guest-image/tint2).
const BROWSER: usize = 0;

/// A click on launcher `n` of the panel in `shot`, when it shows one.
fn launcher(shot: Option<&Frame>, n: usize) -> Option<Value> {
    let (x, y) = *shot?.launchers().get(n)?;
    Some(json!({"type": "click", "button": "left", "x": x, "y": y}))
}

impl ExerciseScript {
    fn call(&mut self, actions: Vec<Value>, checks: Vec<Value>) -> Vec<Value> {
        self.n += 1;
        vec![computer_call(self.n, actions, checks)]
    }

    /// Waits for a window; when the last request for it is older than
    /// [`Patience::ask_again_after`] it asks again (`retry`), as a person
    /// would when a launch got lost (say, a key pressed while the window
    /// manager was still starting).
    fn waiting(&mut self, what: &str, retry: Option<Value>) -> Result<Vec<Value>, String> {
        self.waiting_with(what, retry, self.patience.ask_again_after)
    }

    /// [`ExerciseScript::waiting`], asking again after `again_after`.
    fn waiting_with(
        &mut self,
        what: &str,
        retry: Option<Value>,
        again_after: Duration,
    ) -> Result<Vec<Value>, String> {
        self.tries += 1;
        let p = self.patience;
        let waited = self.stage_started.elapsed();
        if self.tries > p.max_turns && waited >= p.max_time {
            return Err(format!(
                "{what} did not appear after {} waiting turns ({:.0} s)",
                self.tries - 1,
                waited.as_secs_f64()
            ));
        }
        let mut actions = Vec::new();
        if let Some(r) = retry
            && self.last_ask.elapsed() >= again_after
        {
            actions.push(r);
            self.last_ask = Instant::now();
        }
        let waits = if self.tries <= QUICK_TURNS {
            1
        } else {
            WAITS_PER_SLOW_TURN
        };
        actions.extend(std::iter::repeat_n(wait(), waits));
        Ok(self.call(actions, vec![]))
    }

    /// Whether the windows' names differ from those before the stage's
    /// input (true when there is nothing to compare).
    fn renamed(&self, shot: Option<&Frame>) -> bool {
        match (&self.names_before, shot) {
            (Some(before), Some(s)) => s.window_names().renamed_from(before),
            _ => true,
        }
    }

    /// The next stage: its clocks start now (every stage's first turn
    /// asks for its window, or needs none).
    fn advance(&mut self, stage: Stage) {
        self.stage = stage;
        self.tries = 0;
        self.stage_started = Instant::now();
        self.last_ask = self.stage_started;
    }
}

impl Script for ExerciseScript {
    fn next(&mut self, request: &Value) -> Result<Option<Vec<Value>>, String> {
        let shot = last_screenshot(request);
        let out = match self.stage {
            Stage::Start => {
                // The browser's launcher on the panel, found in the
                // screenshot as a model would (the panel may still be
                // drawing in the very first one).
                let check = (!self.checked).then(|| {
                    json!({
                        "id": "sc_exercise_form",
                        "code": "sensitive_domain",
                        "message": "The exercise is about to open a web form in the guest's browser \
                                    and submit personal details (a name and an email address).",
                    })
                });
                // The first call raises the check, whatever it does: until
                // it is approved nothing runs.
                self.checked = true;
                let Some(at) = launcher(shot.as_ref(), BROWSER) else {
                    let mut call = self.waiting("the panel's browser launcher", None)?;
                    if let Some(c) = check {
                        call[0]["pending_safety_checks"] = json!([c]);
                    }
                    return Ok(Some(call));
                };
                self.advance(Stage::WaitForm);
                self.call(vec![at, wait(), wait()], check.into_iter().collect())
            }
            Stage::WaitForm => {
                let form = shot.as_ref().is_some_and(|s| s.count(BUTTON) > 500);
                if !form {
                    let again = launcher(shot.as_ref(), BROWSER);
                    return self.waiting("the demo form", again).map(Some);
                }
                self.advance(Stage::WaitSaved);
                self.names_before = shot.as_ref().map(Frame::window_names);
                // The name field has autofocus; Tab walks the form.
                self.call(
                    vec![
                        type_text(FORM_NAME),
                        keypress(&["TAB"]),
                        type_text(FORM_EMAIL),
                        keypress(&["TAB"]),
                        type_text(FORM_MESSAGE),
                        keypress(&["TAB"]),
                        keypress(&["ENTER"]),
                        wait(),
                    ],
                    vec![],
                )
            }
            Stage::WaitSaved => {
                let form_gone = shot.as_ref().is_some_and(|s| s.count(BUTTON) < 50);
                // And the window's title and panel entry say so (the
                // page's title, not the form's).
                if !form_gone || !self.renamed(shot.as_ref()) {
                    return self.waiting("the saved page", None).map(Some);
                }
                if self.form_only {
                    self.advance(Stage::Done);
                    self.n += 1;
                    return Ok(Some(vec![message(self.n, "I submitted the contact form.")]));
                }
                // The editor by its hotkey: after the form, Firefox may
                // hold a pointer grab (a doorhanger, an autocomplete list)
                // that freezes a click on the panel (input_blocked), while
                // the key reaches the window manager.
                self.advance(Stage::WaitEditor);
                self.call(vec![keypress(&["SUPER", "E"]), wait(), wait()], vec![])
            }
            Stage::WaitEditor => {
                if !shot.as_ref().is_some_and(Frame::editor_visible) {
                    return self
                        .waiting("the text editor", Some(keypress(&["SUPER", "E"])))
                        .map(Some);
                }
                self.advance(Stage::WaitDialog);
                self.call(
                    vec![
                        type_text(NOTE_TEXT),
                        keypress(&["CTRL", "S"]),
                        wait(),
                        wait(),
                    ],
                    vec![],
                )
            }
            Stage::WaitDialog => {
                if !shot.as_ref().is_some_and(Frame::save_dialog_visible) {
                    return self.waiting("the save dialog", None).map(Some);
                }
                self.advance(Stage::WaitDialogClosed);
                // The editor's panel entry still names the unsaved note
                // (the title bar is the dialog's: any other passes).
                self.names_before = shot.as_ref().map(Frame::window_names);
                // Enter once the typed name has been drawn: the dialog
                // turns its Save button (the default) sensitive when it
                // has handled the name, and an Enter that came with the
                // name found it insensitive (5 of 5 runs on a loaded host).
                self.call(
                    vec![
                        type_text(NOTE_NAME),
                        wait(),
                        keypress(&["ENTER"]),
                        wait(),
                        wait(),
                    ],
                    vec![],
                )
            }
            Stage::WaitDialogClosed => {
                if !shot.as_ref().is_some_and(Frame::editor_alone) {
                    // The file name's completion popup can take the first
                    // Enter; press it again (soon: it opens nothing twice)
                    // until the dialog has gone.
                    return self
                        .waiting_with(
                            "the save to finish",
                            Some(keypress(&["ENTER"])),
                            self.patience.confirm_again_after,
                        )
                        .map(Some);
                }
                if !self.renamed(shot.as_ref()) {
                    // The dialog has gone; the editor's title and panel
                    // entry are to name the saved file. Nothing is pressed
                    // (an Enter now would reach the note).
                    return self.waiting("the saved note's name", None).map(Some);
                }
                self.advance(Stage::Done);
                return self.next(request);
            }
            Stage::Done => {
                self.n += 1;
                self.stage = Stage::Done;
                vec![message(
                    self.n,
                    "I submitted the contact form and saved the note in the text editor.",
                )]
            }
        };
        Ok(Some(out))
    }
}

/// Checks the demo app's stored record (JSON lines) for a submission with
/// exactly the exercise's name, email and message. Browsers submit a
/// textarea's line breaks as CRLF, so the message is compared with its
/// `\n` normalised that way.
pub fn check_submission(store: &[u8]) -> Check {
    let want_msg = FORM_MESSAGE.replace('\n', "\r\n");
    let text = String::from_utf8_lossy(store);
    let found = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            let get = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            (get("name"), get("email"), get("message"))
        });
    match found {
        Some((n, e, m)) if n == FORM_NAME && e == FORM_EMAIL && m == want_msg => Check {
            what: format!("the demo app stored the submission ({STORE_PATH})"),
            ok: true,
            detail: format!("name {n:?}, email {e:?}, message {m:?}"),
        },
        Some((n, e, m)) => Check {
            what: format!("the demo app stored the submission ({STORE_PATH})"),
            ok: false,
            detail: format!(
                "the last submission differs: name {n:?} (want {FORM_NAME:?}), email {e:?} \
                 (want {FORM_EMAIL:?}), message {m:?} (want {want_msg:?})"
            ),
        },
        None => Check {
            what: format!("the demo app stored the submission ({STORE_PATH})"),
            ok: false,
            detail: "no submission is stored".into(),
        },
    }
}

/// Checks the saved note, byte for byte.
pub fn check_note(file: Option<&[u8]>) -> Check {
    let what = format!("the editor saved the note ({NOTE_PATH})");
    match file {
        Some(b) if b == NOTE_TEXT.as_bytes() => Check {
            what,
            ok: true,
            detail: format!("{} bytes, identical", b.len()),
        },
        Some(b) => Check {
            what,
            ok: false,
            detail: format!(
                "the file holds {:?}, want {NOTE_TEXT:?}",
                String::from_utf8_lossy(b)
            ),
        },
        None => Check {
            what,
            ok: false,
            detail: "the file does not exist".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::frame::{GTK_SELECTED, WindowNames};
    use super::*;

    #[test]
    fn the_typed_name_is_the_checked_files_name_in_the_guests_home() {
        let path = std::path::Path::new(NOTE_PATH);
        assert_eq!(path.file_name().unwrap(), NOTE_NAME);
        assert_eq!(path.parent().unwrap(), std::path::Path::new("/home/user"));
        assert!(
            !NOTE_NAME.contains('/'),
            "a path makes the dialog complete folders"
        );
    }

    fn png_url(w: u32, h: u32, color: impl Fn(u32, u32) -> [u8; 3]) -> String {
        let mut rgb = Vec::new();
        for y in 0..h {
            for x in 0..w {
                rgb.extend_from_slice(&color(x, y));
            }
        }
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().unwrap();
        wr.write_image_data(&rgb).unwrap();
        wr.finish().unwrap();
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(out)
        )
    }

    /// A desktop `w`x`h` as the guest draws it: `above` over the panel
    /// (30 px, the panel's colour) with three 24 px launcher icons at
    /// x = 6, 40, 74, a 240 px window button and the clock's text.
    fn desktop(w: u32, h: u32, above: impl Fn(u32, u32) -> [u8; 3]) -> String {
        let bg = sandtop_protocol::desktop::PANEL_BACKGROUND;
        png_url(w, h, |x, y| {
            if y < h - 30 {
                return above(x, y);
            }
            let iy = y >= h - 27 && y < h - 3;
            match x {
                6..30 | 40..64 | 74..98 if iy => [200, 80 + (x % 7) as u8 * 10, 40],
                120..360 if y >= h - 28 && y < h - 2 => [0x3b, 0x42, 0x52],
                _ if x + 60 >= w && x + 20 < w && y == h - 15 => [236, 239, 244],
                _ => bg,
            }
        })
    }

    #[test]
    fn a_window_is_renamed_when_its_title_bar_and_panel_entry_both_changed() {
        // A window button on the panel (x 120..360) whose text is `entry`
        // and a title bar whose text is `title` (a mark at that x).
        let shot = |title: u32, entry: u32| {
            let url = desktop(400, 300, move |x, y| {
                if y < 22 && x == title {
                    [255; 3]
                } else {
                    [40, 80, 160]
                }
            });
            let mut f = Frame::from_data_url(&url).unwrap();
            let at = ((300 - 15) * 400 + entry) as usize * 3;
            f.rgb[at..at + 3].copy_from_slice(&[255; 3]);
            f.window_names()
        };
        let before = shot(100, 150);
        assert!(before.panel.is_some());
        assert!(!shot(100, 150).renamed_from(&before), "nothing changed");
        assert!(!shot(200, 150).renamed_from(&before), "only the title");
        assert!(
            !shot(100, 250).renamed_from(&before),
            "only the panel entry"
        );
        assert!(shot(200, 250).renamed_from(&before), "both");
        // The clock (the panel's right quarter) is no name.
        let clock_only = {
            let mut f = Frame::from_data_url(&desktop(400, 300, |_, _| [40, 80, 160])).unwrap();
            let at = ((300 - 15) * 400 + 390) as usize * 3;
            f.rgb[at..at + 3].copy_from_slice(&[1, 2, 3]);
            f.window_names()
        };
        let plain = Frame::from_data_url(&desktop(400, 300, |_, _| [40, 80, 160]))
            .unwrap()
            .window_names();
        assert_eq!(clock_only, plain);
        // Without a panel before, the title bar decides.
        let no_panel = WindowNames {
            title: before.title.clone(),
            panel: None,
        };
        assert!(shot(200, 150).renamed_from(&no_panel));
    }

    fn request_with(url: &str) -> Value {
        json!({"input": [{"type": "computer_call_output", "call_id": "c",
                          "output": {"type": "computer_screenshot", "image_url": url}}]})
    }

    #[test]
    fn the_script_waits_for_the_form_then_fills_it() {
        let mut s = ExerciseScript::default();
        // No panel yet: the script waits for its launcher; its first call,
        // whatever it is, raises the safety check (nothing runs before it
        // is approved).
        let bare = png_url(400, 300, |_, _| [0, 0, 0]);
        let w = s.next(&request_with(&bare)).unwrap().unwrap();
        assert_eq!(w[0]["actions"], json!([{"type": "wait"}]));
        assert_eq!(w[0]["pending_safety_checks"][0]["code"], "sensitive_domain");
        let blank = desktop(400, 300, |_, _| [255, 255, 255]);
        let form = desktop(400, 300, |x, y| {
            if x < 40 && y < 20 {
                BUTTON
            } else {
                [255, 255, 255]
            }
        });
        let first = s.next(&request_with(&blank)).unwrap().unwrap();
        assert_eq!(first[0]["pending_safety_checks"], json!([]), "raised twice");
        // The browser's launcher, clicked where the screenshot shows it.
        assert_eq!(
            first[0]["actions"][0],
            json!({"type": "click", "button": "left", "x": 17, "y": 285})
        );
        // No form yet: wait.
        let w = s.next(&request_with(&blank)).unwrap().unwrap();
        assert_eq!(w[0]["actions"], json!([{"type": "wait"}]));
        // The form (800 blue pixels): fill it.
        let fill = s.next(&request_with(&form)).unwrap().unwrap();
        assert_eq!(
            fill[0]["actions"][0],
            json!({"type": "type", "text": FORM_NAME})
        );
        // Still the form: wait for the saved page.
        let w = s.next(&request_with(&form)).unwrap().unwrap();
        assert_eq!(w[0]["actions"], json!([{"type": "wait"}]));
    }

    /// A script whose time bounds are `max_time` and `ask_again_after`.
    fn impatient(max_time: Duration, ask_again_after: Duration) -> ExerciseScript {
        ExerciseScript {
            patience: Patience {
                max_turns: 5,
                max_time,
                ask_again_after,
                confirm_again_after: ask_again_after,
            },
            ..ExerciseScript::default()
        }
    }

    #[test]
    fn waiting_forever_is_an_error_once_turns_and_time_are_spent() {
        let blank = desktop(200, 120, |_, _| [0, 0, 0]);
        let mut s = impatient(Duration::ZERO, Duration::from_secs(3600));
        s.next(&request_with(&blank)).unwrap();
        for _ in 0..5 {
            s.next(&request_with(&blank)).unwrap();
        }
        let err = s.next(&request_with(&blank)).unwrap_err();
        assert!(err.contains("demo form"), "{err}");
        assert!(err.contains("5 waiting turns"), "{err}");
        // Turns spent but not the time: the script keeps waiting.
        let mut s = impatient(Duration::from_secs(3600), Duration::from_secs(3600));
        s.next(&request_with(&blank)).unwrap();
        for turn in 1..=50 {
            let out = s.next(&request_with(&blank)).unwrap().unwrap();
            // Quick turns first, then longer ones.
            let waits = out[0]["actions"].as_array().unwrap().len();
            assert_eq!(
                waits,
                if turn <= QUICK_TURNS { 1 } else { 3 },
                "turn {turn}"
            );
        }
    }

    #[test]
    fn a_window_is_asked_for_again_only_when_the_last_request_is_old() {
        let blank = desktop(200, 120, |_, _| [0, 0, 0]);
        let presses = |s: &mut ExerciseScript, turns: usize| {
            (0..turns)
                .filter(|_| {
                    let out = s.next(&request_with(&blank)).unwrap().unwrap();
                    out[0]["actions"][0]["type"] == "click"
                })
                .count()
        };
        // A recent request: no second launch however many turns pass.
        let mut s = impatient(Duration::from_secs(3600), Duration::from_secs(3600));
        s.next(&request_with(&blank)).unwrap();
        assert_eq!(presses(&mut s, 20), 0);
        // An old one (here at once): asked again, by the launcher.
        let mut s = impatient(Duration::from_secs(3600), Duration::ZERO);
        s.next(&request_with(&blank)).unwrap();
        let out = s.next(&request_with(&blank)).unwrap().unwrap();
        assert_eq!(
            out[0]["actions"][0],
            json!({"type": "click", "button": "left", "x": 17, "y": 105})
        );
        assert_eq!(presses(&mut s, 3), 3);
    }

    #[test]
    fn the_panels_launchers_are_found_left_to_right_and_nothing_else() {
        let f = Frame::from_data_url(&desktop(1280, 800, |_, _| [0x4c, 0x6a, 0x88])).unwrap();
        assert_eq!(f.panel(), Some((770, 800)));
        assert_eq!(f.launchers(), vec![(17, 785), (51, 785), (85, 785)]);
        // A screen without the panel: none.
        let bare = Frame::from_data_url(&png_url(640, 400, |_, _| [0x4c, 0x6a, 0x88])).unwrap();
        assert_eq!(bare.panel(), None);
        assert!(bare.launchers().is_empty());
        // A window covering the screen but the panel: still found.
        let busy =
            Frame::from_data_url(&desktop(640, 400, |x, _| [(x % 251) as u8, 9, 200])).unwrap();
        assert_eq!(busy.launchers().len(), 3);
    }

    /// A 1280x800 frame drawn by `color`, decoded as the script sees it.
    fn frame(color: impl Fn(u32, u32) -> [u8; 3]) -> Frame {
        let url = png_url(1280, 800, color);
        Frame::from_data_url(&url).unwrap()
    }

    const GREY: [u8; 3] = [0xe8, 0xe8, 0xe7];

    #[test]
    fn the_editor_is_recognised_with_and_without_tabs_and_the_browser_is_not() {
        // One document: title and menu bar, then white.
        let single = frame(|_, y| if y < 48 { GREY } else { [255; 3] });
        assert!(single.editor_visible());
        // Two documents (Mousepad opens a second launch as a tab): a tab
        // bar over rows 50..91, the current tab underlined.
        let tabbed = frame(|x, y| match y {
            0..50 => GREY,
            87..91 if x >= 645 => GTK_SELECTED,
            50..91 => GREY,
            _ => [255; 3],
        });
        assert!(tabbed.editor_visible());
        assert!(
            !tabbed.save_dialog_visible(),
            "a tab's underline is not the Save dialog"
        );
        // A browser: its toolbar down to row 85, a white page below.
        let browser = frame(|_, y| if y < 86 { GREY } else { [255; 3] });
        assert!(!browser.editor_visible());
        // The Save dialog's selected place, over the editor.
        let dialog = frame(|x, y| {
            if (300..500).contains(&x) && (300..330).contains(&y) {
                GTK_SELECTED
            } else if y < 48 {
                GREY
            } else {
                [255; 3]
            }
        });
        assert!(dialog.save_dialog_visible());
        assert!(!dialog.editor_alone());
        // The dialog behind its completion popup: its selection is grey,
        // but it still covers the middle of the screen.
        let backdrop = frame(|x, y| {
            let dialog = (340..940).contains(&x) && (150..650).contains(&y);
            if dialog || y < 48 { GREY } else { [255; 3] }
        });
        assert!(!backdrop.save_dialog_visible());
        assert!(!backdrop.editor_alone());
        assert!(single.editor_alone());
        assert!(tabbed.editor_alone());
    }

    #[test]
    fn checks_compare_exactly() {
        let line = json!({"seq": 1, "name": FORM_NAME, "email": FORM_EMAIL,
                          "message": FORM_MESSAGE.replace('\n', "\r\n")})
        .to_string();
        assert!(check_submission(line.as_bytes()).ok);
        let wrong = json!({"seq": 1, "name": "Zoe", "email": FORM_EMAIL, "message": FORM_MESSAGE})
            .to_string();
        assert!(!check_submission(wrong.as_bytes()).ok);
        assert!(!check_submission(b"").ok);
        assert!(check_note(Some(NOTE_TEXT.as_bytes())).ok);
        assert!(!check_note(Some(b"x")).ok);
        assert!(!check_note(None).ok);
    }
}
