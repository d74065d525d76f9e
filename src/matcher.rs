//! Templates and matchers: how a case's data says what to send and what to
//! expect, without code.
//!
//! Templates: `${name}` in a string is replaced by a variable's value; a
//! string that is exactly one `${name}` becomes the variable's JSON value
//! (an object, a number). `${name|sh}` quotes the value for a POSIX shell.
//!
//! Patterns: a literal matches an equal value (numbers by value); an object
//! matches any object that has matching values under the same keys (extra keys
//! are allowed: the protocols say unknown fields are ignored); an object with a
//! single `$`-key is an operator, listed in [`match_value`].

use base64::Engine;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Variables a case can use, and values it captured.
#[derive(Debug, Clone, Default)]
/// Values are shared, so a case's copy of the run's variables costs no copy
/// of a large one (`bulk64k`).
pub struct Vars(BTreeMap<String, std::sync::Arc<Value>>);

impl Vars {
    pub fn set(&mut self, name: impl Into<String>, value: Value) {
        self.0.insert(name.into(), std::sync::Arc::new(value));
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        // Dotted names reach into objects: `tool.name`.
        if let Some(v) = self.0.get(name) {
            return Some(&**v);
        }
        let mut parts = name.split('.');
        let mut cur: &Value = self.0.get(parts.next()?)?;
        for part in parts {
            cur = cur.get(part)?;
        }
        Some(cur)
    }
}

/// A template that names a variable the case does not have: the case file's fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown variable `{0}` in a template")]
pub struct TemplateError(pub String);

/// Expands templates everywhere in `value`.
pub fn expand(value: &Value, vars: &Vars) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => expand_str(s, vars)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| expand(v, vars))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => {
            let mut out = Map::with_capacity(o.len());
            for (k, v) in o {
                out.insert(k.clone(), expand(v, vars)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

fn lookup(expr: &str, vars: &Vars) -> Result<(Value, Option<String>), TemplateError> {
    let (name, filter) = match expr.split_once('|') {
        Some((n, f)) => (n.trim(), Some(f.trim().to_owned())),
        None => (expr.trim(), None),
    };
    let value = vars
        .get(name)
        .cloned()
        .ok_or_else(|| TemplateError(name.to_owned()))?;
    Ok((value, filter))
}

fn render(value: &Value, filter: Option<&str>) -> Result<String, TemplateError> {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match filter {
        None => Ok(text),
        Some("sh") => Ok(shell_quote(&text)),
        Some(other) => Err(TemplateError(format!("|{other} (filters: sh)"))),
    }
}

fn expand_str(s: &str, vars: &Vars) -> Result<Value, TemplateError> {
    if !s.contains("${") {
        return Ok(Value::String(s.to_owned()));
    }
    // A string that is one whole template takes the variable's JSON value.
    if let Some(inner) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
        && !inner.contains("${")
        && !inner.contains('}')
    {
        let (value, filter) = lookup(inner, vars)?;
        return Ok(match filter {
            None => value,
            Some(f) => Value::String(render(&value, Some(&f))?),
        });
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(TemplateError(format!("unclosed template in {s:?}")));
        };
        let (value, filter) = lookup(&after[..end], vars)?;
        out.push_str(&render(&value, filter.as_deref())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// Quotes `s` as one word for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:=@%,".contains(&b))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Decodes base64 the way Python's `base64.b64decode(s, validate=True)` does:
/// the standard alphabet, padding required, nothing else allowed.
pub fn strict_base64(s: &str) -> Result<Vec<u8>, String> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
            .with_decode_allow_trailing_bits(true),
    );
    ENGINE.decode(s).map_err(|e| e.to_string())
}

/// Where a value differs from its pattern: the path, why, and (where the
/// pattern names one) what was expected against what came. It reads as
/// `path: why`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub path: String,
    pub why: String,
    pub expected: Option<String>,
    pub actual: Option<String>,
}

/// Whether `path` (`result.content[0].type`) is field `at` or a part of
/// it; the empty `at` is no field.
pub fn path_within(path: &str, at: &str) -> bool {
    !at.is_empty()
        && path
            .strip_prefix(at)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.why)
    }
}

impl Mismatch {
    fn new(path: &str, why: String, expected: Option<String>, actual: Option<String>) -> Mismatch {
        Mismatch {
            path: path.to_owned(),
            why,
            expected,
            actual,
        }
    }
}

