//! conform playing the core: one fresh host process per case over the
//! shared stdio session (`drive::stdio`) in CWX1 frames, the core's strict
//! reading of every frame the host writes ([`HostWatch`], sans-IO), the
//! core's answers to the host's requests, and the case's steps.

use super::steps::{Expect, NamedCheck, Need, Setup, Step};
use super::table::{Tier, code};
use super::validate::{self, HostMessage};
use crate::case::Case;
use crate::drive::stdio::{self, AnswerFuture, Answerer, Session};
use crate::evidence::{Evidence, Finding, Kind};
use crate::fuzz::readings::{How, Id, Readings};
use crate::keep::Keep;
use crate::matcher::{self, truncate};
use crate::outcome::{CaseResult, SkipKind};
use crate::step::{Action, Bytes, ReplyRule};
use crate::transport::stdio::Launcher;
use serde_json::{Value, json};
use std::collections::BTreeMap;
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
    /// How one host is started.
    pub launcher: Launcher,
    pub tier: Tier,
    pub strict: bool,
    pub extension: Option<Extension>,
    pub startup: Duration,
}

/// The core's limits it sends in `host/initialize`.
pub(crate) fn initialize_params() -> Value {
    json!({"protocol": super::table::PROTOCOL_VERSION, "limits": {
        "max_frame": crate::wire::frame::MAX_FRAME, "max_inflight": super::table::MAX_INFLIGHT,
        "dispose_deadline_ms": 5000, "activate_deadline_ms": 10000}})
}

fn owner() -> Value {
    json!({"plugin_id": "conform-extension", "generation": 1,
        "owner_token": "c0nf0rmc0nf0rmc0nf0rmc0nf0rm0001"})
}

/// The core's reading of one host connection, sans-IO.
#[derive(Default)]
pub struct HostWatch {
    tier: Option<Tier>,
    /// Requests conform sent: id -> method.
    outstanding: BTreeMap<u64, String>,
    /// Host messages by method, in order, kept within `kept`.
    notifications: Vec<(String, Value)>,
    /// The account of what `notifications` keeps: a host that floods them
    /// does not grow conform.
    kept: Keep,
    violations: Vec<(String, Kind, String)>,
    /// Ids of raw messages conform sent that no core would (not a u64
    /// written as one, another reading of the payload than the core's, or
    /// null for a payload whose id a reader may not find): the host may
    /// echo them, by value, or answer with a null id, which the core's
    /// parser refuses but no core would ever provoke.
    odd_ids: Vec<Id>,
}

impl HostWatch {
    pub fn new(tier: Tier) -> HostWatch {
        HostWatch {
            tier: Some(tier),
            ..HostWatch::default()
        }
    }

    fn violate(&mut self, rule: &str, kind: Kind, message: String) {
        if !self
            .violations
            .iter()
            .any(|(r, _, m)| r == rule && *m == message)
        {
            self.violations.push((rule.into(), kind, message));
        }
    }

    /// The params of the first notification of `method` the host sent.
    fn saw(&self, method: &str) -> Option<&Value> {
        self.notifications
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, p)| p)
    }
}

