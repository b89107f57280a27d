//! The Messages API's browser toolset (`browser_toolset_20260801`) over
//! the loop's browser tools (the seed's `browser_<member>` function tools).
//!
//! The loop keeps one browser vocabulary (the seed's members, their
//! strict arguments, URL policy, confirmation, ledger and state rules in
//! [`crate::browser::toolset`]); this module translates at the edge, both
//! ways, as the computer toolset's translation does:
//!
//! * **offer** ([`tools`]): the browser function tools the run offers
//!   become one toolset entry whose `configs` enable exactly the members
//!   the enabled seed members can carry out ([`NEEDS`]); a seed member no
//!   toolset member covers (`wait_for`, `upload_file`, `download_file`)
//!   stays a custom tool beside it, under its own name;
//! * **calls** ([`to_seed`]): a member's `tool_use` becomes the seed call
//!   that does the same (a `left_click` on a ref a `click`, on a point a
//!   `click_at`; `form_input` a `type` into the field, a `select_option`
//!   or a `set_checked`, chosen by the value and by the element's role in
//!   the conversation's reads); an input no seed call can carry out (a
//!   history `navigate`, a right click on a ref, ...) becomes a call the
//!   toolset refuses before anything runs, and the result names why;
//! * **results** ([`tool_result`]): the seed's `{ok, state, result | error}`
//!   becomes the toolset's `tool_result` (`toolset_name: "browser"`): the
//!   member's rendering (its acknowledgment line, the page's text, the
//!   image) and a `browser_state` block of the tabs after the call; a
//!   failure an `is_error` result of its text alone.
//!
//! Shapes and texts are the SDK's (`anthropic==2.17.0`:
//! `types/beta/beta_browser_*`, `lib/tools/_toolsets/_registry.py` `ROWS`,
//! `_render.py`, `_pipeline.py`); where the loop's browser does a member
//! differently, docs/contract.md ("Claude") says how.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::browser::toolset::{OPT_IN_MEMBERS, payload_of};
use sandtop_protocol::browser::DEFAULT_MEMBERS;

/// The toolset entry's `type`.
pub const BROWSER_TOOLSET: &str = "browser_toolset_20260801";

/// The toolset's members (`_registry.py` `ROWS`, in its order): the
/// result kind, the acknowledgment of a pure action, and whether the API
/// enables the member when `configs` leaves it out.
pub const MEMBERS: [(&str, Kind, Option<&str>, bool); 31] = [
    ("navigate", Kind::Navigate, None, true),
    ("screenshot", Kind::Image, None, true),
    ("zoom", Kind::Image, None, true),
    ("left_click", Kind::None, Some("Clicked."), true),
    ("right_click", Kind::None, Some("Right-clicked."), true),
    ("middle_click", Kind::None, Some("Middle-clicked."), true),
    ("double_click", Kind::None, Some("Double-clicked."), true),
    ("triple_click", Kind::None, Some("Triple-clicked."), true),
    ("hover", Kind::None, Some("Hovered."), true),
    ("left_click_drag", Kind::None, Some("Dragged."), true),
    (
        "left_mouse_down",
        Kind::None,
        Some("Mouse button pressed."),
        true,
    ),
    (
        "left_mouse_up",
        Kind::None,
        Some("Mouse button released."),
        true,
    ),
    ("mouse_move", Kind::None, Some("Moved the mouse."), true),
    (
        "scroll",
        Kind::None,
        Some("Scrolled {scroll_direction}."),
        true,
    ),
    ("scroll_to", Kind::None, Some("Scrolled to {ref}."), true),
    ("type", Kind::None, Some("Typed."), true),
    ("key", Kind::None, Some("Pressed {text}."), true),
    (
        "hold_key",
        Kind::None,
        Some("Held {text} for {duration}s."),
        true,
    ),
    (
        "form_input",
        Kind::None,
        Some("Set the value of {ref}."),
        true,
    ),
    ("read_page", Kind::Text, None, true),
    ("find", Kind::Text, None, true),
    ("get_page_text", Kind::Text, None, true),
    ("wait", Kind::None, Some("Waited {duration}s."), true),
    ("file_upload", Kind::None, Some("Uploaded."), false),
    ("read_console", Kind::Text, None, false),
    ("read_network", Kind::Text, None, false),
    ("javascript_exec", Kind::Text, None, false),
    ("new_tab", Kind::Tabs, None, true),
    ("list_tabs", Kind::Tabs, None, true),
    ("switch_tab", Kind::Tabs, None, true),
    ("close_tab", Kind::None, None, true),
];

