use serde_json::json;

use sandtop_protocol::browser::BrowserTab;

use super::*;

fn eq(text: &str, ignore_case: bool, ignore_blanks: bool) -> CheckSpec {
    CheckSpec::FileEquals {
        path: "/home/user/a.txt".into(),
        text: text.into(),
        ignore_case,
        ignore_blanks,
    }
}

#[test]
fn file_checks_compare_what_the_guest_holds() {
    assert!(judge_file(&eq("hi\n", false, false), Some(b"hi\n")).ok);
    let wrong = judge_file(&eq("hi\n", false, false), Some(b"hi"));
    assert!(!wrong.ok);
    assert!(wrong.detail.contains("want \"hi\\n\""), "{}", wrong.detail);
    assert!(!judge_file(&eq("hi", false, false), None).ok);
    assert!(judge_file(&eq("Hello World", true, true), Some(b"hello\n  world")).ok);
    assert!(!judge_file(&eq("Hello World", false, true), Some(b"hello world")).ok);
    let contains = CheckSpec::FileContains {
        path: "/home/user/a.txt".into(),
        include: vec!["a".into(), "b".into()],
        exclude: vec!["z".into()],
    };
    assert!(judge_file(&contains, Some(b"ab")).ok);
    assert!(!judge_file(&contains, Some(b"a")).ok);
    assert!(!judge_file(&contains, Some(b"abz")).ok);
    let js = CheckSpec::FileJson {
        path: "/home/user/a.json".into(),
        pointer: "/a/0".into(),
        equals: json!(3),
    };
    assert!(judge_file(&js, Some(br#"{"a": [3]}"#)).ok);
    assert!(!judge_file(&js, Some(br#"{"a": [4]}"#)).ok);
    assert!(!judge_file(&js, Some(br#"{"b": 1}"#)).ok);
    assert!(!judge_file(&js, Some(b"nope")).ok);
}

#[test]
fn the_demo_check_reads_the_last_submission_with_crlf_messages() {
    let spec = CheckSpec::DemoSubmission {
        name: Some("Ann".into()),
        email: None,
        message: Some("a\nb".into()),
    };
    let store = format!(
        "{}\n{}\n",
        json!({"seq": 1, "name": "Bob", "email": "b@x", "message": "a\r\nb"}),
        json!({"seq": 2, "name": "Ann", "email": "a@x", "message": "a\r\nb"})
    );
    assert!(judge_file(&spec, Some(store.as_bytes())).ok);
    let older = store.lines().next().unwrap();
    let c = judge_file(&spec, Some(older.as_bytes()));
    assert!(!c.ok && c.detail.contains("name \"Bob\""), "{}", c.detail);
    assert!(!judge_file(&spec, Some(b"")).ok);
}

fn state(urls: &[&str], active: usize) -> BrowserState {
    BrowserState {
        tabs: urls
            .iter()
            .enumerate()
            .map(|(i, u)| BrowserTab {
                id: format!("t{i}"),
                title: String::new(),
                url: (*u).into(),
                active: i == active,
                title_truncated: false,
            })
            .collect(),
    }
}

#[test]
fn browser_checks_read_tabs_text_and_fields() {
    let s = state(&["http://a/", "http://b/"], 1);
    let tabs = CheckSpec::Tabs {
        count: Some(2),
        urls: vec!["http://a/".into()],
    };
    assert!(judge_page(&tabs, &s, "", &[]).ok);
    assert!(!judge_page(&tabs, &state(&["http://a/"], 0), "", &[]).ok);
    let active = CheckSpec::ActiveUrl {
        equals: "http://b/".into(),
    };
    assert!(judge_page(&active, &s, "", &[]).ok);
    assert!(!judge_page(&active, &state(&["http://b/", "http://a/"], 1), "", &[]).ok);
    assert!(!judge_page(&active, &state(&[], 0), "", &[]).ok);
    let text = CheckSpec::PageText {
        contains: "Saved submission".into(),
    };
    assert!(judge_page(&text, &s, "… Saved submission 3 …", &[]).ok);
    assert!(!judge_page(&text, &s, "Contact form", &[]).ok);
    let field = CheckSpec::FieldValue {
        label: "Name".into(),
        equals: "Ann".into(),
    };
    let fields = [("Name".to_string(), "Ann".to_string())];
    assert!(judge_page(&field, &s, "", &fields).ok);
    assert!(!judge_page(&field, &s, "", &[("Name".into(), "Bob".into())]).ok);
    assert!(!judge_page(&field, &s, "", &[]).ok);
}
