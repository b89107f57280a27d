//! `upload_file` and `download_file` in the loop (docs/contract.md rule 48): file
//! grants against the fake browser, the mock Responses API and the real
//! daemon API. A grant is offered only when given, every use is
//! confirmed with the host side shown, a grant is used once, and a file
//! call that does not complete skips the later browser calls of its
//! response.

use std::os::unix::fs::PermissionsExt as _;

use host_cli::agent::grants::Grants;

use super::*;

fn file_toolset(grants: Grants, members: &[&str]) -> Toolset {
    let members: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    Toolset::with_grants(
        None,
        Some(&members),
        Some(UrlPolicy::parse(ORIGIN).unwrap()),
        &[],
        grants,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_file_grants_are_confirmed_used_once_and_a_refusal_skips_the_rest() {
    // Not offered without a grant of its kind.
    let e = Toolset::with_grants(
        None,
        Some(&["upload_file".to_string()]),
        None,
        &[],
        Grants::default(),
    )
    .unwrap_err();
    assert!(e.contains("--grant upload:ID=PATH"), "{e}");

    let host = tempfile::tempdir().unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let cv = host.path().join("cv.txt");
    std::fs::write(&cv, b"curriculum").unwrap();
    let other = host.path().join("other.txt");
    std::fs::write(&other, b"other").unwrap();
    let out = host.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).unwrap();
    let grants = Grants::parse(&[
        format!("upload:cv={}", cv.display()),
        format!("upload:other={}", other.display()),
        format!("download:out={}", out.display()),
    ])
    .unwrap();

    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    lock(&fake.0).download = Some(("report.csv".into(), b"a,b\n1,2\n".to_vec()));
    let rig = browser_rig(&fake).await;
    let up = |id: &str, g: &str| call(id, "upload_file", json!({"grant_id": g}));
    let click = |id: &str| call(id, "click", json!({"tab_id": null, "target": "g1-submit"}));
    // 1: the operator refuses; nothing reaches the page, the grant stays.
    rig.mock.push(Reply::output(vec![up("u0", "other")]));
    // 2: approved: the file goes in, and the click after it runs.
    rig.mock
        .push(Reply::output(vec![up("u1", "cv"), click("k1")]));
    // 3: the same grant again: refused without a question, and the click
    // after it is skipped.
    rig.mock
        .push(Reply::output(vec![up("u2", "cv"), click("k2")]));
    // 4: a path instead of a grant id: refused by the arguments' check.
    rig.mock.push(Reply::output(vec![up("u3", "/etc/passwd")]));
    // 5: the download, copied out and removed from the guest.
    rig.mock.push(Reply::output(vec![call(
        "d1",
        "download_file",
        json!({"grant_id": "out"}),
    )]));
    rig.mock.push(Reply::done("Uploaded and downloaded."));
    let mut op = BrowserOp::new(
        &fake,
        [deny("not this one"), approve(), approve(), approve()],
    );
    let opts = RunOptions {
        browser: Some(file_toolset(grants, &["upload_file", "download_file"])),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let names: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"browser_upload_file") && names.contains(&"browser_download_file"));

    // The questions: each file call, with the grant and host side shown.
    let asked: Vec<(&str, &str, usize)> = op
        .asked
        .iter()
        .map(|a| (a.call_id.as_str(), a.member.as_str(), a.effects))
        .collect();
    assert_eq!(
        asked,
        [
            ("u0", "upload_file", 0),
            ("u1", "upload_file", 0),
            ("k1", "click", 1),
            ("d1", "download_file", 2),
        ]
    );
    assert!(op.asked[0].description.contains("grant upload `other`"));
    assert!(
        op.asked[1].description.contains(&cv.display().to_string()),
        "{}",
        op.asked[1].description
    );
    assert!(op.asked[3].description.contains(&out.display().to_string()));

    let (p0, _) = payload(&reqs[1], "u0");
    assert_eq!(p0["ok"], false);
    assert_eq!(p0["error"], ACTION_REFUSED);
    assert_eq!(p0["result"]["status"], "refused");

    let (p1, _) = payload(&reqs[2], "u1");
    assert_eq!(p1["ok"], true, "{p1}");
    assert_eq!(
        p1["result"],
        json!({"version": 1, "status": "completed", "effect": "completed", "cleanup": "pending"})
    );
    assert!(p1.get("error").is_none());
    assert_eq!(payload(&reqs[2], "k1").0["ok"], true);

    let (p2, _) = payload(&reqs[3], "u2");
    assert_eq!(p2["ok"], false);
    assert_eq!(
        p2["result"],
        json!({"version": 1, "status": "refused", "effect": "none", "cleanup": "not_started"})
    );
    assert!(p2["error"].as_str().unwrap().contains("already used"));
    let (k2, _) = payload(&reqs[3], "k2");
    assert_eq!(
        (k2["ok"].clone(), k2["error"].clone()),
        (json!(false), json!(SKIPPED))
    );

    let (p3, _) = payload(&reqs[4], "u3");
    assert_eq!(p3["ok"], false);
    assert!(p3.get("result").is_none());

    let (d1, _) = payload(&reqs[5], "d1");
    assert_eq!(d1["ok"], true, "{d1}");
    assert_eq!(d1["result"]["cleanup"], "completed");

    // What reached the page: one upload, of the granted file's name and
    // bytes only; one click; the download removed after it was saved.
    assert_eq!(
        fake.effects(),
        [
            "set_file cv.txt curriculum",
            "click submit",
            "remove_download report.csv"
        ]
    );
    let saved = out.join("report.csv");
    assert_eq!(std::fs::read(&saved).unwrap(), b"a,b\n1,2\n");
    assert_eq!(
        std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // No host path went to the model.
    for r in &reqs {
        assert!(
            !r.body
                .to_string()
                .contains(&host.path().display().to_string())
        );
    }
    assert_eq!(run.ledger("u1"), ["pending", "done"]);
    assert_eq!(run.ledger("u2"), Vec::<String>::new());
    assert_eq!(run.ledger("d1"), ["pending", "done"]);
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_a_refused_or_unanswered_transfer_spends_the_grant_and_is_not_ok() {
    let host = tempfile::tempdir().unwrap();
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let a = host.path().join("a.txt");
    std::fs::write(&a, b"a").unwrap();
    let b = host.path().join("b.txt");
    std::fs::write(&b, b"b").unwrap();
    let grants = Grants::parse(&[
        format!("upload:a={}", a.display()),
        format!("upload:b={}", b.display()),
    ])
    .unwrap();
    let fake = FakeBrowser::new(&format!("{ORIGIN}/form"));
    let rig = browser_rig(&fake).await;
    let up = |id: &str, g: &str| call(id, "upload_file", json!({"grant_id": g}));
    // 1: no single file input: refused, nothing set, the grant spent.
    rig.mock.push(Reply::output(vec![up("u1", "a")]));
    rig.mock.push(Reply::output(vec![up("u2", "a")]));
    // 3: the daemon's deadline passed: unknown, and the rest skipped.
    rig.mock.push(Reply::output(vec![
        up("u3", "b"),
        call(
            "k3",
            "click",
            json!({"tab_id": null, "target": "g1-submit"}),
        ),
    ]));
    rig.mock.push(Reply::done("Could not upload."));
    lock(&fake.0).set_file_error = Some(ErrorCode::NotActionable);
    let mut op = BrowserOp::new(&fake, [approve(), approve(), approve()]);
    let during_fake = fake.clone();
    op.during = Some(Box::new(move |_| {
        // From the second question on, the daemon times out instead.
        let mut p = lock(&during_fake.0);
        if p.calls.iter().filter(|c| *c == "set_file").count() == 1 {
            p.set_file_error = Some(ErrorCode::Timeout);
        }
    }));
    let opts = RunOptions {
        browser: Some(file_toolset(grants, &["upload_file"])),
        ..browser_opts(&rig)
    };
    let run = rig.run(opts, &mut op).await;
    run.assert_ending(Ending::Finished);
    let reqs = rig.mock.requests();
    let (p1, _) = payload(&reqs[1], "u1");
    assert_eq!(p1["ok"], false);
    assert_eq!(
        p1["result"],
        json!({"version": 1, "status": "refused", "effect": "none", "cleanup": "not_started"})
    );
    assert!(p1["error"].as_str().unwrap().contains("file input"), "{p1}");
    let (p2, _) = payload(&reqs[2], "u2");
    assert!(p2["error"].as_str().unwrap().contains("already used"));
    let (p3, _) = payload(&reqs[3], "u3");
    assert_eq!(p3["ok"], false);
    assert_eq!(
        p3["result"],
        json!({"version": 1, "status": "unknown", "effect": "unknown", "cleanup": "pending"})
    );
    assert_eq!(payload(&reqs[3], "k3").0["error"], SKIPPED);
    assert!(fake.effects().is_empty(), "{:?}", fake.effects());
    assert_eq!(run.ledger("u1"), ["pending", "failed"]);
    assert_eq!(run.ledger("u3"), ["pending", "unknown"]);
    // Two questions: u2 was refused before anyone was asked.
    assert_eq!(op.asked.len(), 2);
    rig.assert_mock_clean();
}