/// What a member's successful result renders (`_render.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Its acknowledgment line, if it has one.
    None,
    /// `Navigated to URL — title`.
    Navigate,
    /// The image.
    Image,
    /// The text the call returned.
    Text,
    /// Nothing but the `browser_state` block.
    Tabs,
}

/// The seed members each toolset member is carried out with; a member is
/// offered when one of them is enabled. Those with none are withheld:
/// `type` and `key` act on whatever has the focus, which the loop's
/// confirmation cannot show (`type` into a named field is `form_input`);
/// `wait` has no seed member (the page's own `wait_for` stays offered);
/// `file_upload` takes paths where the loop takes the user's grants
/// (`upload_file` stays offered); the loop has no separate button press
/// and release.
pub const NEEDS: [(&str, &[&str]); 31] = [
    ("navigate", &["navigate"]),
    ("screenshot", &["screenshot"]),
    ("zoom", &["zoom"]),
    ("left_click", &["click", "click_at"]),
    ("right_click", &["click_at"]),
    ("middle_click", &["click_at"]),
    ("double_click", &["click_at"]),
    ("triple_click", &["click_at"]),
    ("hover", &["hover", "hover_at"]),
    ("left_click_drag", &["drag_path"]),
    ("left_mouse_down", &[]),
    ("left_mouse_up", &[]),
    ("mouse_move", &["hover_at"]),
    ("scroll", &["scroll"]),
    ("scroll_to", &["scroll_to"]),
    ("type", &[]),
    ("key", &[]),
    ("hold_key", &["hold_keys"]),
    ("form_input", &["type", "select_option", "set_checked"]),
    ("read_page", &["read_page", "read_page_scoped"]),
    ("find", &["find"]),
    ("get_page_text", &["get_page_text"]),
    ("wait", &[]),
    ("file_upload", &[]),
    ("read_console", &["read_diagnostics"]),
    ("read_network", &["read_diagnostics"]),
    ("javascript_exec", &["run_script"]),
    ("new_tab", &["new_tab"]),
    ("list_tabs", &["list_tabs"]),
    ("switch_tab", &["switch_tab"]),
    ("close_tab", &["close_tab"]),
];

/// Pixels one scroll-wheel notch moves the page (the daemon scrolls by
/// pixels; the Python driver uses the same figure).
pub const NOTCH_PIXELS: i64 = 100;
/// The longest a `javascript_exec` may run.
pub const SCRIPT_TIMEOUT_MS: u64 = 10_000;
/// `read_page`'s default depth when a subtree is asked for.
pub const DEFAULT_DEPTH: i64 = 15;

fn needs(member: &str) -> &'static [&'static str] {
    NEEDS
        .iter()
        .find(|(m, _)| *m == member)
        .map_or(&[], |(_, n)| n)
}

fn row(member: &str) -> Option<&'static (&'static str, Kind, Option<&'static str>, bool)> {
    MEMBERS.iter().find(|(m, ..)| *m == member)
}

/// Whether some toolset member is carried out with this seed member.
pub fn covered(seed: &str) -> bool {
    NEEDS.iter().any(|(_, n)| n.contains(&seed))
}

