//! conform playing the core: one fresh host process per case over the
//! shared stdio session (`drive::stdio`) in CWX1 frames, the core's strict
//! reading of every frame the host writes ([`HostWatch`], sans-IO), the
//! core's answers to the host's requests, and the case's steps.

use super::steps::{
    Config, Expect, Limits, NamedCheck, Need, Own, Register, Setup, Step, Sweep, SweepKind,
};
use super::table::{Tier, code};
use super::validate::{self, HostMessage};
use crate::case::Case;
use crate::drive::stdio::{self, AnswerFuture, Answerer, ProbeRequest, Session};
use crate::evidence::{Evidence, Finding, Kind};
use crate::fuzz::readings::{How, Id, Readings};
use crate::keep::Keep;
use crate::matcher::{self, truncate};
use crate::outcome::{CaseResult, SkipKind};
use crate::step::{Action, ReplyRule, StdioExpect};
use crate::transport::stdio::Launcher;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// "| `host/ping` | `PING_DEADLINE` (10 s) |": the default for any request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// The request that asks whether the host still serves.
const PROBE: ProbeRequest = ProbeRequest {
    method: "host/ping",
    what: "a probe (host/ping)",
    still: "the host still answers host/ping",
    within: REQUEST_DEADLINE,
};
/// "| `host/initialize` | `HANDSHAKE_DEADLINE` (30 s) |"
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(30);
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// The requirement each watched rule belongs to.
pub mod rules {
    pub const FRAME: &str = "cwx.frame.format";
    pub const MAX_OUT: &str = "cwx.frame.max-out";
    pub const LIMITS: &str = "cwx.limits.host";
    pub const STRICT: &str = "cwx.strict.host-messages";
    pub const ANSWERS: &str = "cwx.response.answers-a-request";
    pub const RESULT_SHAPE: &str = "cwx.result.shapes";
    pub const DOCUMENTED: &str = "cwx.result.documented";
    pub const CODES: &str = "cwx.error.codes";
    pub const IDS: &str = "cwx.host-requests.ids";
    pub const INFLIGHT: &str = "cwx.inflight";
    pub const OWNER: &str = "cwx.register.owner";
    pub const TICKET: &str = "cwx.core-call.ticket";
    /// The rules of the set-up's steps: a case that lists one is about
    /// that step, and its failure is the case's own.
    pub const READY: &str = "cwx.handshake.ready";
    pub const ACTIVATE_OK: &str = "cwx.activate.ok";
    /// The fields with a rule of their own: a message the core refuses for
    /// one of them breaks that rule rather than the strictness rule.
    pub const FIELDS: &[(&str, &str)] = &[
        ("host/hello.tier", "cwx.hello.tier"),
        ("host/hello.protocol", "cwx.hello.protocol"),
        ("host/hello.runtime", "cwx.hello.runtime"),
        ("host/hello.builtin_modules", "cwx.hello.modules"),
        ("host/hello.memory_limit_mib", "cwx.hello.memory-limit"),
    ];
    /// The wire type each call's result must be, by the rule that gives it.
    pub const RESULTS: &[(&str, &str)] = &[
        ("tool/call", "cwx.tool.result"),
        ("command/run", "cwx.command.result"),
        ("hook/evaluate", "cwx.hook.verdict"),
    ];
    /// The rule of `method`'s result type, if it has one of its own.
    pub fn result_rule(method: &str) -> Option<&'static str> {
        RESULTS.iter().find(|(m, _)| *m == method).map(|(_, r)| *r)
    }
    pub const ALL: &[&str] = &[
        FRAME,
        MAX_OUT,
        LIMITS,
        STRICT,
        ANSWERS,
        RESULT_SHAPE,
        DOCUMENTED,
        CODES,
        IDS,
        INFLIGHT,
        OWNER,
        TICKET,
    ];
    /// Every case's handshake alone is framed, strict, answered and shaped;
    /// the rest are checked on every message of every case too.
    pub const EVERY_MESSAGE: &[&str] = ALL;
    /// The rules a core reads past (SHOULD): breaking one does not end the
    /// exchange the way a protocol error does.
    pub const SOFT: &[&str] = &[LIMITS, DOCUMENTED, CODES];
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

/// The case that reports a host that writes nothing: host/hello comes first.
pub const SETUP_CASE: &str = "cwx/handshake/hello";

/// The limits conform sends in `host/initialize`: the core's own, unless
/// the case lowers one.
pub(crate) fn initialize_params(limits: &Limits) -> Value {
    json!({"protocol": super::table::PROTOCOL_VERSION, "limits": {
        "max_frame": limits.max_frame.unwrap_or(crate::wire::frame::MAX_FRAME as u64),
        "max_inflight": limits.max_inflight.unwrap_or(super::table::MAX_INFLIGHT as u64),
        "dispose_deadline_ms": limits.dispose_deadline_ms.unwrap_or(5000),
        "activate_deadline_ms": limits.activate_deadline_ms.unwrap_or(10000)}})
}

fn owner() -> Value {
    json!({"plugin_id": "conform-extension", "generation": 1,
        "owner_token": "c0nf0rmc0nf0rmc0nf0rmc0nf0rm0001"})
}

/// A broken rule of the exchange, and whether it ends the exchange (a
/// MUST the core's reader would stop at) or is read past.
struct Violation {
    rule: String,
    kind: Kind,
    message: String,
}

