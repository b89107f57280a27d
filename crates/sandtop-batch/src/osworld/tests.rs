use serde_json::json;

use super::*;

fn mapped(v: Value) -> Entry {
    map(&v, 7).unwrap()
}

#[test]
fn an_osworld_task_with_what_the_guest_has_maps_to_steps_and_checks() {
    let e = mapped(json!({
        "id": "ow-1", "snapshot": "os", "instruction": "Write hello.",
        "source": "https://example.org", "related_apps": ["gedit"],
        "config": [
            {"type": "launch", "parameters": {"command": ["mousepad", "/home/user/a.txt"]}},
            {"type": "activate_window", "parameters": {"window_name": "a.txt", "strict": true}},
            {"type": "sleep", "parameters": {"seconds": 0.5}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["http://127.0.0.1:8080/", "about:blank"]}}
        ],
        "evaluator": {
            "func": ["compare_text_file", "check_include_exclude"],
            "result": [{"type": "vm_file", "path": "/home/user/a.txt", "dest": "a.txt"},
                       {"type": "vm_file", "path": "/home/user/b.txt", "dest": "b.txt"}],
            "expected": [{"type": "rule", "rules": {"expected": "hello\n"}},
                         {"type": "rule", "rules": {"include": ["x"], "exclude": ["y"]}}],
            "options": [{"ignore_blanks": true}, {}]
        }
    }));
    let Entry::Task(t) = e else { panic!("{e:?}") };
    assert!(t.osworld);
    assert_eq!(t.line, 7);
    assert_eq!(
        t.setup,
        vec![
            Setup::Launch(vec!["mousepad".into(), "/home/user/a.txt".into()]),
            Setup::WaitWindow {
                title: "a.txt".into(),
                timeout_s: None
            },
            Setup::Sleep(0.5),
            Setup::OpenUrl("http://127.0.0.1:8080/".into()),
            Setup::NewTab("about:blank".into()),
        ]
    );
    assert_eq!(
        t.checks,
        vec![
            CheckSpec::FileEquals {
                path: "/home/user/a.txt".into(),
                text: "hello\n".into(),
                ignore_case: false,
                ignore_blanks: true
            },
            CheckSpec::FileContains {
                path: "/home/user/b.txt".into(),
                include: vec!["x".into()],
                exclude: vec!["y".into()]
            },
        ]
    );
}

#[test]
fn what_sandtop_cannot_honour_is_unsupported_by_name_never_an_error() {
    let e = mapped(json!({
        "id": "ow-2", "instruction": "Fix the sheet.",
        "config": [
            {"type": "execute", "parameters": {"command": "rm -rf ~/x", "shell": true}},
            {"type": "launch", "parameters": {"command": ["libreoffice", "--calc"]}},
            {"type": "open", "parameters": {"path": "/home/user/sheet.xlsx"}}
        ],
        "evaluator": {"func": "compare_table",
                      "result": {"type": "vm_file", "path": "/home/user/sheet.xlsx"},
                      "expected": {"type": "cloud_file", "path": "https://example.org/gold.xlsx"}}
    }));
    let Entry::Unsupported {
        id, names, line, ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((id.as_str(), line), ("ow-2", 7));
    assert_eq!(
        names,
        [
            "config:execute",
            "launch:libreoffice",
            "config:open",
            "evaluator:compare_table"
        ]
    );
    // A known func with an input Sandtop does not read.
    let e = mapped(json!({
        "id": "ow-3", "instruction": "x", "config": [],
        "evaluator": {"func": "check_include_exclude",
                      "result": {"type": "vm_command_line", "command": "which spotify"},
                      "expected": {"type": "rule", "rules": {"include": ["spotify"]}}}
    }));
    let Entry::Unsupported { names, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        names,
        ["evaluator:check_include_exclude:result:vm_command_line"]
    );
    let e = mapped(json!({"id": "ow-4", "instruction": "x", "config": [],
                          "evaluator": {"func": "infeasible"}}));
    assert!(
        matches!(e, Entry::Unsupported { ref names, .. } if names == &["evaluator:infeasible"])
    );
}

#[test]
fn the_active_tab_and_exact_match_evaluators_map() {
    let e = mapped(json!({
        "id": "ow-5", "instruction": "x", "config": [],
        "evaluator": {"func": "is_expected_active_tab",
                      "result": {"type": "active_tab_info"},
                      "expected": {"type": "rule", "rules": {"type": "url", "url": "http://127.0.0.1:8080/"}}}
    }));
    let Entry::Task(t) = e else { panic!("{e:?}") };
    assert_eq!(
        t.checks,
        vec![CheckSpec::ActiveUrl {
            equals: "http://127.0.0.1:8080/".into()
        }]
    );
    let e = mapped(json!({
        "id": "ow-6", "instruction": "x", "config": [],
        "evaluator": {"func": "exact_match",
                      "result": {"type": "vm_file", "path": "/home/user/o.txt"},
                      "expected": {"type": "rule", "rules": {"expected": "42"}}}
    }));
    let Entry::Task(t) = e else { panic!("{e:?}") };
    assert!(matches!(&t.checks[0], CheckSpec::FileEquals { text, .. } if text == "42"));
}

#[test]
fn a_malformed_osworld_task_is_an_error() {
    for (v, want) in [
        (
            json!({"instruction": "x", "evaluator": {"func": "exact_match"}}),
            "`id`",
        ),
        (
            json!({"id": "a", "instruction": "x", "config": {}, "evaluator": {"func": "f"}}),
            "`config` is a list",
        ),
        (
            json!({"id": "a", "instruction": "x", "config": []}),
            "`evaluator` is an object",
        ),
        (
            json!({"id": "a", "instruction": "x", "config": [{"parameters": {}}], "evaluator": {"func": "f"}}),
            "no `type`",
        ),
        (
            json!({"id": "a", "instruction": "x", "config": [{"type": "sleep", "parameters": {}}], "evaluator": {"func": "f"}}),
            "`seconds`",
        ),
    ] {
        let err = map(&v, 3).unwrap_err();
        assert!(err.contains(want), "{err} (want {want})");
    }
}
