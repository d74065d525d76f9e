//! conform playing the core: one fresh host process per case, framed
//! messages both ways, the core's strict reading of every frame the host
//! writes (`Watch`, sans-IO), the core's answers to the host's requests, and
//! the grading.

use super::steps::{AnswerRule, Expect, NamedCheck, Need, Setup, Step};
use super::table::{Tier, code};
use super::validate::{self, HostMessage};
use crate::case::Case;
use crate::evidence::{Evidence, Finding, Kind};
use crate::keep::Keep;
use crate::matcher::{self, Vars, truncate};
use crate::outcome::{CaseResult, Direction, SkipKind, TranscriptEntry};
use crate::step::ReplyRule as Reply;
use crate::transport::process;
use crate::transport::stdio::{LineStream, StreamEvent};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// "| `host/ping` | `PING_DEADLINE` (10 s) |": the default for any request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// "| `host/initialize` | `HANDSHAKE_DEADLINE` (30 s) |"
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(30);
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// The requirement each watched rule belongs to.
pub mod rules {
    pub const FRAME: &str = "cwx.frame.format";
    pub const STRICT: &str = "cwx.strict.host-messages";
    pub const ANSWERS: &str = "cwx.response.answers-a-request";
    pub const RESULT_SHAPE: &str = "cwx.result.shapes";
    pub const ALL: &[&str] = &[FRAME, STRICT, ANSWERS, RESULT_SHAPE];
    /// Every case's handshake alone is framed, strict, answered and shaped.
    pub const EVERY_MESSAGE: &[&str] = ALL;
}

/// The extension conform activates for the cases that need one.
#[derive(Debug, Clone)]
pub struct Extension {
    pub path: String,
    pub sha256: String,
}

/// `--extension PATH#SHA256`.
impl std::str::FromStr for Extension {
    type Err = String;

    fn from_str(s: &str) -> Result<Extension, String> {
        match s.split_once('#') {
            Some((path, sha256)) if !path.is_empty() && !sha256.is_empty() => Ok(Extension {
                path: path.into(),
                sha256: sha256.into(),
            }),
            _ => Err("an extension is PATH#SHA256".into()),
        }
    }
}

/// What every case of a run shares.
pub struct Context {
    pub command: String,
    pub tier: Tier,
    pub strict: bool,
    pub extension: Option<Extension>,
    pub startup: Duration,
}

/// The core's limits it sends in `host/initialize`.
fn initialize_params() -> Value {
    json!({"protocol": super::table::PROTOCOL_VERSION, "limits": {
        "max_frame": crate::wire::frame::MAX_FRAME, "max_inflight": super::table::MAX_INFLIGHT,
        "dispose_deadline_ms": 5000, "activate_deadline_ms": 10000}})
}

fn owner() -> Value {
    json!({"plugin_id": "conform-extension", "generation": 1,
        "owner_token": "c0nf0rmc0nf0rmc0nf0rmc0nf0rm0001"})
}

/// The core's bookkeeping of one host connection, sans-IO.
#[derive(Default)]
struct Watch {
    tier: Option<Tier>,
    /// Requests conform sent: id -> method.
    outstanding: BTreeMap<u64, String>,
    answers: HashMap<u64, Result<Value, Value>>,
    /// Host messages by method, in order, kept within `kept`.
    notifications: Vec<(String, Value)>,
    /// The account of what `notifications` keeps: a host that floods them
    /// does not grow conform.
    kept: Keep,
    violations: Vec<(String, Kind, String)>,
    /// Ids of raw messages conform sent that no core would (not a u64, or
    /// null for a payload whose id it cannot read): the host may echo them,
    /// or answer with a null id, which the core's parser refuses but no core
    /// would ever provoke.
    odd_ids: Vec<Value>,
}

impl Watch {
    fn violate(&mut self, rule: &str, kind: Kind, message: String) {
        if !self
            .violations
            .iter()
            .any(|(r, _, m)| r == rule && *m == message)
        {
            self.violations.push((rule.into(), kind, message));
        }
    }

