//! Approvals (docs/contract.md rules 10-12): who may say yes, and how.
//!
//! 1. A computer call with pending safety checks runs only when *every*
//!    check is approved. The answer must be an explicit `yes` typed on the
//!    terminal, the Approve button of `host-cli view` (a word from the
//!    question's own list, see `ask`), or a rule in an operator-written
//!    policy file; anything else, no terminal and no viewer included,
//!    denies. The model's own text never reaches this module as an answer.
//! 2. With `--confirm-actions` each action, and the final screenshot, is
//!    shown and must be confirmed the same way; a refusal stops the batch.
//! 3. The operator sees the check (code, message), the actions it covers
//!    and a copy of the last screenshot with every target marked.
//! 4. `--approve-scripted-checks` approves checks raised by the offline
//!    scripted model only; the runner refuses the flag with a real model.
//!
//! Why one file (~800 lines): one `Operator` implementation whose every
//! question (checks, confirmations, browser calls, sign-in, `ask_user`,
//! origins) is worded here, side by side so their wording stays alike; the
//! terminal is in `terminal`, the terminal/view race in `ask`, the tests
//! apart; who decided each question ([`DecidedBy`]) is noted on every path.

use std::path::{Path, PathBuf};

use sandtop_protocol::Action;
use serde::Deserialize;

use sandtop_runfolder::items::SafetyCheck;

use crate::model::scripted::ScriptedOnly;
use crate::sign_in::rules::{Answer as SignInAnswer, Credentials};
use sandtop_control::served::Served;
use sandtop_control::wire::QuestionKind;
use sandtop_hostkit::term;

mod ask;
mod terminal;

use terminal::lock;
pub use terminal::{SharedTerminal, Terminal};

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny(String),
}

/// Who made a decision on a safety check, an action or a browser call:
/// recorded beside it in the trajectory, shown in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// The operator, typing on the terminal.
    Terminal,
    /// The operator, with a button in `host-cli view`.
    View,
    /// The operator's `--approve-policy` file.
    Policy,
    /// `--approve-scripted-checks`, for a question of the scripted model.
    Scripted,
    /// No one could be asked or no one answered (the run stopped, the
    /// terminal closed): denied by default.
    Nobody,
}

impl DecidedBy {
    /// The trajectory's word.
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Terminal => "terminal",
            DecidedBy::View => "view",
            DecidedBy::Policy => "policy",
            DecidedBy::Scripted => "scripted",
            DecidedBy::Nobody => "nobody",
        }
    }
}

/// What the operator is asked about a call's safety checks.
#[derive(Debug)]
pub struct CheckRequest<'a> {
    pub call_id: &'a str,
    pub checks: &'a [SafetyCheck],
    pub actions: &'a [Action],
    /// The last screenshot with the actions' targets marked, when there is one.
    pub marked: Option<&'a Path>,
    /// Asked again because the screen changed around the targets since an
    /// approval: the screenshot that approval was given on, marked
    /// (`marked` is then the fresh capture).
    pub changed_since: Option<&'a Path>,
    /// The runner's model, when it is the scripted one.
    pub scripted: Option<ScriptedOnly>,
}

/// What the operator is asked before one action.
#[derive(Debug)]
pub struct ActionRequest<'a> {
    pub call_id: &'a str,
    /// `None` for the final screenshot of the call.
    pub action: Option<&'a Action>,
    pub index: usize,
    pub of: usize,
    /// The screen the action is asked about with its target marked
    /// (the model's screenshot for the first action, a capture taken just
    /// before the question for a later one), when there is one.
    pub marked: Option<&'a Path>,
    /// Asked again because the screen changed around the target since an
    /// approval: the marked screen that approval was given on (`marked`
    /// is then the fresh capture).
    pub changed_since: Option<&'a Path>,
}

/// What the operator is asked before a browser call: a state-changing
/// member, or a read named by `--confirm-reads`.
#[derive(Debug)]
pub struct BrowserRequest<'a> {
    pub call_id: &'a str,
    pub member: &'a str,
    /// A read (`--confirm-reads`): nothing of the page has been read yet.
    pub read: bool,
    /// What the call is, made inert ([`crate::browser::toolset::prompt`]):
    /// the member, its validated arguments, the target's role and label,
    /// the active tab's origin and title before the call.
    pub description: &'a str,
    /// The runner's model, when it is the scripted one.
    pub scripted: Option<ScriptedOnly>,
}

