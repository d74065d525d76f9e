//! JSON-RPC 2.0 envelopes, sans-IO.
//!
//! Two readings of a reply line: [`classify_reply`] is lenient and follows the
//! real client (an `error` that is not null makes it an error reply, whatever
//! else it carries), so a case can look at what the target meant; and
//! [`envelope_violations`] lists every rule of JSON-RPC 2.0 §5 the reply
//! breaks, for the cases that grade the envelope itself.

use serde_json::{Map, Value};
use std::fmt;

/// A JSON-RPC error code. An open space: a code the target sends that has no
/// name here survives into the report as it was.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ErrorCode(pub i64);

impl ErrorCode {
    pub const PARSE_ERROR: ErrorCode = ErrorCode(-32700);
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(-32600);
    pub const METHOD_NOT_FOUND: ErrorCode = ErrorCode(-32601);
    pub const INVALID_PARAMS: ErrorCode = ErrorCode(-32602);
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(-32603);

    /// The name JSON-RPC 2.0 gives the code, if it gives one.
    pub fn standard_name(self) -> Option<&'static str> {
        Some(match self {
            Self::PARSE_ERROR => "Parse error",
            Self::INVALID_REQUEST => "Invalid Request",
            Self::METHOD_NOT_FOUND => "Method not found",
            Self::INVALID_PARAMS => "Invalid params",
            Self::INTERNAL_ERROR => "Internal error",
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.standard_name() {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// What a reply line meant, read the lenient way.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyKind {
    /// `error` is not null.
    Error {
        code: Option<ErrorCode>,
        message: Option<String>,
        data: Option<Value>,
    },
    /// `error` is null or absent and `result` is not null.
    Result(Value),
    /// Neither an error nor a result.
    Empty,
}

/// A result or an error object, briefly, for a report.
pub fn describe_answer(answer: &Result<Value, Value>) -> String {
    match answer {
        Ok(r) => format!("result {}", crate::matcher::brief(r)),
        Err(e) => format!("error {}", crate::matcher::brief(e)),
    }
}

/// A reply line parsed as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub object: Map<String, Value>,
    pub kind: ReplyKind,
}

/// Why a reply line could not be read as a JSON-RPC message at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyParseError {
    #[error("the reply is not UTF-8: {0}")]
    NotUtf8(String),
    #[error("the reply is not JSON: {0}")]
    NotJson(String),
    #[error("the reply is JSON but not an object")]
    NotObject,
}

/// Parses one reply line (without its newline) the way the real client does.
pub fn classify_reply(line: &[u8]) -> Result<Reply, ReplyParseError> {
    let text = std::str::from_utf8(line).map_err(|e| ReplyParseError::NotUtf8(e.to_string()))?;
    let value: Value =
        parse_json(text.as_bytes()).map_err(|e| ReplyParseError::NotJson(e.to_string()))?;
    let Value::Object(object) = value else {
        return Err(ReplyParseError::NotObject);
    };
    let kind = match (object.get("error"), object.get("result")) {
        (Some(error), _) if !error.is_null() => ReplyKind::Error {
            code: error.get("code").and_then(Value::as_i64).map(ErrorCode),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
            data: error.get("data").cloned(),
        },
        (_, Some(result)) if !result.is_null() => ReplyKind::Result(result.clone()),
        _ => ReplyKind::Empty,
    };
    Ok(Reply { object, kind })
}

/// Every JSON-RPC 2.0 response-object rule the reply breaks, given the id of
/// the request it answers (`None` when the request could not be read, so the
/// id must be null).
pub fn envelope_violations(reply: &Reply, request_id: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    let o = &reply.object;
    // "jsonrpc: A String specifying the version of the JSON-RPC protocol. MUST be exactly "2.0"."
    match o.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        Some(other) => out.push(format!("`jsonrpc` is {other}, not \"2.0\"")),
        None => out.push("`jsonrpc` is missing".into()),
    }
    // "Either the result member or error member MUST be included, but both members MUST NOT be included."
    match (o.contains_key("result"), o.contains_key("error")) {
        (true, true) => out.push("the reply carries both `result` and `error`".into()),
        (false, false) => out.push("the reply carries neither `result` nor `error`".into()),
        _ => {}
    }
    // "id: ... It MUST be the same as the value of the id member in the Request
    // Object. If there was an error in detecting the id in the Request Object
    // (e.g. Parse error/Invalid Request), it MUST be Null."
    let expected = request_id.cloned().unwrap_or(Value::Null);
    match o.get("id") {
        None => out.push("`id` is missing".into()),
        Some(id) if !same_id(id, &expected) => {
            out.push(format!("`id` is {id}, the request's was {expected}"))
        }
        _ => {}
    }
    if let Some(error) = o.get("error") {
        match error {
            Value::Object(e) => {
                // "code: A Number that indicates the error type that occurred. This MUST be an integer."
                match e.get("code") {
                    Some(c) if c.is_i64() || c.is_u64() => {}
                    Some(c) => out.push(format!("`error.code` is {c}, not an integer")),
                    None => out.push("`error.code` is missing".into()),
                }
                // "message: A String providing a short description of the error."
                match e.get("message") {
                    Some(Value::String(_)) => {}
                    Some(m) => out.push(format!("`error.message` is {m}, not a string")),
                    None => out.push("`error.message` is missing".into()),
                }
            }
            other => out.push(format!("`error` is {other}, not an object")),
        }
    }
    out
}

