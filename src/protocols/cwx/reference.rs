//! conform's reference extension host (the `builtin` target): a sans-IO
//! [`Host`] with one built-in toy extension, and [`serve`], the stdio loop
//! that frames it. The toy's entry is [`TOY_ENTRY`]; activating it
//! registers three tools (`echo`, `relay`, which asks the core `core/call`
//! with its call's ticket, and `wait`, which answers after `ms`), a command
//! (`hello`) and a hook (`guard`).

use super::table::{Direction, Tier, code};
use super::validate;
use crate::jsonrpc::ErrorCode;
use crate::transport::serve::{AfterRefusal, Out, Served};
use crate::wire::{Codec, Refused};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// The path of the built-in toy extension's entry, and its digest.
pub const TOY_ENTRY: &str = "/conform/toy-extension/index.js";
pub const TOY_SHA256: &str = "5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592";

#[derive(Debug, Clone, PartialEq)]
enum Registration {
    Tool,
    Command,
    Hook,
}

impl Registration {
    fn wire(&self) -> &'static str {
        match self {
            Registration::Tool => "tool",
            Registration::Command => "command",
            Registration::Hook => "hook",
        }
    }
}

/// What the toy extension registers: kind, name, spec.
fn toy_registrations() -> Vec<(Registration, &'static str, Value)> {
    vec![
        (
            Registration::Tool,
            "echo",
            json!({"name": "echo", "description": "Echoes its input",
                "input_schema": {"type": "object"}}),
        ),
        (
            Registration::Tool,
            "relay",
            json!({"name": "relay", "description": "Asks the core's read_file tool, with its call's ticket",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}),
        ),
        (
            Registration::Tool,
            "wait",
            json!({"name": "wait", "description": "Answers after `ms` milliseconds",
                "input_schema": {"type": "object", "properties": {"ms": {"type": "integer"}}}}),
        ),
        (
            Registration::Command,
            "hello",
            json!({"name": "hello", "description": "Greets", "argument_hint": "<name>"}),
        ),
        (
            Registration::Hook,
            "guard",
            json!({"name": "guard", "description": "Abstains"}),
        ),
    ]
}

/// An activation waiting for the core's answers to its registrations.
#[derive(Debug)]
struct Activating {
    activate_id: Value,
    owner: Value,
    /// Registrations not sent yet (kept within max_inflight in flight).
    queue: Vec<(Registration, String, Value)>,
    /// Register request id -> what it registers.
    waiting: HashMap<u64, (Registration, String)>,
    /// Handles the core gave: live only once the activation answers ok.
    admitted: Vec<(u64, Registration, String)>,
    refused: Vec<String>,
    /// "the host enforces activation's own deadline"
    deadline: Instant,
}

/// The limits the core sent in `host/initialize`.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_frame: usize,
    max_inflight: usize,
    activate: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_frame: crate::wire::frame::MAX_FRAME,
            max_inflight: super::table::MAX_INFLIGHT,
            activate: std::time::Duration::from_secs(10),
        }
    }
}

#[derive(Debug)]
pub struct Host {
    tier: Tier,
    /// Load any entry as the toy extension (the scripted host of `--role
    /// core`, whose core names an extension of its own).
    any_entry: bool,
    next_id: u64,
    /// Live handles: handle -> (kind, name).
    handles: BTreeMap<u64, (Registration, String)>,
    /// The owner of the live handles.
    owner: Value,
    activating: Option<Activating>,
    /// In-flight tool calls held by `delay_ms`: request id -> (answer, when due).
    held: BTreeMap<u64, (Value, Instant)>,
    /// `relay` calls waiting for the core's answer: core/call id -> tool/call id.
    relaying: HashMap<u64, Value>,
    /// The time of the payload being handled.
    now: Instant,
    limits: Limits,
    initialized: bool,
    /// Set by `host/shutdown`: the loop ends after writing.
    pub done: bool,
}

fn result(id: &Value, r: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": r})
}