/// What the operator is asked for a sign-in: the checked request, whose
/// every field names a page input the driver bound on the credential
/// origin's page.
#[derive(Debug)]
pub struct SignInPrompt<'a> {
    pub call_id: &'a str,
    pub request: &'a crate::sign_in::rules::Request,
}

/// What the operator is told once a sign-in's values went in: the origin
/// whose page got them and which fields, and where the values came from
/// (`file`, `terminal`). Never a value.
#[derive(Debug)]
pub struct SignedIn<'a> {
    pub call_id: &'a str,
    pub origin: &'a sandtop_egress::policy::Origin,
    pub fields: &'a [&'a crate::sign_in::rules::Field],
    pub source: &'a str,
}

impl SignedIn<'_> {
    /// One line, inert (labels come from the model).
    pub fn line(&self) -> String {
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|f| format!("{} ({})", term::safe_line(&f.label), f.kind.as_str()))
            .collect();
        format!(
            "sign-in {}: {} received {} from the {}",
            term::safe_line(self.call_id),
            self.origin,
            fields.join(", "),
            match self.source {
                "file" => "--credentials file",
                _ => "terminal",
            }
        )
    }
}

/// The human (or their policy) on the other side of the loop.
pub trait Operator: Send {
    fn approve_checks(&mut self, req: &CheckRequest<'_>) -> Decision;
    fn confirm_action(&mut self, req: &ActionRequest<'_>) -> Decision;
    /// Approves one browser call. Only an explicit approval runs it; an
    /// operator that does not know browser calls refuses them.
    fn confirm_browser(&mut self, _req: &BrowserRequest<'_>) -> Decision {
        Decision::Deny("this operator does not approve browser calls".into())
    }
    /// Answers a sign-in request ([`super::sign_in`]): the values, by a
    /// channel the model never sees, or a refusal. An operator that does
    /// not know sign-in declines.
    fn sign_in(&mut self, _req: &SignInPrompt<'_>) -> SignInAnswer {
        SignInAnswer::Decline {
            why: "this operator does not answer sign-in requests".into(),
        }
    }
    /// Tells the operator that a sign-in's values went into the page
    /// (which origin, which fields, from where): a `--credentials` file
    /// answers without a question, and the operator still hears of it.
    fn signed_in(&mut self, _told: &SignedIn<'_>) {}
    /// Answers a question from the model (`ask_user`); `None` = no answer.
    fn ask(&mut self, question: &str) -> Option<String>;
    /// Guidance typed while the run goes, to append at the end of the turn.
    fn take_guidance(&mut self) -> Vec<String>;
    /// Tells the operator how to know that the run has stopped (Ctrl-C,
    /// the time budget): a prompt open then closes at once, unanswered.
    fn on_stop(&mut self, _stopped: StopCheck) {}
    /// Who made the last decision of `approve_checks`, `confirm_action`
    /// or `confirm_browser`; `None` when this operator does not say.
    fn decided_by(&self) -> Option<DecidedBy> {
        None
    }
}

/// Whether the run has stopped.
pub type StopCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// An operator-written policy (`--approve-policy FILE`, JSON):
/// `{"approve_check_codes": ["sensitive_domain"], "confirm_actions": "approve",
///   "approve_browser_members": ["click", "type"]}`.
/// Codes not listed, and checks without a code, stay undecided; so do
/// browser members not listed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub approve_check_codes: Vec<String>,
    /// `approve` or `deny` every action confirmation; absent = undecided.
    #[serde(default)]
    pub confirm_actions: Option<PolicyAnswer>,
    /// Browser members whose calls this policy approves (state-changing
    /// members, and reads named by `--confirm-reads`). The URL policy
    /// still applies to navigate and new_tab.
    #[serde(default)]
    pub approve_browser_members: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAnswer {
    Approve,
    Deny,
}

/// Why an approval policy file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    #[error("reading the approval policy {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the approval policy {} is invalid", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// `member` is made inert for a terminal.
    #[error(
        "the approval policy {}: approve_browser_members: `{member}` is not a browser member",
        path.display()
    )]
    NotAMember { path: PathBuf, member: String },
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, PolicyFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let policy: Policy =
            serde_json::from_str(&text).map_err(|source| PolicyFileError::Invalid {
                path: path.to_path_buf(),
                source,
            })?;
        if let Some(m) = policy
            .approve_browser_members
            .iter()
            .find(|m| !crate::browser::toolset::is_member(m))
        {
            return Err(PolicyFileError::NotAMember {
                path: path.to_path_buf(),
                member: term::safe_line(m),
            });
        }
        Ok(policy)
    }

    fn checks(&self, checks: &[SafetyCheck]) -> Option<Decision> {
        let all = checks.iter().all(|c| {
            c.code
                .as_ref()
                .is_some_and(|code| self.approve_check_codes.iter().any(|a| a == code))
        });
        all.then_some(Decision::Approve)
    }
}

