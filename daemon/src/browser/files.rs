//! File transfer, the host's three calls behind `upload_file` and
//! `download_file` (the model has no member that reaches them; the host
//! checked the operator's grant and confirmation first):
//!
//! - [`BrowserCall::SetFile`]: finds the tab's one file input (the focused
//!   `<input type=file>` of the document, else its only enabled one; none
//!   or several: `not_actionable`, nothing written), writes the bytes into
//!   a fresh private directory of the profile (`uploads/N`, 0700; the file
//!   0600, under the host's basename) and sets it with BiDi
//!   `input.setFiles`, which fires the input's `input` and `change`. The
//!   file stays while the page may read it; it goes with the profile.
//! - [`BrowserCall::TakeDownload`]: the newest complete regular file of
//!   the profile's download folder ([`DOWNLOADS`], where the profile's
//!   prefs send every download without a dialog); a file with a `.part`
//!   sibling (still downloading) or a `.part` file itself is never taken;
//!   at most [`wire::MAX_DOWNLOAD_BYTES`] (`limit_exceeded`).
//! - [`BrowserCall::RemoveDownload`]: removes one download by name.
//!
//! The guest's names and bytes are data: names are checked with
//! [`wire::check_file_name`], files opened without following symlinks.
//!
//! With the host's URL policy (docs/contract.md rule 30a), `set_file` finds the input only
//! in a top document whose origin is in the policy, in that same
//! evaluation (the element it returns then binds `input.setFiles` to that
//! document), and `take_download` needs the active tab's document in the
//! policy (`out_of_policy` otherwise, nothing transferred).

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use sandtop_protocol::browser::{self as wire, BrowserOutcome};
use sandtop_protocol::{BrowserCall, ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::bidi::Bidi;
use super::bidi_error;
use super::context::{COMMAND_WAIT, target_tab};
use super::policy::{Policy, Scope, out_of_policy};

/// The profile's download folder (Firefox's `browser.download.dir`).
pub const DOWNLOADS: &str = "downloads";
/// The profile's folder of uploaded files.
const UPLOADS: &str = "uploads";

/// The download prefs of a profile at `profile` (appended to `user.js`):
/// every download lands in [`DOWNLOADS`] without a dialog.
pub(super) fn download_prefs(profile: &Path) -> String {
    let dir = profile.join(DOWNLOADS);
    let dir = serde_json::to_string(&dir.to_string_lossy()).unwrap_or_default();
    format!(
        r#"user_pref("browser.download.dir", {dir});
user_pref("browser.download.folderList", 2);
user_pref("browser.download.useDownloadDir", true);
user_pref("browser.download.always_ask_before_handling_new_types", false);
user_pref("browser.download.start_downloads_in_tmp_dir", false);
user_pref("browser.download.alwaysOpenPanel", false);
user_pref("browser.download.manager.addToRecentDocs", false);
user_pref("browser.download.open_pdf_attachments_inline", false);
"#
    )
}

/// Creates the profile's download folder (0700).
pub(super) fn make_download_dir(profile: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(profile.join(DOWNLOADS))
}

fn failed(what: &str, e: std::io::Error) -> ErrorBody {
    ErrorBody::new(ErrorCode::BrowserFailed, format!("{what}: {}", e.kind()))
}

/// Carries out a `SetFile`, `TakeDownload` or `RemoveDownload`.
pub(super) async fn run(
    bidi: &Bidi,
    profile: &Path,
    call: &BrowserCall,
    policy: Policy<'_>,
) -> Result<BrowserOutcome, ErrorBody> {
    match call {
        BrowserCall::SetFile {
            tab_id,
            name,
            content_base64,
        } => {
            set_file(
                bidi,
                profile,
                tab_id.as_deref(),
                name,
                content_base64,
                policy,
            )
            .await
        }
        BrowserCall::TakeDownload {} => {
            if policy.active() {
                let ctx = target_tab(bidi, None).await?;
                policy.check(bidi, &ctx, Scope::Top).await?;
            }
            take_download(&profile.join(DOWNLOADS))
        }
        BrowserCall::RemoveDownload { name } => {
            remove_download(&profile.join(DOWNLOADS), name)?;
            Ok(BrowserOutcome::Done)
        }
        _ => Err(ErrorBody::new(ErrorCode::InvalidAction, "not a file call")),
    }
}

/// The page script that picks the file input: the focused one, else the
/// only enabled one; otherwise the number of candidates; `"out_of_policy"`
/// when a policy is given and the document's origin is not in it.
const FIND_INPUT: &str = r#"((policy) => {
  const w = document.defaultView;
  if (policy && !(w && w.document === document && policy.includes(String(w.origin)))) return "out_of_policy";
  const ok = (e) => e && e.localName === "input" && (e.type || "").toLowerCase() === "file" && !e.disabled;
  if (ok(document.activeElement)) return document.activeElement;
  const all = [...document.querySelectorAll("input")].filter(ok);
  return all.length === 1 ? all[0] : all.length;
})"#;

