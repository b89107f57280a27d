//! The fake browser behind the real daemon API and the rig around it,
//! for the browser toolset's loop tests: tabs, a document generation per
//! tab (a navigation makes the refs of the old document stale), and every
//! effect it carried out.

use host_cli::agent::approve::BrowserRequest;
use host_cli::agent::browser::{Toolset, UrlPolicy};
use sandtop_protocol::browser::{
    BrowserImage, BrowserOutcome, BrowserRead, BrowserReply, BrowserState, BrowserTab, ReadElement,
    ReadRole,
};
use sandtop_protocol::{BrowserCall, ErrorBody, ErrorCode};
use sandtopd::browser::{Backend, BackendFuture};

use super::*;

/// One tab of the fake.
#[derive(Debug, Clone)]
pub(crate) struct FakeTab {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) title: String,
    pub(crate) generation: u32,
}

#[derive(Debug, Default)]
pub(crate) struct FakePages {
    pub(crate) tabs: Vec<FakeTab>,
    pub(crate) active: usize,
    pub(crate) next_tab: u32,
    /// What the page saw: `type <field> <text>`, `click <field>`,
    /// `navigate <url>`, `new_tab`, `switch <id>`, `close <id>`.
    pub(crate) effects: Vec<String>,
    /// Every call and state read that reached the fake, by member.
    pub(crate) calls: Vec<String>,
    /// State reads report two active tabs (an invalid state).
    pub(crate) broken_state: bool,
    /// What sign_in_fill typed, by field: the page's own copy of the
    /// values (the one place a test may find them).
    pub(crate) signed_in: Vec<(String, String)>,
    /// The finished download the browser holds (take_download's answer).
    pub(crate) download: Option<(String, Vec<u8>)>,
    /// What set_file answers instead of setting the file.
    pub(crate) set_file_error: Option<ErrorCode>,
    /// The URL policy each call arrived with, by member (docs/contract.md rule 30a).
    pub(crate) policies: Vec<(String, Option<Vec<String>>)>,
    /// Labels the page has changed, by field (docs/contract.md rule 28a).
    pub(crate) labels: std::collections::BTreeMap<&'static str, String>,
    /// A relabelling the page does right after it has been read.
    pub(crate) relabel_after_read: Option<(&'static str, String)>,
    /// An invalid answer the fake gives once, for a member (after it
    /// carried the call out): the seed's invalid result.
    pub(crate) bad_outcome: Option<(&'static str, BrowserOutcome)>,
    /// The element holding the keyboard focus, as `describe_page` names
    /// it (empty: "none").
    pub(crate) focus: String,
    /// The page each call arrived bound to (`expect_page`), by member.
    pub(crate) pages: Vec<(String, Option<sandtop_protocol::browser::ExpectedPage>)>,
}

/// A browser whose one page is a contact form: Name, Email (textboxes),
/// Submit (button); refs are `g<generation>-<field>`.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeBrowser(pub(crate) Arc<Mutex<FakePages>>);

pub(crate) const FIELDS: [(&str, &str, ReadRole); 3] = [
    ("name", "Name", ReadRole::Textbox),
    ("email", "Email", ReadRole::Textbox),
    ("submit", "Submit", ReadRole::Button),
];

impl FakeBrowser {
    pub(crate) fn new(url: &str) -> FakeBrowser {
        let b = FakeBrowser::default();
        {
            let mut p = lock(&b.0);
            p.tabs.push(FakeTab {
                id: "tab-1".into(),
                url: url.into(),
                title: "Contact".into(),
                generation: 1,
            });
            p.next_tab = 2;
        }
        b
    }

    pub(crate) fn effects(&self) -> Vec<String> {
        lock(&self.0).effects.clone()
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        lock(&self.0).calls.clone()
    }

    /// The page navigates by itself (a script, a redirect): its refs go
    /// stale.
    pub(crate) fn navigate_itself(&self) {
        let mut p = lock(&self.0);
        let a = p.active;
        p.tabs[a].generation += 1;
    }

    /// The page navigates by itself to `url` (another origin, say).
    pub(crate) fn navigate_itself_to(&self, url: &str) {
        self.navigate_itself();
        let mut p = lock(&self.0);
        let a = p.active;
        p.tabs[a].url = url.into();
    }

    /// The URL policy each call arrived with, by member.
    pub(crate) fn policies(&self) -> Vec<(String, Option<Vec<String>>)> {
        lock(&self.0).policies.clone()
    }

    /// The page gives `field` another label (its ref stays the same).
    pub(crate) fn relabel(&self, field: &'static str, label: &str) {
        lock(&self.0).labels.insert(field, label.into());
    }

    pub(crate) fn break_state(&self) {
        lock(&self.0).broken_state = true;
    }

    pub(crate) fn signed_in(&self) -> Vec<(String, String)> {
        lock(&self.0).signed_in.clone()
    }
}

/// The ref a call acts on, if any.
pub(crate) fn call_target(call: &BrowserCall) -> Option<&str> {
    match call {
        BrowserCall::Click { target, .. }
        | BrowserCall::Hover { target, .. }
        | BrowserCall::ScrollTo { target, .. }
        | BrowserCall::SelectOption { target, .. }
        | BrowserCall::SetChecked { target, .. } => Some(target),
        BrowserCall::Type { target, .. } => target.as_deref(),
        _ => None,
    }
}

pub(crate) fn err(code: ErrorCode, msg: &str) -> ErrorBody {
    ErrorBody::new(code, msg)
}

impl FakePages {
    pub(crate) fn state(&self) -> BrowserState {
        let mut state = BrowserState {
            tabs: self
                .tabs
                .iter()
                .enumerate()
                .map(|(i, t)| BrowserTab {
                    id: t.id.clone(),
                    title: t.title.clone(),
                    url: t.url.clone(),
                    active: i == self.active,
                    title_truncated: false,
                })
                .collect(),
        };
        if self.broken_state {
            // A second tab that claims to be active too.
            let mut other = state.tabs[0].clone();
            other.id = "tab-broken".into();
            state.tabs.push(other);
        }
        state
    }

    pub(crate) fn tab(&mut self, id: Option<&str>) -> Result<usize, ErrorBody> {
        match id {
            None => Ok(self.active),
            Some(id) => self
                .tabs
                .iter()
                .position(|t| t.id == id)
                .ok_or_else(|| err(ErrorCode::NoSuchTab, "no such tab")),
        }
    }

    /// The field a ref names on the tab's current document.
    pub(crate) fn field(&self, tab: usize, target: &str) -> Result<&'static str, ErrorBody> {
        let g = self.tabs[tab].generation;
        target
            .strip_prefix(&format!("g{g}-"))
            .and_then(|f| FIELDS.iter().find(|(id, _, _)| *id == f))
            .map(|(id, _, _)| *id)
            .ok_or_else(|| err(ErrorCode::StaleTarget, "the target is not on this document"))
    }

    /// The sign-in inputs of the fake's page (`g<generation>-email`, a
    /// type=email input; `-password`, type=password; `-name`, type=text),
    /// checked as the daemon does: the tab on the origin, each target an
    /// input of its kind. Nothing is typed unless all pass.
    pub(crate) fn sign_in_inputs<'a>(
        &self,
        tab: usize,
        origin: &str,
        fields: impl Iterator<Item = (&'a str, sandtop_protocol::sign_in::CredentialKind)>,
    ) -> Result<Vec<&'static str>, ErrorBody> {
        let url = &self.tabs[tab].url;
        if !(url.starts_with(origin) && url[origin.len()..].chars().next().is_none_or(|c| c == '/'))
        {
            return Err(err(
                ErrorCode::InvalidAction,
                "the tab is not on the credential origin",
            ));
        }
        let g = self.tabs[tab].generation;
        let mut out = Vec::new();
        for (target, kind) in fields {
            let (input, input_type) = match target.strip_prefix(&format!("g{g}-")) {
                Some("email") => ("email", "email"),
                Some("password") => ("password", "password"),
                Some("name") => ("name", "text"),
                Some("submit") => ("submit", "button"),
                _ => {
                    return Err(err(
                        ErrorCode::StaleTarget,
                        "the target is not on this document",
                    ));
                }
            };
            if !kind.input_types().contains(&input_type) {
                return Err(err(ErrorCode::InvalidAction, "wrong kind of field"));
            }
            out.push(input);
        }
        Ok(out)
    }