/// The core's reading of one host connection, sans-IO.
#[derive(Default)]
pub struct HostWatch {
    tier: Option<Tier>,
    /// Requests conform sent: id -> method.
    outstanding: BTreeMap<u64, String>,
    /// Tickets of conform's tool/calls in flight: tool/call id -> ticket.
    tickets: BTreeMap<u64, String>,
    /// Host messages (notifications and requests) by method, in order,
    /// kept within `kept`.
    notifications: Vec<(String, Value)>,
    /// The account of what `notifications` keeps: a host that floods them
    /// does not grow conform.
    kept: Keep,
    violations: Vec<Violation>,
    /// Where results were not their wire type (`result.content`), the
    /// whole result where its type failed as a whole.
    broken_fields: Vec<String>,
    /// Ids of raw messages conform sent that no core would (not a u64
    /// written as one, another reading of the payload than the core's, or
    /// null for a payload whose id a reader may not find): the host may
    /// echo them, by value, or answer with a null id, which the core's
    /// parser refuses but no core would ever provoke.
    odd_ids: Vec<Id>,
    /// The limits conform sent in host/initialize: (max_frame, max_inflight).
    limits: Option<(u64, u64)>,
    /// The host's requests conform has not answered yet.
    host_inflight: BTreeSet<u64>,
    /// ext/activate requests in flight: id -> the owner they handed over.
    activating: BTreeMap<u64, Value>,
    /// Every owner conform handed over, and each plugin's newest generation.
    owners: Vec<Value>,
    newest: BTreeMap<String, u64>,
    /// The host's registrations in flight: id -> kind.
    registering: BTreeMap<u64, String>,
    /// The kinds conform admitted a registration of.
    admitted: BTreeSet<String>,
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
            .any(|v| v.rule == rule && v.message == message)
        {
            self.violations.push(Violation {
                rule: rule.into(),
                kind,
                message,
            });
        }
    }

    /// Whether a rule the core stops at was broken.
    fn broken(&self) -> bool {
        self.violations
            .iter()
            .any(|v| !rules::SOFT.contains(&v.rule.as_str()))
    }

    /// The params of the first message of `method` the host sent.
    fn saw(&self, method: &str) -> Option<&Value> {
        self.notifications
            .iter()
            .find(|(m, _)| m == method)
            .map(|(_, p)| p)
    }

    /// "Identity of one activation ... handed over only in `ext/activate`":
    /// a registration names the owner of an activation in flight; any other
    /// request an owner conform handed over, of its plugin's newest generation.
    fn check_owner(&mut self, method: &str, params: &Value) {
        let Some(owner) = params.get("owner") else {
            return;
        };
        if method == "registry/register" {
            if !self.activating.values().any(|o| o == owner) {
                let during = if self.activating.is_empty() {
                    "no activation is in flight".to_owned()
                } else {
                    format!(
                        "the activation in flight handed over {}",
                        self.activating
                            .values()
                            .map(Value::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                self.violate(
                    rules::OWNER,
                    Kind::Rule,
                    format!("registry/register names the owner {owner}, but {during}"),
                );
            }
            return;
        }
        let plugin = owner["plugin_id"].as_str().unwrap_or_default();
        let current = self.owners.contains(owner)
            && owner["generation"].as_u64() == self.newest.get(plugin).copied();
        if !current {
            self.violate(
                rules::OWNER,
                Kind::Rule,
                format!("{method} names the owner {owner}, not one the core handed over in its plugin's newest ext/activate"),
            );
        }
    }

    /// The host asks conform something: its id, how many of its requests are
    /// in flight, the ticket a core/call presents.
    fn host_request(&mut self, id: u64, method: &str, params: &Value) {
        // "A request carries an id and gets a response": by that id alone.
        if !self.host_inflight.insert(id) {
            self.violate(
                rules::IDS,
                Kind::Rule,
                format!(
                    "the host sent {method} with id {id}, the id of its request still in flight"
                ),
            );
        }
        let n = self.host_inflight.len() as u64;
        // "Requests in flight per direction." Said once, as the count
        // crosses each limit.
        if n == super::table::MAX_INFLIGHT as u64 + 1 {
            self.violate(
                rules::INFLIGHT,
                Kind::Rule,
                format!("the host has {n} requests in flight, over MAX_INFLIGHT (256)"),
            );
        } else if let Some((_, max)) = self.limits
            && n == max + 1
        {
            self.violate(
                rules::LIMITS,
                Kind::Rule,
                format!("the host has {n} requests in flight, over the limits.max_inflight {max} of host/initialize"),
            );
        }
        if method == "registry/register" {
            let kind = params["kind"].as_str().unwrap_or_default();
            self.registering.insert(id, kind.to_owned());
        }
        if method == "core/call" {
            let ticket = params.get("ticket").and_then(Value::as_str);
            let issued = ticket.is_some_and(|t| self.tickets.values().any(|mine| mine == t));
            if !issued {
                // "Absent for a call with no gate ..., whose tool then has no
                // way to ask the core for anything."
                self.violate(
                    rules::TICKET,
                    Kind::Rule,
                    format!(
                        "core/call presents the ticket {}, which no tool/call of the core in flight carries",
                        ticket.map_or("(none)".into(), |t| format!("{t:?}"))
                    ),
                );
            }
        }
        self.check_owner(method, params);
    }

    /// What conform handed over in a request: owners, tickets, and (from a
    /// message it built, not raw bytes a case or the fuzzer wrote) limits.
    fn learn(&mut self, id: u64, method: &str, params: &Value, built: bool) {
        match method {
            "host/initialize" if built => {
                let l = &params["limits"];
                self.limits = Some((
                    l["max_frame"].as_u64().unwrap_or(u64::MAX),
                    l["max_inflight"].as_u64().unwrap_or(u64::MAX),
                ));
            }
            "ext/activate" => {
                let owner = params.get("owner").cloned().unwrap_or(Value::Null);
                let plugin = owner["plugin_id"].as_str().unwrap_or_default().to_owned();
                let generation = owner["generation"].as_u64().unwrap_or(0);
                let newest = self.newest.entry(plugin).or_insert(generation);
                *newest = (*newest).max(generation);
                self.owners.push(owner.clone());
                self.activating.insert(id, owner);
            }
            "tool/call" => {
                if let Some(t) = params.get("ticket").and_then(Value::as_str) {
                    self.tickets.insert(id, t.to_owned());
                }
            }
            _ => {}
        }
    }
}

impl stdio::Watch for HostWatch {
    fn sent(&mut self, message: &Value) -> Option<String> {
        let id = message.get("id").and_then(Value::as_u64);
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            // conform's answer to a request of the host.
            if let Some(id) = id {
                self.host_inflight.remove(&id);
                if let Some(kind) = self.registering.remove(&id)
                    && message.pointer("/result/handle").is_some()
                {
                    self.admitted.insert(kind);
                }
            }
            return None;
        };
        let id = id?;
        self.learn(id, method, &message["params"], true);
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
                                let params =
                                    o.members.get("params").cloned().unwrap_or(Value::Null);
                                self.learn(id, m, &params, false);
                                self.outstanding.insert(id, m.to_owned());
                            }
                            (method, core_id, Some(id)) => {
                                // A host that reads bytes that are not UTF-8
                                // leniently may serve the request: its answer
                                // is then a reply, which a case may judge
                                // (`cwx/frame/non-utf8-not-served`).
                                if let (Some(m), Some(core_id), How::Lenient) =
                                    (method, core_id, o.how)
                                {
                                    self.outstanding.insert(core_id, m.to_owned());
                                }
                                self.odd_ids.extend([id.clone(), Id::Null]);
                            }
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
                    format!("a frame's payload is not UTF-8 JSON: {e}"),
                );
                return stdio::Incoming::Other;
            }
        };
        // "anything larger is refused, never truncated": the limit conform set.
        if let Some((max, _)) = self.limits
            && payload.len() as u64 > max
        {
            self.violate(
                rules::LIMITS,
                Kind::Framing,
                format!(
                    "the host wrote a frame of {} bytes, over the limits.max_frame {max} of host/initialize",
                    payload.len()
                ),
            );
        }
        // An answer to a request no core would send is neither the core's
        // business nor the host's fault: only its kind is recorded.
        let odd = value.get("method").is_none()
            && value
                .get("id")
                .is_some_and(|id| self.odd_ids.contains(&Id::from_value(id)));
        let tier = self.tier.unwrap_or(Tier::Plugin);
        match validate::parse_host_message(value.clone(), tier) {
            Err(_) if odd => stdio::Incoming::Other,
            Err(why) => {
                // "Host→core types use `deny_unknown_fields` — host output is untrusted input."
                // A refused field with a rule of its own breaks that rule.
                let rule = rules::FIELDS
                    .iter()
                    .find(|(at, _)| {
                        why.strip_prefix(at)
                            .is_some_and(|rest| rest.starts_with(['.', ':', '[']))
                    })
                    .map_or(rules::STRICT, |(_, rule)| rule);
                self.violate(
                    rule,
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
                    if !odd {
                        self.violate(
                            rules::ANSWERS,
                            Kind::Unexpected,
                            format!(
                                "a response with id {id} answers no request the core has in flight"
                            ),
                        );
                    }
                    return stdio::Incoming::Other;
                };
                self.tickets.remove(&id);
                self.activating.remove(&id);
                if let Err(e) = &outcome
                    && !validate::channel_code(e.code)
                {
                    self.violate(
                        rules::CODES,
                        Kind::Mismatch,
                        format!("{method} was answered with the code {}, which is not one of the channel's", e.code),
                    );
                }
                let outcome = outcome
                    .map_err(|e| json!({"code": e.code, "message": e.message, "data": e.data}));
                if let Ok(r) = &outcome {
                    if let Some((at, why)) = validate::result_violation_at(&method, r) {
                        self.violate(rules::RESULT_SHAPE, Kind::Shape, format!("{method}: {why}"));
                        if self.broken_fields.len() < 64 {
                            self.broken_fields.push(match at.as_str() {
                                "." => "result".to_owned(),
                                at => format!("result.{at}"),
                            });
                        }
                    } else if let Some(why) = validate::result_undocumented(&method, r) {
                        self.violate(rules::DOCUMENTED, Kind::Shape, format!("{method}: {why}"));
                    }
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
            Ok(HostMessage::Request { id, method, params }) => {
                self.host_request(id, &method, &params);
                if let Some(kept) = self.kept.admit(params.clone()) {
                    self.notifications.push((method.clone(), kept));
                }
                stdio::Incoming::Request {
                    id: json!(id),
                    method,
                    params,
                }
            }
        }
    }

    /// "bad magic or length ends the host instead of desynchronising it"
    fn broke(&mut self, why: &str) -> bool {
        let rule = if why.contains("MAX_FRAME") || why.contains("exceeds") {
            rules::MAX_OUT
        } else {
            rules::FRAME
        };
        self.violate(
            rule,
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
    /// error: nothing after it is read. A SHOULD the core reads past does not.
    fn ends_steps(&self, _: &Evidence, _: bool) -> bool {
        self.broken()
    }

    fn halted(&self) -> bool {
        self.broken()
    }

    fn findings(&self) -> Vec<Finding> {
        self.violations
            .iter()
            .map(|v| Finding::new(Some(&v.rule), v.kind, v.message.clone()))
            .collect()
    }

    fn broken_fields(&self) -> &[String] {
        &self.broken_fields
    }

    fn kept_note(&self) -> Option<String> {
        self.kept.note()
    }
}

/// One registration conform admitted: its kind, name, input schema, handle.
#[derive(Debug, Clone)]
struct Admitted {
    kind: String,
    name: String,
    schema: Option<Value>,
    handle: u64,
}

/// The core's side of a case: the handles it gives the host's registrations.
#[derive(Default)]
struct CoreRole {
    mode: Register,
    next_handle: u64,
    /// Every registration admitted, in order.
    admitted: Vec<Admitted>,
    /// Registrations held back: (id, params).
    held: Vec<(Value, Value)>,
    /// Registrations seen, admitted or not.
    seen: usize,
}

impl CoreRole {
    fn admit(&mut self, id: &Value, params: &Value) -> Value {
        self.next_handle += 1;
        self.admitted.push(Admitted {
            kind: params["kind"].as_str().unwrap_or_default().to_owned(),
            name: params
                .pointer("/spec/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            schema: params.pointer("/spec/input_schema").cloned(),
            handle: self.next_handle,
        });
        json!({"jsonrpc": "2.0", "id": id, "result": {"handle": self.next_handle}})
    }

    fn register(&mut self, id: &Value, params: &Value) -> Option<Value> {
        self.seen += 1;
        let kind = params["kind"].as_str().unwrap_or_default();
        match self.mode {
            Register::Admit => Some(self.admit(id, params)),
            Register::Hold => {
                self.held.push((id.clone(), params.clone()));
                None
            }
            Register::HoldAfterFirst => {
                if self.admitted.is_empty() {
                    Some(self.admit(id, params))
                } else {
                    self.held.push((id.clone(), params.clone()));
                    None
                }
            }
            Register::HoldAfterFirstTool => {
                if kind == "tool" && !self.admitted.iter().any(|a| a.kind == "tool") {
                    Some(self.admit(id, params))
                } else {
                    self.held.push((id.clone(), params.clone()));
                    None
                }
            }
            Register::RefuseSecond if self.seen == 2 => Some(json!({"jsonrpc": "2.0", "id": id,
                "result": {"refused": "conform refuses this registration"}})),
            Register::ErrorSecond if self.seen == 2 => Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": code::REFUSED, "message": "conform refuses this registration"}})),
            Register::RefuseSecond | Register::ErrorSecond => Some(self.admit(id, params)),
        }
    }

    /// The answers to the registrations held back; later ones are admitted.
    fn release(&mut self) -> Vec<Value> {
        self.mode = Register::Admit;
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(id, params)| self.admit(&id, &params))
            .collect()
    }

    /// The first handle of `kind` (`any`: of any kind) admitted since `from`.
    fn first(&self, kind: &str, from: usize) -> Option<&Admitted> {
        self.admitted
            .get(from..)
            .unwrap_or_default()
            .iter()
            .find(|a| kind == "any" || a.kind == kind)
    }
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
            "registry/register" => self.register(id, params),
            "registry/unregister" => Some(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            // "the core's policy refuses the call": conform's core runs no tools.
            _ => Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code::REFUSED,
                "message": format!("conform's core serves no {method}")}}),
            ),
        };
        Box::pin(async move { answer })
    }
}

