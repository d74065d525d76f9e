//! What a driver saw in one case, typed, and the one grader that turns it
//! into the case's outcome and message for every suite.
//!
//! A driver records [`Evidence`]: its [`Finding`]s (a requirement broken,
//! of a [`Kind`], with what was expected and what came, and where in the
//! transcript), what it observed, why the case did not apply, or why conform
//! could not run it. [`grade`] grades the findings at their levels (the
//! case's for the case's own checks, the catalogue's for a rule the finding
//! names), and renders the message from them. Nothing reads a verdict back
//! from a message: the fuzzer classifies by [`Finding::key`].

use crate::case::Level;
use crate::outcome::{Outcome, SkipKind};
use crate::requirements::Catalogue;
use serde::Serialize;

/// What kind of deviation a finding is, whatever the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// An answer, message or exit that was due did not come.
    Missing,
    /// Something came that must not (an answer where none is due, a call
    /// the capabilities rule out, a second answer).
    Unexpected,
    /// An answer of the wrong kind: an error for a result, or the reverse.
    WrongKind,
    /// A value is not what the case expects.
    Mismatch,
    /// A message breaks its method's documented shape or the schema.
    Shape,
    /// A JSON-RPC envelope rule: `jsonrpc`, the id echoed, result or error.
    Envelope,
    /// Bytes that are not a message: not JSON, not UTF-8, cut short.
    Malformed,
    /// The framing: one compact line and nothing after it, a whole frame.
    Framing,
    /// The target stopped serving after the case's input.
    Stopped,
    /// The target's process: how and when it exited.
    Process,
    /// conform could not reach the target: connect or write.
    Transport,
    /// Another rule of the protocol, checked on what the target did.
    Rule,
}

/// One requirement broken.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The requirement the finding names; `None` for the case's own checks,
    /// which break the case's requirements at the case's level.
    pub requirement: Option<String>,
    /// The level it is graded at (set by the grader).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
    pub kind: Kind,
    /// What went wrong, as the report says it.
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
    /// The transcript entry the finding is about, where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<usize>,
    /// A set-up step of the case failed (its handshake, its session): the
    /// case fails, but no requirement it lists is the one broken, so the
    /// certificate counts it against none.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub setup: bool,
    /// What another finding of the case already explains: a check that
    /// found nothing after the exchange had ended at a protocol error the
    /// watch names, an answer missing because it came under another id, a
    /// pattern's mismatch in a field the shape check found broken. The
    /// case fails, but the certificate counts it against no requirement.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub consequence: bool,
    /// Which of the case's own checks found it (`reply`, `result`,
    /// `noRequests`, a named check...), for the case's `charges` to say
    /// which requirements it breaks; `None` for a rule's finding.
    #[serde(skip)]
    pub check: Option<String>,
    /// The requirements the case charges this finding's check with (its
    /// `charges`); empty when the case charges it to all it lists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub charged: Vec<String>,
}

impl Finding {
    pub fn new(requirement: Option<&str>, kind: Kind, message: impl Into<String>) -> Finding {
        Finding {
            requirement: requirement.map(str::to_owned),
            level: None,
            kind,
            message: message.into(),
            expected: None,
            actual: None,
            at: None,
            setup: false,
            consequence: false,
            check: None,
            charged: vec![],
        }
    }

    /// Found by the case's own check `check` (see [`Finding::check`]).
    pub fn by(mut self, check: impl Into<String>) -> Finding {
        self.check = Some(check.into());
        self
    }

    /// With what was expected and what came instead.
    pub fn saw(mut self, expected: impl Into<String>, actual: impl Into<String>) -> Finding {
        self.expected = Some(expected.into());
        self.actual = Some(actual.into());
        self
    }

    /// Found by the case's own check `check`, in place.
    pub fn found_by(&mut self, check: &str) -> &mut Finding {
        self.check = Some(check.to_owned());
        self
    }

    /// Adds what was expected and what came instead, in place.
    pub fn seen(&mut self, expected: impl Into<String>, actual: impl Into<String>) -> &mut Finding {
        self.expected = Some(expected.into());
        self.actual = Some(actual.into());
        self
    }

