//! conform playing the editor: one fresh agent process per case, the case's
//! steps, the editor's answers to the agent, and the grading. The checks
//! live in `monitor` (every line) and here (what a step expects); this file
//! is the I/O glue around them.

use super::editor::Editor;
use super::monitor::{self, Incoming, Monitor};
use super::steps::{AnswerRule, Config, Expect, NamedCheck, Need, Permission, Setup, Step};
use super::table;
use crate::case::Case;
use crate::evidence::{Evidence, Finding, Kind};
use crate::matcher::{self, Vars, truncate};
use crate::outcome::{CaseResult, Direction, SkipKind, TranscriptEntry};
use crate::step::ReplyRule as Reply;
use crate::transport::process;
use crate::transport::stdio::{LineStream, StreamEvent};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// How long a request may take unless a step says otherwise.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// A prompt turn with conform's fake-model script is quick; a real model is not.
const PROMPT_DEADLINE: Duration = Duration::from_secs(60);
/// How long a step waits for the agent to make a request it expects.
const WAIT_FOR_DEADLINE: Duration = Duration::from_secs(30);
/// How long the agent has to exit after its stdin closes, at the end of a case.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// What conform learned about the agent before the cases ran.
#[derive(Debug, Clone)]
pub struct Probe {
    pub initialize: Option<Value>,
    /// `agentCapabilities` (empty object when absent).
    pub capabilities: Value,
    /// The `session/new` result, or why there is none.
    pub session: Result<Value, String>,
}

impl Probe {
    /// Why a case with `needs` does not apply to this agent, if it does not.
    pub fn skip_reason(&self, needs: &[Need]) -> Option<(String, SkipKind)> {
        let offers = |key: &str| {
            self.session
                .as_ref()
                .ok()
                .and_then(|s| s.get(key))
                .and_then(Value::as_array)
                .is_some_and(|m| !m.is_empty())
        };
        for need in needs {
            let met = match need {
                Need::Session => self.session.is_ok(),
                Need::Modes => self
                    .session
                    .as_ref()
                    .ok()
                    .and_then(|s| s.pointer("/modes/availableModes"))
                    .and_then(Value::as_array)
                    .is_some_and(|m| !m.is_empty()),
                Need::ConfigOptions => offers("configOptions"),
                Need::AuthMethods => self
                    .initialize
                    .as_ref()
                    .and_then(|i| i.get("authMethods"))
                    .and_then(Value::as_array)
                    .is_some_and(|m| !m.is_empty()),
                Need::Capability(path) => {
                    table::advertised(&self.capabilities, &format!("/{}", path.replace('.', "/")))
                }
            };
            if met {
                continue;
            }
            // A session the agent could not create (no credentials, no
            // model) is outside its declaration; the rest it declared.
            let of_session = matches!(need, Need::Session | Need::Modes | Need::ConfigOptions);
            return Some(match (&self.session, need) {
                (Err(why), _) if of_session => (why.clone(), SkipKind::Outside),
                (_, Need::Modes) => (
                    "the agent's session/new result offers no modes".into(),
                    SkipKind::Declared,
                ),
                (_, Need::ConfigOptions) => (
                    "the agent's session/new result offers no config options".into(),
                    SkipKind::Declared,
                ),
                (_, Need::AuthMethods) => (
                    "the agent advertises no authMethods".into(),
                    SkipKind::Declared,
                ),
                (_, other) => (
                    format!("the agent does not advertise agentCapabilities.{other}"),
                    SkipKind::Declared,
                ),
            });
        }
        None
    }
}

/// What every case of a run shares.
pub struct Context {
    /// The command line that starts one agent.
    pub command: String,
    pub strict: bool,
    pub probe: Probe,
    pub startup: Duration,
}