    /// Records the requests among raw bytes conform wrote, frame by frame as
    /// the core's decoder reads them, so their answers are expected.
    fn sent_raw(&mut self, bytes: &[u8]) {
        let mut decoder = crate::wire::frame::FrameDecoder::new(crate::wire::frame::MAX_FRAME);
        let mut rest = bytes;
        while !rest.is_empty() {
            let (used, item) = decoder.feed(rest);
            rest = &rest[used..];
            match item {
                Some(Ok(payload)) => {
                    // A payload a strict parser refuses may be answered with a null id.
                    if serde_json::from_slice::<Value>(&payload).is_err() {
                        self.odd_ids.push(Value::Null);
                    }
                    let Some(v) = crate::jsonrpc::read_message(&payload) else {
                        self.odd_ids.push(Value::Null);
                        continue;
                    };
                    let method = v.get("method").and_then(Value::as_str);
                    match (method, v.get("id")) {
                        (Some(m), Some(id)) if id.is_u64() => {
                            let id = id.as_u64().unwrap_or_default();
                            self.outstanding.insert(id, m.to_owned());
                        }
                        (_, Some(id)) => self.odd_ids.extend([id.clone(), Value::Null]),
                        _ => self.odd_ids.push(Value::Null),
                    }
                }
                Some(Err(_)) => break,
                None if used == 0 => break,
                None => {}
            }
        }
    }

    /// Reads one payload; returns a request of the host's to answer.
    fn received(&mut self, payload: &[u8]) -> Option<(u64, String, Value)> {
        let value: Value = match crate::jsonrpc::parse_json(payload) {
            Ok(v) => v,
            Err(e) => {
                // "Frame: 4-byte magic `CWX1`, u32 little-endian payload length, UTF-8 JSON."
                self.violate(
                    rules::FRAME,
                    Kind::Framing,
                    format!("a frame's payload is not JSON: {e}"),
                );
                return None;
            }
        };
        // An answer to a request no core would send is neither the core's
        // business nor the host's fault.
        if value.get("method").is_none()
            && let Some(id) = value.get("id")
            && self.odd_ids.contains(id)
        {
            return None;
        }
        let tier = self.tier.unwrap_or(Tier::Plugin);
        match validate::parse_host_message(value.clone(), tier) {
            Err(why) => {
                // "Host→core types use `deny_unknown_fields` — host output is untrusted input."
                self.violate(
                    rules::STRICT,
                    Kind::Shape,
                    format!(
                        "the core refuses {}: {why}",
                        truncate(&value.to_string(), 200)
                    ),
                );
                None
            }
            Ok(HostMessage::Response { id, outcome }) => {
                let Some(method) = self.outstanding.remove(&id) else {
                    self.violate(
                        rules::ANSWERS,
                        Kind::Unexpected,
                        format!(
                            "a response with id {id} answers no request the core has in flight"
                        ),
                    );
                    return None;
                };
                let outcome = outcome
                    .map_err(|e| json!({"code": e.code, "message": e.message, "data": e.data}));
                if let Ok(r) = &outcome
                    && let Some(why) = validate::result_violation(&method, r)
                {
                    self.violate(rules::RESULT_SHAPE, Kind::Shape, format!("{method}: {why}"));
                }
                self.answers.insert(id, outcome);
                None
            }
            Ok(HostMessage::Notification { method, params }) => {
                if let Some(params) = self.kept.admit(params) {
                    self.notifications.push((method, params));
                }
                None
            }
            Ok(HostMessage::Request { id, method, params }) => Some((id, method, params)),
        }
    }
}

struct CaseRun<'a> {
    ctx: &'a Context,
    stream: LineStream,
    started: Instant,
    transcript: Vec<TranscriptEntry>,
    watch: Watch,
    vars: Vars,
    next_id: u64,
    next_handle: u64,
    /// Handles the core gave, by registered name.
    handles: BTreeMap<String, u64>,
    named: HashMap<String, (u64, String)>,
    ev: Evidence,
    closed: bool,
    stalled: bool,
}