/// Asks the operator whether the guest may reach `origin`: approve, deny
/// or cancel, on the terminal or in the view; anything else, or no
/// answer, is deny (docs/contract.md rule 21).
pub fn ask_origin(
    t: Option<&SharedTerminal>,
    view: Option<&Served>,
    origin: &str,
) -> sandtop_egress::proxy::Answer {
    use sandtop_egress::proxy::Answer;
    if t.is_none() && view.is_none_or(|v| v.viewers() == 0) {
        return Answer::Deny;
    }
    let word = |a: &str| match a.trim().to_ascii_lowercase().as_str() {
        "approve" => "approve",
        "cancel" => "cancel",
        _ => "deny",
    };
    let q = ask::Question {
        kind: QuestionKind::Origin,
        title: format!("The guest wants to reach {}", term::safe_line(origin)),
        text: format!(
            "\n== The guest wants to reach {} ==\nSite content is untrusted; approving lasts for this session.\n",
            term::safe_line(origin)
        ),
        view_text: None,
        marked: None,
        answers: &["approve", "deny", "cancel"],
        prompt: "Allow this origin? [approve/deny/cancel; default: deny] ",
    };
    let said = ask::Ask {
        terminal: t,
        view,
        stop: None,
    }
    .ask(q, word);
    match said {
        Some(ask::Said::Typed(a)) => match word(&a) {
            "approve" => Answer::Approve,
            "cancel" => Answer::Cancel,
            _ => Answer::Deny,
        },
        Some(ask::Said::View(a)) => match a.word.as_str() {
            "approve" => Answer::Approve,
            "cancel" => Answer::Cancel,
            _ => Answer::Deny,
        },
        None => Answer::Deny,
    }
}

/// Asks an approve/deny question in `host-cli view` only (no terminal):
/// what `host-cli mcp` asks there when its client cannot ask the person
/// (docs/contract.md, `host-cli mcp`). It waits while a viewer is
/// connected when it is asked, until a button answers, `stop` says the
/// call ended, or the question's time runs out; with no viewer it denies
/// at once. `text` is shown as data (inert already).
pub fn ask_in_view(
    view: &Served,
    stop: Option<StopCheck>,
    kind: QuestionKind,
    title: String,
    text: String,
) -> (DecidedBy, Decision) {
    let a = Approvals {
        view: Some(view.clone()),
        stop: Stop(stop),
        ..Approvals::default()
    };
    let q = ask::Question {
        kind,
        title,
        text: text.clone(),
        view_text: Some(text),
        marked: None,
        answers: &["approve", "deny"],
        prompt: "",
    };
    a.ask_someone(q, "no one is watching in host-cli view (denied by default)")
}

/// The operator of a run: a policy, a terminal, both, or neither.
#[derive(Debug, Default)]
pub struct Approvals {
    pub policy: Option<Policy>,
    pub terminal: Option<SharedTerminal>,
    /// `--approve-scripted-checks`: approve the checks and browser calls
    /// of a question that carries the scripted model's proof
    /// ([`ScriptedOnly`]), and only those.
    pub scripted_checks: bool,
    /// `--credentials FILE`: sign-in values by exact origin.
    pub credentials: Option<Credentials>,
    /// The run's control socket: questions are asked in the view too
    /// (never sign-in values, which stay on the terminal).
    pub view: Option<Served>,
    /// When the run has stopped (a question waiting on the view alone
    /// closes then).
    pub stop: Stop,
    /// Who made the last decision ([`Operator::decided_by`]).
    pub last_by: Option<DecidedBy>,
}

