//! The golden messages a protocol's inputs start from, built once for the
//! three: every `send` step of the suite's cases, as the driver would write
//! it, then a message for each method of the protocol's table the corpus
//! does not send. Each protocol says which sends it keeps and what it does
//! to their params (its templates), nothing more.

use crate::case::{Case, Dialect};
use crate::step::{Action, Language, Outgoing, Step};
use serde_json::{Map, Value, json};

/// The most golden messages of one method the corpus gives.
pub const PER_METHOD: usize = 3;

/// Golden messages, distinct, in the order they were added.
#[derive(Debug, Clone)]
pub struct Seeds {
    messages: Vec<Value>,
    next_id: i64,
}

impl Seeds {
    /// Request ids count from `first_id` (clear of conform's own).
    pub fn new(first_id: i64) -> Seeds {
        Seeds {
            messages: Vec::new(),
            next_id: first_id,
        }
    }

    /// A JSON-RPC 2.0 request (with `id`, else the next id) or a
    /// notification, unless the same message is there already.
    pub fn push(&mut self, method: &str, params: Value, id: Option<Value>, notification: bool) {
        let mut m = Map::new();
        m.insert("jsonrpc".into(), json!("2.0"));
        if !notification {
            self.next_id += 1;
            m.insert("id".into(), id.unwrap_or(json!(self.next_id)));
        }
        m.insert("method".into(), json!(method));
        m.insert("params".into(), params);
        self.add(Value::Object(m));
    }

    /// Any message, unless it is there already.
    pub fn add(&mut self, message: Value) {
        if !self.messages.contains(&message) {
            self.messages.push(message);
        }
    }

    /// Each `send` of `cases` (steps, then `finally`) that `keep` returns
    /// params for, with its own id when it has one without a template; at
    /// most [`PER_METHOD`] of one method, so each method is fuzzed about as
    /// often as the others.
    pub fn sends<D, L>(
        &mut self,
        cases: &[Case<D>],
        mut keep: impl FnMut(&Outgoing) -> Option<Value>,
    ) where
        D: Dialect<Step = Step<L>>,
        L: Language,
    {
        for case in cases {
            for step in case.steps.iter().chain(&case.finally) {
                let Action::Send(send) = &step.action else {
                    continue;
                };
                let so_far = self
                    .messages
                    .iter()
                    .filter(|m| m["method"] == send.method)
                    .count();
                if so_far >= PER_METHOD {
                    continue;
                }
                let Some(params) = keep(send) else {
                    continue;
                };
                let id = send.id.clone().filter(|id| !id.to_string().contains("${"));
                self.push(&send.method, params, id, send.notification);
            }
        }
    }

    /// Whether a message of `method` is there.
    pub fn has(&self, method: &str) -> bool {
        self.messages.iter().any(|m| m["method"] == method)
    }

    pub fn into_messages(self) -> Vec<Value> {
        self.messages
    }
}

/// Params with no template other than those `allowed` (the driver expands
/// those against the live target).
pub fn without_templates(params: &Value, allowed: &[&str]) -> Option<Value> {
    let mut text = params.to_string();
    for a in allowed {
        text = text.replace(a, "");
    }
    (!text.contains("${")).then(|| params.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_distinct_requests_and_notifications_with_counted_ids() {
        let mut s = Seeds::new(100);
        s.push("a", json!({}), None, false);
        s.push("a", json!({}), None, false);
        s.push("b", json!({"x": 1}), Some(json!("own")), false);
        s.push("c", json!({}), None, true);
        s.add(json!({"jsonrpc": "2.0", "method": "c", "params": {}}));
        let m = s.into_messages();
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[0]["id"], 101);
        assert_eq!(
            m[1]["id"], 102,
            "the same method with another id is another message"
        );
        assert_eq!(m[2]["id"], "own");
        assert!(m[3].get("id").is_none());
    }

    #[test]
    fn templates_keep_params_out_unless_allowed() {
        let p = json!({"cwd": "${workspace}", "n": 1});
        assert_eq!(without_templates(&p, &[]), None);
        assert_eq!(without_templates(&p, &["${workspace}"]), Some(p));
    }
}
