//! `--certify DIR`: a certification bundle, JSON and Markdown, that says who
//! tested what with which corpus, every requirement of the role under test
//! with its verdict and evidence, the waivers applied, and the verdict.
//!
//! The verdict is `conformant` only when the whole suite ran (no `--filter`
//! or `--shard`), the run passed (no unwaived failure, no error, no stale
//! waiver; SHOULDs count under `--strict`), and every MUST requirement that
//! has cases was exercised by at least one case that was not skipped, unless
//! every one of them was skipped because the target declared it out (a
//! capability it does not advertise): a certificate is never earned by
//! skipping for any other reason.

use crate::case::Level;
use crate::outcome::{Exercise, Outcome, RunReport, Verdict};
use crate::requirements::Catalogue;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// SHA-256 over the embedded corpus of `protocol_dir` and the `--case`
/// files, each as `path NUL contents NUL`, in path order.
pub fn corpus_digest(protocol_dir: &str, extra: &[(String, String)]) -> String {
    let mut files: Vec<(String, String)> = crate::corpus::files_under(protocol_dir)
        .map(|(p, t)| (p.to_owned(), t.to_owned()))
        .collect();
    files.extend(extra.iter().cloned());
    files.sort();
    let mut h = Sha256::new();
    for (path, text) in &files {
        h.update(path.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn requirement_verdict(outcomes: &[(Outcome, bool)]) -> &'static str {
    let any = |o: Outcome| outcomes.iter().any(|(x, _)| *x == o);
    if outcomes.is_empty() {
        "no-case"
    } else if outcomes
        .iter()
        .any(|(o, waived)| *o == Outcome::Fail && !waived)
    {
        "fail"
    } else if any(Outcome::Error) {
        "error"
    } else if any(Outcome::Fail) {
        "waived"
    } else if any(Outcome::Warn) {
        "warn"
    } else if any(Outcome::Pass) {
        "pass"
    } else if any(Outcome::Info) {
        "info"
    } else {
        "not-exercised"
    }
}

/// A case's message as evidence for `requirement`: what it found, and,
/// when it failed on something else, that this requirement is not charged.
fn evidence_message(c: &crate::outcome::CaseResult, requirement: &str, strict: bool) -> String {
    let message = crate::matcher::truncate(&c.message, 500);
    if c.outcome_for(requirement, strict).is_some() {
        return message;
    }
    let setup = c.findings.iter().any(|f| f.setup);
    let mut named: Vec<&str> = c
        .findings
        .iter()
        .flat_map(|f| f.requirement.iter().chain(&f.charged))
        .map(String::as_str)
        .collect();
    named.sort_unstable();
    named.dedup();
    let why = if setup && named.is_empty() {
        "its set-up failed".to_owned()
    } else {
        format!("its findings name {}", named.join(", "))
    };
    format!("(not counted against {requirement}: {why}) {message}")
}

/// The bundle of a finished run. `complete` is false when a filter or a
/// shard selected part of the suite.
pub fn bundle(
    report: &RunReport,
    catalogue: &Catalogue,
    watched: &[&str],
    digest: &str,
    complete: bool,
) -> Value {
    let mut requirements = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    let mut unexercised = Vec::new();
    for r in catalogue
        .requirements
        .iter()
        .filter(|r| r.role == report.role)
    {
        let cases: Vec<_> = report.cases.iter().filter(|c| c.touches(&r.id)).collect();
        // Each case's outcome for this requirement, from its typed findings
        // (`CaseResult::outcome_for`): a case that failed on another
        // requirement's finding, or on its set-up, does not fail this one.
        let outcomes: Vec<(Outcome, bool)> = cases
            .iter()
            .filter_map(|c| {
                let o = c.outcome_for(&r.id, report.strict)?;
                Some((o, report.waivers.contains_key(&c.id)))
            })
            .collect();
        // Cases that cite it but failed on something else say nothing of
        // it: it was not exercised, though it has cases.
        let mut verdict = match requirement_verdict(&outcomes) {
            "no-case" if !cases.is_empty() => "not-exercised",
            v => v,
        };
        if verdict == "not-exercised" {
            match report.exercise_of(&r.id, watched) {
                Some(Exercise::NotApplicable) => verdict = "not-applicable",
                // Checked on every message of the cases that did run (a
                // breach fails the case it happens in).
                Some(Exercise::Exercised) => verdict = "watched",
                _ => {}
            }
        }
        if verdict == "not-exercised" && r.level == Level::Must {
            unexercised.push(r.id.clone());
        }
        let mut entry = json!({
            "id": r.id,
            "level": r.level,
            "source": r.source,
            "quote": r.quote,
            "verdict": verdict,
            "no_case": if cases.is_empty() { r.no_case.clone() } else { None },

            "evidence": cases.iter().map(|c| json!({
                "case": c.id,
                "outcome": c.outcome,
                "waiver": report.waivers.get(&c.id),
                "message": evidence_message(c, &r.id, report.strict),
            })).collect::<Vec<_>>(),
        });
        // A baseline may accept that a run cannot exercise a MUST; a
        // certificate does not, but it shows the reason.
        if let Some(w) = report
            .unexercised
            .iter()
            .find(|u| u.requirement == r.id)
            .and_then(|u| u.waiver.clone())
        {
            entry["waiver"] = json!(w);
        }
        requirements.push(entry);
    }
    if !complete {
        reasons.push("only part of the suite was selected (--filter or --shard)".into());
    }
    if let Some(i) = &report.interrupted {
        reasons.push(format!(
            "the run was interrupted by {}: {} selected cases did not run",
            i.signal,
            i.not_run.len()
        ));
    }
    match report.verdict {
        Verdict::Failed => reasons.push(format!(
            "the run failed: {} failed ({} of them waived), {} errors, {} stale waivers, {} MUST requirements unexercised",
            report.summary.failed,
            report.summary.waived,
            report.summary.errors,
            report.summary.stale,
            report.summary.unexercised
        )),
        Verdict::Incomplete => reasons.push(format!(
            "the run is incomplete: {} MUST requirements unexercised",
            report.summary.unexercised
        )),
        Verdict::Passed => {}
    }
    if !unexercised.is_empty() {
        reasons.push(format!(
            "{} MUST requirements were not exercised (every case skipped): {}",
            unexercised.len(),
            unexercised.join(", ")
        ));
    }
    let mut b = json!({
        "schema_version": crate::report::schema::VERSION,
        "conform_version": report.conform_version,
        "protocol": report.protocol,
        "role": report.role,
        "target": report.target,
        "strict": report.strict,
        "corpus_sha256": digest,
        "issued_unix_time": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        "verdict": if reasons.is_empty() { "conformant" } else { "not conformant" },
        "reasons": reasons,
        "summary": report.summary,
        "waivers": report.waivers,
        "stale": report.stale,
        "requirements": requirements,
    });
    if let Some(i) = &report.interrupted {
        b["interrupted"] = json!(i);
    }
    b
}

/// The bundle for a person.
pub fn markdown(b: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let mut out = format!(
        "# conform certification: {} {}\n\n**Verdict: {}**\n\n- target: `{}`\n- conform {}\n- corpus SHA-256 `{}`\n- strict: {}\n",
        s(&b["protocol"]),
        s(&b["role"]),
        s(&b["verdict"]),
        s(&b["target"]),
        s(&b["conform_version"]),
        s(&b["corpus_sha256"]),
        b["strict"]
    );
    for r in b["reasons"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "- not conformant because {}", s(r));
    }
    if let Some(w) = b["waivers"].as_object().filter(|w| !w.is_empty()) {
        out.push_str("\n## Waivers applied\n\n");
        for (id, reason) in w {
            let _ = writeln!(out, "- `{id}`: {}", s(reason));
        }
    }
    out.push_str(
        "\n## Requirements\n\n| requirement | level | verdict | evidence |\n|---|---|---|---|\n",
    );
    for r in b["requirements"].as_array().into_iter().flatten() {
        let evidence: Vec<String> = r["evidence"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| format!("`{}` {}", s(&e["case"]), s(&e["outcome"])))
            .collect();
        let evidence = if evidence.is_empty() {
            format!("no case: {}", s(&r["no_case"]))
        } else {
            evidence.join(", ")
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            s(&r["id"]),
            s(&r["level"]),
            s(&r["verdict"]),
            evidence.replace('|', "\\|").replace('\n', " ")
        );
    }
    out
}

/// Writes `certification.json` and `certification.md` into `dir`.
pub fn write(dir: &std::path::Path, b: &Value) -> Result<(), crate::error::RunError> {
    let fail = |e: std::io::Error| {
        crate::error::RunError::Conform(format!("cannot write {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let json = serde_json::to_string_pretty(b).unwrap_or_default() + "\n";
    std::fs::write(dir.join("certification.json"), json).map_err(fail)?;
    std::fs::write(dir.join("certification.md"), markdown(b)).map_err(fail)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::CaseResult;

    #[test]
    fn a_requirement_is_judged_by_its_worst_unwaived_case() {
        use Outcome::*;
        assert_eq!(requirement_verdict(&[]), "no-case");
        assert_eq!(
            requirement_verdict(&[(Skip, false), (Skip, false)]),
            "not-exercised"
        );
        assert_eq!(requirement_verdict(&[(Pass, false), (Skip, false)]), "pass");
        assert_eq!(
            requirement_verdict(&[(Pass, false), (Fail, true)]),
            "waived"
        );
        assert_eq!(requirement_verdict(&[(Fail, true), (Fail, false)]), "fail");
        assert_eq!(requirement_verdict(&[(Warn, false), (Pass, false)]), "warn");
    }

    fn case(id: &str, requirements: &[&str], evidence: crate::evidence::Evidence) -> CaseResult {
        let catalogue = crate::protocols::acp::AGENT.catalogue();
        let g = crate::evidence::grade(Level::Must, evidence, catalogue, false);
        CaseResult {
            id: id.into(),
            title: id.into(),
            level: Level::Must,
            requirements: requirements.iter().map(|r| (*r).to_owned()).collect(),
            outcome: g.outcome,
            message: g.message,
            duration_ms: 0,
            skip_kind: g.skip_kind,
            findings: g.findings,
            transcript: vec![],
            exercised: vec![],
        }
    }

    fn verdicts(cases: Vec<CaseResult>) -> std::collections::BTreeMap<String, String> {
        let suite = crate::protocols::acp::AGENT;
        let report = RunReport::new(&suite, "t".into(), false, cases, vec![]);
        let b = bundle(&report, suite.catalogue(), suite.watched, "d", true);
        b["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_owned(),
                    r["verdict"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Issue 26 item 12: a tool-call-id finding in a case that lists
    /// acp.fs.no-call-without-capability fails acp.tool.call-id-unique,
    /// not the fs requirement, whose own case passed.
    #[test]
    fn a_finding_counts_against_the_requirement_it_names_only() {
        use crate::evidence::{Evidence, Kind};
        const FS: &str = "acp.fs.no-call-without-capability";
        const TOOL: &str = "acp.tool.call-id-unique";
        let mut tool = Evidence::default();
        tool.broke(TOOL, Kind::Rule, "a tool_call announces an id again");
        let v = verdicts(vec![
            case("fs/withheld", &[FS], Evidence::default()),
            case("fs/with-a-tool", &[FS], tool),
        ]);
        assert_eq!(v[FS], "pass");
        assert_eq!(v[TOOL], "fail");
        // The case's own expectation counts against what it lists.
        let mut own = Evidence::default();
        own.fail(Kind::Mismatch, "result.x: expected 1, got 2");
        let v = verdicts(vec![case("fs/own", &[FS, TOOL], own)]);
        assert_eq!((v[FS].as_str(), v[TOOL].as_str()), ("fail", "fail"));
        // A set-up failure counts against none; the case still fails.
        let mut setup = Evidence::default();
        setup.setup_failed(Kind::WrongKind, "set-up: session/new failed (-32603)");
        let c = case("fs/setup", &[FS], setup);
        assert_eq!(c.outcome, Outcome::Fail);
        assert_eq!(c.outcome_for(FS, false), None);
        let v = verdicts(vec![c, case("fs/withheld", &[FS], Evidence::default())]);
        assert_eq!(v[FS], "pass");
    }

    /// Item 12's other half: a case's own check counts against the
    /// requirements its `charges` give that check. The corpus's fs case
    /// charges its prompt's reply to the prompt rule, its `noRequests` to
    /// what it lists.
    #[test]
    fn an_expectation_counts_against_the_requirements_it_checks() {
        use crate::evidence::{Evidence, Kind};
        use crate::protocols::acp::AgentCases;
        const FS: &str = "acp.fs.no-call-without-capability";
        const PROMPT: &str = "acp.prompt.respond-stop-reason";
        let fs = crate::case::embedded::<AgentCases>("acp/fs/no-read-without-capability");
        let graded =
            |ev: Evidence| CaseResult::graded(&fs, ev, false, tokio::time::Instant::now(), vec![]);
        let mut ev = Evidence::default();
        ev.fail(
            Kind::WrongKind,
            "session/prompt: expected a result, got the error -32603",
        )
        .found_by("reply");
        let errored = graded(ev);
        assert_eq!(errored.outcome, Outcome::Fail);
        assert_eq!(errored.outcome_for(FS, false), None);
        assert_eq!(errored.outcome_for(PROMPT, false), Some(Outcome::Fail));
        assert!(errored.touches(PROMPT));
        assert!(evidence_message(&errored, FS, false).contains(PROMPT));
        let mut ev = Evidence::default();
        ev.fail(Kind::Unexpected, "the agent called fs/read_text_file")
            .found_by("noRequests:fs/read_text_file");
        let called = graded(ev);
        for r in &fs.requirements {
            assert_eq!(called.outcome_for(r, false), Some(Outcome::Fail), "{r}");
        }
        assert_eq!(called.outcome_for(PROMPT, false), None);
        // A check the case does not charge counts against all it lists.
        let mut ev = Evidence::default();
        ev.fail(Kind::Missing, "no answer");
        assert_eq!(graded(ev).outcome_for(FS, false), Some(Outcome::Fail));
    }

    /// A case that forbids two kinds of call charges each by the method it
    /// saw: an `fs/*` call in the case without capabilities is not a
    /// terminal breach, nor the converse.
    #[test]
    fn a_forbidden_call_counts_against_the_rule_of_its_method() {
        use crate::evidence::{Evidence, Kind};
        use crate::protocols::acp::AgentCases;
        const FS: &str = "acp.fs.no-call-without-capability";
        const TERMINAL: &str = "acp.terminal.no-call-without-capability";
        const OMITTED: &str = "acp.init.omitted-unsupported-agent";
        let case = crate::case::embedded::<AgentCases>("acp/init/omitted-capabilities");
        let called = |method: &str| {
            let mut ev = Evidence::default();
            ev.fail(Kind::Unexpected, format!("the agent called {method}"))
                .found_by(&format!("noRequests:{method}"));
            CaseResult::graded(&case, ev, false, tokio::time::Instant::now(), vec![])
        };
        let fs = called("fs/read_text_file");
        assert_eq!(fs.outcome_for(FS, false), Some(Outcome::Fail));
        assert_eq!(fs.outcome_for(OMITTED, false), Some(Outcome::Fail));
        assert_eq!(fs.outcome_for(TERMINAL, false), None);
        let terminal = called("terminal/create");
        assert_eq!(terminal.outcome_for(TERMINAL, false), Some(Outcome::Fail));
        assert_eq!(terminal.outcome_for(OMITTED, false), Some(Outcome::Fail));
        assert_eq!(terminal.outcome_for(FS, false), None);
    }

    /// A pattern's mismatch is charged by the field it is in: a hello whose
    /// runtime is wrong breaks the runtime rule, not the tier or protocol
    /// rules its pattern also checks; a field the case does not charge on
    /// its own falls back to the pattern's charge.
    #[test]
    fn a_mismatch_counts_against_the_rule_of_its_field() {
        use crate::evidence::{Evidence, Finding};
        use crate::matcher::Mismatch;
        use crate::protocols::cwx::HostCases;
        let case = crate::case::embedded::<HostCases>("cwx/handshake/hello");
        let at = |path: &str| {
            let mut ev = Evidence::default();
            ev.push(Finding::of_pattern(
                Mismatch {
                    path: path.into(),
                    why: "differs".into(),
                    expected: None,
                    actual: None,
                },
                "result",
                "params",
            ));
            CaseResult::graded(&case, ev, false, tokio::time::Instant::now(), vec![])
        };
        let runtime = at("params.runtime.name");
        assert_eq!(runtime.outcome, Outcome::Fail);
        assert_eq!(
            runtime.outcome_for("cwx.hello.runtime", false),
            Some(Outcome::Fail)
        );
        assert_eq!(runtime.outcome_for("cwx.hello.tier", false), None);
        assert_eq!(runtime.outcome_for("cwx.hello.protocol", false), None);
        let protocol = at("params.protocol.min");
        assert_eq!(
            protocol.outcome_for("cwx.hello.protocol", false),
            Some(Outcome::Fail)
        );
        assert_eq!(protocol.outcome_for("cwx.hello.runtime", false), None);
        let whole = at("params");
        for r in ["cwx.hello.tier", "cwx.hello.protocol", "cwx.hello.runtime"] {
            assert_eq!(whole.outcome_for(r, false), Some(Outcome::Fail), "{r}");
        }
        assert_eq!(whole.outcome_for("cwx.hello.modules", false), None);
    }
}