/// The first `initialize` conform sends, for a profile's capabilities.
pub fn initialize_params(capabilities: Value) -> Value {
    json!({
        "protocolVersion": table::PROTOCOL_VERSION,
        "clientCapabilities": capabilities,
        "clientInfo": {"name": "conform", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Why an error answer to a prompt or session/new is outside the protocol
/// (authentication, the model), so the case is skipped, not failed.
fn outside_protocol(method: &str, error: &Value) -> Option<String> {
    let code = error.get("code").and_then(Value::as_i64)?;
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    if code == table::AUTH_REQUIRED.0 {
        return Some(format!(
            "the agent requires authentication ({method} answered {code}: {message}); conform has no credentials"
        ));
    }
    // -32603 and the implementation-defined codes (outside JSON-RPC's
    // reserved range, or -32099..=-32001) carry the agent's own failures.
    let own = !(-32768..=-32000).contains(&code) || (-32099..=-32001).contains(&code);
    if method == "session/prompt" && (code == -32603 || own) {
        return Some(format!(
            "the prompt failed outside the protocol ({method} answered {code}: {message})"
        ));
    }
    None
}

/// Starts one agent with the run's command line.
fn spawn(command: &str) -> Result<LineStream, String> {
    LineStream::spawn(command, &[], table::LINE_LIMIT)
        .map_err(|e| format!("cannot start `{command}`: {e}"))
}

/// Learns what the agent advertises: `initialize` and `session/new` on one
/// process. An agent that cannot be started or never answers is the target's
/// failure to start (exit 2), not a case failure.
pub async fn probe(command: &str, startup: Duration) -> Result<Probe, String> {
    let mut stream = spawn(command)?;
    let workspace = super::workspace()?;
    let mut monitor = Monitor::new();
    let mut probe = Probe {
        initialize: None,
        session: Err("not probed".into()),
        capabilities: json!({}),
    };
    let result = async {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": initialize_params(super::steps::Profile::All.capabilities())});
        let answer = exchange(&mut stream, &mut monitor, &init, startup).await?;
        let init =
            answer.map_err(|e| format!("the agent answered initialize with an error: {e}"))?;
        probe.capabilities = init.get("agentCapabilities").cloned().unwrap_or(json!({}));
        probe.initialize = Some(init);
        let new = json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
            "params": {"cwd": workspace.path(), "mcpServers": []}});
        probe.session = match exchange(&mut stream, &mut monitor, &new, REQUEST_DEADLINE).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(outside_protocol("session/new", &e)
                .unwrap_or_else(|| format!("session/new failed: {e}"))),
            Err(e) => Err(e),
        };
        Ok::<(), String>(())
    }
    .await;
    stream.close_stdin();
    let _ = stream.process.wait_for_exit(EXIT_GRACE).await;
    let _ = stream.process.shutdown(process::TERM_GRACE).await;
    if let Err(e) = result {
        // An agent that wrote, but nothing conform could read as the answer,
        // started: its cases run and say what is wrong with what it wrote.
        if let Some(v) = monitor.violations.first() {
            probe.session = Err(format!(
                "the agent's answers before the run could not be read ({e}): {}",
                v.message
            ));
            return Ok(probe);
        }
        let stderr = stream.process.stderr_tail();
        return Err(if stderr.trim().is_empty() {
            e
        } else {
            format!("{e}; its stderr:\n{}", stderr.trim_end())
        });
    }
    Ok(probe)
}

/// Sends one request and reads until its answer, answering nothing else
/// (the probe's agent has no reason to ask anything yet).
async fn exchange(
    stream: &mut LineStream,
    monitor: &mut Monitor,
    message: &Value,
    within: Duration,
) -> Result<Result<Value, Value>, String> {
    let key = monitor.sent(message).unwrap_or_default();
    let method = message["method"].as_str().unwrap_or("").to_owned();
    stream
        .send(format!("{message}\n").as_bytes(), within)
        .await?;
    let until = Instant::now() + within;
    loop {
        match stream.next(until).await {
            None => {
                return Err(format!(
                    "the agent did not answer {method} within {:.0}s",
                    within.as_secs_f64()
                ));
            }
            Some((_, StreamEvent::Line(line))) => {
                if let Some(why) = crate::jsonrpc::too_many_values(&line) {
                    return Err(format!("the agent wrote {why}"));
                }
                if let Incoming::Response {
                    key: k, outcome, ..
                } = monitor.received(&line)
                    && k == key
                {
                    return Ok(outcome);
                }
            }
            Some((_, StreamEvent::TooLong { limit })) => {
                return Err(format!("the agent wrote a line over {limit} bytes"));
            }
            Some((_, StreamEvent::Broken(why))) => return Err(why),
            Some((_, StreamEvent::Closed { .. })) => {
                let status = stream
                    .process
                    .wait_for_exit(Duration::from_millis(300))
                    .await;
                return Err(format!(
                    "the agent closed its stdout before answering {method} (it {})",
                    process::describe_status(status)
                ));
            }
        }
    }
}

struct CaseRun<'a> {
    ctx: &'a Context,
    config: Config,
    stream: LineStream,
    started: Instant,
    transcript: Vec<TranscriptEntry>,
    monitor: Monitor,
    editor: Editor,
    vars: Vars,
    next_id: i64,
    /// `as` names to request keys.
    named: HashMap<String, String>,
    /// Answers that arrived, by request key.
    answers: HashMap<String, Result<Value, Value>>,
    /// The agent's requests held back by `withhold`: (id, method, params).
    held: Vec<(Value, String, Value)>,
    ev: Evidence,
    /// stdout closed (the agent ended or closed it).
    closed: bool,
    /// An answer the case needed never came: later steps would build on nothing.
    stalled: bool,
    /// The agent ended (or closed stdout) before the case was over.
    ended_early: bool,
    /// conform closed the agent's stdin to end the case.
    ending: bool,
    workspace: std::path::PathBuf,
}