/// Whether the run has stopped, once the runner says how to know.
#[derive(Default, Clone)]
pub struct Stop(Option<StopCheck>);

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Stop(set)"
        } else {
            "Stop(unset)"
        })
    }
}

impl Approvals {
    fn asker(&self) -> ask::Ask<'_> {
        ask::Ask {
            terminal: self.terminal.as_ref(),
            view: self.view.as_ref(),
            stop: self.stop.0.as_ref(),
        }
    }

    /// Someone who can answer: a terminal, or a viewer connected now.
    fn someone(&self) -> bool {
        self.terminal.is_some() || self.view.as_ref().is_some_and(|v| v.viewers() > 0)
    }

    /// An approve/deny question; `nobody` is the denial when no one can
    /// be asked.
    fn decide(&mut self, q: ask::Question<'_>, nobody: &str) -> Decision {
        let (by, decision) = self.ask_someone(q, nobody);
        self.decided(by, decision)
    }

    fn ask_someone(&self, q: ask::Question<'_>, nobody: &str) -> (DecidedBy, Decision) {
        if !self.someone() {
            return (DecidedBy::Nobody, Decision::Deny(nobody.into()));
        }
        match self.asker().ask(q, ask::yes_word) {
            Some(ask::Said::Typed(a)) if ask::yes_word(&a) == "approve" => {
                (DecidedBy::Terminal, Decision::Approve)
            }
            Some(ask::Said::Typed(a)) => (
                DecidedBy::Terminal,
                Decision::Deny(format!(
                    "the operator answered `{}`",
                    a.trim().chars().take(40).collect::<String>()
                )),
            ),
            Some(ask::Said::View(a)) if a.word == "approve" => (DecidedBy::View, Decision::Approve),
            Some(ask::Said::View(_)) => (
                DecidedBy::View,
                Decision::Deny("the operator denied it in the view".into()),
            ),
            None if self.stop.0.as_ref().is_some_and(|s| s()) => (
                DecidedBy::Nobody,
                Decision::Deny("the run stopped during the question".into()),
            ),
            None if self.terminal.is_some() => (
                DecidedBy::Nobody,
                Decision::Deny("the terminal closed".into()),
            ),
            None => (
                DecidedBy::Nobody,
                Decision::Deny("no answer came from the view".into()),
            ),
        }
    }

    /// Notes who decided, for [`Operator::decided_by`].
    fn decided(&mut self, by: DecidedBy, d: Decision) -> Decision {
        self.last_by = Some(by);
        d
    }
}

/// The sign-in request as the operator sees it: the origin (the one thing
/// to verify), the model's reason and labels made inert and indented, the
/// methods numbered.
fn sign_in_text(p: &SignInPrompt<'_>) -> String {
    let req = p.request;
    let mut text = format!(
        "\n== Sign-in requested (call {}) ==\n  Credentials go to: {}\n",
        term::safe_line(p.call_id),
        req.origin
    );
    if let Some(r) = &req.reason {
        text.push_str(&format!(
            "  The model says why:\n  | {}\n",
            term::safe_line(r)
        ));
    }
    for f in &req.fields {
        text.push_str(&format!(
            "  field {}: {} ({}{})\n",
            term::safe_line(&f.id),
            term::safe_line(&f.label),
            f.kind.as_str(),
            if f.required { ", required" } else { "" }
        ));
    }
    for (i, o) in req.options.iter().enumerate() {
        text.push_str(&format!(
            "  method {}: {} (fields: {})\n",
            i + 1,
            term::safe_line(&o.label),
            term::safe_line(&o.field_ids.join(", "))
        ));
    }
    text.push_str(
        "The values go only into the inputs the browser driver bound on a page loaded from that origin.\n",
    );
    text.push_str(
        "Only sign in if you trust this origin. The model and the page's words never answer this.\n",
    );
    text
}

