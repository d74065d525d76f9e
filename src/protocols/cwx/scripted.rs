//! conform as a CWX extension host (`--role core`), sans-IO: the scripted
//! host the core under test launches (through `{host}`), the record of every
//! frame it exchanged, and the grading of the core from that record.
//!
//! The scripted host is conform's reference host (its toy extension, its
//! answers) with what a case's `config` changes: the tier it serves, a
//! `tool/call` it never answers, a broken frame after `host/ready`.

use super::reference::Host;
use super::table::Tier;
use super::validate;
use crate::case::Case;
use crate::evidence::{Evidence, Kind};
use crate::peer::{Check, ExitWant};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const CASES_DIR: &str = "cwx/core/cases";
/// How late past a call's `deadline_ms` the `$/cancel` may come: scheduling
/// on a shared machine, not leniency about the deadline.
pub const CANCEL_MARGIN_MS: u64 = 1500;
/// How soon after a broken frame the core must have ended the host.
pub const END_WITHIN_MS: u64 = 5000;
/// A frame whose magic is not `CWX1`, as a host that lost its framing writes.
pub const BAD_FRAME: &[u8] = b"XWC1\x05\x00\x00\x00hello";

/// The requirements every case checks on every frame.
pub mod rules {
    pub const FRAMES: &str = "cwx.core.frames";
    pub const TIER_SEND: &str = "cwx.core.tier-send";
    pub const PROTOCOL: &str = "cwx.core.protocol";
    pub const LIMITS: &str = "cwx.core.limits";
    pub const INITIALIZE_FIRST: &str = "cwx.core.initialize-first";
    pub const ANSWERS: &str = "cwx.core.answers";
    pub const REGISTER_RESULT: &str = "cwx.core.register-result";
    pub const CORE_CALL: &str = "cwx.core.core-call";
    pub const INFLIGHT: &str = "cwx.core.inflight";
    pub const IDS: &str = "cwx.core.ids";
    pub const OWNER: &str = "cwx.core.owner";
    pub const CONFIG: &str = "cwx.core.config";
    pub const RAW_INPUT: &str = "cwx.core.raw-input";
    pub const DATA_DIR: &str = "cwx.core.data-dir";
    pub const ENDS_HOST: &str = "cwx.core.ends-host";
    pub const EVERY_MESSAGE: &[&str] = &[
        FRAMES,
        TIER_SEND,
        PROTOCOL,
        LIMITS,
        INITIALIZE_FIRST,
        ANSWERS,
        REGISTER_RESULT,
        CORE_CALL,
        INFLIGHT,
        IDS,
        OWNER,
        CONFIG,
        RAW_INPUT,
        DATA_DIR,
        ENDS_HOST,
    ];
}

/// How long after the core's exit its host must have seen the end of its
/// input (or be gone): "Production relies on stdin EOF at process exit".
pub const HOST_EOF_WITHIN_MS: u64 = 1000;
/// A frame's payload that breaks a host's framing of the core's request:
/// what a host's request to the core names when conform provokes a refusal.
pub const BOGUS_TICKET: &str = "conform-no-such-ticket";

/// A core case's `config`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Script {
    /// The tier the host serves: `plugin` (the default) or `builtin`.
    #[serde(default = "plugin")]
    pub tier: Tier,
    /// Never answer `tool/call`.
    #[serde(default)]
    pub silent_tool_call: bool,
    /// Write a frame with a bad magic right after `host/ready`.
    #[serde(default)]
    pub bad_frame_after_ready: bool,
    /// Write a header claiming more than MAX_FRAME right after `host/ready`.
    #[serde(default)]
    pub oversized_frame_after_ready: bool,
    /// Fields merged into `host/hello`'s params (an unknown one, another
    /// tier, a module no table pins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hello: Option<serde_json::Map<String, Value>>,
    /// Hold every tool/call answer this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_tool_calls_ms: Option<u64>,
    /// A request the host sends right after `host/ready`, to provoke a
    /// refusal: its id is chosen by the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_after_ready: Option<Value>,
    /// Register one more tool, with no input schema (check_spec refuses it).
    #[serde(default)]
    pub bad_registration: bool,
    /// On tool/call, first ask the core `core/call` with a ticket it never issued.
    #[serde(default)]
    pub bogus_core_call: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<f64>,
}

fn plugin() -> Tier {
    Tier::Plugin
}