/// Ids are compared as JSON values: a number by its exact decimal value
/// however it is spelled (`7`, `7.0`, `7e0`; `-0` and `0`), so `2^53 + 1`
/// and `2^53`, or `2^64 - 1` and `2^64 - 2`, stay two ids ("It MUST be the
/// same as the value of the id member in the Request Object"); a string
/// only as the same string, null only as null.
pub fn same_id(a: &Value, b: &Value) -> bool {
    use crate::fuzz::readings::Id;
    Id::from_value(a) == Id::from_value(b)
}

/// True when `line` is JSON written without insignificant whitespace, the way
/// `json.dumps(..., separators=(",", ":"))` writes it.
pub fn is_compact_json(line: &[u8]) -> bool {
    !outside_strings(line).any(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// The bytes of JSON text outside its strings (their opening quotes
/// included), in order.
fn outside_strings(text: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut in_string = false;
    let mut escaped = false;
    text.iter().copied().filter(move |&b| {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            false
        } else {
            in_string = b == b'"';
            true
        }
    })
}

/// The most JSON values conform parses in one message: a limit of its own,
/// not any protocol's. A parsed value costs 32 bytes and more (an object's
/// member about 100), so a message of 64 MiB that is nothing but `[0,0,...`
/// would cost conform a gigabyte. A message over the limit is not judged:
/// the case is conform's error, never the target's failure.
pub const MAX_VALUES: usize = 1 << 18;

/// When `bytes` may hold more than [`MAX_VALUES`] JSON values: what conform
/// says about it. Counts the commas and the opening brackets outside
/// strings, each of which starts a value. A message shorter than twice the
/// limit cannot hold so many, and one whose commas and brackets, strings
/// included, are not so many cannot either: both are decided without the
/// exact scan, the second with the standard library's `memchr` (fast even
/// in a debug build, where a byte loop is not).
pub fn too_many_values(bytes: &[u8]) -> Option<String> {
    if bytes.len() < 2 * MAX_VALUES {
        return None;
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        let mut marks = 1usize;
        for mark in [',', '[', '{'] {
            marks += text.matches(mark).take(MAX_VALUES).count();
        }
        if marks <= MAX_VALUES {
            return None;
        }
    }
    let values = 1 + outside_strings(bytes)
        .filter(|b| matches!(b, b',' | b'[' | b'{'))
        .count();
    (values > MAX_VALUES).then(|| {
        format!(
            "a message of {} bytes with about {values} JSON values, more than conform parses ({MAX_VALUES}, a limit of conform's own, not the protocol's); conform cannot judge it",
            bytes.len()
        )
    })
}

/// Parses JSON text as the peers' parsers do where serde_json is stricter:
/// an escaped lone surrogate (`"\ud800"`) is JSON by the grammar of RFC
/// 8259, and Python's `json` (Vibe's reader) accepts it, so a line that
/// carries one is read with every surrogate escape taken as U+FFFD.
///
/// A message over [`MAX_VALUES`] is an error without being parsed; callers
/// that grade a target check [`too_many_values`] first, so it is reported as
/// conform's limit rather than as the target's fault.
pub fn parse_json(bytes: &[u8]) -> serde_json::Result<Value> {
    if let Some(why) = too_many_values(bytes) {
        return Err(<serde_json::Error as serde::de::Error>::custom(why));
    }
    // Retried when the text has a surrogate escape to replace, never on the
    // strength of what serde_json's message says.
    match serde_json::from_slice(bytes) {
        Err(e) => {
            let replaced = replace_surrogate_escapes(bytes);
            if replaced == bytes {
                Err(e)
            } else {
                serde_json::from_slice(&replaced)
            }
        }
        ok => ok,
    }
}

fn replace_surrogate_escapes(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            let hex = bytes.get(i + 2..i + 6);
            let surrogate = bytes[i + 1] == b'u'
                && hex.is_some_and(|h| {
                    std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u16::from_str_radix(h, 16).ok())
                        .is_some_and(|c| (0xD800..=0xDFFF).contains(&c))
                });
            if surrogate {
                out.extend_from_slice(b"\\ufffd");
                i += 6;
            } else {
                out.extend_from_slice(&bytes[i..i + 2]);
                i += 2;
            }
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// The top-level members of a JSON object, read without building the
/// nested values: each member whose value `parse_json` can read, the others
/// left out. conform reads the id and method of a message nested deeper than
/// serde_json goes (128 levels) this way, as a peer with a deeper parser
/// would. `None` when the text is not an object at the top.
pub fn shallow_object(bytes: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut out = serde_json::Map::new();
    loop {
        i = skip_ws(bytes, i);
        match bytes.get(i)? {
            b'}' => return Some(out),
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(bytes, i)?;
        let key: String = serde_json::from_slice(&bytes[i..key_end]).ok()?;
        i = skip_ws(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(bytes, i + 1);
        let start = i;
        let mut depth = 0usize;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    i = string_end(bytes, i)?;
                    continue;
                }
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth > 0 => depth -= 1,
                b',' | b'}' if depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
        if let Ok(v) = parse_json(&bytes[start..i]) {
            out.insert(key, v);
        }
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|b| b" \t\r\n".contains(b)) {
        i += 1;
    }
    i
}

/// The index just past the string starting at `start` (a quote).
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// A message as conform best reads it: whole when it can, else its
/// top-level members (see [`shallow_object`]).
pub fn read_message(bytes: &[u8]) -> Option<Value> {
    match parse_json(bytes) {
        Ok(v) => Some(v),
        Err(_) => shallow_object(bytes).map(Value::Object),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_too_deep_for_serde_still_shows_its_id() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":101,"method":"m","params":{}{{}}{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        let v = read_message(deep.as_bytes()).unwrap();
        assert_eq!(v["id"], 101);
        assert_eq!(v["method"], "m");
        assert!(v.get("params").is_none());
        assert!(read_message(b"[1]").unwrap().is_array());
        assert!(read_message(br#"{"a":"}\"","id":2}"#).unwrap()["id"] == 2);
        assert!(read_message(b"{\"id\":").is_none());
    }

    #[test]
    fn a_message_of_too_many_values_is_not_parsed() {
        // An array of n zeros: n + 1 values.
        let dense = |n: usize| format!("[{}0]", "0,".repeat(n - 1)).into_bytes();
        // Exactly the limit parses; one more does not.
        assert_eq!(too_many_values(&dense(MAX_VALUES - 1)), None);
        assert!(parse_json(&dense(MAX_VALUES - 1)).is_ok());
        let over = dense(MAX_VALUES);
        let why = too_many_values(&over).unwrap();
        assert!(why.contains("a limit of conform's own"), "{why}");
        assert!(parse_json(&over).unwrap_err().to_string().contains(&why));
        // Invalid UTF-8 does not hide the values from the count.
        let mut bad = over.clone();
        bad.push(0xff);
        assert!(too_many_values(&bad).is_some());
        // Commas and brackets inside strings are no values, escaped quotes
        // included.
        let text = format!(r#"{{"s":"\"{}"}}"#, ",[{".repeat(MAX_VALUES));
        assert_eq!(too_many_values(text.as_bytes()), None);
        assert!(parse_json(text.as_bytes()).is_ok());
    }

    #[test]
    fn lone_surrogates_read_as_python_reads_them() {
        let v = parse_json(br#"{"id":"\ud800","s":"\\ud800","p":"\ud83d\ude00"}"#).unwrap();
        assert_eq!(v["id"], "\u{fffd}");
        assert_eq!(v["s"], "\\ud800");
        assert!(parse_json(b"{").is_err());
    }
    use serde_json::json;

    fn reply(v: Value) -> Reply {
        classify_reply(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_non_null_error_wins_over_a_result() {
        let r = reply(
            json!({"jsonrpc":"2.0","id":1,"result":{},"error":{"code":-32001,"message":"t"}}),
        );
        assert!(matches!(
            r.kind,
            ReplyKind::Error {
                code: Some(ErrorCode(-32001)),
                ..
            }
        ));
        assert_eq!(envelope_violations(&r, Some(&json!(1))).len(), 1);
    }

    #[test]
    fn null_error_and_result_is_empty() {
        let r = reply(json!({"jsonrpc":"2.0","id":1,"result":null,"error":null}));
        assert_eq!(r.kind, ReplyKind::Empty);
    }

    #[test]
    fn id_must_echo_the_request() {
        let r = reply(json!({"jsonrpc":"2.0","id":2,"result":{}}));
        assert_eq!(
            envelope_violations(&r, Some(&json!(2))),
            Vec::<String>::new()
        );
        assert_eq!(envelope_violations(&r, Some(&json!(1))).len(), 1);
        assert_eq!(envelope_violations(&r, Some(&json!("2"))).len(), 1);
        let null_id =
            reply(json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}));
        assert!(envelope_violations(&null_id, None).is_empty());
    }

    /// Each id reading: the same value matches however it is written,
    /// another value (or another type) does not.
    #[test]
    fn ids_match_by_exact_value() {
        let v = |t: &str| parse_json(t.as_bytes()).unwrap();
        for (a, b) in [
            ("0", "0"),
            ("0", "-0"),
            ("-1", "-1"),
            ("7", "7.0"),
            ("100", "1e2"),
            ("7.5", "7.5"),
            ("9007199254740993", "9007199254740993"),
            ("18446744073709551615", "18446744073709551615"),
            ("\"x\"", "\"x\""),
            ("null", "null"),
        ] {
            assert!(same_id(&v(a), &v(b)), "{a} and {b}");
        }
        for (a, b) in [
            ("0", "1"),
            ("0", "null"),
            ("0", "false"),
            ("0", "\"0\""),
            ("-1", "1"),
            ("7.5", "7"),
            ("9007199254740993", "9007199254740992"),
            ("18446744073709551615", "18446744073709551614"),
            ("-9223372036854775808", "-9223372036854775807"),
            ("\"\"", "null"),
        ] {
            assert!(!same_id(&v(a), &v(b)), "{a} and {b}");
        }
    }

    #[test]
    fn error_code_must_be_an_integer() {
        let r = reply(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32000.5,"message":"x"}}));
        assert_eq!(envelope_violations(&r, Some(&json!(1))).len(), 1);
    }

    #[test]
    fn unknown_codes_survive() {
        assert_eq!(ErrorCode(-31999).to_string(), "-31999");
        assert_eq!(
            ErrorCode::METHOD_NOT_FOUND.to_string(),
            "-32601 (Method not found)"
        );
    }

    #[test]
    fn compactness_ignores_whitespace_inside_strings() {
        assert!(is_compact_json(br#"{"a":"b c","d":[1,2]}"#));
        assert!(is_compact_json(br#"{"a":"q\" x"}"#));
        assert!(!is_compact_json(br#"{"a": 1}"#));
        assert!(!is_compact_json(br#"{"a":1, "b":2}"#));
    }
}
