//! The server's rules without a client or a guest: the tool list, strict
//! arguments, who may approve, the `input_required` rounds and the
//! network a tool may ask for. The whole server, driven by the official
//! Python SDK against a real guest, is python/tests/test_mcp.py.

use clap::Parser as _;
use rmcp::model::{ElicitResult, ElicitationAction};
use sandtop_protocol::Action;
use serde_json::{Value, json};

use super::approval::{self, Pending, Verdict};
use super::computer::{describe, fields, needs_approval, opt_size};
use super::guests::network_within;
use super::*;
use sandtop_agent::approve::{Policy, PolicyAnswer};
use sandtop_egress::service::EgressConfig;

/// `host-cli mcp`'s options as its command line gives them.
#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    mcp: McpArgs,
}

fn args(extra: &[&str]) -> McpArgs {
    let mut argv = vec!["mcp"];
    argv.extend_from_slice(extra);
    match Cli::try_parse_from(argv) {
        Ok(c) => c.mcp,
        Err(e) => panic!("not parsed as mcp: {e}"),
    }
}

fn config(a: &McpArgs) -> Config {
    Config {
        confirm: a.confirm,
        policy: None,
        browser: toolset(a).unwrap(),
        backend: a.backend,
        guest: a.guest.clone(),
        network: a.net.config(),
        keep: a.keep,
        pool: a.pool,
        credentials: None,
    }
}

fn names(cfg: &Config) -> Vec<String> {
    tools::all(cfg).iter().map(|t| t.name.to_string()).collect()
}

#[test]
fn the_tools_have_their_exact_names_schemas_and_annotations() {
    let cfg = config(&args(&[]));
    let tools = tools::all(&cfg);
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names[..5],
        [
            "sandtop_guest_start",
            "sandtop_guest_stop",
            "sandtop_guest_list",
            "computer",
            "screenshot"
        ]
    );
    for t in &tools {
        assert_eq!(t.input_schema["type"], "object", "{}", t.name);
        assert_eq!(t.input_schema["additionalProperties"], false, "{}", t.name);
        assert!(t.output_schema.is_some(), "{} has no output schema", t.name);
        let a = t.annotations.as_ref().unwrap();
        assert!(a.read_only_hint.is_some() && a.destructive_hint.is_some());
        assert!(a.open_world_hint.is_some());
    }
    let by = |n: &str| tools.iter().find(|t| t.name == n).unwrap();
    let ro = |n: &str| by(n).annotations.as_ref().unwrap().read_only_hint;
    assert_eq!(ro("screenshot"), Some(true));
    assert_eq!(ro("sandtop_guest_list"), Some(true));
    assert_eq!(ro("computer"), Some(false));
    assert_eq!(ro("browser_read_page"), Some(true));
    assert_eq!(ro("browser_click"), Some(false));
    assert_eq!(
        by("computer")
            .annotations
            .as_ref()
            .unwrap()
            .destructive_hint,
        Some(true)
    );
    // No network given: nothing reaches the open world.
    assert!(
        tools
            .iter()
            .all(|t| t.annotations.as_ref().unwrap().open_world_hint == Some(false))
    );
}

#[test]
fn the_browser_tools_follow_the_toolsets_rules() {
    let plain = names(&config(&args(&[])));
    assert!(plain.contains(&"browser_click".to_string()));
    for absent in ["browser_navigate", "browser_new_tab", "browser_key"] {
        assert!(!plain.contains(&absent.to_string()), "{absent} offered");
    }
    let nav = names(&config(&args(&["--url-policy", "http://127.0.0.1:8000"])));
    assert!(nav.contains(&"browser_navigate".to_string()));
    assert!(!nav.contains(&"browser_key".to_string()));
    let add = names(&config(&args(&["--browser-add", "hover_at"])));
    assert!(add.contains(&"browser_hover_at".to_string()));
    let e = toolset(&args(&["--browser-add", "click"])).unwrap_err();
    assert!(e.to_string().contains("default member already"), "{e}");
    let e = toolset(&args(&["--browser-add", "upload_file"])).unwrap_err();
    assert!(e.to_string().contains("--grant"), "{e}");
    assert!(
        !names(&config(&args(&["--no-browser"])))
            .iter()
            .any(|n| n.starts_with("browser_"))
    );
}