impl Default for Script {
    fn default() -> Script {
        Script {
            tier: plugin(),
            silent_tool_call: false,
            bad_frame_after_ready: false,
            oversized_frame_after_ready: false,
            hello: None,
            hold_tool_calls_ms: None,
            request_after_ready: None,
            bad_registration: false,
            bogus_core_call: false,
            deadline: None,
        }
    }
}

impl crate::peer::PeerScript for Script {
    const MAX_DEADLINE: f64 = 600.0;

    fn deadline(&self) -> Option<f64> {
        self.deadline
    }
}

/// One check of a case.
pub type CoreStep = crate::peer::PeerStep<CoreCheck>;

/// What a core case checks the core did.
#[derive(Debug, Clone, PartialEq)]
pub enum CoreCheck {
    /// The core sent this method (the workload).
    Sends(String),
    /// The core sent `$/cancel` for its unanswered request of this method,
    /// once the request's `deadline_ms` had passed (within conform's margin).
    Cancels(String),
    /// After the host's broken frame, the core sent nothing more and ended
    /// the host (closed its stdin or killed it).
    EndsHost,
    /// The core never sent this method.
    NeverSends(String),
    /// Every request the host sent to provoke a refusal got no result (an
    /// error, or none); with a code, an error of that code.
    Refuses(Option<i64>),
    /// The core's exit status.
    Exit(ExitWant),
}

/// A core step as the case file writes it: exactly one of `sends`,
/// `cancels`, `endsHost`, `exit` (`exitZero` is `exit: "zero"`).
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RawCoreStep {
    sends: Option<String>,
    cancels: Option<String>,
    ends_host: bool,
    never_sends: Option<String>,
    refuses: bool,
    refuses_with: Option<i64>,
    exit: Option<ExitWant>,
    exit_zero: bool,
    info: bool,
}

impl crate::peer::CheckKeys for CoreCheck {
    type Raw = RawCoreStep;
    const ONE_OF: &'static str = "sends, cancels, endsHost, neverSends, refuses, refusesWith, exit";

    fn read(r: RawCoreStep) -> Result<(Vec<CoreCheck>, bool), String> {
        let zero = ExitWant::Named(crate::peer::ExitClass::Zero);
        let checks: Vec<CoreCheck> = [
            r.sends.map(CoreCheck::Sends),
            r.cancels.map(CoreCheck::Cancels),
            r.ends_host.then_some(CoreCheck::EndsHost),
            r.never_sends.map(CoreCheck::NeverSends),
            r.refuses.then_some(CoreCheck::Refuses(None)),
            r.refuses_with.map(|c| CoreCheck::Refuses(Some(c))),
            r.exit.map(CoreCheck::Exit),
            r.exit_zero.then_some(CoreCheck::Exit(zero)),
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok((checks, r.info))
    }
}

/// One event of the scripted host's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Event {
    /// The host's process id, first.
    Pid { pid: u32 },
    /// A payload from the core.
    In { t_ms: u64, payload: String },
    /// What the core wrote that is not a frame; the host stops reading.
    BadFrame { t_ms: u64, why: String },
    /// A message the host wrote.
    Out { t_ms: u64, payload: String },
    /// The host wrote its broken frame.
    BrokeFrame { t_ms: u64 },
    /// The core closed the host's stdin.
    Closed { t_ms: u64 },
    /// The payload of the core's frame before this one's `In` is not UTF-8.
    NotUtf8 { t_ms: u64 },
    /// The host wrote request `id` to provoke a refusal.
    Provoked { t_ms: u64, id: u64, method: String },
}

/// The scripted host: conform's reference host with the script's changes.
/// It loads whatever entry the core activates as conform's toy extension.
pub struct ScriptedHost {
    host: Host,
    script: Script,
    /// The owner of the core's latest ext/activate.
    owner: Value,
    /// Ids of the host's own requests (the provocations), past the toy's.
    next_id: u64,
    /// tool/call answers held: (when due, answer).
    held: Vec<(std::time::Instant, Value)>,
    /// A tool/call waiting for the core's answer to the bogus core/call.
    waiting_core_call: Option<(u64, Vec<u8>)>,
    /// The bogus core/call was asked (once a run).
    asked: bool,
    /// The provocations written: id and method.
    pub provoked: Vec<(u64, String)>,
}

/// What the scripted host writes for one payload.
#[derive(Debug, Default)]
pub struct Written {
    pub messages: Vec<Value>,
    /// A broken frame to write after them.
    pub broken: Option<&'static [u8]>,
}

