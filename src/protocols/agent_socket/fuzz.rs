//! The agent-socket fuzzer: each input is one connection carrying a golden
//! request from the corpus, changed (fields dropped, added, retyped; ids of
//! every type; unknown methods; deep nesting; bytes cut, split by a newline,
//! not UTF-8, NUL, CRLF, a BOM; padded around the largest request Vibe
//! sends; a second request in the same write), written in pieces with
//! pauses, then read, half-closed, closed, or left open while conform checks
//! that another connection is still served. After it, a probe checks the
//! server still answers the handshake.
//!
//! The oracles are the suite's: a reply that comes is one whole line, a
//! JSON-RPC response whose id is null or the request's; an unchanged request
//! is answered before the deadline; the server serves the probe.

use super::{Started, stop, table};
use crate::error::RunError;
use crate::fuzz::seeds::Seeds;
use crate::fuzz::states::Framing;
use crate::fuzz::strategies::{self as strat, Message, Pause, Pool};
use crate::fuzz::{self, ResetFuture};
use crate::runner::CaseFuture;
use crate::target::Target;
use crate::transport::unix::Connector;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::driver::Session;

/// How the connection ends after the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Read the reply.
    Read,
    /// Shut down conform's writing half, then read.
    HalfClose,
    /// Close without reading.
    Close,
    /// Leave it open while a probe runs on another connection.
    Stall,
}

#[derive(Debug, Clone)]
pub struct Input {
    pub message: Message,
    /// A second request in the same write.
    pub second: Option<Message>,
    pub pauses: Vec<Pause>,
    pub end: End,
}

/// The requirements a generated case checks.
const REQUIREMENTS: &[&str] = &[
    "as.transport.connection",
    "as.framing.line",
    "as.jsonrpc.version",
    "as.jsonrpc.id",
    "as.jsonrpc.result-or-error",
    "as.jsonrpc.error-object",
    "as.server.survives",
];

pub struct Harness {
    target: Target,
    startup: Duration,
    /// How long a reply or a probe may take, in seconds.
    timeout: f64,
    golden: Vec<Value>,
    methods: Vec<String>,
    live: Mutex<Arc<Session>>,
    started: tokio::sync::Mutex<Started>,
}

/// Method names to put in place of a request's: the table's, and names no
/// table has.
fn method_names() -> Vec<String> {
    let mut m: Vec<String> = table::METHODS.iter().map(|m| m.name.to_owned()).collect();
    m.extend(
        [
            "conform/no-such-method",
            "",
            "AGENT/INITIALIZE",
            "agent/initialize ",
            "rpc.discover",
            "sandbox/",
            "tools/list",
        ]
        .map(String::from),
    );
    m
}

/// The requests of the corpus, as Vibe would write them, with templates left
/// for the driver to expand against the live target (a tool's name and
/// input filled in from the first declared tool). Commands that sleep,
/// start Python or write megabytes are left out, to keep the inputs fast.
fn golden(session: &Session) -> Result<Vec<Value>, RunError> {
    let cases = crate::case::load::<super::ServerCases>(&[])
        .map_err(|e| RunError::Conform(e.to_string()))?;
    let tool = session.declared.tools.first().map(|t| {
        (
            t.full_name.clone(),
            super::validate::example_input(&t.input_schema, 0),
        )
    });
    let mut seeds = Seeds::new(0);
    seeds.sends(&cases, |send| {
        let mut params = send.params.clone();
        if params.to_string().contains("${tool") {
            let (name, input) = tool.as_ref()?;
            if let Value::Object(p) = &mut params {
                if p.get("name").is_some_and(|n| n == "${tool.name}") {
                    p.insert("name".into(), json!(name));
                }
                if p.get("input").is_some_and(|n| n == "${tool.input}") {
                    p.insert("input".into(), input.clone());
                }
            }
        }
        let command = params.get("command").and_then(Value::as_str).unwrap_or("");
        let slow = ["sleep", "${python", "dd ", "${bulk"]
            .iter()
            .any(|w| command.contains(w));
        (!slow).then_some(params)
    });
    Ok(seeds.into_messages())
}

/// `conform fuzz --protocol agent-socket`: the harness on the target, the
/// fuzzer, then the target stopped with what it said on the way out.
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
        let started = super::start(&target, startup).await?;
        let session = Self::session(&started).await;
        if let Some(why) = &session.declared.handshake_failed {
            return Err(RunError::Target(format!("the handshake failed: {why}")));
        }
        let golden = golden(&session)?;
        Ok(Harness {
            target,
            startup,
            timeout,
            golden,
            methods: method_names(),
            live: Mutex::new(Arc::new(session)),
            started: tokio::sync::Mutex::new(started),
        })
    }

    async fn session(started: &Started) -> Session {
        let exit = started.spawned.as_ref().map(|s| s.status_watch());
        let mut session = Session::new(Connector::Unix(started.socket.clone()), exit, false);
        session.handshake().await;
        session
    }

    /// `v` with the live target's values in place of its templates.
    fn expand(&self, v: Value) -> Value {
        let session = self.session_now();
        let mut vars = session.declared.vars.clone();
        vars.set("uniq", json!("fuzz"));
        if let Some(Value::String(ws)) = vars.get("workspace").cloned() {
            vars.set("scratch", json!(format!("{ws}/.conform-fuzz")));
        }
        crate::matcher::expand(&v, &vars).unwrap_or(v)
    }

    fn session_now(&self) -> Arc<Session> {
        self.live
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// A command in a request is always one of the corpus's, whatever the
    /// mutations did: the fuzzer never runs a command of its own.
    fn keep_commands(&self, v: &mut Value) {
        let Some(Value::Object(p)) = v.get_mut("params") else {
            return;
        };
        if let Some(Value::String(c)) = p.get("command") {
            let known = self
                .golden
                .iter()
                .any(|g| g["params"].get("command").and_then(Value::as_str) == Some(c));
            if !known {
                p.insert("command".into(), json!(["conform: not a corpus command"]));
            }
        }
    }

    fn bytes(&self, m: &Message, pool: &Pool) -> Vec<u8> {
        let mut v = m.value(pool);
        self.keep_commands(&mut v);
        // Templates stay for the driver to expand against the target of the
        // replay, unless the bytes are cut or sized: then they are expanded
        // now, so the damage and the size land where they were generated.
        if !m.garbles.is_empty() || m.size.is_some() {
            v = self.expand(v);
        }
        let (mut body, crlf) = m.encode(v);
        if crlf {
            body.push(b'\r');
        }
        body.push(b'\n');
        body
    }
}