    /// One field as a read reports it now.
    pub(crate) fn element(&self, tab: usize, id: &str) -> ReadElement {
        let g = self.tabs[tab].generation;
        let (id, label, role) = FIELDS.iter().find(|(f, _, _)| *f == id).unwrap();
        ReadElement {
            reference: format!("g{g}-{id}"),
            role: *role,
            label: self.labels.get(id).cloned().unwrap_or((*label).into()),
            value: (*role == ReadRole::Textbox).then(String::new),
            options: None,
            checked: None,
        }
    }

    pub(crate) fn read(&self, tab: usize) -> BrowserRead {
        BrowserRead {
            version: 1,
            text: "Contact us\nName Email Submit".into(),
            elements: FIELDS
                .iter()
                .map(|(id, _, _)| self.element(tab, id))
                .collect(),
            omitted: Vec::new(),
            scopes: None,
        }
    }

    /// The identity of a tab's current document (a load).
    pub(crate) fn document(&self, tab: usize) -> String {
        format!("{}-g{}", self.tabs[tab].id, self.tabs[tab].generation)
    }

    pub(crate) fn focus_id(&self) -> String {
        if self.focus.is_empty() {
            "none".into()
        } else {
            self.focus.clone()
        }
    }

    /// As the driver checks `expect_page` (docs/contract.md rule 28b): the tab the
    /// call acts on is the approved one, and so are its document and the
    /// focus when given.
    pub(crate) fn check_page(
        &mut self,
        call: &BrowserCall,
        page: Option<&sandtop_protocol::browser::ExpectedPage>,
    ) -> Result<(), ErrorBody> {
        let Some(page) = page else { return Ok(()) };
        let tab = self.tab(call.tab_id())?;
        let stale = || err(ErrorCode::StaleTarget, "the approved page changed");
        if self.tabs[tab].id != page.tab_id {
            return Err(stale());
        }
        if page
            .document
            .as_ref()
            .is_some_and(|d| *d != self.document(tab))
        {
            return Err(stale());
        }
        if page.focus.as_ref().is_some_and(|f| *f != self.focus_id()) {
            return Err(stale());
        }
        Ok(())
    }