/// A frame header claiming one byte more than MAX_FRAME.
pub const OVERSIZED_HEADER: &[u8] = b"CWX1\x01\x00\x00\x02";

impl ScriptedHost {
    pub fn new(script: Script) -> ScriptedHost {
        ScriptedHost {
            host: Host::any_entry(script.tier),
            script,
            owner: Value::Null,
            next_id: 1_000_000,
            held: Vec::new(),
            waiting_core_call: None,
            asked: false,
            provoked: Vec::new(),
        }
    }

    pub fn hello(&self) -> Value {
        let mut hello = self.host.hello();
        if let Some(patch) = &self.script.hello {
            for (k, v) in patch {
                hello["params"][k] = v.clone();
            }
        }
        hello
    }

    fn provoke(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        self.provoked.push((self.next_id, method.to_owned()));
        json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
    }

    /// The messages to write for one payload from the core, and a broken
    /// frame to write after them.
    pub fn handle(&mut self, payload: &[u8], now: std::time::Instant) -> Written {
        let message = crate::jsonrpc::parse_json(payload).ok();
        let method = message
            .as_ref()
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_owned));
        // The core's answer to the bogus core/call: now the held tool/call.
        if method.is_none()
            && let Some((id, _)) = &self.waiting_core_call
            && message.as_ref().and_then(|m| m["id"].as_u64()) == Some(*id)
        {
            let (_, call) = self.waiting_core_call.take().expect("present");
            return self.handle(&call, now);
        }
        if method.as_deref() == Some("ext/activate")
            && let Some(o) = message.as_ref().and_then(|m| m.pointer("/params/owner"))
        {
            self.owner = o.clone();
        }
        if method.as_deref() == Some("tool/call") {
            if self.script.silent_tool_call {
                return Written::default();
            }
            if self.script.bogus_core_call && !self.asked {
                self.asked = true;
                let ask = self.provoke(
                    "core/call",
                    json!({"owner": self.owner, "ticket": BOGUS_TICKET,
                        "name": "read_file", "input": {"path": "/etc/hostname"}}),
                );
                self.waiting_core_call = Some((self.next_id, payload.to_vec()));
                return Written {
                    messages: vec![ask],
                    broken: None,
                };
            }
        }
        let mut out = self.host.handle_at(payload, now);
        if method.as_deref() == Some("tool/call")
            && let Some(ms) = self.script.hold_tool_calls_ms
        {
            let due = now + std::time::Duration::from_millis(ms);
            self.held.extend(out.drain(..).map(|m| (due, m)));
        }
        if method.as_deref() == Some("ext/activate") && self.script.bad_registration {
            let owner = self.owner.clone();
            out.push(self.provoke(
                "registry/register",
                json!({"owner": owner, "kind": "tool",
                    "spec": {"name": "conform-no-schema", "description": "A tool with no input schema"}}),
            ));
        }
        let ready = out
            .iter()
            .any(|m| m.get("method") == Some(&json!("host/ready")));
        if ready && let Some(r) = self.script.request_after_ready.clone() {
            let method = r["method"]
                .as_str()
                .unwrap_or("host/conform-unknown")
                .to_owned();
            let params = r.get("params").cloned().unwrap_or(json!({}));
            out.push(self.provoke(&method, params));
        }
        let broken = if !ready {
            None
        } else if self.script.bad_frame_after_ready {
            Some(BAD_FRAME)
        } else if self.script.oversized_frame_after_ready {
            Some(OVERSIZED_HEADER)
        } else {
            None
        };
        Written {
            messages: out,
            broken,
        }
    }

    pub fn tick(&mut self, now: std::time::Instant) -> Vec<Value> {
        let mut due = self.host.tick(now);
        let (ready, later): (Vec<_>, Vec<_>) = self.held.drain(..).partition(|(at, _)| *at <= now);
        self.held = later;
        due.extend(ready.into_iter().map(|(_, m)| m));
        due
    }

    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        self.host
            .next_deadline()
            .into_iter()
            .chain(self.held.iter().map(|(at, _)| *at))
            .min()
    }

    pub fn done(&self) -> bool {
        self.host.done
    }
}

