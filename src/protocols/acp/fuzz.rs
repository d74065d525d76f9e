//! The ACP fuzzer: each input is a fresh agent (initialized by conform, or
//! not), a few lines written in one write or split by pauses, then a probe
//! request. The lines are golden messages from the corpus and the schema's
//! client-to-agent methods, changed (see `fuzz::strategies`), with method
//! names from both sides of the schema and names no schema has.
//!
//! The oracles are the suite's: the monitor checks every line the agent
//! writes at its requirement's level, and the probe must be answered. When
//! every line was a well-formed JSON-RPC request or notification the agent
//! must still answer ("When a rpc call is made, the Server MUST reply");
//! after lines that are not, that it keeps serving is graded SHOULD, as the
//! suite's `acp.jsonrpc.parse-error` reading does.

use super::driver::{self, Context};
use super::launcher_for;
use super::schema::{self, Side};
use crate::error::RunError;
use crate::fuzz::strategies::{self as strat, Message, Pause};
use crate::fuzz::{self, ResetFuture};
use crate::runner::CaseFuture;
use crate::target::Target;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Input {
    /// conform sends `initialize` first.
    pub initialize: bool,
    pub messages: Vec<Message>,
    pub pauses: Vec<Pause>,
}

pub struct Harness {
    ctx: Arc<Context>,
    timeout: f64,
    golden: Vec<Value>,
    methods: Vec<String>,
}

/// The ids conform's own requests take in a fuzz case (`initialize`, the
/// probe); generated ids stay clear of them.
const OWN_IDS: i64 = 16;

/// The corpus's requests and notifications whose templates need nothing but
/// the workspace, then one message for each client-to-agent method of the
/// schema the corpus does not send, and an unsolicited response.
fn golden() -> Result<Vec<Value>, RunError> {
    let cases = crate::case::load::<super::AgentCases>(&[])
        .map_err(|e| RunError::Conform(e.to_string()))?;
    let mut out: Vec<Value> = Vec::new();
    let mut id = 100;
    let mut push = |out: &mut Vec<Value>, method: &str, params: Value, notification: bool| {
        id += 1;
        let mut m = serde_json::Map::new();
        m.insert("jsonrpc".into(), json!("2.0"));
        if !notification {
            m.insert("id".into(), json!(id));
        }
        m.insert("method".into(), json!(method));
        m.insert("params".into(), params);
        let v = Value::Object(m);
        if !out.contains(&v) {
            out.push(v);
        }
    };
    for case in &cases {
        for step in &case.steps {
            let crate::step::Action::Send(send) = &step.action else {
                continue;
            };
            let text = send.params.to_string();
            if text.replace("${workspace}", "").contains("${") {
                continue;
            }
            push(
                &mut out,
                &send.method,
                send.params.clone(),
                send.notification,
            );
        }
    }
    for m in schema::schema().methods() {
        if m.side == Side::Agent && !out.iter().any(|g| g["method"] == m.name.as_str()) {
            push(&mut out, &m.name, json!({}), m.is_notification());
        }
    }
    out.push(json!({"jsonrpc": "2.0", "id": 7777, "result": {}}));
    Ok(out)
}

fn method_names() -> Vec<String> {
    let mut m: Vec<String> = schema::schema().methods().map(|m| m.name.clone()).collect();
    m.extend(
        [
            "_conform/unknown",
            "conform/unknown",
            "",
            "Initialize",
            "session/",
            "$/cancel_request",
            "rpc.discover",
        ]
        .map(String::from),
    );
    m
}

/// A line is a well-formed request or notification: a JSON object with
/// `jsonrpc` "2.0", a string `method`, an id that is a string or an integer
/// if any, and object params if any.
fn well_formed(line: &[u8]) -> bool {
    let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    o.get("jsonrpc") == Some(&json!("2.0"))
        && o.get("method").is_some_and(Value::is_string)
        && o.get("id")
            .is_none_or(|id| id.is_string() || id.is_i64() || id.is_u64())
        && o.get("params").is_none_or(Value::is_object)
        && o.keys()
            .all(|k| ["jsonrpc", "id", "method", "params"].contains(&k.as_str()))
}

