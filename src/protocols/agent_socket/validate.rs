//! Sans-IO checks of what an agent-socket server sends, as the real client
//! reads it: the shapes of `table`, and the tool declaration rules.

use super::table::{self, Field, Ty};
use crate::jsonrpc::Reply;
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

/// How Vibe's pydantic models (lax mode: `validate_wire` sets no `strict`)
/// read `v` as a `ty`: the value Vibe ends up with, or `None` where it
/// refuses it. `"3"`, `3.0` and `true` are the int 3, 3 and 1; a float
/// field reads a number or a numeric string; a string field reads only a
/// string.
pub fn vibe_value(v: &Value, ty: Ty) -> Option<Value> {
    match ty {
        Ty::Int => vibe_int(v).map(Value::from),
        Ty::Float { positive } => {
            let x = match v {
                Value::Number(n) => n.as_f64()?,
                Value::String(s) => s.trim().parse::<f64>().ok()?,
                Value::Bool(b) => f64::from(u8::from(*b)),
                _ => return None,
            };
            // `Field(gt=0, allow_inf_nan=False)` where positive.
            (x.is_finite() && (!positive || x > 0.0)).then(|| Value::from(x))
        }
        Ty::Str => v.is_string().then(|| v.clone()),
        Ty::Json => Some(v.clone()),
        Ty::Object => v.is_object().then(|| v.clone()),
        Ty::Enum(allowed) => v
            .as_str()
            .is_some_and(|s| allowed.contains(&s))
            .then(|| v.clone()),
        Ty::Shape(fields) => vibe_read(v, fields, "").ok(),
        Ty::ListOf(fields) => match v {
            Value::Array(items) => items
                .iter()
                .map(|i| vibe_read(i, fields, "").ok())
                .collect::<Option<Vec<Value>>>()
                .map(Value::Array),
            _ => None,
        },
    }
}

/// pydantic's lax int: an integer, a float with no fraction, a string of
/// either (spaces trimmed), a boolean.
fn vibe_int(v: &Value) -> Option<i64> {
    let from_float =
        |x: f64| (x.is_finite() && x.fract() == 0.0 && x.abs() < 9.2e18).then_some(x as i64);
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().and_then(from_float)),
        Value::String(s) => {
            let t = s.trim();
            t.parse::<i64>()
                .ok()
                .or_else(|| t.parse::<f64>().ok().and_then(from_float))
        }
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// The object `value` as Vibe reads it with the model `fields`, or every
/// way Vibe refuses it (the MUST layer of a shape). Unknown fields are
/// kept and ignored: "Unknown reply fields are ignored."
pub fn vibe_read(value: &Value, fields: &[Field], path: &str) -> Result<Value, Vec<String>> {
    let Value::Object(o) = value else {
        return Err(vec![format!(
            "{path}: expected an object, got {}",
            kind(value)
        )]);
    };
    let mut out = o.clone();
    let mut problems = Vec::new();
    for field in fields {
        let p = format!("{path}.{}", field.name);
        match o.get(field.name) {
            None if field.required => problems.push(format!("{p}: missing")),
            None => {}
            Some(Value::Null) if field.nullable => {}
            Some(Value::Null) => problems.push(format!("{p}: null is not allowed")),
            Some(v) => match (field.ty, vibe_value(v, field.ty)) {
                (_, Some(read)) => {
                    out.insert(field.name.to_owned(), read);
                }
                // Nested shapes say where inside them Vibe refuses.
                (Ty::Shape(inner), None) => match vibe_read(v, inner, &p) {
                    Err(e) => problems.extend(e),
                    Ok(_) => problems.push(format!("{p}: refused")),
                },
                (Ty::ListOf(inner), None) => match v {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            if let Err(e) = vibe_read(item, inner, &format!("{p}[{i}]")) {
                                problems.extend(e);
                            }
                        }
                    }
                    other => problems.push(format!("{p}: expected a list, got {}", kind(other))),
                },
                (ty, None) => {
                    let mut e = Vec::new();
                    check_type(v, ty, &p, &mut e);
                    if e.is_empty() {
                        e.push(format!("{p}: Vibe cannot read {}", kind(v)));
                    }
                    problems.extend(e);
                }
            },
        }
    }
    if problems.is_empty() {
        Ok(Value::Object(out))
    } else {
        Err(problems)
    }
}

