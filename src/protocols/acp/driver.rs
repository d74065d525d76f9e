//! conform playing the editor: one fresh agent process per case over the
//! shared stdio session (`drive::stdio`), the monitor watching every line
//! the agent writes, the editor answering its requests, and the case's
//! steps. The checks live in `monitor` (every line) and here (what a step
//! expects).

use super::editor::Editor;
use super::monitor::{Incoming, Monitor};
use super::steps::{Config, Expect, NamedCheck, Need, Own, Permission, Prompt, Setup, Step};
use super::table;
use crate::case::Case;
use crate::drive::stdio::{AnswerFuture, Answerer, ProbeRequest, Session};
use crate::evidence::{Evidence, Finding, Kind};
use crate::matcher::{self, truncate};
use crate::outcome::{CaseResult, SkipKind};
use crate::step::{Action, ReplyRule, StdioExpect};
use crate::transport::process;
use crate::transport::stdio::{Launcher, LineStream, StreamEvent};
use crate::wire::Codec;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// How long a request may take unless a step says otherwise.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// The request that asks whether the agent still serves.
const PROBE: ProbeRequest = ProbeRequest {
    method: "_conform/probe",
    what: "a probe request (_conform/probe)",
    still: "the agent still answers requests",
    within: REQUEST_DEADLINE,
};
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
    /// How one agent is started.
    pub launcher: Launcher,
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

/// Starts one agent.
fn spawn(launcher: &Launcher) -> Result<LineStream, String> {
    launcher
        .start(
            &[],
            Codec::Lines {
                limit: table::LINE_LIMIT,
            },
        )
        .map_err(|e| format!("cannot start {launcher:?}: {e}"))
}

/// Learns what the agent advertises: `initialize` and `session/new` on one
/// process. An agent that cannot be started or never answers is the target's
/// failure to start (exit 2), not a case failure.
pub async fn probe(launcher: &Launcher, startup: Duration) -> Result<Probe, String> {
    let mut stream = spawn(launcher)?;
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

/// How conform answers the agent in a case: as the configured editor,
/// holding back the methods the case withholds until a `release` (or, for
/// permission requests, a `cancel`).
struct EditorRole {
    editor: Editor,
    withhold: Vec<String>,
    /// The agent's requests held back: (id, method, params).
    held: Vec<(Value, String, Value)>,
}

impl Answerer for EditorRole {
    fn answer<'a>(
        &'a mut self,
        id: &'a Value,
        method: &'a str,
        params: &'a Value,
        within: Duration,
    ) -> AnswerFuture<'a> {
        Box::pin(async move {
            if self.withhold.iter().any(|m| m == method) {
                self.held
                    .push((id.clone(), method.to_owned(), params.clone()));
                return None;
            }
            let answer = self.editor.answer(method, params, within).await;
            Some(answer.to_message(id))
        })
    }
}

struct CaseRun<'a> {
    ctx: &'a Context,
    config: Config,
    s: Session<Monitor>,
    role: EditorRole,
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
        let stream = match spawn(&self.launcher) {
            Ok(s) => s,
            Err(e) => {
                early.error(e);
                return result(early);
            }
        };
        let ws = workspace.path().to_path_buf();
        let mut run = CaseRun {
            ctx: self,
            role: EditorRole {
                editor: Editor::new(ws.clone(), config.permission),
                withhold: config.withhold.clone(),
                held: Vec::new(),
            },
            config,
            s: Session::new(stream, "agent", Monitor::new(), started, 0),
            workspace: ws,
        };
        run.s
            .vars
            .set("workspace", json!(run.workspace.display().to_string()));
        run.setup().await;
        // A setup that failed leaves the steps nothing to stand on.
        let setup_failed = !run.s.ev.findings.is_empty();
        for (i, step) in case.steps.iter().enumerate() {
            if setup_failed || !run.s.goes_on() {
                break;
            }
            run.step(i, step).await;
        }
        let result = run
            .s
            .graded(&mut run.role, EXIT_GRACE, case, self.strict, started)
            .await;
        drop(workspace);
        result
    }
}