/// How the core ended, and whether the host it launched outlived it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreEnd {
    pub code: Option<i32>,
    /// The core was still running at the deadline and conform stopped it.
    pub stopped: bool,
    pub ms: u64,
    /// The scripted host was still alive after the core ended (conform killed it).
    pub host_outlived: bool,
    /// The core exited and its host had neither seen the end of its input
    /// nor ended within [`HOST_EOF_WITHIN_MS`] after.
    pub host_left_open: bool,
}

fn parsed(payload: &str) -> Option<Value> {
    serde_json::from_str(payload).ok()
}

/// What the core did in `case`, as evidence for the grader.
pub fn evidence(case: &Case<super::CoreCases>, events: &[Event], end: CoreEnd) -> Evidence {
    let broken = every_message(events, case.config.tier, end);
    let halted = !broken.is_empty() && (handshake_refused(events) || wrote_no_frame(events));
    let mut ev = crate::peer::evidence(
        broken,
        &case.steps,
        |s| s.info,
        |s| check_step(&s.check, events, end),
        "core",
        describe(events, end),
    );
    // The host refused the core's handshake, or stopped reading at bytes
    // that are no frame, for a rule a finding names: what the core then
    // never did, and how it exited, follow from that.
    if halted {
        for f in &mut ev.findings {
            if f.requirement.is_none() && matches!(f.kind, Kind::Missing | Kind::Process) {
                f.consequence = true;
            }
        }
    }
    ev
}

/// Whether the core wrote bytes that are not a frame (its host reads no
/// further).
fn wrote_no_frame(events: &[Event]) -> bool {
    events.iter().any(|e| matches!(e, Event::BadFrame { .. }))
}

/// Whether the core sent `host/initialize` and conform's host, refusing
/// it, never said `host/ready`.
fn handshake_refused(events: &[Event]) -> bool {
    let sent = |dir_in: bool, method: &str| {
        events.iter().any(|e| match e {
            Event::In { payload, .. } if dir_in => {
                parsed(payload).is_some_and(|v| v["method"] == method)
            }
            Event::Out { payload, .. } if !dir_in => {
                parsed(payload).is_some_and(|v| v["method"] == method)
            }
            _ => false,
        })
    };
    sent(true, "host/initialize") && !sent(false, "host/ready")
}

fn check_step(check: &CoreCheck, events: &[Event], end: CoreEnd) -> Check {
    let from_core: Vec<(u64, Value)> = events
        .iter()
        .filter_map(|e| match e {
            Event::In { t_ms, payload } => parsed(payload).map(|v| (*t_ms, v)),
            _ => None,
        })
        .collect();
    match check {
        CoreCheck::Sends(m) => {
            if from_core.iter().any(|(_, v)| v["method"] == json!(m)) {
                Check::Holds
            } else {
                Check::Broken(Kind::Missing, format!("the core never sent {m}"))
            }
        }
        CoreCheck::Cancels(m) => cancels(m, &from_core),
        CoreCheck::EndsHost => ends_host(events, end),
        CoreCheck::NeverSends(m) => match from_core.iter().find(|(_, v)| v["method"] == json!(m)) {
            None => Check::Holds,
            Some(_) => Check::Broken(
                Kind::Unexpected,
                format!("the core sent {m} to a host it must refuse"),
            ),
        },
        CoreCheck::Refuses(code) => refuses(events, &from_core, *code),
        CoreCheck::Exit(want) => match (end.code, end.stopped) {
            (code, false) if want.holds(code) => Check::Holds,
            (_, true) => Check::Broken(
                Kind::Process,
                "the core was still running at the deadline".into(),
            ),
            (c, _) => Check::Broken(
                Kind::Process,
                format!("the core exited with {c:?}, not {want}"),
            ),
        },
    }
}

/// Whether every request the host sent to provoke a refusal got none but
/// an error (of `code`, when given).
fn refuses(events: &[Event], from_core: &[(u64, Value)], code: Option<i64>) -> Check {
    let provoked: Vec<(u64, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Provoked { id, method, .. } => Some((*id, method.as_str())),
            _ => None,
        })
        .collect();
    if provoked.is_empty() {
        return Check::Unseen("the core never got as far as the host's request".into());
    }
    let mut problems = Vec::new();
    for (id, method) in provoked {
        let answer = from_core
            .iter()
            .find(|(_, v)| v.get("method").is_none() && v["id"] == json!(id));
        match (answer, code) {
            (Some((_, v)), _) if v.get("result").is_some() => problems.push(format!(
                "the core served the host's {method} (id {id}) it must refuse: the result {}",
                crate::matcher::brief(&v["result"])
            )),
            (Some((_, v)), Some(want)) if v.pointer("/error/code") != Some(&json!(want)) => {
                problems.push(format!(
                    "the core refused the host's {method} (id {id}) with {}, not {want}",
                    v["error"]
                ))
            }
            (None, Some(want)) => problems.push(format!(
                "the core never answered the host's {method} (id {id}); the source wants the error {want}"
            )),
            _ => {}
        }
    }
    if problems.is_empty() {
        Check::Holds
    } else {
        Check::Broken(Kind::Rule, problems.join("; "))
    }
}

