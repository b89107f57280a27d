//! Unit tests of the operator: policies, terminal prompts, stops.
//!
//! Size (~700 lines): one case per operator rule (policy codes, the
//! scripted proof, browser members, prompts, the terminal/view race,
//! stops), sharing the request builders and the scripted-terminal fakes
//! above them; a split by question kind is the natural next step.

use std::io::Write as _;
use std::sync::mpsc;

use super::*;
use crate::model::Model as _;
use crate::model::scripted::{Fixed, ScriptedModel};
use sandtop_protocol::Button;

fn check(code: Option<&str>) -> SafetyCheck {
    SafetyCheck {
        id: "sc".into(),
        code: code.map(str::to_string),
        message: None,
    }
}

#[test]
fn without_terminal_or_policy_everything_is_denied() {
    let mut a = Approvals::default();
    let req = CheckRequest {
        call_id: "c",
        checks: &[check(Some("x"))],
        actions: &[],
        marked: None,
        changed_since: None,
        scripted: None,
    };
    assert!(matches!(a.approve_checks(&req), Decision::Deny(_)));
    // --approve-scripted-checks approves the scripted model's checks only.
    let mut flag = Approvals {
        scripted_checks: true,
        ..Approvals::default()
    };
    assert!(
        matches!(flag.approve_checks(&req), Decision::Deny(_)),
        "approved a question without the scripted model's proof"
    );
    let proof = ScriptedModel::new(Box::new(Fixed(Default::default()))).scripted();
    let from_script = CheckRequest {
        scripted: proof,
        ..req
    };
    assert_eq!(flag.approve_checks(&from_script), Decision::Approve);
    assert_eq!(flag.decided_by(), Some(DecidedBy::Scripted));
    assert!(matches!(a.approve_checks(&from_script), Decision::Deny(_)));
    assert_eq!(a.decided_by(), Some(DecidedBy::Nobody));
    let ar = ActionRequest {
        call_id: "c",
        action: None,
        index: 0,
        of: 1,
        marked: None,
        changed_since: None,
    };
    assert!(matches!(a.confirm_action(&ar), Decision::Deny(_)));
    assert_eq!(a.decided_by(), Some(DecidedBy::Nobody));
    // A policy's answer to every action is the policy's decision.
    let mut p = Approvals {
        policy: Some(Policy {
            confirm_actions: Some(PolicyAnswer::Approve),
            ..Policy::default()
        }),
        ..Approvals::default()
    };
    assert_eq!(p.confirm_action(&ar), Decision::Approve);
    assert_eq!(p.decided_by(), Some(DecidedBy::Policy));
    assert_eq!(a.ask("?"), None);
}

#[test]
fn policy_approves_only_listed_codes_and_only_when_all_are_listed() {
    let mut a = Approvals {
        policy: Some(Policy {
            approve_check_codes: vec!["sensitive_domain".into()],
            confirm_actions: None,
            ..Policy::default()
        }),
        ..Approvals::default()
    };
    let ok = [check(Some("sensitive_domain"))];
    let mixed = [
        check(Some("sensitive_domain")),
        check(Some("malicious_instructions")),
    ];
    let nocode = [check(None)];
    let req = |c: &'static [SafetyCheck]| CheckRequest {
        call_id: "c",
        checks: c,
        actions: &[],
        marked: None,
        changed_since: None,
        scripted: None,
    };
    assert_eq!(
        a.approve_checks(&req(Box::leak(Box::new(ok)))),
        Decision::Approve
    );
    assert!(matches!(
        a.approve_checks(&req(Box::leak(Box::new(mixed)))),
        Decision::Deny(_)
    ));
    assert!(matches!(
        a.approve_checks(&req(Box::leak(Box::new(nocode)))),
        Decision::Deny(_)
    ));
}

/// A screen the test can read back, and an operator who types `no`
/// whenever a prompt (ending in `: ` or `] `) has been shown.
#[derive(Clone)]
struct Screen {
    shown: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    typed: mpsc::Sender<String>,
}