struct CaseRun<'a> {
    ctx: &'a Context,
    s: Session<HostWatch>,
    role: CoreRole,
    /// The activation the setup made, and later ones the steps make: each
    /// starts a fresh list of admitted handles for the variables.
    admitted_from: usize,
}

impl Context {
    /// Why `case` does not apply to this run, if it does not.
    pub fn skip_reason(&self, case: &Case<super::HostCases>) -> Option<(&'static str, SkipKind)> {
        if case.needs.contains(&Need::Extension) && self.extension.is_none() {
            return Some((
                "no extension to activate: give one with --extension PATH#SHA256",
                SkipKind::Outside,
            ));
        }
        // The tier is the host's declaration: not applicable.
        if case.needs.contains(&Need::BuiltinTier) && self.tier != Tier::Builtin {
            return Some(("the case is for a builtin-tier host", SkipKind::Declared));
        }
        if case.needs.contains(&Need::PluginTier) && self.tier != Tier::Plugin {
            return Some(("the case is for a plugin-tier host", SkipKind::Declared));
        }
        None
    }

    /// A case of a run whose set-up got nothing (the host wrote nothing at
    /// all, `why`): every case waits for the host's first frame, so
    /// [`SETUP_CASE`] reports it, once, and the others end at once naming
    /// it (when the run did not select it, each case fails on it).
    pub fn stands_on_silence(
        &self,
        case: &Case<super::HostCases>,
        why: &str,
        selected: &BTreeSet<String>,
    ) -> CaseResult {
        let started = Instant::now();
        let mut ev = Evidence::default();
        if let Some((reason, kind)) = self.skip_reason(case) {
            ev.skip(reason, kind);
        } else if case.id != SETUP_CASE && selected.contains(SETUP_CASE) {
            ev.skip(
                format!("{why}; {SETUP_CASE} reports it, so this case is not failed for it again"),
                SkipKind::Outside,
            );
        } else if case.id == SETUP_CASE {
            // The hello is this case's own step: its missing answer.
            ev.fail(Kind::Missing, why.to_owned()).found_by("reply");
        } else {
            ev.setup_failed(Kind::Missing, why.to_owned());
        }
        CaseResult::graded(case, ev, self.strict, started, vec![])
    }

