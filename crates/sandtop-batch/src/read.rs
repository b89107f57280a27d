//! Reading a task file: each line in Sandtop's shape ([`crate::task`]) or
//! OSWorld's ([`crate::osworld`]), every bad line reported with its number.
//! Above both shapes, which know nothing of each other's reader.

use serde_json::Value;

use crate::task::{Entry, FileErrors, LineError};

/// Reads a task file's text: every task, or every bad line.
pub fn parse(text: &str) -> Result<Vec<Entry>, FileErrors> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut errors = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        match parse_line(trimmed, line) {
            Ok(e) => {
                if let Some(first) = entries.iter().find(|o| o.id() == e.id()) {
                    let at = match first {
                        Entry::Task(t) => t.line,
                        Entry::Unsupported { line, .. } => *line,
                    };
                    errors.push(LineError {
                        line,
                        message: format!("duplicate id {:?} (first on line {at})", e.id()),
                    });
                } else {
                    entries.push(e);
                }
            }
            Err(message) => errors.push(LineError { line, message }),
        }
    }
    if !errors.is_empty() {
        return Err(FileErrors(errors));
    }
    if entries.is_empty() {
        return Err(FileErrors(vec![LineError {
            line: 0,
            message: "the file holds no task".into(),
        }]));
    }
    Ok(entries)
}

/// One non-empty line.
pub fn parse_line(text: &str, line: usize) -> Result<Entry, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Some(obj) = v.as_object() else {
        return Err("a task is a JSON object".into());
    };
    if obj.contains_key("config") || obj.contains_key("evaluator") {
        return crate::osworld::map(&v, line);
    }
    crate::task::native(v, line)
}
