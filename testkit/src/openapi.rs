//! JSON-schema validators built from OpenAPI 3.1 documents.
//!
//! OpenAPI 3.1 schemas are JSON Schema 2020-12, so a component is validated
//! by a document whose root is `{"$ref": "#/components/schemas/NAME"}` next
//! to the document's own `components`; `$ref`s inside resolve as they do in
//! the spec.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The workspace root (where `Cargo.lock` lives).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn load_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let text = widen_huge_integers(&text);
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

/// OpenAI's spec writes i64 bounds rounded through a double
/// (`minimum: -9223372036854776000`), which no i64 or u64 holds; serde_json
/// without arbitrary precision refuses them. Such scalars become floats,
/// which is what they were before rounding anyway.
fn widen_huge_integers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        let value = line.rsplit_once(": ").map(|(_, v)| v.trim());
        let huge = value.is_some_and(|v| {
            let digits = v.strip_prefix('-').unwrap_or(v);
            digits.len() >= 19 && digits.bytes().all(|b| b.is_ascii_digit())
        });
        out.push_str(line);
        if huge {
            out.push_str(".0");
        }
        out.push('\n');
    }
    out
}

/// OpenAI's OpenAPI description (`reference/openai-openapi.yaml`).
pub fn openai_spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| load_yaml(&workspace_root().join("reference/openai-openapi.yaml")))
}

/// The daemon's own OpenAPI description (`daemon/openapi.yaml`).
pub fn daemon_spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| load_yaml(&workspace_root().join("daemon/openapi.yaml")))
}

/// A validator for `#/components/schemas/{name}` of `spec`.
pub fn validator(spec: &Value, name: &str) -> jsonschema::Validator {
    assert!(
        spec.pointer(&format!("/components/schemas/{name}"))
            .is_some(),
        "the spec has no schema named {name}"
    );
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": spec["components"].clone(),
    });
    jsonschema::options()
        .build(&root)
        .unwrap_or_else(|e| panic!("cannot compile schema {name}: {e}"))
}

/// Validates `instance` and returns every error as text (empty when valid).
pub fn errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}
