//! The response states a target shows, as AFLNet keeps its servers'
//! response codes: for each request an input carried, which method it was
//! (a method of the protocol's table, or what kind of other), how the
//! target answered (a result, an error and its code, nothing), under which
//! reading of the bytes (`fuzz::readings`), in which phase of the session;
//! and what the target sent of its own accord, and the findings. The run
//! counts them, prefers inputs that reached a state not seen before (their
//! messages join the pool new inputs start from), and prints the map at
//! the end. Read from the case's own bytes and the case's transcript, by
//! structure: never from a message's words.

use super::readings::{How, Id, Readings};
use crate::outcome::{CaseResult, Direction};
use serde_json::Value;
use std::collections::BTreeMap;

/// How the protocol frames its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One message a line (agent-socket, ACP).
    Lines,
    /// `CWX1` frames (cwx).
    Frames,
}

/// The states a run reached, with how many inputs reached each.
#[derive(Debug, Clone, Default)]
pub struct StateMap {
    counts: BTreeMap<String, u64>,
}

impl StateMap {
    /// Counts `states`; true when one of them is new.
    pub fn record(&mut self, states: Vec<String>) -> bool {
        let mut new = false;
        for s in states {
            let n = self.counts.entry(s).or_insert(0);
            new |= *n == 0;
            *n += 1;
        }
        new
    }

    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// A request an input carried, as one reading has it.
struct Sent {
    id: Id,
    method: String,
    how: How,
}

/// The most bytes of an input the state map reads: the requests of a
/// longer one (a message padded to a limit) are named by their size alone.
const MAX_READ: usize = 128 * 1024;

/// The bytes a case's write steps carry, in order; `None` past [`MAX_READ`].
fn written(case: &Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for step in case["steps"].as_array().into_iter().flatten() {
        if let Some(Value::String(t)) = step.get("raw") {
            out.extend_from_slice(t.as_bytes());
        } else if let Some(Value::String(h)) = step.get("rawHex") {
            if out.len() + h.len() / 2 > MAX_READ {
                return None;
            }
            out.extend(crate::case::hex_bytes(h).unwrap_or_default());
        }
        if out.len() > MAX_READ {
            return None;
        }
    }
    Some(out)
}

/// The messages in `bytes`: lines, or whole frames' payloads.
fn messages(bytes: &[u8], framing: Framing) -> Vec<Vec<u8>> {
    match framing {
        Framing::Lines => bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .take(64)
            .map(<[u8]>::to_vec)
            .collect(),
        Framing::Frames => match crate::protocols::cwx::fuzz::model(bytes) {
            crate::protocols::cwx::fuzz::Read::Whole(p) => p,
            _ => Vec::new(),
        },
    }
}

/// A method as the state map names it: the table's, or its kind.
fn method_name(v: Option<&Value>, known: &dyn Fn(&str) -> bool) -> String {
    match v {
        Some(Value::String(m)) if known(m) => m.clone(),
        Some(Value::String(_)) => "(a method no table has)".into(),
        Some(_) => "(a method that is not a string)".into(),
        None => "(no method)".into(),
    }
}

/// An answer as the state map names it.
fn answer(o: &serde_json::Map<String, Value>) -> String {
    match (o.get("result"), o.get("error")) {
        (Some(_), None) => "result".into(),
        (None, Some(e)) => match e.get("code").and_then(Value::as_i64) {
            Some(code) => format!("error {code}"),
            None => "error (no integer code)".into(),
        },
        _ => "(neither result nor error, or both)".into(),
    }
}

/// The states one input reached. `phase` is where the session stood when
/// the input came (the case's setup); `known` tells a method of the
/// protocol's table.
pub fn of(
    case: &Value,
    result: &CaseResult,
    framing: Framing,
    phase: &str,
    known: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let mut sent: Vec<Sent> = Vec::new();
    let mut states = Vec::new();
    let bytes = written(case).unwrap_or_else(|| {
        states.push(format!("[{phase}] an input over {} KiB", MAX_READ / 1024));
        Vec::new()
    });
    for m in messages(&bytes, framing) {
        let Some(r) = Readings::of(&m) else { continue };
        for o in &r.objects {
            // A null id is a request's too ("MUST contain a String, Number,
            // or NULL value"), when the message has a method.
            if let Some(id) = &o.id
                && (!id.is_null() || o.members.contains_key("method"))
            {
                sent.push(Sent {
                    id: id.clone(),
                    method: method_name(o.members.get("method"), known),
                    how: o.how,
                });
            }
        }
    }
    let mut answered = vec![false; sent.len()];
    for entry in &result.transcript {
        if entry.dir != Direction::Received {
            continue;
        }
        let Ok(Value::Object(o)) = crate::jsonrpc::parse_json(entry.data.as_bytes()) else {
            states.push(format!(
                "[{phase}] the target wrote something conform could not read as a message"
            ));
            continue;
        };
        if o.contains_key("method") {
            states.push(format!(
                "[{phase}] the target sends {}",
                method_name(o.get("method"), known)
            ));
            continue;
        }
        let id = o.get("id").map(Id::from_value).unwrap_or(Id::Null);
        // A null-id error may be about any line no reader could take; a
        // null-id result answers a request sent with a null id.
        let request = (!id.is_null() || o.contains_key("result"))
            .then(|| (0..sent.len()).find(|i| sent[*i].id == id && !answered[*i]))
            .flatten();
        if id.is_null() && request.is_none() {
            states.push(format!("[{phase}] (null id) → {}", answer(&o)));
            continue;
        }
        // An id none of the input's requests has answers conform's own.
        if let Some(i) = request {
            let s = &sent[i];
            answered[i] = true;
            let reading = if s.how == How::AsWritten {
                String::new()
            } else {
                format!(" (the request read {})", s.how.describe())
            };
            let null = if id.is_null() { " (null id)" } else { "" };
            states.push(format!(
                "[{phase}] {}{null} → {}{reading}",
                s.method,
                answer(&o)
            ));
        }
    }
    // Several readings of one request: answered under one, the others
    // are no requests left unanswered.
    for (i, s) in sent.iter().enumerate() {
        if !answered[i] && s.how == How::AsWritten && !s.id.is_null() {
            states.push(format!("[{phase}] {} → no answer", s.method));
        }
    }
    for f in &result.findings {
        let (requirement, kind) = f.key();
        states.push(format!(
            "[{phase}] finding {requirement} {}",
            super::kind_name(kind)
        ));
    }
    states.sort();
    states.dedup();
    states
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::TranscriptEntry;
    use serde_json::json;

    fn received(data: &str) -> TranscriptEntry {
        TranscriptEntry {
            t_ms: 0,
            conn: "stdio".into(),
            dir: Direction::Received,
            data: data.into(),
        }
    }

    #[test]
    fn states_name_the_method_the_answer_and_the_reading() {
        let case = json!({"steps": [{"raw": "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"session/new\",\"params\":{}}\n\u{feff}{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"zz\"}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\"}\n"}, {"probe": true}]});
        let mut r = crate::fuzz::invalid_case(&json!("x"), String::new());
        r.transcript = vec![
            received(r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"m"}}"#),
            received(r#"{"jsonrpc":"2.0","id":6.0,"error":{"code":-32601,"message":"m"}}"#),
            received(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"probe"}}"#),
            received(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#),
        ];
        let known = |m: &str| ["session/new", "initialize", "session/update"].contains(&m);
        let states = of(&case, &r, Framing::Lines, "initialize", &known);
        assert_eq!(
            states,
            vec![
                "[initialize] (a method no table has) → error -32601 (the request read with its byte-order mark ignored (RFC 8259 8.1))",
                "[initialize] initialize → no answer",
                "[initialize] session/new → error -32602",
                "[initialize] the target sends session/update",
            ]
        );
        // A null-id request: its result is its method's, an error with a
        // null id may be any line's.
        let case = json!({"steps": [{"raw": "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"session/new\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"initialize\"}\n"}]});
        r.transcript = vec![
            received(r#"{"jsonrpc":"2.0","id":null,"result":{"sessionId":"s"}}"#),
            received(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"m"}}"#),
        ];
        assert_eq!(
            of(&case, &r, Framing::Lines, "initialize", &known),
            vec![
                "[initialize] (null id) → error -32602",
                "[initialize] session/new (null id) → result",
            ]
        );
        let mut map = StateMap::default();
        assert!(map.record(states.clone()));
        assert!(!map.record(states), "the same states again are not new");
    }
}
