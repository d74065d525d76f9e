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

/// Why a case was skipped, for the "no vacuous green" rule: a case that
/// does not apply because the target declared it does not do that (a
/// capability it does not advertise, a tier, no tools) is not applicable;
/// one skipped for anything else (no credentials for a model, a prompt
/// script not followed, no extension given) left its requirement untested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkipKind {
    /// The target's own declaration rules the case out.
    Declared,
    /// The case could not run for a reason outside the target's declaration.
    Outside,
    /// The target legally did without an optional step the case is about
    /// (it reached the action without it, which the source allows): not
    /// applicable, like a declared skip.
    Optional,
}

impl SkipKind {
    /// Whether a skip of this kind leaves the case's requirements not
    /// applicable (rather than unexercised).
    pub fn not_applicable(self) -> bool {
        matches!(self, SkipKind::Declared | SkipKind::Optional)
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

/// `data` as a transcript entry shows it: text (lossy), cut at
/// [`TRANSCRIPT_ENTRY_LIMIT`] bytes with the length it had. Only the start
/// of a long message is read: no copy of a whole line of 64 MiB.
pub fn transcript_text(data: &[u8]) -> String {
    // Lossy text is at least as long as its bytes: this start is enough.
    const READ: usize = TRANSCRIPT_ENTRY_LIMIT * 4 + 4;
    if data.len() <= READ {
        return crate::matcher::truncate(&String::from_utf8_lossy(data), TRANSCRIPT_ENTRY_LIMIT);
    }
    let text = String::from_utf8_lossy(&data[..READ]);
    let mut end = TRANSCRIPT_ENTRY_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], data.len())
}

/// A case's transcript as it is recorded: at most [`TRANSCRIPT_ENTRIES`]
/// entries, each cut at [`TRANSCRIPT_ENTRY_LIMIT`], times from the case's start.
#[derive(Debug, Clone)]
pub struct Transcript {
    started: tokio::time::Instant,
    entries: Vec<TranscriptEntry>,
}

impl Transcript {
    pub fn new(started: tokio::time::Instant) -> Transcript {
        Transcript {
            started,
            entries: Vec::new(),
        }
    }

    /// Records `data` going `dir` on `conn` now; the entry's index, or
    /// `None` once the transcript is full.
    pub fn log(&mut self, conn: &str, dir: Direction, data: &[u8]) -> Option<usize> {
        let t_ms = self.started.elapsed().as_millis() as u64;
        self.push(t_ms, conn, dir, transcript_text(data))
    }

    /// Records text a peer wrote down at `t_ms`.
    pub fn log_at(&mut self, t_ms: u64, conn: &str, dir: Direction, text: &str) -> Option<usize> {
        self.push(
            t_ms,
            conn,
            dir,
            crate::matcher::truncate(text, TRANSCRIPT_ENTRY_LIMIT),
        )
    }

    fn push(&mut self, t_ms: u64, conn: &str, dir: Direction, data: String) -> Option<usize> {
        if self.entries.len() >= TRANSCRIPT_ENTRIES {
            return None;
        }
        self.entries.push(TranscriptEntry {
            t_ms,
            conn: conn.to_owned(),
            dir,
            data,
        });
        Some(self.entries.len() - 1)
    }

    /// When the last entry was recorded (0 for none).
    pub fn last_ms(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.t_ms)
    }

    pub fn entries(&self) -> &[TranscriptEntry] {
        &self.entries
    }

    pub fn into_entries(self) -> Vec<TranscriptEntry> {
        self.entries
    }
}

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
    /// For a skip: whether the target's declaration explains it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_kind: Option<SkipKind>,
    /// What the case found broken, typed: each with its requirement, level,
    /// kind, and what was expected against what came.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<crate::evidence::Finding>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transcript: Vec<TranscriptEntry>,
    /// Requirements whose triggering behaviour the case observed (a tool
    /// call, a rejected permission...): exercised, whatever the outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exercised: Vec<String>,
}

