//! Sans-IO checks of what an agent-socket server sends, as the real client
//! reads it: the shapes of `table`, and the tool declaration rules.

use super::table::{self, Field, Ty};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Every way `value` breaks the object shape `fields`, with paths under `path`.
/// Unknown fields are allowed: "Unknown reply fields are ignored."
pub fn shape_violations(value: &Value, fields: &[Field], path: &str) -> Vec<String> {
    let mut out = Vec::new();
    check_object(value, fields, path, &mut out);
    out
}

fn check_object(value: &Value, fields: &[Field], path: &str, out: &mut Vec<String>) {
    let Value::Object(o) = value else {
        out.push(format!("{path}: expected an object, got {}", kind(value)));
        return;
    };
    for field in fields {
        let p = format!("{path}.{}", field.name);
        match o.get(field.name) {
            None if field.required => out.push(format!("{p}: missing")),
            None => {}
            Some(Value::Null) if field.nullable => {}
            Some(Value::Null) => out.push(format!("{p}: null is not allowed")),
            Some(v) => check_type(v, field.ty, &p, out),
        }
    }
}

fn check_type(v: &Value, ty: Ty, p: &str, out: &mut Vec<String>) {
    let ok = match ty {
        Ty::Int => v.is_i64() || v.is_u64(),
        Ty::Float { positive } => match v.as_f64() {
            Some(x) if positive && x <= 0.0 => {
                out.push(format!("{p}: {v} is not positive"));
                return;
            }
            Some(_) => true,
            None => false,
        },
        Ty::Str => v.is_string(),
        Ty::Json => true,
        Ty::Object => v.is_object(),
        Ty::Enum(allowed) => match v.as_str() {
            Some(s) if allowed.contains(&s) => true,
            Some(s) => {
                out.push(format!("{p}: {s:?} is not one of {}", allowed.join(", ")));
                return;
            }
            None => false,
        },
        Ty::Shape(fields) => {
            check_object(v, fields, p, out);
            return;
        }
        Ty::ListOf(fields) => {
            let Value::Array(items) = v else {
                out.push(format!("{p}: expected a list, got {}", kind(v)));
                return;
            };
            for (i, item) in items.iter().enumerate() {
                check_object(item, fields, &format!("{p}[{i}]"), out);
            }
            return;
        }
    };
    if !ok {
        out.push(format!("{p}: expected {}, got {}", ty_name(ty), kind(v)));
    }
}

fn ty_name(ty: Ty) -> &'static str {
    match ty {
        Ty::Int => "an integer",
        Ty::Float { .. } => "a number",
        Ty::Str => "a string",
        Ty::Json => "any JSON",
        Ty::Object | Ty::Shape(_) => "an object",
        Ty::Enum(_) => "a string",
        Ty::ListOf(_) => "a list",
    }
}

fn kind(v: &Value) -> String {
    let name = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    format!("{name} ({})", crate::matcher::brief(v))
}

/// What an `agent/initialize` result says of the sandbox half.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredSandbox {
    /// `workspace` and `python` both null or absent: no sandbox.
    None,
    /// Both strings.
    Pair { workspace: String, python: String },
    /// One set and the other null: "`workspace` and `python` come together" is broken.
    Half,
    /// Both set, not both strings (the shape checks report it).
    Malformed,
}

/// Reads the sandbox half of an `agent/initialize` result, once for every
/// user: the handshake, the `sandbox-pair` check and the halves description.
pub fn declared_sandbox(result: &Value) -> DeclaredSandbox {
    let set = |k: &str| result.get(k).filter(|v| !v.is_null());
    match (set("workspace"), set("python")) {
        (None, None) => DeclaredSandbox::None,
        (Some(Value::String(w)), Some(Value::String(p))) => DeclaredSandbox::Pair {
            workspace: w.clone(),
            python: p.clone(),
        },
        (Some(_), Some(_)) => DeclaredSandbox::Malformed,
        _ => DeclaredSandbox::Half,
    }
}

/// `PurePosixPath(path).is_absolute()`.
pub fn is_absolute(path: &str) -> bool {
    path.starts_with('/')
}

/// A tool the server declared, read with the client's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredTool {
    /// `namespace.name`, the name `tools/call` carries.
    pub full_name: String,
    pub namespace: String,
    pub name: String,
    pub input_schema: Value,
}

/// The tools of an `agent/initialize` result, with defaults applied; tools
/// too malformed to name are left out (the shape checks report them).
pub fn declared_tools(result: &Value) -> Vec<DeclaredTool> {
    let Some(Value::Array(tools)) = result.get("tools") else {
        return Vec::new();
    };
    tools
        .iter()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?.to_owned();
            // `namespace = tool.namespace or DEFAULT_NAMESPACE`: an empty one is the default.
            let namespace = match t.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() => ns.to_owned(),
                _ => table::DEFAULT_NAMESPACE.to_owned(),
            };
            Some(DeclaredTool {
                full_name: format!("{namespace}.{name}"),
                namespace,
                name,
                input_schema: t
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new())),
            })
        })
        .collect()
}

