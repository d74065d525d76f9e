//! Generators the three protocols' fuzzers share (proptest strategies): JSON
//! values and ids of every type, mutations of a golden message, byte-level
//! damage to its encoding, and pauses between its bytes. Each protocol picks
//! its golden messages from its corpus and its method names from its table;
//! nothing here knows a protocol.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Map, Value, json};

/// A JSON string that serialises as the raw token after the marker: how a
/// message carries a number serde_json cannot hold (`1e400`, 2^64 + 1) or an
/// escape it would not write (a lone surrogate).
const RAW_MARK: &str = "\u{0}conform-raw:";

pub fn raw_token(text: &str) -> Value {
    Value::String(format!("{RAW_MARK}{text}"))
}

/// Serialises `value` compactly (or pretty, over several lines), with raw
/// tokens written as themselves.
pub fn serialize(value: &Value, pretty: bool) -> Vec<u8> {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .unwrap_or_default();
    let marker = "\"\\u0000conform-raw:";
    if !text.contains(marker) {
        return text.into_bytes();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(marker) {
        out.push_str(&rest[..at]);
        // The end of the JSON string literal: the first quote not escaped.
        let literal = &rest[at..];
        let mut end = 1;
        let bytes = literal.as_bytes();
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let end = (end + 1).min(literal.len());
        let raw: String = serde_json::from_str(&literal[..end]).unwrap_or_default();
        out.push_str(raw.strip_prefix(RAW_MARK).unwrap_or(&raw));
        rest = &literal[end..];
    }
    out.push_str(rest);
    out.into_bytes()
}

/// Numbers at the edges: small, the bounds of i64 and u64, 2^53 + 1, floats,
/// and numbers no 64-bit type holds.
pub fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (-3i64..100).prop_map(|n| json!(n)),
        2 => select(vec![i64::MIN, i64::MAX, -(1 << 53), (1 << 53) + 1, 1 << 31, -1])
            .prop_map(|n| json!(n)),
        1 => Just(json!(u64::MAX)),
        1 => select(vec![0.5f64, -0.0, 1e300, -1e-300, 2.5e15]).prop_map(|f| json!(f)),
        1 => select(vec!["1e400", "18446744073709551617", "-0", "1.0", "1E2"]).prop_map(raw_token),
    ]
    .boxed()
}

/// Strings: empty, ASCII, escapes, non-ASCII, long, a lone surrogate.
pub fn string() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => "[a-z/._-]{0,12}".prop_map(Value::String),
        2 => select(vec!["", "\"", "\\", "\n", "\t\r", "é", "😀", "\u{2028}", "\u{0}", "$"])
            .prop_map(|s| Value::String(s.into())),
        1 => (1usize..3000).prop_map(|n| Value::String("x".repeat(n))),
        1 => Just(raw_token("\"\\ud800\"")),
    ]
    .boxed()
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_]{1,10}",
        select(vec!["", "__proto__", "_meta", "jsonrpc", "id", "é"]).prop_map(String::from),
    ]
}

/// Any JSON value, nested a few levels.
pub fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string(),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
    .boxed()
}

/// Ids of every JSON type, and the numbers at the edges.
pub fn id_value() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => number(),
        2 => string(),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(json!([1])),
        1 => Just(json!({"id": 1})),
    ]
    .boxed()
}

/// Which object a field mutation works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    Envelope,
    Params,
}

/// One change to a golden message.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// A field removed.
    Drop(Where, Index),
    /// An unknown field added.
    Add(Where, String, Value),
    /// A field's value replaced by one of another type.
    Retype(Where, Index, Value),
    /// `params` that are not an object.
    Params(Value),
    /// Another id, of any type.
    Id(Value),
    /// Another method: another direction's or tier's, unknown, not a string.
    Method(Value),
    /// The params nested this deep in arrays.
    Nest(usize),
}

