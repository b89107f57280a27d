//! One question asked of the operator on the terminal and in the view at
//! once (docs/contract.md rule 50): the first answer wins, the other prompt closes, and the
//! view's question is closed with who answered. A view's answer is a button
//! (a word from the question's own list), the equivalent of `yes` typed on
//! the terminal; nothing a page or the model writes can be one.
//!
//! Without a terminal, a question waits for the view only while a viewer
//! is connected when it is asked; otherwise it is denied at once, as
//! before (docs/contract.md rule 10).

use std::time::{Duration, Instant};

use super::{SharedTerminal, StopCheck};
use sandtop_control::served::{Served, ViewAnswer};
use sandtop_control::wire::QuestionKind;

/// The longest a question waits for a viewer when no run stop can close
/// it (the egress proxy's origin questions have their own timeout too).
const VIEW_ONLY_WAIT: Duration = Duration::from_secs(600);

/// What the operator said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A line typed on the terminal.
    Typed(String),
    /// A button in the view.
    View(ViewAnswer),
}

/// A question: its words for the terminal and the view.
pub struct Question<'a> {
    pub kind: QuestionKind,
    /// One line, host words.
    pub title: String,
    /// The details (inert already), printed before the prompt.
    pub text: String,
    /// What the view shows, when not `text`.
    pub view_text: Option<String>,
    /// The marked screenshot's file name in the run folder.
    pub marked: Option<String>,
    pub answers: &'static [&'static str],
    pub prompt: &'a str,
}

/// Where a question is asked.
pub struct Ask<'a> {
    pub terminal: Option<&'a SharedTerminal>,
    pub view: Option<&'a Served>,
    pub stop: Option<&'a StopCheck>,
}

impl Ask<'_> {
    /// Asks `q`; `None` when nobody answered (no terminal and no viewer,
    /// the terminal closed, the run stopped). `word_of` names a typed
    /// answer for the view's record (`approve`, `deny`, ...).
    pub fn ask(&self, q: Question<'_>, word_of: impl Fn(&str) -> &'static str) -> Option<Said> {
        let id = self.view.map(|v| {
            v.open(
                q.kind,
                q.title.clone(),
                q.view_text.clone().unwrap_or_else(|| q.text.clone()),
                q.marked.clone(),
                q.answers,
            )
        });
        let said = match self.terminal {
            Some(t) => match self.terminal_when_free(t, id) {
                Ok(mut t) => {
                    t.say(&q.text);
                    t.prompt_or(q.prompt, self.view.zip(id))
                }
                // Answered in the view (or the run stopped) while another
                // question held the terminal.
                Err(said) => said,
            },
            None => match (self.view, id) {
                (Some(v), Some(id)) if v.viewers() > 0 => self.wait_view(v, id),
                _ => None,
            },
        };
        if let (Some(v), Some(id)) = (self.view, id) {
            let (by, word) = match &said {
                Some(Said::Typed(line)) => ("terminal", word_of(line)),
                Some(Said::View(a)) => ("view", word_static(&a.word)),
                None if self.stopped() => ("stop", "deny"),
                None => ("timeout", "deny"),
            };
            v.close(id, by, word);
        }
        said
    }

    fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s())
    }

    fn wait_view(&self, v: &Served, id: u64) -> Option<Said> {
        let until = Instant::now() + VIEW_ONLY_WAIT;
        while Instant::now() < until && !self.stopped() && v.is_open(id) {
            if let Some(a) = v.wait_answer(id, Duration::from_millis(20)) {
                return Some(Said::View(a));
            }
        }
        None
    }

    /// The terminal, once no other question holds it; meanwhile the view
    /// may answer this one (`Err(Some(..))`), or the run stop (`Err(None)`).
    fn terminal_when_free<'t>(
        &self,
        t: &'t SharedTerminal,
        id: Option<u64>,
    ) -> Result<std::sync::MutexGuard<'t, super::Terminal>, Option<Said>> {
        loop {
            match t.try_lock() {
                Ok(g) => return Ok(g),
                Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
            if let (Some(v), Some(id)) = (self.view, id)
                && let Some(a) = v.answer_of(id)
            {
                return Err(Some(Said::View(a)));
            }
            if self.stopped() {
                return Err(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A view answer's word as one of the fixed words (it was checked against
/// the question's list already).
fn word_static(w: &str) -> &'static str {
    match w {
        "approve" => "approve",
        "cancel" => "cancel",
        "text" => "text",
        _ => "deny",
    }
}

/// `yes` approves; anything else denies.
pub fn yes_word(line: &str) -> &'static str {
    if line.trim().eq_ignore_ascii_case("yes") {
        "approve"
    } else {
        "deny"
    }
}
