use super::*;

#[test]
fn file_calls_are_checked() {
    let c: BrowserCall = crate::from_json_objects(
        br#"{"member":"set_file","tab_id":null,"name":"a.txt","content_base64":"aGk="}"#,
    )
    .unwrap();
    assert_eq!(c.member(), "set_file");
    assert!(c.check().is_ok());
    let t: BrowserCall = crate::from_json_objects(br#"{"member":"take_download"}"#).unwrap();
    assert_eq!(t, BrowserCall::TakeDownload {});
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        r#"{"member":"take_download"}"#
    );
    for name in ["", "..", ".hidden", "a/b", "a\\b", "a\nb", &"x".repeat(256)] {
        let c = BrowserCall::SetFile {
            tab_id: None,
            name: name.into(),
            content_base64: String::new(),
        };
        assert!(
            c.check().unwrap_err().to_string().contains("`name`"),
            "{name:?}"
        );
        let r = BrowserCall::RemoveDownload { name: name.into() };
        assert!(r.check().is_err(), "{name:?}");
    }
    let big = BrowserCall::SetFile {
        tab_id: None,
        name: "a".into(),
        content_base64: "A".repeat(base64_len(MAX_UPLOAD_BYTES) + 1),
    };
    assert!(
        big.check()
            .unwrap_err()
            .to_string()
            .contains("content_base64")
    );
    // The largest upload fits the daemon's body limit as JSON.
    assert!(base64_len(MAX_UPLOAD_BYTES) + 4096 < crate::limits::MAX_BODY_BYTES);
    let o: BrowserOutcome =
        serde_json::from_str(r#"{"kind":"file","name":"a","content_base64":""}"#).unwrap();
    assert!(matches!(o, BrowserOutcome::File { .. }));
}

#[test]
fn calls_round_trip_and_unknown_fields_are_refused() {
    let c: BrowserCall =
        crate::from_json_objects(br#"{"member":"click","tab_id":null,"target":"e1.3"}"#).unwrap();
    assert_eq!(
        c,
        BrowserCall::Click {
            tab_id: None,
            target: "e1.3".into()
        }
    );
    assert_eq!(c.member(), "click");
    let back = serde_json::to_string(&c).unwrap();
    assert_eq!(back, r#"{"member":"click","tab_id":null,"target":"e1.3"}"#);
    let bad = crate::from_json_objects::<BrowserCall>(
        br#"{"member":"click","tab_id":null,"target":"e1","extra":1}"#,
    );
    assert!(bad.unwrap_err().to_string().contains("extra"));
    assert!(crate::from_json_objects::<BrowserCall>(br#"{"member":"list_tabs"}"#).is_err());
    let z: BrowserCall =
        crate::from_json_objects(br#"{"member":"zoom","tab_id":null,"region":[0,0,10,10]}"#)
            .unwrap();
    assert!(z.check().is_ok());
}

#[test]
fn checks_name_the_field() {
    let cases = [
        (
            BrowserCall::WaitFor {
                tab_id: None,
                text: "  \n ".into(),
                timeout_ms: 10,
            },
            "`text`",
        ),
        (
            BrowserCall::WaitFor {
                tab_id: None,
                text: "ok".into(),
                timeout_ms: 30_001,
            },
            "`timeout_ms`",
        ),
        (
            BrowserCall::Zoom {
                tab_id: None,
                region: [10, 0, 10, 5],
            },
            "`region`",
        ),
        (
            BrowserCall::Click {
                tab_id: None,
                target: String::new(),
            },
            "`target`",
        ),
        (
            BrowserCall::Key {
                tab_id: None,
                keys: vec![],
            },
            "`keys`",
        ),
        (
            BrowserCall::SwitchTab {
                tab_id: "x".repeat(300),
            },
            "`tab_id`",
        ),
    ];
    for (call, field) in cases {
        let e = call.check().unwrap_err();
        assert!(e.to_string().contains(field), "{call:?}: {e}");
    }
    let long_ok = BrowserCall::WaitFor {
        tab_id: None,
        text: format!("  {}  ", "a".repeat(256)),
        timeout_ms: 1,
    };
    assert!(long_ok.check().is_ok());
}

#[test]
fn every_default_member_but_list_tabs_is_a_call() {
    for m in DEFAULT_MEMBERS {
        let body = format!(r#"{{"member":"{m}"}}"#);
        let err = crate::from_json_objects::<BrowserCall>(body.as_bytes())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        // Members whose only field is an optional tab parse; the
        // others miss a field; list_tabs is no call at all.
        assert_eq!(
            err.to_string().contains("unknown variant"),
            m == "list_tabs",
            "{m}: {err}"
        );
    }
}
