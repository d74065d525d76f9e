//! conform's reference extension host (the `builtin` target): a sans-IO
//! [`Host`] with one built-in toy extension, and [`serve`], the stdio loop
//! that frames it. The toy's entry is [`TOY_ENTRY`]; activating it
//! registers a tool (`echo`), a command (`hello`) and a hook (`guard`).

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

/// An activation waiting for the core's answers to its registrations.
#[derive(Debug)]
struct Activating {
    activate_id: Value,
    /// Register request id -> what it registers.
    waiting: HashMap<u64, (Registration, String)>,
    refused: Vec<String>,
}

#[derive(Debug)]
pub struct Host {
    tier: Tier,
    next_id: u64,
    handles: BTreeMap<u64, (Registration, String)>,
    activating: Option<Activating>,
    /// In-flight tool calls held by `delay_ms`: request id -> (answer, when due).
    held: BTreeMap<u64, (Value, Instant)>,
    /// The time of the payload being handled.
    now: Instant,
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

impl Host {
    pub fn new(tier: Tier) -> Host {
        Host {
            tier,
            next_id: 0,
            handles: BTreeMap::new(),
            activating: None,
            held: BTreeMap::new(),
            now: Instant::now(),
            initialized: false,
            done: false,
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

    /// Handles one payload from the core at `now`.
    pub fn handle_at(&mut self, payload: &[u8], now: Instant) -> Vec<Value> {
        self.now = now;
        let Ok(value) = serde_json::from_slice::<Value>(payload) else {
            return vec![error(
                &Value::Null,
                code::PARSE_ERROR,
                "frame payload is not JSON",
            )];
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
                vec![error(&id, code::INVALID_PARAMS, why)]
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
            Some("host/initialize") => {
                self.initialized = true;
                vec![
                    result(&id, json!({"protocol": super::table::PROTOCOL_VERSION})),
                    json!({"jsonrpc": "2.0", "method": "host/ready", "params": {}}),
                ]
            }
            Some("host/ping") => vec![result(&id, json!({}))],
            Some("host/shutdown") => {
                self.done = true;
                vec![result(&id, json!({}))]
            }
            Some("ext/activate") => self.activate(&id, &params),
            Some("ext/deactivate") => {
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

    fn activate(&mut self, id: &Value, params: &Value) -> Vec<Value> {
        let path = params
            .pointer("/entry/path")
            .and_then(Value::as_str)
            .unwrap_or("");
        if path != TOY_ENTRY {
            return vec![result(
                id,
                json!({"status": "failed",
                "diagnostic": format!("cannot load {path:?}: no such entry")}),
            )];
        }
        let owner = params.get("owner").cloned().unwrap_or(Value::Null);
        let mut out = Vec::new();
        let mut waiting = HashMap::new();
        for (kind, name, spec) in [
            (
                Registration::Tool,
                "echo",
                json!({"name": "echo", "description": "Echoes its input",
                "input_schema": {"type": "object"}}),
            ),
            (
                Registration::Command,
                "hello",
                json!({"name": "hello", "description": "Greets",
                "argument_hint": "<name>"}),
            ),
            (
                Registration::Hook,
                "guard",
                json!({"name": "guard", "description": "Abstains"}),
            ),
        ] {
            self.next_id += 1;
            let wire_kind = match kind {
                Registration::Tool => "tool",
                Registration::Command => "command",
                Registration::Hook => "hook",
            };
            out.push(
                json!({"jsonrpc": "2.0", "id": self.next_id, "method": "registry/register",
                "params": {"owner": owner, "kind": wire_kind, "spec": spec}}),
            );
            waiting.insert(self.next_id, (kind, name.to_owned()));
        }
        self.activating = Some(Activating {
            activate_id: id.clone(),
            waiting,
            refused: vec![],
        });
        out
    }

    fn answer(&mut self, id: Option<u64>, outcome: Result<Value, Value>) -> Vec<Value> {
        let Some(id) = id else { return vec![] };
        let Some(a) = self.activating.as_mut() else {
            return vec![];
        };
        let Some((kind, name)) = a.waiting.remove(&id) else {
            return vec![];
        };
        match outcome
            .ok()
            .and_then(|r| r.get("handle").and_then(Value::as_u64))
        {
            Some(h) => {
                self.handles.insert(h, (kind, name));
            }
            None => a.refused.push(name),
        }
        if !a.waiting.is_empty() {
            return vec![];
        }
        let a = self.activating.take().expect("present");
        if !a.refused.is_empty() {
            return vec![result(
                &a.activate_id,
                json!({"status": "failed",
                "diagnostic": format!("registrations refused: {}", a.refused.join(", "))}),
            )];
        }
        let names = |k: Registration| -> Vec<String> {
            self.handles
                .values()
                .filter(|(kk, _)| *kk == k)
                .map(|(_, n)| n.clone())
                .collect()
        };
        vec![result(
            &a.activate_id,
            json!({"status": "ok",
            "tools": names(Registration::Tool), "commands": names(Registration::Command)}),
        )]
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
        let answer = match want {
            Registration::Tool => {
                let input = params.get("input").cloned().unwrap_or(Value::Null);
                let text = input.to_string();
                let r = result(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "is_error": false}),
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

    /// The answers of held calls due by `now`.
    pub fn tick(&mut self, now: Instant) -> Vec<Value> {
        let mut due = Vec::new();
        self.held.retain(|_, (answer, at)| {
            if *at <= now {
                due.push(answer.clone());
                false
            } else {
                true
            }
        });
        due
    }

    /// When the next held call is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|(_, at)| *at).min()
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
        assert_eq!(regs.len(), 3);
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
            json!({"status": "ok", "tools": ["echo"], "commands": ["hello"]})
        );
        let out = send(
            &mut h,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tool/call",
            "params": {"handle": 10, "call_id": "c", "input": {"a": 1}, "deadline_ms": 1000}}),
        );
        assert_eq!(out[0]["result"]["content"][0]["text"], "{\"a\":1}");
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