/// Keeps generated ids clear of conform's own.
fn clear_ids(v: &mut Value) {
    let Some(id) = v.get_mut("id") else { return };
    let own = match id {
        Value::Number(n) => n
            .as_f64()
            .is_some_and(|f| (0.0..OWN_IDS as f64).contains(&f)),
        Value::String(s) => s.parse::<i64>().is_ok_and(|n| (0..OWN_IDS).contains(&n)),
        _ => false,
    };
    if own {
        *id = json!(format!("fuzz-{id}"));
    }
}

/// `conform fuzz --protocol acp`: a fresh agent per input.
pub fn start<'a>(
    setup: crate::suite::FuzzSetup,
    options: &'a fuzz::Options,
    progress: &'a mut dyn FnMut(&str),
) -> crate::suite::BoxFuture<'a, crate::suite::FuzzOutcome> {
    Box::pin(async move {
        let h = Harness::new(setup.target, setup.startup, setup.timeout).await?;
        Ok((fuzz::fuzz(Arc::new(h), options, progress).await?, vec![]))
    })
}

impl Harness {
    pub async fn new(target: Target, startup: Duration, timeout: f64) -> Result<Self, RunError> {
        let launcher = launcher_for(&target)?;
        let (probe, first) = driver::probe(&launcher, startup)
            .await
            .map_err(|e| RunError::Target(format!("the agent could not be initialized: {e}")))?;
        if let Some(c) = first {
            c.close().await;
        }
        let book = super::prompts::Book::builtin().map_err(RunError::Conform)?;
        Ok(Harness {
            // A fresh agent per input (isolated), as before.
            ctx: Arc::new(Context::new(launcher, false, probe, startup, book, true)),
            timeout,
            golden: golden()?,
            methods: method_names(),
        })
    }

    /// One message's line; `ids` are those of the lines before it, which it
    /// does not repeat (two requests with one id cannot be told apart).
    fn line(&self, m: &Message, ids: &mut Vec<Value>) -> Vec<u8> {
        let mut v = m.value(&self.golden);
        clear_ids(&mut v);
        if let Some(id) = v.get_mut("id") {
            if ids.contains(id) {
                *id = json!(format!("fuzz-repeat-{}", ids.len()));
            }
            ids.push(id.clone());
        }
        let (mut body, crlf) = m.encode(v);
        if crlf {
            body.push(b'\r');
        }
        body.push(b'\n');
        body
    }
}

impl fuzz::Harness for Harness {
    type Input = Input;

    fn strategy(&self) -> BoxedStrategy<Input> {
        let sizes = [64 * 1024, 1024 * 1024];
        (
            prop_oneof![8 => Just(true), 1 => Just(false)],
            prop::collection::vec(strat::message(self.methods.clone(), &sizes), 1..4),
            strat::pauses(),
        )
            .prop_map(|(initialize, messages, pauses)| Input {
                initialize,
                messages,
                pauses,
            })
            .boxed()
    }

    fn case(&self, input: &Input, id: &str) -> Value {
        let mut bytes = Vec::new();
        let mut ids = Vec::new();
        for m in &input.messages {
            bytes.extend(self.line(m, &mut ids));
        }
        let all_well_formed = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .all(well_formed);
        // Templates survive only in text without damage: the driver expands them.
        let damaged = input
            .messages
            .iter()
            .any(|m| !m.garbles.is_empty() || m.size.is_some());
        let step = strat::write_step(bytes, &input.pauses, !damaged);
        let (level, requirements) = if all_well_formed {
            (
                "MUST",
                json!([
                    "acp.jsonrpc.reply-to-request",
                    "acp.ext.custom-request-respond-agent"
                ]),
            )
        } else {
            ("SHOULD", json!(["acp.jsonrpc.parse-error"]))
        };
        json!({
            "id": id,
            "title": "Generated lines: whatever they are, the agent's output stays valid and it still answers",
            "level": level,
            "requirements": requirements,
            "phase": "disruptive",
            "config": {"setup": if input.initialize { "initialize" } else { "none" }},
            "steps": [Value::Object(step), {"probe": true, "deadline": self.timeout}],
        })
    }

    fn run(self: Arc<Self>, case: Value) -> CaseFuture {
        Box::pin(async move {
            match fuzz::parse_generated::<super::AgentCases>(case) {
                Ok(case) => self.ctx.run_case(&case).await,
                Err(conform_error) => *conform_error,
            }
        })
    }

    fn reset(self: Arc<Self>) -> ResetFuture {
        // Every case starts its own agent.
        Box::pin(async { Ok(()) })
    }
}
