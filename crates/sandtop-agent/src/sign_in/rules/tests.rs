use super::*;

fn args(v: Value) -> String {
    v.to_string()
}

fn login(origin: Value) -> Value {
    json!({
        "credential_origin": origin,
        "reason": "The issue tracker needs a sign-in.",
        "fields": [
            {"id": "email", "label": "Email", "type": "email", "required": true, "target": "d1.3"},
            {"id": "password", "label": "Password", "type": "password", "required": true, "target": "d1.4"},
        ],
        "options": null,
    })
}

#[test]
fn a_request_is_parsed_exactly() {
    let r = parse_request(&args(login(json!("http://127.0.0.1:8080")))).unwrap();
    assert_eq!(r.origin.to_string(), "http://127.0.0.1:8080");
    assert_eq!(r.fields.len(), 2);
    assert_eq!(r.fields_of(None).len(), 2);
    // The record's shape carries ids, labels and types, and no value slot.
    let shape = r.shape();
    assert_eq!(shape["fields"][1]["type"], "password");
    assert!(!shape.to_string().contains("value"));
}

#[test]
fn every_argument_rule_refuses_naming_its_field() {
    let cases: Vec<(Value, &str)> = vec![
        (login(Value::Null), "`credential_origin` is missing"),
        (login(json!("")), "`credential_origin` is missing"),
        (
            login(json!("example.com")),
            "`credential_origin` is not an origin",
        ),
        (
            login(json!("https://example.com/login")),
            "`credential_origin` is not an origin",
        ),
        (
            login(json!("https://user@example.com")),
            "`credential_origin` is not an origin",
        ),
        (
            login(json!("ftp://example.com")),
            "`credential_origin` is not an origin",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][0]["type"] = json!("passkey");
                v
            },
            "`type` must be email, password, code or text",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][0]["value"] = json!("hunter2");
                v
            },
            "`value` is not an argument",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v.as_object_mut().unwrap().remove("options");
                v
            },
            "`options` is missing",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][1]["id"] = json!("email");
                v
            },
            "`fields[1].id` repeats",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][1]["id"] = json!("a b");
                v
            },
            "`fields[1].id` must be",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][1]["target"] = json!("d1.3");
                v
            },
            "`fields[1].target` names the same input",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][1]["target"] = Value::Null;
                v
            },
            "`fields[1].target` is null: sign-in values go only into page inputs",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][0].as_object_mut().unwrap().remove("target");
                v
            },
            "`fields[0].target` is missing",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][0]["label"] = json!("  ");
                v
            },
            "`fields[0].label` is empty",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"][0]["label"] = json!("x".repeat(MAX_LABEL_CHARS + 1));
                v
            },
            "`fields[0].label` is longer",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["reason"] = json!("a\u{1b}[2Jb");
                v
            },
            "`reason` holds a control character",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["fields"] = json!([]);
                v
            },
            "nothing to ask",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                let f = v["fields"][0].clone();
                v["fields"] = json!(
                    (0..7)
                        .map(|i| {
                            let mut f = f.clone();
                            f["id"] = json!(format!("f{i}"));
                            f["target"] = json!(format!("d1.{i}"));
                            f
                        })
                        .collect::<Vec<_>>()
                );
                v
            },
            "at most 6 fields",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["options"] = json!([{"id": "pw", "label": "Password", "field_ids": ["nope"]}]);
                v
            },
            "`options[0].field_ids[0]` is not the id of a field",
        ),
        (
            {
                let mut v = login(json!("https://example.com"));
                v["options"] = json!([
                    {"id": "pw", "label": "Password", "field_ids": ["password"]},
                    {"id": "pw", "label": "Again", "field_ids": []},
                ]);
                v
            },
            "`options[1].id` repeats",
        ),
        (json!([1, 2]), "do not match request_sign_in"),
    ];
    for (v, want) in cases {
        let err = parse_request(&args(v.clone())).unwrap_err();
        assert!(err.contains(want), "{v}: got {err:?}, want {want:?}");
        // Never quotes what the model sent as a value.
        assert!(!err.contains("hunter2"), "{err}");
    }
    assert!(
        parse_request("not json")
            .unwrap_err()
            .contains("do not match")
    );
}

#[test]
fn options_without_fields_are_a_choice_of_method() {
    let v = json!({
        "credential_origin": "https://issues.example.com",
        "reason": null,
        "fields": [],
        "options": [
            {"id": "email_code", "label": "Email me a code", "field_ids": []},
            {"id": "password", "label": "Use a password", "field_ids": []},
        ],
    });
    let r = parse_request(&args(v)).unwrap();
    assert!(
        check_answer(&r, None, &[])
            .unwrap_err()
            .contains("choose one")
    );
    assert!(check_answer(&r, Some("sso"), &[]).is_err());
    check_answer(&r, Some("email_code"), &[]).unwrap();
    assert_eq!(
        model_output(Status::Submitted, Some("email_code")),
        json!({"status": "submitted", "selected_option": "email_code"})
    );
    assert_eq!(
        model_output(Status::Declined, Some("email_code")),
        json!({"status": "declined"})
    );
}

fn secret(s: &str) -> Secret {
    Secret::new(s.into())
}

#[test]
fn answers_follow_the_seeds_submission_rules_and_never_quote_values() {
    let r = parse_request(&args(login(json!("https://example.com")))).unwrap();
    let ok = vec![
        ("email".to_string(), secret("ada@example.com")),
        ("password".to_string(), secret("canary-pw")),
    ];
    check_answer(&r, None, &ok).unwrap();
    let errs = [
        check_answer(&r, Some("x"), &ok),
        check_answer(&r, None, &[("email".into(), secret("ada@example.com"))]),
        check_answer(&r, None, &[("other".into(), secret("canary-pw"))]),
        check_answer(
            &r,
            None,
            &[
                ("email".into(), secret("a")),
                ("password".into(), secret("canary\u{7}pw")),
            ],
        ),
        check_answer(
            &r,
            None,
            &[
                ("email".into(), secret("a")),
                ("password".into(), secret(&"c".repeat(MAX_SECRET_CHARS + 1))),
            ],
        ),
    ];
    for e in errs {
        let e = e.unwrap_err();
        assert!(!e.contains("canary"), "{e}");
    }
}