    /// About transcript entry `at`.
    pub fn at(mut self, at: Option<usize>) -> Finding {
        self.at = at;
        self
    }

    /// What tells one finding from another: its requirement (`case` for the
    /// case's own checks) and its kind.
    pub fn key(&self) -> (String, Kind) {
        (
            self.requirement.clone().unwrap_or_else(|| "case".into()),
            self.kind,
        )
    }
}

impl Finding {
    /// What `check` found of a pattern matched at `root`: named by the
    /// field of `root` the mismatch is in (`result:protocol` for
    /// `result.protocol.min`), so a case may charge each field to the rule
    /// that field answers; a mismatch of `root` itself keeps the bare name.
    pub fn of_pattern(m: crate::matcher::Mismatch, check: &str, root: &str) -> Finding {
        let name = Finding::check_of_field(check, &m.path, root);
        Finding::from(m).by(name)
    }

    /// The name of `check`'s part that looked at `path` under `root`:
    /// `check:field` for the first field of `root` on the path, `check` for
    /// `root` itself.
    pub fn check_of_field(check: &str, path: &str, root: &str) -> String {
        match path
            .strip_prefix(root)
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|rest| rest.split(['.', '[']).next())
            .filter(|f| !f.is_empty())
        {
            Some(field) => format!("{check}:{field}"),
            None => check.to_owned(),
        }
    }
}

/// A value that differs from the case's pattern: a case's own finding.
impl From<crate::matcher::Mismatch> for Finding {
    fn from(m: crate::matcher::Mismatch) -> Finding {
        Finding {
            requirement: None,
            level: None,
            kind: Kind::Mismatch,
            message: m.to_string(),
            expected: m.expected,
            actual: m.actual,
            at: None,
            setup: false,
            consequence: false,
            check: None,
            charged: vec![],
        }
    }
}

/// Why a case did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub why: String,
    pub kind: SkipKind,
}

/// Everything a driver records of one case.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub findings: Vec<Finding>,
    /// What the target did, worth saying where the case is information or
    /// did not pass.
    pub observations: Vec<String>,
    /// Worth saying whatever the outcome, a pass included: checks the case
    /// marks as information only.
    pub notes: Vec<String>,
    pub skip: Option<Skip>,
    /// Why conform itself could not run the case.
    pub error: Option<String>,
    /// Lines that end the message of a case with findings: what was kept
    /// only in part, the target's stderr.
    pub appendix: Vec<String>,
    /// What the target did, as one sentence: the last line of every
    /// message but a pass's.
    pub summary: Option<String>,
    /// Requirements whose triggering behaviour the case observed: they
    /// count as exercised whatever the case's outcome.
    pub exercised: std::collections::BTreeSet<String>,
}

impl Evidence {
    /// The evidence of a case conform could not run.
    pub fn failed_to_run(why: impl Into<String>) -> Evidence {
        let mut ev = Evidence::default();
        ev.error(why);
        ev
    }

    /// Records a finding and returns it, to add what was expected and seen.
    pub fn push(&mut self, finding: Finding) -> &mut Finding {
        self.findings.push(finding);
        self.findings.last_mut().expect("just pushed")
    }

    /// A case's own check failed.
    pub fn fail(&mut self, kind: Kind, message: impl Into<String>) -> &mut Finding {
        self.push(Finding::new(None, kind, message))
    }

    /// A rule the finding names was broken (graded at its catalogue level).
    pub fn broke(
        &mut self,
        requirement: &str,
        kind: Kind,
        message: impl Into<String>,
    ) -> &mut Finding {
        self.push(Finding::new(Some(requirement), kind, message))
    }

    /// A set-up step of the case failed: graded as the case's own check,
    /// counted against none of its requirements.
    pub fn setup_failed(&mut self, kind: Kind, message: impl Into<String>) -> &mut Finding {
        let f = self.push(Finding::new(None, kind, message));
        f.setup = true;
        f
    }

