//! The ACP fuzzer: each input is a few lines written in one write or split
//! by pauses, then a probe request, on an agent conform initialized (a live
//! agent that takes input after input, see `fuzz::live`) or on a fresh one
//! it did not (one agent for that input alone). The lines are golden
//! messages from the corpus and the schema's client-to-agent methods, or
//! messages of earlier inputs that drew a new response, changed (see
//! `fuzz::strategies`), with method names from both sides of the schema
//! and names no schema has.
//!
//! The oracles are the suite's: the monitor checks every line the agent
//! writes at its requirement's level, and the probe must be answered. When
//! every line was a well-formed JSON-RPC request or notification the agent
//! must still answer ("When a rpc call is made, the Server MUST reply"), and
//! after lines that are not as well (`acp/jsonrpc/parse-error-survived`: a
//! later request is still a request); how such a line itself is answered
//! is graded at `acp.jsonrpc.parse-error`'s level.

use super::driver::{self, Context};
use super::editor::Editor;
use super::monitor::Monitor;
use super::schema::{self, Side};
use super::steps::{Permission, Profile};
use super::{launcher_for, table};
use crate::drive::stdio::{AnswerFuture, Answerer, Session};
use crate::error::RunError;
use crate::fuzz::live::{Live, Probe, Slot, StdioLive};
use crate::fuzz::readings::Id;
use crate::fuzz::seeds::{Seeds, without_templates};
use crate::fuzz::states::Framing;
use crate::fuzz::strategies::{self as strat, Message, Pause, Pool};
use crate::fuzz::{self, ResetFuture};
use crate::runner::CaseFuture;
use crate::target::Target;
use crate::transport::stdio::Launcher;
use crate::wire::Codec;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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

/// The ids conform's own requests take in a fuzz case, or in a live agent's
/// inputs run as one (`initialize`, the probes: see `fuzz::live::EVERY`);
/// generated ids stay clear of them.
const OWN_IDS: i64 = 64;

/// The corpus's requests and notifications whose templates need nothing but
/// the workspace, then one message for each client-to-agent method of the
/// schema the corpus does not send, and an unsolicited response.
fn golden() -> Result<Vec<Value>, RunError> {
    let cases = crate::case::load::<super::AgentCases>(&[])
        .map_err(|e| RunError::Conform(e.to_string()))?;
    let mut seeds = Seeds::new(100);
    seeds.sends(&cases, |send| {
        without_templates(&send.params, &["${workspace}"])
    });
    for m in schema::schema().methods() {
        if m.side == Side::Agent && !seeds.has(&m.name) {
            seeds.push(&m.name, json!({}), None, m.is_notification());
        }
    }
    seeds.add(json!({"jsonrpc": "2.0", "id": 7777, "result": {}}));
    Ok(seeds.into_messages())
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

/// Methods whose request leaves the agent changed for the inputs after it,
/// so that their oracles would no longer hold: none. A second `initialize`
/// changes the client capabilities, which gate only what an agent asks in a
/// prompt turn, and generated inputs start no turn (they name no session
/// conform created); an agent that answers differently after it, or after
/// `authenticate` or `logout`, is a finding a replay with the inputs before
/// it shows. A live agent ends only when it died or broke a rule, or after
/// `fuzz::live::EVERY` inputs.
const LEAVES_STATE: &[&str] = &[];

/// `conform fuzz --protocol acp`: persistent agents, each initialized once.
pub fn start<'a>(
    setup: crate::suite::FuzzSetup,
    options: &'a fuzz::Options,
    progress: &'a mut dyn FnMut(&str),
) -> crate::suite::BoxFuture<'a, crate::suite::FuzzOutcome> {
    fuzz::start(
        Harness::new(setup.target, setup.startup, setup.timeout),
        options,
        progress,
    )
}

impl Harness {
    pub async fn new(target: Target, startup: Duration, timeout: f64) -> Result<Self, RunError> {
        Self::on(launcher_for(&target)?, startup, timeout).await
    }

    /// The harness on the agents `launcher` starts.
    pub async fn on(launcher: Launcher, startup: Duration, timeout: f64) -> Result<Self, RunError> {
        Ok(Harness {
            // A fresh agent per input (isolated), as before.
            ctx: Arc::new(Context::isolated(launcher, startup).await?),
            timeout,
            golden: golden()?,
            methods: method_names(),
        })
    }

    /// One message's value, its id clear of conform's and of `ids`, those
    /// of the lines before it (two requests with one id, by value, cannot be
    /// told apart). An integer id the mutations left as it was becomes one
    /// of its own, from the input's number, so a live agent that answers
    /// late never meets it again in a later input.
    fn value(&self, m: &Message, pool: &Pool, ids: &mut Vec<Id>, index: u64) -> Value {
        let mut v = m.value(pool);
        strat::own_id(&mut v, m, index, ids.len());
        clear_ids(&mut v);
        if let Some(id) = v.get_mut("id") {
            // A found message may carry an id an earlier input was given
            // here: the new one is checked too (bounded: ids.len() + 1 tries).
            let mut n = ids.len();
            while ids.contains(&Id::from_value(id)) {
                *id = json!(format!("fuzz-repeat-{n}"));
                n += 1;
            }
            ids.push(Id::from_value(id));
        }
        v
    }