impl std::io::Write for Screen {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.shown.lock().unwrap().extend_from_slice(b);
        if b.ends_with(b": ") || b.ends_with(b"] ") {
            let _ = self.typed.send("no".into());
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// docs/contract.md rule 15 for origin questions: they share the run's
/// terminal, so a stop closes an open one at once (deny), and an
/// answer typed after the stop answers no later question.
#[test]
fn a_stop_closes_an_open_origin_question_and_a_late_answer_approves_nothing() {
    use sandtop_egress::proxy::Answer;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (tx, rx) = mpsc::channel::<String>();
    let shown: std::sync::Arc<std::sync::Mutex<Vec<u8>>> = Default::default();
    struct Out(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Out {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let t: SharedTerminal = std::sync::Arc::new(std::sync::Mutex::new(Terminal::from_parts(
        rx,
        Box::new(Out(shown.clone())),
    )));
    let stopped = std::sync::Arc::new(AtomicBool::new(false));
    let mut a = Approvals {
        terminal: Some(t.clone()),
        ..Approvals::default()
    };
    let s = stopped.clone();
    a.on_stop(std::sync::Arc::new(move || s.load(Ordering::SeqCst)));
    // The question is open (nobody answers) when the run stops.
    let asking = {
        let t = t.clone();
        std::thread::spawn(move || ask_origin(Some(&t), None, "https://late.example"))
    };
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert!(
        !asking.is_finished(),
        "the question did not wait for an answer"
    );
    let at = std::time::Instant::now();
    stopped.store(true, Ordering::SeqCst);
    assert_eq!(asking.join().unwrap(), Answer::Deny);
    assert!(
        at.elapsed() < std::time::Duration::from_secs(1),
        "closed late"
    );
    let text = String::from_utf8_lossy(&shown.lock().unwrap()).to_string();
    assert!(text.contains("this question is closed"), "{text}");
    // `approve` typed now answers nothing: the next question (still
    // stopped) is closed too, and the line is no answer to it.
    tx.send("approve".into()).unwrap();
    assert_eq!(
        ask_origin(Some(&t), None, "https://late.example"),
        Answer::Deny
    );
}

#[test]
fn prompts_show_model_guest_and_page_text_without_escape_sequences() {
    for (name, evil) in sandtop_testkit::escapes::corpus() {
        let (tx, rx) = mpsc::channel();
        let screen = Screen {
            shown: Default::default(),
            typed: tx,
        };
        let t: SharedTerminal = std::sync::Arc::new(std::sync::Mutex::new(Terminal::from_parts(
            rx,
            Box::new(screen.clone()),
        )));
        let mut a = Approvals {
            terminal: Some(t.clone()),
            ..Approvals::default()
        };
        let checks = [SafetyCheck {
            id: "sc".into(),
            code: Some(format!("code{evil}")),
            message: Some(format!("The page says: {evil}")),
        }];
        let typed = Action::Type {
            text: format!("typed {evil}"),
        };
        let call_id = format!("call{evil}");
        let d = a.approve_checks(&CheckRequest {
            call_id: &call_id,
            checks: &checks,
            actions: std::slice::from_ref(&typed),
            marked: None,
            changed_since: None,
            scripted: None,
        });
        assert!(matches!(d, Decision::Deny(_)), "{name}");
        let d = a.confirm_action(&ActionRequest {
            call_id: &call_id,
            action: Some(&typed),
            index: 0,
            of: 1,
            marked: None,
            changed_since: None,
        });
        assert!(matches!(d, Decision::Deny(_)), "{name}");
        assert_eq!(
            a.ask(&format!("Which one?\n{evil}")),
            Some("no".into()),
            "{name}"
        );
        assert_eq!(
            ask_origin(Some(&t), None, &format!("https://{evil}.test")),
            sandtop_egress::proxy::Answer::Deny,
            "{name}"
        );
        let shown = String::from_utf8(screen.shown.lock().unwrap().clone()).unwrap();
        assert!(
            sandtop_hostkit::term::is_inert(&shown),
            "{name}: the terminal got {shown:?}"
        );
        assert!(shown.contains("The page says: "), "{name}");
    }
}

#[test]
fn policy_files_are_strict() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.json");
    std::fs::write(
        &p,
        r#"{"approve_check_codes": ["a"], "confirm_actions": "deny"}"#,
    )
    .unwrap();
    let pol = Policy::load(&p).unwrap();
    assert_eq!(pol.confirm_actions, Some(PolicyAnswer::Deny));
    std::fs::write(&p, r#"{"approve_everything": true}"#).unwrap();
    assert!(Policy::load(&p).is_err());
    std::fs::write(&p, r#"{"approve_browser_members": ["click", "type"]}"#).unwrap();
    assert_eq!(
        Policy::load(&p).unwrap().approve_browser_members,
        ["click", "type"]
    );
    // A misspelt member is an error, not a policy that silently
    // approves nothing.
    std::fs::write(&p, r#"{"approve_browser_members": ["clik"]}"#).unwrap();
    let e = sandtop_hostkit::chain::chain(&Policy::load(&p).unwrap_err());
    assert!(e.contains("`clik` is not a browser member"), "{e}");
}

#[test]
fn browser_calls_are_approved_by_yes_a_listed_member_or_the_scripted_flag_only() {
    let proof = ScriptedModel::new(Box::new(Fixed(Default::default()))).scripted();
    assert!(proof.is_some());
    let scripted_req = |member| BrowserRequest {
        call_id: "c1",
        member,
        read: false,
        description: "browser_click {\"target\":\"e1\"}",
        scripted: proof,
    };
    let req = |member| BrowserRequest {
        scripted: None,
        ..scripted_req(member)
    };
    let mut none = Approvals::default();
    assert!(matches!(
        none.confirm_browser(&req("click")),
        Decision::Deny(_)
    ));
    // Nobody to ask: denied by default, and the trajectory says so.
    assert_eq!(none.decided_by(), Some(DecidedBy::Nobody));
    let mut policy = Approvals {
        policy: Some(Policy {
            approve_browser_members: vec!["click".into()],
            ..Policy::default()
        }),
        ..Approvals::default()
    };
    assert_eq!(policy.confirm_browser(&req("click")), Decision::Approve);
    assert_eq!(policy.decided_by(), Some(DecidedBy::Policy));
    assert!(matches!(
        policy.confirm_browser(&req("type")),
        Decision::Deny(_)
    ));
    let mut scripted = Approvals {
        scripted_checks: true,
        ..Approvals::default()
    };
    assert_eq!(
        scripted.confirm_browser(&scripted_req("navigate")),
        Decision::Approve
    );
    assert_eq!(scripted.decided_by(), Some(DecidedBy::Scripted));
    // The flag without the scripted model's proof (a real model's call)
    // approves nothing.
    assert!(matches!(
        scripted.confirm_browser(&req("navigate")),
        Decision::Deny(_)
    ));
    /// Types `answer` when the prompt is shown.
    struct Answering(mpsc::Sender<String>, &'static str);
    impl std::io::Write for Answering {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if b.ends_with(b": ") {
                let _ = self.0.send(self.1.into());
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    for (typed, want) in [("yes", true), ("y", false), ("approved", false)] {
        let (tx, rx) = mpsc::channel();
        let mut t = Approvals {
            terminal: Some(std::sync::Arc::new(std::sync::Mutex::new(
                Terminal::from_parts(rx, Box::new(Answering(tx, typed))),
            ))),
            ..Approvals::default()
        };
        assert_eq!(
            t.confirm_browser(&req("click")) == Decision::Approve,
            want,
            "{typed}"
        );
    }
}

#[test]
fn targets_are_marked_where_the_actions_point() {
    let (w, h) = (64u32, 48u32);
    let mut png_bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png_bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().unwrap();
        wr.write_image_data(&vec![0u8; (w * h * 3) as usize])
            .unwrap();
    }
    let action = Action::Click {
        button: Button::Left,
        x: 30,
        y: 20,
        keys: None,
    };
    let out = mark_targets(&png_bytes, &[action]).unwrap();
    let mut r = png::Decoder::new(std::io::Cursor::new(out))
        .read_info()
        .unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    r.next_frame(&mut buf).unwrap();
    let px = |x: u32, y: u32| &buf[((y * w + x) * 3) as usize..((y * w + x) * 3 + 3) as usize];
    assert_eq!(px(30, 20), &[230, 20, 20]);
    assert_eq!(px(5, 5), &[0, 0, 0]);
}

/// The thread's result, or a failure after 30 s: a question nobody can
/// answer fails the test instead of hanging the whole run.
fn joined<T>(h: std::thread::JoinHandle<T>) -> T {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !h.is_finished() {
        assert!(
            std::time::Instant::now() < until,
            "the question was still open after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    h.join().unwrap()
}

/// A pseudo-terminal whose far end answers prompts: each `(prompt, line)`
/// is typed once the prompt has been shown. Returns the terminal and a
/// handle that yields everything the terminal showed (echo included).
fn pty(script: Vec<(&'static str, &'static str)>) -> (Terminal, std::thread::JoinHandle<String>) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    use std::io::Read as _;
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let path = PathBuf::from(name.to_str().unwrap());
    let t = Terminal::open_path(&path).expect("the pty's far end opens");
    let mut m = std::fs::File::from(master);
    let handle = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut next = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut buf = [0u8; 4096];
        let mut w = m.try_clone().unwrap();
        // Non-blocking reads with a short poll, so the loop can end.
        rustix::fs::fcntl_setfl(&m, rustix::fs::OFlags::NONBLOCK).unwrap();
        while std::time::Instant::now() < deadline {
            match m.read(&mut buf) {
                Ok(n) if n > 0 => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                _ => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
            if let Some((prompt, line)) = script.get(next) {
                if seen.contains(prompt) {
                    // Each prompt is answered once, after it appeared.
                    seen = seen.replacen(prompt, &format!("<{next}>"), 1);
                    w.write_all(line.as_bytes()).unwrap();
                    w.write_all(b"\n").unwrap();
                    next += 1;
                }
            } else if seen.contains("<end>") {
                break;
            }
        }
        seen
    });
    (t, handle)
}

#[test]
fn a_secret_is_read_with_echo_off_and_echo_comes_back() {
    let (mut t, far) = pty(vec![
        ("Secret: ", "canary-s3cret"),
        ("Plain: ", "visible-line"),
    ]);
    let s = t.read_secret("Secret: ").expect("a secret");
    assert_eq!(s.expose(), "canary-s3cret");
    // Echo is back for the next, ordinary question.
    assert_eq!(t.prompt("Plain: ").as_deref(), Some("visible-line"));
    t.say("<end>");
    let shown = far.join().unwrap();
    assert!(
        !shown.contains("canary"),
        "the secret was echoed: {shown:?}"
    );
    assert!(
        shown.contains("visible-line"),
        "echo did not come back: {shown:?}"
    );
}

#[test]
fn a_terminal_that_cannot_hide_input_is_never_asked_for_a_secret() {
    let (tx, rx) = mpsc::channel();
    tx.send("canary".to_string()).unwrap();
    let mut t = Terminal::from_parts(rx, Box::new(std::io::sink()));
    assert!(t.read_secret("Password: ").is_none());
}

#[test]
fn sign_in_on_the_terminal_reads_each_value_with_echo_off() {
    let req = crate::sign_in::rules::parse_request(
        &serde_json::json!({
            "credential_origin": "http://127.0.0.1:8080",
            "reason": "Sign in\u{202e} to see the account",
            "fields": [
                {"id": "email", "label": "Email", "type": "email", "required": true, "target": "d1.1"},
                {"id": "password", "label": "Password", "type": "password", "required": true, "target": "d1.2"},
            ],
            "options": null,
        })
        .to_string(),
    )
    .unwrap();
    let (t, far) = pty(vec![
        ("anything else declines: ", "yes"),
        ("Email (email, required, not shown", "ada@canary.example"),
        ("Password (password, required, not shown", "canary-pw"),
    ]);
    let mut a = Approvals {
        terminal: Some(std::sync::Arc::new(std::sync::Mutex::new(t))),
        ..Approvals::default()
    };
    let answer = a.sign_in(&SignInPrompt {
        call_id: "call_1",
        request: &req,
    });
    lock(a.terminal.as_ref().unwrap()).say("<end>");
    let shown = far.join().unwrap();
    match answer {
        SignInAnswer::Submit {
            option,
            values,
            source,
        } => {
            assert_eq!((option, source), (None, "terminal"));
            let got: Vec<(&str, &str)> = values
                .iter()
                .map(|(i, v)| (i.as_str(), v.expose()))
                .collect();
            assert_eq!(
                got,
                [("email", "ada@canary.example"), ("password", "canary-pw")]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        shown.contains("Credentials go to: http://127.0.0.1:8080"),
        "{shown}"
    );
    assert!(!shown.contains("canary"), "a value was shown: {shown:?}");
    // The model's reason is made inert (no bidi override reaches the tty).
    assert!(!shown.contains('\u{202e}'), "{shown:?}");
    // Declining: anything but `yes`.
    let (t, far) = pty(vec![("anything else declines: ", "no")]);
    let mut a = Approvals {
        terminal: Some(std::sync::Arc::new(std::sync::Mutex::new(t))),
        ..Approvals::default()
    };
    let answer = a.sign_in(&SignInPrompt {
        call_id: "call_2",
        request: &req,
    });
    lock(a.terminal.as_ref().unwrap()).say("<end>");
    far.join().unwrap();
    assert!(matches!(answer, SignInAnswer::Decline { .. }), "{answer:?}");
    // No terminal, no file: declined.
    let answer = Approvals::default().sign_in(&SignInPrompt {
        call_id: "call_3",
        request: &req,
    });
    assert!(matches!(answer, SignInAnswer::Decline { .. }));
}

/// docs/contract.md rule 50: a question is asked on the terminal and in the view at once;
/// the view's button closes the terminal prompt, a line typed first closes
/// the view's question, and without a terminal a connected viewer answers.
#[test]
fn the_first_answer_wins_between_the_terminal_and_the_view() {
    use sandtop_control::served::{Hello, Served};
    use sandtop_control::wire::{Event, SOCKET_NAME};
    use std::io::{BufRead as _, Write as _};
    #[derive(Clone)]
    struct Out(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Out {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let served = rt
        .block_on(async {
            Served::bind(
                dir.path(),
                Hello {
                    session: "s".into(),
                    run_folder: "r".into(),
                    task: "t".into(),
                    max_steps: 3,
                },
            )
        })
        .unwrap();
    let sock = std::os::unix::net::UnixStream::connect(dir.path().join(SOCKET_NAME)).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut lines = std::io::BufReader::new(sock.try_clone().unwrap()).lines();
    let mut viewer = sock;
    let mut next_event = move || -> Event {
        serde_json::from_str(&lines.next().expect("a line").expect("read")).unwrap()
    };
    // hello, state
    next_event();
    next_event();
    fn closed(next: &mut impl FnMut() -> Event) -> Event {
        loop {
            let e = next();
            if matches!(e, Event::Closed { .. }) {
                return e;
            }
        }
    }
    fn question(next: &mut impl FnMut() -> Event) -> u64 {
        loop {
            if let Event::Question { id, .. } = next() {
                return id;
            }
        }
    }

    let (tx, rx) = mpsc::channel::<String>();
    let shown = Out(Default::default());
    let t: SharedTerminal = std::sync::Arc::new(std::sync::Mutex::new(Terminal::from_parts(
        rx,
        Box::new(shown.clone()),
    )));
    let a = std::sync::Arc::new(std::sync::Mutex::new(Approvals {
        terminal: Some(t.clone()),
        view: Some(served.clone()),
        ..Approvals::default()
    }));
    let req = |a: &std::sync::Arc<std::sync::Mutex<Approvals>>| {
        let a = a.clone();
        std::thread::spawn(move || {
            a.lock().unwrap().approve_checks(&CheckRequest {
                call_id: "call_v",
                checks: &[check(Some("sensitive_domain"))],
                actions: &[],
                marked: None,
                changed_since: None,
                scripted: None,
            })
        })
    };

    // The view answers first.
    let asking = req(&a);
    let id = question(&mut next_event);
    writeln!(
        viewer,
        r#"{{"type":"answer","id":{id},"answer":"approve"}}"#
    )
    .unwrap();
    assert_eq!(joined(asking), Decision::Approve);
    assert_eq!(
        closed(&mut next_event),
        Event::Closed {
            id,
            by: "view".into(),
            answer: "approve".into()
        }
    );
    let text = String::from_utf8_lossy(&shown.0.lock().unwrap()).to_string();
    assert!(text.contains("(answered in the view: approve)"), "{text}");
    assert_eq!(a.lock().unwrap().decided_by(), Some(DecidedBy::View));

    // The terminal answers first; the view's later button changes nothing.
    // The line is typed once the prompt shows: a line typed before it is
    // guidance for the model, not the answer (and nothing else would ever
    // answer: CI once hung here when the line won that race).
    let asking = req(&a);
    let id = question(&mut next_event);
    let prompts = |o: &Out| {
        String::from_utf8_lossy(&o.0.lock().unwrap())
            .matches("Type `yes` to approve")
            .count()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while prompts(&shown) < 2 {
        assert!(
            std::time::Instant::now() < until,
            "the terminal's prompt never showed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    tx.send("no thanks".into()).unwrap();
    assert!(matches!(joined(asking), Decision::Deny(_)));
    assert_eq!(a.lock().unwrap().decided_by(), Some(DecidedBy::Terminal));
    assert_eq!(
        closed(&mut next_event),
        Event::Closed {
            id,
            by: "terminal".into(),
            answer: "deny".into()
        }
    );
    writeln!(
        viewer,
        r#"{{"type":"answer","id":{id},"answer":"approve"}}"#
    )
    .unwrap();
    assert!(loop {
        if let Event::Refused { what, .. } = next_event() {
            break what == "answer";
        }
    });

    // No terminal: the connected viewer is asked, and denies.
    a.lock().unwrap().terminal = None;
    let asking = req(&a);
    let id = question(&mut next_event);
    writeln!(viewer, r#"{{"type":"answer","id":{id},"answer":"deny"}}"#).unwrap();
    assert_eq!(
        joined(asking),
        Decision::Deny("the operator denied it in the view".into())
    );
    // The model's question: the view's text is the answer.
    let asking = {
        let a = a.clone();
        std::thread::spawn(move || a.lock().unwrap().ask("which colour?"))
    };
    let id = question(&mut next_event);
    writeln!(
        viewer,
        r#"{{"type":"answer","id":{id},"answer":"text","text":" blue "}}"#
    )
    .unwrap();
    assert_eq!(joined(asking), Some("blue".into()));
    served.finish("finished");
    drop(rt);
}

/// `host-cli mcp`'s question in the view alone: with no viewer it is
/// denied at once; a connected viewer's Approve approves and Deny denies,
/// each closed as the view's; a stop closes it unanswered.
#[test]
fn a_question_in_the_view_alone_is_the_viewers_or_nobodys() {
    use sandtop_control::served::{Hello, Served};
    use sandtop_control::wire::{Event, SOCKET_NAME};
    use std::io::{BufRead as _, Write as _};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let served = rt
        .block_on(async {
            Served::bind(
                dir.path(),
                Hello {
                    session: "s".into(),
                    run_folder: "r".into(),
                    task: "host-cli mcp".into(),
                    max_steps: 0,
                },
            )
        })
        .unwrap();
    let ask = |stop: Option<StopCheck>| {
        let s = served.clone();
        std::thread::spawn(move || {
            ask_in_view(
                &s,
                stop,
                QuestionKind::ConfirmAction,
                "An MCP client's call on guest s".into(),
                "  0: {\"type\":\"type\",\"text\":\"x\"}".into(),
            )
        })
    };
    // No viewer: denied at once, by nobody.
    let (by, d) = joined(ask(None));
    assert_eq!(by, DecidedBy::Nobody);
    assert!(
        matches!(d, Decision::Deny(ref w) if w.contains("host-cli view")),
        "{d:?}"
    );

    let sock = std::os::unix::net::UnixStream::connect(dir.path().join(SOCKET_NAME)).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut lines = std::io::BufReader::new(sock.try_clone().unwrap()).lines();
    let mut viewer = sock;
    let mut next = move || -> Event {
        serde_json::from_str(&lines.next().expect("a line").expect("read")).unwrap()
    };
    next();
    next();
    for _ in 0..500 {
        if served.viewers() == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for (word, want) in [
        ("approve", Decision::Approve),
        ("deny", Decision::Deny(String::new())),
    ] {
        let h = ask(None);
        let id = loop {
            if let Event::Question {
                id, kind, answers, ..
            } = next()
            {
                assert_eq!(kind, QuestionKind::ConfirmAction);
                assert_eq!(answers, ["approve", "deny"]);
                break id;
            }
        };
        writeln!(viewer, r#"{{"type":"answer","id":{id},"answer":"{word}"}}"#).unwrap();
        let (by, d) = joined(h);
        assert_eq!(by, DecidedBy::View);
        assert_eq!(
            std::mem::discriminant(&d),
            std::mem::discriminant(&want),
            "{d:?}"
        );
        loop {
            if let Event::Closed { id: c, by, answer } = next() {
                assert_eq!((c, by.as_str(), answer.as_str()), (id, "view", word));
                break;
            }
        }
    }
    // The call ends while asked: closed by `stop`, nothing approved.
    let stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stopped.clone();
    let h = ask(Some(std::sync::Arc::new(move || {
        flag.load(std::sync::atomic::Ordering::SeqCst)
    })));
    loop {
        if let Event::Question { .. } = next() {
            break;
        }
    }
    stopped.store(true, std::sync::atomic::Ordering::SeqCst);
    let (by, d) = joined(h);
    assert_eq!(by, DecidedBy::Nobody);
    assert!(matches!(d, Decision::Deny(_)));
    loop {
        if let Event::Closed { by, answer, .. } = next() {
            assert_eq!((by.as_str(), answer.as_str()), ("stop", "deny"));
            break;
        }
    }
}