    pub fn observe(&mut self, what: impl Into<String>) {
        self.observations.push(what.into());
    }

    /// The case does not apply; the first reason given stands.
    pub fn skip(&mut self, why: impl Into<String>, kind: SkipKind) {
        if self.skip.is_none() {
            self.skip = Some(Skip {
                why: why.into(),
                kind,
            });
        }
    }

    /// conform could not run the case; the first reason given stands.
    pub fn error(&mut self, why: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(why.into());
        }
    }

    /// Whether the case's run should stop: it broke, errored or stopped applying.
    pub fn stopped(&self) -> bool {
        !self.findings.is_empty() || self.error.is_some() || self.skip.is_some()
    }
}

/// A case's grade.
#[derive(Debug, Clone, PartialEq)]
pub struct Graded {
    pub outcome: Outcome,
    pub message: String,
    pub skip_kind: Option<SkipKind>,
    /// The findings with their levels.
    pub findings: Vec<Finding>,
}

/// Grades a case at `level` from its evidence: each finding at its level
/// (the case's for its own checks, the catalogue's for a rule it names, a
/// MUST when the catalogue does not have it), the worst one deciding; with
/// no finding, a skip is a skip and the rest a pass (or information, for a
/// case at that level). The message says why, for anything but a pass.
pub fn grade(level: Level, evidence: Evidence, catalogue: &Catalogue, strict: bool) -> Graded {
    let Evidence {
        mut findings,
        observations,
        notes,
        skip,
        error,
        appendix,
        summary,
        exercised: _,
    } = evidence;
    if let Some(e) = error {
        return Graded {
            outcome: Outcome::Error,
            message: e,
            skip_kind: None,
            findings,
        };
    }
    for f in &mut findings {
        f.level = Some(match &f.requirement {
            None => level,
            Some(r) => catalogue.get(r).map(|r| r.level).unwrap_or(Level::Must),
        });
    }
    let own = findings.iter().any(|f| f.requirement.is_none());
    // A named rule's grade is never a pass, so it always outranks a skip.
    let mut outcome = if own {
        Outcome::grade(level, true, strict)
    } else if skip.is_some() {
        Outcome::Skip
    } else {
        Outcome::grade(level, false, strict)
    };
    for f in findings.iter().filter(|f| f.requirement.is_some()) {
        let graded = Outcome::grade(f.level.unwrap_or(Level::Must), true, strict);
        if graded.severity() > outcome.severity() {
            outcome = graded;
        }
    }
    let mut lines: Vec<String> = Vec::new();
    match outcome {
        Outcome::Pass | Outcome::Error => lines.extend(notes),
        Outcome::Skip => {
            lines.extend(skip.as_ref().map(|s| s.why.clone()));
            lines.extend(notes);
        }
        Outcome::Info if findings.is_empty() => {
            if !observations.is_empty() {
                lines.push(observations.join("; "));
            }
            lines.extend(notes);
        }
        _ => {
            if level == Level::Info && !observations.is_empty() {
                lines.push(observations.join("; "));
            }
            lines.extend(findings.iter().map(render));
            if let Some(s) = &skip {
                lines.push(format!("(the case then stopped: {})", s.why));
            }
            lines.extend(notes);
            lines.extend(appendix);
        }
    }
    if outcome != Outcome::Pass || !lines.is_empty() {
        lines.extend(summary);
    }
    Graded {
        outcome,
        message: lines.join("\n").trim().to_owned(),
        skip_kind: (outcome == Outcome::Skip)
            .then(|| skip.map(|s| s.kind))
            .flatten(),
        findings,
    }
}

