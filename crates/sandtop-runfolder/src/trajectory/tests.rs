use super::*;
use base64::Engine as _;
use std::os::unix::fs::PermissionsExt as _;

#[test]
fn images_are_exclusive_and_private() {
    let tmp = tempfile::tempdir().unwrap();
    let r = Recorder::create(&tmp.path().join("run")).unwrap();
    r.save_image("a.png", b"x").unwrap();
    let mode = std::fs::metadata(r.dir().join("a.png"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        r.save_image("a.png", b"y").is_err(),
        "an existing screenshot was overwritten"
    );
    assert_eq!(std::fs::read(r.dir().join("a.png")).unwrap(), b"x");
}

#[test]
fn resume_stops_at_an_unsettled_call_and_survives_a_torn_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut r = Recorder::create(&dir).unwrap();
    r.write(&started()).unwrap();
    r.write(&response(1, "resp_1")).unwrap();
    r.ledger(1, "call_a", LedgerState::Pending, json!({}))
        .unwrap();
    r.ledger(1, "call_a", LedgerState::Done, json!({})).unwrap();
    r.write(&Entry::CallOutput {
        step: 1,
        item: json!({"type": "computer_call_output", "call_id": "call_a"}),
    })
    .unwrap();
    r.write(&response(2, "resp_2")).unwrap();
    r.ledger(2, "call_b", LedgerState::Pending, json!({}))
        .unwrap();
    drop(r);
    // A crash mid-write leaves half a line.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("trajectory.jsonl"))
        .unwrap();
    f.write_all(b"{\"kind\": \"ledger\", \"sta").unwrap();
    let p = resume_point(&dir).unwrap();
    assert_eq!(p.last_response_id.as_deref(), Some("resp_2"));
    assert_eq!(p.steps_done, 2);
    assert_eq!(p.unsettled, Some((2, "call_b".to_string())));
    assert!(
        p.pending_outputs.is_empty(),
        "outputs before resp_2 were already sent"
    );
    assert!(!p.finished);
    // A resume appends after the torn line, never onto it.
    let mut r = Recorder::open(&dir).unwrap();
    r.write(&Entry::RunResumed { steps_done: 2 }).unwrap();
    drop(r);
    let entries = read_trajectory(&dir).unwrap();
    assert_eq!(entries.last(), Some(&Entry::RunResumed { steps_done: 2 }));
}

fn started() -> Entry {
    Entry::RunStarted(Box::new(Started {
        task: "t".into(),
        session: "s".into(),
        ..Started::default()
    }))
}

fn response(step: u32, id: &str) -> Entry {
    Entry::Response {
        step,
        id: id.into(),
        status: "completed".into(),
        output: vec![],
    }
}

#[test]
fn every_line_is_written_and_read_through_the_entry_type() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut r = Recorder::create(&dir).unwrap();
    let entries = vec![
        started(),
        response(1, "resp_1"),
        Entry::Ledger {
            step: 1,
            call_id: "call_a".into(),
            state: LedgerState::Unknown,
            detail: json!({"error": "stopped"}),
        },
        Entry::Confirm {
            step: 1,
            call_id: "call_a".into(),
            index: None,
            approved: false,
            by: Some("nobody".into()),
        },
    ];
    for e in &entries {
        r.write(e).unwrap();
    }
    drop(r);
    assert_eq!(read_trajectory(&dir).unwrap(), entries);
    let text = std::fs::read_to_string(dir.join("trajectory.jsonl")).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["kind"], "run_started");
    assert!(first["t_unix_ms"].as_u64().unwrap() > 0);
}

#[test]
fn a_misspelt_field_is_an_error_not_a_resume_from_step_0() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut r = Recorder::create(&dir).unwrap();
    r.write(&started()).unwrap();
    r.write(&response(1, "resp_1")).unwrap();
    drop(r);
    // A hand-edited (or older, or foreign) line: `stpe` for `step`.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("trajectory.jsonl"))
        .unwrap();
    f.write_all(b"{\"kind\":\"response\",\"stpe\":2,\"id\":\"resp_2\",\"status\":\"completed\",\"output\":[],\"t_unix_ms\":1}\n")
            .unwrap();
    let e = resume_point(&dir).unwrap_err();
    assert!(matches!(e, crate::Error::Entry { line: 3, .. }), "{e:?}");
    let msg = format!("{:#}", anyhow::Error::from(e));
    assert!(msg.contains("line 3") && msg.contains("stpe"), "{msg}");
    // An unknown kind too.
    std::fs::write(
            dir.join("trajectory.jsonl"),
            b"{\"kind\":\"run_started\",\"task\":\"t\",\"session\":\"s\"}\n{\"kind\":\"respons\",\"step\":1}\n",
        )
        .unwrap();
    let msg = format!("{:#}", anyhow::Error::from(resume_point(&dir).unwrap_err()));
    assert!(msg.contains("line 2") && msg.contains("respons"), "{msg}");
}

