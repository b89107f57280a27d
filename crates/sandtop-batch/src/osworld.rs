//! OSWorld's task shape (evaluation_examples/examples/*/*.json: `id`,
//! `instruction`, `config` as a list of `{type, parameters}`, `evaluator`
//! as `{func, result, expected, options, conj, postconfig}`) mapped onto
//! Sandtop's setup steps and checks.
//!
//! Mapped (what the guest can honour without running a shell):
//! - config `launch` {command: argv or a string of words} of a guest
//!   program ([`crate::task::PROGRAMS`]); `open` {path} of a text file
//!   (mousepad); `download` {files: [{url, path}]}; `sleep` {seconds};
//!   `chrome_open_tabs` {urls_to_open} (the daemon's Firefox: the first
//!   URL in the active tab, the rest in new tabs); `activate_window`
//!   {window_name} (waited for: a new window has the focus).
//! - evaluator `compare_text_file` (result `vm_file`, expected `rule`
//!   {expected}), with options `ignore_case`, `ignore_blanks`; `exact_match` (result
//!   `vm_file`, expected `rule` {expected}); `check_include_exclude`
//!   (result `vm_file`, expected `rule` {include, exclude});
//!   `is_expected_active_tab` (result `active_tab_info`, expected `rule`
//!   {type: url, url}). A list of funcs with `conj` `and` (the default)
//!   maps each.
//!
//! Anything else (`execute`, `command`, `vm_command_line` results,
//! `cloud_file` and `vm_file` expectations, `postconfig`, `conj: or`, `infeasible`,
//! every other func) makes the task unsupported with its name: never
//! run, never the agent's failure.

use serde_json::Value;

use crate::task::{CheckSpec, DEFAULT_MAX_STEPS, Entry, Setup, Task, validate};

/// Text files `open` hands to the editor.
const TEXT_EXTENSIONS: &[&str] = &["txt", "md", "csv", "json", "py", "sh", "log", "conf", "ini"];

/// An OSWorld task line, mapped.
pub fn map(v: &Value, line: usize) -> Result<Entry, String> {
    let id = str_field(v, "id")?;
    let instruction = str_field(v, "instruction")?;
    let mut unsupported = Vec::new();
    let mut setup = Vec::new();
    let mut checks = Vec::new();
    // Some (unsupported) evaluator must still be an object with a func.
    let config = match v.get("config") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(format!("task {id:?}: `config` is a list")),
    };
    for (i, step) in config.iter().enumerate() {
        let kind = step
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("task {id:?}: config[{i}] has no `type`"))?;
        let p = step.get("parameters").cloned().unwrap_or(Value::Null);
        match config_step(kind, &p) {
            Ok(Some(mut s)) => {
                // A program the guest lacks is named here, beside the rest.
                for st in &s {
                    if let Setup::Launch(argv) = st
                        && let Some(p) = argv.first()
                        && !crate::task::PROGRAMS.contains(&p.as_str())
                    {
                        unsupported.push(format!("launch:{p}"));
                    }
                }
                setup.append(&mut s)
            }
            Ok(None) => unsupported.push(format!("config:{kind}")),
            Err(e) => return Err(format!("task {id:?}: config[{i}] ({kind}): {e}")),
        }
    }
    let ev = v
        .get("evaluator")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("task {id:?}: `evaluator` is an object"))?;
    if ev
        .get("postconfig")
        .is_some_and(|p| p.as_array().is_none_or(|a| !a.is_empty()))
    {
        unsupported.push("evaluator:postconfig".into());
    }
    let funcs: Vec<String> = match ev.get("func") {
        Some(Value::String(f)) => vec![f.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|f| f.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("task {id:?}: evaluator `func` is a name or a list of names"))?,
        _ => return Err(format!("task {id:?}: evaluator has no `func`")),
    };
    let conj = ev.get("conj").and_then(Value::as_str).unwrap_or("and");
    if funcs.len() > 1 && conj != "and" {
        unsupported.push(format!("evaluator:conj:{conj}"));
    }
    // With several funcs, result/expected/options are lists beside them.
    let nth = |key: &str, i: usize| -> Value {
        match ev.get(key) {
            Some(Value::Array(a)) if funcs.len() > 1 => a.get(i).cloned().unwrap_or(Value::Null),
            Some(v) => v.clone(),
            None => Value::Null,
        }
    };
    for (i, f) in funcs.iter().enumerate() {
        match evaluator(
            f,
            &nth("result", i),
            &nth("expected", i),
            &nth("options", i),
        ) {
            Ok(c) => checks.push(c),
            Err(why) => unsupported.push(format!("evaluator:{f}{why}")),
        }
    }
    if !unsupported.is_empty() {
        return Ok(Entry::Unsupported {
            id,
            instruction,
            line,
            names: unsupported,
        });
    }
    let solution = match v.get("solution") {
        None | Some(Value::Null) => None,
        Some(s) => Some(
            serde_json::from_value(s.clone())
                .map_err(|e| format!("task {id:?}: `solution`: {e}"))?,
        ),
    };
    let max_steps = match v.get("max_steps") {
        None => DEFAULT_MAX_STEPS,
        Some(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("task {id:?}: `max_steps` is a number"))?,
    };
    let network = match v.get("network") {
        None => "none".to_string(),
        Some(n) => n
            .as_str()
            .ok_or_else(|| format!("task {id:?}: `network` is a string"))?
            .to_string(),
    };
    validate(Task {
        id,
        instruction,
        setup,
        checks,
        max_steps,
        network,
        solution,
        line,
        osworld: true,
    })
}

fn str_field(v: &Value, key: &str) -> Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("`{key}` is a required string"))
}