impl CaseResult {
    /// The finding that names `requirement`, if the case has one.
    pub fn finding(&self, requirement: &str) -> Option<&crate::evidence::Finding> {
        self.findings
            .iter()
            .find(|f| f.requirement.as_deref() == Some(requirement))
    }

    /// The record of a selected case that a run stopped by `signal` did not
    /// finish: a skip for a reason outside the target's declaration, so a
    /// MUST it alone checks is reported unexercised.
    pub fn not_run(case: &crate::case::Listing, signal: StopSignal) -> CaseResult {
        CaseResult {
            id: case.id.clone(),
            title: case.title.clone(),
            level: case.level,
            requirements: case.requirements.clone(),
            outcome: Outcome::Skip,
            message: format!(
                "not run: the run was interrupted by {} before this case finished",
                signal.name()
            ),
            duration_ms: 0,
            skip_kind: Some(SkipKind::Outside),
            findings: vec![],
            transcript: vec![],
            exercised: vec![],
        }
    }

    /// The record of `case` before it runs: an error until its outcome is set.
    pub fn for_case<D: crate::case::Dialect>(
        case: &crate::case::Case<D>,
        message: impl Into<String>,
    ) -> CaseResult {
        CaseResult {
            id: case.id.clone(),
            title: case.title.clone(),
            level: case.level,
            requirements: case.requirements.clone(),
            outcome: Outcome::Error,
            message: message.into(),
            duration_ms: 0,
            skip_kind: None,
            findings: vec![],
            transcript: vec![],
            exercised: vec![],
        }
    }

    /// The record of `case` graded from `evidence` by [`crate::evidence::grade`].
    pub fn graded<D: crate::case::Dialect>(
        case: &crate::case::Case<D>,
        evidence: crate::evidence::Evidence,
        strict: bool,
        started: tokio::time::Instant,
        transcript: Vec<TranscriptEntry>,
    ) -> CaseResult {
        let exercised = evidence.exercised.iter().cloned().collect();
        let mut g = crate::evidence::grade(case.level, evidence, D::PROTOCOL.catalogue(), strict);
        for f in &mut g.findings {
            if f.requirement.is_none()
                && !f.setup
                && !f.consequence
                && let Some(charged) = f.check.as_ref().and_then(|c| case.charged_to(c))
                // Charged to all it lists: what an empty list says.
                && !(charged.len() == case.requirements.len()
                    && charged.iter().all(|r| case.requirements.contains(r)))
            {
                f.charged = charged.clone();
            }
        }
        CaseResult {
            exercised,
            outcome: g.outcome,
            message: g.message,
            skip_kind: g.skip_kind,
            findings: g.findings,
            duration_ms: started.elapsed().as_millis() as u64,
            transcript,
            ..CaseResult::for_case(case, "")
        }
    }

    /// What the case says of `requirement`, from its typed findings: a
    /// finding counts against the requirement it names; the case's own
    /// checks (expectations) against the requirements the case charges
    /// that check with (`charges`), else all it lists; a set-up failure
    /// against none. A case that failed only on findings
    /// that name other requirements, or on its set-up, says nothing of
    /// `requirement` (`None`): it may have stopped before checking it.
    pub fn outcome_for(&self, requirement: &str, strict: bool) -> Option<Outcome> {
        if !matches!(self.outcome, Outcome::Fail | Outcome::Warn | Outcome::Info)
            || self.findings.is_empty()
        {
            return self.touches(requirement).then_some(self.outcome);
        }
        let listed = self.requirements.iter().any(|r| r == requirement);
        let grade =
            |level: Option<Level>| Outcome::grade(level.unwrap_or(self.level), true, strict);
        let mut worst: Option<Outcome> = None;
        for f in &self.findings {
            let counts = match &f.requirement {
                _ if f.setup || f.consequence => false,
                Some(r) => r == requirement,
                None if !f.charged.is_empty() => f.charged.iter().any(|r| r == requirement),
                None => listed,
            };
            if counts {
                let g = grade(f.level);
                if worst.is_none_or(|w| g.severity() > w.severity()) {
                    worst = Some(g);
                }
            }
        }
        worst
    }