/// The declaration rules: "A namespace cannot be Vibe's own ... and a
/// `namespace.name` is declared once; otherwise the run cannot start".
pub fn declaration_violations(tools: &[DeclaredTool]) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for t in tools {
        if table::RESERVED_NAMESPACES.contains(&t.namespace.as_str()) {
            out.push(format!(
                "tool {}: the {:?} namespace is Vibe's own",
                t.full_name, t.namespace
            ));
        }
        if !seen.insert(t.full_name.clone()) {
            out.push(format!("tool {} is declared more than once", t.full_name));
        }
    }
    out
}

/// An input for a tool built from its `inputSchema`: every required property
/// with a plain value of its type. The server may still refuse it: a tool
/// error is a valid answer to a call.
pub fn example_input(schema: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && let Some(first) = values.first()
    {
        return first.clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ => "object",
    };
    match ty {
        "string" => Value::String("conform".into()),
        "integer" | "number" => Value::from(0),
        "boolean" => Value::Bool(false),
        "array" => Value::Array(Vec::new()),
        "null" => Value::Null,
        _ => {
            let mut o = Map::new();
            let props = schema.get("properties");
            if let Some(Value::Array(required)) = schema.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    let sub = props
                        .and_then(|p| p.get(name))
                        .cloned()
                        .unwrap_or(Value::Null);
                    o.insert(name.to_owned(), example_input(&sub, depth + 1));
                }
            }
            Value::Object(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn init(v: Value) -> Vec<String> {
        shape_violations(&v, table::INITIALIZE_RESULT, "result")
    }

    #[test]
    fn a_minimal_handshake_is_valid() {
        assert!(init(json!({"protocolVersion": 2})).is_empty());
        assert!(
            init(json!({"protocolVersion": 2, "tools": [{"name": "t"}], "extra": 1})).is_empty()
        );
    }

    #[test]
    fn handshake_shape_rules_follow_the_models() {
        assert_eq!(init(json!({})), vec!["result.protocolVersion: missing"]);
        assert_eq!(init(json!({"protocolVersion": "2"})).len(), 1);
        assert_eq!(
            init(json!({"protocolVersion": 2, "tools": null})).len(),
            1,
            "tools is a list, not nullable"
        );
        assert_eq!(
            init(json!({"protocolVersion": 2, "toolTimeoutSeconds": 0})).len(),
            1
        );
        assert!(
            init(json!({"protocolVersion": 2, "toolTimeoutSeconds": 1})).is_empty(),
            "a float field takes an integer"
        );
        assert_eq!(
            init(json!({"protocolVersion": 2, "tools": [{"name": "t", "modelAccess": "all"}]})),
            vec!["result.tools[0].modelAccess: \"all\" is not one of programmatic, direct, both"]
        );
        assert_eq!(
            init(json!({"protocolVersion": 2, "tools": [{"name": "t", "inputSchema": []}]})).len(),
            1
        );
    }

    #[test]
    fn read_file_result_needs_the_field_even_when_null() {
        assert!(
            shape_violations(
                &json!({"contentBase64": null}),
                table::READ_FILE_RESULT,
                "r"
            )
            .is_empty()
        );
        assert_eq!(
            shape_violations(&json!({}), table::READ_FILE_RESULT, "r").len(),
            1
        );
    }

    #[test]
    fn the_sandbox_half_needs_both_workspace_and_python() {
        assert_eq!(declared_sandbox(&json!({})), DeclaredSandbox::None);
        assert_eq!(
            declared_sandbox(&json!({"workspace": null, "python": null})),
            DeclaredSandbox::None
        );
        assert_eq!(
            declared_sandbox(&json!({"workspace": "/w"})),
            DeclaredSandbox::Half
        );
        assert_eq!(
            declared_sandbox(&json!({"workspace": "/w", "python": 3})),
            DeclaredSandbox::Malformed
        );
        assert!(matches!(
            declared_sandbox(&json!({"workspace": "/w", "python": "p"})),
            DeclaredSandbox::Pair { .. }
        ));
    }

    #[test]
    fn reserved_and_duplicate_tools_are_refused() {
        let tools = declared_tools(&json!({"tools": [
            {"name": "a"}, {"namespace": "", "name": "a"}, {"namespace": "ui", "name": "b"}
        ]}));
        assert_eq!(
            tools[1].full_name, "client.a",
            "an empty namespace is the default"
        );
        assert_eq!(declaration_violations(&tools).len(), 2);
    }

    #[test]
    fn example_input_fills_required_properties() {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}, "opt": {"type": "string"}}, "required": ["text", "n"]});
        assert_eq!(
            example_input(&schema, 0),
            json!({"text": "conform", "n": 0})
        );
        assert_eq!(example_input(&json!({}), 0), json!({}));
    }
}