/// Matches `actual` (None: the key is absent) against `pattern` at `path`,
/// recording captures in `vars` and every mismatch in `errors`.
///
/// Operators (an object with one `$` key):
/// - `{"$type": "string"}` or a list of type names (`integer` is a whole number);
/// - `{"$any": null}` any value that is present; `{"$absent": null}` absent;
/// - `{"$capture": "name"}` any present value, kept as variable `name`;
/// - `{"$eq": v}` deep equality (no subset rule for objects);
/// - `{"$oneOf": [p, ...]}` at least one pattern matches;
/// - `{"$not": p}`; `{"$contains": "s"}` a string containing `s`;
/// - `{"$num": {"gt": a, "gte": a, "lt": b, "lte": b}}` a number in range;
/// - `{"$len": {"min": a, "max": b}}` a string's byte length or a list's length;
/// - `{"$base64": "..."}` strict base64 that decodes to the same bytes as the
///   (strict base64) argument; `{"$base64Text": "..."}` decodes to that UTF-8
///   text; `{"$base64MaxLen": n}` decodes to at most `n` bytes.
pub fn match_value(
    pattern: &Value,
    actual: Option<&Value>,
    path: &str,
    vars: &mut Vars,
    errors: &mut Vec<Mismatch>,
) {
    if let Value::Object(p) = pattern
        && p.len() == 1
        && let Some((op, arg)) = p.iter().next()
        && op.starts_with('$')
    {
        return match_op(op, arg, actual, path, vars, errors);
    }
    let Some(actual) = actual else {
        let want = brief(pattern);
        errors.push(Mismatch::new(
            path,
            format!("missing, expected {want}"),
            Some(want),
            Some("missing".into()),
        ));
        return;
    };
    match (pattern, actual) {
        (Value::Object(p), Value::Object(a)) => {
            for (k, sub) in p {
                match_value(sub, a.get(k), &join(path, k), vars, errors);
            }
        }
        (Value::Array(p), Value::Array(a)) => {
            if p.len() != a.len() {
                errors.push(Mismatch::new(
                    path,
                    format!("expected a list of {} items, got {}", p.len(), a.len()),
                    Some(format!("{} items", p.len())),
                    Some(format!("{} items", a.len())),
                ));
                return;
            }
            for (i, (sub, item)) in p.iter().zip(a).enumerate() {
                match_value(sub, Some(item), &format!("{path}[{i}]"), vars, errors);
            }
        }
        _ if scalar_eq(pattern, actual) => {}
        _ => {
            let (want, got) = (brief(pattern), brief(actual));
            errors.push(Mismatch::new(
                path,
                format!("expected {want}, got {got}"),
                Some(want),
                Some(got),
            ))
        }
    }
}