/// The tools of a request: the browser function tools (`browser_<m>`)
/// folded into one toolset entry (placed where the first of them was),
/// the seed members no toolset member covers kept as custom tools; every
/// other tool as it came. `custom` turns one function tool into a custom
/// tool.
pub fn tools<E>(
    all: &[Value],
    mut custom: impl FnMut(&Value) -> Result<Value, E>,
) -> Result<Vec<Value>, E> {
    fn seed(t: &Value) -> Option<&str> {
        (t["type"] == "function")
            .then(|| t["name"].as_str()?.strip_prefix("browser_"))
            .flatten()
            .filter(|m| DEFAULT_MEMBERS.contains(m) || OPT_IN_MEMBERS.contains(m))
    }
    let enabled: Vec<&str> = all.iter().filter_map(seed).collect();
    let mut out = Vec::new();
    let mut placed = false;
    for t in all {
        match seed(t) {
            Some(m) if covered(m) => {
                if !placed {
                    out.push(toolset_entry(&enabled));
                    placed = true;
                }
            }
            _ => out.push(custom(t)?),
        }
    }
    Ok(out)
}

/// The toolset entry for these enabled seed members: each member's
/// `enabled` set where it differs from the API's default.
pub fn toolset_entry(enabled: &[&str]) -> Value {
    let configs: Map<String, Value> = MEMBERS
        .iter()
        .filter_map(|(m, _, _, default)| {
            let on = needs(m).iter().any(|s| enabled.contains(s));
            (on != *default).then(|| (m.to_string(), json!({"enabled": on})))
        })
        .collect();
    json!({"type": BROWSER_TOOLSET, "configs": configs})
}

/// The roles of the element refs the conversation's reads returned
/// (`form_input` chooses its seed call by them).
pub type Roles = HashMap<String, String>;

/// The roles of every element the reads answered in `items` (the
/// request's input), the latest read of a ref winning.
pub fn roles(items: &[Value]) -> Roles {
    let mut out = Roles::new();
    for item in items.iter().filter(|i| i["type"] == "function_call_output") {
        let Some(p) = payload_of(item) else { continue };
        for e in p["result"]["elements"].as_array().into_iter().flatten() {
            if let (Some(r), Some(role)) = (e["ref"].as_str(), e["role"].as_str()) {
                out.insert(r.to_string(), role.to_string());
            }
        }
    }
    out
}

/// The modifier names of the loop's `click_at`/`drag_path` (`Control`,
/// `Alt`, `Meta`, `Shift`) for the toolset's modifier chord.
fn modifiers(text: Option<&Value>) -> Result<Vec<&'static str>, String> {
    let text = match text {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(Vec::new()),
        Some(Value::String(s)) => s,
        Some(_) => return Err("modifiers must be a string".into()),
    };
    let chords = super::chords(text)?;
    let [chord] = chords.as_slice() else {
        return Err("modifiers are one chord (e.g. 'ctrl+shift')".into());
    };
    let mut out = Vec::new();
    for k in chord {
        let m = match k.to_ascii_lowercase().as_str() {
            "ctrl" | "control" => "Control",
            "alt" | "option" => "Alt",
            "shift" => "Shift",
            "meta" | "cmd" | "command" | "super" | "win" => "Meta",
            _ => {
                return Err(format!(
                    "{:?} is not a modifier (ctrl, alt, shift, meta)",
                    k.chars().take(32).collect::<String>()
                ));
            }
        };
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// A target: `Ok(Err(ref))` or `Ok(Ok((x, y)))`.
type Target = Result<(i64, i64), String>;

fn target(v: &Value, field: &str) -> Result<Target, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("{field} must be a target object"))?;
    match obj.get("type").and_then(Value::as_str) {
        Some("ref") => match (obj.get("ref").and_then(Value::as_str), obj.len()) {
            (Some(r), 2) => Ok(Err(r.to_string())),
            _ => Err(format!("{field}: a ref target is exactly {{type, ref}}")),
        },
        Some("coordinate") => {
            let n = |k: &str| obj.get(k).and_then(Value::as_i64).filter(|v| *v >= 0);
            match (n("x"), n("y"), obj.len()) {
                (Some(x), Some(y), 3) => Ok(Ok((x, y))),
                _ => Err(format!(
                    "{field}: a coordinate target is exactly {{type, x, y}}, non-negative integers"
                )),
            }
        }
        _ => Err(format!(
            "{field}: the target type must be ref or coordinate"
        )),
    }
}