    pub(crate) fn run(&mut self, call: &BrowserCall) -> Result<BrowserOutcome, ErrorBody> {
        let tab = self.tab(call.tab_id())?;
        Ok(match call {
            BrowserCall::Navigate { url, .. } => {
                // `/redirect` answers a redirect to another origin.
                let url = match url.strip_suffix("/redirect") {
                    Some(_) => format!("{ELSEWHERE}/form"),
                    None => url.clone(),
                };
                self.tabs[tab].url = url.clone();
                self.tabs[tab].generation += 1;
                self.effects.push(format!("navigate {url}"));
                BrowserOutcome::Done
            }
            BrowserCall::ReadPage { .. } | BrowserCall::Find { .. } => {
                let read = self.read(tab);
                if let Some((field, label)) = self.relabel_after_read.take() {
                    self.labels.insert(field, label);
                }
                BrowserOutcome::Read(read)
            }
            BrowserCall::DescribeTarget { target, .. } => {
                let field = self.field(tab, target)?;
                BrowserOutcome::Read(BrowserRead {
                    text: String::new(),
                    elements: vec![self.element(tab, field)],
                    ..self.read(tab)
                })
            }
            BrowserCall::GetPageText { .. } => BrowserOutcome::Read(BrowserRead {
                elements: Vec::new(),
                ..self.read(tab)
            }),
            BrowserCall::Type { target, text, .. } => {
                let field = self.field(tab, target.as_deref().unwrap_or(""))?;
                self.effects.push(format!("type {field} {text}"));
                BrowserOutcome::Done
            }
            BrowserCall::Click { target, .. } => {
                let field = self.field(tab, target)?;
                self.effects.push(format!("click {field}"));
                BrowserOutcome::Done
            }
            BrowserCall::SetChecked {
                target, checked, ..
            } => {
                let field = self.field(tab, target)?;
                self.effects.push(format!("set_checked {field} {checked}"));
                BrowserOutcome::Done
            }
            BrowserCall::DescribePage { .. } => {
                BrowserOutcome::Page(sandtop_protocol::browser::PageIdentity {
                    tab_id: self.tabs[tab].id.clone(),
                    document: self.document(tab),
                    focus: self.focus_id(),
                })
            }
            BrowserCall::HoldKeys { keys, .. } => {
                self.effects.push(format!(
                    "hold_keys {} at {}",
                    keys.join("+"),
                    self.focus_id()
                ));
                BrowserOutcome::Done
            }
            BrowserCall::HoverAt { x, y, .. } => {
                self.effects.push(format!("hover_at {x},{y}"));
                BrowserOutcome::Done
            }
            BrowserCall::Scroll { .. } => {
                self.effects.push(format!("scroll {}", self.tabs[tab].id));
                BrowserOutcome::Done
            }
            BrowserCall::RunScript { source, .. } => {
                self.effects.push(format!("run_script {source}"));
                BrowserOutcome::Text {
                    text: "script result".into(),
                }
            }
            BrowserCall::ClickAt { x, y, .. } => {
                self.effects.push(format!("click_at {x},{y}"));
                BrowserOutcome::Done
            }
            BrowserCall::Screenshot { .. } => BrowserOutcome::Image(BrowserImage {
                png_base64: base64::engine::general_purpose::STANDARD.encode(png_bytes(64, 40)),
                width: 64,
                height: 40,
            }),
            BrowserCall::NewTab { url } => {
                let id = format!("tab-{}", self.next_tab);
                self.next_tab += 1;
                self.tabs.push(FakeTab {
                    id: id.clone(),
                    url: url.clone().unwrap_or_else(|| "about:blank".into()),
                    title: String::new(),
                    generation: 1,
                });
                self.active = self.tabs.len() - 1;
                self.effects.push(format!("new_tab {id}"));
                BrowserOutcome::Done
            }
            BrowserCall::SignInCheck { origin, fields, .. } => {
                self.sign_in_inputs(
                    tab,
                    origin,
                    fields.iter().map(|f| (f.target.as_str(), f.kind)),
                )?;
                BrowserOutcome::Done
            }
            BrowserCall::SignInFill { origin, fields, .. } => {
                let inputs = self.sign_in_inputs(
                    tab,
                    origin,
                    fields.iter().map(|f| (f.target.as_str(), f.kind)),
                )?;
                for (input, f) in inputs.into_iter().zip(fields) {
                    self.effects.push(format!("sign_in {input}"));
                    self.signed_in
                        .push((input.to_string(), f.value.expose().to_string()));
                }
                BrowserOutcome::Done
            }
            BrowserCall::SetFile {
                name,
                content_base64,
                ..
            } => {
                if let Some(code) = self.set_file_error {
                    return Err(err(code, "set_file failed"));
                }
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(content_base64)
                    .unwrap();
                self.effects.push(format!(
                    "set_file {name} {}",
                    String::from_utf8_lossy(&bytes)
                ));
                BrowserOutcome::Done
            }
            BrowserCall::TakeDownload {} => {
                let (name, bytes) = self
                    .download
                    .clone()
                    .ok_or_else(|| err(ErrorCode::NotActionable, "no finished download"))?;
                BrowserOutcome::File {
                    name,
                    content_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
                }
            }
            BrowserCall::RemoveDownload { name } => {
                if self.download.as_ref().map(|d| &d.0) != Some(name) {
                    return Err(err(ErrorCode::NotActionable, "no such download"));
                }
                self.download = None;
                self.effects.push(format!("remove_download {name}"));
                BrowserOutcome::Done
            }
            other => {
                return Err(err(
                    ErrorCode::NotActionable,
                    &format!("the fake does not do {}", other.member()),
                ));
            }
        })
    }
}

