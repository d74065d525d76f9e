//! `conform fuzz`: generated inputs against a live target, judged by the
//! same oracles as the suite, shrunk to a minimal case on a finding.
//!
//! Each protocol supplies a [`Harness`]: a proptest strategy for its inputs
//! (built from its table and golden corpus, see [`strategies`]), the case file an
//! input becomes, and a way to run a case against the live target. An input
//! *is* a case: the oracles are the protocol's step expectations and its
//! watch rules, so a finding written to `--out` replays with
//! `conform run --case FILE` and fails the same way.
//!
//! Inputs are generated in order from the seed (ChaCha, so the same seed
//! gives the same inputs everywhere) and run `jobs` at a time. On a failure
//! the engine lets the cases in flight finish, makes the target fresh,
//! checks the input fails alone, and shrinks it with proptest's value tree:
//! a simpler input that fails the same way (see [`Harness::class`]) is kept.

pub mod readings;
pub mod strategies;
pub mod targets;

use crate::error::RunError;
use crate::outcome::{CaseResult, Outcome};
use crate::runner::CaseFuture;
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

pub type ResetFuture = Pin<Box<dyn Future<Output = Result<(), RunError>> + Send>>;

/// What a protocol gives the fuzzer.
pub trait Harness: Send + Sync + 'static {
    type Input: Clone + std::fmt::Debug + Send + Sync + 'static;
    /// The strategy the inputs come from.
    fn strategy(&self) -> BoxedStrategy<Self::Input>;
    /// The case (one item of a case file) an input becomes.
    fn case(&self, input: &Self::Input, id: &str) -> Value;
    /// Runs one case against the live target.
    fn run(self: Arc<Self>, case: Value) -> CaseFuture;
    /// Gives the next case a target in its first state (a dead server is
    /// started again).
    fn reset(self: Arc<Self>) -> ResetFuture;
}

/// How a fuzzing run is set up.
#[derive(Debug, Clone)]
pub struct Options {
    pub protocol: crate::suite::Protocol,
    pub role: crate::suite::Role,
    pub target: String,
    pub seed: u64,
    pub cases: Option<u64>,
    pub duration: Option<Duration>,
    pub out: PathBuf,
    pub jobs: usize,
    /// The most shrinking attempts per finding.
    pub shrink_limit: usize,
    /// The longest a finding's shrinking may take.
    pub shrink_time: Duration,
}

/// A failure the fuzzer found, shrunk.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The input's number in the run (from 0).
    pub index: u64,
    pub class: String,
    /// The shrunk case's result.
    pub result: CaseResult,
    /// The shrunk case, as written.
    pub case: Value,
    pub shrink_steps: usize,
    /// False when the input did not fail again alone on a fresh target.
    pub reproduced: bool,
    pub file: Option<PathBuf>,
}

/// What a fuzzing run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub inputs: u64,
    pub elapsed: Duration,
    /// Counts of each outcome over all inputs.
    pub outcomes: HashMap<&'static str, u64>,
    pub findings: Vec<Finding>,
}

impl Report {
    /// 1 when a finding failed (a MUST broken, or a SHOULD under `--strict`).
    pub fn exit_code(&self) -> i32 {
        if self
            .findings
            .iter()
            .any(|f| matches!(f.result.outcome, Outcome::Fail | Outcome::Error))
        {
            1
        } else {
            0
        }
    }
}

/// How long a run goes: `--cases` and `--duration` checked (10 000 inputs
/// when neither is given).
pub fn limits(
    cases: Option<u64>,
    duration: Option<f64>,
) -> Result<(Option<u64>, Option<Duration>), RunError> {
    if let Some(d) = duration
        && !(d > 0.0 && d <= 7.0 * 86400.0)
    {
        return Err(RunError::Usage("--duration is between 0 and a week".into()));
    }
    if cases == Some(0) {
        return Err(RunError::Usage(
            "--cases 0 runs nothing: a run of zero inputs proves nothing".into(),
        ));
    }
    let cases = match (cases, duration) {
        (None, None) => Some(10_000),
        (c, _) => c,
    };
    Ok((cases, duration.map(Duration::from_secs_f64)))
}

/// A seed from the clock and the process id, for a run that names none.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
        .unwrap_or(1)
}

