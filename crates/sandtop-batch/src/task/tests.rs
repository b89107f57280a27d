use serde_json::json;

use super::*;
use crate::read::{parse, parse_line};

const GOOD: &str = r#"{"id": "note", "instruction": "Write a note.", "setup": [{"launch": ["mousepad"]}, {"wait_window": {"title": "Mousepad"}}], "checks": [{"file_equals": {"path": "/home/user/n.txt", "text": "hi"}}], "solution": [[{"type": "type", "text": "hi"}]]}"#;

#[test]
fn a_native_task_is_read_with_its_defaults() {
    let entries = parse(&format!("\n// a comment\n{GOOD}\n")).unwrap();
    let [Entry::Task(t)] = entries.as_slice() else {
        panic!("{entries:?}")
    };
    assert_eq!(t.id, "note");
    assert_eq!(t.line, 3);
    assert_eq!(t.max_steps, DEFAULT_MAX_STEPS);
    assert_eq!(t.network, "none");
    assert!(!t.osworld);
    assert_eq!(t.solution.as_ref().map(Vec::len), Some(1));
}

#[test]
fn every_bad_line_is_named_by_its_number_and_nothing_is_read() {
    let text = [
        GOOD,
        "{not json",
        r#"{"id": "x", "instruction": "y", "checks": [], "bogus": 1}"#,
        r#"{"id": "x", "instruction": "y", "checks": []}"#,
        r#"{"id": "../x", "instruction": "y", "checks": [{"page_text": {"contains": "a"}}]}"#,
        GOOD,
        r#"{"id": "f", "instruction": "y", "checks": [{"file_equals": {"path": "/etc/passwd", "text": ""}}]}"#,
        r#"{"id": "s", "instruction": "y", "checks": [{"page_text": {"contains": "a"}}], "solution": [[{"type": "teleport"}]]}"#,
        r#"{"id": "n", "instruction": "y", "checks": [{"page_text": {"contains": "a"}}], "network": "ask"}"#,
        r#"[1, 2]"#,
    ]
    .join("\n");
    let FileErrors(errs) = parse(&text).unwrap_err();
    let lines: Vec<usize> = errs.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7, 8, 9, 10], "{errs:?}");
    assert!(errs[0].message.starts_with("not JSON"), "{}", errs[0]);
    assert!(errs[1].message.contains("bogus"), "{}", errs[1]);
    assert!(errs[2].message.contains("no `checks`"), "{}", errs[2]);
    assert!(errs[3].message.contains("`id`"), "{}", errs[3]);
    assert!(
        errs[4]
            .message
            .contains("duplicate id \"note\" (first on line 1)"),
        "{}",
        errs[4]
    );
    assert!(errs[5].message.contains("/home/user"), "{}", errs[5]);
    assert!(
        errs[6].message.contains("not a computer action"),
        "{}",
        errs[6]
    );
    assert!(errs[7].message.contains("`ask`"), "{}", errs[7]);
    assert_eq!(errs[8].to_string(), "line 10: a task is a JSON object");
    assert!(parse("\n\n").is_err(), "an empty file");
}

#[test]
fn a_program_the_guest_lacks_makes_the_task_unsupported() {
    let line = json!({"id": "g", "instruction": "y", "setup": [{"launch": ["gimp", "x.png"]}],
                      "checks": [{"page_text": {"contains": "a"}}]})
    .to_string();
    let e = parse_line(&line, 4).unwrap();
    assert_eq!(
        e,
        Entry::Unsupported {
            id: "g".into(),
            instruction: "y".into(),
            line: 4,
            names: vec!["launch:gimp".into()]
        }
    );
}
