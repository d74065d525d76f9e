//! One stdio exchange for the line and frame protocols (ACP lines, cwx
//! frames, as the stream's codec says): the target's stream, the case's transcript and evidence, the
//! requests conform sent and their answers. The protocol plugs in its
//! sans-IO [`Watch`] (what every message the target writes is held to) and
//! its [`Answerer`] (the role conform plays when the target asks it
//! something); the drivers build their steps from the primitives here.

use crate::case::Pause;
use crate::evidence::{Evidence, Finding, Kind};
use crate::matcher::Vars;
use crate::outcome::{Direction, Transcript};
use crate::step::{Action, Bytes, Language, ReplyRule, StdioExpect, Step};
use crate::transport::process;
use crate::transport::stdio::{LineStream, StreamEvent};
use crate::wire::Codec;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

/// How long a write may take before the target counts as not reading.
const WRITE_WITHIN: Duration = Duration::from_secs(10);
/// How long conform gives a target whose stdout closed to be seen exited.
const EXIT_SETTLE: Duration = Duration::from_millis(300);

/// A message the target wrote, as the watch read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The target asks conform something; conform answers (or holds it).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// The answer to the request conform sent under `key`.
    Response {
        key: String,
        outcome: Result<Value, Value>,
    },
    /// A notification, or a line that is no message conform acts on.
    Other,
}

/// The protocol's sans-IO view of the exchange: what every message is held to.
pub trait Watch: Send {
    /// conform sends `message`; the key its answer will be found by, for a request.
    fn sent(&mut self, message: &Value) -> Option<String>;
    /// conform wrote `bytes` as they are: requests among them may be answered.
    fn sent_raw(&mut self, bytes: &[u8]);
    /// The target wrote `payload`.
    fn received(&mut self, payload: &[u8]) -> Incoming;
    /// The target's stream broke (a bad frame): true when the watch
    /// recorded what rule that breaks, false when it cannot happen here
    /// (then it is conform's error).
    fn broke(&mut self, _why: &str) -> bool {
        false
    }
    /// The target's stdout ended inside a message; a case finding to add,
    /// when the watch does not record it as a rule of its own.
    fn ended_inside(&mut self, partial: &[u8]) -> Option<Finding>;
    /// Whether a case's remaining steps are pointless given what was found
    /// so far (`closed`: the target's stdout closed).
    fn ends_steps(&self, _found: &Evidence, _closed: bool) -> bool {
        false
    }
    /// Whether the exchange is over: a core ends it at the host's first
    /// protocol error, so nothing after it is read.
    fn halted(&self) -> bool {
        false
    }
    /// The rules broken so far, each naming its requirement.
    fn findings(&self) -> Vec<Finding>;
    /// Requirements whose triggering behaviour the exchange showed (each
    /// then counts as exercised by the case).
    fn exercised(&self) -> Vec<String> {
        Vec::new()
    }
    /// The requirement an unanswered request breaks, where the protocol
    /// has one; `None` leaves it the case's own finding.
    fn unanswered_rule(&self) -> Option<&'static str> {
        None
    }
    /// Whether an answer came under an id conform never sent while a
    /// request still unanswered was outstanding (a finding the watch
    /// names): a missing answer is then that finding's consequence.
    fn answered_under_another_id(&self) -> bool {
        false
    }
    /// Where answers broke their type, by the matcher's paths
    /// (`result.protocolVersion`), in findings the watch names: a case's
    /// pattern that mismatches there is their consequence.
    fn broken_fields(&self) -> &[String] {
        &[]
    }
    /// What the watch kept only in part, for a failing case's message.
    fn kept_note(&self) -> Option<String>;
}

/// The request a `probe` step sends to ask whether the target still serves;
/// also the liveness probe of a session that has one (see
/// [`Session::with_liveness`]).
#[derive(Debug, Clone, Copy)]
pub struct ProbeRequest {
    pub method: &'static str,
    /// What the reports call it.
    pub what: &'static str,
    /// What a pass observes.
    pub still: &'static str,
    /// How long its answer may take unless the step says.
    pub within: Duration,
}

/// A future the answerer returns.
pub type AnswerFuture<'a> = Pin<Box<dyn Future<Output = Option<Value>> + Send + 'a>>;

/// The role conform plays: how it answers the target's requests.
pub trait Answerer: Send {
    /// The whole response to request `id`, or `None` to hold it back.
    fn answer<'a>(
        &'a mut self,
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
        within: Duration,
    ) -> AnswerFuture<'a>;
}