/// A command as argv: a list of strings, or a string of words (OSWorld
/// allows both; a string is split on whitespace, never given to a shell).
fn argv(p: &Value) -> Result<Vec<String>, String> {
    match p.get("command") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| "`command`: a list of strings".into()),
        Some(Value::String(s)) => Ok(s.split_whitespace().map(str::to_string).collect()),
        _ => Err("`command`: a list of strings".into()),
    }
}

/// One config step: `Ok(None)` when Sandtop does not do it.
fn config_step(kind: &str, p: &Value) -> Result<Option<Vec<Setup>>, String> {
    Ok(Some(match kind {
        "launch" => {
            if p.get("shell").and_then(Value::as_bool) == Some(true) {
                return Ok(None);
            }
            vec![Setup::Launch(argv(p)?)]
        }
        "open" => {
            let path = p
                .get("path")
                .and_then(Value::as_str)
                .ok_or("`path`: a string")?;
            let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
            if !ext.is_some_and(|e| TEXT_EXTENSIONS.contains(&e.as_str())) {
                return Ok(None);
            }
            let name = path.rsplit('/').next().unwrap_or(path).to_string();
            vec![
                Setup::Launch(vec!["mousepad".into(), path.into()]),
                Setup::WaitWindow {
                    title: name,
                    timeout_s: None,
                },
            ]
        }
        "download" => {
            let files = p
                .get("files")
                .and_then(Value::as_array)
                .ok_or("`files`: a list of {url, path}")?;
            files
                .iter()
                .map(|f| {
                    let get = |k: &str| {
                        f.get(k)
                            .and_then(Value::as_str)
                            .map(str::to_string)
                            .ok_or_else(|| format!("files[]: `{k}` is a string"))
                    };
                    Ok(Setup::Download {
                        url: get("url")?,
                        path: get("path")?,
                    })
                })
                .collect::<Result<_, String>>()?
        }
        "sleep" => vec![Setup::Sleep(
            p.get("seconds")
                .and_then(Value::as_f64)
                .ok_or("`seconds`: a number")?,
        )],
        "chrome_open_tabs" => {
            let urls = p
                .get("urls_to_open")
                .and_then(Value::as_array)
                .ok_or("`urls_to_open`: a list")?;
            urls.iter()
                .enumerate()
                .map(|(i, u)| {
                    let u = u.as_str().ok_or("`urls_to_open`: strings")?.to_string();
                    Ok(if i == 0 {
                        Setup::OpenUrl(u)
                    } else {
                        Setup::NewTab(u)
                    })
                })
                .collect::<Result<_, String>>()?
        }
        "activate_window" => vec![Setup::WaitWindow {
            title: p
                .get("window_name")
                .and_then(Value::as_str)
                .ok_or("`window_name`: a string")?
                .to_string(),
            timeout_s: None,
        }],
        _ => return Ok(None),
    }))
}

/// One evaluator func: the check, or why not (a suffix of its name).
fn evaluator(
    f: &str,
    result: &Value,
    expected: &Value,
    options: &Value,
) -> Result<CheckSpec, String> {
    let ty = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let vm_path = |v: &Value| -> Result<String, String> {
        if ty(v) != "vm_file" {
            return Err(format!(":result:{}", ty(v)));
        }
        v.get("path")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ":result:vm_file without path".into())
    };
    let rules = |v: &Value| -> Result<Value, String> {
        if ty(v) != "rule" {
            return Err(format!(":expected:{}", ty(v)));
        }
        Ok(v.get("rules").cloned().unwrap_or(Value::Null))
    };
    let flag = |k: &str| options.get(k).and_then(Value::as_bool).unwrap_or(false);
    match f {
        "compare_text_file" => {
            let path = vm_path(result)?;
            let text = match ty(expected).as_str() {
                "rule" => rules(expected)?
                    .get("expected")
                    .and_then(Value::as_str)
                    .ok_or(":expected:rule without expected")?
                    .to_string(),
                other => return Err(format!(":expected:{other}")),
            };
            Ok(CheckSpec::FileEquals {
                path,
                text,
                ignore_case: flag("ignore_case"),
                ignore_blanks: flag("ignore_blanks"),
            })
        }
        "exact_match" => {
            let path = vm_path(result)?;
            let text = rules(expected)?
                .get("expected")
                .and_then(Value::as_str)
                .ok_or(":expected:rule without expected")?
                .to_string();
            Ok(CheckSpec::FileEquals {
                path,
                text,
                ignore_case: false,
                ignore_blanks: false,
            })
        }
        "check_include_exclude" => {
            let path = vm_path(result)?;
            let r = rules(expected)?;
            let list = |k: &str| -> Result<Vec<String>, String> {
                match r.get(k) {
                    None | Some(Value::Null) => Ok(Vec::new()),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|s| s.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!(":rules:{k} not strings")),
                    Some(_) => Err(format!(":rules:{k} not a list")),
                }
            };
            Ok(CheckSpec::FileContains {
                path,
                include: list("include")?,
                exclude: list("exclude")?,
            })
        }
        "is_expected_active_tab" => {
            if ty(result) != "active_tab_info" {
                return Err(format!(":result:{}", ty(result)));
            }
            let r = rules(expected)?;
            if r.get("type").and_then(Value::as_str) != Some("url") {
                return Err(":rules:type".into());
            }
            let url = r
                .get("url")
                .and_then(Value::as_str)
                .ok_or(":rules:url")?
                .to_string();
            Ok(CheckSpec::ActiveUrl { equals: url })
        }
        _ => Err(String::new()),
    }
}

#[cfg(test)]
mod tests;