impl Context {
    pub async fn run_case(&self, case: &Case<super::AgentCases>) -> CaseResult {
        let started = Instant::now();
        let mut early = Evidence::default();
        let result = |ev| CaseResult::graded(case, ev, self.strict, started, vec![]);
        if let Some((why, kind)) = self.probe.skip_reason(&case.needs) {
            early.skip(why, kind);
            return result(early);
        }
        let config: Config = case.config.clone();
        let workspace = match super::workspace() {
            Ok(w) => w,
            Err(e) => {
                early.error(e);
                return result(early);
            }
        };
        let stream = match spawn(&self.command) {
            Ok(s) => s,
            Err(e) => {
                early.error(e);
                return result(early);
            }
        };
        let ws = workspace.path().to_path_buf();
        let mut vars = Vars::default();
        vars.set("workspace", json!(ws.display().to_string()));
        let mut run = CaseRun {
            ctx: self,
            editor: Editor::new(ws.clone(), config.permission),
            config,
            stream,
            started,
            transcript: Vec::new(),
            monitor: Monitor::new(),
            vars,
            next_id: 0,
            named: HashMap::new(),
            answers: HashMap::new(),
            held: Vec::new(),
            ev: Evidence::default(),
            closed: false,
            stalled: false,
            ended_early: false,
            ending: false,
            workspace: ws,
        };
        run.setup().await;
        // A setup that failed leaves the steps nothing to stand on.
        let setup_failed = !run.ev.findings.is_empty();
        for (i, step) in case.steps.iter().enumerate() {
            if setup_failed
                || run.stalled
                || run.ev.skip.is_some()
                || run.ev.error.is_some()
                || !run.ev.findings.is_empty() && run.closed
            {
                break;
            }
            run.step(i, step).await;
        }
        run.finish().await;
        let evidence = run.evidence();
        drop(workspace);
        CaseResult::graded(case, evidence, self.strict, started, run.transcript)
    }
}