    pub async fn run_case(&self, case: &Case<super::HostCases>) -> CaseResult {
        let started = Instant::now();
        let mut early = Evidence::default();
        let result = |ev| CaseResult::graded(case, ev, self.strict, started, vec![]);
        if let Some((why, kind)) = self.skip_reason(case) {
            early.skip(why, kind);
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
            role: CoreRole {
                mode: case.config.register,
                ..CoreRole::default()
            },
            admitted_from: 0,
        };
        run.s.vars.set("tier", json!(self.tier.name()));
        run.s.vars.set("owner", owner());
        if let Some(x) = &self.extension {
            run.s
                .vars
                .set("entry", json!({"path": x.path, "sha256": x.sha256}));
        }
        run.setup(&case.config, &case.requirements).await;
        let setup_failed = !run.s.ev.findings.is_empty() || run.s.stalled || run.s.watch.broken();
        if case.config.setup == Setup::Extension {
            for kind in case.needs.iter().filter_map(|n| n.handle_kind()) {
                if !setup_failed && run.s.vars.get(&format!("{kind}_handle")).is_none() {
                    run.s.ev.skip(
                        format!("the extension registered no {kind}"),
                        SkipKind::Outside,
                    );
                }
            }
        }
        for (i, step) in case.steps.iter().enumerate() {
            if setup_failed || !run.s.goes_on() {
                break;
            }
            run.step(i, step).await;
        }
        run.s
            .graded(&mut run.role, EXIT_GRACE, case, self.strict, started)
            .await
    }
}

