//! Every legal reading of a message conform wrote, and so every id a peer
//! may answer it with. Sans-IO.
//!
//! An oracle that knows one reading of its own input flags a correct peer
//! that made another. The sources admit several:
//! - RFC 8259 §8.1: "implementations that parse JSON texts MAY ignore the
//!   presence of a byte order mark rather than treating it as an error": a
//!   line that starts with one is a parse error (id null) or the request it
//!   holds (its id);
//! - RFC 8259 §2: whitespace around a JSON text is insignificant;
//! - RFC 8259 §4: "When the names within an object are not unique, the
//!   behavior of software that receives such an object is unpredictable.
//!   Many implementations report the last name/value pair only. Other
//!   implementations report an error or fail to parse the object": a
//!   duplicated `id` is read as its first value, its last, or not at all;
//! - RFC 8259 §6: "This specification allows implementations to set limits
//!   on the range and precision of numbers accepted", and a number has one
//!   value however it is spelled (`1`, `1.0`, `1e0`, `-0` and `0`): ids are
//!   compared by exact decimal value, so `2^53 + 1` answered as `2^53` is
//!   still another id;
//! - RFC 8259 §7: a character has one value escaped or raw (`"é"`, `"\u00e9"`);
//! - RFC 8259 §9: "A JSON parser MAY accept non-JSON forms or extensions":
//!   a reader that takes bytes that are not UTF-8 or a number beyond its
//!   range inside a value, or nesting deeper than serde_json goes, still
//!   finds the top-level members. Text that is cut short, or has bytes
//!   between its tokens, it does not read: JSON-RPC 2.0 answers a parse
//!   error with a null id ("If there was an error in detecting the id in the
//!   Request object (e.g. Parse error/Invalid Request), it MUST be Null").

use serde_json::{Map, Value};

/// The UTF-8 byte-order mark.
pub const BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

/// The largest message whose readings conform works out; a longer one's
/// id may be anything (the drivers say so).
pub const MAX_READ: usize = 4 * 1024 * 1024;

/// A number's exact value: `(-1)^negative × digits × 10^exponent`, with no
/// leading or trailing zero in `digits`; zero is no digits and not negative.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    /// Reads a JSON number token (RFC 8259 §6 grammar); `None` when it is
    /// not one.
    pub fn parse(token: &[u8]) -> Option<Decimal> {
        let text = std::str::from_utf8(token).ok()?;
        let (negative, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (mantissa, None),
        };
        let digits_only = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits_only(int) || (int.len() > 1 && int.starts_with('0')) {
            return None;
        }
        if frac.is_some_and(|f| !digits_only(f)) {
            return None;
        }
        let mut exponent: i64 = match exp {
            None => 0,
            Some(e) => {
                let unsigned = e.strip_prefix(['+', '-']).unwrap_or(e);
                if !digits_only(unsigned) {
                    return None;
                }
                // An exponent past i64 is past any reader; saturating keeps
                // it past them all.
                let magnitude: i64 = unsigned.parse().unwrap_or(i64::MAX / 4);
                if e.starts_with('-') {
                    -magnitude
                } else {
                    magnitude
                }
            }
        };
        let frac = frac.unwrap_or("");
        exponent = exponent.saturating_sub(frac.len() as i64);
        let all = format!("{int}{frac}");
        let trimmed = all.trim_start_matches('0');
        let kept = trimmed.trim_end_matches('0');
        exponent = exponent.saturating_add((trimmed.len() - kept.len()) as i64);
        if kept.is_empty() {
            return Some(Decimal {
                negative: false,
                digits: String::new(),
                exponent: 0,
            });
        }
        Some(Decimal {
            negative,
            digits: kept.to_owned(),
            exponent,
        })
    }

    /// Whether the value is a whole number a 64-bit integer holds (from
    /// `i64::MIN` to `u64::MAX`).
    pub fn is_64_bit_integer(&self) -> bool {
        if self.digits.is_empty() {
            return true;
        }
        if self.exponent < 0 || self.exponent > 20 {
            return false;
        }
        let text = format!("{}{}", self.digits, "0".repeat(self.exponent as usize));
        if self.negative {
            format!("-{text}").parse::<i64>().is_ok()
        } else {
            text.parse::<u64>().is_ok()
        }
    }

    /// The value as a reader whose numbers are binary64 has it; `None`
    /// past its range.
    pub fn binary64(&self) -> Option<Decimal> {
        let f: f64 = self.to_string().parse().ok()?;
        if !f.is_finite() {
            return None;
        }
        Decimal::parse(serde_json::Number::from_f64(f)?.to_string().as_bytes())
    }

    /// The value as a u64, when it is a whole number in its range.
    pub fn as_u64(&self) -> Option<u64> {
        if self.digits.is_empty() {
            return Some(0);
        }
        if self.negative || self.exponent < 0 || self.exponent > 20 {
            return None;
        }
        let text = format!("{}{}", self.digits, "0".repeat(self.exponent as usize));
        text.parse().ok()
    }
}