fn point(v: &Value, field: &str, member: &str) -> Result<(i64, i64), String> {
    target(v, field)?.map_err(|_| {
        format!("{member}: this browser needs a coordinate target here, not an element reference")
    })
}

fn reference(v: &Value, field: &str) -> Result<String, String> {
    match target(v, field)? {
        Err(r) => Ok(r),
        Ok(_) => Err(format!("{field} must be an element reference (type ref)")),
    }
}

/// The page's URL as the daemon is given it: the protocol defaults to
/// `https://`, as the toolset's `navigate` states.
pub fn normalize_url(url: &str) -> String {
    let u = url.trim();
    if u.contains("://") || u.starts_with("about:") {
        u.to_string()
    } else {
        format!("https://{u}")
    }
}

/// The seed call (member, strict arguments) that carries out one toolset
/// member's input; the error is the model-facing reason none can.
pub fn to_seed(name: &str, input: &Value, roles: &Roles) -> Result<(&'static str, Value), String> {
    let obj = input
        .as_object()
        .ok_or_else(|| format!("{name}: the input is not an object"))?;
    let allowed: &[&str] = match name {
        "navigate" => &["url", "tab_id"],
        "screenshot" | "get_page_text" | "read_console" | "read_network" => &["tab_id"],
        "zoom" => &["region", "tab_id"],
        "left_click" | "right_click" | "middle_click" | "double_click" | "triple_click" => {
            &["target", "modifiers", "tab_id"]
        }
        "hover" | "mouse_move" | "scroll_to" => &["target", "tab_id"],
        "left_click_drag" => &["from", "target", "tab_id"],
        "scroll" => &["scroll_direction", "target", "scroll_amount", "tab_id"],
        "hold_key" => &["text", "duration", "tab_id"],
        "form_input" => &["target", "value", "tab_id"],
        "read_page" => &["depth", "filter", "ref", "tab_id"],
        "find" => &["query", "tab_id"],
        "javascript_exec" => &["text", "tab_id"],
        "new_tab" | "list_tabs" => &[],
        "switch_tab" | "close_tab" => &["tab_id"],
        _ => return Err(format!("{name}: this browser does not run this member")),
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("{name}: unknown field {k:?}"));
    }
    let tab = || match obj.get("tab_id") {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(Value::String(s)) => Ok(json!(s)),
        Some(_) => Err(format!("{name}: tab_id must be a string")),
    };
    let string = |k: &str| -> Result<String, String> {
        obj.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("{name}: {k} must be a string"))
    };
    let field = |k: &str| obj.get(k).unwrap_or(&Value::Null);
    Ok(match name {
        "navigate" => {
            let url = string("url")?;
            if matches!(url.trim(), "back" | "forward" | "reload") {
                return Err(format!(
                    "navigate: '{}' is not available in this browser; navigate to a URL instead",
                    url.trim()
                ));
            }
            (
                "navigate",
                json!({"url": normalize_url(&url), "tab_id": tab()?}),
            )
        }
        "screenshot" => ("screenshot", json!({"tab_id": tab()?})),
        "get_page_text" => ("get_page_text", json!({"tab_id": tab()?})),
        "zoom" => {
            let region = field("region");
            let ok = region
                .as_array()
                .is_some_and(|r| r.len() == 4 && r.iter().all(|v| v.as_u64().is_some()));
            if !ok {
                return Err("zoom: region must be [x0, y0, x1, y1], non-negative integers".into());
            }
            ("zoom", json!({"tab_id": tab()?, "region": region}))
        }
        "left_click" | "right_click" | "middle_click" | "double_click" | "triple_click" => {
            let keys = modifiers(obj.get("modifiers")).map_err(|e| format!("{name}: {e}"))?;
            let (button, count) = match name {
                "left_click" => ("left", 1),
                "right_click" => ("right", 1),
                "middle_click" => ("middle", 1),
                "double_click" => ("left", 2),
                _ => ("left", 3),
            };
            match target(field("target"), "target")? {
                Err(r) if name == "left_click" && keys.is_empty() => {
                    ("click", json!({"target": r, "tab_id": tab()?}))
                }
                Err(_) => {
                    return Err(format!(
                        "{name}: this browser needs a coordinate target here, not an element reference"
                    ));
                }
                Ok((x, y)) => (
                    "click_at",
                    json!({"tab_id": tab()?, "x": x, "y": y, "button": button,
                           "click_count": count, "keys": keys}),
                ),
            }
        }
        "hover" => match target(field("target"), "target")? {
            Err(r) => ("hover", json!({"target": r, "tab_id": tab()?})),
            Ok((x, y)) => ("hover_at", json!({"tab_id": tab()?, "x": x, "y": y})),
        },
        "mouse_move" => {
            let (x, y) = point(field("target"), "target", name)?;
            ("hover_at", json!({"tab_id": tab()?, "x": x, "y": y}))
        }
        "left_click_drag" => {
            let (x0, y0) = point(field("from"), "from", name)?;
            let (x1, y1) = point(field("target"), "target", name)?;
            (
                "drag_path",
                json!({"tab_id": tab()?, "path": [{"x": x0, "y": y0}, {"x": x1, "y": y1}], "keys": []}),
            )
        }
        "scroll" => {
            point(field("target"), "target", name)?;
            if !matches!(
                field("scroll_direction").as_str(),
                Some("up" | "down" | "left" | "right")
            ) {
                return Err("scroll: scroll_direction must be up, down, left or right".into());
            }
            let notches = match obj.get("scroll_amount") {
                None | Some(Value::Null) => 3,
                Some(v) => v
                    .as_i64()
                    .ok_or("scroll: scroll_amount must be an integer")?,
            };
            if !(1..=10).contains(&notches) {
                return Err("scroll: scroll_amount must be 1 to 10".into());
            }
            (
                "scroll",
                json!({"direction": field("scroll_direction"), "amount": notches * NOTCH_PIXELS,
                       "tab_id": tab()?}),
            )
        }
        "scroll_to" => (
            "scroll_to",
            json!({"target": reference(field("target"), "target")?, "tab_id": tab()?}),
        ),
        "hold_key" => {
            let chords = super::chords(&string("text")?).map_err(|e| format!("{name}: {e}"))?;
            let [keys] = chords.as_slice() else {
                return Err("hold_key: one key combination".into());
            };
            let secs = field("duration")
                .as_f64()
                .ok_or("hold_key: duration must be a number")?;
            let max = sandtop_protocol::browser::MAX_HOLD_MS;
            let ms = (secs * 1000.0).round();
            if !(ms >= 1.0 && ms <= f64::from(max)) {
                return Err(format!(
                    "hold_key: this browser holds keys for up to {} seconds",
                    max / 1000
                ));
            }
            (
                "hold_keys",
                json!({"tab_id": tab()?, "keys": keys, "duration_ms": ms as u32}),
            )
        }
        "form_input" => {
            let r = reference(field("target"), "target")?;
            let text = match field("value") {
                Value::Bool(b) => {
                    return Ok((
                        "set_checked",
                        json!({"tab_id": tab()?, "target": r, "checked": b}),
                    ));
                }
                Value::String(s) => s.clone(),
                Value::Number(n) => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
                    _ => n.to_string(),
                },
                _ => return Err("form_input: value must be a string, a number or a boolean".into()),
            };
            match roles.get(&r).map(String::as_str) {
                Some("combobox" | "listbox") => (
                    "select_option",
                    json!({"target": r, "values": [text], "tab_id": tab()?}),
                ),
                _ => ("type", json!({"text": text, "target": r, "tab_id": tab()?})),
            }
        }
        "read_page" => {
            let filter = match field("filter") {
                Value::Null => json!("all"),
                f => f.clone(),
            };
            let (root, depth) = (field("ref"), field("depth"));
            if root.is_null() && depth.is_null() {
                ("read_page", json!({"tab_id": tab()?, "filter": filter}))
            } else {
                let depth = if depth.is_null() {
                    json!(DEFAULT_DEPTH)
                } else {
                    depth.clone()
                };
                (
                    "read_page_scoped",
                    json!({"tab_id": tab()?, "root": root, "depth": depth, "filter": filter}),
                )
            }
        }
        "find" => ("find", json!({"query": string("query")?, "tab_id": tab()?})),
        "read_console" | "read_network" => (
            "read_diagnostics",
            json!({"tab_id": tab()?, "source": if name == "read_console" { "console" } else { "network" },
                   "limit": sandtop_protocol::browser::MAX_DIAGNOSTICS}),
        ),
        "javascript_exec" => (
            "run_script",
            json!({"tab_id": tab()?, "source": script_source(&string("text")?),
                   "timeout_ms": SCRIPT_TIMEOUT_MS}),
        ),
        "new_tab" => ("new_tab", json!({"url": null})),
        "list_tabs" => ("list_tabs", json!({})),
        "switch_tab" | "close_tab" => {
            let member = if name == "switch_tab" {
                "switch_tab"
            } else {
                "close_tab"
            };
            (member, json!({"tab_id": string("tab_id")?}))
        }
        _ => unreachable!("filtered above"),
    })
}

