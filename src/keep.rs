//! What a case keeps of a target's messages for its later checks, bounded
//! in bytes as well as in number. Sans-IO.
//!
//! A case keeps the messages a target sends it unasked (ACP session updates
//! and agent requests, a cwx host's notifications) to match them against
//! its expectations afterwards. A target may send any number of them, of
//! any size up to the message limit. The first [`KEEP_BYTES`] are kept
//! whole; past that, a message is kept in outline: its shorter fields
//! (numbers, booleans, strings up to [`OUTLINE_STRING`] bytes), nested
//! ones too, up to [`OUTLINE_BYTES`] in all, enough to tell which kind of
//! message it was. Past [`MAX_KEPT`] messages, none is kept. A failing case
//! says when it kept messages in part ([`Keep::note`]), since a check may
//! have looked for what was left out.

use serde_json::{Map, Value};

/// Bytes of whole messages a case keeps.
pub const KEEP_BYTES: usize = 8 << 20;
/// Messages a case keeps, whole or in outline.
pub const MAX_KEPT: usize = 10_000;
/// The size of a message's outline, at most.
pub const OUTLINE_BYTES: usize = 512;
/// The longest string an outline keeps.
pub const OUTLINE_STRING: usize = 256;

/// The account of what one case kept.
#[derive(Debug, Default)]
pub struct Keep {
    bytes: usize,
    kept: usize,
    outlined: usize,
    dropped: usize,
}

impl Keep {
    /// What to keep of `value`: the whole of it, its outline, or nothing.
    pub fn admit(&mut self, value: Value) -> Option<Value> {
        if self.kept >= MAX_KEPT {
            self.dropped += 1;
            return None;
        }
        self.kept += 1;
        let size = size(&value);
        if self.bytes + size <= KEEP_BYTES {
            self.bytes += size;
            return Some(value);
        }
        self.outlined += 1;
        let mut left = OUTLINE_BYTES;
        Some(outline(&value, &mut left).unwrap_or(Value::Null))
    }

    /// For a failing case's report: what was not kept whole, if anything.
    pub fn note(&self) -> Option<String> {
        if self.outlined == 0 && self.dropped == 0 {
            return None;
        }
        Some(format!(
            "(conform kept the first {} MiB of the target's unasked messages whole, {} more in outline only and {} not at all: a check may have missed what was left out)",
            KEEP_BYTES >> 20,
            self.outlined,
            self.dropped
        ))
    }
}

/// About the size of `value` written as JSON, in bytes.
pub fn size(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|v| size(v) + 1).sum::<usize>(),
        Value::Object(o) => 2 + o.iter().map(|(k, v)| k.len() + 4 + size(v)).sum::<usize>(),
    }
}

/// `value` with its longer strings and whatever passes `left` bytes left
/// out; `None` when nothing of it fits.
fn outline(value: &Value, left: &mut usize) -> Option<Value> {
    let take = |cost: usize, left: &mut usize| {
        let fits = cost <= *left;
        if fits {
            *left -= cost;
        }
        fits
    };
    match value {
        Value::String(s) if s.len() > OUTLINE_STRING => None,
        Value::Array(a) => {
            if !take(2, left) {
                return None;
            }
            let mut out = Vec::new();
            for v in a {
                if *left == 0 {
                    break;
                }
                out.extend(outline(v, left));
            }
            Some(Value::Array(out))
        }
        Value::Object(o) => {
            if !take(2, left) {
                return None;
            }
            let mut out = Map::new();
            for (k, v) in o {
                if !take(k.len() + 4, left) {
                    break;
                }
                if let Some(v) = outline(v, left) {
                    out.insert(k.clone(), v);
                }
            }
            Some(Value::Object(out))
        }
        scalar => take(size(scalar), left).then(|| scalar.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_kept_whole_up_to_the_bytes_then_in_outline() {
        let mut keep = Keep::default();
        let big = "x".repeat(1 << 20);
        let update = |text: &str| json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}});
        for _ in 0..7 {
            assert_eq!(keep.admit(update(&big)), Some(update(&big)));
        }
        assert_eq!(keep.note(), None);
        // The eighth MiB does not fit with the keys around it.
        let outlined = keep.admit(update(&big)).unwrap();
        assert_eq!(
            outlined,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
        );
        // A small message still fits whole.
        assert_eq!(keep.admit(json!({"a": 1})), Some(json!({"a": 1})));
        assert!(keep.note().unwrap().contains("1 more in outline"));
    }

    #[test]
    fn an_outline_is_bounded_however_wide_or_deep_the_message() {
        let wide = Value::Array((0..100_000).map(|i| json!(i)).collect());
        let deep = (0..100).fold(json!(1), |v, _| json!({"k": [v, "s"]}));
        for v in [wide, deep] {
            let mut left = OUTLINE_BYTES;
            let o = outline(&v, &mut left).unwrap();
            assert!(size(&o) <= OUTLINE_BYTES * 2, "{}", size(&o));
        }
    }

    #[test]
    fn past_the_count_nothing_is_kept() {
        let mut keep = Keep::default();
        for _ in 0..MAX_KEPT {
            assert!(keep.admit(json!(1)).is_some());
        }
        assert_eq!(keep.admit(json!(1)), None);
        assert!(keep.note().unwrap().contains("1 not at all"));
    }
}