/// Whether the core cancelled its unanswered request of `m` once its
/// `deadline_ms` had passed, within conform's margin.
fn cancels(m: &str, from_core: &[(u64, Value)]) -> Check {
    let Some((sent, request)) = from_core
        .iter()
        .find(|(_, v)| v["method"] == json!(m) && v.get("id").is_some())
    else {
        return Check::Unseen(format!("the core never sent {m}"));
    };
    let id = request["id"].clone();
    let deadline = request
        .pointer("/params/deadline_ms")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let cancel = from_core
        .iter()
        .find(|(_, v)| v["method"] == json!("$/cancel") && v.pointer("/params/id") == Some(&id));
    match cancel {
        None => Check::Broken(
            Kind::Missing,
            format!("the core never sent $/cancel for its {m} (id {id}, deadline_ms {deadline})"),
        ),
        Some((t, _)) => {
            let after = t.saturating_sub(*sent);
            if after + 50 < deadline {
                Check::Broken(
                    Kind::Rule,
                    format!(
                        "the core cancelled its {m} {after} ms after sending it, before its deadline_ms {deadline}"
                    ),
                )
            } else if after > deadline + CANCEL_MARGIN_MS {
                Check::Broken(
                    Kind::Rule,
                    format!(
                        "the core cancelled its {m} {after} ms after sending it, past its deadline_ms {deadline} and conform's {CANCEL_MARGIN_MS} ms margin"
                    ),
                )
            } else {
                Check::Holds
            }
        }
    }
}

/// Whether, after the host's broken frame, the core sent nothing more and
/// ended the host.
fn ends_host(events: &[Event], end: CoreEnd) -> Check {
    let Some(broke) = events.iter().find_map(|e| match e {
        Event::BrokeFrame { t_ms } => Some(*t_ms),
        _ => None,
    }) else {
        return Check::Unseen("the host never got to break its framing".into());
    };
    let mut problems = Vec::new();
    let later: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::In { t_ms, payload } if *t_ms > broke + 1000 => Some(
                parsed(payload)
                    .and_then(|v| v["method"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "an answer".into()),
            ),
            _ => None,
        })
        .collect();
    if !later.is_empty() {
        problems.push(format!(
            "after the host's broken frame the core went on sending: {}",
            later.join(", ")
        ));
    }
    let closed = events.iter().find_map(|e| match e {
        Event::Closed { t_ms } => Some(*t_ms),
        _ => None,
    });
    if let Some(t) = closed
        && t > broke + END_WITHIN_MS
        && !end.stopped
    {
        problems.push(format!(
            "the core closed the host's stdin {} ms after the broken frame, not within {END_WITHIN_MS} ms",
            t - broke
        ));
    }
    if end.host_outlived || (closed.is_none() && end.stopped) {
        problems.push("the core did not end the host: it was still running".into());
    }
    if problems.is_empty() {
        Check::Holds
    } else {
        Check::Broken(Kind::Process, problems.join("; "))
    }
}

fn describe(events: &[Event], end: CoreEnd) -> String {
    let sent: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::In { payload, .. } => Some(
                parsed(payload)
                    .map(|v| match v["method"].as_str() {
                        Some(m) => m.to_owned(),
                        None => format!("an answer to {}", v["id"]),
                    })
                    .unwrap_or_else(|| "(not JSON)".into()),
            ),
            Event::BadFrame { .. } => Some("(a broken frame)".into()),
            _ => None,
        })
        .collect();
    let how = if end.stopped {
        format!(
            "was still running after {:.1} s and conform stopped it",
            end.ms as f64 / 1000.0
        )
    } else {
        match end.code {
            Some(c) => format!(
                "exited with status {c} after {:.1} s",
                end.ms as f64 / 1000.0
            ),
            None => format!("was killed after {:.1} s", end.ms as f64 / 1000.0),
        }
    };
    // Runs of one thing said once, with their count.
    let mut runs: Vec<(String, usize)> = Vec::new();
    for s in sent {
        match runs.last_mut() {
            Some((last, n)) if *last == s => *n += 1,
            _ => runs.push((s, 1)),
        }
    }
    let said: Vec<String> = runs
        .into_iter()
        .map(|(s, n)| if n > 1 { format!("{s} (×{n})") } else { s })
        .collect();
    format!(
        "it sent {}; it {how}",
        if said.is_empty() {
            "nothing".into()
        } else {
            said.join(", ")
        }
    )
}