async fn file_input(bidi: &Bidi, ctx: &str, policy: Policy<'_>) -> Result<Value, ErrorBody> {
    let r = bidi
        .command(
            "script.evaluate",
            json!({
                "expression": format!("({FIND_INPUT})({})", policy.value()),
                "target": {"context": ctx, "sandbox": "sandtop"},
                "awaitPromise": false,
                "resultOwnership": "none",
                "serializationOptions": {"maxDomDepth": 0},
            }),
            COMMAND_WAIT,
        )
        .await
        .map_err(bidi_error)?;
    if r.get("type").and_then(Value::as_str) != Some("success") {
        return Err(ErrorBody::new(
            ErrorCode::BrowserFailed,
            "the file input could not be looked up in this document",
        ));
    }
    let result = &r["result"];
    match (result["type"].as_str(), result["sharedId"].as_str()) {
        (Some("node"), Some(id)) => Ok(json!({"sharedId": id})),
        (Some("string"), _) => Err(out_of_policy()),
        _ => Err(ErrorBody::new(
            ErrorCode::NotActionable,
            format!(
                "the document has {} file inputs and none has the focus: exactly one must be focused or alone",
                result["value"].as_u64().unwrap_or(0)
            ),
        )),
    }
}

static UPLOAD_SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh 0700 directory under the profile's uploads, with the file
/// written in it (0600, never over another).
fn write_upload(profile: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ErrorBody> {
    let base = profile.join(UPLOADS);
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed("cannot create the upload folder", e)),
    }
    let dir = loop {
        let n = UPLOAD_SEQ.fetch_add(1, Ordering::Relaxed);
        let d = base.join(n.to_string());
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => break d,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(failed("cannot create the upload folder", e)),
        }
    };
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|e| failed("cannot create the upload", e))?;
    if let Err(e) = f.write_all(bytes) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(failed("cannot write the upload", e));
    }
    Ok(path)
}

async fn set_file(
    bidi: &Bidi,
    profile: &Path,
    tab_id: Option<&str>,
    name: &str,
    content_base64: &str,
    policy: Policy<'_>,
) -> Result<BrowserOutcome, ErrorBody> {
    wire::check_file_name(name)
        .map_err(|e| ErrorBody::new(ErrorCode::InvalidAction, format!("`name`: {e}")))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(content_base64)
        .map_err(|_| ErrorBody::new(ErrorCode::InvalidAction, "`content_base64`: not base64"))?;
    if bytes.len() > wire::MAX_UPLOAD_BYTES {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            "`content_base64`: larger than the upload limit",
        ));
    }
    let ctx = target_tab(bidi, tab_id).await?;
    // The input first: nothing is written when there is none to take it.
    let element = file_input(bidi, &ctx, policy).await?;
    let path = write_upload(profile, name, &bytes)?;
    let r = bidi
        .command(
            "input.setFiles",
            json!({
                "context": ctx,
                "element": element,
                "files": [path.to_string_lossy()],
            }),
            COMMAND_WAIT,
        )
        .await;
    if let Err(e) = r {
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
        let e = bidi_error(e);
        // The input went away or became unusable between the two steps.
        if e.code == ErrorCode::BrowserFailed {
            return Err(ErrorBody::new(
                ErrorCode::NotActionable,
                "the file input did not take the file",
            ));
        }
        return Err(e);
    }
    Ok(BrowserOutcome::Done)
}