impl CaseRun<'_> {
    async fn setup(&mut self) {
        if self.config.setup == Setup::None {
            return;
        }
        let params = initialize_params(self.config.client.capabilities());
        let Some(key) = self.s.request("initialize", params).await else {
            return;
        };
        let startup = self.ctx.startup;
        match self
            .s
            .answer(&mut self.role, &key, "initialize", startup)
            .await
        {
            Some(Ok(result)) => self.s.vars.set("initialize", result),
            Some(Err(e)) => {
                self.s
                    .ev
                    .fail(Kind::WrongKind, format!("setup: initialize failed: {e}"));
            }
            None => {}
        }
        if self.config.setup != Setup::Session || !self.s.ev.findings.is_empty() {
            return;
        }
        let params = json!({"cwd": self.workspace.display().to_string(), "mcpServers": []});
        let Some(key) = self.s.request("session/new", params).await else {
            return;
        };
        match self
            .s
            .answer(&mut self.role, &key, "session/new", REQUEST_DEADLINE)
            .await
        {
            Some(Ok(result)) => self.set_session(result),
            Some(Err(e)) => match outside_protocol("session/new", &e) {
                Some(why) => self.s.ev.skip(why, SkipKind::Outside),
                None => {
                    self.s
                        .ev
                        .fail(Kind::WrongKind, format!("setup: session/new failed: {e}"));
                }
            },
            None => {}
        }
    }

    /// The variables a `session/new` result gives the steps.
    fn set_session(&mut self, result: Value) {
        self.s.vars.set(
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
            self.s.vars.set("modeId", m);
        }
        if let Some(o) = result
            .get("configOptions")
            .and_then(Value::as_array)
            .and_then(|o| o.first())
        {
            self.s
                .vars
                .set("configId", o.get("id").cloned().unwrap_or(Value::Null));
            self.s.vars.set(
                "configValue",
                o.get("currentValue").cloned().unwrap_or(Value::Null),
            );
        }
        self.s.vars.set("new", result);
    }

    async fn step(&mut self, index: usize, step: &Step) {
        let requests_before = self.s.watch.agent_requests.len();
        let updates_before = self.s.watch.updates.len();
        let before = (requests_before, updates_before);
        match &step.action {
            Action::Write(bytes) => {
                let Some(bytes) = self.s.raw_bytes(bytes) else {
                    return;
                };
                if let Some(name) = &step.name {
                    // An answer to bytes that are no request has a null id.
                    self.s.named.insert(
                        name.clone(),
                        (super::monitor::id_key(&Value::Null), format!("`{name}`")),
                    );
                }
                self.s.write_raw(&bytes, &step.pauses).await;
            }
            Action::Send(send) => {
                let Some(params) = self.s.expand(&send.params) else {
                    return;
                };
                if send.notification {
                    self.s
                        .send(&json!({"jsonrpc": "2.0", "method": send.method, "params": params}))
                        .await;
                    return;
                }
                let id = match &send.id {
                    Some(id) => match self.s.expand(id) {
                        Some(v) => v,
                        None => return,
                    },
                    None => self.s.next_id(),
                };
                let message =
                    json!({"jsonrpc": "2.0", "id": id, "method": send.method, "params": params});
                let Some(key) = self.s.send(&message).await else {
                    return;
                };
                // A first initialize may take as long as the agent's start-up.
                let default = if send.method == "initialize" {
                    self.ctx.startup.max(REQUEST_DEADLINE)
                } else {
                    REQUEST_DEADLINE
                };
                self.after_request(step, key, &send.method, default, before)
                    .await;
            }
            Action::Own(Own::Prompt(prompt)) => self.prompt(step, prompt, before).await,
            Action::Await(name) => {
                let Some((key, _)) = self.s.named.get(name).cloned() else {
                    self.s
                        .ev
                        .error(format!("step {index}: no request named `{name}` to await"));
                    return;
                };
                let what = format!("`{name}`");
                let within = step.deadline_or(PROMPT_DEADLINE);
                if let Some(a) = self.s.answer(&mut self.role, &key, &what, within).await {
                    self.judge(step.expect.as_ref(), &what, &a, before);
                }
            }
            Action::WaitFor(method) => {
                let within = step.deadline_or(WAIT_FOR_DEADLINE);
                let m = method.clone();
                // Done when the agent asks, or when no turn is left to ask in.
                let seen = self
                    .s
                    .pump(&mut self.role, Instant::now() + within, &|s| {
                        s.watch.agent_requests.iter().any(|q| q.method == m)
                            || !s.watch.any_turn_running()
                    })
                    .await;
                let asked = self
                    .s
                    .watch
                    .agent_requests
                    .iter()
                    .any(|q| q.method == *method);
                if (!seen || !asked) && self.s.ev.findings.is_empty() {
                    let why = self.why_no_turn().unwrap_or_else(|| {
                        format!(
                            "the agent did not call {method} in the turn (it does not follow conform's prompt script, corpus/acp/SCRIPT.md)"
                        )
                    });
                    self.s.ev.skip(why, SkipKind::Outside);
                }
            }
            Action::Own(Own::Cancel(session)) => self.cancel(session).await,
            Action::Own(Own::Release) => {
                let held = std::mem::take(&mut self.role.held);
                for (id, method, params) in held {
                    let a = self
                        .role
                        .editor
                        .answer(&method, &params, REQUEST_DEADLINE)
                        .await;
                    self.s.send(&a.to_message(&id)).await;
                }
            }
            Action::Quiet(_) | Action::Probe | Action::CloseStdin | Action::ExitsWithin(_) => {
                self.s.common(&mut self.role, step, &PROBE).await;
            }
        }
    }

    /// `session/prompt` on the session the step names (`${session}` by default).
    async fn prompt(&mut self, step: &Step, prompt: &Prompt, before: (usize, usize)) {
        let session = prompt
            .session
            .clone()
            .unwrap_or_else(|| "${session}".into());
        let blocks = match (&prompt.text, &prompt.blocks) {
            (Some(t), _) => json!([{"type": "text", "text": t}]),
            (_, Some(b)) => b.clone(),
            _ => json!([]),
        };
        let Some(params) = self
            .s
            .expand(&json!({"sessionId": session, "prompt": blocks}))
        else {
            return;
        };
        let Some(key) = self.s.request("session/prompt", params).await else {
            return;
        };
        self.after_request(step, key, "session/prompt", PROMPT_DEADLINE, before)
            .await;
    }

    /// `session/cancel` for `session` while its turn runs, then the
    /// cancelled outcome for every permission request held back.
    async fn cancel(&mut self, session: &str) {
        let Some(session) = self.s.expand(&json!(session)) else {
            return;
        };
        if !self
            .s
            .watch
            .turn_running(session.as_str().unwrap_or_default())
        {
            let why = self.why_no_turn().unwrap_or_else(|| {
                "the turn had already ended when conform was to cancel it (the agent does not follow conform's prompt script, corpus/acp/SCRIPT.md)".into()
            });
            self.s.ev.skip(why, SkipKind::Outside);
            return;
        }
        self.s
            .send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
            .await;
        // "The Client MUST respond to all pending session/request_permission
        // requests with the cancelled outcome."
        let held = std::mem::take(&mut self.role.held);
        for (id, method, params) in held {
            if method == "session/request_permission" {
                let a = self.role.editor.permission(&params, Permission::Cancelled);
                self.s.send(&a.to_message(&id)).await;
            } else {
                self.role.held.push((id, method, params));
            }
        }
    }

    async fn after_request(
        &mut self,
        step: &Step,
        key: String,
        method: &str,
        default: Duration,
        before: (usize, usize),
    ) {
        if let Some(name) = &step.name {
            self.s
                .named
                .insert(name.clone(), (key.clone(), method.to_owned()));
        }
        if !step.wait {
            return;
        }
        let within = step.deadline_or(default);
        if let Some(a) = self.s.answer(&mut self.role, &key, method, within).await {
            if let (Some(name), Ok(v)) = (&step.name, &a) {
                self.s.vars.set(name.clone(), v.clone());
            }
            self.judge(step.expect.as_ref(), method, &a, before);
        }
    }

    /// Grades an answer against a step's expectation.
    fn judge(
        &mut self,
        expect: Option<&Expect>,
        method: &str,
        answer: &Result<Value, Value>,
        (requests_before, updates_before): (usize, usize),
    ) {
        let Some(expect) = expect else {
            self.s.conclude(method, answer, vec![]);
            return;
        };
        let rule = expect.rule();
        // A prompt or session that failed for want of credentials or a model
        // says nothing about the protocol.
        if let Err(e) = answer
            && rule == ReplyRule::Result
            && let Some(why) = outside_protocol(method, e)
        {
            self.s.ev.skip(why, SkipKind::Outside);
            return;
        }
        let requested: Vec<String> = self.s.watch.agent_requests[requests_before..]
            .iter()
            .map(|r| r.method.clone())
            .collect();
        if let Some(m) = &expect.skip_unless
            && !requested.contains(m)
        {
            self.s.ev.skip(
                format!(
                    "the agent did not call {m} during {method} (it does not follow conform's prompt script, corpus/acp/SCRIPT.md)"
                ),
                SkipKind::Outside,
            );
            return;
        }
        let updates: Vec<Value> = self.s.watch.updates[updates_before..]
            .iter()
            .map(|(_, u, _)| u.clone())
            .collect();
        if let Some(pattern) = &expect.skip_unless_update {
            let Some(p) = self.s.expand(pattern) else {
                return;
            };
            if !updates.iter().any(|u| self.matches(&p, u)) {
                self.s.ev.skip(
                    format!(
                        "no update during {method} matched {} (the agent does not follow conform's prompt script, corpus/acp/SCRIPT.md)",
                        matcher::brief(&p)
                    ),
                    SkipKind::Outside,
                );
                return;
            }
        }
        let Some(mut found) = self.s.judge(answer, rule, &expect.result, &expect.error) else {
            return;
        };
        for pattern in &expect.updates {
            let Some(p) = self.s.expand(pattern) else {
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
        self.s.conclude(method, answer, found);
    }

    /// Why a turn the case waits on is over already, when it ended with an
    /// error outside the protocol (authentication, the model).
    fn why_no_turn(&self) -> Option<String> {
        self.s
            .answers
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
            &mut self.s.vars.clone(),
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
        let session = self.s.vars.get("session").cloned().unwrap_or(Value::Null);
        let listed = |r: Option<&Value>| -> Vec<Value> {
            r.and_then(|r| r.get("sessions"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        match check {
            NamedCheck::SessionIdsUnique => {
                let ids = &self.s.watch.new_session_ids;
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
                .role
                .editor
                .created
                .iter()
                .filter(|t| !self.role.editor.released.contains(t))
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
                .s
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
                    .s
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::transport::serve::testing::memory;

    const TURN: &str = r#"{"id":"t/turn","title":"a turn","level":"MUST","requirements":["acp.prompt.stop-reason"],
        "steps":[{"prompt":{"text":"hello"},"expect":{"result":{"stopReason":"end_turn"}}}]}"#;

    /// The case `json` against the reference agent bent by `bend`, in memory.
    async fn run(bend: fn(&mut Value) -> bool, json: &str) -> CaseResult {
        let launcher = memory(super::super::reference::Agent::new, bend);
        let probe = probe(&launcher, Duration::from_secs(10)).await.unwrap();
        let ctx = Context {
            launcher,
            strict: false,
            probe,
            startup: Duration::from_secs(10),
        };
        let case = crate::case::parse_cases::<super::super::AgentCases>("test", json)
            .unwrap()
            .remove(0);
        ctx.run_case(&case).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_turn_passes_over_the_in_memory_channel() {
        let r = run(|_| true, TURN).await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
        assert!(r.findings.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_reason_the_schema_lacks_is_a_typed_schema_finding() {
        let r = run(
            |m| {
                if let Some(reason) = m.pointer_mut("/result/stopReason") {
                    *reason = json!("done");
                }
                true
            },
            TURN,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let schema = r
            .findings
            .iter()
            .find(|f| f.requirement.as_deref() == Some(super::super::monitor::rules::SCHEMA))
            .expect("a schema finding");
        assert_eq!(schema.kind, Kind::Shape);
        let mismatch = r
            .findings
            .iter()
            .find(|f| f.kind == Kind::Mismatch)
            .unwrap();
        assert_eq!(mismatch.expected.as_deref(), Some("\"end_turn\""));
        assert_eq!(mismatch.actual.as_deref(), Some("\"done\""));
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_never_ends_is_a_missing_answer_at_the_prompt_deadline() {
        let r = run(|m| m.pointer("/result/stopReason").is_none(), TURN).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
        assert!(
            r.findings[0].message.contains("nothing within 60s"),
            "{}",
            r.message
        );
    }

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