    /// One message's line (see [`Harness::value`]).
    fn line(&self, m: &Message, pool: &Pool, ids: &mut Vec<Id>, index: u64) -> Vec<u8> {
        let v = self.value(m, pool, ids, index);
        let (mut body, crlf) = m.encode(v);
        if crlf {
            body.push(b'\r');
        }
        body.push(b'\n');
        body
    }
}

/// How conform answers a live agent's requests: as the editor of the
/// suite's default profile (every capability, permissions allowed).
struct Editing(Editor);

impl Answerer for Editing {
    fn answer<'a>(
        &'a mut self,
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
        within: Duration,
    ) -> AnswerFuture<'a> {
        Box::pin(async move { Some(self.0.answer(method, params, within).await.to_message(id)) })
    }
}

/// How long a live agent has to end once its stdin closes.
const EXIT_GRACE: Duration = Duration::from_millis(500);

impl Harness {
    /// A live agent: started, and initialized as a generated case's
    /// `initialize` set-up does it (the default profile, id 0).
    async fn live(&self) -> Result<Box<dyn Live>, String> {
        let stream = self
            .ctx
            .launcher
            .start(
                &[],
                Codec::Lines {
                    limit: table::LINE_LIMIT,
                },
            )
            .map_err(|e| format!("cannot start the agent: {e}"))?;
        let workspace = super::workspace()?;
        let ws = workspace.path().to_path_buf();
        let mut s = Session::new(
            stream,
            "agent",
            Monitor::new(),
            Instant::now(),
            driver::FIRST_ID,
        );
        s.vars.set("workspace", json!(ws.display().to_string()));
        let mut role = Editing(Editor::new(ws, Permission::Allow));
        let params = driver::initialize_params(Profile::default().capabilities());
        let answer = match s.request("initialize", params).await {
            Some(key) => {
                s.answer(&mut role, &key, "initialize", self.ctx.startup)
                    .await
            }
            None => None,
        };
        let Some(Ok(result)) = answer else {
            s.finish(&mut role, EXIT_GRACE).await;
            return Err("the agent's initialize failed".into());
        };
        if !s.ev.findings.is_empty() || !s.watch.violations.is_empty() {
            s.finish(&mut role, EXIT_GRACE).await;
            return Err("the agent's initialize broke a rule".into());
        }
        s.vars.set("initialize", result);
        Ok(Box::new(StdioLive::<super::AgentCases, Monitor, Editing> {
            s,
            role,
            probe: Probe {
                method: "_conform/probe",
                what: "a probe request (_conform/probe)",
                answered: "the agent still answers requests",
                deadline: Duration::from_secs(10),
            },
            grace: EXIT_GRACE,
            keep: Some(Box::new(workspace)),
            _dialect: std::marker::PhantomData,
        }))
    }
}

impl fuzz::Harness for Harness {
    type Input = Input;

    fn strategy(&self) -> BoxedStrategy<Input> {
        let sizes = [64 * 1024, 1024 * 1024];
        (
            prop_oneof![39 => Just(true), 1 => Just(false)],
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

    fn golden(&self) -> Vec<Value> {
        self.golden.clone()
    }

    fn messages(&self, input: &Input, pool: &Pool, index: u64) -> Vec<Value> {
        let mut ids = Vec::new();
        input
            .messages
            .iter()
            .map(|m| self.value(m, pool, &mut ids, index))
            .collect()
    }

    /// An input before `initialize` needs a fresh agent; one that leaves
    /// the agent changed is the last its live agent takes.
    fn slot(&self, input: &Input, pool: &Pool) -> Slot {
        if !input.initialize {
            return Slot::Alone;
        }
        let leaves = input.messages.iter().any(|m| {
            m.value(pool)
                .get("method")
                .and_then(Value::as_str)
                .is_some_and(|m| LEAVES_STATE.contains(&m))
        });
        if leaves { Slot::Last } else { Slot::Shared }
    }

    fn start_live(self: Arc<Self>) -> Option<fuzz::live::Starting> {
        Some(Box::pin(async move { self.live().await }))
    }

    fn framing(&self) -> Framing {
        Framing::Lines
    }

    fn known(&self, method: &str) -> bool {
        schema::schema().method(method).is_some()
    }

    fn case(&self, input: &Input, pool: &Pool, id: &str, index: u64) -> Value {
        let mut bytes = Vec::new();
        let mut ids = Vec::new();
        for m in &input.messages {
            bytes.extend(self.line(m, pool, &mut ids, index));
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
            (
                "MUST",
                json!(["acp.jsonrpc.reply-to-request", "acp.jsonrpc.parse-error"]),
            )
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
            match fuzz::parse_generated::<super::AgentCases>(&case) {
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