/// The number as JSON text: whole numbers up to 20 digits written out,
/// others with an exponent.
impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        let sign = if self.negative { "-" } else { "" };
        if (0..=20).contains(&(self.exponent + self.digits.len() as i64)) && self.exponent >= 0 {
            let zeros = "0".repeat(self.exponent as usize);
            write!(f, "{sign}{}{zeros}", self.digits)
        } else {
            write!(f, "{sign}{}e{}", self.digits, self.exponent)
        }
    }
}

/// An id as a peer may read it, compared by JSON value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    Null,
    Bool(bool),
    Str(String),
    Num(Decimal),
    /// An array or an object (no valid JSON-RPC id): its compact text.
    Other(String),
}

impl Id {
    /// The id a value token spells; `None` when the token is no JSON value
    /// a reader can take.
    pub fn from_token(token: &[u8]) -> Option<Id> {
        let token = trim_ws(token);
        match token.first()? {
            b'"' => {
                // Bytes that are not UTF-8 inside the string read as U+FFFD,
                // and raw control characters as themselves (a reader that
                // accepts them, RFC 8259 §9).
                let mut text = String::new();
                for c in String::from_utf8_lossy(token).chars() {
                    if c < ' ' {
                        text.push_str(&format!("\\u{:04x}", u32::from(c)));
                    } else {
                        text.push(c);
                    }
                }
                match crate::jsonrpc::parse_json(text.as_bytes()) {
                    Ok(Value::String(s)) => Some(Id::Str(s)),
                    _ => None,
                }
            }
            b'-' | b'0'..=b'9' => Decimal::parse(token).map(Id::Num),
            b'n' if token == b"null" => Some(Id::Null),
            b't' if token == b"true" => Some(Id::Bool(true)),
            b'f' if token == b"false" => Some(Id::Bool(false)),
            b'[' | b'{' => Some(Id::Other(
                crate::jsonrpc::parse_json(token)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| String::from_utf8_lossy(token).into_owned()),
            )),
            _ => None,
        }
    }

    /// The id a parsed value is (a float as its shortest decimal spelling).
    pub fn from_value(v: &Value) -> Id {
        match v {
            Value::Null => Id::Null,
            Value::Bool(b) => Id::Bool(*b),
            Value::String(s) => Id::Str(s.clone()),
            Value::Number(n) => Decimal::parse(n.to_string().as_bytes())
                .map(Id::Num)
                .unwrap_or_else(|| Id::Other(n.to_string())),
            other => Id::Other(other.to_string()),
        }
    }

    /// The id as a value, for a report (a number past serde_json's as its text).
    pub fn to_value(&self) -> Value {
        let parsed = |t: &str| serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.into()));
        match self {
            Id::Null => Value::Null,
            Id::Bool(b) => Value::Bool(*b),
            Id::Str(s) => Value::String(s.clone()),
            Id::Num(d) => parsed(&d.to_string()),
            Id::Other(t) => parsed(t),
        }
    }

    pub fn is_null(&self) -> bool {
        *self == Id::Null
    }
}

/// What made a reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum How {
    /// The bytes as they are, strict JSON.
    AsWritten,
    /// With the leading byte-order mark ignored (RFC 8259 §8.1).
    BomIgnored,
    /// By a reader that accepts what strict JSON does not (RFC 8259 §9):
    /// bytes that are not UTF-8 inside strings, numbers past binary64,
    /// nesting deeper than serde_json's.
    Lenient,
    /// The first of several `id` members.
    FirstDuplicate,
    /// The last of several `id` members.
    LastDuplicate,
    /// A number outside the 64-bit integers, as a reader whose numbers are
    /// binary64 rounds it (RFC 8259 6).
    Binary64,
}