/// `javascript_exec`'s expression as a script whose result is the
/// expression's value as text (the toolset returns the last expression's
/// value; the loop's `run_script` returns a string): evaluated in the
/// page, awaited, a string kept as it is, anything else JSON or `String`.
pub fn script_source(expression: &str) -> String {
    format!(
        "(async () => {{ const v = await (0, eval)({}); if (typeof v === 'string') return v; \
         if (v === undefined) return 'undefined'; try {{ const j = JSON.stringify(v); \
         return j === undefined ? String(v) : j; }} catch (e) {{ return String(v); }} }})()",
        Value::String(expression.to_string())
    )
}

/// The function call item a toolset member's `tool_use` becomes: its
/// seed call, or, when there is none, a call of the seed member the
/// toolset member needs with an argument no seed member has, which the
/// loop's browser refuses before anyone is asked or anything is sent
/// ([`tool_result`] then tells the reason).
pub fn function_call(call_id: &str, name: &str, input: &Value, roles: &Roles) -> Value {
    let (member, args) = match to_seed(name, input, roles) {
        Ok(call) => call,
        Err(why) => (
            needs(name).first().copied().unwrap_or("key"),
            json!({"unsupported": why}),
        ),
    };
    json!({
        "type": "function_call", "id": call_id, "call_id": call_id, "status": "completed",
        "name": format!("browser_{member}"), "arguments": args.to_string(),
    })
}