/// A finding as the message shows it: a rule it names in brackets, with
/// its level.
fn render(f: &Finding) -> String {
    match (&f.requirement, f.level) {
        (Some(r), Some(level)) => format!("[{} {r}] {}", level.as_str(), f.message),
        _ => f.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Protocol;

    fn catalogue() -> &'static Catalogue {
        Protocol::Acp.catalogue()
    }

    #[test]
    fn a_check_names_the_field_it_looked_at() {
        assert_eq!(
            Finding::check_of_field("result", "result.protocol.min", "result"),
            "result:protocol"
        );
        assert_eq!(
            Finding::check_of_field("shape", "result.tools[2].name", "result"),
            "shape:tools"
        );
        assert_eq!(
            Finding::check_of_field("result", "params.tier", "params"),
            "result:tier"
        );
        assert_eq!(
            Finding::check_of_field("result", "result", "result"),
            "result"
        );
        assert_eq!(
            Finding::check_of_field("result", "resultant.x", "result"),
            "result"
        );
        assert_eq!(Finding::check_of_field("shape", "", "result"), "shape");
    }

    #[test]
    fn the_case_level_grades_its_own_checks_and_the_catalogue_a_named_rule() {
        let mut e = Evidence::default();
        e.fail(Kind::Mismatch, "result.x: expected 1, got 2")
            .expected = Some("1".into());
        let g = grade(Level::Should, e.clone(), catalogue(), false);
        assert_eq!(g.outcome, Outcome::Warn);
        assert_eq!(g.message, "result.x: expected 1, got 2");
        assert_eq!(g.findings[0].level, Some(Level::Should));
        assert_eq!(
            grade(Level::Should, e, catalogue(), true).outcome,
            Outcome::Fail
        );

        let mut e = Evidence::default();
        e.broke("acp.jsonrpc.envelope", Kind::Envelope, "no jsonrpc");
        let g = grade(Level::Info, e, catalogue(), false);
        assert_eq!(g.outcome, Outcome::Fail, "a MUST rule fails an INFO case");
        assert_eq!(g.message, "[MUST acp.jsonrpc.envelope] no jsonrpc");
    }

    #[test]
    fn a_skip_is_a_skip_only_without_findings() {
        let mut e = Evidence::default();
        e.skip("no session", SkipKind::Outside);
        e.observe("seen");
        let g = grade(Level::Must, e.clone(), catalogue(), false);
        assert_eq!(
            (g.outcome, g.skip_kind),
            (Outcome::Skip, Some(SkipKind::Outside))
        );
        assert_eq!(g.message, "no session");
        e.fail(Kind::Missing, "no answer");
        let g = grade(Level::Must, e, catalogue(), false);
        assert_eq!(g.outcome, Outcome::Fail);
        assert_eq!(g.message, "no answer\n(the case then stopped: no session)");
        assert_eq!(g.skip_kind, None);
    }

    #[test]
    fn an_error_is_conforms_and_wins() {
        let mut e = Evidence::default();
        e.fail(Kind::Missing, "no answer");
        e.error("a template names nothing");
        let g = grade(Level::Must, e, catalogue(), false);
        assert_eq!(g.outcome, Outcome::Error);
        assert_eq!(g.message, "a template names nothing");
    }

    #[test]
    fn information_says_what_was_seen_and_notes_show_on_a_pass() {
        let mut e = Evidence::default();
        e.observe("a");
        e.observe("b");
        let g = grade(Level::Info, e, catalogue(), false);
        assert_eq!((g.outcome, g.message.as_str()), (Outcome::Info, "a; b"));
        let mut e = Evidence::default();
        e.notes.push("it exited 0".into());
        e.summary = Some("What the client did: x".into());
        let g = grade(Level::Must, e, catalogue(), false);
        assert_eq!(g.outcome, Outcome::Pass);
        assert_eq!(g.message, "it exited 0\nWhat the client did: x");
        let e = Evidence {
            summary: Some("What the client did: x".into()),
            ..Evidence::default()
        };
        assert_eq!(grade(Level::Must, e, catalogue(), false).message, "");
    }

    #[test]
    fn a_finding_is_keyed_by_its_requirement_and_kind() {
        let own = Finding::new(None, Kind::Stopped, "gone");
        assert_eq!(own.key(), ("case".into(), Kind::Stopped));
        let rule = Finding::new(Some("r"), Kind::Shape, "bad");
        assert_eq!(rule.key(), ("r".into(), Kind::Shape));
    }
}