    /// Whether the case cites requirement `id` or found it broken.
    pub fn touches(&self, id: &str) -> bool {
        self.requirements.iter().any(|r| r == id)
            || self
                .findings
                .iter()
                .any(|f| f.requirement.as_deref() == Some(id) || f.charged.iter().any(|r| r == id))
    }
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
    /// MUST requirements whose selected cases were all skipped, at least
    /// one for a reason outside the target's declaration, and that no
    /// baseline entry accepts: not a pass.
    #[serde(skip_serializing_if = "is_zero")]
    pub unexercised: usize,
    /// Unexercised MUST requirements a baseline accepts, with a reason.
    #[serde(skip_serializing_if = "is_zero")]
    pub unexercised_waived: usize,
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

/// What a run comes to, and its exit status (DESIGN.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing required failed and every selected MUST was exercised: 0.
    Passed,
    /// A required case failed, conform could not run one, or an expected
    /// failure is stale: 1.
    Failed,
    /// Nothing failed, but a selected MUST requirement was never exercised
    /// and no baseline entry accepts that: 3.
    Incomplete,
}

impl Verdict {
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Passed => 0,
            Verdict::Failed => 1,
            Verdict::Incomplete => 3,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "PASSED",
            Verdict::Failed => "FAILED",
            Verdict::Incomplete => "INCOMPLETE",
        }
    }

    /// How bad it is, for the worst of several targets: a failure outranks
    /// an incomplete run, which outranks a pass.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::Passed => 0,
            Verdict::Incomplete => 1,
            Verdict::Failed => 2,
        }
    }
}

/// Everything a report needs about one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The version of the JSON contract ([`crate::report::schema`]).
    pub schema_version: u32,
    pub protocol: crate::suite::Protocol,
    pub role: crate::suite::Role,
    pub target: String,
    pub conform_version: String,
    pub strict: bool,
    /// Kept up to date by [`RunReport::settle`].
    pub verdict: Verdict,
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
    /// MUST requirements the run did not exercise: they fail the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unexercised: Vec<Unexercised>,
    /// Set when a signal stopped the run before every case finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
}

/// A signal that ends a run early: Ctrl-C (SIGINT) or SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Interrupt,
    Terminate,
}

impl StopSignal {
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal's number, as a shell reports a process it ended.
    pub fn exit_code(self) -> i32 {
        match self {
            StopSignal::Interrupt => 130,
            StopSignal::Terminate => 143,
        }
    }
}

/// How a run a signal stopped ended.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Interruption {
    /// `SIGINT` or `SIGTERM`.
    pub signal: &'static str,
    /// What conform exits with: 130 or 143.
    pub exit_code: i32,
    /// The selected cases that did not finish, reported as skipped.
    pub not_run: Vec<String>,
}

/// A MUST requirement none of whose selected cases ran.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Unexercised {
    pub requirement: String,
    /// The cases that would have exercised it, each with why it was skipped.
    pub cases: Vec<SkippedCase>,
    /// Why a baseline accepts that this run cannot exercise it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiver: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SkippedCase {
    pub case: String,
    pub why: String,
}

/// Whether a requirement's cases exercised it, judged by their outcomes and
/// skip kinds only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exercise {
    /// At least one case ran (whatever it found).
    Exercised,
    /// Every case was skipped because the target declared it out, or did
    /// without an optional step the case is about.
    NotApplicable,
    /// Every case was skipped, at least one for another reason.
    Unexercised,
}

/// How a requirement stands in a run, given the cases that cite it (not
/// empty) and whether it is watched on every message of every case (then
/// any case that ran exercised it).
pub fn exercise(cases: &[&CaseResult], watched_and_any_ran: bool) -> Exercise {
    if watched_and_any_ran || cases.iter().any(|c| c.outcome != Outcome::Skip) {
        Exercise::Exercised
    } else if cases
        .iter()
        .all(|c| c.skip_kind.is_some_and(SkipKind::not_applicable))
    {
        Exercise::NotApplicable
    } else {
        Exercise::Unexercised
    }
}