impl stdio::Watch for HostWatch {
    fn sent(&mut self, message: &Value) -> Option<String> {
        let method = message.get("method").and_then(Value::as_str)?;
        let id = message.get("id").and_then(Value::as_u64)?;
        self.outstanding.insert(id, method.to_owned());
        Some(id.to_string())
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
                    // A payload some legal reader refuses may be answered
                    // with a null id; a reading other than the core's (a
                    // byte-order mark ignored, a duplicated id, an id not
                    // written as a u64) with the id it reads.
                    let Some(readings) = Readings::of(&payload) else {
                        self.odd_ids.push(Id::Null);
                        continue;
                    };
                    if readings.unreadable || readings.objects.is_empty() {
                        self.odd_ids.push(Id::Null);
                    }
                    for o in &readings.objects {
                        let method = o.members.get("method").and_then(Value::as_str);
                        let core_id = o.members.get("id").and_then(Value::as_u64);
                        match (method, core_id, &o.id) {
                            (Some(m), Some(id), _) if o.how == How::AsWritten => {
                                self.outstanding.insert(id, m.to_owned());
                            }
                            (_, _, Some(id)) => self.odd_ids.extend([id.clone(), Id::Null]),
                            _ => self.odd_ids.push(Id::Null),
                        }
                    }
                }
                Some(Err(_)) => break,
                None if used == 0 => break,
                None => {}
            }
        }
    }

    fn received(&mut self, payload: &[u8]) -> stdio::Incoming {
        let value: Value = match crate::jsonrpc::parse_json(payload) {
            Ok(v) => v,
            Err(e) => {
                // "Frame: 4-byte magic `CWX1`, u32 little-endian payload length, UTF-8 JSON."
                self.violate(
                    rules::FRAME,
                    Kind::Framing,
                    format!("a frame's payload is not JSON: {e}"),
                );
                return stdio::Incoming::Other;
            }
        };
        // An answer to a request no core would send is neither the core's
        // business nor the host's fault.
        if value.get("method").is_none()
            && let Some(id) = value.get("id")
            && self.odd_ids.contains(&Id::from_value(id))
        {
            return stdio::Incoming::Other;
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
                stdio::Incoming::Other
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
                    return stdio::Incoming::Other;
                };
                let outcome = outcome
                    .map_err(|e| json!({"code": e.code, "message": e.message, "data": e.data}));
                if let Ok(r) = &outcome
                    && let Some(why) = validate::result_violation(&method, r)
                {
                    self.violate(rules::RESULT_SHAPE, Kind::Shape, format!("{method}: {why}"));
                }
                stdio::Incoming::Response {
                    key: id.to_string(),
                    outcome,
                }
            }
            Ok(HostMessage::Notification { method, params }) => {
                if let Some(params) = self.kept.admit(params) {
                    self.notifications.push((method, params));
                }
                stdio::Incoming::Other
            }
            Ok(HostMessage::Request { id, method, params }) => stdio::Incoming::Request {
                id: json!(id),
                method,
                params,
            },
        }
    }

    /// "bad magic or length ends the host instead of desynchronising it"
    fn broke(&mut self, why: &str) -> bool {
        self.violate(
            rules::FRAME,
            Kind::Framing,
            format!("the host's output broke: {why}"),
        );
        true
    }

    fn ended_inside(&mut self, partial: &[u8]) -> Option<Finding> {
        self.violate(
            rules::FRAME,
            Kind::Framing,
            format!(
                "stdout ended inside a frame ({} bytes of it)",
                partial.len()
            ),
        );
        None
    }

    /// Like the core, conform ends the exchange at the host's first protocol
    /// error: nothing after it is read.
    fn halted(&self) -> bool {
        !self.violations.is_empty()
    }

    fn findings(&self) -> Vec<Finding> {
        self.violations
            .iter()
            .map(|(rule, kind, message)| Finding::new(Some(rule), *kind, message.clone()))
            .collect()
    }

    fn kept_note(&self) -> Option<String> {
        self.kept.note()
    }
}

/// The core's side of a case: the handles it gives the host's registrations.
#[derive(Default)]
struct CoreRole {
    next_handle: u64,
    /// Handles the core gave, by `kind:name`.
    handles: BTreeMap<String, u64>,
}

impl Answerer for CoreRole {
    fn answer<'a>(
        &'a mut self,
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
        _within: Duration,
    ) -> AnswerFuture<'a> {
        let answer = match method {
            "registry/register" => {
                self.next_handle += 1;
                let name = params
                    .pointer("/spec/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let kind = params.get("kind").and_then(Value::as_str).unwrap_or("");
                self.handles
                    .insert(format!("{kind}:{name}"), self.next_handle);
                json!({"jsonrpc": "2.0", "id": id, "result": {"handle": self.next_handle}})
            }
            "registry/unregister" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
            _ => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code::REFUSED,
                "message": format!("conform's core serves no {method}")}}),
        };
        Box::pin(async move { Some(answer) })
    }
}

struct CaseRun<'a> {
    ctx: &'a Context,
    s: Session<HostWatch>,
    role: CoreRole,
}

impl Context {
    pub async fn run_case(&self, case: &Case<super::HostCases>) -> CaseResult {
        let started = Instant::now();
        let mut early = Evidence::default();
        let result = |ev| CaseResult::graded(case, ev, self.strict, started, vec![]);
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
        let stream = match self.launcher.start(&[], crate::wire::Codec::Frames) {
            Ok(s) => s,
            Err(e) => {
                early.error(format!("cannot start the host: {e}"));
                return result(early);
            }
        };
        let mut run = CaseRun {
            ctx: self,
            s: Session::new(stream, "host", HostWatch::new(self.tier), started, 1),
            role: CoreRole::default(),
        };
        run.s.vars.set("tier", json!(self.tier.name()));
        run.s.vars.set("owner", owner());
        if let Some(x) = &self.extension {
            run.s
                .vars
                .set("entry", json!({"path": x.path, "sha256": x.sha256}));
        }
        run.setup(case.config.setup).await;
        let setup_failed =
            !run.s.ev.findings.is_empty() || run.s.stalled || !run.s.watch.violations.is_empty();
        for kind in case.needs.iter().filter_map(|n| n.handle_kind()) {
            if !setup_failed && run.s.vars.get(&format!("{kind}_handle")).is_none() {
                run.s.ev.skip(
                    format!("the extension registered no {kind}"),
                    SkipKind::Outside,
                );
            }
        }
        for (i, step) in case.steps.iter().enumerate() {
            if setup_failed
                || run.s.stalled
                || run.s.ev.skip.is_some()
                || run.s.ev.error.is_some()
                || !run.s.watch.violations.is_empty()
            {
                break;
            }
            run.step(i, step).await;
        }
        let ended_early = run.s.finish(&mut run.role, EXIT_GRACE).await;
        let evidence = run.s.evidence(ended_early);
        CaseResult::graded(
            case,
            evidence,
            self.strict,
            started,
            run.s.transcript.into_entries(),
        )
    }
}