impl Context {
    pub async fn run_case(&self, case: &Case<super::HostCases>) -> CaseResult {
        let started = Instant::now();
        let mut early = Evidence::default();
        let result = |ev| CaseResult::graded(case, ev, self.strict, started, vec![]);
        let config = &case.config;
        if case.needs.contains(&Need::Extension) && self.extension.is_none() {
            early.skip(
                "no extension to activate: give one with --extension PATH#SHA256",
                SkipKind::Outside,
            );
            return result(early);
        }
        if case.needs.contains(&Need::BuiltinTier) && self.tier != Tier::Builtin {
            // The tier is the host's declaration: not applicable.
            early.skip("the case is for a builtin-tier host", SkipKind::Declared);
            return result(early);
        }
        let stream = match LineStream::spawn_framed(&self.command, &[]) {
            Ok(s) => s,
            Err(e) => {
                early.error(format!("cannot start the host: {e}"));
                return result(early);
            }
        };
        let mut run = CaseRun {
            ctx: self,
            stream,
            started,
            transcript: vec![],
            watch: Watch {
                tier: Some(self.tier),
                ..Watch::default()
            },
            vars: Vars::default(),
            next_id: 0,
            next_handle: 0,
            handles: BTreeMap::new(),
            named: HashMap::new(),
            ev: Evidence::default(),
            closed: false,
            stalled: false,
        };
        run.vars.set("tier", json!(self.tier.name()));
        run.vars.set("owner", owner());
        if let Some(x) = &self.extension {
            run.vars
                .set("entry", json!({"path": x.path, "sha256": x.sha256}));
        }
        run.setup(config.setup).await;
        let setup_failed =
            !run.ev.findings.is_empty() || run.stalled || !run.watch.violations.is_empty();
        for kind in case.needs.iter().filter_map(|n| n.handle_kind()) {
            if !setup_failed && run.vars.get(&format!("{kind}_handle")).is_none() {
                run.ev.skip(
                    format!("the extension registered no {kind}"),
                    SkipKind::Outside,
                );
            }
        }
        for (i, step) in case.steps.iter().enumerate() {
            if setup_failed
                || run.stalled
                || run.ev.skip.is_some()
                || run.ev.error.is_some()
                || !run.watch.violations.is_empty()
            {
                break;
            }
            run.step(i, step).await;
        }
        let ended_early = run.finish().await;
        let evidence = run.evidence(ended_early);
        CaseResult::graded(case, evidence, self.strict, started, run.transcript)
    }
}

