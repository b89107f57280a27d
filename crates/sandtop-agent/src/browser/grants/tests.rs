use std::os::unix::fs::PermissionsExt as _;

use super::*;

fn dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

fn spec(kind: &str, id: &str, p: &Path) -> String {
    format!("{kind}:{id}={}", p.display())
}

#[test]
fn ids_are_checked_naming_the_problem() {
    assert!(check_id("report-2026_v1.pdf").is_ok());
    assert!(check_id(&"x".repeat(256)).is_ok());
    for (id, why) in [
        ("", "empty"),
        (&"x".repeat(257) as &str, "more than 256"),
        ("a/b", "path"),
        ("..", "path"),
        ("~x", "path"),
        ("a\\b", "path"),
        ("https:example", "URL"),
        ("a\u{7}b", "control"),
        ("a\nb", "control"),
    ] {
        let e = check_id(id).unwrap_err();
        assert!(e.contains(why), "{id:?}: {e}");
    }
}

#[test]
fn every_bad_grant_is_refused_at_start_naming_the_problem() {
    let d = dir();
    let file = d.path().join("a.txt");
    std::fs::write(&file, b"hello").unwrap();
    let big = d.path().join("big.bin");
    std::fs::write(&big, vec![0u8; MAX_UPLOAD_BYTES + 1]).unwrap();
    let link = d.path().join("link.txt");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let open_dir = d.path().join("shared");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let missing = d.path().join("missing");
    let cases: Vec<(String, &str)> = vec![
        ("upload".into(), "expected upload:ID=PATH"),
        (format!("copy:x={}", file.display()), "unknown kind"),
        ("upload:x".into(), "expected ID=PATH"),
        (spec("upload", "", &file), "empty"),
        (spec("upload", "a/b", &file), "path"),
        ("upload:x=".into(), "the path is empty"),
        (spec("upload", "x", &missing), "cannot be opened"),
        (spec("upload", "x", &link), "symlink"),
        (spec("upload", "x", d.path()), "not a regular file"),
        (spec("upload", "x", &big), "more than the upload limit"),
        (spec("download", "x", &file), "not a directory"),
        (spec("download", "x", &missing), "cannot be read"),
        (
            spec("download", "x", &open_dir),
            "writable by group or others",
        ),
    ];
    for (s, why) in cases {
        let e = parse_grant(&s).unwrap_err();
        assert!(e.contains(why), "{s}: {e}");
        assert!(e.starts_with("--grant"), "{e}");
    }
    let ok = Grants::parse(&[
        spec("upload", "u1", &file),
        spec("download", "d1", d.path()),
    ])
    .unwrap();
    assert!(ok.has(GrantKind::Upload) && ok.has(GrantKind::Download));
    let e = Grants::parse(&[
        spec("upload", "u1", &file),
        spec("download", "u1", d.path()),
    ])
    .unwrap_err();
    assert!(e.contains("given twice"), "{e}");
    assert!(!Grants::parse(&[]).unwrap().has(GrantKind::Upload));
}

#[test]
fn a_grant_is_used_once_and_only_for_its_kind() {
    let d = dir();
    let file = d.path().join("a.txt");
    std::fs::write(&file, b"hello").unwrap();
    let g = Grants::parse(&[spec("upload", "u1", &file)]).unwrap();
    assert_eq!(g.peek(GrantKind::Download, "u1"), Err(Refusal::Unknown));
    assert_eq!(g.peek(GrantKind::Upload, "nope"), Err(Refusal::Unknown));
    assert!(g.peek(GrantKind::Upload, "u1").is_ok());
    // Shared by clones: the toolset and the runner see one state.
    let clone = g.clone();
    let taken = clone.take(GrantKind::Upload, "u1").unwrap();
    assert_eq!(
        read_upload(&taken).unwrap(),
        ("a.txt".into(), b"hello".to_vec())
    );
    assert_eq!(g.peek(GrantKind::Upload, "u1"), Err(Refusal::Used));
    assert_eq!(g.take(GrantKind::Upload, "u1"), Err(Refusal::Used));
}