/// One line, as `_sanitize.one_line` folds it: control, line-separator
/// and bidi characters become a space.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
            {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// An acknowledgment template filled from the input in one pass (a
/// model-supplied `{ref}` stays data).
fn acknowledgment(template: &str, input: &Value) -> String {
    let value = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => one_line(s),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        v => one_line(&v.to_string()),
    };
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let field = ["{scroll_direction}", "{text}", "{duration}", "{ref}"]
            .into_iter()
            .find(|t| after.starts_with(t));
        match field {
            Some(t) => {
                let v = match t {
                    "{ref}" => &input["target"]["ref"],
                    _ => &input[&t[1..t.len() - 1]],
                };
                out.push_str(&value(v));
                rest = &after[t.len()..];
            }
            None => {
                out.push('{');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A read report as the text the model reads: the page text, then one
/// line per element with its ref in brackets (the Python driver's
/// `render_read`).
pub fn render_read(report: &Value) -> String {
    let mut lines = Vec::new();
    if let Some(t) = report["text"].as_str().filter(|t| !t.is_empty()) {
        lines.push(t.to_string());
    }
    let quoted = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    for e in report["elements"].as_array().into_iter().flatten() {
        let mut line = format!(
            "[{}] {} {}",
            e["ref"].as_str().unwrap_or(""),
            e["role"].as_str().unwrap_or(""),
            quoted(&e["label"])
        );
        if let Some(v) = e.get("value") {
            line.push_str(&format!(" value={}", quoted(v)));
        }
        if let Some(c) = e.get("checked").and_then(Value::as_bool) {
            line.push_str(&format!(" checked={c}"));
        }
        if let Some(opts) = e["options"].as_array().filter(|o| !o.is_empty()) {
            let opts: Vec<String> = opts
                .iter()
                .map(|o| {
                    let sel = if o["selected"] == true {
                        " (selected)"
                    } else {
                        ""
                    };
                    format!("{}{sel}", quoted(&o["value"]))
                })
                .collect();
            line.push_str(&format!(" options=[{}]", opts.join(", ")));
        }
        lines.push(line);
    }
    for s in report["scopes"].as_array().into_iter().flatten() {
        lines.push(format!(
            "[{}] section {}",
            s["ref"].as_str().unwrap_or(""),
            quoted(&s["label"])
        ));
    }
    if let Some(o) = report["omitted"].as_array().filter(|o| !o.is_empty()) {
        let names: Vec<&str> = o.iter().filter_map(Value::as_str).collect();
        lines.push(format!("(omitted: {})", names.join(", ")));
    }
    if lines.is_empty() {
        "(nothing to read)".into()
    } else {
        lines.join("\n")
    }
}

/// The `browser_state` block of the seed's projected state (`{tabs: [{id,
/// title, url, active}]}`; already bounded and redacted by the loop).
pub fn state_block(state: &Value) -> Value {
    let tabs: Vec<Value> = state["tabs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            json!({"tab_id": t["id"], "title": one_line(t["title"].as_str().unwrap_or("")),
                   "url": one_line(t["url"].as_str().unwrap_or("")), "active": t["active"] == true})
        })
        .collect();
    json!({"type": "browser_state", "tabs": tabs})
}