/// Mutations of a message; `methods` are the other method names to try
/// (from the protocol's table, and names no table has).
pub fn mutation(methods: Vec<String>) -> BoxedStrategy<Mutation> {
    let place = prop_oneof![3 => Just(Where::Params), 1 => Just(Where::Envelope)];
    let method = prop_oneof![
        4 => select(methods).prop_map(Value::String),
        1 => json_value(),
    ];
    prop_oneof![
        3 => (place.clone(), any::<Index>()).prop_map(|(w, i)| Mutation::Drop(w, i)),
        2 => (place.clone(), key(), json_value()).prop_map(|(w, k, v)| Mutation::Add(w, k, v)),
        4 => (place, any::<Index>(), json_value()).prop_map(|(w, i, v)| Mutation::Retype(w, i, v)),
        2 => prop_oneof![
            Just(Value::Null),
            Just(json!([])),
            Just(json!([1, 2])),
            number(),
            string(),
            any::<bool>().prop_map(Value::Bool),
        ]
        .prop_map(Mutation::Params),
        3 => id_value().prop_map(Mutation::Id),
        2 => method.prop_map(Mutation::Method),
        1 => select(vec![64usize, 200, 1000, 10_000]).prop_map(Mutation::Nest),
    ]
    .boxed()
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn object_mut(envelope: &mut Map<String, Value>, w: Where) -> Option<&mut Map<String, Value>> {
    match w {
        Where::Envelope => Some(envelope),
        Where::Params => match envelope.get_mut("params") {
            Some(Value::Object(p)) => Some(p),
            _ => None,
        },
    }
}

/// Applies `m` to `message` (a JSON object).
pub fn apply(message: &mut Value, m: &Mutation) {
    let Value::Object(envelope) = message else {
        return;
    };
    match m {
        Mutation::Drop(w, i) => {
            if let Some(o) = object_mut(envelope, *w) {
                if !o.is_empty() {
                    let k = o.keys().nth(i.index(o.len())).cloned();
                    if let Some(k) = k {
                        o.shift_remove(&k);
                    }
                }
            }
        }
        Mutation::Add(w, k, v) => {
            if let Some(o) = object_mut(envelope, *w) {
                if !o.contains_key(k) {
                    o.insert(k.clone(), v.clone());
                }
            }
        }
        Mutation::Retype(w, i, v) => {
            if let Some(o) = object_mut(envelope, *w) {
                if !o.is_empty() {
                    let n = i.index(o.len());
                    if let Some((_, slot)) = o.iter_mut().nth(n) {
                        *slot = if same_type(slot, v) {
                            json!([v.clone()])
                        } else {
                            v.clone()
                        };
                    }
                }
            }
        }
        Mutation::Params(v) => {
            envelope.insert("params".into(), v.clone());
        }
        Mutation::Id(v) => {
            envelope.insert("id".into(), v.clone());
        }
        Mutation::Method(v) => {
            envelope.insert("method".into(), v.clone());
        }
        Mutation::Nest(depth) => {
            // As a raw token: a Value this deep would overflow the stack of
            // whatever walks it (serialising, dropping).
            let text = format!("{}{{}}{}", "[".repeat(*depth), "]".repeat(*depth));
            envelope.insert("params".into(), raw_token(&text));
        }
    }
}

/// Damage to a message's bytes after it is encoded.
#[derive(Debug, Clone)]
pub enum Garble {
    /// Cut at a point.
    Truncate(Index),
    /// A newline inside the message.
    Newline(Index),
    /// A carriage return before the final newline.
    Crlf,
    /// A UTF-8 byte-order mark first.
    Bom,
    /// Bytes that are not UTF-8: a lone continuation byte, a truncated
    /// sequence, an overlong encoding, a surrogate, a byte never valid.
    InvalidUtf8(Index, u8),
    /// A NUL byte.
    Nul(Index),
}

const INVALID_UTF8: &[&[u8]] = &[
    &[0x80],
    &[0xC3],
    &[0xC0, 0x80],
    &[0xED, 0xA0, 0x80],
    &[0xFF],
    &[0xF4, 0x90, 0x80, 0x80],
];

pub fn garble() -> BoxedStrategy<Garble> {
    prop_oneof![
        2 => any::<Index>().prop_map(Garble::Truncate),
        2 => any::<Index>().prop_map(Garble::Newline),
        1 => Just(Garble::Crlf),
        1 => Just(Garble::Bom),
        2 => (any::<Index>(), 0..INVALID_UTF8.len() as u8).prop_map(|(i, k)| Garble::InvalidUtf8(i, k)),
        1 => any::<Index>().prop_map(Garble::Nul),
    ]
    .boxed()
}

/// Applies `g` to `body`, the message's bytes without their line end (so a
/// cut or an insertion lands inside the message). `crlf` is set for `Crlf`.
pub fn damage(body: &mut Vec<u8>, g: &Garble, crlf: &mut bool) {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
    match g {
        Garble::Truncate(i) => {
            let n = at(i, body.len());
            body.truncate(n);
        }
        Garble::Newline(i) => {
            let n = at(i, body.len());
            body.insert(n, b'\n');
        }
        Garble::Crlf => *crlf = true,
        Garble::Bom => {
            body.splice(0..0, [0xEF, 0xBB, 0xBF]);
        }
        Garble::InvalidUtf8(i, k) => {
            let n = at(i, body.len());
            let bad = INVALID_UTF8[*k as usize % INVALID_UTF8.len()];
            body.splice(n..n, bad.iter().copied());
        }
        Garble::Nul(i) => {
            let n = at(i, body.len());
            body.insert(n, 0);
        }
    }
}

/// The messages generated inputs start from: the golden ones of the
/// corpus and the table, and those the run found (the messages of inputs
/// that drew a response state the target had not shown before). A snapshot:
/// an input is rebuilt from the pool it was generated with, so shrinking
/// and replaying it give the same bytes however the run's pool grew since.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    golden: std::sync::Arc<Vec<Value>>,
    found: std::sync::Arc<Vec<Value>>,
}