/// The rules every frame of every case is held to, as (requirement, kind, why).
fn every_message(events: &[Event], tier: Tier, end: CoreEnd) -> Vec<(String, Kind, String)> {
    let mut out = Vec::new();
    let mut push = |rule: &str, kind: Kind, why: String| out.push((rule.to_owned(), kind, why));
    let mut n = 0;
    let mut not_utf8 = false;
    // The host's requests unanswered by the core: id -> method.
    let mut host_asked: BTreeMap<u64, String> = BTreeMap::new();
    // The core's requests the host has not answered: id -> method.
    let mut core_asked: BTreeMap<u64, String> = BTreeMap::new();
    let mut initialize: Option<u64> = None;
    let mut initialized = false;
    let mut hello: Option<Value> = None;
    // Each plugin's latest (generation, owner), and the entries it activated.
    type Activated = ((u64, Value), Vec<Value>);
    let mut generations: BTreeMap<String, Activated> = BTreeMap::new();
    let mut data_dirs: Vec<(Value, String)> = Vec::new();
    for e in events {
        match e {
            Event::BadFrame { why, .. } => push(
                rules::FRAMES,
                Kind::Framing,
                format!("the core wrote bytes that are not a CWX1 frame: {why}"),
            ),
            Event::NotUtf8 { .. } => not_utf8 = true,
            Event::Out { payload, .. } => {
                let Some(v) = parsed(payload) else { continue };
                match (v["method"].as_str(), v["id"].as_u64()) {
                    (Some("host/hello"), _) => hello = Some(v["params"].clone()),
                    (Some(m), Some(id)) => {
                        host_asked.insert(id, m.to_owned());
                    }
                    (None, Some(id)) => {
                        core_asked.remove(&id);
                        if initialize == Some(id) {
                            initialized = true;
                        }
                    }
                    _ => {}
                }
            }
            Event::In { payload, .. } => {
                n += 1;
                if std::mem::take(&mut not_utf8) {
                    push(
                        rules::FRAMES,
                        Kind::Malformed,
                        format!("frame {n}'s payload is not UTF-8"),
                    );
                    continue;
                }
                let Some(v) = parsed(payload) else {
                    push(
                        rules::FRAMES,
                        Kind::Malformed,
                        format!("frame {n}'s payload is not JSON"),
                    );
                    continue;
                };
                if let Err(refused) = validate::parse_core_message(v.clone(), tier) {
                    let (rule, kind) = if refused.tier {
                        (rules::TIER_SEND, Kind::Unexpected)
                    } else {
                        (rules::FRAMES, Kind::Shape)
                    };
                    push(rule, kind, format!("frame {n}: {refused}"));
                    continue;
                }
                let id = v["id"].as_u64();
                let Some(method) = v["method"].as_str() else {
                    // The core's answer to a request of the host.
                    let id = id.unwrap_or_default();
                    match host_asked.remove(&id) {
                        None => push(
                            rules::ANSWERS,
                            Kind::Unexpected,
                            format!(
                                "frame {n} answers id {id}, which no request of the host in flight has"
                            ),
                        ),
                        Some(m) => {
                            if let Some(r) = v.get("result")
                                && let Some(why) = validate::core_result_violation(&m, r)
                            {
                                let rule = if m == "core/call" {
                                    rules::CORE_CALL
                                } else {
                                    rules::REGISTER_RESULT
                                };
                                push(
                                    rule,
                                    Kind::Shape,
                                    format!("frame {n}, the answer to {m}: {why}"),
                                );
                            }
                        }
                    }
                    continue;
                };
                let p = &v["params"];
                if let Some(id) = id {
                    if let Some(earlier) = core_asked.insert(id, method.to_owned()) {
                        push(
                            rules::IDS,
                            Kind::Rule,
                            format!(
                                "frame {n}: {method} has id {id}, the id of the core's {earlier} still in flight"
                            ),
                        );
                    }
                    // Said once, as the count crosses the limit.
                    if core_asked.len() == super::table::MAX_INFLIGHT + 1 {
                        push(
                            rules::INFLIGHT,
                            Kind::Rule,
                            format!(
                                "frame {n}: the core has {} requests in flight, over MAX_INFLIGHT (256)",
                                core_asked.len()
                            ),
                        );
                    }
                    if !initialized
                        && !matches!(method, "host/initialize" | "host/ping" | "host/shutdown")
                    {
                        push(
                            rules::INITIALIZE_FIRST,
                            Kind::Rule,
                            format!(
                                "frame {n}: the core sent {method} before host/initialize was answered"
                            ),
                        );
                    }
                }
                match method {
                    "host/initialize" => {
                        initialize = id;
                        let want = super::table::PROTOCOL_VERSION;
                        let asked = p["protocol"].as_u64();
                        let range = hello.as_ref().map(|h| {
                            (
                                h.pointer("/protocol/min").and_then(Value::as_u64),
                                h.pointer("/protocol/max").and_then(Value::as_u64),
                            )
                        });
                        let in_range = match (asked, range) {
                            (Some(a), Some((Some(lo), Some(hi)))) => lo <= a && a <= hi,
                            _ => true,
                        };
                        if asked != Some(want) || !in_range {
                            push(
                                rules::PROTOCOL,
                                Kind::Mismatch,
                                format!(
                                    "frame {n}: host/initialize asks for protocol {}, not {want} (PROTOCOL_VERSION) in the hello's range",
                                    p["protocol"]
                                ),
                            );
                        }
                        let max_frame = p
                            .pointer("/limits/max_frame")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                        let max_inflight = p
                            .pointer("/limits/max_inflight")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                        if max_frame > crate::wire::frame::MAX_FRAME as u64
                            || max_inflight > super::table::MAX_INFLIGHT as u64
                        {
                            push(
                                rules::LIMITS,
                                Kind::Mismatch,
                                format!(
                                    "frame {n}: host/initialize tells the host max_frame {max_frame} and max_inflight {max_inflight}, over the core's own MAX_FRAME (33554432) or MAX_INFLIGHT (256)"
                                ),
                            );
                        }
                    }
                    "ext/activate" => {
                        let owner = &p["owner"];
                        let token = owner["owner_token"].as_str().unwrap_or_default();
                        // "`owner_token` is 128+ random bits": 16 bytes at least.
                        if token.len() < 16 {
                            push(
                                rules::OWNER,
                                Kind::Mismatch,
                                format!(
                                    "frame {n}: owner_token {token:?} has {} bytes, too few for 128 bits",
                                    token.len()
                                ),
                            );
                        }
                        // "`generation` bumps on every (re)activation": a
                        // later ext/activate of the plugin has a higher one,
                        // unless it is another entry of the same owner.
                        let plugin = owner["plugin_id"].as_str().unwrap_or_default().to_owned();
                        let generation = owner["generation"].as_u64().unwrap_or(0);
                        let entry = p["entry"].clone();
                        match generations.get_mut(&plugin) {
                            Some((before, entries)) if generation <= before.0 => {
                                let same_owner = before.1 == *owner;
                                if same_owner && !entries.contains(&entry) {
                                    entries.push(entry);
                                } else {
                                    push(
                                        rules::OWNER,
                                        Kind::Mismatch,
                                        format!(
                                            "frame {n}: {plugin} is activated again with generation {generation}, not above its {}",
                                            before.0
                                        ),
                                    );
                                }
                            }
                            _ => {
                                generations
                                    .insert(plugin, ((generation, owner.clone()), vec![entry]));
                            }
                        }
                        // "Always an object; `{}` when none."
                        if let Some(c) = p.get("config")
                            && !c.is_object()
                        {
                            push(
                                rules::CONFIG,
                                Kind::Mismatch,
                                format!("frame {n}: ext/activate's config is {c}, not an object"),
                            );
                        }
                        // "The same for every entry of one owner."
                        if let Some(dir) = p["data_dir"].as_str() {
                            if let Some((_, other)) =
                                data_dirs.iter().find(|(o, d)| o == owner && d != dir)
                            {
                                push(
                                    rules::DATA_DIR,
                                    Kind::Mismatch,
                                    format!(
                                        "frame {n}: data_dir {dir:?} for an owner whose other entry had {other:?}"
                                    ),
                                );
                            }
                            data_dirs.push((owner.clone(), dir.to_owned()));
                        }
                    }
                    "command/run" => {
                        // "`raw_input` is what follows the command name, trimmed"
                        let raw = p["raw_input"].as_str().unwrap_or_default();
                        if raw.trim() != raw {
                            push(
                                rules::RAW_INPUT,
                                Kind::Mismatch,
                                format!(
                                    "frame {n}: command/run's raw_input {raw:?} is not trimmed"
                                ),
                            );
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    // "Production relies on stdin EOF at process exit"
    if end.host_left_open {
        push(
            rules::ENDS_HOST,
            Kind::Process,
            format!(
                "the core exited and {HOST_EOF_WITHIN_MS} ms later its host had still not seen the end of its stdin: the host outlives the core"
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::cwx::CoreCases;

    fn core_sent(t_ms: u64, v: Value) -> Event {
        Event::In {
            t_ms,
            payload: v.to_string(),
        }
    }

    fn host_sent(t_ms: u64, v: Value) -> Event {
        Event::Out {
            t_ms,
            payload: v.to_string(),
        }
    }

    const EXITED: CoreEnd = CoreEnd {
        code: Some(1),
        stopped: false,
        ms: 200,
        host_outlived: false,
        host_left_open: false,
    };

    /// The one rule `rule` is named; the case's own checks still fail it,
    /// each as that breach's consequence.
    fn only_consequences_beside(ev: &Evidence, rule: &str) {
        let named: Vec<_> = ev
            .findings
            .iter()
            .filter_map(|f| f.requirement.clone())
            .collect();
        assert_eq!(named, [rule], "{:?}", ev.findings);
        let unnamed: Vec<_> = ev
            .findings
            .iter()
            .filter(|f| f.requirement.is_none())
            .collect();
        assert!(
            !unnamed.is_empty(),
            "the workload's checks still fail the case"
        );
        assert!(unnamed.iter().all(|f| f.consequence), "{unnamed:?}");
    }

    /// Issue 26, item 12: a core whose `host/initialize` the host refuses
    /// breaks the rule that refusal names; the workload it then never sends
    /// counts against none of the case's requirements.
    #[test]
    fn what_a_refused_handshake_leaves_undone_is_its_consequence() {
        let case = crate::case::embedded::<CoreCases>("cwx/core/workload/plugin");
        let hello = Host::new(Tier::Plugin).hello();
        let init = json!({"jsonrpc":"2.0","id":1,"method":"host/initialize","params":{"protocol":2,
            "limits":{"max_frame":33554432,"max_inflight":256,"dispose_deadline_ms":5000,"activate_deadline_ms":10000}}});
        let refusal = json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"protocol 2 is outside 1..=1"}});
        let events = [
            host_sent(0, hello.clone()),
            core_sent(5, init),
            host_sent(6, refusal),
        ];
        only_consequences_beside(&evidence(&case, &events, EXITED), "cwx.core.protocol");
        // A core that shook hands and then never sent its workload: that is
        // its own failure.
        let ready = json!({"jsonrpc":"2.0","method":"host/ready","params":{}});
        let init = json!({"jsonrpc":"2.0","id":1,"method":"host/initialize","params":{"protocol":1,
            "limits":{"max_frame":33554432,"max_inflight":256,"dispose_deadline_ms":5000,"activate_deadline_ms":10000}}});
        let answer = json!({"jsonrpc":"2.0","id":1,"result":{"protocol":1}});
        let events = [
            host_sent(0, hello),
            core_sent(5, init),
            host_sent(6, answer),
            host_sent(6, ready),
        ];
        let ev = evidence(&case, &events, EXITED);
        assert!(
            ev.findings
                .iter()
                .any(|f| f.requirement.is_none() && !f.consequence)
        );
    }

    /// The same for a core whose first bytes are no frame: the frame rule
    /// is broken, and the workload it never sent follows from it.
    #[test]
    fn what_a_core_leaves_undone_after_bytes_that_are_no_frame_is_their_consequence() {
        let case = crate::case::embedded::<CoreCases>("cwx/core/workload/plugin");
        let hello = Host::new(Tier::Plugin).hello();
        let events = [
            host_sent(0, hello),
            Event::BadFrame {
                t_ms: 5,
                why: "bad frame magic".into(),
            },
        ];
        only_consequences_beside(&evidence(&case, &events, EXITED), "cwx.core.frames");
    }
}