/// A file's name, for the view (which serves the run folder's files).
fn file_name(p: Option<&Path>) -> Option<String> {
    p.and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
}

/// An action as the operator sees it: its JSON, made safe to print (typed
/// text and key names come from the model).
fn describe_action(a: &Action) -> String {
    term::safe_line(&serde_json::to_string(a).unwrap_or_else(|_| a.kind().to_string()))
}

impl Operator for Approvals {
    fn approve_checks(&mut self, req: &CheckRequest<'_>) -> Decision {
        if self.scripted_checks && req.scripted.is_some() {
            return self.decided(DecidedBy::Scripted, Decision::Approve);
        }
        if let Some(d) = self.policy.as_ref().and_then(|p| p.checks(req.checks)) {
            return self.decided(DecidedBy::Policy, d);
        }
        let mut text = format!(
            "\n== Safety check{} on computer call {} ==\n",
            if req.checks.len() > 1 { "s" } else { "" },
            term::safe_line(req.call_id)
        );
        for c in req.checks {
            text.push_str(&format!(
                "  [{}] {}\n",
                term::safe_line(c.code.as_deref().unwrap_or("no code")),
                term::safe_line(c.message.as_deref().unwrap_or("(no message)"))
            ));
        }
        text.push_str("It covers these actions:\n");
        for (i, a) in req.actions.iter().enumerate() {
            text.push_str(&format!("  {i}: {}\n", describe_action(a)));
        }
        if let Some(p) = req.marked {
            text.push_str(&format!(
                "Targets are marked on {}\n",
                term::safe_line(&p.display().to_string())
            ));
        }
        if let Some(p) = req.changed_since {
            text.push_str(&format!(
                "ASKED AGAIN: the screen changed around these targets since you approved them.\n  \
                 Then: {}\n  Now:  the file above\n",
                term::safe_line(&p.display().to_string())
            ));
        }
        let q = ask::Question {
            kind: QuestionKind::SafetyCheck,
            title: format!(
                "Safety check{} on computer call {}",
                if req.checks.len() > 1 { "s" } else { "" },
                term::safe_line(req.call_id)
            ),
            text,
            view_text: None,
            marked: file_name(req.marked),
            answers: &["approve", "deny"],
            prompt: "Approve and run these actions? Type `yes` to approve, anything else denies: ",
        };
        self.decide(
            q,
            "no terminal to ask on and no policy approves these checks (denied by default)",
        )
    }

    fn confirm_action(&mut self, req: &ActionRequest<'_>) -> Decision {
        if let Some(answer) = self.policy.as_ref().and_then(|p| p.confirm_actions) {
            let d = match answer {
                PolicyAnswer::Approve => Decision::Approve,
                PolicyAnswer::Deny => Decision::Deny("the approval policy denies actions".into()),
            };
            return self.decided(DecidedBy::Policy, d);
        }
        let what = match req.action {
            Some(a) => format!(
                "action {}/{} of {}: {}",
                req.index + 1,
                req.of,
                term::safe_line(req.call_id),
                describe_action(a)
            ),
            None => format!("the final screenshot of {}", term::safe_line(req.call_id)),
        };
        let prompt = format!("Run {what}? [yes/no] ");
        let mut text = String::new();
        if let Some(p) = req.marked {
            text.push_str(&format!(
                "\nIts target is marked on {}\n",
                term::safe_line(&p.display().to_string())
            ));
        }
        if let Some(p) = req.changed_since {
            text.push_str(&format!(
                "ASKED AGAIN: the screen changed around this action since you confirmed it.\n  \
                 Then: {}\n  Now:  the file above\n",
                term::safe_line(&p.display().to_string())
            ));
        }
        let q = ask::Question {
            kind: QuestionKind::ConfirmAction,
            title: format!("Run {what}?"),
            text,
            view_text: Some(what.clone()),
            marked: file_name(req.marked),
            answers: &["approve", "deny"],
            prompt: &prompt,
        };
        self.decide(q, "no terminal to confirm actions on (denied by default)")
    }