/// The newest complete download: `(name, size)`.
fn newest_download(dir: &Path) -> Result<(String, u64), ErrorBody> {
    let entries = std::fs::read_dir(dir).map_err(|e| failed("cannot list the downloads", e))?;
    let mut names = Vec::new();
    for entry in entries.flatten() {
        if let Ok(n) = entry.file_name().into_string() {
            names.push(n);
        }
    }
    let mut best: Option<(std::time::SystemTime, String, u64)> = None;
    for n in &names {
        if n.ends_with(".part") || names.contains(&format!("{n}.part")) {
            continue;
        }
        if wire::check_file_name(n).is_err() {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(dir.join(n)) else {
            continue;
        };
        if !meta.file_type().is_file() {
            continue;
        }
        let when = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(w, _, _)| when > *w) {
            best = Some((when, n.clone(), meta.len()));
        }
    }
    best.map(|(_, n, len)| (n, len)).ok_or_else(|| {
        ErrorBody::new(
            ErrorCode::NotActionable,
            "no finished download in the browser's download folder",
        )
    })
}

fn take_download(dir: &Path) -> Result<BrowserOutcome, ErrorBody> {
    let (name, len) = newest_download(dir)?;
    if len > wire::MAX_DOWNLOAD_BYTES as u64 {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            "the download is larger than the download limit",
        ));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(dir.join(&name))
        .map_err(|e| failed("cannot open the download", e))?;
    let mut bytes = Vec::new();
    f.take(wire::MAX_DOWNLOAD_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| failed("cannot read the download", e))?;
    if bytes.len() > wire::MAX_DOWNLOAD_BYTES {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            "the download is larger than the download limit",
        ));
    }
    Ok(BrowserOutcome::File {
        name,
        content_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
    })
}

fn remove_download(dir: &Path, name: &str) -> Result<(), ErrorBody> {
    wire::check_file_name(name)
        .map_err(|e| ErrorBody::new(ErrorCode::InvalidAction, format!("`name`: {e}")))?;
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => {
            std::fs::remove_file(&path).map_err(|e| failed("cannot remove the download", e))
        }
        _ => Err(ErrorBody::new(ErrorCode::NotActionable, "no such download")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_complete_download_is_taken_and_removed() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            take_download(d.path()).unwrap_err().code,
            ErrorCode::NotActionable
        );
        std::fs::write(d.path().join("old.txt"), b"old").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(d.path().join("new.txt"), b"new").unwrap();
        // Still downloading: a placeholder with its .part.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(d.path().join("big.iso"), b"").unwrap();
        std::fs::write(d.path().join("big.iso.part"), b"partial").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.path().join("link")).unwrap();
        match take_download(d.path()).unwrap() {
            BrowserOutcome::File {
                name,
                content_base64,
            } => {
                assert_eq!(name, "new.txt");
                assert_eq!(content_base64, "bmV3");
            }
            other => panic!("{other:?}"),
        }
        remove_download(d.path(), "new.txt").unwrap();
        assert!(!d.path().join("new.txt").exists());
        assert_eq!(
            remove_download(d.path(), "link").unwrap_err().code,
            ErrorCode::NotActionable
        );
        assert_eq!(
            remove_download(d.path(), "../x").unwrap_err().code,
            ErrorCode::InvalidAction
        );
        assert!(d.path().join("link").exists());
    }

    #[test]
    fn uploads_go_into_fresh_private_folders() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let a = write_upload(d.path(), "a.txt", b"one").unwrap();
        let b = write_upload(d.path(), "a.txt", b"two").unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::read(&a).unwrap(), b"one");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&a), 0o600);
        assert_eq!(mode(a.parent().unwrap()), 0o700);
        assert_eq!(mode(&d.path().join(UPLOADS)), 0o700);
        assert!(download_prefs(d.path()).contains("browser.download.dir"));
    }
}