impl CaseRun<'_> {
    /// Waits, within `within`, for the host to send a message of `method`.
    async fn saw(&mut self, method: &str, within: Duration) -> bool {
        let m = method.to_owned();
        self.s
            .pump(&mut self.role, Instant::now() + within, &|s| {
                s.watch.saw(&m).is_some()
            })
            .await
    }

    /// The first handle of each kind the latest activation admitted, as the
    /// variables `tool_handle`, `command_handle`, `hook_handle`.
    /// And every handle by kind and name, as `handles.<kind>.<name>`.
    fn sync_handles(&mut self) {
        let from = self.admitted_from.min(self.role.admitted.len());
        let mut by_name = json!({"tool": {}, "command": {}, "hook": {}});
        for a in &self.role.admitted[from..] {
            if let Some(names) = by_name.get_mut(&a.kind).and_then(Value::as_object_mut) {
                names.entry(a.name.clone()).or_insert(json!(a.handle));
            }
        }
        self.s.vars.set("handles", by_name);
        for kind in ["tool", "command", "hook"] {
            if let Some(a) = self.role.first(kind, from) {
                self.s.vars.set(format!("{kind}_handle"), json!(a.handle));
            }
        }
    }

    /// A step's params naming a handle by a name the extension did not
    /// register (`${handles.tool.echo}`): the case is not applicable to
    /// this extension, which says so; true when so.
    fn names_no_handle(&mut self, v: &Value) -> bool {
        match matcher::expand(v, &self.s.vars) {
            Err(matcher::TemplateError(name)) if name.starts_with("handles.") => {
                let mut parts = name.splitn(3, '.').skip(1);
                let (kind, handle) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                self.s.ev.skip(
                    format!("the extension registered no {kind} named `{handle}`"),
                    SkipKind::Outside,
                );
                true
            }
            _ => false,
        }
    }

    /// The case's set-up: hello, the handshake, the extension's activation,
    /// as `config` asks. A step that fails is the case's own failure only
    /// where the case is about it (`listed` holds that step's rule), else a
    /// set-up failure, which counts against none of the case's requirements.
    async fn setup(&mut self, config: &Config, listed: &[String]) {
        let about = |rule: &str| listed.iter().any(|r| r == rule);
        if config.setup == Setup::None {
            return;
        }
        if !self.saw("host/hello", self.ctx.startup).await {
            if !self.s.watch.broken() {
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
        if config.setup == Setup::Hello {
            return;
        }
        let params = initialize_params(&config.limits);
        let Some(key) = self.s.request("host/initialize", params).await else {
            return;
        };
        if self
            .s
            .answer(&mut self.role, &key, "host/initialize", HANDSHAKE_DEADLINE)
            .await
            .is_none()
        {
            return;
        }
        if !self.saw("host/ready", REQUEST_DEADLINE).await {
            if !self.s.watch.broken() {
                let why = "setup: no host/ready after host/initialize";
                if about(rules::READY) {
                    self.s.ev.fail(Kind::Missing, why);
                } else {
                    self.s.ev.setup_failed(Kind::Missing, why);
                }
            }
            self.s.stalled = true;
            return;
        }
        if config.setup != Setup::Extension {
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
            .s
            .answer(
                &mut self.role,
                &key,
                "ext/activate",
                Duration::from_secs(11),
            )
            .await
        {
            Some(Ok(r)) if r["status"] == "ok" => {
                self.sync_handles();
                self.s.vars.set("activated", r);
            }
            Some(other) => {
                let why = format!(
                    "setup: the extension did not activate: {}",
                    crate::jsonrpc::describe_answer(&other)
                );
                if about(rules::ACTIVATE_OK) {
                    self.s.ev.fail(Kind::WrongKind, why);
                } else {
                    self.s.ev.setup_failed(Kind::WrongKind, why);
                }
            }
            None => {}
        }
    }

    async fn step(&mut self, index: usize, step: &Step) {
        self.sync_handles();
        match &step.action {
            Action::Write(bytes) => {
                let Some(bytes) = self.s.raw_bytes(bytes) else {
                    return;
                };
                self.s.write_raw(&bytes, &step.pauses).await;
            }
            Action::Send(send) => {
                if self.names_no_handle(&send.params) {
                    return;
                }
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
                if send.method == "ext/activate" {
                    // A new activation: the variables name its handles.
                    self.admitted_from = self.role.admitted.len();
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
                // "`host/hello` carries the tier the host serves": it comes
                // first, within the run's startup bound.
                let default = if method == "host/hello" {
                    self.ctx.startup
                } else {
                    REQUEST_DEADLINE
                };
                let within = step.deadline_or(default);
                if !self.saw(method, within).await {
                    self.s
                        .ev
                        .fail(
                            Kind::Missing,
                            format!(
                                "the host sent no {method} within {:.0}s",
                                within.as_secs_f64()
                            ),
                        )
                        .found_by("reply");
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
                        let mut f = Finding::of_pattern(m, "result", "params");
                        f.message = format!("{method}: {}", f.message);
                        self.s.ev.push(f);
                    }
                }
                let checks = step.expect.as_ref().map(|e| e.checks.clone());
                if checks.is_some_and(|c| c.contains(&NamedCheck::Hello)) {
                    for f in hello_findings(&params) {
                        self.s.ev.push(f);
                    }
                }
            }
            Action::Quiet(_) | Action::Probe | Action::CloseStdin | Action::ExitsWithin(_) => {
                self.s.common(&mut self.role, step, &PROBE).await;
            }
            Action::Own(own) => self.own(step, own).await,
        }
    }

    async fn own(&mut self, step: &Step, own: &Own) {
        match own {
            Own::Release => {
                for answer in self.role.release() {
                    self.s.send(&answer).await;
                }
            }
            Own::WaitHandle(kind) => {
                let within = step.deadline_or(REQUEST_DEADLINE);
                let k = kind.clone();
                self.s
                    .pump(&mut self.role, Instant::now() + within, &|s| {
                        if k == "any" {
                            !s.watch.admitted.is_empty()
                        } else {
                            s.watch.admitted.contains(&k)
                        }
                    })
                    .await;
                if self.role.first(kind, self.admitted_from).is_none() {
                    let what = if kind == "any" {
                        "nothing"
                    } else {
                        &format!("no {kind}")
                    };
                    self.s.ev.skip(
                        format!("the extension registered {what} that conform could admit"),
                        SkipKind::Outside,
                    );
                }
            }
            Own::CallHandle(kind) => {
                let Some(a) = self.role.first(kind, self.admitted_from).cloned() else {
                    let what = if kind == "any" {
                        "nothing"
                    } else {
                        &format!("no {kind}")
                    };
                    self.s.ev.skip(
                        format!("the extension registered {what} that conform admitted"),
                        SkipKind::Outside,
                    );
                    return;
                };
                let (method, params) = call_of(&a);
                let Some(key) = self.s.request(method, params).await else {
                    return;
                };
                self.s.ev.observe(format!(
                    "{method} on the {} `{}` (handle {})",
                    a.kind, a.name, a.handle
                ));
                self.judge_answer(step, &key, method).await;
            }
            Own::Absent(method) => {
                if self.s.watch.saw(method).is_some() {
                    self.s
                        .ev
                        .fail(Kind::Unexpected, format!("the host sent {method} already"));
                }
            }
            Own::Message(m) => {
                let Some(m) = self.s.expand(m) else { return };
                let Some(key) = self.s.send(&m).await else {
                    if m.get("id").is_some() {
                        self.s
                            .ev
                            .error("a message step's id is a u64 and its method a string");
                    }
                    return;
                };
                let method = m["method"].as_str().unwrap_or("the message").to_owned();
                self.judge_answer(step, &key, &method).await;
            }
            Own::NoResult(id) => {
                let key = id.to_string();
                let within = step.deadline_or(Duration::from_secs(2));
                let k = key.clone();
                self.s
                    .pump(&mut self.role, Instant::now() + within, &|s| {
                        s.answers.contains_key(&k)
                    })
                    .await;
                match self.s.answers.remove(&key) {
                    Some(Ok(r)) => {
                        self.s
                            .ev
                            .fail(
                                Kind::WrongKind,
                                format!(
                                    "request {id} was served: the result {}",
                                    matcher::brief(&r)
                                ),
                            )
                            .seen(
                                "no result (an error, no answer, or the host ending)",
                                matcher::brief(&r),
                            );
                    }
                    Some(Err(e)) => self.s.ev.observe(format!("request {id} was refused: {e}")),
                    None => self.s.ev.observe(format!("request {id} got no answer")),
                }
            }
            Own::Sweep(sweep) => self.sweep(sweep).await,
        }
    }

    /// Calls every handle of the sweep's kind the latest activation admitted.
    async fn sweep(&mut self, sweep: &Sweep) {
        let from = self.admitted_from.min(self.role.admitted.len());
        let targets: Vec<Admitted> = self.role.admitted[from..]
            .iter()
            .filter(|a| a.kind == sweep.kind.name())
            .cloned()
            .collect();
        if targets.is_empty() {
            self.s.ev.skip(
                format!("the extension registered no {}", sweep.kind.name()),
                SkipKind::Outside,
            );
            return;
        }
        let tools: Vec<String> = self.role.admitted[from..]
            .iter()
            .filter(|a| a.kind == "tool")
            .map(|a| a.name.clone())
            .collect();
        let mut n = 0;
        for t in &targets {
            let calls: Vec<(&str, Value)> = match sweep.kind {
                SweepKind::Tool => {
                    let mut p = json!({"handle": t.handle, "call_id": format!("conform-sweep-{}", t.name),
                        "input": input_for(t.schema.as_ref(), &sweep.text, sweep.number),
                        "deadline_ms": 5000});
                    if sweep.with_ticket {
                        p["ticket"] = json!(format!("conform-ticket-{}", t.handle));
                    }
                    vec![("tool/call", p)]
                }
                SweepKind::Command => vec![(
                    "command/run",
                    json!({"handle": t.handle, "command_id": format!("conform-sweep-{}", t.name),
                        "raw_input": sweep.text.trim(), "deadline_ms": 5000}),
                )],
                SweepKind::Hook => tools
                    .iter()
                    .map(String::as_str)
                    .chain(HOOK_PROBES.iter().copied())
                    .map(|name| {
                        (
                            "hook/evaluate",
                            json!({"handle": t.handle, "event": "pre_tool", "deadline_ms": 5000,
                                "payload": {"name": name, "call_id": format!("conform-hook-{name}"),
                                    "input": {"text": sweep.text}, "mode": "ask", "workspace": "/tmp",
                                    "model": "conform"}}),
                        )
                    })
                    .collect(),
            };
            for (method, params) in calls {
                n += 1;
                if !self
                    .sweep_call(&t.name, method, params, sweep.cancel_after)
                    .await
                {
                    return;
                }
            }
        }
        self.s.ev.observe(format!(
            "{n} calls, each answered once with its type or an error"
        ));
    }

    /// One call of a sweep: its answer within its deadline (conform cancels
    /// it there, as the core does), read as its method's result type; with
    /// `cancel_after`, cancelled early and answered -32800. An answer other
    /// than -32800 that comes at once after the `$/cancel` may have crossed
    /// it, so the call is made again and cancelled later: twice is no
    /// crossing. Says whether the sweep goes on.
    async fn sweep_call(
        &mut self,
        name: &str,
        method: &str,
        params: Value,
        cancel_after: Option<f64>,
    ) -> bool {
        let what = format!("{method} of `{name}`");
        let mut found = Vec::new();
        for attempt in 0..2u32 {
            let after = cancel_after.map(|c| c * f64::from(1 + 2 * attempt));
            let Some((answer, cancelled_at)) = self.call_once(&what, method, &params, after).await
            else {
                return false;
            };
            if let Ok(r) = &answer
                && let Some(why) = validate::result_violation(method, r)
            {
                found.push(Finding::new(rules::result_rule(method), Kind::Shape, why));
            }
            let Some(at) = cancelled_at.filter(|_| cancel_after.is_some()) else {
                break;
            };
            if matches!(&answer, Err(e) if e["code"] == json!(code::CANCELLED.0)) {
                break;
            }
            let late = at > Duration::from_millis(100);
            if late || attempt == 1 {
                // "Cancelled by `$/cancel`."
                let how = crate::jsonrpc::describe_answer(&answer);
                let when = if late {
                    format!("{} ms later", at.as_millis())
                } else {
                    "at once, twice, cancelled at two different times".to_owned()
                };
                found.push(
                    Finding::new(
                        Some("cwx.cancel.in-flight"),
                        Kind::Mismatch,
                        format!("it was cancelled while in flight and answered {when} with {how}, not -32800"),
                    )
                    .saw("the error -32800", how),
                );
                break;
            }
        }
        let ok = found.is_empty();
        for mut f in found {
            f.message = format!("{what}: {}", f.message);
            self.s.ev.push(f);
        }
        ok && self.s.goes_on()
    }

    /// Sends one call and reads its answer; with `cancel_after`, cancels it
    /// if it is still running then. The answer, and how long after the
    /// `$/cancel` it came (when one was sent).
    async fn call_once(
        &mut self,
        what: &str,
        method: &str,
        params: &Value,
        cancel_after: Option<f64>,
    ) -> Option<(Result<Value, Value>, Option<Duration>)> {
        let key = self.s.request(method, params.clone()).await?;
        let id: u64 = key.parse().unwrap_or_default();
        let first = cancel_after.map_or(Duration::from_millis(5000), Duration::from_secs_f64);
        let k = key.clone();
        let got = self
            .s
            .pump(&mut self.role, Instant::now() + first, &|s| {
                s.answers.contains_key(&k)
            })
            .await;
        let mut cancelled = None;
        if !got && !self.s.closed && !self.s.watch.broken() {
            // "How long the core waits for this request's answer before it
            // sends `$/cancel`".
            self.s
                .send(&json!({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": id}}))
                .await;
            cancelled = Some(Instant::now());
        }
        // Room for a loaded machine: a cancelled call's answer is due at once.
        let answer = self
            .s
            .answer(&mut self.role, &key, what, Duration::from_secs(5))
            .await?;
        Some((answer, cancelled.map(|at| at.elapsed())))
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
                self.s
                    .ev
                    .fail(
                        Kind::Unexpected,
                        format!(
                            "{method}: expected no answer, got {}",
                            crate::jsonrpc::describe_answer(&a)
                        ),
                    )
                    .found_by("reply");
            }
            return;
        }
        let Some(answer) = self.s.answer(&mut self.role, key, method, within).await else {
            return;
        };
        let Some(expect) = &step.expect else {
            self.s.conclude(method, &answer, vec![]);
            return;
        };
        let Some(mut found) = self.s.judge(&answer, rule, &expect.result, &expect.error) else {
            return;
        };
        if let (Some(requirement), Ok(r)) = (&expect.refused, &answer) {
            found.push(
                Finding::new(
                    Some(requirement),
                    Kind::WrongKind,
                    format!(
                        "served what its parser must refuse: the result {}",
                        matcher::brief(r)
                    ),
                )
                .saw("no result", matcher::brief(r)),
            );
        }
        for check in &expect.checks {
            match (check, &answer) {
                // A result that is not its method's wire type breaks the
                // rule of that type, whatever else the case is about.
                (NamedCheck::ResultShape, Ok(r)) => {
                    let rule = rules::result_rule(method);
                    found.extend(
                        validate::result_violation(method, r)
                            .map(|e| Finding::new(rule, Kind::Shape, e).by("result-shape")),
                    )
                }
                (NamedCheck::ResultShape, Err(_)) | (NamedCheck::Hello, _) => {}
            }
        }
        self.s.conclude(method, &answer, found);
    }
}

/// The call of an admitted handle by its kind's method, with the least
/// params its type takes.
fn call_of(a: &Admitted) -> (&'static str, Value) {
    match a.kind.as_str() {
        "command" => (
            "command/run",
            json!({"handle": a.handle, "command_id": "conform-call", "raw_input": "", "deadline_ms": 5000}),
        ),
        "hook" => (
            "hook/evaluate",
            json!({"handle": a.handle, "event": "pre_tool", "deadline_ms": 5000,
                "payload": {"name": "bash", "call_id": "conform-call", "input": {},
                    "mode": "ask", "workspace": "/tmp", "model": "conform"}}),
        ),
        _ => (
            "tool/call",
            json!({"handle": a.handle, "call_id": "conform-call",
                "input": input_for(a.schema.as_ref(), super::steps::SWEEP_TEXT, 1), "deadline_ms": 5000}),
        ),
    }
}

/// Tool names a hook sweep asks about besides the extension's own: the
/// calls a guard is written for.
const HOOK_PROBES: &[&str] = &["bash", "rm", "sudo", "write_file"];

/// An input a tool's schema admits: each property by its type (strings get
/// `text`, numbers `number`), or `{"text": text}` when the schema names none.
fn input_for(schema: Option<&Value>, text: &str, number: u64) -> Value {
    let Some(props) = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .filter(|p| !p.is_empty())
    else {
        return json!({"text": text});
    };
    let mut input = serde_json::Map::new();
    // The first string carries the text; the rest a short one, so an
    // input stays within a lowered max_frame.
    let mut first_string = true;
    for (name, p) in props.iter().take(32) {
        let ty = p
            .get("type")
            .map(|t| match t {
                Value::Array(a) => a.first().and_then(Value::as_str).unwrap_or("string"),
                other => other.as_str().unwrap_or("string"),
            })
            .unwrap_or("string");
        let v = match ty {
            "integer" | "number" => json!(number),
            "boolean" => json!(false),
            "array" => json!([]),
            "object" => json!({}),
            "null" => Value::Null,
            _ if std::mem::take(&mut first_string) => json!(text),
            _ => json!(super::steps::SWEEP_TEXT),
        };
        input.insert(name.clone(), v);
    }
    Value::Object(input)
}

/// What `host/hello`'s params break of the module list and the memory limit.
fn hello_findings(hello: &Value) -> Vec<Finding> {
    let mut found = Vec::new();
    let ids: Vec<&str> = hello["builtin_modules"]
        .as_array()
        .map(|m| m.iter().filter_map(|r| r["id"].as_str()).collect())
        .unwrap_or_default();
    // "one row per module, in id order"
    if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
        found.push(
            Finding::new(
                Some("cwx.hello.modules"),
                Kind::Mismatch,
                format!(
                    "host/hello lists builtin_modules {:?} before {:?}: not one row per module in id order",
                    w[0], w[1]
                ),
            )
            .saw("ids in increasing order", format!("{ids:?}")),
        );
    }
    // "macOS + Bun, when the core asked for one ... Absent otherwise."
    if let Some(mib) = hello.get("memory_limit_mib") {
        let bun = hello.pointer("/runtime/name") == Some(&json!("bun"));
        if !(bun && std::env::consts::OS == "macos") {
            found.push(Finding::new(
                Some("cwx.hello.memory-limit"),
                Kind::Unexpected,
                format!(
                    "host/hello carries memory_limit_mib {mib}, but the host runs {} on {} and conform asked for no limit",
                    hello.pointer("/runtime/name").unwrap_or(&Value::Null),
                    std::env::consts::OS
                ),
            ));
        }
    }
    found
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

    /// A hello the core refuses for a field with a rule of its own breaks
    /// that rule; one refused as a whole (an unknown field, above) breaks
    /// the strictness rule.
    #[tokio::test(start_paused = true)]
    async fn a_refused_hello_field_breaks_the_rule_of_that_field() {
        type Bend = fn(&mut Value) -> bool;
        let bends: [(Bend, &str); 4] = [
            (
                |m| {
                    if m["method"] == "host/hello" {
                        m["params"]["runtime"]["name"] = json!("deno");
                    }
                    true
                },
                "cwx.hello.runtime",
            ),
            (
                |m| {
                    if m["method"] == "host/hello" {
                        m["params"]["tier"] = json!(7);
                    }
                    true
                },
                "cwx.hello.tier",
            ),
            (
                |m| {
                    if m["method"] == "host/hello" {
                        m["params"]["protocol"]["min"] = json!("one");
                    }
                    true
                },
                "cwx.hello.protocol",
            ),
            (
                |m| {
                    if m["method"] == "host/hello" {
                        m["params"]["builtin_modules"] = json!({});
                    }
                    true
                },
                "cwx.hello.modules",
            ),
        ];
        for (bend, rule) in bends {
            let r = run(bend, PING).await;
            assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
            let named: Vec<_> = r
                .findings
                .iter()
                .filter_map(|f| f.requirement.as_deref())
                .collect();
            assert_eq!(named, [rule], "{:?}", r.findings);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_that_never_says_hello_is_missing_it_at_the_startup_bound() {
        let r = run(|m| m["method"] != "host/hello", PING).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
        assert_eq!(r.message, "setup: no host/hello within 10s");
    }
}
