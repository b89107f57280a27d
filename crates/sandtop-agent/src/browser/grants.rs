//! File grants (docs/contract.md rule 48): the operator's approval of one host file
//! for `upload_file`, or of one host directory for `download_file`, named
//! by an id the model passes as `grant_id`.
//!
//! - **at start** ([`Grants::parse`]): `--grant upload:ID=PATH` and
//!   `--grant download:ID=DIR` are checked before a guest boots: the id
//!   ([`check_id`]), an upload a regular file (not a symlink, opened with
//!   `O_NOFOLLOW`) of at most [`MAX_UPLOAD_BYTES`] owned by you, a download
//!   directory an existing directory owned by you that neither group nor
//!   others may write; ids unique;
//! - **at use** ([`Grants::take`]): a grant is used once, consumed when
//!   taken, whatever happens after; the file (or directory) is checked
//!   again, and must be the very one checked at start (same device and
//!   inode) with the same limits;
//! - **download** ([`write_download`]): the file is created exclusively
//!   (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), never over an existing one:
//!   a free name `stem-1.ext` .. `stem-99.ext` is picked, else refused.
//!
//! Only a file's basename and bytes go to the guest, never a host path.
//! The outcome the model reads is [`FileOutcome`].

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sandtop_protocol::browser::{self as wire, check_file_name};
use serde::Serialize;

/// The largest file `upload_file` sends: the daemon's request body limit
/// (1 MiB) carries at most this much as base64.
pub const MAX_UPLOAD_BYTES: usize = wire::MAX_UPLOAD_BYTES;
/// The largest file `download_file` copies out.
pub const MAX_DOWNLOAD_BYTES: usize = wire::MAX_DOWNLOAD_BYTES;
/// The longest grant id, in bytes.
pub const MAX_GRANT_ID_BYTES: usize = 256;

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    Upload,
    Download,
}

impl GrantKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::Upload => "upload",
            GrantKind::Download => "download",
        }
    }

    /// The browser member that uses this kind of grant.
    pub fn member(self) -> &'static str {
        match self {
            GrantKind::Upload => "upload_file",
            GrantKind::Download => "download_file",
        }
    }

    /// The kind a file member uses.
    pub fn of_member(member: &str) -> Option<GrantKind> {
        match member {
            "upload_file" => Some(GrantKind::Upload),
            "download_file" => Some(GrantKind::Download),
            _ => None,
        }
    }
}

/// One approved file or directory, as checked at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub kind: GrantKind,
    pub id: String,
    pub path: PathBuf,
    dev: u64,
    ino: u64,
    /// An upload's size at start.
    pub size: u64,
}

impl Grant {
    /// The line the operator's confirmation shows.
    pub fn describe(&self) -> String {
        let path = sandtop_hostkit::term::safe_line(&self.path.display().to_string());
        match self.kind {
            GrantKind::Upload => format!(
                "grant upload `{}`: host file {path} ({} bytes; only its name and bytes go to the guest)",
                sandtop_hostkit::term::safe_line(&self.id),
                self.size
            ),
            GrantKind::Download => format!(
                "grant download `{}`: into host directory {path} (a new file, never overwriting)",
                sandtop_hostkit::term::safe_line(&self.id)
            ),
        }
    }
}

/// Checks a grant id: 1 to [`MAX_GRANT_ID_BYTES`] bytes of UTF-8 (a Rust
/// string is), no control characters, no `/` or `\` (not a path), no
/// `scheme:` prefix (not a URL). The error names the problem.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the grant id is empty".into());
    }
    if id.len() > MAX_GRANT_ID_BYTES {
        return Err(format!(
            "the grant id is {} bytes, more than {MAX_GRANT_ID_BYTES}",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Err("the grant id has a control character".into());
    }
    if id.contains(['/', '\\']) || id == "." || id == ".." || id.starts_with('~') {
        return Err("the grant id looks like a path".into());
    }
    if id.contains(':') {
        return Err("the grant id looks like a URL (it has a `:`)".into());
    }
    Ok(())
}

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Opens a regular file without following a symlink and checks it: owned
/// by you, at most [`MAX_UPLOAD_BYTES`].
fn open_upload(path: &Path) -> Result<(File, std::fs::Metadata), String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                "is a symlink (refused: give the file itself)".to_string()
            } else {
                format!("cannot be opened: {e}")
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.file_type().is_file() {
        return Err("is not a regular file".into());
    }
    if meta.uid() != uid() {
        return Err(format!(
            "is owned by uid {}, not by you (uid {})",
            meta.uid(),
            uid()
        ));
    }
    if meta.len() > MAX_UPLOAD_BYTES as u64 {
        return Err(format!(
            "is {} bytes, more than the upload limit of {MAX_UPLOAD_BYTES}",
            meta.len()
        ));
    }
    Ok((file, meta))
}