impl How {
    /// The reading, as a report says it.
    pub fn describe(self) -> &'static str {
        match self {
            How::AsWritten => "as written",
            How::BomIgnored => "with its byte-order mark ignored (RFC 8259 8.1)",
            How::Lenient => "by a lenient reader (RFC 8259 9)",
            How::FirstDuplicate => "by its first `id` member (RFC 8259 4)",
            How::LastDuplicate => "by its last `id` member (RFC 8259 4)",
            How::Binary64 => "as a binary64 number (RFC 8259 6)",
        }
    }
}

/// One reading of a message as an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The top-level members as this reading has them (a member whose
    /// value serde_json cannot hold is left out; the id is in `id`).
    pub members: Map<String, Value>,
    /// The id (`None` when there is no `id` member: a notification).
    pub id: Option<Id>,
    pub how: How,
}

impl Object {
    /// The reading as a message value, its id as close as a value holds it.
    pub fn value(&self) -> Value {
        Value::Object(self.members.clone())
    }
}

/// Every legal reading of one message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readings {
    /// Some legal reader fails to read it: an answer, if any, has a null id.
    pub unreadable: bool,
    /// The readings as an object, each distinct.
    pub objects: Vec<Object>,
}

impl Readings {
    /// The readings of one message's bytes (a line without its newline, or
    /// a frame's payload). Past [`MAX_READ`] nothing is worked out: `None`.
    pub fn of(bytes: &[u8]) -> Option<Readings> {
        if bytes.len() > MAX_READ {
            return None;
        }
        let mut r = Readings::default();
        let body = trim_ws(bytes);
        let (text, bom) = match body.strip_prefix(BOM) {
            // "MAY ignore ... rather than treating it as an error": both.
            Some(rest) => (trim_ws(rest), true),
            None => (body, false),
        };
        let parsed = crate::jsonrpc::parse_json(text).ok();
        let strict = parsed.is_some();
        // RFC 8259 8.2: text with an escaped lone surrogate ("\uDEAD") is
        // JSON by the grammar, but "the behavior of software that receives
        // JSON texts containing such values is unpredictable"; 9: "An
        // implementation may set limits on the maximum depth of nesting".
        // A reader like serde_json refuses both.
        let refusable = !strict || surrogate_escape(text);
        if bom || refusable {
            r.unreadable = true;
        }
        let Some(members) = top_members(text) else {
            r.unreadable = true;
            return Some(r);
        };
        let how = match (bom, strict) {
            (true, _) => How::BomIgnored,
            (false, true) => How::AsWritten,
            (false, false) => How::Lenient,
        };
        let ids: Vec<usize> = (0..members.len())
            .filter(|i| members[*i].0 == "id")
            .collect();
        // A strict reading with one id member is the parse already made.
        if let (Some(Value::Object(map)), false, [_] | []) = (parsed, bom, ids.as_slice()) {
            let id = ids.first().and_then(|i| Id::from_token(members[*i].1));
            if ids.is_empty() || id.is_some() {
                r.objects.push(Object {
                    members: map,
                    id,
                    how: How::AsWritten,
                });
                add_binary64(&mut r);
                return Some(r);
            }
        }
        let object = |keep_id: Option<usize>, how: How| -> Object {
            let mut map = Map::new();
            let mut id = None;
            for (i, (k, raw)) in members.iter().enumerate() {
                if k == "id" {
                    if Some(i) != keep_id {
                        continue;
                    }
                    id = Id::from_token(raw);
                }
                if let Ok(v) = crate::jsonrpc::parse_json(raw) {
                    map.insert(k.clone(), v);
                }
            }
            Object {
                members: map,
                id,
                how,
            }
        };
        match ids.as_slice() {
            [] => r.objects.push(object(None, how)),
            [one] => {
                let o = object(Some(*one), how);
                // An id no reader can take (not a JSON value) is not detected.
                if o.id.is_none() {
                    r.unreadable = true;
                }
                r.objects.push(o);
            }
            [first, .., last] => {
                r.unreadable = true;
                let a = object(Some(*first), How::FirstDuplicate);
                let b = object(Some(*last), How::LastDuplicate);
                let same = a.id == b.id;
                r.objects.push(a);
                if !same {
                    r.objects.push(b);
                }
            }
        }
        add_binary64(&mut r);
        Some(r)
    }