pub fn strategy(methods: Vec<String>) -> BoxedStrategy<Input> {
    let sizes = [
        table::HELPER_REQUEST_CHUNK_BYTES,
        16 * table::HELPER_REQUEST_CHUNK_BYTES,
    ];
    (
        strat::message(methods.clone(), &sizes),
        prop_oneof![
            12 => Just(None),
            1 => strat::message(methods, &[]).prop_map(Some),
        ],
        strat::pauses(),
        prop_oneof![
            12 => Just(End::Read),
            2 => Just(End::HalfClose),
            2 => Just(End::Close),
            1 => Just(End::Stall),
        ],
    )
        .prop_map(|(message, second, pauses, end)| Input {
            message,
            second,
            pauses,
            end,
        })
        .boxed()
}

impl fuzz::Harness for Harness {
    type Input = Input;

    fn strategy(&self) -> BoxedStrategy<Input> {
        strategy(self.methods.clone())
    }

    fn golden(&self) -> Vec<Value> {
        self.golden.clone()
    }

    fn messages(&self, input: &Input, pool: &Pool, _index: u64) -> Vec<Value> {
        std::iter::once(&input.message)
            .chain(&input.second)
            .map(|m| {
                let mut v = m.value(pool);
                self.keep_commands(&mut v);
                v
            })
            .collect()
    }

    fn framing(&self) -> Framing {
        Framing::Lines
    }

    fn known(&self, method: &str) -> bool {
        table::METHODS.iter().any(|m| m.name == method)
    }

    fn finish(self: Arc<Self>) -> fuzz::live::BoxFuture<'static, Vec<String>> {
        Box::pin(async move {
            let mut notes = Vec::new();
            stop(&mut *self.started.lock().await, &mut notes, false).await;
            notes
        })
    }

    fn case(&self, input: &Input, pool: &Pool, id: &str, _index: u64) -> Value {
        let mut bytes = self.bytes(&input.message, pool);
        if let Some(second) = &input.second {
            bytes.extend(self.bytes(second, pool));
        }
        // Damaged or sized messages had their templates expanded already.
        let mut step = strat::write_step(bytes, &input.pauses, true);
        // An unchanged request that carries an id is answered; anything else
        // may be, and what comes must be a whole, well-formed reply.
        let due = input.message.is_golden(pool)
            && input.second.is_none()
            && pool.resolve(&input.message.base).0.get("id").is_some();
        let expect = json!({"reply": if due { "due" } else { "if-any" }});
        let timeout = self.timeout;
        let mut steps = Vec::new();
        match input.end {
            End::Read => {
                step.insert("expect".into(), expect);
                step.insert("deadline".into(), json!(timeout));
            }
            End::HalfClose => {
                step.insert("halfClose".into(), json!(true));
                step.insert("expect".into(), json!({"reply": "if-any"}));
                step.insert("deadline".into(), json!(timeout));
            }
            End::Close => {
                step.insert("close".into(), json!(true));
            }
            End::Stall => {
                step.insert("wait".into(), json!(false));
                step.insert("conn".into(), json!("stalled"));
                step.insert("expect".into(), json!({"reply": "if-any"}));
                step.insert("deadline".into(), json!(timeout));
            }
        }
        steps.push(Value::Object(step));
        if input.end == End::Stall {
            // Another connection is served while this one waits.
            steps.push(json!({"probe": true, "deadline": timeout / 2.0}));
        }
        steps.push(json!({"probe": true, "deadline": timeout}));
        json!({
            "id": id,
            "title": "A generated request: whatever it is, the server stays well-formed and serving",
            "level": "MUST",
            "requirements": REQUIREMENTS,
            "phase": "disruptive",
            "steps": steps,
        })
    }

    fn run(self: Arc<Self>, case: Value) -> CaseFuture {
        let session = self.session_now();
        Box::pin(async move {
            match fuzz::parse_generated::<super::ServerCases>(&case) {
                Ok(case) => session.run_case(&case).await,
                Err(conform_error) => *conform_error,
            }
        })
    }

    fn reset(self: Arc<Self>) -> ResetFuture {
        Box::pin(async move {
            if matches!(self.target, Target::Unix(_)) {
                // Not conform's to restart.
                return Ok(());
            }
            let mut started = self.started.lock().await;
            let mut notes = Vec::new();
            stop(&mut started, &mut notes, false).await;
            *started = super::start(&self.target, self.startup).await?;
            let session = Self::session(&started).await;
            if let Ok(mut live) = self.live.lock() {
                *live = Arc::new(session);
            }
            Ok(())
        })
    }
}