/// Checks a download directory (not followed if a symlink): a directory
/// owned by you that group and others cannot write.
fn check_download_dir(path: &Path) -> Result<std::fs::Metadata, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if meta.file_type().is_symlink() {
        return Err("is a symlink (refused: give the directory itself)".into());
    }
    if !meta.is_dir() {
        return Err("is not a directory".into());
    }
    if meta.uid() != uid() {
        return Err(format!(
            "is owned by uid {}, not by you (uid {})",
            meta.uid(),
            uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by group or others (mode {:o}); refused",
            meta.mode() & 0o7777
        ));
    }
    Ok(meta)
}

/// Parses one `--grant` value: `upload:ID=PATH` or `download:ID=DIR`.
pub fn parse_grant(spec: &str) -> Result<Grant, String> {
    let bad = |why: String| format!("--grant {}: {why}", sandtop_hostkit::term::safe_line(spec));
    let (kind, rest) = spec
        .split_once(':')
        .ok_or_else(|| bad("expected upload:ID=PATH or download:ID=DIR".into()))?;
    let kind = match kind {
        "upload" => GrantKind::Upload,
        "download" => GrantKind::Download,
        other => {
            return Err(bad(format!(
                "unknown kind `{}` (upload or download)",
                sandtop_hostkit::term::safe_line(other)
            )));
        }
    };
    let (id, path) = rest
        .split_once('=')
        .ok_or_else(|| bad("expected ID=PATH after the kind".into()))?;
    check_id(id).map_err(bad)?;
    if path.is_empty() {
        return Err(bad("the path is empty".into()));
    }
    let path = PathBuf::from(path);
    let meta = match kind {
        GrantKind::Upload => open_upload(&path).map(|(_, m)| m),
        GrantKind::Download => check_download_dir(&path),
    }
    .map_err(|e| bad(format!("{} {e}", path.display())))?;
    if kind == GrantKind::Upload
        && let Some(n) = path.file_name().and_then(|n| n.to_str())
    {
        check_file_name(n).map_err(|e| bad(format!("the file's name: {e}")))?;
    } else if kind == GrantKind::Upload {
        return Err(bad("the file's name is not valid UTF-8".into()));
    }
    Ok(Grant {
        kind,
        id: id.to_string(),
        path,
        dev: meta.dev(),
        ino: meta.ino(),
        size: if kind == GrantKind::Upload {
            meta.len()
        } else {
            0
        },
    })
}

/// Why a grant cannot be used now (model-facing: no host path in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unknown,
    Used,
    /// The file or directory changed since start (the operator reads why).
    Changed(String),
}