impl Backend for FakeBrowser {
    fn call<'a>(&'a self, call: &'a BrowserCall) -> BackendFuture<'a, BrowserReply> {
        Box::pin(async move {
            let mut p = lock(&self.0);
            p.calls.push(call.member().to_string());
            let outcome = p.run(call)?;
            Ok(BrowserReply {
                outcome,
                state: p.state(),
                elapsed_ms: 1,
            })
        })
    }

    /// As the driver does with the host's URL policy: a member that acts
    /// on the page only while the page's origin is in it, a navigation
    /// that ends outside it reported (`out_of_policy`).
    fn request<'a>(
        &'a self,
        request: &'a sandtop_protocol::BrowserRequest,
    ) -> BackendFuture<'a, BrowserReply> {
        Box::pin(async move {
            let call = &request.call;
            let mut p = lock(&self.0);
            p.calls.push(call.member().to_string());
            p.policies
                .push((call.member().to_string(), request.url_policy.clone()));
            p.pages
                .push((call.member().to_string(), request.expect_page.clone()));
            let inside = |p: &FakePages| {
                let tab = call
                    .tab_id()
                    .and_then(|id| p.tabs.iter().position(|t| t.id == id))
                    .unwrap_or(p.active);
                let url = &p.tabs[tab].url;
                request.url_policy.as_ref().is_none_or(|origins| {
                    origins.iter().any(|o| {
                        url.strip_prefix(o.as_str())
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
                    })
                })
            };
            let acts = !matches!(
                call,
                BrowserCall::Navigate { .. }
                    | BrowserCall::NewTab { .. }
                    | BrowserCall::SwitchTab { .. }
                    | BrowserCall::CloseTab { .. }
                    | BrowserCall::ReadPage { .. }
                    | BrowserCall::GetPageText { .. }
                    | BrowserCall::Find { .. }
                    | BrowserCall::Screenshot { .. }
                    | BrowserCall::DescribeTarget { .. }
                    | BrowserCall::DescribePage { .. }
                    | BrowserCall::RemoveDownload { .. }
            );
            if acts && !inside(&p) {
                return Err(err(ErrorCode::OutOfPolicy, "outside the url policy"));
            }
            // The page as approved (docs/contract.md rule 28b).
            p.check_page(call, request.expect_page.as_ref())?;
            // The target as approved, as the driver checks it (rule 28a).
            if let (Some(expect), Some(target)) = (&request.expect, call_target(call)) {
                let tab = p.tab(call.tab_id())?;
                let field = p.field(tab, target)?;
                let now = p.element(tab, field);
                if now.role != expect.role || now.label != expect.label {
                    return Err(err(ErrorCode::StaleTarget, "the target changed"));
                }
            }
            let mut outcome = p.run(call)?;
            if p.bad_outcome
                .as_ref()
                .is_some_and(|(m, _)| *m == call.member())
            {
                outcome = p.bad_outcome.take().unwrap().1;
            }
            if matches!(call, BrowserCall::Navigate { .. }) && !inside(&p) {
                return Err(err(ErrorCode::OutOfPolicy, "the navigation ended outside"));
            }
            Ok(BrowserReply {
                outcome,
                state: p.state(),
                elapsed_ms: 1,
            })
        })
    }

    fn state(&self) -> BackendFuture<'_, BrowserState> {
        Box::pin(async move {
            let mut p = lock(&self.0);
            p.calls.push("state".into());
            Ok(p.state())
        })
    }
}