/// How one object of a reply breaks its documented shape where Vibe copes
/// (the SHOULD layer of a shape): where, every way, the shape as
/// documented and what came.
#[derive(Debug, Clone, PartialEq)]
pub struct Undocumented {
    pub path: String,
    pub problems: Vec<String>,
    pub documented: &'static str,
    pub came: Value,
}

impl Undocumented {
    /// The finding's text: the problems, the documented shape beside what came.
    pub fn describe(&self) -> String {
        format!(
            "{} breaks its documented shape: {}\n  documented: {}\n  came:       {}",
            self.path,
            self.problems.join("; "),
            self.documented,
            crate::matcher::brief(&self.came)
        )
    }
}

/// Key spellings compared loosely: `exit_code`, `ExitCode` and `exitcode`
/// are all `exitCode`.
fn loose(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Every object of `value` that breaks the shape the docstring documents
/// where Vibe still reads it (what it refuses is [`vibe_read`]'s): a
/// documented key left out where the docstring states no default, a key
/// spelled another way, a value of another JSON type that Vibe converts, an
/// empty value Vibe replaces by a default.
pub fn undocumented(value: &Value, fields: &[Field], path: &str) -> Vec<Undocumented> {
    let mut out = Vec::new();
    undocumented_into(value, fields, path, &mut out);
    out
}

fn undocumented_into(value: &Value, fields: &[Field], path: &str, out: &mut Vec<Undocumented>) {
    let Value::Object(o) = value else { return };
    let mut problems = Vec::new();
    for key in o.keys() {
        if fields.iter().any(|f| f.name == key) {
            continue;
        }
        if let Some(f) = fields
            .iter()
            .find(|f| loose(f.name) == loose(key) && !o.contains_key(f.name))
        {
            problems.push(format!(
                "`{key}` is `{}` spelled another way (camelCase fields), which Vibe ignores as an unknown field",
                f.name
            ));
        }
    }
    let mut missing = Vec::new();
    let mut nested = Vec::new();
    for field in fields {
        let Some(v) = o.get(field.name) else {
            if !field.may_omit && !field.required {
                missing.push(format!("`{}`", field.name));
            }
            continue;
        };
        if v.is_null() {
            continue;
        }
        let mut strict = Vec::new();
        check_type(v, field.ty, field.name, &mut strict);
        if let Some(read) = vibe_value(v, field.ty)
            && !strict.is_empty()
            && !matches!(field.ty, Ty::Shape(_) | Ty::ListOf(_))
        {
            problems.push(format!(
                "`{}` is {}, not {}: Vibe reads it as {}",
                field.name,
                kind(v),
                ty_name(field.ty),
                crate::matcher::brief(&read)
            ));
        }
        if let Some(becomes) = field.empty_becomes {
            let empty = match v {
                Value::String(s) => s.trim().is_empty(),
                Value::Object(m) => m.is_empty(),
                _ => false,
            };
            if empty {
                problems.push(format!(
                    "`{}` is {}, which Vibe silently replaces by {becomes}",
                    field.name,
                    crate::matcher::brief(v)
                ));
            }
        }
        match (field.ty, v) {
            (Ty::Shape(inner), _) => nested.push((v, inner, format!("{path}.{}", field.name))),
            (Ty::ListOf(inner), Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    nested.push((item, inner, format!("{path}.{}[{i}]", field.name)));
                }
            }
            _ => {}
        }
    }
    if !missing.is_empty() {
        problems.push(format!(
            "{} {} missing (Vibe reads a default the docstring does not give)",
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" }
        ));
    }
    if !problems.is_empty() {
        out.push(Undocumented {
            path: path.to_owned(),
            problems,
            documented: table::documented_as(fields),
            came: value.clone(),
        });
    }
    for (v, inner, p) in nested {
        undocumented_into(v, inner, &p, out);
    }
}