#[test]
fn image_data_never_reaches_the_trajectory() {
    let v = json!({"output": {"image_url": "data:image/png;base64,AAAA"}, "n": [1, "data:image/webp;base64,x"]});
    let s = strip_images(&v).to_string();
    assert!(!s.contains("base64"), "{s}");
}

/// Runs of one session started in one second (one
/// base name) each get a folder of their own, also when they race.
#[test]
fn runs_of_one_session_in_one_second_get_folders_of_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("runs/s1-1764522000");
    let first = Recorder::create_unique(&base).unwrap();
    let second = Recorder::create_unique(&base).unwrap();
    assert_eq!(first.dir(), base);
    assert_eq!(second.dir(), tmp.path().join("runs/s1-1764522000-2"));
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || Recorder::create_unique(&base).unwrap().dir().to_owned())
        })
        .collect();
    let mut dirs: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
    dirs.sort();
    dirs.dedup();
    assert_eq!(dirs.len(), 8, "two racers shared a folder: {dirs:?}");
    for d in dirs
        .iter()
        .chain([&base, &tmp.path().join("runs/s1-1764522000-2")])
    {
        assert!(d.join("trajectory.jsonl").is_file(), "{}", d.display());
        let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    // An explicit folder (`--record DIR`) is still taken as given or not at all.
    assert!(Recorder::create(&base).is_err());
}

/// A crash while the model thought: the request was recorded, its
/// response never was. The resume sends that request's input again, once
/// (not the conversation with it and the outputs again), and a second
/// crash in the same place changes nothing.
#[test]
fn a_request_never_answered_is_sent_again_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut r = Recorder::create(&dir).unwrap();
    let task = json!({"role": "user", "content": [{"type": "input_text", "text": "t"}]});
    let call =
        json!({"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"});
    let out = json!({"type": "function_call_output", "call_id": "call_a", "output": "x"});
    r.write(&started()).unwrap();
    let input = |step: u32, items: Vec<Value>| Entry::RequestInput {
        step,
        items,
        previous_response_id: None,
        images: 0,
        bytes: 0,
    };
    r.write(&input(1, vec![task.clone()])).unwrap();
    r.write(&Entry::Response {
        step: 1,
        id: "resp_1".into(),
        status: "completed".into(),
        output: vec![call.clone()],
    })
    .unwrap();
    r.write(&Entry::CallOutput {
        step: 1,
        item: out.clone(),
    })
    .unwrap();
    r.write(&input(2, vec![out.clone()])).unwrap();
    let p = resume_point(&dir).unwrap();
    assert_eq!(p.steps_done, 1);
    assert_eq!(p.conversation, vec![task.clone(), call.clone()]);
    assert_eq!(p.pending_outputs, vec![out.clone()]);
    // The resumed run crashes the same way.
    r.write(&Entry::RunResumed { steps_done: 1 }).unwrap();
    r.write(&input(2, vec![out.clone()])).unwrap();
    let p = resume_point(&dir).unwrap();
    assert_eq!(p.conversation, vec![task, call]);
    assert_eq!(p.pending_outputs, vec![out]);
}

#[test]
fn a_saved_screenshot_goes_back_with_the_media_type_of_its_format() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files: Vec<(String, String)> = [
        ("png", "image/png"),
        ("webp", "image/webp"),
        ("jpg", "image/jpeg"),
    ]
    .iter()
    .map(|(ext, mime)| {
        let name = format!("step-001-shot.{ext}");
        std::fs::write(dir.join(&name), ext.as_bytes()).unwrap();
        (
            format!(
                "data:{mime};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(ext)
            ),
            name,
        )
    })
    .collect();
    for (url, _) in &files {
        let v = json!({"image_url": url});
        let out = externalize(&v, &files);
        assert!(
            out["image_url"].as_str().unwrap().starts_with(FILE_MARK),
            "{out}"
        );
        assert_eq!(internalize(&out, dir).unwrap(), v);
    }
    // A reference that leaves the folder is refused, typed.
    let e = internalize(&json!(format!("{FILE_MARK}../x.png")), dir).unwrap_err();
    assert!(matches!(e, crate::Error::NotARun(_)), "{e:?}");
}
