//! Persistent sessions for stdio targets, as AFL's persistent mode and
//! AFLNet run them: a target process goes through its handshake once, then
//! takes input after input, each checked as a case is (its steps, then a
//! probe, the watch on every message). A fresh process is started only when
//! the target died or broke the protocol, after an input whose kind leaves
//! state behind or ends the target (each harness says so: [`Slot`]), and
//! every [`EVERY`] inputs.
//!
//! Each live target keeps the inputs it ran, so a finding that does not
//! come back on a fresh target alone can be replayed with the inputs that
//! came before it (`fuzz::fuzz`).

use crate::case::{Case, Dialect};
use crate::drive::stdio::{Answerer, Session, Watch};
use crate::evidence::Evidence;
use crate::outcome::{CaseResult, Transcript};
use crate::step::{Action, Bytes, Language, Step};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The most inputs one live target takes. conform's own request ids on it
/// (the handshake's, a probe's per input) stay below the harnesses' own-id
/// bound, so they never meet a generated id, there or in a replay of its
/// inputs as one case.
pub const EVERY: usize = 48;

/// How many live targets a stdio fuzzer keeps busy unless `-j` says. An
/// input mostly waits (on its pauses, on the target's answer), so more
/// targets than cores keep the cores busy; measured with
/// `scripts/bench-fuzz.sh` (docs/fuzzing.md, "Figures").
pub const JOBS: usize = 8;

/// A future a live target's work runs as: sent to the fuzzer's tasks.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Where an input may run when the target is persistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// On a live target after its handshake, which takes more after it.
    Shared,
    /// On a live target, which is ended after it: the input leaves state
    /// behind (a second `initialize`) or ends the target (a bad frame, the
    /// end of input).
    Last,
    /// On a fresh target of its own: it needs the target in its first state
    /// (before or during the handshake).
    Alone,
}

/// A target that has been through its handshake and takes inputs.
pub trait Live: Send {
    /// Runs one input's case on it.
    fn run<'a>(&'a mut self, case: &'a Value) -> BoxFuture<'a, CaseResult>;
    /// Whether it can take another input: still running, its exchange sound.
    fn usable(&self) -> bool;
    /// Ends it.
    fn end(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// A live target starting: its handshake, or why it failed.
pub type Starting = BoxFuture<'static, Result<Box<dyn Live>, String>>;

/// A live target and the inputs it ran, oldest first.
pub struct Lease {
    pub live: Box<dyn Live>,
    pub history: Vec<(u64, Arc<Value>)>,
}

/// The live targets not running an input, and those being ended.
pub struct Pool {
    idle: Mutex<Vec<Lease>>,
    /// One permit for each target that may be ending at once: a target is
    /// ended beside the inputs that go on (an input does not wait for the
    /// last one's target to close), and no more than this many at a time.
    ending: Arc<Semaphore>,
    most_ending: u32,
}

impl Pool {
    /// A pool where at most `most_ending` targets are being ended at once.
    pub fn new(most_ending: usize) -> Pool {
        let most_ending = u32::try_from(most_ending.max(1)).unwrap_or(u32::MAX);
        Pool {
            idle: Mutex::new(Vec::new()),
            ending: Arc::new(Semaphore::new(most_ending as usize)),
            most_ending,
        }
    }

    pub fn take(&self) -> Option<Lease> {
        self.idle.lock().ok().and_then(|mut v| v.pop())
    }

    pub fn give(&self, lease: Lease) {
        if let Ok(mut v) = self.idle.lock() {
            v.push(lease);
        }
    }

    /// Ends a target in the background, once a permit is free.
    pub async fn retire(&self, live: Box<dyn Live>) {
        match self.ending.clone().acquire_owned().await {
            Ok(permit) => {
                tokio::spawn(async move {
                    live.end().await;
                    drop(permit);
                });
            }
            // Closed: never, as the pool does not close it; end it here.
            Err(_) => live.end().await,
        }
    }

    /// Ends every idle target, and waits for every one being ended.
    pub async fn close(&self) {
        let all: Vec<Lease> = self
            .idle
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        for lease in all {
            lease.live.end().await;
        }
        let _ = self.ending.acquire_many(self.most_ending).await;
    }
}

/// How a protocol's live target is probed between inputs: the request the
/// driver's `probe` step sends, named as the driver names it.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub method: &'static str,
    /// What the report calls the probe ("a probe (host/ping)").
    pub what: &'static str,
    /// What an answered probe is observed as.
    pub answered: &'static str,
    pub deadline: Duration,
}

/// A live target over stdio: the shared session of the drivers, its watch
/// and conform's answering role kept from one input to the next. It runs
/// the steps a generated case has (`raw`/`rawHex`, `probe`, `closeStdin`,
/// `exitsWithin`) with the same session primitives, names and deadlines as
/// the drivers, so a finding reads the same either way; every finding is
/// replayed through the driver before it is reported.
pub struct StdioLive<D, W: Watch, A: Answerer> {
    pub s: Session<W>,
    pub role: A,
    pub probe: Probe,
    /// How long the target has to end once its stdin is closed.
    pub grace: Duration,
    /// What must live as long as the target (its workspace).
    pub keep: Option<Box<dyn std::any::Any + Send>>,
    pub _dialect: std::marker::PhantomData<fn() -> D>,
}

impl<D, W, A, L> Live for StdioLive<D, W, A>
where
    D: Dialect<Step = Step<L>>,
    L: Language,
    W: Watch + 'static,
    A: Answerer + 'static,
{
    fn run<'a>(&'a mut self, case: &'a Value) -> BoxFuture<'a, CaseResult> {
        Box::pin(async move {
            let case = match super::parse_generated::<D>(case) {
                Ok(c) => c,
                Err(conform_error) => return *conform_error,
            };
            self.run_case(&case).await
        })
    }

    fn usable(&self) -> bool {
        !self.s.closed && !self.s.stalled && !self.s.watch.halted()
    }

    fn end(self: Box<Self>) -> BoxFuture<'static, ()> {
        let mut me = *self;
        Box::pin(async move {
            me.s.finish(&mut me.role, me.grace).await;
        })
    }
}