    fn confirm_browser(&mut self, req: &BrowserRequest<'_>) -> Decision {
        if self.scripted_checks && req.scripted.is_some() {
            return self.decided(DecidedBy::Scripted, Decision::Approve);
        }
        if self
            .policy
            .as_ref()
            .is_some_and(|p| p.approve_browser_members.iter().any(|m| m == req.member))
        {
            return self.decided(DecidedBy::Policy, Decision::Approve);
        }
        let what = if req.read {
            "Browser read"
        } else {
            "Browser action"
        };
        // The description is inert already; each line is indented so
        // that none of it can pass for one of our prompts.
        let q = ask::Question {
            kind: QuestionKind::Browser,
            title: format!("{what} {}", term::safe_line(req.call_id)),
            text: format!(
                "\n== {what} {} ==\n  | {}\nPage content is untrusted: nothing on the page or in the model's words approves.\n",
                term::safe_line(req.call_id),
                term::safe(req.description).replace('\n', "\n  | ")
            ),
            view_text: Some(term::safe(req.description)),
            marked: None,
            answers: &["approve", "deny"],
            prompt: "Run it? Type `yes` to approve, anything else refuses: ",
        };
        self.decide(
            q,
            "no terminal to ask on and no policy approves this browser member (denied by default)",
        )
    }

    fn sign_in(&mut self, p: &SignInPrompt<'_>) -> SignInAnswer {
        let req = p.request;
        if let Some(c) = &self.credentials {
            match c.answer(req) {
                Ok(Some(a)) => return a,
                Ok(None) => {}
                Err(e) => {
                    return SignInAnswer::Decline {
                        why: sandtop_hostkit::chain::chain(&e),
                    };
                }
            }
        }
        let Some(t) = self.terminal.as_ref() else {
            return SignInAnswer::Decline {
                why: format!(
                    "no terminal to ask on and no --credentials entry for {}",
                    req.origin
                ),
            };
        };
        let mut t = lock(t);
        t.say(&sign_in_text(p));
        if t.yes("Enter the values for this origin? Type `yes` to go on, anything else declines: ")
            != Decision::Approve
        {
            return SignInAnswer::Decline {
                why: "the operator declined".into(),
            };
        }
        let option = if req.options.is_empty() {
            None
        } else {
            let a = t.prompt("Which method? Type its number (empty declines): ");
            let n = a
                .as_deref()
                .map(str::trim)
                .and_then(|a| a.parse::<usize>().ok());
            match n
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| req.options.get(i))
            {
                Some(o) => Some(o.id.clone()),
                None => {
                    return SignInAnswer::Decline {
                        why: "no method was chosen".into(),
                    };
                }
            }
        };
        let mut values = Vec::new();
        for f in req.fields_of(option.as_deref()) {
            let label = format!(
                "{} ({}{}, not shown as you type): ",
                term::safe_line(&f.label),
                f.kind.as_str(),
                if f.required {
                    ", required"
                } else {
                    ", empty to leave out"
                }
            );
            let Some(v) = t.read_secret(&label) else {
                return SignInAnswer::Decline {
                    why: if t.tty.is_none() {
                        "this terminal cannot hide what is typed".into()
                    } else {
                        "the terminal closed, or echo could not be turned off".into()
                    },
                };
            };
            if !v.is_empty() {
                values.push((f.id.clone(), v));
            }
        }
        t.say(
            "The values go into the page now; they are not shown, logged or sent to the model.\n",
        );
        SignInAnswer::Submit {
            option,
            values,
            source: "terminal",
        }
    }

    fn signed_in(&mut self, told: &SignedIn<'_>) {
        let line = told.line();
        match self.terminal.as_ref() {
            Some(t) => lock(t).say(&format!("{line}\n")),
            None => eprintln!("host-cli: {line}"),
        }
        if let Some(v) = &self.view {
            let fields = told
                .fields
                .iter()
                .map(|f| sandtop_control::wire::SignedInField {
                    label: f.label.clone(),
                    kind: f.kind.as_str().to_string(),
                })
                .collect();
            v.signed_in(told.call_id, &told.origin.to_string(), fields, told.source);
        }
    }

    fn ask(&mut self, question: &str) -> Option<String> {
        if !self.someone() {
            return None;
        }
        // The question keeps its lines, each indented so that none of them
        // can pass for one of our own prompts.
        let shown = term::safe(question).replace('\n', "\n  | ");
        let prompt = format!(
            "\n== The model asks ==\n  | {shown}\nThe model reads your answer: never type a password or code here.\nYour answer (empty line = refuse): "
        );
        let q = ask::Question {
            kind: QuestionKind::AskUser,
            title: "The model asks (it reads your answer: no passwords or codes)".into(),
            text: String::new(),
            view_text: Some(term::safe(question)),
            marked: None,
            answers: &["text", "deny"],
            prompt: &prompt,
        };
        let word = |a: &str| if a.trim().is_empty() { "deny" } else { "text" };
        let a = match self.asker().ask(q, word)? {
            ask::Said::Typed(a) => a,
            ask::Said::View(a) => a.text.unwrap_or_default(),
        };
        let a = a.trim().to_string();
        (!a.is_empty()).then_some(a)
    }

    fn on_stop(&mut self, stopped: StopCheck) {
        if let Some(t) = self.terminal.as_ref() {
            lock(t).stop = Some(stopped.clone());
        }
        self.stop = Stop(Some(stopped));
    }

    fn decided_by(&self) -> Option<DecidedBy> {
        self.last_by
    }

    fn take_guidance(&mut self) -> Vec<String> {
        let Some(t) = self.terminal.as_ref() else {
            return Vec::new();
        };
        let mut t = lock(t);
        while let Ok(line) = t.lines.try_recv() {
            if !line.trim().is_empty() {
                t.guidance.push(line);
            }
        }
        std::mem::take(&mut t.guidance)
    }
}