/// One case's exchange with a target over its stdin and stdout.
pub struct Session<W: Watch> {
    stream: LineStream,
    codec: Codec,
    /// What the reports call the target: "agent", "host".
    who: &'static str,
    pub transcript: Transcript,
    pub ev: Evidence,
    /// The case's variables, for the templates of its steps.
    pub vars: Vars,
    pub watch: W,
    /// Answers that came, by request key.
    pub answers: HashMap<String, Result<Value, Value>>,
    /// `as` names: the request's key and what it was.
    pub named: HashMap<String, (String, String)>,
    next_id: i64,
    /// stdout closed (the target ended or closed it).
    pub closed: bool,
    /// An answer the case needed never came: later steps would build on nothing.
    pub stalled: bool,
    /// conform closed the target's stdin to end the case.
    ending: bool,
    /// How many findings the case had when the watch ended the exchange at
    /// a protocol error: its own checks that failed after that are the
    /// error's consequences, not breaches of the rules they check.
    halted_at: Option<usize>,
    /// The request that asks whether the target still serves, when the
    /// protocol has one: a wait that outlives its bound then gets a grace
    /// and this probe (`drive::patience`).
    liveness: Option<ProbeRequest>,
}

impl<W: Watch> Session<W> {
    /// The exchange on `stream`, started at `started`; conform's request ids
    /// count from `first_id`.
    pub fn new(
        stream: LineStream,
        who: &'static str,
        watch: W,
        started: Instant,
        first_id: i64,
    ) -> Session<W> {
        Session {
            codec: stream.codec(),
            stream,
            who,
            transcript: Transcript::new(started),
            ev: Evidence::default(),
            vars: Vars::default(),
            watch,
            answers: HashMap::new(),
            named: HashMap::new(),
            next_id: first_id,
            closed: false,
            stalled: false,
            ending: false,
            halted_at: None,
            liveness: None,
        }
    }

    /// The session with a liveness probe: a wait for an answer that
    /// outlives its bound gets a grace, during which conform sends `probe`
    /// (see `drive::patience`). Without one, a bound is final.
    pub fn with_liveness(mut self, probe: ProbeRequest) -> Session<W> {
        self.liveness = Some(probe);
        self
    }

