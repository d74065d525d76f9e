//! `conform fuzz`: generated inputs against a live target, judged by the
//! same oracles as the suite, shrunk to a minimal case on a finding.
//!
//! Each protocol supplies a [`Harness`]: a proptest strategy for its inputs
//! (built from its table and golden corpus, see [`strategies`] and
//! [`seeds`]), the case file an input becomes, and a way to run a case
//! against a fresh target through the suite's driver. An input *is* a
//! case: the oracles are the protocol's step expectations and its watch
//! rules, each admitting every legal reading of the input ([`readings`]),
//! so a finding written to `--out` replays with `conform run --case FILE`
//! and fails the same way.
//!
//! Inputs are generated in order from the seed (ChaCha, so the same seed
//! gives the same inputs everywhere) and run `jobs` at a time. A stdio
//! harness runs them on persistent targets ([`live`]): many inputs per
//! process after its handshake. The run keeps a map of the response states
//! the target showed ([`states`]) and prefers, as the start of new inputs,
//! the messages of inputs that reached a new one.
//!
//! A finding is the typed [`crate::evidence::Finding::key`] of the first
//! finding of a failing input: its requirement and kind, never its words.
//! On one the engine lets the inputs in flight finish, then replays the
//! input on a fresh target; when it does not fail the same way alone but
//! did on a live target, with the inputs that target ran before it (the
//! fewest of them that still fail it). It shrinks the input with proptest's
//! value tree, keeping a step only when it fails with the same finding, and
//! writes the case only after it has been replayed from its written text
//! and failed the same way again; its provenance names the finding.

pub mod live;
pub mod readings;
#[cfg(test)]
mod regressions;
pub mod seeds;
pub mod states;
pub mod strategies;
pub mod targets;

use crate::error::RunError;
use crate::outcome::{CaseResult, Outcome};
use crate::runner::CaseFuture;
use live::{Lease, Slot};
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use states::{Framing, StateMap};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strategies::Pool;
use tokio::task::JoinSet;

pub type ResetFuture = Pin<Box<dyn Future<Output = Result<(), RunError>> + Send>>;

/// What a protocol gives the fuzzer.
pub trait Harness: Send + Sync + 'static {
    type Input: Clone + std::fmt::Debug + Send + Sync + 'static;
    /// The strategy the inputs come from.
    fn strategy(&self) -> BoxedStrategy<Self::Input>;
    /// The golden messages inputs start from.
    fn golden(&self) -> Vec<Value>;
    /// The case (one item of a case file, `id`) input number `index`
    /// becomes, its messages taken from `pool`.
    fn case(&self, input: &Self::Input, pool: &Pool, id: &str, index: u64) -> Value;
    /// The messages input number `index` carries, before damage to their
    /// bytes: what joins the pool when the input reached a new state.
    fn messages(&self, input: &Self::Input, pool: &Pool, index: u64) -> Vec<Value>;
    /// Runs one case against a fresh target through the suite's driver (for
    /// agent-socket, a connection to the running server): how every input
    /// is run without a live target, and how every finding is replayed.
    fn run(self: Arc<Self>, case: Value) -> CaseFuture;
    /// Gives the next case a target in its first state (a dead server is
    /// started again).
    fn reset(self: Arc<Self>) -> ResetFuture;
    /// Where an input may run when the harness has live targets.
    fn slot(&self, _input: &Self::Input, _pool: &Pool) -> Slot {
        Slot::Alone
    }
    /// Starts a live target through its handshake; `None` when the harness
    /// runs every input through [`Harness::run`].
    fn start_live(self: Arc<Self>) -> Option<live::Starting> {
        None
    }
    /// How the protocol frames messages, for the state map.
    fn framing(&self) -> Framing;
    /// Whether `method` is one of the protocol's table.
    fn known(&self, method: &str) -> bool;
    /// Ends what the harness started, with what it has to say.
    fn finish(self: Arc<Self>) -> live::BoxFuture<'static, Vec<String>> {
        Box::pin(async { Vec::new() })
    }
}