/// The most messages a run keeps as found.
pub const MAX_FOUND: usize = 1024;
/// The longest message a run keeps as found, in bytes of JSON.
const MAX_FOUND_BYTES: usize = 16 * 1024;

impl Pool {
    pub fn new(golden: Vec<Value>) -> Pool {
        Pool {
            golden: std::sync::Arc::new(golden),
            found: std::sync::Arc::default(),
        }
    }

    pub fn golden(&self) -> &[Value] {
        &self.golden
    }

    pub fn found(&self) -> &[Value] {
        &self.found
    }

    /// Adds the messages of an input that reached a new state: objects of
    /// a bounded size not in the pool already; false when none was new.
    pub fn add(&mut self, messages: Vec<Value>) -> bool {
        let mut added = false;
        for m in messages {
            if self.found.len() >= MAX_FOUND
                || !m.is_object()
                || serialize(&m, false).len() > MAX_FOUND_BYTES
                || self.golden.contains(&m)
                || self.found.contains(&m)
            {
                continue;
            }
            std::sync::Arc::make_mut(&mut self.found).push(m);
            added = true;
        }
        added
    }

    /// The message a base names, and whether it is a golden one (a found
    /// base with nothing found yet falls back on the golden messages).
    pub fn resolve(&self, base: &Base) -> (Value, bool) {
        let golden = |i: &Index| {
            self.golden
                .get(i.index(self.golden.len().max(1)))
                .cloned()
                .unwrap_or_else(|| json!({}))
        };
        match base {
            Base::Golden(i) => (golden(i), true),
            Base::Found(i) if self.found.is_empty() => (golden(i), true),
            Base::Found(i) => (self.found[i.index(self.found.len())].clone(), false),
        }
    }
}

/// Where a generated message starts.
#[derive(Debug, Clone)]
pub enum Base {
    /// A golden message.
    Golden(Index),
    /// A message the run found (state-guided: the run prefers what drew a
    /// new response).
    Found(Index),
}

/// One generated message: a message of the pool, changed.
#[derive(Debug, Clone)]
pub struct Message {
    pub base: Base,
    pub mutations: Vec<Mutation>,
    pub pretty: bool,
    pub garbles: Vec<Garble>,
    /// Padded to this many bytes (without the line end), around a limit.
    pub size: Option<usize>,
}

/// Messages built on a pool's messages. `sizes` are the limits to pad
/// around (each is tried one under, at and one over).
pub fn message(methods: Vec<String>, sizes: &[usize]) -> BoxedStrategy<Message> {
    let mut around: Vec<usize> = Vec::new();
    for s in sizes {
        around.extend([s.saturating_sub(1), *s, s + 1]);
    }
    let size = if around.is_empty() {
        Just(None).boxed()
    } else {
        prop_oneof![
            40 => Just(None),
            1 => select(around).prop_map(Some),
        ]
        .boxed()
    };
    (
        prop_oneof![
            3 => any::<Index>().prop_map(Base::Golden),
            2 => any::<Index>().prop_map(Base::Found),
        ],
        prop_oneof![
            2 => Just(vec![]),
            5 => prop::collection::vec(mutation(methods), 1..3),
        ],
        prop_oneof![12 => Just(false), 1 => Just(true)],
        prop_oneof![
            5 => Just(vec![]),
            2 => prop::collection::vec(garble(), 1..3),
        ],
        size,
    )
        .prop_map(|(base, mutations, pretty, garbles, size)| Message {
            base,
            mutations,
            pretty,
            garbles,
            size,
        })
        .boxed()
}

impl Message {
    /// True when the message is a golden one, unchanged.
    pub fn is_golden(&self, pool: &Pool) -> bool {
        self.mutations.is_empty()
            && self.garbles.is_empty()
            && !self.pretty
            && self.size.is_none()
            && pool.resolve(&self.base).1
    }

    /// The message as a JSON value, before encoding.
    pub fn value(&self, pool: &Pool) -> Value {
        let (mut v, _) = pool.resolve(&self.base);
        for m in &self.mutations {
            apply(&mut v, m);
        }
        v
    }

    /// The bytes of `v` (this message's value, perhaps adjusted by the
    /// protocol), padded and damaged, without a line end; and whether the
    /// line should end in CRLF.
    pub fn encode(&self, mut v: Value) -> (Vec<u8>, bool) {
        if let Some(size) = self.size {
            pad(&mut v, size, self.pretty);
        }
        let mut body = serialize(&v, self.pretty);
        let mut crlf = false;
        for g in &self.garbles {
            damage(&mut body, g, &mut crlf);
        }
        (body, crlf)
    }
}