fn write_file(dir: &Path, text: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join("credentials.json");
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

#[test]
fn the_credentials_file_must_be_private_and_is_keyed_by_exact_origin() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"{"https://example.com": {"email": "ada@example.com", "password": "canary-pw"},
                   "http://127.0.0.1:8080": {"password": "other"}}"#;
    for mode in [0o644, 0o640, 0o604, 0o660, 0o666] {
        let p = write_file(dir.path(), text, mode);
        let e = Credentials::open(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "mode {mode:o}: {e}");
        assert!(!e.contains("canary"), "{e}");
    }
    let p = write_file(dir.path(), text, 0o600);
    let c = Credentials::open(&p).unwrap();
    // A symbolic link to it is refused.
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    assert!(Credentials::open(&link).is_err());
    // Exact origin: the default port is the same origin, another port or
    // scheme is not.
    let req = |o: &str| parse_request(&args(login(json!(o)))).unwrap();
    match c.answer(&req("https://example.com:443")).unwrap() {
        Some(Answer::Submit {
            option,
            values,
            source,
        }) => {
            assert_eq!(option, None);
            assert_eq!(source, "file");
            let ids: Vec<&str> = values.iter().map(|(i, _)| i.as_str()).collect();
            assert_eq!(ids, ["email", "password"]);
            assert_eq!(values[1].1.expose(), "canary-pw");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        c.answer(&req("https://example.com:8443"))
            .unwrap()
            .is_none()
    );
    assert!(c.answer(&req("http://example.com")).unwrap().is_none());
    // The mode is checked again at each use.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(c.answer(&req("https://example.com")).is_err());
    // Malformed: the position, never the text.
    let p = write_file(
        dir.path(),
        r#"{"https://example.com": {"password": 12}} canary"#,
        0o600,
    );
    let e = Credentials::open(&p).unwrap_err().to_string();
    assert!(e.contains("line 1"), "{e}");
    assert!(!e.contains("canary"), "{e}");
    let p = write_file(dir.path(), r#"{"example.com": {"password": "x"}}"#, 0o600);
    assert!(
        Credentials::open(&p)
            .unwrap_err()
            .to_string()
            .contains("not an origin")
    );
}

#[test]
fn a_file_entry_picks_its_option_or_the_first_it_can_fill() {
    let dir = tempfile::tempdir().unwrap();
    let v = json!({
        "credential_origin": "https://example.com",
        "reason": null,
        "fields": [
            {"id": "mail", "label": "Email", "type": "email", "required": true, "target": "a.1"},
            {"id": "otp", "label": "Code", "type": "code", "required": true, "target": "a.2"},
            {"id": "pw", "label": "Password", "type": "password", "required": true, "target": "a.3"},
        ],
        "options": [
            {"id": "code", "label": "Email me a code", "field_ids": ["mail", "otp"]},
            {"id": "password", "label": "Password", "field_ids": ["mail", "pw"]},
        ],
    });
    let r = parse_request(&args(v)).unwrap();
    // By type: no `code` value, so the password method.
    let p = write_file(
        dir.path(),
        r#"{"https://example.com": {"email": "a@b.c", "password": "pw1"}}"#,
        0o600,
    );
    let Some(Answer::Submit { option, values, .. }) =
        Credentials::open(&p).unwrap().answer(&r).unwrap()
    else {
        panic!()
    };
    assert_eq!(option.as_deref(), Some("password"));
    let ids: Vec<&str> = values.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(ids, ["mail", "pw"]);
    check_answer(&r, option.as_deref(), &values).unwrap();
    // Named, and by field id.
    let p = write_file(
        dir.path(),
        r#"{"https://example.com": {"option": "code", "mail": "a@b.c", "otp": "123456"}}"#,
        0o600,
    );
    let Some(Answer::Submit { option, values, .. }) =
        Credentials::open(&p).unwrap().answer(&r).unwrap()
    else {
        panic!()
    };
    assert_eq!(option.as_deref(), Some("code"));
    assert_eq!(values[1].1.expose(), "123456");
}

#[test]
fn a_refused_credentials_file_says_why_in_a_typed_error_that_keeps_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    match Credentials::open(&missing).unwrap_err() {
        CredentialsError::Open { path, source } => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    let p = write_file(
        dir.path(),
        r#"{"https://example.com": {"password": "canary"}}"#,
        0o640,
    );
    assert!(matches!(
        Credentials::open(&p).unwrap_err(),
        CredentialsError::Shared { mode: 0o640, .. }
    ));
    let p = write_file(
        dir.path(),
        r#"{"https://example.com": {"password": "canary"}, "https://example.com:443": {"password": "canary"}}"#,
        0o600,
    );
    let e = Credentials::open(&p).unwrap_err();
    assert!(matches!(&e, CredentialsError::Twice { .. }), "{e:?}");
    assert!(!format!("{e:?}").contains("canary"), "{e:?}");
    // Malformed: the position, and no source that could quote the text.
    let p = write_file(dir.path(), r#"{"https://example.com": canary}"#, 0o600);
    let e = Credentials::open(&p).unwrap_err();
    assert!(
        matches!(e, CredentialsError::Malformed { line: 1, .. }),
        "{e:?}"
    );
    assert!(std::error::Error::source(&e).is_none());
}
