//! `--expected-failures FILE`: the known failures of a target, each with a
//! reason (data, like the skip lists of rustls' BoGo runner). A listed case
//! that fails does not fail the run; an unlisted failure does; a listed case
//! that now passes fails the run as stale, so the list cannot rot.
//!
//! An entry may instead name a MUST requirement the run cannot exercise
//! against this target (an agent that runs a real model, a client that
//! never cancels): its "not exercised" no longer makes the run incomplete.
//! A waived requirement the run does exercise is stale like any entry.
//!
//! ```json
//! {"expected_failures": [
//!   {"id": "acp/jsonrpc/id-large", "reason": "ids go through f64; fixed in 2.1"},
//!   {"requirement": "acp.prompt.cancel", "reason": "our CI agent runs a real model"}
//! ]}
//! ```

use crate::error::RunError;
use crate::outcome::{Exercise, Outcome, RunReport};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// A case that is known to fail.
    #[serde(default)]
    pub id: Option<String>,
    /// Or a MUST requirement that is known not to be exercised.
    #[serde(default)]
    pub requirement: Option<String>,
    pub reason: String,
    /// Only for this target (as given to `--target`); every target when absent.
    #[serde(default)]
    pub target: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub expected_failures: Vec<Entry>,
}

impl Baseline {
    /// Reads and checks a baseline file: every entry has a reason, no id
    /// twice, and (given `known`, the protocol's case ids) every id names a
    /// case, so a typo is a usage error rather than a silent no-op.
    /// Reads and checks a baseline file: every entry names one case or one
    /// requirement and has a reason, nothing twice, and every name is
    /// known (`cases`: the protocol's case ids; `musts`: the MUST
    /// requirements of the role under test), so a typo is a usage error
    /// rather than a silent no-op.
    pub fn load(
        path: &Path,
        cases: &[String],
        musts: &[String],
        targets: &[String],
    ) -> Result<Baseline, RunError> {
        let bad = |why: String| RunError::Usage(format!("{}: {why}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let b: Baseline = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let mut seen = std::collections::BTreeSet::new();
        for e in &b.expected_failures {
            let name = match (&e.id, &e.requirement) {
                (Some(id), None) if cases.contains(id) => id,
                (Some(id), None) => {
                    return Err(bad(format!("{id} is not a case of this protocol")));
                }
                (None, Some(r)) if musts.contains(r) => r,
                (None, Some(r)) => {
                    return Err(bad(format!(
                        "{r} is not a MUST requirement of the role under test"
                    )));
                }
                _ => return Err(bad("an entry names one `id` or one `requirement`".into())),
            };
            if e.reason.trim().is_empty() {
                return Err(bad(format!("{name} has no reason")));
            }
            if !seen.insert((name.as_str(), e.target.as_deref())) {
                return Err(bad(format!("{name} is listed twice")));
            }
            if let Some(t) = &e.target
                && !targets.contains(t)
            {
                return Err(bad(format!(
                    "{name} names the target {t:?}, which this run does not test"
                )));
            }
        }
        Ok(b)
    }

    /// What an entry names: its case or its requirement.
    fn name(e: &Entry) -> &str {
        e.id.as_deref().or(e.requirement.as_deref()).unwrap_or("")
    }

    /// The entries that apply to `target`: its own, and those for every
    /// target (an entry of its own wins).
    pub fn for_target(&self, target: &str) -> Baseline {
        let own: Vec<&Entry> = self
            .expected_failures
            .iter()
            .filter(|e| e.target.as_deref() == Some(target))
            .collect();
        let mut expected_failures: Vec<Entry> = own.iter().map(|e| (*e).clone()).collect();
        expected_failures.extend(
            self.expected_failures
                .iter()
                .filter(|e| {
                    e.target.is_none() && !own.iter().any(|o| Self::name(o) == Self::name(e))
                })
                .cloned(),
        );
        Baseline { expected_failures }
    }

    /// Applies the baseline to a finished run: waives the listed failures
    /// and unexercised requirements, and finds the stale entries (a listed
    /// case selected and passed, a listed requirement the run exercised).
    /// `watched` are the suite's requirements checked on every message.
    pub fn apply(&self, report: &mut RunReport, watched: &[&str]) {
        let listed: BTreeMap<&str, &str> = self
            .expected_failures
            .iter()
            .filter_map(|e| Some((e.id.as_deref()?, e.reason.as_str())))
            .collect();
        for e in &self.expected_failures {
            let Some(r) = e.requirement.as_deref() else {
                continue;
            };
            if let Some(u) = report.unexercised.iter_mut().find(|u| u.requirement == r) {
                u.waiver = Some(e.reason.clone());
            } else if report.exercise_of(r, watched) == Some(Exercise::Exercised) {
                report.stale.push(r.to_owned());
            }
        }
        for c in &report.cases {
            let Some(reason) = listed.get(c.id.as_str()) else {
                continue;
            };
            match c.outcome {
                Outcome::Fail | Outcome::Warn => {
                    report.waivers.insert(c.id.clone(), (*reason).to_owned());
                }
                Outcome::Pass => report.stale.push(c.id.clone()),
                // Skipped or informational: the entry could not be checked.
                _ => {}
            }
        }
        report.summary.waived = report
            .cases
            .iter()
            .filter(|c| c.outcome == Outcome::Fail && report.waivers.contains_key(&c.id))
            .count();
        report.summary.stale = report.stale.len();
        if !report.stale.is_empty() {
            report.notes.push(format!(
                "stale expected failures (they pass or are exercised now; remove them from the list): {}",
                report.stale.join(", ")
            ));
        }
        report.settle();
    }
}