fn error(id: &Value, code: ErrorCode, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// The code a refusal of the host's parser answers with: the envelope's
/// (-32600), the tier's (-32601, "refused like an unknown one"), or the
/// params' (-32602).
fn refusal_code(refused: &validate::Refused) -> ErrorCode {
    if refused.tier {
        code::METHOD_NOT_FOUND
    } else if refused.why.starts_with("envelope")
        || refused.why.contains("must be a notification")
        || refused.why.contains("must be a request")
    {
        code::INVALID_REQUEST
    } else {
        code::INVALID_PARAMS
    }
}

impl Host {
    pub fn new(tier: Tier) -> Host {
        Host {
            tier,
            any_entry: false,
            next_id: 0,
            handles: BTreeMap::new(),
            owner: Value::Null,
            activating: None,
            held: BTreeMap::new(),
            relaying: HashMap::new(),
            now: Instant::now(),
            limits: Limits::default(),
            initialized: false,
            done: false,
        }
    }

    /// A host that loads whatever entry it is given as the toy extension.
    pub fn any_entry(tier: Tier) -> Host {
        Host {
            any_entry: true,
            ..Host::new(tier)
        }
    }

    /// What the host says first: `host/hello`.
    pub fn hello(&self) -> Value {
        json!({"jsonrpc": "2.0", "method": "host/hello", "params": {
            "protocol": {"min": 1, "max": 1},
            "host_version": env!("CARGO_PKG_VERSION"),
            "bundle_sha256": TOY_SHA256,
            "runtime": {"name": "node", "version": "20.0.0"},
            "tier": self.tier.name(),
            "builtin_modules": [],
        }})
    }

    /// Handles one payload from the core now; returns the messages to write.
    pub fn handle(&mut self, payload: &[u8]) -> Vec<Value> {
        self.handle_at(payload, Instant::now())
    }

    /// Handles one payload from the core at `now`. What it writes keeps to
    /// the core's limits: a message over max_frame is refused, never cut.
    pub fn handle_at(&mut self, payload: &[u8], now: Instant) -> Vec<Value> {
        self.now = now;
        let out = self.dispatch(payload);
        self.bounded(out)
    }

    /// An answer over max_frame becomes the error that refuses it
    /// ("anything larger is refused, never truncated").
    fn bounded(&self, out: Vec<Value>) -> Vec<Value> {
        out.into_iter()
            .map(|m| {
                let len = serde_json::to_vec(&m).map_or(usize::MAX, |b| b.len());
                match m.get("id") {
                    Some(id) if len > self.limits.max_frame && m.get("method").is_none() => error(
                        id,
                        code::INTERNAL,
                        format!(
                            "the answer is {len} bytes, over max_frame {}: refused, never truncated",
                            self.limits.max_frame
                        ),
                    ),
                    _ => m,
                }
            })
            .collect()
    }

    fn dispatch(&mut self, payload: &[u8]) -> Vec<Value> {
        // "UTF-8 JSON": anything else is no message, and has no id to answer.
        let Ok(value) = serde_json::from_slice::<Value>(payload) else {
            eprintln!("conform reference host: a payload that is not UTF-8 JSON; dropped");
            return vec![];
        };
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        let method = value
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        // A method this host has no handler for is answered, not fatal.
        if let Some(m) = &method
            && super::table::method(Direction::CoreToHost, m).is_none()
        {
            return if id.is_null() {
                vec![]
            } else {
                vec![error(
                    &id,
                    code::METHOD_NOT_FOUND,
                    format!("no handler for `{m}`"),
                )]
            };
        }
        if let Err(refused) = validate::parse_core_message(value.clone(), self.tier) {
            let code = refusal_code(&refused);
            let why = refused.why;
            return if id.is_null() || method.is_none() && value.get("id").is_none() {
                vec![]
            } else if method.is_none() {
                // An answer the host cannot read: treat it as an error answer.
                self.answer(
                    value.get("id").and_then(Value::as_u64),
                    Err(json!({"message": why})),
                )
            } else {
                vec![error(&id, code, why)]
            };
        }
        let params = value.get("params").cloned().unwrap_or(json!({}));
        match method.as_deref() {
            None => {
                let outcome = match value.get("error") {
                    Some(e) if !e.is_null() => Err(e.clone()),
                    _ => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
                };
                self.answer(value.get("id").and_then(Value::as_u64), outcome)
            }
            Some("$/cancel") => {
                // "Cancelled by `$/cancel`": a held call ends with -32800; an
                // unknown id is ignored.
                let target = params.get("id").cloned().unwrap_or(Value::Null);
                match target.as_u64().and_then(|t| self.held.remove(&t)) {
                    Some(_) => vec![error(&target, code::CANCELLED, "cancelled")],
                    None => vec![],
                }
            }
            Some("host/initialize") => self.initialize(&id, &params),
            Some("host/ping") => vec![result(&id, json!({}))],
            Some("host/shutdown") => {
                self.done = true;
                vec![result(&id, json!({}))]
            }
            Some("ext/activate") => self.activate(&id, &params),
            Some("ext/deactivate") => {
                // "Unknown, revoked, or not-yet-active handle": revoked now.
                self.handles.clear();
                vec![result(&id, json!({"disposed": true, "leaked": []}))]
            }
            Some("tool/call") => self.call(&id, &params, Registration::Tool),
            Some("command/run") => self.call(&id, &params, Registration::Command),
            Some("hook/evaluate") => self.call(&id, &params, Registration::Hook),
            Some(m) => vec![error(
                &id,
                code::METHOD_NOT_FOUND,
                format!("`{m}` is not implemented by this host"),
            )],
        }
    }

    fn initialize(&mut self, id: &Value, params: &Value) -> Vec<Value> {
        // hello offers {min: 1, max: 1}: another version is refused.
        if params["protocol"].as_u64() != Some(super::table::PROTOCOL_VERSION) {
            return vec![error(
                id,
                code::INVALID_PARAMS,
                format!(
                    "protocol {} is outside this host's range 1..=1",
                    params["protocol"]
                ),
            )];
        }
        let l = &params["limits"];
        let get = |k: &str, d: usize| l[k].as_u64().map_or(d, |v| v as usize);
        let max = Limits::default();
        // The core's limits bind this host too, within the constants.
        self.limits = Limits {
            max_frame: get("max_frame", max.max_frame).min(max.max_frame),
            max_inflight: get("max_inflight", max.max_inflight).clamp(1, max.max_inflight),
            activate: std::time::Duration::from_millis(
                l["activate_deadline_ms"].as_u64().unwrap_or(10_000),
            ),
        };
        self.initialized = true;
        vec![
            result(id, json!({"protocol": super::table::PROTOCOL_VERSION})),
            json!({"jsonrpc": "2.0", "method": "host/ready", "params": {}}),
        ]
    }

    fn activate(&mut self, id: &Value, params: &Value) -> Vec<Value> {
        let path = params
            .pointer("/entry/path")
            .and_then(Value::as_str)
            .unwrap_or("");
        if path != TOY_ENTRY && !self.any_entry {
            return vec![result(
                id,
                json!({"status": "failed",
                "diagnostic": format!("cannot load {path:?}: no such entry")}),
            )];
        }
        if self.activating.is_some() {
            return vec![error(id, code::REFUSED, "an activation is already running")];
        }
        // A reactivation replaces the owner's handles.
        self.handles.clear();
        let queue = toy_registrations()
            .into_iter()
            .rev()
            .map(|(k, n, spec)| (k, n.to_owned(), spec))
            .collect();
        self.activating = Some(Activating {
            activate_id: id.clone(),
            owner: params.get("owner").cloned().unwrap_or(Value::Null),
            queue,
            waiting: HashMap::new(),
            admitted: vec![],
            refused: vec![],
            deadline: self.now + self.limits.activate,
        });
        self.send_registrations()
    }

    /// Sends queued registrations while fewer than max_inflight are in flight.
    fn send_registrations(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        let max = self.limits.max_inflight;
        let Some(a) = self.activating.as_mut() else {
            return out;
        };
        while a.waiting.len() < max {
            let Some((kind, name, spec)) = a.queue.pop() else {
                break;
            };
            self.next_id += 1;
            out.push(
                json!({"jsonrpc": "2.0", "id": self.next_id, "method": "registry/register",
                "params": {"owner": a.owner, "kind": kind.wire(), "spec": spec}}),
            );
            a.waiting.insert(self.next_id, (kind, name));
        }
        out
    }

    /// The core's answer to registration `id`, or to a relay's core/call.
    fn answer(&mut self, id: Option<u64>, outcome: Result<Value, Value>) -> Vec<Value> {
        let Some(id) = id else { return vec![] };
        if let Some(call) = self.relaying.remove(&id) {
            // The tool gets the core's answer, a refusal included; its
            // tool/call is answered once either way.
            let r = match outcome {
                Ok(r) if validate::result_violation("tool/call", &r).is_none() => r,
                Ok(r) => json!({"content": [{"type": "text",
                    "text": format!("the core answered core/call with {r}")}], "is_error": true}),
                Err(e) => json!({"content": [{"type": "text",
                    "text": format!("the core refused core/call: {e}")}], "is_error": true}),
            };
            return vec![result(&call, r)];
        }
        let Some(a) = self.activating.as_mut() else {
            return vec![];
        };
        let Some((kind, name)) = a.waiting.remove(&id) else {
            return vec![];
        };
        // "a handle, or a refusal the host reports as a failed activation"
        match outcome
            .ok()
            .and_then(|r| r.get("handle").and_then(Value::as_u64))
        {
            Some(h) => a.admitted.push((h, kind, name)),
            None => a.refused.push(name),
        }
        let mut out = self.send_registrations();
        let a = self.activating.as_ref().expect("present");
        if a.waiting.is_empty() && a.queue.is_empty() {
            out.extend(self.finish_activation());
        }
        out
    }

    /// Answers the activation: ok, with its handles now live, or failed.
    fn finish_activation(&mut self) -> Vec<Value> {
        let Some(a) = self.activating.take() else {
            return vec![];
        };
        if !a.refused.is_empty() {
            return vec![result(
                &a.activate_id,
                json!({"status": "failed",
                "diagnostic": format!("registrations refused: {}", a.refused.join(", "))}),
            )];
        }
        let names = |k: Registration| -> Vec<String> {
            a.admitted
                .iter()
                .filter(|(_, kk, _)| *kk == k)
                .map(|(_, _, n)| n.clone())
                .collect()
        };
        let answer = result(
            &a.activate_id,
            json!({"status": "ok",
            "tools": names(Registration::Tool), "commands": names(Registration::Command)}),
        );
        for (h, kind, name) in a.admitted {
            self.handles.insert(h, (kind, name));
        }
        self.owner = a.owner;
        vec![answer]
    }

    fn call(&mut self, id: &Value, params: &Value, want: Registration) -> Vec<Value> {
        let handle = params
            .get("handle")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        match self.handles.get(&handle) {
            Some((kind, _)) if *kind == want => {}
            // "Unknown, revoked, or not-yet-active handle."
            _ => {
                return vec![error(
                    id,
                    code::NOT_AVAILABLE,
                    format!("no active handle {handle}"),
                )];
            }
        }
        let name = self.handles[&handle].1.clone();
        let input = params.get("input").cloned().unwrap_or(Value::Null);
        if want == Registration::Tool && name == "relay" {
            // "Absent for a call with no gate ..., whose tool then has no way
            // to ask the core for anything."
            let Some(ticket) = params.get("ticket").and_then(Value::as_str) else {
                return vec![result(
                    id,
                    json!({"content": [{"type": "text", "text": "no ticket: relay cannot ask the core"}],
                        "is_error": true}),
                )];
            };
            self.next_id += 1;
            self.relaying.insert(self.next_id, id.clone());
            return vec![
                json!({"jsonrpc": "2.0", "id": self.next_id, "method": "core/call",
                "params": {"owner": self.owner, "ticket": ticket, "name": "read_file",
                    "input": {"path": input.get("path").cloned().unwrap_or(json!("/"))}}}),
            ];
        }
        if want == Registration::Tool
            && name == "wait"
            && let Some(n) = id.as_u64()
        {
            let ms = input
                .get("ms")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(60_000);
            let r = result(
                id,
                json!({"content": [{"type": "text", "text": format!("waited {ms} ms")}], "is_error": false}),
            );
            let due = self.now + std::time::Duration::from_millis(ms.max(1));
            self.held.insert(n, (r, due));
            return vec![];
        }
        let answer = match want {
            Registration::Tool => {
                let text = input.to_string();
                let r = result(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "is_error": false,
                        "structured": input}),
                );
                // `delay_ms` holds the call so a case can cancel it.
                if let Some(ms) = input.get("delay_ms").and_then(Value::as_u64)
                    && let Some(n) = id.as_u64()
                {
                    let due = self.now + std::time::Duration::from_millis(ms.max(1));
                    self.held.insert(n, (r, due));
                    return vec![];
                }
                r
            }
            Registration::Command => {
                let raw = params
                    .get("raw_input")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                result(
                    id,
                    json!({"kind": "success", "text": format!("hello {raw}")}),
                )
            }
            Registration::Hook => result(id, json!({"kind": "abstain"})),
        };
        vec![answer]
    }

    /// The answers of held calls due by `now`, and an activation's failure
    /// at its deadline.
    pub fn tick(&mut self, now: Instant) -> Vec<Value> {
        self.now = now;
        let mut due = Vec::new();
        self.held.retain(|_, (answer, at)| {
            if *at <= now {
                due.push(answer.clone());
                false
            } else {
                true
            }
        });
        if let Some(a) = &self.activating
            && a.deadline <= now
        {
            let a = self.activating.take().expect("present");
            due.push(result(
                &a.activate_id,
                json!({"status": "failed", "diagnostic": format!(
                    "the activation did not complete within activate_deadline_ms ({} ms)",
                    self.limits.activate.as_millis())}),
            ));
        }
        self.bounded(due)
    }

    /// When the next held call, or the activation's deadline, is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held
            .values()
            .map(|(_, at)| *at)
            .chain(self.activating.as_ref().map(|a| a.deadline))
            .min()
    }
}

