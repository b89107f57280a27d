//! The Docker engine as tests see it.

use std::path::Path;
use std::process::Command;

/// The containers (id, session folder) whose `sandtop.session-dir` label
/// names a folder under `state`, stopped ones included: what a test's
/// guests left (a claimed pool guest's label keeps the pool's folder
/// name, which is under `state` too). Empty when `docker` cannot run.
pub fn session_containers(state: &Path) -> Vec<(String, String)> {
    let Ok(out) = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=sandtop.session-dir",
            "--format",
            "{{.ID}} {{.Label \"sandtop.session-dir\"}}",
        ])
        .output()
    else {
        return Vec::new();
    };
    let prefix = state.to_string_lossy().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, dir)| dir.starts_with(&prefix))
        .map(|(id, dir)| (id.to_string(), dir.to_string()))
        .collect()
}
