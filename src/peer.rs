//! What the three "conform plays the peer" roles share (agent-socket
//! `--role client`, acp `--role client`, cwx `--role core`): how a case's
//! findings become its grade, and how a scripted peer's record is read back.

use crate::case::Case;
use crate::outcome::{Outcome, SkipKind};
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::path::Path;

/// The most of a scripted peer's record conform reads back.
pub const RECORD_LIMIT: u64 = 32 * 1024 * 1024;

/// A case's grade.
#[derive(Debug, Clone, PartialEq)]
pub struct Grade {
    pub outcome: Outcome,
    pub message: String,
    /// Requirements broken that the case does not cite (the every-message rules).
    pub also_broken: Vec<String>,
    pub skip_kind: Option<SkipKind>,
}

/// What the checks of one case found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Every-message rules broken, as (requirement, why): a failure whatever
    /// the case's level, since those rules are MUSTs.
    pub broken: Vec<(String, String)>,
    /// The case's own checks that failed.
    pub failures: Vec<String>,
    /// Information: never a failure.
    pub notes: Vec<String>,
    /// What the peer never did, so the case's checks could not run.
    pub unseen: Vec<String>,
}

impl Findings {
    /// The grade of `case` from these findings; `summary` says what the
    /// peer did, `who` names it ("client", "core").
    pub fn grade<S>(mut self, case: &Case<S>, strict: bool, summary: &str, who: &str) -> Grade {
        let notes = self.notes;
        let with = |lines: Vec<String>| {
            let mut text = lines.join("; ");
            if !notes.is_empty() {
                text.push_str(&format!(" (also: {})", notes.join("; ")));
            }
            format!("{text}. What the {who} did: {summary}")
        };
        let grade = |outcome, message, also_broken, skip_kind| Grade {
            outcome,
            message,
            also_broken,
            skip_kind,
        };
        if !self.broken.is_empty() {
            self.broken.sort();
            self.broken.dedup();
            let also = self
                .broken
                .iter()
                .map(|(r, _)| r.clone())
                .filter(|r| !case.requirements.contains(r))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut lines: Vec<String> = self
                .broken
                .iter()
                .map(|(r, w)| format!("[{r}] {w}"))
                .collect();
            lines.extend(self.failures);
            return grade(Outcome::Fail, with(lines), also, None);
        }
        if !self.failures.is_empty() {
            let outcome = Outcome::grade(case.level, true, strict);
            return grade(outcome, with(self.failures), vec![], None);
        }
        if !self.unseen.is_empty() {
            return grade(
                Outcome::Skip,
                with(self.unseen),
                vec![],
                Some(SkipKind::Outside),
            );
        }
        let outcome = Outcome::grade(case.level, false, strict);
        let message = match (outcome == Outcome::Pass, notes.is_empty()) {
            (true, true) => String::new(),
            (_, true) => format!("What the {who} did: {summary}"),
            _ => format!("{}. What the {who} did: {summary}", notes.join("; ")),
        };
        grade(outcome, message, vec![], None)
    }
}

/// Reads a scripted peer's record (JSON lines, at most [`RECORD_LIMIT`]
/// bytes); none at all when the peer was never started.
pub fn read_record<E: DeserializeOwned>(path: &Path) -> Result<Vec<E>, String> {
    use std::io::Read;
    let mut text = String::new();
    match std::fs::File::open(path) {
        Ok(f) => {
            f.take(RECORD_LIMIT)
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read the scripted peer's record: {e}"))?;
        }
        Err(_) => return Ok(vec![]),
    }
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}