impl<D, W, A, L> StdioLive<D, W, A>
where
    D: Dialect<Step = Step<L>>,
    L: Language,
    W: Watch + 'static,
    A: Answerer + 'static,
{
    async fn run_case(&mut self, case: &Case<D>) -> CaseResult {
        let started = Instant::now();
        self.s.ev = Evidence::default();
        self.s.transcript = Transcript::new(started);
        for step in &case.steps {
            if self.s.stalled
                || self.s.ev.error.is_some()
                || self.s.watch.halted()
                || !self.s.ev.findings.is_empty() && self.s.closed
            {
                break;
            }
            self.step(step).await;
        }
        let ended = self.s.closed;
        let evidence = self.s.evidence(ended);
        let transcript = std::mem::replace(&mut self.s.transcript, Transcript::new(started));
        CaseResult::graded(case, evidence, false, started, transcript.into_entries())
    }

    async fn step(&mut self, step: &Step<L>) {
        match &step.action {
            Action::Write(bytes) => {
                let bytes = match bytes {
                    Bytes::Text(raw) => match self.s.expand(&json!(raw)) {
                        Some(Value::String(text)) => text.into_bytes(),
                        _ => return,
                    },
                    other => other.generated().unwrap_or_default(),
                };
                self.s.write_raw(&bytes, &step.pauses).await;
            }
            Action::Probe => {
                let Some(key) = self.s.request(self.probe.method, json!({})).await else {
                    return;
                };
                let within = step.deadline_or(self.probe.deadline);
                if self
                    .s
                    .answer(&mut self.role, &key, self.probe.what, within)
                    .await
                    .is_some()
                {
                    self.s.ev.observe(self.probe.answered);
                }
            }
            Action::CloseStdin => {
                let within = step.deadline_or(Duration::from_secs(5));
                self.s.close_stdin(&mut self.role, within, None).await;
            }
            Action::ExitsWithin(secs) => {
                self.s
                    .exits_within(&mut self.role, Duration::from_secs_f64(*secs))
                    .await;
            }
            other => self.s.ev.error(format!(
                "a live target runs the steps of generated cases only, not {other:?}"
            )),
        }
    }
}