/// The runner that generates from `seed`: ChaCha, so a seed means the same
/// inputs on every machine.
pub fn runner_for(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// The id a generated case gets.
pub fn case_id(protocol: crate::suite::Protocol, seed: u64, index: u64) -> String {
    format!("{protocol}/fuzz/{seed}-{index}")
}

/// The result of a generated case conform could not run: its own bug.
pub fn invalid_case(id: &Value, message: String) -> CaseResult {
    CaseResult {
        id: id.as_str().unwrap_or("").to_owned(),
        title: String::new(),
        level: crate::case::Level::Must,
        requirements: vec![],
        outcome: Outcome::Error,
        message,
        duration_ms: 0,
        skip_kind: None,
        findings: vec![],
        transcript: vec![],
    }
}

/// A generated case read back as the protocol's case, its steps checked as
/// the corpus's are; a case that does not read is conform's own error.
pub fn parse_generated<D: crate::case::Dialect>(
    case: Value,
) -> Result<crate::case::Case<D>, Box<CaseResult>> {
    let id = case.get("id").cloned().unwrap_or_default();
    let case: crate::case::Case<D> = serde_json::from_value(case).map_err(|e| {
        Box::new(invalid_case(
            &id,
            format!("a generated case is invalid: {e}"),
        ))
    })?;
    if let Err(e) = D::check(&case) {
        let message = format!("a generated case is invalid: {e}");
        return Err(Box::new(invalid_case(&id, message)));
    }
    Ok(case)
}

/// What a failure is, to tell one from another while shrinking: the
/// requirement and kind of its first finding (conform's own error is a
/// class of its own). Read from the typed findings, never from the message.
pub fn class_of(r: &CaseResult) -> String {
    if r.outcome == Outcome::Error {
        return "conform could not run the input".into();
    }
    match r.findings.first() {
        Some(f) => {
            let (requirement, kind) = f.key();
            format!("{requirement} {}", kind_name(kind))
        }
        None => format!("{} without a finding", r.outcome.as_str()),
    }
}

/// Whether `r` has the finding of `class` (among others, maybe): a simpler
/// input that keeps the bug.
pub fn has_class(r: &CaseResult, class: &str) -> bool {
    if r.outcome == Outcome::Error {
        return class == class_of(r);
    }
    r.findings.iter().any(|f| {
        let (requirement, kind) = f.key();
        format!("{requirement} {}", kind_name(kind)) == class
    })
}

fn kind_name(kind: crate::evidence::Kind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn is_finding(r: &CaseResult) -> bool {
    matches!(r.outcome, Outcome::Fail | Outcome::Warn | Outcome::Error)
}

/// Runs the fuzzer until `cases` inputs or `duration` pass, or a failure
/// (a finding that fails the run) is found and shrunk. `progress` gets a
/// line now and then.
pub async fn fuzz<H: Harness>(
    harness: Arc<H>,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, RunError> {
    let strategy = harness.strategy();
    let mut runner = runner_for(options.seed);
    let started = Instant::now();
    let mut report = Report {
        seed: options.seed,
        inputs: 0,
        elapsed: Duration::ZERO,
        outcomes: HashMap::new(),
        findings: Vec::new(),
    };
    let mut trees: HashMap<u64, Box<dyn ValueTree<Value = H::Input>>> = HashMap::new();
    let mut set: JoinSet<(u64, CaseResult)> = JoinSet::new();
    let mut next: u64 = 0;
    let mut last_progress = Instant::now();
    let mut stop = false;
    let limit_reached = |next: u64| {
        options.cases.is_some_and(|n| next >= n)
            || options.duration.is_some_and(|d| started.elapsed() >= d)
    };
    loop {
        while !stop && set.len() < options.jobs.max(1) && !limit_reached(next) {
            let tree = strategy
                .new_tree(&mut runner)
                .map_err(|e| RunError::Conform(format!("the generator failed: {e}")))?;
            let case = harness.case(
                &tree.current(),
                &case_id(options.protocol, options.seed, next),
            );
            trees.insert(next, Box::new(tree));
            let h = harness.clone();
            let index = next;
            set.spawn(async move { (index, h.run(case).await) });
            next += 1;
        }
        let Some(joined) = set.join_next().await else {
            break;
        };
        let (index, result) =
            joined.map_err(|e| RunError::Conform(format!("a fuzz case panicked: {e}")))?;
        report.inputs += 1;
        *report.outcomes.entry(result.outcome.as_str()).or_default() += 1;
        let tree = trees.remove(&index);
        if is_finding(&result) && !stop {
            let class = class_of(&result);
            if report.findings.iter().any(|f| f.class == class) {
                continue;
            }
            // Let what is in flight finish, so the shrinking has the target to
            // itself. Inputs that ran beside the culprit may have failed with
            // it (a dead server fails them all), so each failing one is a
            // suspect, tried alone in order.
            let mut suspects = vec![(index, result, tree)];
            while let Some(j) = set.join_next().await {
                if let Ok((i, r)) = j {
                    report.inputs += 1;
                    *report.outcomes.entry(r.outcome.as_str()).or_default() += 1;
                    let t = trees.remove(&i);
                    if is_finding(&r) {
                        suspects.push((i, r, t));
                    }
                }
            }
            suspects.sort_by_key(|s| s.0);
            progress(&format!(
                "input {index}: {} ({class}); {} suspect input(s) to try alone, then shrink",
                suspects[0].1.outcome.as_str(),
                suspects.len()
            ));
            let finding = culprit(&harness, options, suspects).await?;
            let failed = matches!(finding.result.outcome, Outcome::Fail | Outcome::Error);
            progress(&format!(
                "input {}: shrunk in {} steps{}",
                finding.index,
                finding.shrink_steps,
                finding
                    .file
                    .as_ref()
                    .map(|f| format!(", written to {}", f.display()))
                    .unwrap_or_default()
            ));
            report.findings.push(finding);
            if failed {
                stop = true;
            } else {
                harness.clone().reset().await?;
            }
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            progress(&format!(
                "{} inputs, {:.0}/s, {} findings (seed {})",
                report.inputs,
                report.inputs as f64 / secs,
                report.findings.len(),
                options.seed
            ));
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

type Suspect<V> = (u64, CaseResult, Option<Box<dyn ValueTree<Value = V>>>);

/// Tries each suspect alone on a fresh target, in the order they were
/// generated; the first that fails again is shrunk. When none does, the
/// first is reported as it was, marked as not reproduced.
async fn culprit<H: Harness>(
    harness: &Arc<H>,
    options: &Options,
    suspects: Vec<Suspect<H::Input>>,
) -> Result<Finding, RunError> {
    let mut first: Option<(u64, CaseResult, Value)> = None;
    for (index, result, tree) in suspects {
        let Some(tree) = tree else { continue };
        let id = case_id(options.protocol, options.seed, index);
        let case = harness.case(&tree.current(), &id);
        harness.clone().reset().await?;
        let again = harness.clone().run(case.clone()).await;
        if is_finding(&again) {
            let class = class_of(&again);
            return shrink(harness, options, tree, index, again, case, class).await;
        }
        if first.is_none() {
            first = Some((index, result, case));
        }
    }
    let (index, result, case) = first.ok_or_else(|| {
        RunError::Conform("a finding without its input (a bug in conform)".into())
    })?;
    harness.clone().reset().await?;
    let class = class_of(&result);
    let file = write_reproducer(options, index, &result, &case, 0, false)?;
    Ok(Finding {
        index,
        class,
        result,
        case,
        shrink_steps: 0,
        reproduced: false,
        file: Some(file),
    })
}

/// Shrinks a failing input: proptest's simplify while the simpler input
/// still fails in the same class, complicate when it does not.
async fn shrink<H: Harness>(
    harness: &Arc<H>,
    options: &Options,
    mut tree: Box<dyn ValueTree<Value = H::Input>>,
    index: u64,
    mut best: CaseResult,
    mut best_case: Value,
    class: String,
) -> Result<Finding, RunError> {
    let id = case_id(options.protocol, options.seed, index);
    let mut steps = 0;
    let deadline = Instant::now() + options.shrink_time;
    let mut attempts = 0;
    let mut more = tree.simplify();
    while more && attempts < options.shrink_limit && Instant::now() < deadline {
        attempts += 1;
        let case = harness.case(&tree.current(), &id);
        harness.clone().reset().await?;
        let r = harness.clone().run(case.clone()).await;
        if is_finding(&r) && has_class(&r, &class) {
            steps += 1;
            best = r;
            best_case = case;
            more = tree.simplify();
        } else {
            more = tree.complicate();
        }
    }
    harness.clone().reset().await?;
    let file = write_reproducer(options, index, &best, &best_case, steps, true)?;
    Ok(Finding {
        index,
        class,
        result: best,
        case: best_case,
        shrink_steps: steps,
        reproduced: true,
        file: Some(file),
    })
}

/// Writes a finding as a case file with its provenance.
fn write_reproducer(
    options: &Options,
    index: u64,
    result: &CaseResult,
    case: &Value,
    steps: usize,
    reproduced: bool,
) -> Result<PathBuf, RunError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| RunError::Conform(format!("cannot create {}: {e}", options.out.display())))?;
    let path = options.out.join(format!(
        "{}-{}-{index}.json",
        options.protocol, options.seed
    ));
    let file = json!({
        "provenance": {
            "tool": "conform fuzz",
            "conform_version": env!("CARGO_PKG_VERSION"),
            "protocol": options.protocol,
            "role": options.role,
            "target": options.target,
            "seed": options.seed,
            "input": index,
            "shrink_steps": steps,
            "reproduced_alone": reproduced,
            "outcome": result.outcome.as_str(),
            "oracle": result.message,
            "found_unix_time": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            "replay": format!(
                "conform run --protocol {} --target '{}' --case {} --filter {}",
                options.protocol,
                options.target,
                path.display(),
                case.get("id").and_then(Value::as_str).unwrap_or("")
            ),
        },
        "cases": [case],
    });
    let text = serde_json::to_string_pretty(&file).unwrap_or_default();
    std::fs::write(&path, text + "\n")
        .map_err(|e| RunError::Conform(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// The report as text for a person.
pub fn human(report: &Report, options: &Options) -> String {
    let mut out = String::new();
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    out.push_str(&format!(
        "conform fuzz {} ({}) against {}: {} inputs in {:.1}s ({:.0}/s), seed {}\n",
        options.protocol,
        options.role,
        options.target,
        report.inputs,
        secs,
        report.inputs as f64 / secs,
        report.seed
    ));
    let mut counts: Vec<_> = report.outcomes.iter().collect();
    counts.sort();
    out.push_str(&format!(
        "outcomes: {}\n",
        counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if report.findings.is_empty() {
        out.push_str("no findings\n");
    }
    for f in &report.findings {
        out.push_str(&format!(
            "\n{} {} (input {}, {}, shrunk in {} steps{})\n",
            f.result.outcome.as_str().to_uppercase(),
            f.result.id,
            f.index,
            f.class,
            f.shrink_steps,
            if f.reproduced {
                ""
            } else {
                "; it did not fail again alone on a fresh target"
            }
        ));
        for line in f.result.message.lines().take(12) {
            out.push_str(&format!("    {line}\n"));
        }
        if let Some(file) = &f.file {
            out.push_str(&format!(
                "    reproducer: {}\n    replay: conform run --protocol {} --target '{}' --case {} --filter {}\n",
                file.display(),
                options.protocol,
                options.target,
                file.display(),
                f.result.id
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_inputs(seed: u64) -> Vec<String> {
        let strategy = crate::protocols::agent_socket::fuzz::strategy(vec!["m".into()]);
        let mut runner = runner_for(seed);
        (0..50)
            .map(|_| format!("{:?}", strategy.new_tree(&mut runner).unwrap().current()))
            .collect()
    }

    #[test]
    fn a_seed_means_the_same_inputs() {
        assert_eq!(first_inputs(9), first_inputs(9));
        assert_ne!(first_inputs(9), first_inputs(10));
    }

    #[test]
    fn a_failure_is_classed_by_its_first_finding_not_its_words() {
        use crate::evidence::{Finding, Kind};
        let mut r = invalid_case(&json!("x"), String::new());
        assert_eq!(class_of(&r), "conform could not run the input");
        r.outcome = Outcome::Fail;
        r.message = "[MUST acp.jsonrpc.id-echo] words that say something else".into();
        r.findings = vec![
            Finding::new(None, Kind::Missing, "a probe: no answer"),
            Finding::new(
                Some("acp.jsonrpc.id-echo"),
                Kind::Envelope,
                "the response to 7",
            ),
        ];
        assert_eq!(class_of(&r), "case missing");
        assert!(has_class(&r, "acp.jsonrpc.id-echo envelope"));
        assert!(!has_class(&r, "acp.jsonrpc.id-echo shape"));
        r.findings.remove(0);
        assert_eq!(class_of(&r), "acp.jsonrpc.id-echo envelope");
    }
}