/// `conform fuzz` for a protocol: its harness made, the run, the harness
/// finished with its notes.
pub fn start<'a, H, F>(
    make: F,
    options: &'a Options,
    progress: &'a mut dyn FnMut(&str),
) -> crate::suite::BoxFuture<'a, crate::suite::FuzzOutcome>
where
    H: Harness,
    F: Future<Output = Result<H, RunError>> + 'a,
{
    Box::pin(async move {
        let h = Arc::new(make.await?);
        let report = fuzz(h.clone(), options, progress).await;
        let notes = h.finish().await;
        Ok((report?, notes))
    })
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
    /// The finding it keeps: its requirement and kind (see [`class_of`]).
    pub class: String,
    /// The shrunk case's result.
    pub result: CaseResult,
    /// The shrunk case, as written.
    pub case: Value,
    pub shrink_steps: usize,
    /// True once the written case failed the same way on a fresh target.
    pub reproduced: bool,
    /// The inputs before it, on its live target, that it needs to fail
    /// (their numbers); empty for a finding that fails alone.
    pub preceding: Vec<u64>,
    /// The reproducer, written only when `reproduced`.
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
    /// The response states the target showed, with how many inputs reached each.
    pub states: BTreeMap<String, u64>,
    /// Inputs run on live targets, and how many live targets were started.
    pub live_inputs: u64,
    pub live_targets: u64,
    /// The messages the run found and built inputs on.
    pub found: usize,
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
        exercised: vec![],
    }
}

