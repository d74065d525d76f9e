//! Graded outcomes, per case and per run.

use crate::case::Level;
use serde::Serialize;

/// What became of one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    /// A MUST broken, or a SHOULD under `--strict`.
    Fail,
    /// A SHOULD broken.
    Warn,
    /// Seen and worth knowing, never a failure.
    Info,
    /// Not applicable, with the reason.
    Skip,
    /// conform itself could not run the case.
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Warn => "warn",
            Outcome::Info => "info",
            Outcome::Skip => "skip",
            Outcome::Error => "error",
        }
    }

    /// How bad an outcome is, to keep the worst of several findings.
    pub fn severity(self) -> u8 {
        match self {
            Outcome::Pass | Outcome::Skip => 0,
            Outcome::Info => 1,
            Outcome::Warn => 2,
            Outcome::Fail => 3,
            Outcome::Error => 4,
        }
    }

    /// The grade of a case at `level` whose checks found `broken` (or not).
    pub fn grade(level: Level, broken: bool, strict: bool) -> Outcome {
        match (level, broken) {
            (Level::Info, _) => Outcome::Info,
            (_, false) => Outcome::Pass,
            (Level::Must, true) => Outcome::Fail,
            (Level::Should, true) if strict => Outcome::Fail,
            (Level::Should, true) => Outcome::Warn,
            // A MAY is a permission: not using it is never a failure.
            (Level::May, true) => Outcome::Info,
        }
    }
}

/// Which way bytes went, from conform's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Sent,
    Received,
    /// Something conform observed that is not bytes: a close, a timeout.
    Event,
}

/// One entry of a case's transcript.
#[derive(Debug, Clone, Serialize)]
pub struct TranscriptEntry {
    /// Milliseconds since the case started.
    pub t_ms: u64,
    /// The connection (or stream) the bytes went over.
    pub conn: String,
    pub dir: Direction,
    /// The bytes as text (lossy), cut at [`TRANSCRIPT_ENTRY_LIMIT`].
    pub data: String,
}

/// The most of one message a transcript keeps; the report says when it cut.
pub const TRANSCRIPT_ENTRY_LIMIT: usize = 2048;

/// The most entries one case's transcript keeps.
pub const TRANSCRIPT_ENTRIES: usize = 400;

/// The record of one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub id: String,
    pub title: String,
    pub level: Level,
    pub requirements: Vec<String>,
    pub outcome: Outcome,
    /// Why, for anything but a pass: the expected against the actual.
    pub message: String,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transcript: Vec<TranscriptEntry>,
}

/// Counts of each outcome.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub warned: usize,
    pub info: usize,
    pub skipped: usize,
    pub errors: usize,
    /// Failures an `--expected-failures` list waives (counted in `failed` too).
    #[serde(skip_serializing_if = "is_zero")]
    pub waived: usize,
    /// Listed expected failures that passed.
    #[serde(skip_serializing_if = "is_zero")]
    pub stale: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    pub fn of(cases: &[CaseResult]) -> Summary {
        let mut s = Summary {
            total: cases.len(),
            ..Summary::default()
        };
        for c in cases {
            *match c.outcome {
                Outcome::Pass => &mut s.passed,
                Outcome::Fail => &mut s.failed,
                Outcome::Warn => &mut s.warned,
                Outcome::Info => &mut s.info,
                Outcome::Skip => &mut s.skipped,
                Outcome::Error => &mut s.errors,
            } += 1;
        }
        s
    }
}

/// Everything a report needs about one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub protocol: String,
    pub role: String,
    pub target: String,
    pub conform_version: String,
    pub strict: bool,
    pub summary: Summary,
    pub cases: Vec<CaseResult>,
    /// Run-level observations: the target's stderr tail, how it ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Failures waived by `--expected-failures`: case id -> reason.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub waivers: std::collections::BTreeMap<String, String>,
    /// Listed expected failures that passed: they fail the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<String>,
}

impl RunReport {
    /// Exit status per DESIGN.md: 1 when a case failed. An `error` outcome is
    /// conform's own failure to run a case, which must not pass silently either.
    pub fn exit_code(&self) -> i32 {
        let failed = self.summary.failed - self.summary.waived.min(self.summary.failed);
        if failed > 0 || self.summary.errors > 0 || self.summary.stale > 0 {
            1
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades_follow_the_level() {
        assert_eq!(Outcome::grade(Level::Must, true, false), Outcome::Fail);
        assert_eq!(Outcome::grade(Level::Should, true, false), Outcome::Warn);
        assert_eq!(Outcome::grade(Level::Should, true, true), Outcome::Fail);
        assert_eq!(Outcome::grade(Level::May, true, true), Outcome::Info);
        assert_eq!(Outcome::grade(Level::Info, false, false), Outcome::Info);
        assert_eq!(Outcome::grade(Level::Must, false, true), Outcome::Pass);
    }
}