/// What the operator was asked about a browser call.
#[derive(Debug, Clone)]
pub(crate) struct BrowserAsked {
    pub(crate) call_id: String,
    pub(crate) member: String,
    pub(crate) read: bool,
    pub(crate) description: String,
    /// The fake's effects when it was asked.
    pub(crate) effects: usize,
}

/// What happens to the page while the operator is asked.
pub(crate) type During = Box<dyn FnMut(&FakeBrowser) + Send>;

/// An operator answering browser calls from a queue (empty: refuse); on
/// each question it may run `during` (the page changing meanwhile).
pub(crate) struct BrowserOp {
    pub(crate) browser: FakeBrowser,
    pub(crate) answers: VecDeque<Decision>,
    pub(crate) asked: Vec<BrowserAsked>,
    pub(crate) during: Option<During>,
}

impl BrowserOp {
    pub(crate) fn new(
        browser: &FakeBrowser,
        answers: impl IntoIterator<Item = Decision>,
    ) -> BrowserOp {
        BrowserOp {
            browser: browser.clone(),
            answers: answers.into_iter().collect(),
            asked: Vec::new(),
            during: None,
        }
    }
}

impl Operator for BrowserOp {
    fn approve_checks(&mut self, _req: &CheckRequest<'_>) -> Decision {
        deny("no checks expected")
    }