impl RunReport {
    /// What the run comes to: failed when a required case failed (an
    /// `error` outcome, conform's own failure to run a case, must not pass
    /// silently either) or an expected failure is stale; incomplete when
    /// nothing failed but a MUST requirement was left unexercised.
    fn judge(&self) -> Verdict {
        let s = &self.summary;
        let failed = s.failed - s.waived.min(s.failed);
        if failed > 0 || s.errors > 0 || s.stale > 0 {
            Verdict::Failed
        } else if s.unexercised > 0 {
            Verdict::Incomplete
        } else {
            Verdict::Passed
        }
    }

    /// Recounts what a baseline changed and the verdict.
    pub fn settle(&mut self) {
        self.summary.unexercised = self
            .unexercised
            .iter()
            .filter(|u| u.waiver.is_none())
            .count();
        self.summary.unexercised_waived = self.unexercised.len() - self.summary.unexercised;
        self.verdict = self.judge();
    }

    /// Exit status per DESIGN.md: 0 passed, 1 failed, 3 incomplete; 130 or
    /// 143 for a run a signal stopped, whatever the cases that finished
    /// came to.
    pub fn exit_code(&self) -> i32 {
        match &self.interrupted {
            Some(i) => i.exit_code,
            None => self.verdict.exit_code(),
        }
    }
}

impl RunReport {
    /// The report of a finished run, with its unexercised MUSTs marked.
    pub fn new(
        suite: &crate::suite::Suite,
        target: String,
        strict: bool,
        cases: Vec<CaseResult>,
        notes: Vec<String>,
    ) -> RunReport {
        let mut report = RunReport {
            schema_version: crate::report::schema::VERSION,
            protocol: suite.protocol,
            role: suite.role,
            target,
            conform_version: env!("CARGO_PKG_VERSION").into(),
            strict,
            verdict: Verdict::Passed,
            summary: Summary::of(&cases),
            cases,
            notes,
            waivers: Default::default(),
            stale: vec![],
            unexercised: vec![],
            interrupted: None,
        };
        report.mark_unexercised(suite.catalogue(), suite.watched);
        report.settle();
        report
    }

    /// The report of a run `signal` stopped: the cases of `chosen` (the
    /// selection, in order) that finished, from `finished`, and the others
    /// marked not run.
    pub fn stopped(
        suite: &crate::suite::Suite,
        target: String,
        strict: bool,
        chosen: &[crate::case::Listing],
        finished: Vec<CaseResult>,
        signal: StopSignal,
    ) -> RunReport {
        let mut finished: std::collections::HashMap<String, CaseResult> =
            finished.into_iter().map(|c| (c.id.clone(), c)).collect();
        let mut not_run = Vec::new();
        let cases: Vec<CaseResult> = chosen
            .iter()
            .map(|l| {
                finished.remove(&l.id).unwrap_or_else(|| {
                    not_run.push(l.id.clone());
                    CaseResult::not_run(l, signal)
                })
            })
            .collect();
        let note = format!(
            "the run was interrupted by {}: {} of the {} selected cases finished; the other {} are reported as skipped (not run)",
            signal.name(),
            cases.len() - not_run.len(),
            cases.len(),
            not_run.len()
        );
        let mut report = RunReport::new(suite, target, strict, cases, vec![note]);
        report.interrupted = Some(Interruption {
            signal: signal.name(),
            exit_code: signal.exit_code(),
            not_run,
        });
        report
    }

    /// How requirement `id` stands in this run (see [`exercise`]); `None`
    /// when no case of the run cites it.
    pub fn exercise_of(&self, id: &str, watched: &[&str]) -> Option<Exercise> {
        let cases: Vec<&CaseResult> = self.cases.iter().filter(|c| c.touches(id)).collect();
        let any_ran = self.cases.iter().any(|c| c.outcome != Outcome::Skip);
        // A behaviour that triggers the requirement, observed in any case.
        let observed = self
            .cases
            .iter()
            .any(|c| c.exercised.iter().any(|e| e == id));
        (!cases.is_empty())
            .then(|| exercise(&cases, observed || (any_ran && watched.contains(&id))))
    }