/// A generated case read back as the protocol's case, its steps checked as
/// the corpus's are; a case that does not read is conform's own error.
pub fn parse_generated<D: crate::case::Dialect>(
    case: &Value,
) -> Result<crate::case::Case<D>, Box<CaseResult>> {
    use serde::Deserialize;
    let id = case.get("id").cloned().unwrap_or_default();
    let case = crate::case::Case::<D>::deserialize(case).map_err(|e| {
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

/// Whether `r` failed with the finding of `class` (among others, maybe): a
/// simpler input, or a replay, that keeps the bug.
pub fn has_class(r: &CaseResult, class: &str) -> bool {
    if !is_finding(r) {
        return false;
    }
    if r.outcome == Outcome::Error {
        return class == class_of(r);
    }
    r.findings.iter().any(|f| {
        let (requirement, kind) = f.key();
        format!("{requirement} {}", kind_name(kind)) == class
    })
}

pub(crate) fn kind_name(kind: crate::evidence::Kind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn is_finding(r: &CaseResult) -> bool {
    matches!(r.outcome, Outcome::Fail | Outcome::Warn | Outcome::Error)
}

/// One input in flight: its value tree, the pool it was built from, its case.
struct Pending<V> {
    tree: Box<dyn ValueTree<Value = V>>,
    pool: Pool,
    /// Shared with the task that runs it and its live target's history.
    case: Arc<Value>,
}

/// How an input ran.
struct Ran {
    result: CaseResult,
    /// The inputs its live target ran before it; empty on a fresh target.
    before: Vec<(u64, Arc<Value>)>,
    live: bool,
    /// A live target was started for it.
    started: bool,
}

/// Runs one input: on a live target when its slot allows and the harness
/// has them (one from the pool, or a new one), else through the driver.
async fn run_input<H: Harness>(
    h: Arc<H>,
    pool: Arc<live::Pool>,
    case: Arc<Value>,
    index: u64,
    slot: Slot,
) -> Ran {
    if slot != Slot::Alone {
        let mut started = false;
        let lease = match pool.take() {
            Some(l) => Some(l),
            None => match h.clone().start_live() {
                Some(starting) => {
                    started = true;
                    starting.await.ok().map(|live| Lease {
                        live,
                        history: Vec::new(),
                    })
                }
                None => None,
            },
        };
        // A target that cannot be started live runs the input through the
        // driver, which reports why.
        if let Some(mut lease) = lease {
            let result = lease.live.run(&case).await;
            let before = lease.history.clone();
            lease.history.push((index, case));
            let again = slot == Slot::Shared
                && !is_finding(&result)
                && lease.live.usable()
                && lease.history.len() < live::EVERY;
            if again {
                pool.give(lease);
            } else {
                pool.retire(lease.live).await;
            }
            return Ran {
                result,
                before,
                live: true,
                started,
            };
        }
    }
    Ran {
        result: h.run(Arc::unwrap_or_clone(case)).await,
        before: Vec::new(),
        live: false,
        started: false,
    }
}

/// The run's bookkeeping of each finished input.
struct Book {
    report: Report,
    states: StateMap,
    /// Messages of inputs that reached a new state, by input number, until
    /// the pool takes them in order.
    found: BTreeMap<u64, Vec<Value>>,
    /// Inputs finished out of order, and the first input not finished.
    finished: std::collections::BTreeSet<u64>,
    done_below: u64,
}

impl Book {
    fn record<H: Harness>(
        &mut self,
        h: &H,
        index: u64,
        ran: &Ran,
        pending: Option<&Pending<H::Input>>,
    ) {
        let r = &ran.result;
        self.report.inputs += 1;
        *self.report.outcomes.entry(r.outcome.as_str()).or_default() += 1;
        if ran.live {
            self.report.live_inputs += 1;
        }
        if ran.started {
            self.report.live_targets += 1;
        }
        self.finished.insert(index);
        while self.finished.remove(&self.done_below) {
            self.done_below += 1;
        }
        let Some(p) = pending else { return };
        let phase = p.case["config"]["setup"].as_str().unwrap_or("connection");
        let reached = states::of(&p.case, r, h.framing(), phase, &|m| h.known(m));
        if self.states.record(reached) {
            self.found
                .insert(index, h.messages(&p.tree.current(), &p.pool, index));
        }
    }
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
    let jobs = options.jobs.max(1);
    // An input is built on the messages found by inputs at least this many
    // before it, all finished: the pool it sees does not depend on which
    // of the inputs in flight finished first.
    let lag = (2 * jobs as u64).max(256);
    let mut pool = Pool::new(harness.golden());
    let lives = Arc::new(live::Pool::new(jobs));
    let mut book = Book {
        report: Report {
            seed: options.seed,
            inputs: 0,
            elapsed: Duration::ZERO,
            outcomes: HashMap::new(),
            findings: Vec::new(),
            states: BTreeMap::new(),
            live_inputs: 0,
            live_targets: 0,
            found: 0,
        },
        states: StateMap::default(),
        found: BTreeMap::new(),
        finished: Default::default(),
        done_below: 0,
    };
    let mut pending: HashMap<u64, Pending<H::Input>> = HashMap::new();
    let mut set: JoinSet<(u64, Ran)> = JoinSet::new();
    let mut next: u64 = 0;
    let mut last_progress = Instant::now();
    let mut stop = false;
    let mut failed: Option<RunError> = None;
    let limit_reached = |next: u64| {
        options.cases.is_some_and(|n| next >= n)
            || options.duration.is_some_and(|d| started.elapsed() >= d)
    };
    let outcome = loop {
        while !stop && set.len() < jobs && !limit_reached(next) && book.done_below + lag >= next {
            let settled = next.saturating_sub(lag);
            while let Some(entry) = book.found.first_entry() {
                if *entry.key() >= settled {
                    break;
                }
                pool.add(entry.remove());
            }
            let tree = match strategy.new_tree(&mut runner) {
                Ok(t) => t,
                Err(e) => {
                    failed = Some(RunError::Conform(format!("the generator failed: {e}")));
                    stop = true;
                    break;
                }
            };
            let input = tree.current();
            let id = case_id(options.protocol, options.seed, next);
            let case = Arc::new(harness.case(&input, &pool, &id, next));
            let slot = harness.slot(&input, &pool);
            pending.insert(
                next,
                Pending {
                    tree: Box::new(tree),
                    pool: pool.clone(),
                    case: case.clone(),
                },
            );
            let (h, lives, index) = (harness.clone(), lives.clone(), next);
            set.spawn(async move { (index, run_input(h, lives, case, index, slot).await) });
            next += 1;
        }
        if let Some(e) = failed.take() {
            break Err(e);
        }
        let Some(joined) = set.join_next().await else {
            break Ok(());
        };
        let (index, ran) = match joined {
            Ok(j) => j,
            Err(e) => break Err(RunError::Conform(format!("a fuzz case panicked: {e}"))),
        };
        let input = pending.remove(&index);
        book.record(harness.as_ref(), index, &ran, input.as_ref());
        if is_finding(&ran.result) && !stop {
            // A finding the run has is not shrunk again, unless it now
            // fails the run where it only warned before.
            let class = class_of(&ran.result);
            let fails = ran.result.outcome != Outcome::Warn;
            if book
                .report
                .findings
                .iter()
                .any(|f| f.class == class && (f.result.outcome != Outcome::Warn || !fails))
            {
                continue;
            }
            // Let what is in flight finish, so the shrinking has the target to
            // itself. Inputs that ran beside the culprit may have failed with
            // it (a dead server fails them all), so each failing one is a
            // suspect, tried alone in order.
            let mut suspects = vec![(index, ran, input)];
            while let Some(j) = set.join_next().await {
                if let Ok((i, r)) = j {
                    let p = pending.remove(&i);
                    book.record(harness.as_ref(), i, &r, p.as_ref());
                    if is_finding(&r.result) {
                        suspects.push((i, r, p));
                    }
                }
            }
            suspects.sort_by_key(|s| s.0);
            progress(&format!(
                "input {index}: {} ({class}); {} suspect input(s) to replay on a fresh target, then shrink",
                suspects[0].1.result.outcome.as_str(),
                suspects.len()
            ));
            let finding = match culprit(&harness, options, suspects).await {
                Ok(f) => f,
                Err(e) => break Err(e),
            };
            let failed = matches!(finding.result.outcome, Outcome::Fail | Outcome::Error);
            progress(&match &finding.file {
                Some(f) => format!(
                    "input {}: shrunk in {} steps, replayed and written to {}",
                    finding.index,
                    finding.shrink_steps,
                    f.display()
                ),
                None => format!(
                    "input {}: it did not fail the same way again on a fresh target; no reproducer",
                    finding.index
                ),
            });
            book.report.findings.push(finding);
            if failed {
                stop = true;
            } else if let Err(e) = harness.clone().reset().await {
                break Err(e);
            }
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            progress(&format!(
                "{} inputs, {:.0}/s, {} states, {} findings (seed {})",
                book.report.inputs,
                book.report.inputs as f64 / secs,
                book.states.len(),
                book.report.findings.len(),
                options.seed
            ));
        }
    };
    // Whatever ended the run, no live target outlives it.
    while set.join_next().await.is_some() {}
    lives.close().await;
    outcome?;
    let mut report = book.report;
    report.elapsed = started.elapsed();
    report.states = book.states.counts().clone();
    report.found = pool.found().len();
    Ok(report)
}

type Suspect<V> = (u64, Ran, Option<Pending<V>>);

/// Replays each suspect on a fresh target, in the order they were
/// generated: alone, then (for one that failed on a live target) after the
/// inputs that target ran before it. The first that fails with the same
/// finding again is shrunk. When none does, the first is reported as it
/// was, with no reproducer.
async fn culprit<H: Harness>(
    harness: &Arc<H>,
    options: &Options,
    suspects: Vec<Suspect<H::Input>>,
) -> Result<Finding, RunError> {
    let mut first: Option<(u64, CaseResult, Value)> = None;
    for (index, ran, p) in suspects {
        let Some(p) = p else { continue };
        let class = class_of(&ran.result);
        let id = case_id(options.protocol, options.seed, index);
        harness.clone().reset().await?;
        let again = harness.clone().run((*p.case).clone()).await;
        if has_class(&again, &class) {
            return shrink(harness, options, p, index, Vec::new(), again, class).await;
        }
        if !ran.before.is_empty() {
            let before: Vec<(u64, Value)> = ran
                .before
                .into_iter()
                .map(|(i, c)| (i, Arc::unwrap_or_clone(c)))
                .collect();
            let mut cases: Vec<Value> = before.iter().map(|(_, c)| c.clone()).collect();
            cases.push((*p.case).clone());
            harness.clone().reset().await?;
            let again = harness.clone().run(live::join(&cases, &id)).await;
            if has_class(&again, &class) {
                let (prefix, again) =
                    fewest_before(harness, options, before, &p.case, &class, again).await?;
                return shrink(harness, options, p, index, prefix, again, class).await;
            }
        }
        if first.is_none() {
            first = Some((index, ran.result, Arc::unwrap_or_clone(p.case)));
        }
    }
    let (index, result, case) = first.ok_or_else(|| {
        RunError::Conform("a finding without its input (a bug in conform)".into())
    })?;
    harness.clone().reset().await?;
    Ok(Finding {
        index,
        class: class_of(&result),
        result,
        case,
        shrink_steps: 0,
        reproduced: false,
        preceding: Vec::new(),
        file: None,
    })
}

/// `last` after the inputs of `prefix` on one target, as one case.
fn with_prefix(prefix: &[(u64, Value)], last: Value, id: &str) -> Value {
    let mut cases: Vec<Value> = prefix.iter().map(|(_, c)| c.clone()).collect();
    cases.push(last);
    live::join(&cases, id)
}

/// The fewest of the inputs `before` (in their order) after which `last`
/// still fails with `class` on a fresh target, and that run's result
/// (`failed`, the run after all of them, to begin with): delta debugging,
/// within half the shrinking's budget.
async fn fewest_before<H: Harness>(
    harness: &Arc<H>,
    options: &Options,
    before: Vec<(u64, Value)>,
    last: &Value,
    class: &str,
    failed: CaseResult,
) -> Result<(Vec<(u64, Value)>, CaseResult), RunError> {
    let id = last["id"].as_str().unwrap_or("").to_owned();
    let deadline = Instant::now() + options.shrink_time / 2;
    let mut attempts = 0;
    let mut kept = before;
    let mut result = failed;
    let mut parts = 2usize;
    while kept.len() > 1 && attempts < options.shrink_limit && Instant::now() < deadline {
        let chunk = kept.len().div_ceil(parts);
        let mut smaller = None;
        for start in (0..kept.len()).step_by(chunk) {
            let candidate: Vec<(u64, Value)> = kept[..start]
                .iter()
                .chain(kept.get(start + chunk..).unwrap_or_default())
                .cloned()
                .collect();
            // Alone, it was tried already.
            if candidate.is_empty() {
                continue;
            }
            attempts += 1;
            harness.clone().reset().await?;
            let r = harness
                .clone()
                .run(with_prefix(&candidate, last.clone(), &id))
                .await;
            if has_class(&r, class) {
                smaller = Some(candidate);
                result = r;
                break;
            }
        }
        match smaller {
            Some(c) => {
                kept = c;
                parts = parts.saturating_sub(1).max(2);
            }
            None if chunk == 1 => break,
            None => parts = (parts * 2).min(kept.len()),
        }
    }
    Ok((kept, result))
}

/// Shrinks a failing input (after `prefix`, when it needs the inputs before
/// it): proptest's simplify while the simpler input still fails with the
/// same finding, complicate when it does not. Then the case is replayed
/// from its written text, and written only if it fails the same way again.
async fn shrink<H: Harness>(
    harness: &Arc<H>,
    options: &Options,
    mut p: Pending<H::Input>,
    index: u64,
    prefix: Vec<(u64, Value)>,
    mut best: CaseResult,
    class: String,
) -> Result<Finding, RunError> {
    let id = case_id(options.protocol, options.seed, index);
    let build =
        |input: &H::Input| with_prefix(&prefix, harness.case(input, &p.pool, &id, index), &id);
    let mut best_case = build(&p.tree.current());
    let mut steps = 0;
    let deadline = Instant::now() + options.shrink_time;
    let mut attempts = 0;
    let mut more = p.tree.simplify();
    while more && attempts < options.shrink_limit && Instant::now() < deadline {
        attempts += 1;
        let case = build(&p.tree.current());
        harness.clone().reset().await?;
        let r = harness.clone().run(case.clone()).await;
        if has_class(&r, &class) {
            steps += 1;
            best = r;
            best_case = case;
            more = p.tree.simplify();
        } else {
            more = p.tree.complicate();
        }
    }
    // The case as the file will hold it, replayed: a reproducer is written
    // only once it has failed the same way from its own text.
    let text = serde_json::to_string_pretty(&best_case).unwrap_or_default();
    let written: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let mut replays = 0;
    let mut confirmed = None;
    while confirmed.is_none() && replays < 3 {
        replays += 1;
        harness.clone().reset().await?;
        let r = harness.clone().run(written.clone()).await;
        if has_class(&r, &class) {
            confirmed = Some(r);
        }
    }
    harness.clone().reset().await?;
    let preceding: Vec<u64> = prefix.iter().map(|(i, _)| *i).collect();
    let file = match &confirmed {
        Some(r) => Some(write_reproducer(
            options,
            &Kept {
                index,
                class: &class,
                result: r,
                case: &written,
                steps,
                replays,
                preceding: &preceding,
            },
        )?),
        None => None,
    };
    Ok(Finding {
        index,
        class,
        result: confirmed.unwrap_or(best),
        case: written,
        shrink_steps: steps,
        reproduced: file.is_some(),
        preceding,
        file,
    })
}

/// What a reproducer records.
struct Kept<'a> {
    index: u64,
    class: &'a str,
    result: &'a CaseResult,
    case: &'a Value,
    steps: usize,
    replays: usize,
    preceding: &'a [u64],
}

/// The command that replays a reproducer: `--strict` for a SHOULD
/// finding, so a target that still has it fails the replay.
fn replay_command(options: &Options, path: &std::path::Path, id: &str, outcome: Outcome) -> String {
    format!(
        "conform run --protocol {} --target '{}' --case {} --filter {}{}",
        options.protocol,
        options.target,
        path.display(),
        id,
        if outcome == Outcome::Warn {
            " --strict"
        } else {
            ""
        }
    )
}

/// Writes a finding as a case file with its provenance.
fn write_reproducer(options: &Options, k: &Kept) -> Result<PathBuf, RunError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| RunError::Conform(format!("cannot create {}: {e}", options.out.display())))?;
    let path = options.out.join(format!(
        "{}-{}-{}.json",
        options.protocol, options.seed, k.index
    ));
    let id = k.case.get("id").and_then(Value::as_str).unwrap_or("");
    let (requirement, kind) = k
        .result
        .findings
        .iter()
        .map(|f| {
            let (r, kind) = f.key();
            (r, kind_name(kind))
        })
        .find(|(r, kind)| format!("{r} {kind}") == k.class)
        .unwrap_or_else(|| (k.class.to_owned(), String::new()));
    let file = json!({
        "provenance": {
            "tool": "conform fuzz",
            "conform_version": env!("CARGO_PKG_VERSION"),
            "protocol": options.protocol,
            "role": options.role,
            "target": options.target,
            "seed": options.seed,
            "input": k.index,
            "finding": {"requirement": requirement, "kind": kind},
            "preceding_inputs": k.preceding,
            "shrink_steps": k.steps,
            "reproduced_alone": k.preceding.is_empty(),
            "replays_to_confirm": k.replays,
            "outcome": k.result.outcome.as_str(),
            "oracle": k.result.message,
            "found_unix_time": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            "replay": replay_command(options, &path, id, k.result.outcome),
        },
        "cases": [k.case],
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
    if report.live_inputs > 0 {
        out.push_str(&format!(
            "persistent: {} inputs on {} live targets, {} on fresh ones\n",
            report.live_inputs,
            report.live_targets,
            report.inputs - report.live_inputs
        ));
    }
    out.push_str(&format!(
        "states reached: {} ({} messages found and built on)\n",
        report.states.len(),
        report.found
    ));
    for (state, n) in &report.states {
        out.push_str(&format!("  {n:>7}  {state}\n"));
    }
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
            match (f.reproduced, f.preceding.len()) {
                (false, _) => "; it did not fail the same way again on a fresh target".to_owned(),
                (true, 0) => String::new(),
                (true, n) => format!("; it fails after {n} input(s) before it on one target"),
            }
        ));
        for line in f.result.message.lines().take(12) {
            out.push_str(&format!("    {line}\n"));
        }
        match &f.file {
            Some(file) => out.push_str(&format!(
                "    reproducer: {}\n    replay: {}\n",
                file.display(),
                replay_command(options, file, &f.result.id, f.result.outcome)
            )),
            None => out.push_str("    no reproducer written\n"),
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
