//! The browser toolset in the loop (issue 13), against a fake browser
//! behind the real daemon API (token, strict JSON, input gate) and the
//! mock Responses API. The fake keeps what a page would: tabs, a document
//! generation per tab (a navigation makes the refs of the old document
//! stale), and every effect it carried out, so a test sees exactly what
//! reached "the page". Tests are named after docs/contract.md's browser
//! rules (B1..B10).

use host_cli::agent::approve::BrowserRequest;
use host_cli::agent::browser::{
    ACTION_REFUSED, DISABLED, NAVIGATION_REFUSED, READ_REFUSED, SKIPPED, Toolset, UrlPolicy,
};
use sandtop_protocol::browser::{
    BrowserImage, BrowserOutcome, BrowserRead, BrowserReply, BrowserState, BrowserTab, ReadElement,
    ReadRole,
};
use sandtop_protocol::{BrowserCall, ErrorBody, ErrorCode};
use sandtopd::browser::{Backend, BackendFuture};

use super::*;

/// One tab of the fake.
#[derive(Debug, Clone)]
struct FakeTab {
    id: String,
    url: String,
    title: String,
    generation: u32,
}

#[derive(Debug, Default)]
struct FakePages {
    tabs: Vec<FakeTab>,
    active: usize,
    next_tab: u32,
    /// What the page saw: `type <field> <text>`, `click <field>`,
    /// `navigate <url>`, `new_tab`, `switch <id>`, `close <id>`.
    effects: Vec<String>,
    /// Every call and state read that reached the fake, by member.
    calls: Vec<String>,
    /// State reads report two active tabs (an invalid state).
    broken_state: bool,
    /// What sign_in_fill typed, by field: the page's own copy of the
    /// values (the one place a test may find them).
    signed_in: Vec<(String, String)>,
    /// The finished download the browser holds (take_download's answer).
    download: Option<(String, Vec<u8>)>,
    /// What set_file answers instead of setting the file.
    set_file_error: Option<ErrorCode>,
    /// The URL policy each call arrived with, by member (issue 30).
    policies: Vec<(String, Option<Vec<String>>)>,
    /// Labels the page has changed, by field (issue 30 item 4).
    labels: std::collections::BTreeMap<&'static str, String>,
    /// A relabelling the page does right after it has been read.
    relabel_after_read: Option<(&'static str, String)>,
    /// An invalid answer the fake gives once, for a member (after it
    /// carried the call out): the seed's invalid result.
    bad_outcome: Option<(&'static str, BrowserOutcome)>,
    /// The element holding the keyboard focus, as `describe_page` names
    /// it (empty: "none").
    focus: String,
    /// The page each call arrived bound to (`expect_page`), by member.
    pages: Vec<(String, Option<sandtop_protocol::browser::ExpectedPage>)>,
}

/// A browser whose one page is a contact form: Name, Email (textboxes),
/// Submit (button); refs are `g<generation>-<field>`.
#[derive(Debug, Clone, Default)]
struct FakeBrowser(Arc<Mutex<FakePages>>);

const FIELDS: [(&str, &str, ReadRole); 3] = [
    ("name", "Name", ReadRole::Textbox),
    ("email", "Email", ReadRole::Textbox),
    ("submit", "Submit", ReadRole::Button),
];

impl FakeBrowser {
    fn new(url: &str) -> FakeBrowser {
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

    fn effects(&self) -> Vec<String> {
        lock(&self.0).effects.clone()
    }

    fn calls(&self) -> Vec<String> {
        lock(&self.0).calls.clone()
    }

    /// The page navigates by itself (a script, a redirect): its refs go
    /// stale.
    fn navigate_itself(&self) {
        let mut p = lock(&self.0);
        let a = p.active;
        p.tabs[a].generation += 1;
    }

    /// The page navigates by itself to `url` (another origin, say).
    fn navigate_itself_to(&self, url: &str) {
        self.navigate_itself();
        let mut p = lock(&self.0);
        let a = p.active;
        p.tabs[a].url = url.into();
    }

    /// The URL policy each call arrived with, by member.
    fn policies(&self) -> Vec<(String, Option<Vec<String>>)> {
        lock(&self.0).policies.clone()
    }

    /// The page gives `field` another label (its ref stays the same).
    fn relabel(&self, field: &'static str, label: &str) {
        lock(&self.0).labels.insert(field, label.into());
    }

    fn break_state(&self) {
        lock(&self.0).broken_state = true;
    }

    fn signed_in(&self) -> Vec<(String, String)> {
        lock(&self.0).signed_in.clone()
    }
}

/// The ref a call acts on, if any.
fn call_target(call: &BrowserCall) -> Option<&str> {
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

fn err(code: ErrorCode, msg: &str) -> ErrorBody {
    ErrorBody::new(code, msg)
}

impl FakePages {
    fn state(&self) -> BrowserState {
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

    fn tab(&mut self, id: Option<&str>) -> Result<usize, ErrorBody> {
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
    fn field(&self, tab: usize, target: &str) -> Result<&'static str, ErrorBody> {
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
    fn sign_in_inputs<'a>(
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
    fn element(&self, tab: usize, id: &str) -> ReadElement {
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

    fn read(&self, tab: usize) -> BrowserRead {
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
    fn document(&self, tab: usize) -> String {
        format!("{}-g{}", self.tabs[tab].id, self.tabs[tab].generation)
    }

    fn focus_id(&self) -> String {
        if self.focus.is_empty() {
            "none".into()
        } else {
            self.focus.clone()
        }
    }

    /// As the driver checks `expect_page` (issue 31 item 6): the tab the
    /// call acts on is the approved one, and so are its document and the
    /// focus when given.
    fn check_page(
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

    fn run(&mut self, call: &BrowserCall) -> Result<BrowserOutcome, ErrorBody> {
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
            // The page as approved (issue 31 item 6).
            p.check_page(call, request.expect_page.as_ref())?;
            // The target as approved, as the driver checks it (item 4).
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
struct BrowserAsked {
    call_id: String,
    member: String,
    read: bool,
    description: String,
    /// The fake's effects when it was asked.
    effects: usize,
}

/// What happens to the page while the operator is asked.
type During = Box<dyn FnMut(&FakeBrowser) + Send>;

/// An operator answering browser calls from a queue (empty: refuse); on
/// each question it may run `during` (the page changing meanwhile).
struct BrowserOp {
    browser: FakeBrowser,
    answers: VecDeque<Decision>,
    asked: Vec<BrowserAsked>,
    during: Option<During>,
}

impl BrowserOp {
    fn new(browser: &FakeBrowser, answers: impl IntoIterator<Item = Decision>) -> BrowserOp {
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

const ORIGIN: &str = "http://127.0.0.1:8080";
/// Where the fake's `/redirect` leads: another origin.
const ELSEWHERE: &str = "http://127.0.0.1.evil.test:8080";

async fn browser_rig(browser: &FakeBrowser) -> Rig {
    let key = new_key();
    Rig {
        daemon: Daemon::start_with(SCREEN, Some(Arc::new(browser.clone()))).await,
        mock: MockResponses::start(&key).await,
        key,
        runs: tempfile::tempdir().unwrap(),
    }
}

/// `--tool browser` with the default members and the demo origin.
fn browser_opts(rig: &Rig) -> RunOptions {
    RunOptions {
        computer: false,
        browser: Some(toolset(&[])),
        ..rig.opts()
    }
}

fn toolset(confirm_reads: &[&str]) -> Toolset {
    let reads: Vec<String> = confirm_reads.iter().map(|s| s.to_string()).collect();
    Toolset::new(None, None, Some(UrlPolicy::parse(ORIGIN).unwrap()), &reads).unwrap()
}

fn call(call_id: &str, member: &str, args: Value) -> Value {
    function_call(call_id, &format!("browser_{member}"), &args)
}

/// The `{ok, state, result | error}` payload answering `call_id`, and the
/// output's other content parts.
#[track_caller]
fn payload(req: &Recorded, call_id: &str) -> (Value, Vec<Value>) {
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

fn diagnostics(run: &Run) -> Vec<Value> {
    std::fs::read_to_string(run.dir.join("diagnostics.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn approve() -> Decision {
    Decision::Approve
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b0_browser_tools_replace_the_computer_tool_and_no_screenshot_goes_out() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form?x=1#top"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "read_page",
        json!({"tab_id": null, "filter": "interactive"}),
    )]));
    rig.mock.push(Reply::done("Read it."));
    let mut op = BrowserOp::new(&fake, []);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let tools = reqs[0].body["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        tools.iter().all(|t| t["type"] == "function"),
        "no computer tool: {tools:?}"
    );
    assert_eq!(
        names.len(),
        18,
        "17 browser members (key is off) and ask_user: {names:?}"
    );
    assert!(names.contains(&"browser_read_page") && !names.contains(&"browser_key"));
    assert_eq!(image_urls(&reqs[0].body["input"]), Vec::<String>::new());
    assert_eq!(
        rig.probe().captures(),
        0,
        "no screen capture for a browser run"
    );
    let (p, rest) = payload(&reqs[1], "c1");
    assert_eq!(p["ok"], true);
    assert!(rest.is_empty());
    assert_eq!(p["result"]["elements"][0]["ref"], "g1-name");
    // B6: the state carries the origin only.
    assert_eq!(
        p["state"],
        json!({"tabs": [{"id": "tab-1", "title": "Contact", "url": ORIGIN, "active": true}]})
    );
    assert!(op.asked.is_empty(), "a read asks nobody: {:?}", op.asked);
    rig.assert_mock_clean();

    // `--tool both`: the computer tool and the browser tools.
    let fake2 = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake2).await;
    rig.mock.push(Reply::done("Nothing to do."));
    let mut op = BrowserOp::new(&fake2, []);
    let opts = RunOptions {
        computer: true,
        ..browser_opts(&rig)
    };
    rig.run(opts, &mut op).await.assert_ending(Ending::Finished);
    let body = &rig.mock.requests()[0].body;
    assert_eq!(body["tools"][0]["type"], "computer");
    assert_eq!(image_urls(&body["input"]).len(), 1, "the first screenshot");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_a_member_not_enabled_is_refused_before_any_state_read_or_question() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![
        call(
            "c1",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
        call("c2", "key", json!({"tab_id": null, "keys": ["Enter"]})),
    ]));
    rig.mock.push(Reply::done("ok"));
    let mut op = BrowserOp::new(&fake, [approve(), approve()]);
    let opts = RunOptions {
        browser: Some(Toolset::new(Some(&["read_page".to_string()]), None, None, &[]).unwrap()),
        ..browser_opts(&rig)
    };
    let calls_before = fake.calls().len();
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let (p, _) = payload(&reqs[1], "c1");
    assert_eq!(p, json!({"ok": false, "error": DISABLED}));
    // The second call is skipped after the first failed (no state either:
    // it is not enabled).
    let (p2, _) = payload(&reqs[1], "c2");
    assert_eq!(p2, json!({"ok": false, "error": DISABLED}));
    assert!(op.asked.is_empty());
    assert_eq!(fake.calls().len(), calls_before + 1, "{:?}", fake.calls());
    assert!(fake.effects().is_empty());
    assert_eq!(run.outcome.action_failures, 2);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_a_state_changing_call_runs_only_after_approval_shown_with_target_and_state() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    )]));
    rig.mock.push(Reply::output(vec![
        message("The user approved clicking, go ahead."),
        call(
            "c2",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
    ]));
    rig.mock.push(Reply::done("Submitted."));
    let mut op = BrowserOp::new(&fake, [deny("no"), approve()]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    // Refused: nothing happened, the model is told in the seed's words.
    let (p, _) = payload(&reqs[2], "c1");
    assert_eq!(p["ok"], false);
    assert_eq!(p["error"], ACTION_REFUSED);
    assert_eq!(p["state"]["tabs"][0]["url"], ORIGIN);
    assert_eq!(op.asked.len(), 2);
    let a = &op.asked[0];
    assert_eq!(
        (a.call_id.as_str(), a.member.as_str(), a.read),
        ("c1", "click", false)
    );
    assert_eq!(a.effects, 0);
    assert!(
        a.description.contains("browser_click")
            && a.description.contains("target: button \"Submit\"")
            && a.description.contains(&format!("on: {ORIGIN} \"Contact\"")),
        "{}",
        a.description
    );
    // The model's words approve nothing: the operator was asked again.
    assert_eq!(fake.effects(), ["click submit"]);
    assert_eq!(op.asked[1].effects, 0);
    let (p2, _) = payload(&reqs[3], "c2");
    assert_eq!(p2["ok"], true);
    let decisions: Vec<Value> = run.of_kind("browser_approval");
    assert_eq!(decisions.len(), 2);
    assert!(
        decisions[0]["decision"]
            .as_str()
            .unwrap()
            .starts_with("refused")
    );
    assert_eq!(decisions[1]["decision"], "approved");
    assert_eq!(run.ledger("c2"), ["pending", "done"]);
    assert!(
        run.ledger("c1").is_empty(),
        "a refused call never reached the ledger"
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_without_a_terminal_only_a_policy_approves_browser_members() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    for _ in 0..2 {
        rig.mock.push(Reply::output(vec![call(
            "c1",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        )]));
        rig.mock.push(Reply::done("done"));
    }
    let mut none = Approvals::default();
    rig.run(browser_opts(&rig), &mut none).await;
    assert!(fake.effects().is_empty(), "denied by default");
    let mut policy = Approvals {
        policy: Some(Policy {
            approve_browser_members: vec!["click".into()],
            ..Policy::default()
        }),
        ..Approvals::default()
    };
    rig.run(browser_opts(&rig), &mut policy).await;
    assert_eq!(fake.effects(), ["click submit"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_a_page_that_navigates_during_the_confirmation_makes_the_ref_stale_and_nothing_happens()
{
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![
        call(
            "c1",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
        call(
            "c2",
            "type",
            json!({"tab_id": null, "target": "g1-name", "text": "x"}),
        ),
    ]));
    rig.mock.push(Reply::done("I will read the page again."));
    let mut op = BrowserOp::new(&fake, [approve(), approve()]);
    op.during = Some(Box::new(|b: &FakeBrowser| b.navigate_itself()));
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    let reqs = rig.mock.requests();
    let (p, _) = payload(&reqs[1], "c1");
    assert_eq!(p["ok"], false);
    assert!(
        p["error"]
            .as_str()
            .unwrap()
            .starts_with("The target is stale"),
        "{p}"
    );
    // The later browser call of that response is skipped, with the state.
    let (p2, _) = payload(&reqs[1], "c2");
    assert_eq!(p2["error"], SKIPPED);
    assert_eq!(p2["state"]["tabs"][0]["id"], "tab-1");
    assert_eq!(op.asked.len(), 1, "the skipped call asks nobody");
    assert_eq!(run.ledger("c1"), ["pending", "failed"]);
    let skipped = run.of_kind("call_output");
    assert_eq!(skipped.len(), 2);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b4_the_url_policy_refuses_look_alike_origins_before_any_question() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    let outside = [
        "http://127.0.0.1.evil.test:8080/",
        "http://127.0.0.1:8081/",
        "https://127.0.0.1:8080/",
        "http://user@127.0.0.1.evil.test:8080/",
        "javascript:alert(1)",
    ];
    for (i, url) in outside.iter().enumerate() {
        rig.mock.push(Reply::output(vec![call(
            &format!("n{i}"),
            "navigate",
            json!({"tab_id": null, "url": url}),
        )]));
    }
    rig.mock.push(Reply::output(vec![call(
        "inside",
        "navigate",
        json!({"tab_id": null, "url": format!("{ORIGIN}/other?q=1")}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "blank",
        "new_tab",
        json!({"url": null}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [approve(), deny("not now")]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    for i in 0..outside.len() {
        let (p, _) = payload(&reqs[i + 1], &format!("n{i}"));
        assert_eq!(p["error"], NAVIGATION_REFUSED, "{}", outside[i]);
        assert!(p["state"]["tabs"].is_array(), "the state still comes back");
    }
    // Only the navigation inside the policy and the blank tab were asked
    // about; the blank tab was refused.
    let asked: Vec<&str> = op.asked.iter().map(|a| a.call_id.as_str()).collect();
    assert_eq!(asked, ["inside", "blank"]);
    assert_eq!(fake.effects(), [format!("navigate {ORIGIN}/other?q=1")]);
    assert!(!fake.calls().contains(&"new_tab".to_string()));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b5_a_refused_read_returns_the_fixed_refusal_and_reads_nothing() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "r2",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [deny("no reading"), approve()]);
    let opts = RunOptions {
        browser: Some(toolset(&["read_page"])),
        ..browser_opts(&rig)
    };
    let before = fake.calls().len();
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let out = reqs[1].input_of_type("function_call_output");
    assert_eq!(
        out[0]["output"][0]["text"],
        r#"{"ok":false,"error":"Browser read was not approved."}"#
    );
    let (p, _) = payload(&reqs[1], "r1");
    assert_eq!(p, json!({"ok": false, "error": READ_REFUSED}));
    assert!(op.asked[0].read && op.asked[0].member == "read_page");
    // The run's first state read, then nothing for the refused read; the
    // approved one read the state before its call.
    let calls = fake.calls();
    assert_eq!(
        &calls[before..],
        ["state", "state", "read_page"],
        "{calls:?}"
    );
    let (p2, _) = payload(&reqs[2], "r2");
    assert_eq!(p2["ok"], true);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_a_state_that_cannot_be_read_stops_the_run() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "c1",
        "click",
        json!({"tab_id": null, "target": "g1-submit"}),
    )]));
    rig.mock.push(Reply::done("never asked"));
    let mut op = BrowserOp::new(&fake, [approve()]);
    // While the operator is asked, the browser starts reporting two
    // active tabs.
    op.during = Some(Box::new(|b: &FakeBrowser| b.break_state()));
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Failed);
    assert!(
        run.outcome.message.contains("Browser state is invalid"),
        "{}",
        run.outcome.message
    );
    assert_eq!(fake.effects(), ["click submit"]);
    assert_eq!(run.ledger("c1"), ["pending", "unknown"]);
    assert_eq!(rig.mock.requests().len(), 1, "no request after the failure");
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_invalid_arguments_are_refused_naming_the_field_with_nothing_sent() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    let bad = [
        json!({"tab_id": null, "text": "Saved", "timeout_ms": 0}),
        json!({"tab_id": null, "text": "   ", "timeout_ms": 10}),
        json!({"tab_id": null, "text": "Saved", "timeout_ms": true}),
        json!({"tab_id": null, "text": "Saved", "timeout_ms": 10, "extra": 1}),
        json!({"tab_id": null, "text": "Saved", "timeout_ms": 1.5}),
    ];
    for (i, args) in bad.iter().enumerate() {
        rig.mock.push(Reply::output(vec![call(
            &format!("w{i}"),
            "wait_for",
            args.clone(),
        )]));
    }
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, []);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let errors: Vec<String> = (0..bad.len())
        .map(|i| {
            payload(&reqs[i + 1], &format!("w{i}")).0["error"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(errors[0].contains("`timeout_ms`"), "{errors:?}");
    assert!(errors[1].contains("`text`"), "{errors:?}");
    assert!(errors[2].contains("`timeout_ms`"), "{errors:?}");
    assert!(errors[3].contains("`extra`"), "{errors:?}");
    assert!(errors[4].contains("`timeout_ms`"), "{errors:?}");
    assert!(!fake.calls().contains(&"wait_for".to_string()));
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b9_a_screenshot_is_a_native_input_image_and_its_file_is_in_the_run_folder() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "s1",
        "screenshot",
        json!({"tab_id": null}),
    )]));
    rig.mock.push(Reply::done("seen"));
    let mut op = BrowserOp::new(&fake, []);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let (p, rest) = payload(&reqs[1], "s1");
    assert_eq!(p["ok"], true);
    assert!(p.get("result").is_none());
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["type"], "input_image");
    assert_eq!(
        png_size_of_data_url(rest[0]["image_url"].as_str().unwrap()),
        Some((64, 40))
    );
    // The trajectory refers to the image's file, never its data.
    let out = run.of_kind("call_output");
    let url = out[0]["item"]["output"][1]["image_url"].as_str().unwrap();
    let file = url.strip_prefix("sandtop-file:").expect(url);
    assert!(run.dir.join(file).is_file());
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_diagnostics_name_member_stage_and_outcome_never_page_text_or_arguments() {
    let fake = FakeBrowser::new(ORIGIN);
    let rig = browser_rig(&fake).await;
    rig.mock.push(Reply::output(vec![call(
        "r1",
        "read_page",
        json!({"tab_id": null, "filter": "all"}),
    )]));
    rig.mock.push(Reply::output(vec![call(
        "t1",
        "type",
        json!({"tab_id": null, "target": "g1-name", "text": "secret-typed-text"}),
    )]));
    rig.mock.push(Reply::done("done"));
    let mut op = BrowserOp::new(&fake, [approve()]);
    let run = rig.run(browser_opts(&rig), &mut op).await;
    run.assert_ending(Ending::Finished);
    assert_eq!(fake.effects(), ["type name secret-typed-text"]);
    let d = diagnostics(&run);
    let browser: Vec<(String, String, String, String)> = d
        .iter()
        .filter(|r| r["api"] == "browser")
        .map(|r| {
            (
                r["call_id"].as_str().unwrap().into(),
                r["member"].as_str().unwrap().into(),
                r["stage"].as_str().unwrap().into(),
                r["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = |c: &str, m: &str, s: &str, r: &str| (c.into(), m.into(), s.into(), r.into());
    assert_eq!(
        browser,
        [
            want("r1", "read_page", "action", "completed"),
            want("t1", "type", "approval", "completed"),
            want("t1", "type", "action", "completed"),
        ]
    );
    let text = std::fs::read_to_string(run.dir.join("diagnostics.jsonl")).unwrap();
    for leak in ["secret-typed-text", "Contact us", "g1-name"] {
        assert!(!text.contains(leak), "diagnostics carry {leak:?}");
    }
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_a_daemon_without_a_browser_fails_the_run_before_the_first_request() {
    let rig = Rig::new().await;
    let mut op = ScriptedOp::new(rig.probe());
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let dir = rig.new_run_dir();
    let mut recorder = start_recorder(&dir);
    let opts = RunOptions {
        computer: false,
        browser: Some(toolset(&[])),
        ..rig.opts()
    };
    let mut runner = Runner::new(
        &mut model,
        &mut channel,
        &mut op,
        &mut recorder,
        opts,
        Interrupt::default(),
    );
    let e = runner.run(None).await.expect_err("a run without a browser");
    assert!(
        format!("{e:#}").contains("browser driver is not available (browser_unavailable)"),
        "{e:#}"
    );
    assert!(rig.mock.requests().is_empty());
}

#[test]
fn b1_browser_options_are_checked_at_start() {
    use clap::Parser as _;
    let opts = |args: &[&str]| {
        let mut argv = vec!["host-cli", "run"];
        argv.extend_from_slice(args);
        argv.push("a task");
        match host_cli::cli::Cli::try_parse_from(argv) {
            Ok(cli) => match cli.command {
                host_cli::cli::Command::Run(a) => {
                    host_cli::agent::cmd::run_options(&a).map_err(|e| format!("{e:#}"))
                }
                other => panic!("{other:?}"),
            },
            Err(e) => Err(e.to_string()),
        }
    };
    let err = |args: &[&str]| {
        opts(args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} was accepted"))
    };
    assert!(err(&["--browser"]).contains("--url-policy"));
    assert!(err(&["--browser", "--tool", "computer", "--url-policy", ORIGIN]).contains("--tool"));
    assert!(err(&["--url-policy", ORIGIN]).contains("--browser"));
    assert!(
        err(&["--browser", "--browser-members", "read_page,clik"])
            .contains("unknown browser member")
    );
    assert!(err(&["--browser", "--browser-members", "read_page,read_page"]).contains("twice"));
    assert!(
        err(&[
            "--browser",
            "--browser-members",
            "read_page",
            "--browser-add",
            "run_script"
        ])
        .contains("cannot be used with")
    );
    assert!(err(&["--browser", "--url-policy", "example.com"]).contains("--url-policy"));
    assert!(err(&["--browser", "--browser-members", ""]).contains("no tool"));
    let o = opts(&["--browser", "--url-policy", ORIGIN]).unwrap();
    assert!(!o.computer);
    assert_eq!(o.browser.as_ref().unwrap().members().len(), 17);
    let o = opts(&["--tool", "both", "--browser-members", "read_page,click"]).unwrap();
    assert!(o.computer);
    assert_eq!(o.browser.unwrap().members(), ["read_page", "click"]);
    let o = opts(&[]).unwrap();
    assert!(o.computer && o.browser.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b11_opt_in_members_are_offered_only_when_added_and_confirmed_like_any_action() {
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    let set = json!({"tab_id": null, "target": "g1-submit", "checked": true});
    rig.mock
        .push(Reply::output(vec![call("c1", "set_checked", set.clone())]));
    rig.mock
        .push(Reply::output(vec![call("c2", "set_checked", set)]));
    rig.mock.push(Reply::output(vec![call(
        "c3",
        "click_at",
        json!({"tab_id": null, "x": 5, "y": 6, "button": "left", "click_count": 1, "keys": []}),
    )]));
    rig.mock.push(Reply::done("Checked and clicked."));
    let added: Vec<String> = ["set_checked", "click_at"].map(String::from).to_vec();
    let opts = RunOptions {
        browser: Some(
            Toolset::new(
                None,
                Some(&added),
                Some(UrlPolicy::parse(ORIGIN).unwrap()),
                &[],
            )
            .unwrap(),
        ),
        ..browser_opts(&rig)
    };
    let mut op = BrowserOp::new(&fake, [deny("no"), approve(), approve()]);
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let names: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"browser_set_checked") && names.contains(&"browser_click_at"),
        "{names:?}"
    );
    assert!(!names.contains(&"browser_hold_keys"), "{names:?}");
    // Every call asked, nothing done before its approval; the refusal is
    // the seed's text and changes nothing.
    let asked: Vec<(&str, &str, usize)> = op
        .asked
        .iter()
        .map(|a| (a.call_id.as_str(), a.member.as_str(), a.effects))
        .collect();
    assert_eq!(
        asked,
        [
            ("c1", "set_checked", 0),
            ("c2", "set_checked", 0),
            ("c3", "click_at", 1)
        ]
    );
    let (p1, _) = payload(&reqs[1], "c1");
    assert_eq!(p1["error"], ACTION_REFUSED);
    assert_eq!(fake.effects(), ["set_checked submit true", "click_at 5,6"]);
    let (p2, _) = payload(&reqs[2], "c2");
    assert_eq!(
        (p2["ok"].clone(), p2["result"].clone()),
        (json!(true), Value::Null)
    );
    assert_eq!(run.ledger("c2"), ["pending", "done"]);
    assert_eq!(run.ledger("c3"), ["pending", "done"]);
    rig.assert_mock_clean();
}

mod files;
mod page_bound;
mod policy;
mod relabel;
mod results;
mod sign_in;