    /// Finds the MUST requirements of the role whose selected cases were all
    /// skipped with at least one skip outside the target's declaration
    /// ("no vacuous green"); requirements no selected case cites are left
    /// alone (a filtered run says nothing about them).
    /// `watched` are the requirements checked on every message of every
    /// case: any case that ran exercised them.
    pub fn mark_unexercised(
        &mut self,
        catalogue: &crate::requirements::Catalogue,
        watched: &[&str],
    ) {
        let mut found = Vec::new();
        for r in catalogue
            .requirements
            .iter()
            .filter(|r| r.role == self.role && r.level == Level::Must)
        {
            if self.exercise_of(&r.id, watched) == Some(Exercise::Unexercised) {
                found.push(Unexercised {
                    requirement: r.id.clone(),
                    cases: self
                        .cases
                        .iter()
                        .filter(|c| c.touches(&r.id))
                        .map(|c| SkippedCase {
                            case: c.id.clone(),
                            why: c.message.clone(),
                        })
                        .collect(),
                    waiver: None,
                });
            }
        }
        self.unexercised = found;
        self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_shows_the_start_of_a_long_message_and_its_length() {
        assert_eq!(transcript_text(b"{}\n"), "{}\n");
        let long = vec![b'x'; 64 << 20];
        let shown = transcript_text(&long);
        assert_eq!(
            shown,
            format!(
                "{}… ({} bytes)",
                "x".repeat(TRANSCRIPT_ENTRY_LIMIT),
                64 << 20
            )
        );
        // Invalid bytes show as U+FFFD, cut at a character boundary.
        let bad = vec![0xffu8; 1 << 20];
        let shown = transcript_text(&bad);
        assert!(shown.starts_with('\u{fffd}'));
        assert!(shown.ends_with(&format!("… ({} bytes)", 1 << 20)));
        assert!(shown.len() <= TRANSCRIPT_ENTRY_LIMIT + 32);
    }

    #[test]
    fn a_transcript_keeps_its_bound() {
        let mut t = Transcript::new(tokio::time::Instant::now());
        for _ in 0..TRANSCRIPT_ENTRIES {
            assert!(t.log("c", Direction::Sent, b"x").is_some());
        }
        assert_eq!(t.log("c", Direction::Sent, b"x"), None);
        assert_eq!(t.entries().len(), TRANSCRIPT_ENTRIES);
        let long = "y".repeat(TRANSCRIPT_ENTRY_LIMIT * 2);
        let mut t = Transcript::new(tokio::time::Instant::now());
        t.log_at(5, "c", Direction::Event, &long);
        assert!(t.entries()[0].data.len() < long.len());
        assert_eq!(t.last_ms(), 5);
    }

    #[test]
    fn an_unexercised_must_is_incomplete_unless_waived_and_a_failure_outranks_it() {
        let mut r = RunReport {
            schema_version: crate::report::schema::VERSION,
            protocol: crate::suite::Protocol::Acp,
            role: crate::suite::Role::Agent,
            target: "t".into(),
            conform_version: "0".into(),
            strict: false,
            verdict: Verdict::Passed,
            summary: Summary::default(),
            cases: vec![],
            notes: vec![],
            waivers: Default::default(),
            stale: vec![],
            unexercised: vec![Unexercised {
                requirement: "r".into(),
                cases: vec![],
                waiver: None,
            }],
            interrupted: None,
        };
        r.settle();
        assert_eq!((r.verdict, r.exit_code()), (Verdict::Incomplete, 3));
        r.unexercised[0].waiver = Some("known".into());
        r.settle();
        assert_eq!(
            (r.verdict, r.summary.unexercised_waived),
            (Verdict::Passed, 1)
        );
        r.summary.failed = 1;
        r.unexercised[0].waiver = None;
        r.settle();
        assert_eq!((r.verdict, r.exit_code()), (Verdict::Failed, 1));
        assert!(Verdict::Failed.severity() > Verdict::Incomplete.severity());
        assert!(Verdict::Incomplete.severity() > Verdict::Passed.severity());
    }

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