/// Why a screenshot was not marked.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error("the screenshot to mark")]
    Decode(#[from] sandtop_channel::image_check::DecodeError),
    #[error("encoding the marked screenshot")]
    Encode(#[from] png::EncodingError),
}

/// Draws a marker (a ring and a cross, red with a white outline) on every
/// target of `actions` in a PNG screenshot; returns the new PNG.
pub fn mark_targets(png_bytes: &[u8], actions: &[Action]) -> Result<Vec<u8>, MarkError> {
    // Decoded with the reply decoder's limits (8-bit RGB, bounded size,
    // allocations checked before they happen).
    let img = sandtop_channel::image_check::decode_png_within(
        png_bytes,
        sandtop_channel::image_check::MAX_SIZE,
    )?;
    let (width, height) = (img.width, img.height);
    let mut buf = img.rgb;
    let (w, h) = (i64::from(width), i64::from(height));
    let mut put = |x: i64, y: i64, c: [u8; 3]| {
        if x >= 0 && y >= 0 && x < w && y < h {
            let i = ((y * w + x) * 3) as usize;
            buf[i..i + 3].copy_from_slice(&c);
        }
    };
    for a in actions {
        for p in a.points() {
            for (color, grow) in [([255, 255, 255], 1i64), ([230, 20, 20], 0)] {
                for d in -12..=12i64 {
                    for t in -grow..=grow {
                        put(p.x + d, p.y + t, color);
                        put(p.x + t, p.y + d, color);
                    }
                }
                for deg in 0..360 {
                    let r = 9.0 + grow as f64;
                    let (s, c) = (deg as f64).to_radians().sin_cos();
                    put(
                        p.x + (r * c).round() as i64,
                        p.y + (r * s).round() as i64,
                        color,
                    );
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut wr = enc.write_header()?;
    wr.write_image_data(&buf)?;
    wr.finish()?;
    Ok(out)
}

/// Where a marked screenshot for an approval goes.
pub fn marked_path(run_dir: &Path, step: u32, call_id: &str) -> PathBuf {
    marked_path_n(run_dir, step, call_id, 0)
}

/// The `n`-th marked screenshot of a call (`n` > 0: asked again after the
/// screen changed).
pub fn marked_path_n(run_dir: &Path, step: u32, call_id: &str, n: u32) -> PathBuf {
    let safe: String = call_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(40)
        .collect();
    if n == 0 {
        run_dir.join(format!("approval-{step:03}-{safe}.png"))
    } else {
        run_dir.join(format!("approval-{step:03}-{safe}-again-{n}.png"))
    }
}

#[cfg(test)]
mod tests;