/// Several inputs' cases as one: the first's set-up, every step in order,
/// the last's level and requirements (the finding's), under `id`. What a
/// live target did across inputs, replayed on a fresh one.
pub fn join(cases: &[Value], id: &str) -> Value {
    let mut out = cases.last().cloned().unwrap_or_else(|| json!({}));
    let steps: Vec<Value> = cases
        .iter()
        .flat_map(|c| c["steps"].as_array().cloned().unwrap_or_default())
        .collect();
    if let (Value::Object(o), Some(first)) = (&mut out, cases.first()) {
        o.insert("id".into(), json!(id));
        o.insert("steps".into(), Value::Array(steps));
        if cases.len() > 1 {
            o.insert(
                "title".into(),
                json!(format!(
                    "Generated inputs, {} on one target: the last fails only after those before it",
                    cases.len()
                )),
            );
        }
        match first.get("config") {
            Some(c) => o.insert("config".into(), c.clone()),
            None => o.remove("config"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_cases_keep_every_step_the_first_setup_and_the_last_grade() {
        let a = json!({"id": "a", "level": "SHOULD", "requirements": ["r1"], "config": {"setup": "initialize"},
            "steps": [{"raw": "x\n"}, {"probe": true}]});
        let b = json!({"id": "b", "level": "MUST", "requirements": ["r2"], "config": {"setup": "initialize"},
            "steps": [{"raw": "y\n"}, {"probe": true}]});
        let j = join(&[a, b.clone()], "j");
        assert_eq!(j["id"], "j");
        assert_eq!(j["level"], "MUST");
        assert_eq!(j["requirements"], json!(["r2"]));
        assert_eq!(j["steps"].as_array().unwrap().len(), 4);
        assert_eq!(j["steps"][0]["raw"], "x\n");
        let alone = join(std::slice::from_ref(&b), "k");
        assert_eq!(alone["steps"], b["steps"]);
        assert_eq!(alone["id"], "k");
    }

    /// The findings of a result, by key, and its outcome.
    fn judged(
        r: &CaseResult,
    ) -> (
        crate::outcome::Outcome,
        Vec<(String, crate::evidence::Kind)>,
    ) {
        (r.outcome, r.findings.iter().map(|f| f.key()).collect())
    }

    /// Runs `n` inputs of `h`'s strategy both ways: each on a fresh target
    /// through the driver, and one after another on live targets.
    async fn both_ways<H: crate::fuzz::Harness>(h: Arc<H>, n: u64) -> usize {
        use proptest::strategy::{Strategy, ValueTree};
        let strategy = h.strategy();
        let mut runner = crate::fuzz::runner_for(3);
        let pool = crate::fuzz::strategies::Pool::new(h.golden());
        let mut live: Option<Box<dyn Live>> = None;
        let mut compared = 0;
        for index in 0..n {
            let input = strategy.new_tree(&mut runner).unwrap().current();
            let slot = h.slot(&input, &pool);
            if slot == Slot::Alone {
                continue;
            }
            let case = h.case(&input, &pool, "t/fuzz/1", index);
            let fresh = h.clone().run(case.clone()).await;
            let mut target = match live.take() {
                Some(l) => l,
                None => h.clone().start_live().unwrap().await.unwrap(),
            };
            let on_live = target.run(&case).await;
            assert_eq!(
                judged(&fresh),
                judged(&on_live),
                "input {index} ({slot:?}), fresh: {}\nlive: {}\ncase: {case:#}",
                fresh.message,
                on_live.message
            );
            if slot == Slot::Shared && target.usable() {
                live = Some(target);
            } else {
                target.end().await;
            }
            compared += 1;
        }
        if let Some(l) = live {
            l.end().await;
        }
        compared
    }

    /// A live target judges an input as the driver does on a fresh one:
    /// inputs of both stdio harnesses against their references in memory
    /// get the same outcome and the same findings either way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_target_judges_an_input_as_a_fresh_one_does() {
        use crate::protocols::{acp, cwx};
        use crate::transport::serve::testing::memory;
        let startup = Duration::from_secs(10);
        let agent =
            acp::fuzz::Harness::on(memory(acp::reference::Agent::new, |_| true), startup, 10.0)
                .await
                .unwrap();
        assert!(both_ways(Arc::new(agent), 150).await > 100);
        let host = cwx::fuzz::Harness::on(
            memory(
                || cwx::reference::Host::new(cwx::table::Tier::Plugin),
                |_| true,
            ),
            cwx::table::Tier::Plugin,
            None,
            startup,
            10.0,
        )
        .await
        .unwrap();
        assert!(both_ways(Arc::new(host), 150).await > 100);
    }
}