impl CaseRun<'_> {
    fn log(&mut self, dir: Direction, data: &[u8]) {
        if self.transcript.len() >= crate::outcome::TRANSCRIPT_ENTRIES {
            return;
        }
        self.transcript.push(TranscriptEntry {
            t_ms: self.started.elapsed().as_millis() as u64,
            conn: "stdio".into(),
            dir,
            data: crate::outcome::transcript_text(data),
        });
    }

    fn next_id(&mut self) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        json!(id)
    }

    /// Writes one message; returns the key of a request.
    async fn send(&mut self, message: &Value) -> Option<String> {
        let key = self.monitor.sent(message);
        self.write(format!("{message}\n").into_bytes()).await;
        key
    }

    async fn write(&mut self, bytes: Vec<u8>) {
        self.log(Direction::Sent, &bytes);
        if let Err(e) = self.stream.send(&bytes, REQUEST_DEADLINE).await {
            self.log(Direction::Event, e.as_bytes());
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Option<String> {
        let id = self.next_id();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    /// Reads and handles lines until `done` holds or `until` passes; says
    /// whether `done` held.
    async fn pump(&mut self, until: Instant, done: &(dyn Fn(&CaseRun<'_>) -> bool + Sync)) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.closed {
                return false;
            }
            let Some((_, event)) = self.stream.next(until).await else {
                return done(self);
            };
            match event {
                StreamEvent::Line(line) => {
                    if let Some(why) = crate::jsonrpc::too_many_values(&line) {
                        self.log(
                            Direction::Event,
                            b"a message over conform's limit was dropped",
                        );
                        self.ev.error(format!("the agent wrote {why}"));
                        return false;
                    }
                    self.handle_line(&line, until).await
                }
                StreamEvent::TooLong { limit } => {
                    self.log(Direction::Event, b"a line over conform's limit was dropped");
                    self.ev.error(format!(
                        "the agent wrote a line over conform's {limit}-byte limit; conform cannot judge it"
                    ));
                    return false;
                }
                // Lines never break the stream; only frames do.
                StreamEvent::Broken(why) => {
                    self.ev.error(why);
                    return false;
                }
                StreamEvent::Closed { partial } => {
                    self.closed = true;
                    if !partial.is_empty() {
                        self.log(Direction::Received, &partial);
                        // "Messages are delimited by newlines (\n)": a last line
                        // without its newline is not a whole message.
                        self.monitor.received(&partial);
                        self.ev.fail(
                            Kind::Framing,
                            format!(
                                "the agent's last {} bytes on stdout had no newline",
                                partial.len()
                            ),
                        );
                    }
                    let status = self
                        .stream
                        .process
                        .wait_for_exit(Duration::from_millis(300))
                        .await;
                    // An agent that exits cleanly once conform ended its
                    // input is not news: the transcript leaves it out.
                    let clean = self.ending && status.is_some_and(|s| s.success());
                    if !clean {
                        let what = format!(
                            "stdout closed; the agent {}",
                            process::describe_status(status)
                        );
                        self.log(Direction::Event, what.as_bytes());
                    }
                    return done(self);
                }
            }
        }
    }

    async fn handle_line(&mut self, line: &[u8], until: Instant) {
        self.log(Direction::Received, line);
        match self.monitor.received(line) {
            Incoming::Request { id, method, params } => {
                if self.config.withhold.contains(&method) {
                    self.held.push((id, method, params));
                    return;
                }
                let within = until
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(1));
                let answer = self.editor.answer(&method, &params, within).await;
                self.send(&answer.to_message(&id)).await;
            }
            Incoming::Response { key, outcome, .. } => {
                self.answers.insert(key, outcome);
            }
            Incoming::Notification { .. } | Incoming::Unusable => {}
        }
    }

    /// Waits for the answer to request `key`; a missing answer is a finding.
    async fn answer(
        &mut self,
        key: &str,
        method: &str,
        within: Duration,
    ) -> Option<Result<Value, Value>> {
        let until = Instant::now() + within;
        let k = key.to_owned();
        self.pump(until, &|r| r.answers.contains_key(&k)).await;
        if let Some(a) = self.answers.remove(key) {
            return Some(a);
        }
        let why = if self.closed {
            let status = self.stream.process.exit_status();
            format!(
                "the agent closed its stdout (it {})",
                process::describe_status(status)
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

    async fn setup(&mut self) {
        if self.config.setup == Setup::None {
            return;
        }
        let params = initialize_params(self.config.client.capabilities());
        let Some(key) = self.request("initialize", params).await else {
            return;
        };
        let startup = self.ctx.startup;
        match self.answer(&key, "initialize", startup).await {
            Some(Ok(result)) => self.vars.set("initialize", result),
            Some(Err(e)) => {
                self.ev
                    .fail(Kind::WrongKind, format!("setup: initialize failed: {e}"));
            }
            None => {}
        }
        if self.config.setup != Setup::Session || !self.ev.findings.is_empty() {
            return;
        }
        let params = json!({"cwd": self.workspace.display().to_string(), "mcpServers": []});
        let Some(key) = self.request("session/new", params).await else {
            return;
        };
        match self.answer(&key, "session/new", REQUEST_DEADLINE).await {
            Some(Ok(result)) => {
                self.vars.set(
                    "session",
                    result.get("sessionId").cloned().unwrap_or(Value::Null),
                );
                // A mode to switch to: another than the current one, if any.
                let current = result.pointer("/modes/currentModeId").cloned();
                let modes = result
                    .pointer("/modes/availableModes")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let other = modes
                    .iter()
                    .filter_map(|m| m.get("id"))
                    .find(|id| Some(*id) != current.as_ref())
                    .or(current.as_ref())
                    .cloned();
                if let Some(m) = other {
                    self.vars.set("modeId", m);
                }
                if let Some(o) = result
                    .get("configOptions")
                    .and_then(Value::as_array)
                    .and_then(|o| o.first())
                {
                    self.vars
                        .set("configId", o.get("id").cloned().unwrap_or(Value::Null));
                    self.vars.set(
                        "configValue",
                        o.get("currentValue").cloned().unwrap_or(Value::Null),
                    );
                }
                self.vars.set("new", result);
            }
            Some(Err(e)) => match outside_protocol("session/new", &e) {
                Some(why) => self.ev.skip(why, SkipKind::Outside),
                None => {
                    self.ev
                        .fail(Kind::WrongKind, format!("setup: session/new failed: {e}"));
                }
            },
            None => {}
        }
    }

    fn deadline(step: &Step, default: Duration) -> Duration {
        step.deadline
            .map(Duration::from_secs_f64)
            .unwrap_or(default)
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

    async fn step(&mut self, index: usize, step: &Step) {
        let requests_before = self.monitor.agent_requests.len();
        let updates_before = self.monitor.updates.len();
        let raw = match (&step.raw, &step.raw_hex) {
            (Some(raw), _) => match self.expand(&json!(raw)) {
                Some(Value::String(text)) => Some(text.into_bytes()),
                _ => return,
            },
            (None, Some(hex)) => Some(crate::case::hex_bytes(hex).unwrap_or_default()),
            (None, None) => None,
        };
        if let Some(bytes) = raw {
            // Each line may be answered with a null id.
            for _ in bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .take(64)
            {
                self.monitor.sent_malformed();
            }
            // Requests among the bytes that conform can read are expected
            // to be answered like any other, with their own ids.
            for line in bytes.split(|b| *b == b'\n').take(64) {
                if line.len() <= table::LINE_LIMIT
                    && let Some(v @ Value::Object(_)) = crate::jsonrpc::read_message(line)
                {
                    if v.get("id").is_some_and(Value::is_null) {
                        self.monitor.sent_null_id_request();
                    } else if v.get("method").is_some_and(Value::is_string) {
                        self.monitor.sent(&v);
                    } else if let Some(id) = v.get("id") {
                        self.monitor.sent_invalid_with_id(id);
                    }
                }
            }
            if let Some(name) = &step.name {
                // An answer to bytes that are no request has a null id.
                self.named
                    .insert(name.clone(), monitor::id_key(&Value::Null));
            }
            if step.pauses.is_empty() {
                self.write(bytes).await;
            } else {
                self.log(Direction::Sent, &bytes);
                for (piece, ms) in crate::case::paced(bytes.len(), &step.pauses) {
                    if let Err(e) = self.stream.send(&bytes[piece], REQUEST_DEADLINE).await {
                        self.log(Direction::Event, e.as_bytes());
                        break;
                    }
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
                self.send(&json!({"jsonrpc": "2.0", "method": send.method, "params": params}))
                    .await;
                return;
            }
            let id = match &send.id {
                Some(id) => match self.expand(id) {
                    Some(v) => v,
                    None => return,
                },
                None => self.next_id(),
            };
            let message =
                json!({"jsonrpc": "2.0", "id": id, "method": send.method, "params": params});
            let Some(key) = self.send(&message).await else {
                return;
            };
            // A first initialize may take as long as the agent's start-up.
            let default = if send.method == "initialize" {
                self.ctx.startup.max(REQUEST_DEADLINE)
            } else {
                REQUEST_DEADLINE
            };
            self.after_request(
                step,
                key,
                &send.method,
                default,
                requests_before,
                updates_before,
            )
            .await;
            return;
        }
        if let Some(prompt) = &step.prompt {
            let session = prompt
                .session
                .clone()
                .unwrap_or_else(|| "${session}".into());
            let blocks = match (&prompt.text, &prompt.blocks) {
                (Some(t), _) => json!([{"type": "text", "text": t}]),
                (_, Some(b)) => b.clone(),
                _ => json!([]),
            };
            let Some(params) = self.expand(&json!({"sessionId": session, "prompt": blocks})) else {
                return;
            };
            let Some(key) = self.request("session/prompt", params).await else {
                return;
            };
            self.after_request(
                step,
                key,
                "session/prompt",
                PROMPT_DEADLINE,
                requests_before,
                updates_before,
            )
            .await;
            return;
        }
        if let Some(name) = &step.await_name {
            let Some(key) = self.named.get(name).cloned() else {
                self.ev
                    .error(format!("step {index}: no request named `{name}` to await"));
                return;
            };
            let method = format!("`{name}`");
            let within = Self::deadline(step, PROMPT_DEADLINE);
            let answer = self.answer(&key, &method, within).await;
            if let Some(a) = answer {
                self.judge(
                    step.expect.as_ref(),
                    &method,
                    &a,
                    requests_before,
                    updates_before,
                );
            }
            return;
        }
        if let Some(method) = &step.wait_for {
            let within = Self::deadline(step, WAIT_FOR_DEADLINE);
            let m = method.clone();
            // Done when the agent asks, or when no turn is left to ask in.
            let seen = self
                .pump(Instant::now() + within, &|r| {
                    r.monitor.agent_requests.iter().any(|q| q.method == m)
                        || !r.monitor.any_turn_running()
                })
                .await;
            let asked = self
                .monitor
                .agent_requests
                .iter()
                .any(|q| q.method == *method);
            if (!seen || !asked) && self.ev.findings.is_empty() {
                let why = self.why_no_turn().unwrap_or_else(|| {
                    format!(
                        "the agent did not call {method} in the turn (it does not follow conform's prompt script, corpus/acp/SCRIPT.md)"
                    )
                });
                self.ev.skip(why, SkipKind::Outside);
            }
            return;
        }
        if let Some(session) = &step.cancel {
            let Some(session) = self.expand(&json!(session)) else {
                return;
            };
            if !self
                .monitor
                .turn_running(session.as_str().unwrap_or_default())
            {
                let why = self.why_no_turn().unwrap_or_else(|| {
                    "the turn had already ended when conform was to cancel it (the agent does not follow conform's prompt script, corpus/acp/SCRIPT.md)".into()
                });
                self.ev.skip(why, SkipKind::Outside);
                return;
            }
            self.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
                .await;
            // "The Client MUST respond to all pending session/request_permission
            // requests with the cancelled outcome."
            let held = std::mem::take(&mut self.held);
            for (id, method, params) in held {
                if method == "session/request_permission" {
                    let a = self.editor.permission(&params, Permission::Cancelled);
                    self.send(&a.to_message(&id)).await;
                } else {
                    self.held.push((id, method, params));
                }
            }
            return;
        }
        if step.release {
            let held = std::mem::take(&mut self.held);
            for (id, method, params) in held {
                let a = self.editor.answer(&method, &params, REQUEST_DEADLINE).await;
                self.send(&a.to_message(&id)).await;
            }
            return;
        }
        if let Some(secs) = step.quiet {
            self.pump(Instant::now() + Duration::from_secs_f64(secs), &|_| false)
                .await;
            return;
        }
        if step.probe {
            let Some(key) = self.request("_conform/probe", json!({})).await else {
                return;
            };
            let within = Self::deadline(step, REQUEST_DEADLINE);
            if self
                .answer(&key, "a probe request (_conform/probe)", within)
                .await
                .is_some()
            {
                self.ev.observe("the agent still answers requests");
            }
            return;
        }
        if step.close_stdin {
            self.stream.close_stdin();
            self.log(Direction::Event, b"conform closed the agent's stdin");
            let within = Self::deadline(step, Duration::from_secs(5));
            // Keep reading so a blocked writer can finish.
            self.pump(Instant::now() + within, &|r| r.closed).await;
            let status = self.stream.process.wait_for_exit(within).await;
            let exited = status.is_some();
            let want = step.expect.as_ref().and_then(|e| e.exit);
            self.ev.observe(format!(
                "after its stdin closed the agent {}",
                process::describe_status(status)
            ));
            if want == Some(true) && !exited {
                self.ev.fail(
                    Kind::Process,
                    format!(
                        "the agent was still running {:.0}s after its stdin closed",
                        within.as_secs_f64()
                    ),
                );
            }
        }
    }

    async fn after_request(
        &mut self,
        step: &Step,
        key: String,
        method: &str,
        default: Duration,
        requests_before: usize,
        updates_before: usize,
    ) {
        if let Some(name) = &step.name {
            self.named.insert(name.clone(), key.clone());
        }
        if !step.wait {
            return;
        }
        let within = Self::deadline(step, default);
        if let Some(a) = self.answer(&key, method, within).await {
            if let (Some(name), Ok(v)) = (&step.name, &a) {
                self.vars.set(name.clone(), v.clone());
            }
            self.judge(
                step.expect.as_ref(),
                method,
                &a,
                requests_before,
                updates_before,
            );
        }
    }

    /// Grades an answer against a step's expectation.
    fn judge(
        &mut self,
        expect: Option<&Expect>,
        method: &str,
        answer: &Result<Value, Value>,
        requests_before: usize,
        updates_before: usize,
    ) {
        let Some(expect) = expect else {
            self.ev.observe(format!(
                "{method}: {}",
                crate::jsonrpc::describe_answer(answer)
            ));
            return;
        };
        let rule = expect.rule();
        // A prompt or session that failed for want of credentials or a model
        // says nothing about the protocol.
        if let Err(e) = answer
            && rule == AnswerRule::Result
            && let Some(why) = outside_protocol(method, e)
        {
            self.ev.skip(why, SkipKind::Outside);
            return;
        }
        let requested: Vec<String> = self.monitor.agent_requests[requests_before..]
            .iter()
            .map(|r| r.method.clone())
            .collect();
        if let Some(m) = &expect.skip_unless
            && !requested.contains(m)
        {
            self.ev.skip(
                format!(
                    "the agent did not call {m} during {method} (it does not follow conform's prompt script, corpus/acp/SCRIPT.md)"
                ),
                SkipKind::Outside,
            );
            return;
        }
        let updates: Vec<Value> = self.monitor.updates[updates_before..]
            .iter()
            .map(|(_, u, _)| u.clone())
            .collect();
        if let Some(pattern) = &expect.skip_unless_update {
            let Some(p) = self.expand(pattern) else {
                return;
            };
            if !updates.iter().any(|u| self.matches(&p, u)) {
                self.ev.skip(
                    format!(
                        "no update during {method} matched {} (the agent does not follow conform's prompt script, corpus/acp/SCRIPT.md)",
                        matcher::brief(&p)
                    ),
                    SkipKind::Outside,
                );
                return;
            }
        }
        let want = match rule {
            AnswerRule::Result => Reply::Result,
            AnswerRule::Error => Reply::Error,
            AnswerRule::Any => Reply::Any,
            AnswerRule::Optional => Reply::Optional,
        };
        let pattern = match answer {
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
        let mut found = crate::drive::judge_answer(answer, want, pattern.as_ref(), &mut self.vars);
        for pattern in &expect.updates {
            let Some(p) = self.expand(pattern) else {
                return;
            };
            if !updates.iter().any(|u| self.matches(&p, u)) {
                let got = if updates.is_empty() {
                    "none".to_owned()
                } else {
                    updates
                        .iter()
                        .filter_map(|u| u.get("sessionUpdate").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                found.push(
                    Finding::new(
                        None,
                        Kind::Missing,
                        format!(
                            "no session/update during {method} matched {} (got {got})",
                            matcher::brief(&p)
                        ),
                    )
                    .saw(matcher::brief(&p), got),
                );
            }
        }
        for m in &expect.requests {
            if !requested.contains(m) {
                found.push(Finding::new(
                    None,
                    Kind::Missing,
                    format!("the agent did not call {m} during {method}"),
                ));
            }
        }
        for m in &expect.no_requests {
            if requested.contains(m) {
                found.push(Finding::new(
                    None,
                    Kind::Unexpected,
                    format!("the agent called {m} during {method}"),
                ));
            }
        }
        for check in &expect.checks {
            found.extend(
                self.named_check(*check, answer, &updates)
                    .into_iter()
                    .map(|e| Finding::new(None, Kind::Rule, e)),
            );
        }
        if found.is_empty() {
            self.ev.observe(format!(
                "{method}: {}",
                crate::jsonrpc::describe_answer(answer)
            ));
        }
        for mut f in found {
            f.message = format!("{method}: {}", f.message);
            self.ev.push(f);
        }
    }

    /// Why a turn the case waits on is over already, when it ended with an
    /// error outside the protocol (authentication, the model).
    fn why_no_turn(&self) -> Option<String> {
        self.answers
            .values()
            .filter_map(|a| a.as_ref().err())
            .find_map(|e| outside_protocol("session/prompt", e))
    }

    fn matches(&self, pattern: &Value, value: &Value) -> bool {
        let mut scratch = Vec::new();
        matcher::match_value(
            pattern,
            Some(value),
            "",
            &mut self.vars.clone(),
            &mut scratch,
        );
        scratch.is_empty()
    }

    fn named_check(
        &self,
        check: NamedCheck,
        answer: &Result<Value, Value>,
        updates: &[Value],
    ) -> Vec<String> {
        let result = answer.as_ref().ok();
        let session = self.vars.get("session").cloned().unwrap_or(Value::Null);
        let listed = |r: Option<&Value>| -> Vec<Value> {
            r.and_then(|r| r.get("sessions"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        match check {
            NamedCheck::SessionIdsUnique => {
                let ids = &self.monitor.new_session_ids;
                let mut seen = std::collections::BTreeSet::new();
                ids.iter()
                    .filter(|id| !seen.insert(id.as_str()))
                    .map(|id| format!("session/new returned the session id {id:?} twice"))
                    .collect()
            }
            NamedCheck::VersionNegotiated => {
                // "If the Agent supports the requested version, it MUST respond
                // with the same version. Otherwise, the Agent MUST respond with
                // the latest version it supports."
                let latest = self
                    .ctx
                    .probe
                    .initialize
                    .as_ref()
                    .and_then(|i| i.get("protocolVersion"))
                    .cloned();
                let got = answer.as_ref().ok().and_then(|r| r.get("protocolVersion")).cloned();
                match (latest, got) {
                    (Some(l), Some(g)) if l == g => vec![],
                    (l, g) => vec![format!(
                        "asked for a version the agent does not support, it answered {}; to version {} it answered {}, its latest",
                        g.map(|v| v.to_string()).unwrap_or("nothing".into()),
                        table::PROTOCOL_VERSION,
                        l.map(|v| v.to_string()).unwrap_or("nothing".into()),
                    )],
                }
            }
            NamedCheck::HistoryReplayed => {
                // The turn before the load said something: the replay has the
                // user's prompt and the agent's message again.
                let user = updates.iter().any(|u| u["sessionUpdate"] == "user_message_chunk");
                let agent = updates.iter().any(|u| u["sessionUpdate"] == "agent_message_chunk");
                if user && agent {
                    vec![]
                } else {
                    vec!["session/load did not replay the conversation (a user_message_chunk and the agent's message again)".into()]
                }
            }
            NamedCheck::TerminalsReleased => self
                .editor
                .created
                .iter()
                .filter(|t| !self.editor.released.contains(t))
                .map(|t| format!("terminal {t} was never released with terminal/release"))
                .collect(),
            NamedCheck::FileWritten => {
                let path = self.workspace.join("written.txt");
                match std::fs::read_to_string(&path) {
                    Ok(t) if t == "written by the agent" => vec![],
                    Ok(t) => vec![format!("written.txt holds {:?}", truncate(&t, 80))],
                    Err(e) => vec![format!("written.txt was not written: {e}")],
                }
            }
            NamedCheck::NoTerminalAuthMethod => result
                .and_then(|r| r.get("authMethods"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|m| m.get("type").and_then(Value::as_str) == Some("terminal"))
                .map(|m| {
                    format!(
                        "authMethods offers the terminal method {} although the client did not advertise auth.terminal",
                        matcher::brief(m)
                    )
                })
                .collect(),
            NamedCheck::NoBooleanConfig => self
                .vars
                .get("new")
                .and_then(|n| n.get("configOptions"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|o| o.get("type").and_then(Value::as_str) == Some("boolean"))
                .map(|o| {
                    format!(
                        "session/new offers the boolean config option {} although the client did not advertise session.configOptions.boolean",
                        o.get("id").map(Value::to_string).unwrap_or_default()
                    )
                })
                .collect(),
            NamedCheck::AllConfigOptions => {
                let offered = self
                    .vars
                    .get("new")
                    .and_then(|n| n.get("configOptions"))
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    .unwrap_or(0);
                let got = result
                    .and_then(|r| r.get("configOptions"))
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    .unwrap_or(0);
                if got == offered {
                    vec![]
                } else {
                    vec![format!("the result lists {got} config options, session/new offered {offered}")]
                }
            }
            // Only the filter is checked: whether a session with no turn yet
            // is listed, the pages do not say.
            NamedCheck::ListedByCwd => {
                let ws = self.workspace.display().to_string();
                listed(result)
                    .iter()
                    .filter(|s| s.get("cwd").and_then(Value::as_str) != Some(ws.as_str()))
                    .map(|s| format!("session/list filtered by cwd returned {}", matcher::brief(s)))
                    .collect()
            }
            NamedCheck::SessionNotListed => listed(result)
                .iter()
                .filter(|s| s.get("sessionId") == Some(&session))
                .map(|_| format!("session/list still lists the deleted session {session}"))
                .collect(),
        }
    }

    /// Ends the agent: stdin closed, a moment to exit, then the group ended.
    async fn finish(&mut self) {
        // An agent that ended before conform ended it: its stderr says why.
        self.ended_early = self.closed || self.stream.process.exit_status().is_some();
        self.stream.close_stdin();
        self.ending = true;
        // Whatever the agent writes until it closes its stdout still counts;
        // reading to that close, rather than for a fixed while, costs an
        // agent that exits on end of input nothing.
        if !self.closed {
            self.pump(Instant::now() + EXIT_GRACE, &|_| false).await;
        }
        let _ = self.stream.process.wait_for_exit(EXIT_GRACE).await;
        let _ = self.stream.process.shutdown(process::TERM_GRACE).await;
    }

    /// The case's evidence: what the steps found, every rule the monitor
    /// saw broken, and what the message needs besides.
    fn evidence(&mut self) -> Evidence {
        let mut ev = std::mem::take(&mut self.ev);
        for v in &self.monitor.violations {
            ev.broke(&v.requirement, v.kind, v.message.clone());
        }
        ev.appendix.extend(self.monitor.kept.note());
        if self.ended_early {
            let stderr = self.stream.process.stderr_tail();
            if !stderr.trim().is_empty() {
                ev.appendix.push(format!(
                    "the agent's stderr:\n{}",
                    truncate(stderr.trim_end(), 2000)
                ));
            }
        }
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_and_model_failures_are_outside_the_protocol() {
        let auth = json!({"code": -32000, "message": "Authentication required"});
        assert!(outside_protocol("session/new", &auth).is_some());
        let internal = json!({"code": -32603, "message": "no API key"});
        assert!(outside_protocol("session/prompt", &internal).is_some());
        assert!(outside_protocol("session/new", &internal).is_none());
        let invalid = json!({"code": -32602, "message": "bad"});
        assert!(outside_protocol("session/prompt", &invalid).is_none());
    }

    #[test]
    fn needs_read_the_probe() {
        let probe = Probe {
            initialize: Some(json!({"protocolVersion": 1})),
            capabilities: json!({"loadSession": true, "sessionCapabilities": {"list": {}}}),
            session: Ok(
                json!({"sessionId": "s", "modes": {"currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}]}}),
            ),
        };
        let need = |n: &str| -> Need { serde_json::from_value(json!(n)).unwrap() };
        assert_eq!(
            probe.skip_reason(&[need("loadSession"), need("modes")]),
            None
        );
        assert_eq!(probe.skip_reason(&[need("sessionCapabilities.list")]), None);
        assert!(
            probe
                .skip_reason(&[need("sessionCapabilities.resume")])
                .is_some()
        );
        assert!(probe.skip_reason(&[need("configOptions")]).is_some());
        // A need the schema has no capability for is a bad case file.
        assert!(serde_json::from_value::<Need>(json!("sessionCapabilities.lst")).is_err());
    }
}