/// Where the ids [`own_id`] gives start: clear of conform's own and of the
/// golden messages'.
pub const OWN_ID_BASE: u64 = 100_000;

/// Gives message `position` of input number `index` an id of its own when
/// its id is an integer the mutations did not choose (a golden or found
/// message's): ids then differ from one input to the next, so a target
/// that takes many inputs never sees a request id again.
pub fn own_id(v: &mut Value, m: &Message, index: u64, position: usize) {
    let chosen = m.mutations.iter().any(|x| matches!(x, Mutation::Id(_)));
    if let Some(id) = v.get_mut("id")
        && !chosen
        && (id.is_u64() || id.is_i64())
    {
        *id = json!(OWN_ID_BASE + index.saturating_mul(8) + position as u64);
    }
}

/// Adds a `pad` string field so the encoded message is `size` bytes (or as
/// close as the message allows).
fn pad(v: &mut Value, size: usize, pretty: bool) {
    let slot = match v {
        Value::Object(o) => match o.get_mut("params") {
            Some(Value::Object(p)) => p,
            _ => o,
        },
        _ => return,
    };
    slot.insert("pad".into(), Value::String(String::new()));
    let base = serialize(v, pretty).len();
    let fill = size.saturating_sub(base);
    if let Value::Object(o) = v {
        let slot = match o.get_mut("params") {
            Some(Value::Object(p)) if p.contains_key("pad") => p,
            _ => o,
        };
        slot.insert("pad".into(), Value::String("x".repeat(fill)));
    }
}

/// Where a write stops, and for how long.
#[derive(Debug, Clone)]
pub struct Pause {
    pub at: Index,
    pub ms: u64,
}

/// Pauses in the middle of a message's bytes: most inputs have none.
pub fn pauses() -> BoxedStrategy<Vec<Pause>> {
    prop_oneof![
        10 => Just(vec![]),
        1 => prop::collection::vec(
            (any::<Index>(), prop_oneof![4 => 1u64..5, 1 => 20u64..60])
                .prop_map(|(at, ms)| Pause { at, ms }),
            1..4,
        ),
    ]
    .boxed()
}

/// Pauses as byte offsets into a message of `len` bytes, in order.
pub fn pause_offsets(pauses: &[Pause], len: usize) -> Vec<(usize, u64)> {
    let mut out: Vec<(usize, u64)> = pauses
        .iter()
        .map(|p| (p.at.index(len.max(1)), p.ms))
        .collect();
    out.sort_by_key(|p| p.0);
    out
}

/// The step that writes `bytes`: as `raw` text when `text` allows it and
/// they are UTF-8 (the driver then expands templates in them), else as
/// `rawHex`; with the pauses, as byte offsets, in `pauses`.
pub fn write_step(bytes: Vec<u8>, pauses: &[Pause], text: bool) -> Map<String, Value> {
    let offsets: Vec<Value> = pause_offsets(pauses, bytes.len())
        .into_iter()
        .map(|(at, ms)| json!({"at": at, "ms": ms}))
        .collect();
    let mut step = Map::new();
    match String::from_utf8(bytes) {
        Ok(t) if text => step.insert("raw".into(), json!(t)),
        Ok(t) => step.insert("rawHex".into(), json!(hex(t.as_bytes()))),
        Err(e) => step.insert("rawHex".into(), json!(hex(e.as_bytes()))),
    };
    if !offsets.is_empty() {
        step.insert("pauses".into(), json!(offsets));
    }
    step
}

/// Hex pairs, as the case files write bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    out.extend(
        bytes
            .iter()
            .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]),
    );
    // Hex digits are ASCII.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_tokens_serialise_as_themselves() {
        let v = json!({"id": raw_token("1e400"), "s": raw_token("\"\\ud800\"")});
        assert_eq!(
            String::from_utf8(serialize(&v, false)).unwrap(),
            r#"{"id":1e400,"s":"\ud800"}"#
        );
    }

    #[test]
    fn padding_reaches_the_size() {
        for size in [200usize, 65_535, 65_536, 65_537] {
            let mut v = json!({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"a": 1}});
            pad(&mut v, size, false);
            assert_eq!(serialize(&v, false).len(), size);
        }
    }

    proptest! {
        #[test]
        fn damage_adds_at_most_four_bytes(body in prop::collection::vec(any::<u8>(), 0..40), g in garble()) {
            let mut crlf = false;
            let mut b = body.clone();
            damage(&mut b, &g, &mut crlf);
            prop_assert!(b.len() <= body.len() + 4);
            if let Garble::Truncate(_) = g {
                prop_assert!(body.starts_with(&b));
            }
        }
    }
}