/// Which requirement a JSON-RPC envelope finding breaks: `None` for what
/// Vibe refuses or misreads (graded at the case's level), or the SHOULD
/// rule of JSON-RPC 2.0 that Vibe copes with.
pub type EnvelopeFinding = (Option<&'static str>, String);

/// The JSON-RPC 2.0 response rules, graded by what Vibe's `_call` does
/// with the reply: `request_id` is the id the reply must carry (`None`:
/// null, for bytes whose id could not be detected).
pub fn envelope(reply: &Reply, request_id: Option<&Value>) -> Vec<EnvelopeFinding> {
    let mut out: Vec<EnvelopeFinding> = Vec::new();
    let o = &reply.object;
    // `jsonrpc: Literal["2.0"]`.
    match o.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        Some(other) => out.push((
            Some(rules::VERSION),
            format!("`jsonrpc` is {other}, not \"2.0\""),
        )),
        None => out.push((Some(rules::VERSION), "`jsonrpc` is missing".into())),
    }
    // "Either the result member or error member MUST be included, but both
    // members MUST NOT be included." Vibe takes a null member for none.
    let result = o.get("result");
    let error = o.get("error");
    let set = |m: Option<&Value>| m.is_some_and(|v| !v.is_null());
    match (result, error) {
        _ if set(result) && set(error) => out.push((
            Some(rules::RESULT_OR_ERROR),
            "the reply carries both `result` and `error`: Vibe reads the error and loses the result"
                .into(),
        )),
        _ if !set(result) && !set(error) => out.push((
            Some(rules::RESULT_OR_ERROR),
            "the reply carries neither a `result` nor an `error` (a null member is none)".into(),
        )),
        (Some(_), Some(_)) => out.push((
            Some(rules::ONE_MEMBER),
            format!(
                "the reply carries both `result` and `error`, one of them null (`{}`)",
                if set(result) { "error" } else { "result" }
            ),
        )),
        _ => {}
    }
    let is_error = set(error);
    // "id: ... It MUST be the same as the value of the id member in the
    // Request Object." Vibe compares a result's id (`response.id !=
    // request_id`); it acts on an error whatever its id.
    // "If there was an error in detecting the id in the Request Object
    // (e.g. Parse error/Invalid Request), it MUST be Null."
    let id_rule = if is_error {
        Some(rules::ERROR_ID)
    } else {
        Some(rules::ID)
    };
    let expected = request_id.cloned().unwrap_or(Value::Null);
    match o.get("id") {
        None => out.push((
            id_rule,
            format!("`id` is missing, the request's was {expected}"),
        )),
        Some(id) if !same_id(id, &expected) => out.push((
            id_rule,
            format!("`id` is {id}, the request's was {expected}"),
        )),
        _ => {}
    }
    if let Some(e) = error.filter(|e| !e.is_null()) {
        match e {
            Value::Object(body) => {
                match body.get("code") {
                    Some(c) if c.is_i64() || c.is_u64() => {}
                    Some(c) if vibe_int(c).is_some() => out.push((
                        Some(rules::ERROR_CODE),
                        format!(
                            "`error.code` is {c}, not an integer (Vibe reads it as {})",
                            vibe_int(c).unwrap_or_default()
                        ),
                    )),
                    Some(c) => out.push((
                        Some(rules::ERROR_OBJECT),
                        format!("`error.code` is {c}, not an integer"),
                    )),
                    None => out.push((Some(rules::ERROR_OBJECT), "`error.code` is missing".into())),
                }
                match body.get("message") {
                    Some(Value::String(_)) => {}
                    Some(m) => out.push((
                        Some(rules::ERROR_OBJECT),
                        format!("`error.message` is {m}, not a string"),
                    )),
                    None => out.push((
                        Some(rules::ERROR_OBJECT),
                        "`error.message` is missing".into(),
                    )),
                }
            }
            other => out.push((
                Some(rules::ERROR_OBJECT),
                format!("`error` is {other}, not an object"),
            )),
        }
    }
    out
}