    /// The ids the message may be answered with besides null, each with the
    /// reading that gives it.
    pub fn ids(&self) -> Vec<(Id, How)> {
        let mut out: Vec<(Id, How)> = Vec::new();
        for o in &self.objects {
            if let Some(id) = &o.id
                && !out.iter().any(|(seen, _)| seen == id)
            {
                out.push((id.clone(), o.how));
            }
        }
        out
    }

    /// How a reading gives `id`, if one does.
    pub fn reading_of(&self, id: &Id) -> Option<How> {
        self.ids()
            .into_iter()
            .find(|(i, _)| i == id)
            .map(|(_, how)| how)
    }
}

/// RFC 8259 6: a number no 64-bit integer holds a reader may round to
/// binary64 (an id within them must come back exactly): the rounded id is
/// one more reading.
fn add_binary64(r: &mut Readings) {
    let extra: Vec<Object> = r
        .objects
        .iter()
        .filter_map(|o| match &o.id {
            Some(Id::Num(d)) if !d.is_64_bit_integer() => {
                let b = d.binary64().filter(|b| b != d)?;
                Some(Object {
                    id: Some(Id::Num(b)),
                    how: How::Binary64,
                    ..o.clone()
                })
            }
            _ => None,
        })
        .collect();
    r.objects.extend(extra);
}

/// The `id` members of a message's top-level object, as tokens read them
/// (every one, in order); empty when it is no object.
pub fn ids_in(bytes: &[u8]) -> Vec<Id> {
    let body = trim_ws(bytes);
    let text = body.strip_prefix(BOM).map(trim_ws).unwrap_or(body);
    top_members(text)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k == "id")
        .filter_map(|(_, raw)| Id::from_token(raw))
        .collect()
}