#[test]
fn a_file_changed_after_start_is_refused_and_the_grant_spent() {
    let d = dir();
    let file = d.path().join("a.txt");
    std::fs::write(&file, b"hello").unwrap();
    let g = Grants::parse(&[spec("upload", "u1", &file)]).unwrap();
    // Replaced by another file of the same name (another inode: both
    // exist at once, so the old inode cannot be reused).
    let new = d.path().join("a.new");
    std::fs::write(&new, b"other").unwrap();
    std::fs::rename(&new, &file).unwrap();
    let taken = g.take(GrantKind::Upload, "u1").unwrap();
    let e = read_upload(&taken).unwrap_err();
    assert!(e.contains("not the file checked at start"), "{e}");
    assert_eq!(g.take(GrantKind::Upload, "u1"), Err(Refusal::Used));

    // Grown beyond the limit in place.
    let f2 = d.path().join("b.txt");
    std::fs::write(&f2, b"small").unwrap();
    let g = Grants::parse(&[spec("upload", "u2", &f2)]).unwrap();
    std::fs::write(&f2, vec![1u8; MAX_UPLOAD_BYTES + 1]).unwrap();
    let e = read_upload(&g.take(GrantKind::Upload, "u2").unwrap()).unwrap_err();
    assert!(e.contains("upload limit"), "{e}");

    // Replaced by a symlink.
    let f3 = d.path().join("c.txt");
    std::fs::write(&f3, b"x").unwrap();
    let g = Grants::parse(&[spec("upload", "u3", &f3)]).unwrap();
    std::fs::remove_file(&f3).unwrap();
    std::os::unix::fs::symlink(&f2, &f3).unwrap();
    let e = read_upload(&g.take(GrantKind::Upload, "u3").unwrap()).unwrap_err();
    assert!(e.contains("symlink"), "{e}");

    // A download directory opened to others after start.
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).unwrap();
    let g = Grants::parse(&[spec("download", "d1", &out)]).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        g.take(GrantKind::Download, "d1"),
        Err(Refusal::Changed(_))
    ));
}

#[test]
fn downloads_never_overwrite_and_are_private() {
    let d = dir();
    let g = Grants::parse(&[spec("download", "d1", d.path())]).unwrap();
    let grant = g.take(GrantKind::Download, "d1").unwrap();
    std::fs::write(d.path().join("report.pdf"), b"mine").unwrap();
    let p = write_download(&grant, "report.pdf", b"theirs").unwrap();
    assert_eq!(p, d.path().join("report-1.pdf"));
    assert_eq!(std::fs::read(d.path().join("report.pdf")).unwrap(), b"mine");
    assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let p2 = write_download(&grant, "report.pdf", b"again").unwrap();
    assert_eq!(p2, d.path().join("report-2.pdf"));
    // A guest's name is data: no path, no hidden file.
    let p3 = write_download(&grant, "../../etc/passwd", b"x").unwrap();
    assert_eq!(p3.parent().unwrap(), d.path());
    assert!(!p3.file_name().unwrap().to_str().unwrap().starts_with('.'));
    assert_eq!(safe_file_name(""), "download");
    assert_eq!(safe_file_name(".bashrc"), "_bashrc");
    // A symlink in the way is not followed, nor overwritten.
    std::os::unix::fs::symlink("/etc/hostname", d.path().join("x.txt")).unwrap();
    let p4 = write_download(&grant, "x.txt", b"y").unwrap();
    assert_eq!(p4, d.path().join("x-1.txt"));
    // Too big.
    let e = write_download(&grant, "big", &vec![0; MAX_DOWNLOAD_BYTES + 1]).unwrap_err();
    assert!(e.contains("more than"), "{e}");
    // No free name: refused.
    std::fs::write(d.path().join("full"), b"").unwrap();
    for n in 1..100 {
        std::fs::write(d.path().join(format!("full-{n}")), b"").unwrap();
    }
    let e = write_download(&grant, "full", b"z").unwrap_err();
    assert!(e.contains("nothing is overwritten"), "{e}");
}

#[test]
fn outcome_combinations() {
    use Cleanup as C;
    use FileEffect as E;
    use FileStatus as S;
    let all_s = [S::Completed, S::Refused, S::Unknown, S::Interrupted];
    let all_e = [E::Completed, E::None, E::Unknown];
    let mut valid = Vec::new();
    for s in all_s {
        for e in all_e {
            if valid_combination(s, e) {
                valid.push((s, e));
            }
            for c in [C::NotStarted, C::Pending, C::Completed] {
                assert_eq!(FileOutcome::new(s, e, c).is_some(), valid_combination(s, e));
            }
        }
    }
    assert_eq!(
        valid,
        [
            (S::Completed, E::Completed),
            (S::Refused, E::None),
            (S::Unknown, E::Unknown),
            (S::Interrupted, E::None),
            (S::Interrupted, E::Unknown),
        ]
    );
    let o = FileOutcome::new(S::Completed, E::Completed, C::Pending).unwrap();
    assert!(o.ok());
    assert_eq!(
        o.to_value(),
        serde_json::json!({"version": 1, "status": "completed", "effect": "completed", "cleanup": "pending"})
    );
    assert!(!FileOutcome::refused().ok());
    assert_eq!(
        FileOutcome::refused().to_value().as_object().unwrap().len(),
        4
    );
}