/// The reference host as a served peer: its hello first, then answers.
/// A frame that breaks the stream ends the host ("bad magic or length ends
/// the host instead of desynchronising it").
impl Served for Host {
    fn codec(&self) -> Codec {
        Codec::Frames
    }

    fn greet(&mut self, _: Instant) -> Vec<Out> {
        vec![Out::Message(self.hello())]
    }

    fn handle(&mut self, payload: &[u8], now: Instant) -> Vec<Out> {
        self.handle_at(payload, now)
            .into_iter()
            .map(Out::Message)
            .collect()
    }

    fn refused(&mut self, why: &Refused, _: Instant) -> (Vec<Out>, AfterRefusal) {
        eprintln!("conform reference host: {why:?}; ending");
        (vec![], AfterRefusal::Stop)
    }

    fn next_deadline(&self) -> Option<Instant> {
        Host::next_deadline(self)
    }

    fn tick(&mut self, now: Instant) -> Vec<Out> {
        Host::tick(self, now)
            .into_iter()
            .map(Out::Message)
            .collect()
    }

    fn done(&self) -> bool {
        self.done
    }
}

/// Serves the reference host of `tier` on `input` and `output` until the
/// input ends, a frame breaks, or `host/shutdown`.
pub async fn serve_on(
    tier: Tier,
    input: impl tokio::io::AsyncRead + Unpin,
    output: impl tokio::io::AsyncWrite + Unpin,
) -> std::io::Result<()> {
    crate::transport::serve::serve(&mut Host::new(tier), input, output).await
}