fn match_op(
    op: &str,
    arg: &Value,
    actual: Option<&Value>,
    path: &str,
    vars: &mut Vars,
    errors: &mut Vec<Mismatch>,
) {
    // What came, for every mismatch an operator reports: the value, or its absence.
    let got = actual.map(brief).unwrap_or_else(|| "missing".into());
    let want = format!("{op} {}", brief(arg));
    let mut fail = |why: String| {
        errors.push(Mismatch::new(
            path,
            why,
            Some(want.clone()),
            Some(got.clone()),
        ))
    };
    match op {
        "$absent" => {
            if let Some(a) = actual {
                fail(format!("expected no such field, got {}", brief(a)));
            }
            return;
        }
        "$oneOf" => {
            let Value::Array(options) = arg else {
                return fail("$oneOf takes a list".into());
            };
            let mut all = Vec::new();
            for option in options {
                let mut trial = Vec::new();
                let mut trial_vars = vars.clone();
                match_value(option, actual, path, &mut trial_vars, &mut trial);
                if trial.is_empty() {
                    *vars = trial_vars;
                    return;
                }
                all.extend(trial);
            }
            let all: Vec<String> = all.iter().map(Mismatch::to_string).collect();
            return fail(format!("matches none of the options ({})", all.join("; ")));
        }
        "$not" => {
            let mut trial = Vec::new();
            match_value(arg, actual, path, &mut vars.clone(), &mut trial);
            if trial.is_empty() {
                fail(format!("expected anything but {}", brief(arg)));
            }
            return;
        }
        _ => {}
    }
    let Some(a) = actual else {
        return fail(format!("missing, expected {op} {}", brief(arg)));
    };
    match op {
        "$any" => {}
        "$capture" => match arg.as_str() {
            Some(name) => vars.set(name, a.clone()),
            None => fail("$capture takes a variable name".into()),
        },
        "$eq" => {
            if !deep_eq(arg, a) {
                fail(format!("expected exactly {}, got {}", brief(arg), brief(a)));
            }
        }
        "$type" => {
            let names: Vec<&str> = match arg {
                Value::String(s) => vec![s.as_str()],
                Value::Array(v) => v.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if !names.iter().any(|n| type_is(n, a)) {
                fail(format!("expected {}, got {}", names.join(" or "), brief(a)));
            }
        }
        "$contains" => match (a.as_str(), arg.as_str()) {
            (Some(s), Some(needle)) if s.contains(needle) => {}
            _ => fail(format!(
                "expected a string containing {arg}, got {}",
                brief(a)
            )),
        },
        "$num" => match a.as_f64() {
            Some(x) => {
                let bound = |k: &str| arg.get(k).and_then(Value::as_f64);
                let ok = bound("gt").is_none_or(|b| x > b)
                    && bound("gte").is_none_or(|b| x >= b)
                    && bound("lt").is_none_or(|b| x < b)
                    && bound("lte").is_none_or(|b| x <= b);
                if !ok {
                    fail(format!("{x} is outside {arg}"));
                }
            }
            None => fail(format!("expected a number, got {}", brief(a))),
        },
        "$len" => {
            let len = match a {
                Value::String(s) => s.len(),
                Value::Array(v) => v.len(),
                other => return fail(format!("expected a string or list, got {}", brief(other))),
            };
            let bound = |k: &str| arg.get(k).and_then(Value::as_u64).map(|b| b as usize);
            if bound("min").is_some_and(|m| len < m) || bound("max").is_some_and(|m| len > m) {
                fail(format!("length {len} is outside {arg}"));
            }
        }
        "$base64" | "$base64Text" | "$base64MaxLen" => {
            let Some(s) = a.as_str() else {
                return fail(format!("expected a base64 string, got {}", brief(a)));
            };
            let decoded = match strict_base64(s) {
                Ok(d) => d,
                Err(e) => return fail(format!("not valid standard base64 ({e}): {}", brief(a))),
            };
            let expected: Option<Vec<u8>> = match (op, arg) {
                ("$base64", Value::String(e)) => strict_base64(e).ok(),
                ("$base64Text", Value::String(e)) => Some(e.as_bytes().to_vec()),
                _ => None,
            };
            if let Some(expected) = expected {
                if decoded != expected {
                    fail(format!(
                        "decodes to {} bytes {}, expected {} bytes {}",
                        decoded.len(),
                        preview_bytes(&decoded),
                        expected.len(),
                        preview_bytes(&expected)
                    ));
                }
            } else if let Some(max) = arg.as_u64() {
                if decoded.len() as u64 > max {
                    fail(format!(
                        "decodes to {} bytes, more than {max}",
                        decoded.len()
                    ));
                }
            } else {
                fail(format!("bad argument for {op}: {arg}"));
            }
        }
        other => fail(format!("unknown matcher {other}")),
    }
}

fn type_is(name: &str, v: &Value) -> bool {
    match name {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => false,
    }
}

/// Numbers compare by value; everything else structurally.
fn scalar_eq(p: &Value, a: &Value) -> bool {
    match (p, a) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => p == a,
    }
}

fn deep_eq(p: &Value, a: &Value) -> bool {
    match (p, a) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| deep_eq(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| deep_eq(v, w))
        }
        _ => scalar_eq(p, a),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A value shortened for a message, as `truncate` would shorten it, without
/// a copy of the whole of a large value: only its start is kept, the rest
/// counted.
pub fn brief(v: &Value) -> String {
    const MAX: usize = 120;
    /// Keeps the first bytes written (enough for `MAX` and a character
    /// across it) and counts all of them.
    struct Start {
        kept: Vec<u8>,
        total: usize,
    }
    impl std::io::Write for Start {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = (MAX + 4).saturating_sub(self.kept.len());
            self.kept.extend_from_slice(&buf[..buf.len().min(room)]);
            self.total += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut start = Start {
        kept: Vec::new(),
        total: 0,
    };
    let _ = serde_json::to_writer(&mut start, v);
    let text = String::from_utf8_lossy(&start.kept);
    if start.total <= MAX {
        return text.into_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], start.total)
}

pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