/// Ids compared as JSON-RPC does: numbers by exact value, everything else
/// exactly (`crate::jsonrpc::same_id`).
fn same_id(a: &Value, b: &Value) -> bool {
    crate::jsonrpc::same_id(a, b)
}

/// The requirements the shape and envelope layers name.
pub mod rules {
    pub const DOCUMENTED: &str = "as.shape.documented";
    pub const ONE_MEMBER: &str = "as.jsonrpc.one-member";
    pub const ERROR_ID: &str = "as.jsonrpc.error-id";
    pub const ERROR_CODE: &str = "as.jsonrpc.error-code";
    pub const VERSION: &str = "as.jsonrpc.version";
    pub const ID: &str = "as.jsonrpc.id";
    pub const RESULT_OR_ERROR: &str = "as.jsonrpc.result-or-error";
    pub const ERROR_OBJECT: &str = "as.jsonrpc.error-object";
    pub const RESERVED_NAMESPACE: &str = "as.tools.reserved-namespace";
    pub const UNIQUE_NAME: &str = "as.tools.unique-name";
    /// "Lines are JSON-RPC 2.0 messages ... compact JSON followed by `\n`":
    /// a reply that is not one whole line of JSON breaks it, whatever the
    /// case asked.
    pub const FRAMING_LINE: &str = "as.framing.line";
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
pub fn declaration_violations(tools: &[DeclaredTool]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for t in tools {
        if table::RESERVED_NAMESPACES.contains(&t.namespace.as_str()) {
            out.push((
                rules::RESERVED_NAMESPACE,
                format!(
                    "tool {}: the {:?} namespace is Vibe's own",
                    t.full_name, t.namespace
                ),
            ));
        }
        if !seen.insert(t.full_name.clone()) {
            out.push((
                rules::UNIQUE_NAME,
                format!("tool {} is declared more than once", t.full_name),
            ));
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
        // Each names the rule it breaks: a duplicate is not a reserved
        // namespace, nor the other way round (issue 26, item 12).
        let rules: Vec<&str> = declaration_violations(&tools)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(rules, [rules::UNIQUE_NAME, rules::RESERVED_NAMESPACE]);
    }

    #[test]
    fn vibe_reads_what_its_lax_models_read_and_refuses_the_rest() {
        let exec = |v: Value| vibe_read(&v, table::EXECUTE_RESULT, "result");
        let read = exec(json!({"exitCode": "3", "stdout": "", "stderr": ""})).unwrap();
        assert_eq!(read["exitCode"], json!(3), "pydantic reads \"3\" as 3");
        assert_eq!(
            exec(json!({"exitCode": 3.0, "stdout": "", "stderr": ""})).unwrap()["exitCode"],
            json!(3)
        );
        assert_eq!(
            exec(json!({"exitCode": true, "stdout": "", "stderr": ""})).unwrap()["exitCode"],
            json!(1)
        );
        assert!(exec(json!({"exitCode": 3.5, "stdout": "", "stderr": ""})).is_err());
        assert!(exec(json!({"exitCode": "x", "stdout": "", "stderr": ""})).is_err());
        assert!(exec(json!({"exitCode": 0, "stdout": 5, "stderr": ""})).is_err());
        let init = |v: Value| vibe_read(&v, table::INITIALIZE_RESULT, "result");
        assert_eq!(
            init(json!({"protocolVersion": 2, "toolTimeoutSeconds": "30"})).unwrap()["toolTimeoutSeconds"],
            json!(30.0)
        );
        assert!(init(json!({"protocolVersion": 2, "toolTimeoutSeconds": 0})).is_err());
        assert_eq!(
            init(json!({"protocolVersion": 2, "tools": [{"name": 5}]})).unwrap_err(),
            vec!["result.tools[0].name: expected a string, got an integer (5)"]
        );
    }

    #[test]
    fn the_documented_shape_is_a_second_layer_with_the_shape_beside_what_came() {
        let init = |v: Value| undocumented(&v, table::INITIALIZE_RESULT, "result");
        assert!(
            init(json!({"protocolVersion": 2, "tools": [], "instructions": null})).is_empty(),
            "tools, toolTimeoutSeconds, workspace and python have documented defaults"
        );
        let u = init(json!({"protocolVersion": 2}));
        assert_eq!(u.len(), 1);
        assert!(
            u[0].problems[0].starts_with("`instructions` is missing"),
            "{u:?}"
        );
        let u = init(
            json!({"protocolVersion": "2", "instructions": " ", "tool_timeout_seconds": 5,
                            "tools": [{"name": "t", "description": "", "inputSchema": {}, "outputSchema": null}]}),
        );
        assert_eq!(u.len(), 2, "{u:?}");
        assert_eq!(u[0].path, "result");
        assert_eq!(u[0].problems.len(), 3, "{u:?}");
        assert!(
            u[0].describe()
                .contains("documented: {\"protocolVersion\": 2")
        );
        assert_eq!(u[1].path, "result.tools[0]");
        assert!(u[1].problems[0].contains("{\"type\": \"object\"}"), "{u:?}");
        let call = |v: Value| undocumented(&v, table::TOOL_CALL_RESULT, "result");
        assert!(call(json!({"output": 1, "annotations": {}, "error": null})).is_empty());
        assert_eq!(
            call(json!({"sum": 1}))[0].problems.len(),
            1,
            "one line for three keys"
        );
    }

    fn reply(v: Value) -> Reply {
        crate::jsonrpc::classify_reply(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn every_envelope_breach_names_its_rule() {
        let rules = |v: Value, id: Value| -> Vec<Option<&'static str>> {
            envelope(&reply(v), Some(&id))
                .into_iter()
                .map(|(r, _)| r)
                .collect()
        };
        assert!(rules(json!({"jsonrpc": "2.0", "id": 5, "result": {}}), json!(5)).is_empty());
        assert_eq!(
            rules(json!({"jsonrpc": "2.0", "id": 6, "result": {}}), json!(5)),
            [Some(rules::ID)],
            "Vibe refuses a result with another id"
        );
        assert_eq!(
            rules(
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "m"}}),
                json!(5)
            ),
            [Some(rules::ERROR_ID)],
            "Vibe acts on an error whatever its id"
        );
        assert_eq!(
            rules(
                json!({"jsonrpc": "2.0", "id": 5, "result": {}, "error": null}),
                json!(5)
            ),
            [Some(rules::ONE_MEMBER)]
        );
        assert_eq!(
            rules(
                json!({"jsonrpc": "2.0", "id": 5, "result": {}, "error": {"code": 1, "message": "m"}}),
                json!(5)
            ),
            [Some(rules::RESULT_OR_ERROR)]
        );
        assert_eq!(
            rules(
                json!({"jsonrpc": "2.0", "id": 5, "error": {"code": "-32001", "message": "m"}}),
                json!(5)
            ),
            [Some(rules::ERROR_CODE)]
        );
        assert_eq!(
            rules(
                json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32001}}),
                json!(5)
            ),
            [Some(rules::ERROR_OBJECT)]
        );
        assert_eq!(
            envelope(
                &reply(
                    json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32700, "message": "m"}})
                ),
                None
            )
            .into_iter()
            .map(|(r, _)| r)
            .collect::<Vec<_>>(),
            [Some(rules::ERROR_ID)],
            "a line whose id could not be detected is answered with a null id"
        );
        assert_eq!(
            rules(json!({"id": 5, "result": {}}), json!(5)),
            [Some(rules::VERSION)]
        );
        assert_eq!(
            rules(json!({"jsonrpc": "2.0", "id": 5}), json!(5)),
            [Some(rules::RESULT_OR_ERROR)]
        );
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