impl CaseRun<'_> {
    fn log(&mut self, dir: Direction, data: &[u8]) {
        if self.transcript.len() < crate::outcome::TRANSCRIPT_ENTRIES {
            self.transcript.push(TranscriptEntry {
                t_ms: self.started.elapsed().as_millis() as u64,
                conn: "stdio".into(),
                dir,
                data: crate::outcome::transcript_text(data),
            });
        }
    }

    async fn write_message(&mut self, message: &Value) {
        let payload = message.to_string().into_bytes();
        self.log(Direction::Sent, &payload);
        match crate::wire::frame::encode(&payload) {
            Some(frame) => self.write_bytes(frame).await,
            None => self.ev.error("a message conform built is over MAX_FRAME"),
        }
    }

    async fn write_bytes(&mut self, bytes: Vec<u8>) {
        if let Err(e) = self.stream.send(&bytes, REQUEST_DEADLINE).await {
            self.log(Direction::Event, e.as_bytes());
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.watch.outstanding.insert(id, method.to_owned());
        self.write_message(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
        id
    }

    async fn pump(&mut self, until: Instant, done: &(dyn Fn(&CaseRun<'_>) -> bool + Sync)) -> bool {
        loop {
            if done(self) {
                return true;
            }
            // Like the core, conform ends the exchange at the host's first
            // protocol error: nothing after it is read.
            if self.closed || !self.watch.violations.is_empty() {
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
                        self.ev.error(format!("the host wrote {why}"));
                        return false;
                    }
                    self.log(Direction::Received, &payload);
                    if let Some((id, method, params)) = self.watch.received(&payload) {
                        let answer = self.answer_host(&method, &params);
                        self.write_message(&answer.with_id(id)).await;
                    }
                }
                StreamEvent::Broken(why) => {
                    // "bad magic or length ends the host instead of desynchronising it"
                    self.watch.violate(
                        rules::FRAME,
                        Kind::Framing,
                        format!("the host's output broke: {why}"),
                    );
                    self.log(Direction::Event, why.as_bytes());
                }
                StreamEvent::TooLong { .. } => {}
                StreamEvent::Closed { partial } => {
                    self.closed = true;
                    if !partial.is_empty() {
                        self.watch.violate(
                            rules::FRAME,
                            Kind::Framing,
                            format!(
                                "stdout ended inside a frame ({} bytes of it)",
                                partial.len()
                            ),
                        );
                    }
                    let status = self
                        .stream
                        .process
                        .wait_for_exit(Duration::from_millis(300))
                        .await;
                    let what = format!(
                        "stdout closed; the host {}",
                        process::describe_status(status)
                    );
                    self.log(Direction::Event, what.as_bytes());
                    return done(self);
                }
            }
        }
    }

    /// The core's answer to a request of the host's.
    fn answer_host(&mut self, method: &str, params: &Value) -> Answer {
        match method {
            "registry/register" => {
                self.next_handle += 1;
                let name = params
                    .pointer("/spec/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let kind = params.get("kind").and_then(Value::as_str).unwrap_or("");
                self.handles
                    .insert(format!("{kind}:{name}"), self.next_handle);
                Answer::Result(json!({"handle": self.next_handle}))
            }
            "registry/unregister" => Answer::Result(json!({})),
            _ => Answer::Error(code::REFUSED, format!("conform's core serves no {method}")),
        }
    }

    async fn answer(
        &mut self,
        id: u64,
        method: &str,
        within: Duration,
    ) -> Option<Result<Value, Value>> {
        self.pump(Instant::now() + within, &|r| {
            r.watch.answers.contains_key(&id)
        })
        .await;
        if let Some(a) = self.watch.answers.remove(&id) {
            return Some(a);
        }
        let why = if !self.watch.violations.is_empty() {
            "none: the exchange ended at the host's protocol error".to_owned()
        } else if self.closed {
            format!(
                "the host closed its stdout (it {})",
                process::describe_status(self.stream.process.exit_status())
            )
        } else {
            format!("nothing within {:.0}s", within.as_secs_f64())
        };
        self.ev
            .fail(
                Kind::Missing,
                format!("expected an answer to {method}, got {why}"),
            )
            .seen(format!("an answer to {method}"), why);
        self.stalled = true;
        None
    }

    fn saw(&self, method: &str) -> Option<&Value> {
        self.watch
            .notifications
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, p)| p)
    }

    async fn setup(&mut self, setup: Setup) {
        if setup == Setup::None {
            return;
        }
        let until = Instant::now() + self.ctx.startup;
        if !self.pump(until, &|r| r.saw("host/hello").is_some()).await {
            if self.watch.violations.is_empty() {
                self.ev.fail(
                    Kind::Missing,
                    format!(
                        "setup: no host/hello within {:.0}s",
                        self.ctx.startup.as_secs_f64()
                    ),
                );
            }
            self.stalled = true;
            return;
        }
        let hello = self.saw("host/hello").cloned().unwrap_or(Value::Null);
        self.vars.set("hello", hello);
        if setup == Setup::Hello {
            return;
        }
        let id = self.request("host/initialize", initialize_params()).await;
        if self
            .answer(id, "host/initialize", HANDSHAKE_DEADLINE)
            .await
            .is_none()
        {
            return;
        }
        let until = Instant::now() + REQUEST_DEADLINE;
        if !self.pump(until, &|r| r.saw("host/ready").is_some()).await {
            if self.watch.violations.is_empty() {
                self.ev
                    .fail(Kind::Missing, "setup: no host/ready after host/initialize");
            }
            self.stalled = true;
            return;
        }
        if setup != Setup::Extension {
            return;
        }
        let Some(x) = self.ctx.extension.clone() else {
            return;
        };
        let params = json!({"owner": owner(), "plugin_name": "conform-extension",
            "entry": {"path": x.path, "sha256": x.sha256}, "config": {}});
        let id = self.request("ext/activate", params).await;
        match self
            .answer(id, "ext/activate", Duration::from_secs(11))
            .await
        {
            Some(Ok(r)) if r["status"] == "ok" => {
                // The first handle of each kind, for the cases.
                for (key, handle) in self.handles.clone().into_iter().rev() {
                    let kind = key.split(':').next().unwrap_or("");
                    self.vars.set(format!("{kind}_handle"), json!(handle));
                }
                self.vars.set("activated", r);
            }
            Some(other) => {
                self.ev.fail(
                    Kind::WrongKind,
                    format!(
                        "setup: the extension did not activate: {}",
                        crate::jsonrpc::describe_answer(&other)
                    ),
                );
            }
            None => {}
        }
    }

    fn expand(&mut self, v: &Value) -> Option<Value> {
        match matcher::expand(v, &self.vars) {
            Ok(v) => Some(v),
            Err(e) => {
                self.ev.error(e.to_string());
                None
            }
        }
    }

    fn deadline(step: &Step, default: Duration) -> Duration {
        step.deadline
            .map(Duration::from_secs_f64)
            .unwrap_or(default)
    }

    async fn step(&mut self, index: usize, step: &Step) {
        if let Some(hex) = &step.raw_hex {
            let bytes = crate::case::hex_bytes(hex).unwrap_or_default();
            self.watch.sent_raw(&bytes);
            self.log(Direction::Sent, &bytes);
            for (piece, ms) in crate::case::paced(bytes.len(), &step.pauses) {
                if let Err(e) = self.stream.send(&bytes[piece], REQUEST_DEADLINE).await {
                    self.log(Direction::Event, e.as_bytes());
                    break;
                }
                if ms > 0 {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
            return;
        }
        if let Some(send) = &step.send {
            let Some(params) = self.expand(&send.params) else {
                return;
            };
            if send.notification {
                // A call that already finished cannot be cancelled.
                if send.method == "$/cancel"
                    && let Some(target) = params.get("id").and_then(Value::as_u64)
                    && self.watch.answers.contains_key(&target)
                {
                    self.ev.skip(
                        format!("request {target} was answered before conform could cancel it"),
                        SkipKind::Outside,
                    );
                    return;
                }
                self.write_message(
                    &json!({"jsonrpc": "2.0", "method": send.method, "params": params}),
                )
                .await;
                return;
            }
            let id = self.request(&send.method, params).await;
            if let Some(name) = &step.name {
                self.named.insert(name.clone(), (id, send.method.clone()));
                self.vars.set(format!("{name}_id"), json!(id));
            }
            if step.wait {
                self.judge_answer(step, id, &send.method).await;
            }
            return;
        }
        if let Some(name) = &step.await_name {
            let Some((id, method)) = self.named.get(name).cloned() else {
                self.ev
                    .error(format!("step {index}: no request named `{name}`"));
                return;
            };
            self.judge_answer(step, id, &method).await;
            return;
        }
        if let Some(method) = &step.wait_for {
            let m = method.clone();
            let within = Self::deadline(step, REQUEST_DEADLINE);
            if !self
                .pump(Instant::now() + within, &|r| r.saw(&m).is_some())
                .await
            {
                self.ev.fail(
                    Kind::Missing,
                    format!(
                        "the host sent no {method} within {:.0}s",
                        within.as_secs_f64()
                    ),
                );
                return;
            }
            // A pattern in `expect.result` is matched against its params.
            let params = self.saw(method).cloned().unwrap_or(Value::Null);
            if let Some(p) = step.expect.as_ref().and_then(|e| e.result.clone())
                && let Some(p) = self.expand(&p)
            {
                let mut errors = Vec::new();
                matcher::match_value(&p, Some(&params), "params", &mut self.vars, &mut errors);
                for m in errors {
                    let mut f = Finding::from(m);
                    f.message = format!("{method}: {}", f.message);
                    self.ev.push(f);
                }
            }
            return;
        }
        if let Some(secs) = step.quiet {
            self.pump(Instant::now() + Duration::from_secs_f64(secs), &|_| false)
                .await;
            return;
        }
        if step.probe {
            let id = self.request("host/ping", json!({})).await;
            if self
                .answer(id, "a probe (host/ping)", REQUEST_DEADLINE)
                .await
                .is_some()
            {
                self.ev.observe("the host still answers host/ping");
            }
            return;
        }
        if let Some(secs) = step.exits_within {
            let within = Duration::from_secs_f64(secs);
            self.pump(Instant::now() + within, &|r| r.closed).await;
            let status = self.stream.process.wait_for_exit(within).await;
            match status {
                Some(s) => self
                    .ev
                    .observe(format!("the host {}", process::describe_status(Some(s)))),
                None => {
                    self.ev.fail(
                        Kind::Process,
                        format!(
                            "the host was still running {:.0}s later",
                            within.as_secs_f64()
                        ),
                    );
                }
            }
            return;
        }
        if step.close_stdin {
            self.stream.close_stdin();
            self.log(Direction::Event, b"conform closed the host's stdin");
            let within = Self::deadline(step, Duration::from_secs(5));
            self.pump(Instant::now() + within, &|r| r.closed).await;
            let status = self.stream.process.wait_for_exit(within).await;
            self.ev.observe(format!(
                "after its stdin closed the host {}",
                process::describe_status(status)
            ));
            if step.expect.as_ref().and_then(|e| e.exit) == Some(true) && status.is_none() {
                self.ev.fail(
                    Kind::Process,
                    format!(
                        "the host was still running {:.0}s after its stdin closed",
                        within.as_secs_f64()
                    ),
                );
            }
        }
    }

    async fn judge_answer(&mut self, step: &Step, id: u64, method: &str) {
        let rule = step
            .expect
            .as_ref()
            .map(Expect::rule)
            .unwrap_or(AnswerRule::Any);
        let within = Self::deadline(step, REQUEST_DEADLINE);
        if rule == AnswerRule::None {
            let got = self
                .pump(Instant::now() + within, &|r| {
                    r.watch.answers.contains_key(&id)
                })
                .await;
            if got {
                let a = self.watch.answers.remove(&id).expect("present");
                self.ev.fail(
                    Kind::Unexpected,
                    format!(
                        "{method}: expected no answer, got {}",
                        crate::jsonrpc::describe_answer(&a)
                    ),
                );
            }
            return;
        }
        let Some(answer) = self.answer(id, method, within).await else {
            return;
        };
        let Some(expect) = &step.expect else {
            self.ev.observe(format!(
                "{method}: {}",
                crate::jsonrpc::describe_answer(&answer)
            ));
            return;
        };
        let want = match rule {
            AnswerRule::Result => Reply::Result,
            AnswerRule::Error => Reply::Error,
            AnswerRule::Any | AnswerRule::None => Reply::Any,
        };
        let pattern = match &answer {
            Ok(_) => &expect.result,
            Err(_) => &expect.error,
        };
        let pattern = match pattern {
            Some(p) => match self.expand(p) {
                Some(p) => Some(p),
                None => return,
            },
            None => None,
        };
        let mut found = crate::drive::judge_answer(&answer, want, pattern.as_ref(), &mut self.vars);
        for check in &expect.checks {
            match (check, &answer) {
                (NamedCheck::ResultShape, Ok(r)) => found.extend(
                    validate::result_violation(method, r)
                        .map(|e| Finding::new(None, Kind::Shape, e)),
                ),
                (NamedCheck::ResultShape, Err(_)) => {}
            }
        }
        if found.is_empty() {
            self.ev.observe(format!(
                "{method}: {}",
                crate::jsonrpc::describe_answer(&answer)
            ));
        }
        for mut f in found {
            f.message = format!("{method}: {}", f.message);
            self.ev.push(f);
        }
    }

    /// Ends the host; says whether it ended before conform ended it.
    async fn finish(&mut self) -> bool {
        if !self.closed {
            self.pump(Instant::now() + Duration::from_millis(50), &|_| false)
                .await;
        }
        // After a protocol error the exchange is over, and whether the host
        // has exited yet is a race: its stderr is shown only when it ended
        // by itself before that.
        let early = (self.closed || self.stream.process.exit_status().is_some())
            && self.watch.violations.is_empty();
        self.stream.close_stdin();
        let _ = self.stream.process.wait_for_exit(EXIT_GRACE).await;
        let _ = self.stream.process.shutdown(process::TERM_GRACE).await;
        early
    }

    /// The case's evidence: what the steps found, every rule the watch saw
    /// broken, and what the message needs besides.
    fn evidence(&mut self, ended_early: bool) -> Evidence {
        let mut ev = std::mem::take(&mut self.ev);
        for (rule, kind, message) in &self.watch.violations {
            ev.broke(rule, *kind, message.clone());
        }
        ev.appendix.extend(self.watch.kept.note());
        if ended_early {
            let stderr = self.stream.process.stderr_tail();
            if !stderr.trim().is_empty() {
                ev.appendix.push(format!(
                    "the host's stderr:\n{}",
                    truncate(stderr.trim_end(), 2000)
                ));
            }
        }
        ev
    }
}

/// The core's answer to a host request.
enum Answer {
    Result(Value),
    Error(i64, String),
}

impl Answer {
    fn with_id(&self, id: u64) -> Value {
        match self {
            Answer::Result(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Answer::Error(c, m) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": c, "message": m}})
            }
        }
    }
}