impl Refusal {
    /// The model-facing text.
    pub fn text(&self) -> &'static str {
        match self {
            Refusal::Unknown => "No grant of this kind has this id.",
            Refusal::Used => "This grant was already used; each grant is used once.",
            Refusal::Changed(_) => {
                "The granted file is no longer the one the operator approved; the grant is used up."
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    grants: Vec<Grant>,
    used: BTreeSet<String>,
}

/// The run's grants, shared by every clone (used once across the run).
#[derive(Debug, Clone, Default)]
pub struct Grants(Arc<Mutex<State>>);

impl Grants {
    /// Checks every `--grant` value (see the module docs); ids unique.
    pub fn parse(specs: &[String]) -> Result<Grants, String> {
        let mut grants: Vec<Grant> = Vec::new();
        for s in specs {
            let g = parse_grant(s)?;
            if grants.iter().any(|o| o.id == g.id) {
                return Err(format!(
                    "--grant: the id `{}` is given twice",
                    sandtop_hostkit::term::safe_line(&g.id)
                ));
            }
            grants.push(g);
        }
        Ok(Grants(Arc::new(Mutex::new(State {
            grants,
            used: BTreeSet::new(),
        }))))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a grant of this kind was given.
    pub fn has(&self, kind: GrantKind) -> bool {
        self.state().grants.iter().any(|g| g.kind == kind)
    }

    /// The unused grant of this kind and id, without using it (for the
    /// operator's confirmation).
    pub fn peek(&self, kind: GrantKind, id: &str) -> Result<Grant, Refusal> {
        let s = self.state();
        let g = s
            .grants
            .iter()
            .find(|g| g.kind == kind && g.id == id)
            .ok_or(Refusal::Unknown)?;
        if s.used.contains(id) {
            return Err(Refusal::Used);
        }
        Ok(g.clone())
    }

    /// Uses the grant: from now on it is spent, whatever follows. Then
    /// checks its file or directory again.
    pub fn take(&self, kind: GrantKind, id: &str) -> Result<Grant, Refusal> {
        let g = {
            let mut s = self.state();
            let g = s
                .grants
                .iter()
                .find(|g| g.kind == kind && g.id == id)
                .cloned()
                .ok_or(Refusal::Unknown)?;
            if !s.used.insert(id.to_string()) {
                return Err(Refusal::Used);
            }
            g
        };
        if kind == GrantKind::Download {
            let meta = check_download_dir(&g.path).map_err(Refusal::Changed)?;
            if (meta.dev(), meta.ino()) != (g.dev, g.ino) {
                return Err(Refusal::Changed(
                    "is not the directory checked at start".into(),
                ));
            }
        }
        Ok(g)
    }
}

/// An upload's name and bytes, read now from the granted file: still a
/// regular file owned by you, the same one as at start (device, inode),
/// within [`MAX_UPLOAD_BYTES`].
pub fn read_upload(g: &Grant) -> Result<(String, Vec<u8>), String> {
    let (file, meta) = open_upload(&g.path)?;
    if (meta.dev(), meta.ino()) != (g.dev, g.ino) {
        return Err("is not the file checked at start".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_UPLOAD_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() > MAX_UPLOAD_BYTES {
        return Err(format!(
            "grew beyond the upload limit of {MAX_UPLOAD_BYTES}"
        ));
    }
    let name = g
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("has no usable name")?
        .to_string();
    Ok((name, bytes))
}

/// A safe basename for a file named by the guest: its text is data, so
/// anything but letters, digits, `.`, `-`, `_` and space becomes `_`, a
/// leading `.` too; cut to 128 bytes; empty becomes `download`.
pub fn safe_file_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect();
    while out.starts_with('.') || out.starts_with(' ') {
        out.replace_range(..1, "_");
    }
    let out = out.trim_end().to_string();
    let mut end = out.len().min(128);
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    let out = out[..end].to_string();
    if out.is_empty() {
        "download".into()
    } else {
        out
    }
}

/// Writes a download into the granted directory as a new file (mode 0600,
/// created exclusively, never overwriting): `name`, else `stem-1.ext` ..
/// `stem-99.ext`. Returns the path written.
pub fn write_download(g: &Grant, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
    if bytes.len() > MAX_DOWNLOAD_BYTES {
        return Err(format!(
            "the download is {} bytes, more than {MAX_DOWNLOAD_BYTES}",
            bytes.len()
        ));
    }
    let name = safe_file_name(name);
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name.as_str(), ""),
    };
    for n in 0..100 {
        let candidate = if n == 0 {
            name.clone()
        } else {
            format!("{stem}-{n}{ext}")
        };
        let path = g.path.join(&candidate);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
        {
            Ok(mut f) => {
                let r = f.write_all(bytes).and_then(|_| f.sync_all());
                if let Err(e) = r {
                    let _ = std::fs::remove_file(&path);
                    return Err(format!("cannot write {}: {e}", path.display()));
                }
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
        }
    }
    Err(format!(
        "{name} and 99 numbered variants exist in the directory already; nothing is overwritten"
    ))
}

/// `BrowserFileOutcome.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    Completed,
    Refused,
    Unknown,
    Interrupted,
}

/// `BrowserFileOutcome.effect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileEffect {
    Completed,
    None,
    Unknown,
}

/// `BrowserFileOutcome.cleanup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cleanup {
    NotStarted,
    Pending,
    Completed,
}

/// The seed's `BrowserFileOutcome`: exactly `{version: 1, status, effect,
/// cleanup}`, built only through [`FileOutcome::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FileOutcome {
    version: u8,
    pub status: FileStatus,
    pub effect: FileEffect,
    pub cleanup: Cleanup,
}

impl Default for FileOutcome {
    fn default() -> FileOutcome {
        FileOutcome::refused()
    }
}

impl FileOutcome {
    /// The outcome, if `status` and `effect` go together: completed and
    /// completed, refused and none, unknown and unknown, interrupted and
    /// none or unknown.
    pub fn new(status: FileStatus, effect: FileEffect, cleanup: Cleanup) -> Option<FileOutcome> {
        valid_combination(status, effect).then_some(FileOutcome {
            version: 1,
            status,
            effect,
            cleanup,
        })
    }

    /// Refused before any effect.
    pub fn refused() -> FileOutcome {
        FileOutcome {
            version: 1,
            status: FileStatus::Refused,
            effect: FileEffect::None,
            cleanup: Cleanup::NotStarted,
        }
    }

    /// Only a completed transfer makes the tool's output `ok: true`.
    pub fn ok(&self) -> bool {
        self.status == FileStatus::Completed
    }

    pub fn to_value(self) -> serde_json::Value {
        serde_json::json!({
            "version": self.version,
            "status": self.status,
            "effect": self.effect,
            "cleanup": self.cleanup,
        })
    }
}

/// Whether `status` and `effect` form a valid `BrowserFileOutcome`.
pub fn valid_combination(status: FileStatus, effect: FileEffect) -> bool {
    matches!(
        (status, effect),
        (FileStatus::Completed, FileEffect::Completed)
            | (FileStatus::Refused, FileEffect::None)
            | (FileStatus::Unknown, FileEffect::Unknown)
            | (
                FileStatus::Interrupted,
                FileEffect::None | FileEffect::Unknown
            )
    )
}

#[cfg(test)]
mod tests;