    pub fn who(&self) -> &'static str {
        self.who
    }

    pub fn log(&mut self, dir: Direction, data: &[u8]) -> Option<usize> {
        self.transcript.log("stdio", dir, data)
    }

    /// The id of conform's next request.
    pub fn next_id(&mut self) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        Value::from(id)
    }

    async fn write_bytes(&mut self, bytes: &[u8]) -> bool {
        match self.stream.send(bytes, WRITE_WITHIN).await {
            Ok(()) => true,
            Err(e) => {
                self.log(Direction::Event, e.as_bytes());
                false
            }
        }
    }

    /// Writes one message; returns the key of a request.
    pub async fn send(&mut self, message: &Value) -> Option<String> {
        let key = self.watch.sent(message);
        let payload = message.to_string().into_bytes();
        let Some(bytes) = self.codec.encode(&payload) else {
            self.ev.error("a message conform built is over MAX_FRAME");
            return key;
        };
        // A line as written; a frame's payload, without its header.
        let shown = match self.codec {
            Codec::Lines { .. } => &bytes[..],
            Codec::Frames => &payload[..],
        };
        self.log(Direction::Sent, shown);
        self.write_bytes(&bytes).await;
        key
    }

    /// Sends request `method` with the next id; returns its key.
    pub async fn request(&mut self, method: &str, params: Value) -> Option<String> {
        let id = self.next_id();
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await
    }

    /// Writes `bytes` as they are, stopping at each pause for its time.
    pub async fn write_raw(&mut self, bytes: &[u8], pauses: &[Pause]) {
        self.watch.sent_raw(bytes);
        self.log(Direction::Sent, bytes);
        for (piece, ms) in crate::case::paced(bytes.len(), pauses) {
            if !self.write_bytes(&bytes[piece]).await {
                break;
            }
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }

    /// Reads and handles what the target writes, answering its requests,
    /// until `done` holds or `until` passes; says whether `done` held.
    pub async fn pump<A: Answerer>(
        &mut self,
        answerer: &mut A,
        until: Instant,
        done: &(dyn Fn(&Self) -> bool + Sync),
    ) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.halted_at.is_none() && self.watch.halted() {
                self.halted_at = Some(self.ev.findings.len());
            }
            if self.closed || self.watch.halted() {
                return false;
            }
            let Some((_, event)) = self.stream.next(until).await else {
                return done(self);
            };
            match event {
                StreamEvent::Line(payload) => {
                    if let Some(why) = crate::jsonrpc::too_many_values(&payload) {
                        self.log(
                            Direction::Event,
                            b"a message over conform's limit was dropped",
                        );
                        self.ev.error(format!("the {} wrote {why}", self.who));
                        return false;
                    }
                    self.log(Direction::Received, &payload);
                    match self.watch.received(&payload) {
                        Incoming::Request { id, method, params } => {
                            let within = until
                                .saturating_duration_since(Instant::now())
                                .max(Duration::from_secs(1));
                            if let Some(reply) =
                                answerer.answer(&id, &method, &params, within).await
                            {
                                self.send(&reply).await;
                            }
                        }
                        Incoming::Response { key, outcome } => {
                            self.answers.insert(key, outcome);
                        }
                        Incoming::Other => {}
                    }
                }
                StreamEvent::TooLong { limit } => {
                    self.log(Direction::Event, b"a line over conform's limit was dropped");
                    self.ev.error(format!(
                        "the {} wrote a line over conform's {limit}-byte limit; conform cannot judge it",
                        self.who
                    ));
                    return false;
                }
                StreamEvent::Broken(why) => {
                    if !self.watch.broke(&why) {
                        self.ev.error(why);
                        return false;
                    }
                    self.log(Direction::Event, why.as_bytes());
                }
                StreamEvent::Closed { partial } => {
                    self.closed = true;
                    if !partial.is_empty() {
                        if matches!(self.codec, Codec::Lines { .. }) {
                            self.log(Direction::Received, &partial);
                        }
                        if let Some(f) = self.watch.ended_inside(&partial) {
                            self.ev.push(f);
                        }
                    }
                    let status = self.stream.process.wait_for_exit(EXIT_SETTLE).await;
                    // A target that exits cleanly once conform ended its
                    // input is not news: the transcript leaves it out.
                    let clean = self.ending && status.is_some_and(|s| s.success());
                    if !clean {
                        let what = format!(
                            "stdout closed; the {} {}",
                            self.who,
                            process::describe_status(status)
                        );
                        self.log(Direction::Event, what.as_bytes());
                    }
                    return done(self);
                }
            }
        }
    }

    /// Keeps reading (and answering) for `within`.
    pub async fn quiet<A: Answerer>(&mut self, answerer: &mut A, within: Duration) {
        self.pump(answerer, Instant::now() + within, &|_| false)
            .await;
    }

    /// Reads (and answers) until the answer to request `key` comes, the
    /// stream ends, or `until` passes; takes the answer out when it came.
    pub async fn until_answered<A: Answerer>(
        &mut self,
        answerer: &mut A,
        key: &str,
        until: Instant,
    ) -> Option<Result<Value, Value>> {
        let k = key.to_owned();
        self.pump(answerer, until, &|s| s.answers.contains_key(&k))
            .await;
        self.answers.remove(key)
    }

    /// Whether the exchange can go on reading: the stream is open, the
    /// watch did not end it, and conform met no error of its own.
    fn reading(&self) -> bool {
        !self.closed && !self.watch.halted() && self.ev.error.is_none()
    }

    /// The grace after the bound of a wait for `key` passed: conform sends
    /// its liveness probe and reads on for `grace`, until the answer comes
    /// or the grace passes. What came, and what the probe showed.
    pub async fn in_grace<A: Answerer>(
        &mut self,
        answerer: &mut A,
        key: &str,
        grace: Duration,
    ) -> (Option<Result<Value, Value>>, super::patience::Liveness) {
        use super::patience::Liveness;
        if !self.reading() || grace.is_zero() {
            let live = if self.reading() {
                Liveness::Unprobed
            } else {
                Liveness::Gone
            };
            return (self.answers.remove(key), live);
        }
        let sent = Instant::now();
        let until = sent + grace;
        let probe = match self.liveness {
            Some(p) => self.request(p.method, serde_json::json!({})).await,
            None => None,
        };
        let mut answered_at = None;
        loop {
            let k = key.to_owned();
            let pk = probe.clone();
            let got_probe = answered_at.is_some();
            // Until the answer comes, or the probe's answer (noted, then on
            // to the end of the grace).
            self.pump(answerer, until, &|s| {
                s.answers.contains_key(&k)
                    || (!got_probe && pk.as_ref().is_some_and(|p| s.answers.contains_key(p)))
            })
            .await;
            if let Some(p) = &probe
                && self.answers.remove(p).is_some()
            {
                answered_at.get_or_insert(sent.elapsed());
            }
            if self.answers.contains_key(key) || !self.reading() || Instant::now() >= until {
                break;
            }
        }
        let live = match (answered_at, &probe) {
            (Some(after), _) => Liveness::Alive(after),
            (None, _) if !self.reading() => Liveness::Gone,
            (None, Some(_)) => Liveness::Stuck,
            (None, None) => Liveness::Unprobed,
        };
        (self.answers.remove(key), live)
    }

    /// Waits for the answer to request `key` for `bound`, then, when the
    /// session has a liveness probe, for the grace after it
    /// (`drive::patience`); records nothing.
    pub async fn wait_patiently<A: Answerer>(
        &mut self,
        answerer: &mut A,
        key: &str,
        bound: Duration,
    ) -> super::patience::Waited {
        use super::patience::{Liveness, Waited, grace};
        let start = Instant::now();
        let answer = self.until_answered(answerer, key, start + bound).await;
        let grace = if self.liveness.is_some() && !bound.is_zero() {
            grace(bound)
        } else {
            Duration::ZERO
        };
        let (answer, liveness) = match answer {
            Some(a) => (Some(a), Liveness::Unprobed),
            None => self.in_grace(answerer, key, grace).await,
        };
        Waited {
            answer,
            after: start.elapsed(),
            bound,
            grace,
            liveness,
        }
    }

    /// Waits for the answer to request `key` (`what` names it), with the
    /// grace and probe of a session that has one; an answer in the grace is
    /// noted as slow. A missing answer is a finding, and the case has
    /// nothing more to stand on.
    pub async fn answer<A: Answerer>(
        &mut self,
        answerer: &mut A,
        key: &str,
        what: &str,
        within: Duration,
    ) -> Option<Result<Value, Value>> {
        let waited = self.wait_patiently(answerer, key, within).await;
        if let Some(a) = waited.answer.clone() {
            self.ev.notes.extend(waited.slow_note(what));
            return Some(a);
        }
        self.missing(what, &waited);
        None
    }

    /// Records that the answer to `what` did not come in `waited`.
    pub fn missing(&mut self, what: &str, waited: &super::patience::Waited) {
        use super::patience::Liveness;
        let why = if self.watch.halted() {
            format!(
                "none: the exchange ended at the {}'s protocol error",
                self.who
            )
        } else if self.closed {
            format!(
                "the {} closed its stdout (it {})",
                self.who,
                process::describe_status(self.stream.process.exit_status())
            )
        } else {
            let probe = self.liveness.map_or("a probe", |p| p.what);
            match waited.liveness {
                Liveness::Alive(_) | Liveness::Stuck => format!(
                    "nothing within {}; {}",
                    waited.waited(),
                    waited.liveness.describe(probe)
                ),
                _ => format!("nothing within {}", waited.waited()),
            }
        };
        let rule = self.watch.unanswered_rule();
        self.ev
            .push(Finding::new(
                rule,
                Kind::Missing,
                format!("expected an answer to {what}, got {why}"),
            ))
            .seen(format!("an answer to {what}"), why)
            .found_by("reply");
        self.stalled = true;
    }

    /// `v` with the case's variables in place of its templates; a template
    /// that names nothing is conform's error (the case file's).
    pub fn expand(&mut self, v: &Value) -> Option<Value> {
        match crate::matcher::expand(v, &self.vars) {
            Ok(v) => Some(v),
            // A capture the target's answer gave without the field a later
            // step needs (`${s.sessionId}` of a result with none): the case
            // cannot go on, on the target's account, and the rule the
            // answer broke is named where it came; a name the case never
            // captured is the case file's fault.
            Err(e) => {
                let captured =
                    e.0.split_once('.')
                        .is_some_and(|(root, _)| self.vars.get(root).is_some());
                if captured {
                    self.ev.setup_failed(
                        Kind::Missing,
                        format!(
                            "a later step needs `{}`, which the target's answer did not give",
                            e.0
                        ),
                    );
                } else {
                    self.ev.error(e.to_string());
                }
                None
            }
        }
    }

    /// What `answer` breaks of a step that wants `rule` with these result
    /// and error patterns (see [`super::judge_answer`]); `None` when a
    /// pattern's template names nothing.
    pub fn judge(
        &mut self,
        answer: &Result<Value, Value>,
        rule: ReplyRule,
        result: &Option<Value>,
        error: &Option<Value>,
    ) -> Option<Vec<Finding>> {
        let pattern = match (answer, result, error) {
            (Ok(_), Some(p), _) | (Err(_), _, Some(p)) => Some(self.expand(p)?),
            _ => None,
        };
        Some(super::judge_answer(
            answer,
            rule,
            pattern.as_ref(),
            &mut self.vars,
        ))
    }

    /// Records what a step found of the answer to `what`: the findings, each
    /// saying what it is about, or what came when nothing was wrong.
    pub fn conclude(&mut self, what: &str, answer: &Result<Value, Value>, found: Vec<Finding>) {
        // A pattern's mismatch where the watch found the answer not its
        // type adds nothing to that finding: its consequence.
        let broken = self.watch.broken_fields();
        let mut found = found;
        for f in &mut found {
            let path = f.message.split_once(": ").map_or("", |(p, _)| p);
            if f.kind == Kind::Mismatch
                && f.requirement.is_none()
                && broken
                    .iter()
                    .any(|at| crate::matcher::path_within(path, at))
            {
                f.consequence = true;
            }
        }
        if found.is_empty() {
            self.ev.observe(format!(
                "{what}: {}",
                crate::jsonrpc::describe_answer(answer)
            ));
        }
        for mut f in found {
            f.message = format!("{what}: {}", f.message);
            self.ev.push(f);
        }
    }

    /// Closes the target's stdin and reads on until it closes stdout, for
    /// `within`; `exit: Some(true)` means it must have exited by then.
    pub async fn close_stdin<A: Answerer>(
        &mut self,
        answerer: &mut A,
        within: Duration,
        exit: Option<bool>,
    ) {
        self.stream.close_stdin();
        let what = format!("conform closed the {}'s stdin", self.who);
        self.log(Direction::Event, what.as_bytes());
        // Keep reading so a blocked writer can finish.
        self.pump(answerer, Instant::now() + within, &|s| s.closed)
            .await;
        let status = self.stream.process.wait_for_exit(within).await;
        self.ev.observe(format!(
            "after its stdin closed the {} {}",
            self.who,
            process::describe_status(status)
        ));
        if exit == Some(true) && status.is_none() {
            self.ev.fail(
                Kind::Process,
                format!(
                    "the {} was still running {:.0}s after its stdin closed",
                    self.who,
                    within.as_secs_f64()
                ),
            );
        }
    }

    /// The target exits by itself within `within`.
    pub async fn exits_within<A: Answerer>(&mut self, answerer: &mut A, within: Duration) {
        self.pump(answerer, Instant::now() + within, &|s| s.closed)
            .await;
        match self.stream.process.wait_for_exit(within).await {
            Some(s) => self.ev.observe(format!(
                "the {} {}",
                self.who,
                process::describe_status(Some(s))
            )),
            None => {
                self.ev.fail(
                    Kind::Process,
                    format!(
                        "the {} was still running {:.0}s later",
                        self.who,
                        within.as_secs_f64()
                    ),
                );
            }
        }
    }

    /// Ends the target: stdin closed, what it writes until stdout closes
    /// read (for at most `grace`), a moment to exit, then its group ended.
    /// Says whether it had ended by itself first (not at a protocol error,
    /// where the exchange was over and its exit a race).
    pub async fn finish<A: Answerer>(&mut self, answerer: &mut A, grace: Duration) -> bool {
        let early =
            (self.closed || self.stream.process.exit_status().is_some()) && !self.watch.halted();
        self.stream.close_stdin();
        self.ending = true;
        // Whatever the target writes until it closes its stdout still
        // counts; reading to that close, rather than for a fixed while,
        // costs a target that exits on end of input nothing.
        if !self.closed {
            self.pump(answerer, Instant::now() + grace, &|_| false)
                .await;
        }
        let _ = self.stream.process.wait_for_exit(grace).await;
        let _ = self.stream.process.shutdown(process::TERM_GRACE).await;
        early
    }

    /// Whether the case's next step has something to stand on: no answer
    /// it needed went missing, it was not skipped or errored, and the watch
    /// sees nothing that ends the steps.
    pub fn goes_on(&self) -> bool {
        !self.stalled
            && self.ev.skip.is_none()
            && self.ev.error.is_none()
            && !self.watch.ends_steps(&self.ev, self.closed)
    }

    /// The bytes of a `raw` step, its templates expanded; `None` when a
    /// template names nothing (the case's error, recorded).
    pub fn raw_bytes(&mut self, bytes: &Bytes) -> Option<Vec<u8>> {
        match bytes {
            Bytes::Text(raw) => match self.expand(&Value::String(raw.clone()))? {
                Value::String(text) => Some(text.into_bytes()),
                _ => None,
            },
            other => Some(other.generated().unwrap_or_default()),
        }
    }

    /// Runs an action every stdio dialect means the same by (`quiet`,
    /// `probe`, `closeStdin`, `exitsWithin`); any other is the driver's and
    /// does nothing here.
    pub async fn common<A: Answerer, L: Language>(
        &mut self,
        answerer: &mut A,
        step: &Step<L>,
        probe: &ProbeRequest,
    ) where
        L::Expect: StdioExpect,
    {
        let deadline = step.deadline.map(Duration::from_secs_f64);
        let exit = step.expect.as_ref().and_then(StdioExpect::exit);
        match &step.action {
            Action::Quiet(secs) => self.quiet(answerer, Duration::from_secs_f64(*secs)).await,
            Action::Probe => {
                let Some(key) = self.request(probe.method, serde_json::json!({})).await else {
                    return;
                };
                let within = deadline.unwrap_or(probe.within);
                if self
                    .answer(answerer, &key, probe.what, within)
                    .await
                    .is_some()
                {
                    self.ev.observe(probe.still);
                }
            }
            Action::CloseStdin => {
                let within = deadline.unwrap_or(Duration::from_secs(5));
                self.close_stdin(answerer, within, exit).await;
            }
            Action::ExitsWithin(secs) => {
                self.exits_within(answerer, Duration::from_secs_f64(*secs))
                    .await;
            }
            _ => {}
        }
    }

    /// Ends the target (see [`Session::finish`]) and grades the case from
    /// its evidence and transcript.
    pub async fn graded<A: Answerer, D: crate::case::Dialect>(
        mut self,
        answerer: &mut A,
        grace: Duration,
        case: &crate::case::Case<D>,
        strict: bool,
        started: Instant,
    ) -> crate::outcome::CaseResult {
        let ended_early = self.finish(answerer, grace).await;
        let evidence = self.evidence(ended_early);
        crate::outcome::CaseResult::graded(
            case,
            evidence,
            strict,
            started,
            self.transcript.into_entries(),
        )
    }

    /// Ends the case but not the target, whose stream goes on to serve
    /// another case: the evidence (with the target's stderr when its stdout
    /// closed), the transcript, and the stream.
    pub fn into_parts(mut self) -> (Evidence, Transcript, LineStream) {
        let closed = self.closed;
        let ev = self.evidence(closed);
        (ev, self.transcript, self.stream)
    }

    /// The case's evidence: what its steps found, every rule the watch saw
    /// broken, what the watch kept only in part, and the target's stderr
    /// when it ended by itself.
    pub fn evidence(&mut self, ended_early: bool) -> Evidence {
        let mut ev = std::mem::take(&mut self.ev);
        // After the watch ended the exchange at a protocol error (which it
        // names), what the case's own checks then missed is its consequence.
        // Only what did not come: a message that came and breaks a check is
        // that check's, whatever else it broke.
        if let Some(at) = self.halted_at {
            for f in ev.findings.iter_mut().skip(at) {
                if f.requirement.is_none() && !f.setup && f.kind == Kind::Missing {
                    f.consequence = true;
                }
            }
        }
        if self.watch.answered_under_another_id() {
            let unanswered = self.watch.unanswered_rule();
            for f in &mut ev.findings {
                if f.kind == Kind::Missing && f.requirement.as_deref() == unanswered {
                    f.consequence = true;
                }
            }
        }
        for f in self.watch.findings() {
            ev.push(f);
        }
        ev.exercised.extend(self.watch.exercised());
        ev.appendix.extend(self.watch.kept_note());
        if ended_early {
            let stderr = self.stream.process.stderr_tail();
            if !stderr.trim().is_empty() {
                ev.appendix.push(format!(
                    "the {}'s stderr:\n{}",
                    self.who,
                    crate::matcher::truncate(stderr.trim_end(), 2000)
                ));
            }
        }
        ev
    }
}
