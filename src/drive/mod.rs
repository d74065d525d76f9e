//! What the drivers of every suite share above the transport: the stdio
//! session of the line and frame protocols, how long it waits (`patience`), and judging an answer against a
//! step's expectation.

pub mod patience;
pub mod stdio;

use crate::evidence::{Finding, Kind};
use crate::matcher::{self, Vars};
use crate::step::ReplyRule;
use serde_json::Value;

/// What `answer` breaks of a step that wants `rule`, given the (expanded)
/// pattern for the kind it is (the step's result pattern for a result, its
/// error pattern for an error): the kind of answer first, then the pattern.
/// `vars` takes the pattern's captures.
pub fn judge_answer(
    answer: &Result<Value, Value>,
    rule: ReplyRule,
    pattern: Option<&Value>,
    vars: &mut Vars,
) -> Vec<Finding> {
    let mut found = Vec::new();
    match (answer, rule) {
        (Err(e), ReplyRule::Result) => found.push(
            Finding::new(
                None,
                Kind::WrongKind,
                format!("expected a result, got the error {e}"),
            )
            .saw("a result", e.to_string())
            .by("reply"),
        ),
        (Ok(r), ReplyRule::Error) => found.push(
            Finding::new(
                None,
                Kind::WrongKind,
                format!("expected an error, got the result {}", matcher::brief(r)),
            )
            .saw("an error", matcher::brief(r))
            .by("reply"),
        ),
        _ => {}
    }
    if found.is_empty() && rule != ReplyRule::Optional {
        let (value, path) = match answer {
            Ok(r) => (r, "result"),
            Err(e) => (e, "error"),
        };
        if let Some(p) = pattern {
            let mut mismatches = Vec::new();
            matcher::match_value(p, Some(value), path, vars, &mut mismatches);
            found.extend(
                mismatches
                    .into_iter()
                    .map(|m| Finding::of_pattern(m, path, path)),
            );
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kind_of_answer_comes_before_its_pattern() {
        let mut vars = Vars::default();
        let err = Err(json!({"code": -32601, "message": "no"}));
        let found = judge_answer(&err, ReplyRule::Result, None, &mut vars);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, Kind::WrongKind);
        let ok = Ok(json!({"a": 2}));
        let found = judge_answer(&ok, ReplyRule::Any, Some(&json!({"a": 1})), &mut vars);
        assert_eq!(found[0].kind, Kind::Mismatch);
        assert_eq!(found[0].message, "result.a: expected 1, got 2");
        assert!(
            judge_answer(&ok, ReplyRule::Optional, Some(&json!({"a": 1})), &mut vars).is_empty()
        );
    }
}