fn preview_bytes(b: &[u8]) -> String {
    truncate(&format!("{:?}", String::from_utf8_lossy(b)), 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn brief_shortens_as_truncate_does_without_the_whole_text() {
        let values = [
            json!(null),
            json!({"a": "x".repeat(119)}),
            json!({"content": "é".repeat(5000), "n": 1}),
            json!(["€".repeat(39), "€€", 1]),
            json!("x".repeat(1 << 20)),
        ];
        for v in values {
            assert_eq!(brief(&v), truncate(&v.to_string(), 120), "{v:.40}");
        }
    }

    fn check(pattern: Value, actual: Value) -> Vec<String> {
        let mut errors = Vec::new();
        match_value(
            &pattern,
            Some(&actual),
            "result",
            &mut Vars::default(),
            &mut errors,
        );
        errors.iter().map(Mismatch::to_string).collect()
    }

    #[test]
    fn a_mismatch_says_what_was_expected_and_what_came() {
        let mut errors = Vec::new();
        let pattern = json!({"a": 1, "b": {"$type": "string"}});
        let actual = json!({"a": 2, "b": 3});
        match_value(
            &pattern,
            Some(&actual),
            "result",
            &mut Vars::default(),
            &mut errors,
        );
        assert_eq!(errors[0].to_string(), "result.a: expected 1, got 2");
        assert_eq!(
            (errors[0].expected.as_deref(), errors[0].actual.as_deref()),
            (Some("1"), Some("2"))
        );
        assert_eq!(errors[1].actual.as_deref(), Some("3"));
    }

    #[test]
    fn objects_match_as_subsets_and_numbers_by_value() {
        assert!(check(json!({"exitCode": 3}), json!({"exitCode": 3, "x": 1})).is_empty());
        assert!(check(json!({"t": 1.0}), json!({"t": 1})).is_empty());
        let errs = check(json!({"exitCode": 3}), json!({"exitCode": 1}));
        assert_eq!(errs, vec!["result.exitCode: expected 3, got 1"]);
    }

    #[test]
    fn absent_means_missing_not_null() {
        assert!(check(json!({"data": {"$absent": null}}), json!({})).is_empty());
        assert_eq!(
            check(json!({"data": {"$absent": null}}), json!({"data": null})).len(),
            1
        );
    }

    #[test]
    fn base64_is_strict_like_pythons_validate_true() {
        assert!(check(json!({"$base64Text": "hello"}), json!("aGVsbG8=")).is_empty());
        assert_eq!(
            check(json!({"$base64Text": "hello"}), json!("aGVsbG8")).len(),
            1,
            "padding is required"
        );
        assert_eq!(
            check(json!({"$base64Text": "??>"}), json!("Pz8-")).len(),
            1,
            "url-safe alphabet is refused"
        );
        assert!(check(json!({"$base64MaxLen": 5}), json!("aGVsbG8=")).is_empty());
        assert_eq!(
            check(json!({"$base64MaxLen": 4}), json!("aGVsbG8=")).len(),
            1
        );
    }

    #[test]
    fn captures_and_templates_round_trip() {
        let mut vars = Vars::default();
        let mut errors = Vec::new();
        match_value(
            &json!({"workspace": {"$capture": "ws"}}),
            Some(&json!({"workspace": "/w s"})),
            "",
            &mut vars,
            &mut errors,
        );
        assert!(errors.is_empty());
        vars.set("tool", json!({"name": "a.b", "input": {"k": 1}}));
        let expanded = expand(&json!({"cwd": "${ws}", "cmd": "cd ${ws|sh}", "input": "${tool.input}", "n": "${tool.name}"}), &vars).unwrap();
        assert_eq!(
            expanded,
            json!({"cwd": "/w s", "cmd": "cd '/w s'", "input": {"k": 1}, "n": "a.b"})
        );
        assert_eq!(
            expand(&json!("${nope}"), &vars),
            Err(TemplateError("nope".into()))
        );
    }

    #[test]
    fn one_of_reports_every_option() {
        assert!(check(json!({"$oneOf": [1, {"$type": "string"}]}), json!("x")).is_empty());
        assert_eq!(check(json!({"$oneOf": [1, 2]}), json!(3)).len(), 1);
    }

    #[test]
    fn shell_quote_survives_quotes() {
        assert_eq!(shell_quote("/usr/bin/python3"), "/usr/bin/python3");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_path_is_within_its_own_field_only() {
        assert!(path_within("result.content", "result.content"));
        assert!(path_within("result.content[0].type", "result.content"));
        assert!(path_within("result.exitCode", "result"));
        assert!(!path_within("result.contentType", "result.content"));
        assert!(!path_within("result.exitCode", ""));
    }
}