#[test]
fn arguments_are_exact_and_an_unknown_field_is_named() {
    let v = json!({"session": "a", "actions": [], "bogus": 1});
    let e = fields(&v, &["session", "actions", "size"]).unwrap_err();
    assert!(e.contains("unknown field `bogus`"), "{e}");
    let size = |v: Value| opt_size(v.as_object().unwrap());
    assert_eq!(
        size(json!({"size": {"width": 640, "height": 400}})).unwrap(),
        Some(sandtop_protocol::Size::new(640, 400))
    );
    assert!(size(json!({"size": {"width": 0, "height": 400}})).is_err());
    assert!(size(json!({"size": {"width": 640, "height": 400, "depth": 3}})).is_err());
    assert_eq!(size(json!({})).unwrap(), None);
}

#[test]
fn typing_and_keys_need_approval_and_other_actions_do_not() {
    let a = |v: Value| Action::from_model_value(&v).unwrap();
    let click = a(json!({"type": "click", "button": "left", "x": 1, "y": 1}));
    let ctrl_click =
        a(json!({"type": "click", "button": "left", "x": 1, "y": 1, "keys": ["CTRL"]}));
    let typing = a(json!({"type": "type", "text": "hi\u{1b}[31m"}));
    let keys = a(json!({"type": "keypress", "keys": ["ENTER"]}));
    assert!(!needs_approval(
        std::slice::from_ref(&click),
        Confirm::Changes
    ));
    assert!(needs_approval(std::slice::from_ref(&click), Confirm::All));
    for batch in [
        vec![click.clone(), typing.clone()],
        vec![ctrl_click],
        vec![keys],
    ] {
        assert!(needs_approval(&batch, Confirm::Changes), "{batch:?}");
    }
    // What the person is shown is inert: no escape sequence survives.
    let d = describe(&[click, typing]);
    assert!(!d.contains('\u{1b}'), "{d:?}");
    assert!(d.contains("0: ") && d.contains("1: "), "{d}");
}

#[test]
fn only_an_accepted_form_with_approve_true_approves() {
    let r = |action, content: Option<Value>| {
        let mut e = ElicitResult::new(action);
        e.content = content;
        approval::decide(&e)
    };
    assert!(r(ElicitationAction::Accept, Some(json!({"approve": true}))).is_ok());
    assert!(r(ElicitationAction::Accept, Some(json!({"approve": false}))).is_err());
    assert!(r(ElicitationAction::Accept, Some(json!({"approve": "true"}))).is_err());
    assert!(r(ElicitationAction::Accept, None).is_err());
    assert!(r(ElicitationAction::Decline, Some(json!({"approve": true}))).is_err());
    assert!(r(ElicitationAction::Cancel, None).is_err());
}