/// Whether `text` has a `\u` escape of a UTF-16 surrogate (D800 to DFFF).
fn surrogate_escape(text: &[u8]) -> bool {
    let mut i = 0;
    while i + 1 < text.len() {
        if text[i] != b'\\' {
            i += 1;
            continue;
        }
        if text[i + 1] == b'u'
            && let Some(h) = text.get(i + 2..i + 4)
            && matches!(h[0], b'd' | b'D')
            && matches!(h[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
        {
            return true;
        }
        i += 2;
    }
    false
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn trim_ws(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b
        && is_ws(*first)
    {
        b = rest;
    }
    while let [rest @ .., last] = b
        && is_ws(*last)
    {
        b = rest;
    }
    b
}

/// The end (exclusive) of the string token starting at `at` (a quote).
fn string_end(b: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The end (exclusive) of the value token starting at `at`: a string, a
/// balanced array or object (its inside not checked), or a bare word.
fn value_end(b: &[u8], at: usize) -> Option<usize> {
    match b.get(at)? {
        b'"' => string_end(b, at),
        b'[' | b'{' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = at;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']') && !is_ws(b[i]) {
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

/// The top-level members of the object `text` is (keys decoded, values as
/// their raw tokens), read by structure only: a value's inside is not
/// checked, so bytes that are not UTF-8 in a string or nesting of any depth
/// do not stop it. `None` when the text is not an object from its first
/// byte to its last.
fn top_members(text: &[u8]) -> Option<Vec<(String, &[u8])>> {
    let skip = |mut i: usize| {
        while i < text.len() && is_ws(text[i]) {
            i += 1;
        }
        i
    };
    if text.first() != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = skip(1);
    if text.get(i) == Some(&b'}') {
        return (skip(i + 1) == text.len()).then_some(out);
    }
    loop {
        if text.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(text, i)?;
        let key = match Id::from_token(&text[i..key_end])? {
            Id::Str(k) => k,
            _ => return None,
        };
        i = skip(key_end);
        if text.get(i) != Some(&b':') {
            return None;
        }
        i = skip(i + 1);
        let end = value_end(text, i)?;
        out.push((key, &text[i..end]));
        i = skip(end);
        match text.get(i)? {
            b',' => i = skip(i + 1),
            b'}' => return (skip(i + 1) == text.len()).then_some(out),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(t: &str) -> Id {
        Id::from_token(t.as_bytes()).unwrap()
    }

    fn ids(bytes: &[u8]) -> Vec<Id> {
        Readings::of(bytes)
            .unwrap()
            .ids()
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn a_number_has_one_value_however_it_is_spelled() {
        for same in ["1", "1.0", "1e0", "10e-1", "0.1e1", "1.000E+0"] {
            assert_eq!(num(same), num("1"), "{same}");
        }
        assert_eq!(num("-0"), num("0"));
        assert_eq!(num("-0.0e5"), num("0"));
        assert_eq!(num("100"), num("1E2"));
        assert_ne!(num("9007199254740993"), num("9007199254740992"));
        assert_ne!(num("1"), num("-1"));
        assert_eq!(num("1e400"), num("10e399"));
        assert_eq!(Id::from_value(&json!(7.0)), num("7"));
        assert_eq!(Id::from_value(&json!(-0.0)), num("0"));
        assert_eq!(
            Id::from_value(&json!(u64::MAX)),
            num("18446744073709551615")
        );
        for bad in ["01", "1.", ".5", "1e", "+1", "--1", "1x"] {
            assert_eq!(Id::from_token(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(num("7.0e0").clone(), num("7"));
        assert_eq!(num("1e2").to_value(), json!(100));
        assert_eq!(num("-25e-1").to_value(), json!(-2.5));
        assert_eq!(num("-0").to_value(), json!(0));
        assert_eq!(Decimal::parse(b"1.5e1").and_then(|d| d.as_u64()), Some(15));
        assert_eq!(Decimal::parse(b"-0").and_then(|d| d.as_u64()), Some(0));
        assert_eq!(Decimal::parse(b"1.5").and_then(|d| d.as_u64()), None);
        assert_eq!(Decimal::parse(b"-1").and_then(|d| d.as_u64()), None);
    }

    #[test]
    fn a_string_has_one_value_escaped_or_raw() {
        assert_eq!(
            Id::from_token("\"é\"".as_bytes()),
            Id::from_token(br#""\u00e9""#)
        );
        assert_eq!(
            Id::from_token(b"\"a\0b\""),
            Some(Id::Str("a\0b".into())),
            "a raw control character, as a lenient reader takes it"
        );
        assert_ne!(
            Id::from_token(br#""7""#),
            Id::from_token(b"7"),
            "7 and \"7\" differ"
        );
    }

    #[test]
    fn a_line_with_a_byte_order_mark_is_a_parse_error_or_the_request() {
        let mut line = BOM.to_vec();
        line.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#);
        let r = Readings::of(&line).unwrap();
        assert!(r.unreadable, "a parser may treat it as an error");
        assert_eq!(r.ids(), vec![(num("1"), How::BomIgnored)]);
        assert_eq!(r.objects[0].members["method"], "m");
    }

    #[test]
    fn whitespace_around_the_json_changes_nothing() {
        let r = Readings::of(b" \t{\"id\": 5 ,\"method\":\"m\"}\r").unwrap();
        assert!(!r.unreadable);
        assert_eq!(r.ids(), vec![(num("5"), How::AsWritten)]);
    }

    #[test]
    fn a_duplicated_id_is_read_first_last_or_not_at_all() {
        let r = Readings::of(br#"{"id":1,"method":"m","id":2}"#).unwrap();
        assert!(r.unreadable);
        assert_eq!(
            r.ids(),
            vec![
                (num("1"), How::FirstDuplicate),
                (num("2"), How::LastDuplicate)
            ]
        );
        // The same value twice is one reading.
        assert_eq!(ids(br#"{"id":1,"id":1.0}"#), vec![num("1")]);
    }

    #[test]
    fn damage_inside_a_value_leaves_the_id_to_a_lenient_reader() {
        let mut line = br#"{"id":4,"method":"m","params":{"s":"a"#.to_vec();
        line.push(0xFF);
        line.extend_from_slice(br#""}}"#);
        let r = Readings::of(&line).unwrap();
        assert!(r.unreadable);
        assert_eq!(r.ids(), vec![(num("4"), How::Lenient)]);
        let deep = format!(
            r#"{{"id":3,"params":{}{{}}{}}}"#,
            "[".repeat(500),
            "]".repeat(500)
        );
        assert_eq!(ids(deep.as_bytes()), vec![num("3")]);
        // Past the 64-bit integers a reader may round to binary64; within
        // them, an id comes back exactly.
        let r = Readings::of(br#"{"id":18446744073709551617,"method":"m"}"#).unwrap();
        assert_eq!(
            r.ids(),
            vec![
                (num("18446744073709551617"), How::AsWritten),
                (num("18446744073709552000"), How::Binary64)
            ]
        );
        assert_eq!(
            ids(br#"{"id":9007199254740993}"#),
            vec![num("9007199254740993")]
        );
        assert_eq!(ids(br#"{"id":0.1}"#), vec![num("0.1")]);
        // A number past binary64: a reader may hold it exactly, or refuse.
        let r = Readings::of(br#"{"id":1e400,"method":"m"}"#).unwrap();
        assert!(r.unreadable);
        assert_eq!(r.ids(), vec![(num("1e400"), How::Lenient)]);
    }

    #[test]
    fn text_cut_short_or_with_bytes_between_tokens_has_no_id() {
        for bad in [
            &br#"{"id":4,"method":"m""#[..],
            br#"{"id":4,"method":"m"} x"#,
            b"{\"id\":4,\0\"method\":\"m\"}",
            br#"{"id":4,"method":"m"}}"#,
            b"",
            b"[1]",
        ] {
            let r = Readings::of(bad).unwrap();
            assert!(r.unreadable, "{}", String::from_utf8_lossy(bad));
            assert!(r.ids().is_empty(), "{}", String::from_utf8_lossy(bad));
        }
        // An escaped lone surrogate is JSON, which a reader may still refuse
        // (RFC 8259 8.2).
        let r = Readings::of(br#"{"id":4,"method":"m","params":{"s":"\ud800"}}"#).unwrap();
        assert!(r.unreadable);
        assert_eq!(r.ids(), vec![(num("4"), How::AsWritten)]);
        // A notification has no id to answer with.
        let r = Readings::of(br#"{"method":"m"}"#).unwrap();
        assert!(!r.unreadable);
        assert_eq!(r.objects[0].id, None);
    }

    #[test]
    fn ids_in_reads_a_reply_as_it_is_spelled() {
        assert_eq!(
            ids_in(br#"{"jsonrpc":"2.0","id":-0,"result":1}"#),
            vec![num("0")]
        );
        assert_eq!(ids_in(br#"{"id":null}"#), vec![Id::Null]);
        assert!(ids_in(b"nonsense").is_empty());
    }

    #[test]
    fn a_message_too_long_to_read_has_no_readings() {
        assert_eq!(Readings::of(&vec![b' '; MAX_READ + 1]), None);
    }

    /// cwx: a payload no core sends may be answered under any reading of
    /// it, by value, or with a null id; a core's request only by its own id.
    #[test]
    fn the_cwx_watch_admits_every_reading_of_a_payload_no_core_sends() {
        use crate::drive::stdio::Watch;
        use crate::protocols::cwx::{driver::HostWatch, table::Tier};
        let frame = |p: &[u8]| crate::wire::frame::encode(p).unwrap();
        let answer = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
        let ping = |id: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"host/ping","params":{{}}}}"#)
        };
        let bom = [BOM, ping("9").as_bytes()].concat();
        let dup = br#"{"jsonrpc":"2.0","id":10,"id":11,"method":"host/ping","params":{}}"#;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (ping("-0").into_bytes(), "0"),
            (ping("-0").into_bytes(), "null"),
            (ping("7.0").into_bytes(), "7"),
            (ping("7.0").into_bytes(), "7.0"),
            (ping("1e2").into_bytes(), "100"),
            (bom.clone(), "9"),
            (bom, "null"),
            (dup.to_vec(), "10"),
            (dup.to_vec(), "11"),
            (ping("7").into_bytes(), "7"),
            // RFC 8259 6: past the 64-bit integers, rounded to binary64.
            (
                ping("18446744073709551617").into_bytes(),
                "1.8446744073709552e+19",
            ),
            // RFC 8259 8.2: a lone surrogate, which a reader may refuse.
            (
                br#"{"jsonrpc":"2.0","id":101,"method":"host/ping","params":{"s":"\ud800"}}"#
                    .to_vec(),
                "null",
            ),
        ];
        for (payload, id) in cases {
            let mut w = HostWatch::new(Tier::Plugin);
            w.sent_raw(&frame(&payload));
            w.received(answer(id).as_bytes());
            assert!(
                w.findings().is_empty(),
                "{} answered with {id}: {:?}",
                String::from_utf8_lossy(&payload),
                w.findings()
            );
        }
        let mut w = HostWatch::new(Tier::Plugin);
        w.sent_raw(&frame(ping("7").as_bytes()));
        w.received(answer("8").as_bytes());
        assert_eq!(
            w.findings().len(),
            1,
            "a core's request answered under another id"
        );
    }
}