/// The `tool_result` answering a toolset member's `tool_use` (`block`)
/// from the loop's `function_call_output` (`item`). `image` turns the
/// output's image data URL into its content block.
pub fn tool_result(
    block: &Value,
    item: &Value,
    image: impl Fn(&str) -> Result<Value, super::wire::Malformed>,
) -> Result<Value, super::wire::Malformed> {
    let id = block["id"].as_str().unwrap_or("");
    let name = block["name"].as_str().unwrap_or("");
    let input = &block["input"];
    let result = |content: Vec<Value>, is_error: bool| {
        let mut r = json!({"type": "tool_result", "tool_use_id": id, "toolset_name": "browser",
                           "content": content});
        if is_error {
            r["is_error"] = json!(true);
        }
        r
    };
    let error = |text: &str| {
        let text = if text.is_empty() {
            "The tool call failed with an empty error message."
        } else {
            text
        };
        result(vec![json!({"type": "text", "text": text})], true)
    };
    // An input the loop's browser cannot carry out: the reason, whatever
    // the loop's refusal said.
    if let Err(why) = to_seed(name, input, &Roles::new()) {
        return Ok(error(&why));
    }
    let Some(p) = payload_of(item) else {
        return Ok(error("Browser action failed."));
    };
    if p["ok"] != true {
        return Ok(error(
            p["error"].as_str().unwrap_or("Browser action failed."),
        ));
    }
    let state = state_block(&p["state"]);
    let Some((_, kind, ack, _)) = row(name) else {
        return Ok(error("Browser action failed."));
    };
    let text = |t: String| json!({"type": "text", "text": t});
    let mut content = match kind {
        Kind::None => ack
            .map(|a| vec![text(acknowledgment(a, input))])
            .unwrap_or_default(),
        Kind::Tabs => Vec::new(),
        Kind::Navigate => {
            let tabs = p["state"]["tabs"].as_array().cloned().unwrap_or_default();
            let tab = tabs.iter().find(|t| match input["tab_id"].as_str() {
                Some(id) => t["id"] == id,
                None => t["active"] == true,
            });
            let mut line = format!(
                "Navigated to {}",
                one_line(tab.and_then(|t| t["url"].as_str()).unwrap_or(""))
            );
            if let Some(title) = tab
                .and_then(|t| t["title"].as_str())
                .filter(|t| !t.is_empty())
            {
                line.push_str(&format!(" — {}", one_line(title)));
            }
            vec![text(line)]
        }
        Kind::Image => {
            let url = item["output"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["type"] == "input_image")
                .and_then(|p| p["image_url"].as_str())
                .ok_or_else(|| super::malformed("a browser image result without its image"))?;
            vec![image(url)?]
        }
        Kind::Text => {
            let r = &p["result"];
            let t = match r {
                Value::String(s) => s.clone(),
                _ if matches!(name, "read_page" | "find") => render_read(r),
                _ => r["text"].as_str().unwrap_or("").to_string(),
            };
            vec![text(if t.is_empty() { "(empty)".into() } else { t })]
        }
    };
    content.push(state);
    Ok(result(content, false))
}