    fn confirm_action(&mut self, _req: &ActionRequest<'_>) -> Decision {
        deny("no computer actions expected")
    }

    fn confirm_browser(&mut self, req: &BrowserRequest<'_>) -> Decision {
        self.asked.push(BrowserAsked {
            call_id: req.call_id.into(),
            member: req.member.into(),
            read: req.read,
            description: req.description.into(),
            effects: self.browser.effects().len(),
        });
        if let Some(f) = self.during.as_mut() {
            f(&self.browser);
        }
        self.answers
            .pop_front()
            .unwrap_or_else(|| deny("the scripted operator has no answer left"))
    }

    fn ask(&mut self, _question: &str) -> Option<String> {
        None
    }

    fn take_guidance(&mut self) -> Vec<String> {
        Vec::new()
    }
}

pub(crate) const ORIGIN: &str = "http://127.0.0.1:8080";
/// Where the fake's `/redirect` leads: another origin.
pub(crate) const ELSEWHERE: &str = "http://127.0.0.1.evil.test:8080";

pub(crate) async fn browser_rig(browser: &FakeBrowser) -> Rig {
    let key = new_key();
    Rig {
        daemon: Daemon::start_with(SCREEN, Some(Arc::new(browser.clone()))).await,
        mock: MockResponses::start(&key).await,
        key,
        runs: tempfile::tempdir().unwrap(),
    }
}

/// `--tool browser` with the default members and the demo origin.
pub(crate) fn browser_opts(rig: &Rig) -> RunOptions {
    RunOptions {
        computer: false,
        browser: Some(toolset(&[])),
        ..rig.opts()
    }
}

pub(crate) fn toolset(confirm_reads: &[&str]) -> Toolset {
    let reads: Vec<String> = confirm_reads.iter().map(|s| s.to_string()).collect();
    Toolset::new(None, None, Some(UrlPolicy::parse(ORIGIN).unwrap()), &reads).unwrap()
}

pub(crate) fn call(call_id: &str, member: &str, args: Value) -> Value {
    function_call(call_id, &format!("browser_{member}"), &args)
}

/// The `{ok, state, result | error}` payload answering `call_id`, and the
/// output's other content parts.
#[track_caller]
pub(crate) fn payload(req: &Recorded, call_id: &str) -> (Value, Vec<Value>) {
    let outs: Vec<Value> = req
        .input_of_type("function_call_output")
        .into_iter()
        .filter(|o| o["call_id"] == call_id)
        .collect();
    assert_eq!(outs.len(), 1, "outputs for {call_id} in request {}", req.n);
    let parts = outs[0]["output"]
        .as_array()
        .expect("a content list")
        .clone();
    assert_eq!(parts[0]["type"], "input_text", "{parts:?}");
    let p = serde_json::from_str(parts[0]["text"].as_str().unwrap()).unwrap();
    (p, parts[1..].to_vec())
}

pub(crate) fn diagnostics(run: &Run) -> Vec<Value> {
    std::fs::read_to_string(run.dir.join("diagnostics.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(crate) fn approve() -> Decision {
    Decision::Approve
}