/// Serves the reference host of `tier` on this process's stdin and stdout.
pub async fn serve(tier: Tier) -> std::io::Result<()> {
    serve_on(tier, tokio::io::stdin(), tokio::io::stdout()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(h: &mut Host, v: Value) -> Vec<Value> {
        h.handle(v.to_string().as_bytes())
    }

    fn owner() -> Value {
        json!({"plugin_id": "toy", "generation": 1, "owner_token": "t"})
    }

    #[test]
    fn activating_the_toy_registers_then_answers_ok() {
        let mut h = Host::new(Tier::Plugin);
        let regs = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 1, "method": "ext/activate", "params": {
            "owner": owner(), "plugin_name": "toy", "entry": {"path": TOY_ENTRY, "sha256": TOY_SHA256}}}),
        );
        assert_eq!(regs.len(), 5);
        let mut last = vec![];
        for (i, r) in regs.iter().enumerate() {
            assert!(
                validate::parse_host_message(r.clone(), Tier::Plugin).is_ok(),
                "{r}"
            );
            last = send(
                &mut h,
                json!({"jsonrpc": "2.0", "id": r["id"], "result": {"handle": 10 + i}}),
            );
        }
        assert_eq!(
            last[0]["result"],
            json!({"status": "ok", "tools": ["echo", "relay", "wait"], "commands": ["hello"]})
        );
        let out = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tool/call",
            "params": {"handle": 10, "call_id": "c", "input": {"a": 1}, "deadline_ms": 1000}}),
        );
        assert_eq!(out[0]["result"]["content"][0]["text"], "{\"a\":1}");
    }

    fn activate(h: &mut Host) -> Vec<Value> {
        send(
            h,
            json!({"jsonrpc": "2.0", "id": 1, "method": "ext/activate", "params": {
            "owner": owner(), "plugin_name": "toy", "entry": {"path": TOY_ENTRY, "sha256": TOY_SHA256}}}),
        )
    }

    #[test]
    fn handles_go_live_only_with_the_activations_ok_and_a_refusal_fails_it() {
        let mut h = Host::new(Tier::Plugin);
        let regs = activate(&mut h);
        let first = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": regs[0]["id"], "result": {"handle": 7}}),
        );
        assert!(first.is_empty());
        // "Unknown, revoked, or not-yet-active handle."
        let early = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tool/call",
            "params": {"handle": 7, "call_id": "c", "input": {}, "deadline_ms": 1000}}),
        );
        assert_eq!(early[0]["error"]["code"], code::NOT_AVAILABLE.0);
        let mut last = vec![];
        for (i, r) in regs.iter().enumerate().skip(1) {
            let answer = if i == 1 {
                json!({"jsonrpc": "2.0", "id": r["id"], "result": {"refused": "no"}})
            } else {
                json!({"jsonrpc": "2.0", "id": r["id"], "result": {"handle": 10 + i}})
            };
            last = send(&mut h, answer);
        }
        assert_eq!(last[0]["result"]["status"], "failed");
        let late = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tool/call",
            "params": {"handle": 7, "call_id": "c", "input": {}, "deadline_ms": 1000}}),
        );
        assert_eq!(late[0]["error"]["code"], code::NOT_AVAILABLE.0);
    }

    #[test]
    fn the_cores_limits_bind_what_the_host_sends() {
        let mut h = Host::new(Tier::Plugin);
        let init = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 9, "method": "host/initialize", "params": {
            "protocol": 1, "limits": {"max_frame": 2048, "max_inflight": 2,
            "dispose_deadline_ms": 100, "activate_deadline_ms": 100}}}),
        );
        assert_eq!(init.len(), 2);
        // At most two registrations in flight.
        let regs = activate(&mut h);
        assert_eq!(regs.len(), 2);
        let more = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": regs[0]["id"], "result": {"handle": 1}}),
        );
        assert_eq!(more.len(), 1, "one answer lets one more go");
        // The activation's deadline fails it.
        let due = h.next_deadline().expect("the activation's deadline");
        let failed = h.tick(due);
        assert_eq!(failed[0]["result"]["status"], "failed");
        // An answer over max_frame is refused, never cut.
        let big = "x".repeat(4096);
        let out = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 10, "method": "conform/unknown", "params": {}}),
        );
        assert!(serde_json::to_vec(&out[0]).unwrap().len() < 2048);
        let refused = h.bounded(vec![json!({"jsonrpc": "2.0", "id": 11, "result": big})]);
        assert_eq!(refused[0]["error"]["code"], code::INTERNAL.0);
    }

    #[test]
    fn unknown_handles_entries_and_methods_get_their_answers() {
        let mut h = Host::new(Tier::Plugin);
        let out = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tool/call",
            "params": {"handle": 99, "call_id": "c", "input": {}, "deadline_ms": 1000}}),
        );
        assert_eq!(out[0]["error"]["code"], code::NOT_AVAILABLE.0);
        let out = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 2, "method": "ext/activate", "params": {
            "owner": owner(), "plugin_name": "x", "entry": {"path": "/nope.js", "sha256": "00"}}}),
        );
        assert_eq!(out[0]["result"]["status"], "failed");
        let out = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 3, "method": "conform/unknown", "params": {}}),
        );
        assert_eq!(out[0]["error"]["code"], code::METHOD_NOT_FOUND.0);
        assert!(
            send(
                &mut h,
                json!({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": 777}})
            )
            .is_empty()
        );
    }
}