/// The toolset member a seed call of a script is sent as (the reverse of
/// [`to_seed`], for the offline scripted model): `None` for a seed member
/// that stays a custom tool, or a call no member expresses.
pub fn to_member(seed: &str, args: &Value) -> Option<(&'static str, Value)> {
    let mut input = Map::new();
    if let Some(t) = args.get("tab_id").filter(|t| !t.is_null()) {
        input.insert("tab_id".into(), t.clone());
    }
    let mut with = |pairs: &[(&str, Value)]| {
        for (k, v) in pairs {
            input.insert(k.to_string(), v.clone());
        }
        Value::Object(input.clone())
    };
    let r = |k: &str| json!({"type": "ref", "ref": args[k]});
    Some(match seed {
        "navigate" => ("navigate", with(&[("url", args["url"].clone())])),
        "read_page" => ("read_page", with(&[("filter", args["filter"].clone())])),
        "read_page_scoped" => (
            "read_page",
            with(&[
                ("filter", args["filter"].clone()),
                ("ref", args["root"].clone()),
                ("depth", args["depth"].clone()),
            ]),
        ),
        "find" => ("find", with(&[("query", args["query"].clone())])),
        "get_page_text" => ("get_page_text", with(&[])),
        "screenshot" => ("screenshot", with(&[])),
        "zoom" => ("zoom", with(&[("region", args["region"].clone())])),
        "click" => ("left_click", with(&[("target", r("target"))])),
        "type" if !args["target"].is_null() => (
            "form_input",
            with(&[("target", r("target")), ("value", args["text"].clone())]),
        ),
        "select_option" => match args["values"].as_array().map(Vec::as_slice) {
            Some([v]) => (
                "form_input",
                with(&[("target", r("target")), ("value", v.clone())]),
            ),
            _ => return None,
        },
        "set_checked" => (
            "form_input",
            with(&[("target", r("target")), ("value", args["checked"].clone())]),
        ),
        "hover" => ("hover", with(&[("target", r("target"))])),
        "hover_at" => (
            "hover",
            with(&[(
                "target",
                json!({"type": "coordinate", "x": args["x"], "y": args["y"]}),
            )]),
        ),
        "scroll_to" => ("scroll_to", with(&[("target", r("target"))])),
        "new_tab" if args["url"].is_null() => ("new_tab", json!({})),
        "list_tabs" => ("list_tabs", json!({})),
        "switch_tab" => ("switch_tab", json!({"tab_id": args["tab_id"]})),
        "close_tab" => ("close_tab", json!({"tab_id": args["tab_id"]})),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