#[test]
fn the_form_is_a_form_mode_request_of_one_boolean() {
    let q = approval::Question {
        session: "s1",
        member: Some("click"),
        description: "browser_click {\"target\":\"e1\"}".into(),
        view: None,
    };
    let v = serde_json::to_value(approval::form(&q)).unwrap();
    assert_eq!(v["mode"], "form");
    assert_eq!(
        v["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    assert_eq!(v["requestedSchema"]["required"], json!(["approve"]));
    let m = v["message"].as_str().unwrap();
    assert!(m.contains("guest s1") && m.contains("browser_click"), "{m}");
}

#[test]
fn without_elicitation_only_the_operators_policy_approves() {
    let refused_by_nobody = |v: Verdict| matches!(v, Verdict::Refused { by: "nobody", ref why } if why == approval::NO_ONE);
    assert!(refused_by_nobody(approval::by_policy(None, None)));
    assert!(refused_by_nobody(approval::by_policy(None, Some("click"))));
    let p = Policy {
        confirm_actions: Some(PolicyAnswer::Approve),
        approve_browser_members: vec!["click".into()],
        ..Policy::default()
    };
    assert!(matches!(
        approval::by_policy(Some(&p), None),
        Verdict::Approved { by: "policy" }
    ));
    assert!(matches!(
        approval::by_policy(Some(&p), Some("click")),
        Verdict::Approved { by: "policy" }
    ));
    assert!(refused_by_nobody(approval::by_policy(
        Some(&p),
        Some("type")
    )));
    let deny = Policy {
        confirm_actions: Some(PolicyAnswer::Deny),
        ..Policy::default()
    };
    assert!(matches!(
        approval::by_policy(Some(&deny), None),
        Verdict::Refused { by: "policy", .. }
    ));
    // The refusal says how to allow it.
    assert!(approval::NO_ONE.contains("--approve-policy"));
}

#[test]
fn network_is_none_or_within_the_operators_allow_list() {
    let op = |s: &str| EgressConfig {
        mode: s.parse().unwrap(),
        ..EgressConfig::none()
    };
    let none = op("none");
    assert_eq!(
        network_within(None, &none).unwrap().mode,
        sandtop_egress::policy::NetworkMode::None
    );
    assert!(network_within(Some("allow:https://example.com"), &none).is_err());
    assert!(network_within(Some("open"), &none).is_err());
    let allow = op("allow:https://example.com,https://example.org");
    assert!(network_within(Some("allow:https://example.org"), &allow).is_ok());
    let e = network_within(Some("allow:https://evil.test"), &allow).unwrap_err();
    assert!(e.contains("https://evil.test"), "{e}");
    assert!(network_within(Some("ask"), &allow).is_err());
    // `ask` only when the operator asks, and then exactly the operator's.
    let ask = op("ask:https://example.com");
    assert_eq!(network_within(Some("ask"), &ask).unwrap(), ask);
    assert!(network_within(Some("ask:https://evil.test"), &ask).is_err());
    assert!(network_within(Some("allow:https://example.com"), &ask).is_err());
    assert_eq!(
        network_within(None, &ask).unwrap().mode,
        sandtop_egress::policy::NetworkMode::None
    );
}

#[test]
fn the_protocol_revisions_are_the_three_asked_for() {
    let v: Vec<&str> = PROTOCOL_VERSIONS.iter().map(|v| v.as_str()).collect();
    assert_eq!(v, ["2025-06-18", "2025-11-25", "2026-07-28"]);
}

#[test]
fn pending_rounds_are_used_once_for_the_same_call() {
    let mut p = Pending::default();
    let args = json!({"actions": [{"type": "type", "text": "x"}]});
    let s1 = p.insert("computer", &args).unwrap();
    let s2 = p.insert("computer", &args).unwrap();
    assert_ne!(s1, s2);
    assert_eq!(s1.len(), 32);
    assert!(p.take(&s1, "computer", &args).is_ok());
    // Once only.
    assert!(p.take(&s1, "computer", &args).is_err());
    // Another tool or other arguments: refused, and the round is spent.
    assert!(p.take(&s2, "computer", &json!({"actions": []})).is_err());
    assert!(p.take(&s2, "computer", &args).is_err());
    let s3 = p.insert("computer", &args).unwrap();
    assert!(p.take(&s3, "browser_click", &args).is_err());
    assert!(p.take("not-a-state", "computer", &args).is_err());
    // Bounded: the oldest questions go first.
    let first = p.insert("computer", &args).unwrap();
    for _ in 0..40 {
        p.insert("computer", &args).unwrap();
    }
    assert!(p.take(&first, "computer", &args).is_err());
}