impl CaseRun<'_> {
    /// Waits for the answer to request `key`; a missing one is a finding.
    async fn answer(
        &mut self,
        key: &str,
        what: &str,
        within: Duration,
    ) -> Option<Result<Value, Value>> {
        self.s.answer(&mut self.role, key, what, within).await
    }

    /// Waits, within `within`, for the host to send a notification of `method`.
    async fn saw(&mut self, method: &str, within: Duration) -> bool {
        let m = method.to_owned();
        self.s
            .pump(&mut self.role, Instant::now() + within, &|s| {
                s.watch.saw(&m).is_some()
            })
            .await
    }

    async fn setup(&mut self, setup: Setup) {
        if setup == Setup::None {
            return;
        }
        if !self.saw("host/hello", self.ctx.startup).await {
            if self.s.watch.violations.is_empty() {
                self.s.ev.fail(
                    Kind::Missing,
                    format!(
                        "setup: no host/hello within {:.0}s",
                        self.ctx.startup.as_secs_f64()
                    ),
                );
            }
            self.s.stalled = true;
            return;
        }
        let hello = self
            .s
            .watch
            .saw("host/hello")
            .cloned()
            .unwrap_or(Value::Null);
        self.s.vars.set("hello", hello);
        if setup == Setup::Hello {
            return;
        }
        let Some(key) = self.s.request("host/initialize", initialize_params()).await else {
            return;
        };
        if self
            .answer(&key, "host/initialize", HANDSHAKE_DEADLINE)
            .await
            .is_none()
        {
            return;
        }
        if !self.saw("host/ready", REQUEST_DEADLINE).await {
            if self.s.watch.violations.is_empty() {
                self.s
                    .ev
                    .fail(Kind::Missing, "setup: no host/ready after host/initialize");
            }
            self.s.stalled = true;
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
        let Some(key) = self.s.request("ext/activate", params).await else {
            return;
        };
        match self
            .answer(&key, "ext/activate", Duration::from_secs(11))
            .await
        {
            Some(Ok(r)) if r["status"] == "ok" => {
                // The first handle of each kind, for the cases.
                for (key, handle) in self.role.handles.clone().into_iter().rev() {
                    let kind = key.split(':').next().unwrap_or("");
                    self.s.vars.set(format!("{kind}_handle"), json!(handle));
                }
                self.s.vars.set("activated", r);
            }
            Some(other) => {
                self.s.ev.fail(
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

    async fn step(&mut self, index: usize, step: &Step) {
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
            Action::Send(send) => {
                let Some(params) = self.s.expand(&send.params) else {
                    return;
                };
                if send.notification {
                    // A call that already finished cannot be cancelled.
                    if send.method == "$/cancel"
                        && let Some(target) = params.get("id").and_then(Value::as_u64)
                        && self.s.answers.contains_key(&target.to_string())
                    {
                        self.s.ev.skip(
                            format!("request {target} was answered before conform could cancel it"),
                            SkipKind::Outside,
                        );
                        return;
                    }
                    self.s
                        .send(&json!({"jsonrpc": "2.0", "method": send.method, "params": params}))
                        .await;
                    return;
                }
                let id = self.s.next_id();
                let message =
                    json!({"jsonrpc": "2.0", "id": id, "method": send.method, "params": params});
                let Some(key) = self.s.send(&message).await else {
                    return;
                };
                if let Some(name) = &step.name {
                    self.s
                        .named
                        .insert(name.clone(), (key.clone(), send.method.clone()));
                    self.s.vars.set(format!("{name}_id"), id);
                }
                if step.wait {
                    self.judge_answer(step, &key, &send.method).await;
                }
            }
            Action::Await(name) => {
                let Some((key, method)) = self.s.named.get(name).cloned() else {
                    self.s
                        .ev
                        .error(format!("step {index}: no request named `{name}`"));
                    return;
                };
                self.judge_answer(step, &key, &method).await;
            }
            Action::WaitFor(method) => {
                let within = step.deadline_or(REQUEST_DEADLINE);
                if !self.saw(method, within).await {
                    self.s.ev.fail(
                        Kind::Missing,
                        format!(
                            "the host sent no {method} within {:.0}s",
                            within.as_secs_f64()
                        ),
                    );
                    return;
                }
                // A pattern in `expect.result` is matched against its params.
                let params = self.s.watch.saw(method).cloned().unwrap_or(Value::Null);
                if let Some(p) = step.expect.as_ref().and_then(|e| e.result.clone())
                    && let Some(p) = self.s.expand(&p)
                {
                    let mut errors = Vec::new();
                    matcher::match_value(
                        &p,
                        Some(&params),
                        "params",
                        &mut self.s.vars,
                        &mut errors,
                    );
                    for m in errors {
                        let mut f = Finding::from(m);
                        f.message = format!("{method}: {}", f.message);
                        self.s.ev.push(f);
                    }
                }
            }
            Action::Quiet(secs) => {
                self.s
                    .quiet(&mut self.role, Duration::from_secs_f64(*secs))
                    .await;
            }
            Action::Probe => {
                let Some(key) = self.s.request("host/ping", json!({})).await else {
                    return;
                };
                if self
                    .answer(&key, "a probe (host/ping)", REQUEST_DEADLINE)
                    .await
                    .is_some()
                {
                    self.s.ev.observe("the host still answers host/ping");
                }
            }
            Action::ExitsWithin(secs) => {
                self.s
                    .exits_within(&mut self.role, Duration::from_secs_f64(*secs))
                    .await;
            }
            Action::CloseStdin => {
                let within = step.deadline_or(Duration::from_secs(5));
                let exit = step.expect.as_ref().and_then(|e| e.exit);
                self.s.close_stdin(&mut self.role, within, exit).await;
            }
            Action::Own(own) => match *own {},
        }
    }

    async fn judge_answer(&mut self, step: &Step, key: &str, method: &str) {
        let rule = step
            .expect
            .as_ref()
            .map(Expect::rule)
            .unwrap_or(ReplyRule::Any);
        let within = step.deadline_or(REQUEST_DEADLINE);
        if rule == ReplyRule::None {
            let k = key.to_owned();
            let got = self
                .s
                .pump(&mut self.role, Instant::now() + within, &|s| {
                    s.answers.contains_key(&k)
                })
                .await;
            if got && let Some(a) = self.s.answers.remove(key) {
                self.s.ev.fail(
                    Kind::Unexpected,
                    format!(
                        "{method}: expected no answer, got {}",
                        crate::jsonrpc::describe_answer(&a)
                    ),
                );
            }
            return;
        }
        let Some(answer) = self.answer(key, method, within).await else {
            return;
        };
        let Some(expect) = &step.expect else {
            self.s.conclude(method, &answer, vec![]);
            return;
        };
        let Some(mut found) = self.s.judge(&answer, rule, &expect.result, &expect.error) else {
            return;
        };
        for check in &expect.checks {
            match (check, &answer) {
                (NamedCheck::ResultShape, Ok(r)) => found.extend(
                    validate::result_violation(method, r)
                        .map(|e| Finding::new(None, Kind::Shape, e)),
                ),
                (NamedCheck::ResultShape, Err(_)) => {}
            }
        }
        self.s.conclude(method, &answer, found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::transport::serve::testing::memory;

    const PING: &str = r#"{"id":"t/ping","title":"ping","level":"MUST","requirements":["cwx.ping"],
        "steps":[{"send":{"method":"host/ping"},"expect":{"result":{}}}]}"#;

    /// The case `json` against the plugin-tier reference host bent by `bend`, in memory.
    async fn run(bend: fn(&mut Value) -> bool, json: &str) -> CaseResult {
        let ctx = Context {
            launcher: memory(|| super::super::reference::Host::new(Tier::Plugin), bend),
            tier: Tier::Plugin,
            strict: false,
            extension: None,
            startup: Duration::from_secs(10),
        };
        let case = crate::case::parse_cases::<super::super::HostCases>("test", json)
            .unwrap()
            .remove(0);
        ctx.run_case(&case).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_ping_passes_over_the_in_memory_channel() {
        let r = run(|_| true, PING).await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_field_the_core_does_not_know_is_a_typed_strictness_finding() {
        let r = run(
            |m| {
                if m["method"] == "host/hello" {
                    m["params"]["mood"] = json!("cheerful");
                }
                true
            },
            PING,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings.len(), 1, "the exchange ends at the first error");
        assert_eq!(r.findings[0].requirement.as_deref(), Some(rules::STRICT));
        assert_eq!(r.findings[0].kind, Kind::Shape);
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_that_never_says_hello_is_missing_it_at_the_startup_bound() {
        let r = run(|m| m["method"] != "host/hello", PING).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
        assert_eq!(r.message, "setup: no host/hello within 10s");
    }
}
