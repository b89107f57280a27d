//! `POST /v1/files/read`: the host reads one file of the guest user's.
//!
//! Host only: no model tool maps to it. The offline exercise checks the
//! guest's applications on their own records through it (a VM guest has
//! no `docker exec`), and an operator may fetch what a run produced. The
//! daemon serves it only when started with `--files-root DIR` (the guest's
//! home): the path must name a regular file beneath that folder, reached
//! without a symbolic link, at most [`MAX_READ_BYTES`] long. What comes
//! back is the guest's data: shown through the host's inert-text rules,
//! never as the operator's words.

use serde::{Deserialize, Serialize};

/// The largest file read, in bytes (its base64 form is about 1.4 MB).
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// The longest path accepted, in bytes (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;

/// `POST /v1/files/read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileRequest {
    /// An absolute path in the guest, e.g. `/home/user/notes.txt`.
    pub path: String,
}

impl ReadFileRequest {
    /// The path relative to `root` (an absolute folder), or why not: it
    /// must be absolute, beneath `root`, with no `.` or `..` part, no
    /// empty part and no NUL. Symbolic links are the daemon's to refuse
    /// when it opens the file.
    pub fn beneath<'a>(&'a self, root: &str) -> Result<&'a str, crate::Invalid> {
        let p = self.path.as_str();
        if p.len() > MAX_PATH_BYTES {
            return Err(crate::invalid!("path: longer than {MAX_PATH_BYTES} bytes"));
        }
        if p.contains('\0') {
            return Err("path: contains a NUL byte".into());
        }
        if !p.starts_with('/') {
            return Err("path: must be absolute".into());
        }
        let root = root.trim_end_matches('/');
        let rel = p
            .strip_prefix(root)
            .and_then(|r| r.strip_prefix('/'))
            .filter(|r| !r.is_empty())
            .ok_or_else(|| {
                "path: not beneath the folder this daemon reads files from".to_string()
            })?;
        if rel
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return Err("path: an empty, `.` or `..` part".into());
        }
        Ok(rel)
    }
}

/// The reply of `POST /v1/files/read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileReply {
    /// The file's length in bytes.
    pub size: u64,
    /// The file's bytes, base64 (standard alphabet, padded).
    pub data: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(p: &str) -> ReadFileRequest {
        ReadFileRequest { path: p.into() }
    }

    #[test]
    fn only_paths_beneath_the_root_without_dot_parts_pass() {
        assert_eq!(req("/home/user/a.txt").beneath("/home/user"), Ok("a.txt"));
        assert_eq!(
            req("/home/user/demo/s.jsonl").beneath("/home/user/"),
            Ok("demo/s.jsonl")
        );
        for bad in [
            "home/user/a",
            "/home/user",
            "/home/user/",
            "/home/username/a",
            "/home/user/../root/x",
            "/home/user/./a",
            "/home/user//a",
            "/home/user/a/",
            "/etc/passwd",
            "/home/user/a\0b",
        ] {
            assert!(req(bad).beneath("/home/user").is_err(), "{bad:?}");
        }
        let long = format!("/home/user/{}", "a".repeat(MAX_PATH_BYTES));
        assert!(req(&long).beneath("/home/user").is_err());
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_str::<ReadFileRequest>(r#"{"path":"/a","x":1}"#).is_err());
    }
}
