//! The operator's terminal: lines read by one thread, prompts that race
//! the view's answer (`super::ask`), secrets read with echo off.

use std::io::Write as _;
use std::path::Path;
use std::sync::mpsc;

use sandtop_protocol::sign_in::Secret;

use super::{Decision, StopCheck, ask};

/// Lines typed on the controlling terminal, read by one thread so that
/// prompts and queued guidance never race for input.
///
/// Whatever it shows that came from the model, the guest or a page goes
/// through `term::safe` first (docs/contract.md rule 23b: site content cannot
/// clear the screen, paint a fake prompt or write the clipboard).
pub struct Terminal {
    pub(super) lines: mpsc::Receiver<String>,
    pub(super) out: Box<dyn std::io::Write + Send>,
    pub(super) guidance: Vec<String>,
    /// When the run has stopped, an open prompt closes unanswered.
    pub(super) stop: Option<StopCheck>,
    /// The terminal device itself, to turn echo off for secrets; `None`
    /// (a test's buffer): secrets are never read.
    pub(super) tty: Option<std::fs::File>,
}

/// Reads lines from the terminal and sends them, each without its line
/// end. Bytes are read straight into the line in progress; what a line
/// held is wiped from this thread's memory once it is sent (a line may be a
/// password typed with echo off).
fn read_lines(mut input: std::fs::File, tx: &mpsc::Sender<String>) {
    use std::io::Read as _;
    use zeroize::Zeroize as _;
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut buf = [0u8; 256];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                line.zeroize();
                if tx.send(text).is_err() {
                    buf.zeroize();
                    return;
                }
            } else {
                line.push(b);
            }
        }
        buf.zeroize();
    }
    line.zeroize();
}

/// Echo off on a terminal until dropped (restored then, on every path).
struct EchoOff<'a> {
    tty: &'a std::fs::File,
    saved: rustix::termios::Termios,
}

impl<'a> EchoOff<'a> {
    fn new(tty: &'a std::fs::File) -> Option<EchoOff<'a>> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let saved = tcgetattr(tty).ok()?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        // The line end is not shown either; ICANON keeps line editing.
        quiet.local_modes.remove(LocalModes::ECHONL);
        tcsetattr(tty, OptionalActions::Now, &quiet).ok()?;
        // Set, then read back: a device that ignored it is refused.
        let now = tcgetattr(tty).ok()?;
        if now.local_modes.contains(LocalModes::ECHO) {
            let _ = tcsetattr(tty, OptionalActions::Now, &saved);
            return None;
        }
        Some(EchoOff { tty, saved })
    }
}

impl Drop for EchoOff<'_> {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            self.tty,
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("guidance", &self.guidance.len())
            .finish_non_exhaustive()
    }
}

impl Terminal {
    /// Opens `/dev/tty`; `None` when there is no controlling terminal.
    pub fn open() -> Option<Terminal> {
        Terminal::open_path(Path::new("/dev/tty"))
    }

    /// Opens a terminal device (tests use a pseudo-terminal). Lines are
    /// read by one thread without a buffer of its own beyond the line in
    /// progress, which is wiped once sent (a line may hold a secret).
    pub fn open_path(path: &Path) -> Option<Terminal> {
        let input = std::fs::File::open(path).ok()?;
        let out = std::fs::OpenOptions::new().write(true).open(path).ok()?;
        let tty = out.try_clone().ok()?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("tty".into())
            .spawn(move || read_lines(input, &tx))
            .ok()?;
        let mut t = Terminal::from_parts(rx, Box::new(out));
        t.tty = Some(tty);
        Some(t)
    }

    /// A terminal reading `lines` and writing to `out` (tests use it with
    /// a buffer).
    pub fn from_parts(
        lines: mpsc::Receiver<String>,
        out: Box<dyn std::io::Write + Send>,
    ) -> Terminal {
        Terminal {
            lines,
            out,
            guidance: Vec::new(),
            stop: None,
            tty: None,
        }
    }

    /// Prints `prompt` and reads one line with echo off; `None` when echo
    /// cannot be turned off (the value would show), the terminal closed or
    /// the run stopped. Lines typed before the prompt stay guidance.
    pub fn read_secret(&mut self, prompt: &str) -> Option<Secret> {
        let tty = self.tty.as_ref()?.try_clone().ok()?;
        let quiet = EchoOff::new(&tty)?;
        // A line typed before this prompt could be the value, typed early
        // (and shown): it is dropped, never queued as guidance for the
        // model.
        let mut dropped = false;
        while let Ok(early) = self.lines.try_recv() {
            drop(Secret::new(early));
            dropped = true;
        }
        if dropped {
            self.say("(what was typed before this question was discarded)\n");
        }
        let line = self.prompt(prompt).map(Secret::new);
        drop(quiet);
        self.say("\n");
        line
    }

    pub(super) fn say(&mut self, text: &str) {
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
    }

    /// Prints `prompt` and returns the next line typed. Lines typed before
    /// the prompt were guidance and stay queued.
    pub(super) fn prompt(&mut self, prompt: &str) -> Option<String> {
        match self.prompt_or(prompt, None) {
            Some(ask::Said::Typed(line)) => Some(line),
            _ => None,
        }
    }

    /// [`Terminal::prompt`], racing the view's answer to question `view`
    /// (the first answer wins; the view's closes this prompt).
    pub(super) fn prompt_or(
        &mut self,
        prompt: &str,
        view: Option<(&sandtop_control::served::Served, u64)>,
    ) -> Option<ask::Said> {
        while let Ok(early) = self.lines.try_recv() {
            if !early.trim().is_empty() {
                self.guidance.push(early);
            }
        }
        self.say(prompt);
        loop {
            match self
                .lines
                .recv_timeout(std::time::Duration::from_millis(20))
            {
                Ok(line) => return Some(ask::Said::Typed(line)),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some((v, id)) = view
                        && let Some(a) = v.answer_of(id)
                    {
                        // The view's words are the operator's button, never
                        // page text: only a word from the question's list.
                        self.say(&format!("\n(answered in the view: {})\n", a.word));
                        return Some(ask::Said::View(a));
                    }
                    if self.stopped() {
                        // Closed at once: whatever is typed now answers
                        // nothing.
                        self.say("\n(the run stopped: this question is closed)\n");
                        return None;
                    }
                }
            }
        }
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s())
    }

    pub(super) fn yes(&mut self, prompt: &str) -> Decision {
        match self.prompt(prompt) {
            Some(a) if a.trim().eq_ignore_ascii_case("yes") => Decision::Approve,
            Some(a) => Decision::Deny(format!(
                "the operator answered `{}`",
                a.trim().chars().take(40).collect::<String>()
            )),
            None if self.stopped() => Decision::Deny("the run stopped during the question".into()),
            None => Decision::Deny("the terminal closed".into()),
        }
    }
}

/// A terminal shared by the run's prompts and the egress proxy's origin
/// questions (which arrive while the run waits on the guest).
pub type SharedTerminal = std::sync::Arc<std::sync::Mutex<Terminal>>;

pub(super) fn lock(t: &SharedTerminal) -> std::sync::MutexGuard<'_, Terminal> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}
