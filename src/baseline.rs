//! `--expected-failures FILE`: the known failures of a target, each with a
//! reason (data, like the skip lists of rustls' BoGo runner). A listed case
//! that fails does not fail the run; an unlisted failure does; a listed case
//! that now passes fails the run as stale, so the list cannot rot.
//!
//! ```json
//! {"expected_failures": [
//!   {"id": "acp/jsonrpc/id-large", "reason": "ids go through f64; fixed in 2.1"}
//! ]}
//! ```

use crate::error::RunError;
use crate::outcome::{Outcome, RunReport};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub id: String,
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
    pub fn load(path: &Path, known: &[String], targets: &[String]) -> Result<Baseline, RunError> {
        let bad = |why: String| RunError::Usage(format!("{}: {why}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let b: Baseline = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let mut seen = std::collections::BTreeSet::new();
        for e in &b.expected_failures {
            if e.reason.trim().is_empty() {
                return Err(bad(format!("{} has no reason", e.id)));
            }
            if !seen.insert((e.id.as_str(), e.target.as_deref())) {
                return Err(bad(format!("{} is listed twice", e.id)));
            }
            if let Some(t) = &e.target
                && !targets.contains(t)
            {
                return Err(bad(format!(
                    "{} names the target {t:?}, which this run does not test",
                    e.id
                )));
            }
            if !known.contains(&e.id) {
                return Err(bad(format!("{} is not a case of this protocol", e.id)));
            }
        }
        Ok(b)
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
                .filter(|e| e.target.is_none() && !own.iter().any(|o| o.id == e.id))
                .cloned(),
        );
        Baseline { expected_failures }
    }

    /// Applies the baseline to a finished run: waives the listed failures and
    /// finds the stale entries (listed, selected, and passed).
    pub fn apply(&self, report: &mut RunReport) {
        let listed: BTreeMap<&str, &str> = self
            .expected_failures
            .iter()
            .map(|e| (e.id.as_str(), e.reason.as_str()))
            .collect();
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
                "stale expected failures (they pass now; remove them from the list): {}",
                report.stale.join(", ")
            ));
        }
    }
}
