//! The editor's view of one connection, sans-IO: conform tells it every
//! message it sends (`sent`) and every line the agent writes (`received`),
//! and it keeps what every case checks whatever the case is about: only ACP
//! messages on stdout, the schema of each message for its method and
//! direction, ids echoed exactly, no answer to a notification, client
//! methods only when the client advertised them, session ids the agent gave,
//! absolute paths, and no turn update after the turn's response.

use super::schema::{self, Side};
use super::table;
use crate::drive::stdio::{self, Watch};
use crate::evidence::{Evidence, Finding, Kind};
use crate::fuzz::readings::{Id, Readings};
use crate::keep::Keep;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The requirement each watched rule belongs to (ids of the catalogue).
pub mod rules {
    pub const STDOUT_ONLY: &str = "acp.transport.stdout-only-messages";
    pub const NEWLINE_DELIMITED: &str = "acp.transport.newline-delimited-agent";
    pub const STDIO_STREAMS: &str = "acp.transport.stdio-streams";
    pub const SINGLE_MESSAGES: &str = "acp.transport.single-messages";
    pub const UTF8: &str = "acp.transport.utf8-agent";
    pub const ENVELOPE: &str = "acp.jsonrpc.envelope";
    pub const RESULT_FIELD: &str = "acp.error.result-field";
    pub const ERROR_OBJECT: &str = "acp.error.error-object";
    pub const ID_ECHO: &str = "acp.jsonrpc.id-echo";
    pub const ID_INT64: &str = "acp.jsonrpc.id-int64";
    pub const REPLY: &str = "acp.jsonrpc.reply-to-request";
    pub const NOTIFICATION_UNANSWERED: &str = "acp.error.no-response-to-notification";
    pub const SCHEMA: &str = "acp.schema.agent-messages";
    pub const ABSOLUTE_PATHS: &str = "acp.general.absolute-paths-agent";
    pub const LINES_ONE_BASED: &str = "acp.general.line-numbers-one-based";
    pub const SESSION_BOUND: &str = "acp.session.known-id";
    pub const UPDATES_BEFORE_RESPONSE: &str = "acp.cancel.updates-before-response";
    pub const STOP_AFTER_CANCEL: &str = "acp.cancel.stop-work";
    pub const LOAD_REPLAY_BEFORE_RESPONSE: &str = "acp.load.respond-after-replay";
    pub const RESUME_NO_REPLAY: &str = "acp.session.resume-no-replay";
    pub const TOOL_ID_UNIQUE: &str = "acp.tool.call-id-unique";
    pub const TOOL_UPDATE_ANNOUNCED: &str = "acp.tool.update-announced";
    pub const REJECTED_NOT_RUN: &str = "acp.tool.rejected-not-run";

    /// The rules checked on every line of every case, whatever it does: any
    /// case that ran exercised them.
    pub const EVERY_MESSAGE: &[&str] = &[
        STDOUT_ONLY,
        NEWLINE_DELIMITED,
        STDIO_STREAMS,
        SINGLE_MESSAGES,
        UTF8,
        ENVELOPE,
        RESULT_FIELD,
        ERROR_OBJECT,
        ID_ECHO,
        SCHEMA,
    ];

    /// Every id above, for the test that checks them against the catalogue.
    pub const ALL: &[&str] = &[
        STDOUT_ONLY,
        NEWLINE_DELIMITED,
        STDIO_STREAMS,
        SINGLE_MESSAGES,
        UTF8,
        ENVELOPE,
        RESULT_FIELD,
        ERROR_OBJECT,
        ID_ECHO,
        ID_INT64,
        REPLY,
        NOTIFICATION_UNANSWERED,
        SCHEMA,
        ABSOLUTE_PATHS,
        LINES_ONE_BASED,
        SESSION_BOUND,
        UPDATES_BEFORE_RESPONSE,
        STOP_AFTER_CANCEL,
        LOAD_REPLAY_BEFORE_RESPONSE,
        RESUME_NO_REPLAY,
        TOOL_ID_UNIQUE,
        TOOL_UPDATE_ANNOUNCED,
        REJECTED_NOT_RUN,
    ];
}

/// A rule the agent broke, with the requirement it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub requirement: String,
    pub kind: Kind,
    pub message: String,
}

/// A message the agent sent, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The agent asks the client something; conform must answer.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The answer to a request conform sent (`key` as `sent` returned it).
    Response {
        key: String,
        method: String,
        outcome: Result<Value, Value>,
    },
    /// A line that is no message conform can act on (already a violation,
    /// or a response nobody asked for).
    Unusable,
}

/// Where a session is, from the editor's side.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SessionState {
    /// No turn: turn updates are out of place.
    Idle,
    /// A `session/prompt` (key) is unanswered.
    Turn(String),
    /// A `session/load` (key) is unanswered: replayed history is expected.
    Loading(String),
    /// A `session/resume` (key) is unanswered: no replay may come.
    Resuming(String),
    /// Idle after a `session/load` answered: a late replay is out of place.
    Loaded,
}

#[derive(Debug, Clone)]
struct Outstanding {
    id: Value,
    /// The id by value: a number however spelled (`7`, `7.0`, `-0` and `0`).
    exact: Id,
    method: String,
    params: Value,
}

/// A response that answered none of conform's requests while `waiting`
/// (their keys) were outstanding; `violation` indexes its violation.
#[derive(Debug, Clone)]
struct Stray {
    violation: usize,
    waiting: Vec<String>,
    /// The violation's message once the stray is settled.
    settled: String,
}

/// One request the agent made, for the cases that check what it asked.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRequest {
    pub id: Value,
    pub method: String,
    pub params: Value,
    /// How many turn responses had arrived before it (which turn it is in).
    pub turn: usize,
}

#[derive(Debug, Default)]
pub struct Monitor {
    client_capabilities: Value,
    agent_capabilities: Option<Value>,
    outstanding: HashMap<String, Outstanding>,
    /// Responses that answered none of conform's requests while some were
    /// outstanding: each one's violation reads it as one of those answered
    /// under another id, until every one of them is answered with its own.
    strays: Vec<Stray>,
    /// Where results broke the schema (`result.protocolVersion`): a case's
    /// pattern that then mismatches there adds nothing to that finding.
    broken_fields: Vec<String>,
    /// Ids conform sent again while a request with the id was outstanding
    /// (the fuzzer's repeated ids), and how many more answers they may get
    /// than `outstanding` holds. The agent may answer each request; which
    /// answer is whose the id cannot tell, so none is read as a method's.
    repeated: HashMap<String, usize>,
    sessions: BTreeMap<String, SessionState>,
    /// Session ids in the order `session/new` returned them.
    pub new_session_ids: Vec<String>,
    /// The agent's requests, kept within `kept`.
    pub agent_requests: Vec<AgentRequest>,
    /// The session updates received, kept within `kept`: (session id,
    /// update, turn count).
    pub updates: Vec<(String, Value, usize)>,
    /// The account of what `agent_requests` and `updates` keep: a target
    /// that floods them does not grow conform.
    pub kept: Keep,
    /// Turn responses received so far.
    pub turns_ended: usize,
    pub violations: Vec<Violation>,
    /// Lines conform wrote that the agent may answer with a null-id error
    /// (a parse error, an invalid request), so such an error is not
    /// mistaken for an answer to nothing.
    malformed_sent: usize,
    null_id_errors: usize,
    /// Of those, lines in which no reader finds an id (not JSON, no `id`):
    /// an error with an id that answers nothing else answers one of them.
    idless_sent: usize,
    idless_misanswered: usize,
    seen_violation: BTreeSet<(String, String)>,
    /// What each session's turns did with tool calls, permissions and cancels.
    flows: HashMap<String, Flow>,
    /// The agent's requests conform has not answered yet, by id key: what
    /// conform's answer means depends on what was asked.
    asked: HashMap<String, (String, Value)>,
    /// Requirements whose triggering behaviour this connection showed.
    pub exercised: BTreeSet<&'static str>,
    /// Fields at the root of a result that the vendored schema does not
    /// define: (method, field).
    pub unknown_root_fields: BTreeSet<(String, String)>,
    /// Messages the schema refuses and a v1 page shows so: accepted, each
    /// with the note that names both sources (`schema::PAGE_READINGS`).
    pub page_readings: BTreeSet<String>,
}

/// The most tool call ids (and agent requests) a connection keeps track of:
/// a flood of them does not grow conform.
const TRACKED: usize = 10_000;

/// What conform knows of one session's tool calls, permissions and cancel.
#[derive(Debug, Default)]
struct Flow {
    /// Prompts conform sent on the session (the current turn's number).
    turns: usize,
    /// Tool call id -> the turn it was announced in.
    announced: HashMap<String, usize>,
    /// Turns in which the agent announced a tool call.
    turns_with_tools: BTreeSet<usize>,
    /// Tool calls whose permission conform rejected, or answered `cancelled`.
    rejected: BTreeSet<String>,
    cancelled: BTreeSet<String>,
    /// A tool call rejected in this turn with no other announced since:
    /// the client requests that follow would run it.
    after_reject: Option<String>,
    /// conform sent session/cancel during this turn.
    cancel_sent: bool,
    /// ...and has answered a request of the agent since, so the agent has
    /// read the cancel: from here on a new tool runs after it.
    cancel_read: bool,
}

/// Client requests that carry out a tool: what must not follow a rejection
/// (or, as far as the agent can help it, a cancel).
const RUNS_A_TOOL: &[&str] = &["fs/read_text_file", "fs/write_text_file", "terminal/create"];

/// The map key of a request id: its JSON text, so 1 and "1" differ.
pub fn id_key(id: &Value) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl Monitor {
    pub fn new() -> Monitor {
        Monitor {
            client_capabilities: Value::Object(Map::new()),
            ..Monitor::default()
        }
    }

    /// The view of a connection that shook hands before the case: the
    /// client advertised `client_capabilities`, the agent answered
    /// `agent_capabilities`, and gave the sessions `sessions` (idle).
    pub fn resumed(
        client_capabilities: Value,
        agent_capabilities: Option<Value>,
        sessions: &[String],
    ) -> Monitor {
        Monitor {
            client_capabilities,
            agent_capabilities: Some(agent_capabilities.unwrap_or(Value::Object(Map::new()))),
            sessions: sessions
                .iter()
                .map(|s| (s.clone(), SessionState::Idle))
                .collect(),
            ..Monitor::default()
        }
    }

    /// Every session the connection knows of so far.
    pub fn session_ids(&self) -> Vec<String> {
        self.sessions.keys().cloned().collect()
    }

    /// The agent's capabilities from its `initialize` result, once known.
    pub fn agent_capabilities(&self) -> Option<&Value> {
        self.agent_capabilities.as_ref()
    }

    fn violate(&mut self, requirement: &str, kind: Kind, message: String) {
        // The same finding twice in one case says nothing new.
        if self
            .seen_violation
            .insert((requirement.to_owned(), message.clone()))
        {
            self.violations.push(Violation {
                requirement: requirement.to_owned(),
                kind,
                message,
            });
        }
    }

    /// Records a message conform wrote. Returns the key of a request.
    pub fn sent(&mut self, message: &Value) -> Option<String> {
        let exact = message.get("id").map(Id::from_value);
        self.sent_exact(message, exact)
    }

    /// [`Monitor::sent`] with the id as conform's reading of the bytes has it
    /// (exact where a value is not: `1e400`).
    fn sent_exact(&mut self, message: &Value, exact: Option<Id>) -> Option<String> {
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            // conform's answer to a request of the agent.
            if let Some(id) = message.get("id") {
                self.answered_agent(id, message.get("result"));
            }
            return None;
        };
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        if method == "initialize" {
            self.client_capabilities = params
                .get("clientCapabilities")
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
        }
        if method == "session/cancel"
            && let Some(session) = params.get("sessionId").and_then(Value::as_str)
            && self.turn_running(session)
        {
            self.flows
                .entry(session.to_owned())
                .or_default()
                .cancel_sent = true;
        }
        let id = message.get("id")?;
        let key = id_key(id);
        if method == "session/prompt"
            && let Some(session) = params.get("sessionId").and_then(Value::as_str)
        {
            self.flows.entry(session.to_owned()).or_default().turns += 1;
        }
        if let Some(session) = params.get("sessionId").and_then(Value::as_str) {
            let state = match method {
                "session/prompt" => Some(SessionState::Turn(key.clone())),
                "session/load" => Some(SessionState::Loading(key.clone())),
                "session/resume" => Some(SessionState::Resuming(key.clone())),
                _ => None,
            };
            if let Some(state) = state {
                self.sessions.insert(session.to_owned(), state);
            }
        }
        self.expect_answer(
            key.clone(),
            Outstanding {
                id: id.clone(),
                exact: exact.unwrap_or_else(|| Id::from_value(id)),
                method: method.to_owned(),
                params,
            },
        );
        Some(key)
    }

    /// Expects an answer to `out` under `key`. A key already outstanding
    /// (conform repeated an id) then expects one answer more: of the method
    /// both requests are, when they are the same request, else of none.
    fn expect_answer(&mut self, key: String, out: Outstanding) {
        match self.outstanding.get_mut(&key) {
            Some(already) => {
                *self.repeated.entry(key).or_default() += 1;
                if already.method != out.method || already.params != out.params {
                    already.method = String::new();
                    already.params = Value::Null;
                }
            }
            None => {
                self.outstanding.insert(key, out);
            }
        }
    }

    /// The request an answer under `key` answers; a repeated id stays
    /// outstanding until each of its requests has had one.
    fn take_outstanding(&mut self, key: &str) -> Option<Outstanding> {
        let out = self.outstanding.remove(key)?;
        if let Some(more) = self.repeated.get_mut(key) {
            *more -= 1;
            if *more == 0 {
                self.repeated.remove(key);
            }
            self.outstanding.insert(key.to_owned(), out.clone());
        }
        // A stray whose every candidate request got its own answer answered
        // none of them: a notification answered, or a request twice.
        let outstanding = &self.outstanding;
        let (settled, waiting): (Vec<Stray>, Vec<Stray>) = std::mem::take(&mut self.strays)
            .into_iter()
            .partition(|s| s.waiting.iter().all(|k| !outstanding.contains_key(k)));
        self.strays = waiting;
        for s in settled {
            let v = &mut self.violations[s.violation];
            v.requirement = rules::NOTIFICATION_UNANSWERED.to_owned();
            v.kind = Kind::Unexpected;
            v.message = s.settled;
        }
        Some(out)
    }

    /// Whether a response came under an id conform never sent while a
    /// request that is still unanswered was outstanding: that request's
    /// missing answer is the id's fault, which its violation names.
    pub fn answered_under_another_id(&self) -> bool {
        !self.strays.is_empty()
    }

    /// conform answered the agent's request `id` (with `result`, or an
    /// error): a permission it rejected or cancelled, or any answer after a
    /// cancel, which the agent then has read.
    fn answered_agent(&mut self, id: &Value, result: Option<&Value>) {
        let Some((method, params)) = self.asked.remove(&id_key(id)) else {
            return;
        };
        let Some(session) = params.get("sessionId").and_then(Value::as_str) else {
            return;
        };
        let flow = self.flows.entry(session.to_owned()).or_default();
        if flow.cancel_sent {
            flow.cancel_read = true;
        }
        if method != "session/request_permission" {
            return;
        }
        let Some(tool) = params
            .pointer("/toolCall/toolCallId")
            .and_then(Value::as_str)
        else {
            return;
        };
        let outcome = result.and_then(|r| r.get("outcome"));
        match outcome
            .and_then(|o| o.get("outcome"))
            .and_then(Value::as_str)
        {
            Some("selected") => {
                let chosen = outcome.and_then(|o| o.get("optionId"));
                let kind = params
                    .get("options")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|o| o.get("optionId") == chosen)
                    .and_then(|o| o.get("kind"))
                    .and_then(Value::as_str);
                if matches!(kind, Some("reject_once" | "reject_always")) {
                    flow.rejected.insert(tool.to_owned());
                    flow.after_reject = Some(tool.to_owned());
                    self.exercised.insert(rules::REJECTED_NOT_RUN);
                }
            }
            Some("cancelled") => {
                flow.cancelled.insert(tool.to_owned());
            }
            _ => {}
        }
    }

    /// Records that conform wrote something that is not a request it expects
    /// a normal answer to (a malformed line, an invalid request): the agent
    /// may answer it with an error whose id is null.
    pub fn sent_malformed(&mut self) {
        self.malformed_sent += 1;
    }

    /// Records a message conform wrote whose id the agent can read although
    /// the message is no valid request: the agent may answer it with that id.
    pub fn sent_invalid_with_id(&mut self, id: &Value) {
        self.expect_answer(
            id_key(id),
            Outstanding {
                id: id.clone(),
                exact: Id::from_value(id),
                method: String::new(),
                params: Value::Null,
            },
        );
    }

    /// Whether a request conform sent is still unanswered.
    pub fn is_outstanding(&self, key: &str) -> bool {
        self.outstanding.contains_key(key)
    }

    /// Reads one line the agent wrote on stdout.
    pub fn received(&mut self, line: &[u8]) -> Incoming {
        // "JSON-RPC messages MUST be UTF-8 encoded."
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                self.violate(
                    rules::UTF8,
                    Kind::Malformed,
                    format!("a line on stdout is not UTF-8 ({e})"),
                );
                return Incoming::Unusable;
            }
        };
        // "The agent MUST NOT write anything to its stdout that is not a valid ACP message."
        let value: Value = match crate::jsonrpc::parse_json(text.as_bytes()) {
            Ok(v) => v,
            Err(e) => {
                self.violate(
                    rules::STDOUT_ONLY,
                    Kind::Malformed,
                    format!(
                        "a line on stdout is not a JSON message ({e}): {}",
                        crate::matcher::truncate(text, 160)
                    ),
                );
                return Incoming::Unusable;
            }
        };
        let Value::Object(o) = value else {
            self.violate(
                rules::STDOUT_ONLY,
                Kind::Malformed,
                format!(
                    "a line on stdout is JSON but not a JSON-RPC message object: {}",
                    crate::matcher::truncate(text, 160)
                ),
            );
            return Incoming::Unusable;
        };
        if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            self.violate(
                rules::ENVELOPE,
                Kind::Envelope,
                format!(
                    "`jsonrpc` is {}, not \"2.0\": {}",
                    o.get("jsonrpc")
                        .map(Value::to_string)
                        .unwrap_or("missing".into()),
                    crate::matcher::truncate(text, 160)
                ),
            );
        }
        match (o.get("method"), o.get("id")) {
            (Some(Value::String(m)), Some(id)) => {
                let (m, id) = (m.clone(), id.clone());
                self.request(m, id, o)
            }
            (Some(Value::String(m)), None) => {
                let m = m.clone();
                self.notification(m, o)
            }
            (Some(other), _) => {
                self.violate(
                    rules::ENVELOPE,
                    Kind::Envelope,
                    format!("`method` is {other}, not a string"),
                );
                Incoming::Unusable
            }
            (None, _) => self.response(o),
        }
    }

    /// Checks `value` against `def`; whether it breaks it.
    fn check_schema(&mut self, def: &str, what: &str, value: &Value) -> bool {
        match schema::schema().judge(def, value) {
            schema::Judged::Valid => false,
            schema::Judged::Broken(errors) => {
                self.violate(
                    rules::SCHEMA,
                    Kind::Shape,
                    format!("{what} breaks the schema ({def}): {}", errors.join("; ")),
                );
                true
            }
            // Where a page and the schema disagree, both readings pass.
            schema::Judged::PageReading(note) => {
                if self.page_readings.len() < 16 {
                    self.page_readings.insert(format!("{what}: {note}"));
                }
                false
            }
        }
    }

    fn known_session(&mut self, params: &Value, what: &str) -> Option<String> {
        let session = params.get("sessionId").and_then(Value::as_str)?.to_owned();
        if !self.sessions.contains_key(&session) {
            self.violate(
                rules::SESSION_BOUND,
                Kind::Rule,
                format!("{what} names session {session:?}, which the agent never gave this client"),
            );
        }
        Some(session)
    }

    fn request(&mut self, method: String, id: Value, o: Map<String, Value>) -> Incoming {
        let params = o.get("params").cloned().unwrap_or(Value::Null);
        let what = format!("the agent's {method} request");
        match schema::schema().method(&method) {
            Some(m) if m.side == Side::Client && !m.is_notification() => {
                let def = m.params.clone();
                self.check_schema(&def, &what, &params);
            }
            Some(m) if m.side == Side::Agent => self.violate(
                rules::SCHEMA,
                Kind::Shape,
                format!("the agent sent {method}, a method the client sends to the agent"),
            ),
            _ => {}
        }
        // "If `readTextFile` or `writeTextFile` is `false` or not present, the
        // Agent MUST NOT attempt to call the corresponding filesystem method."
        // "If `terminal` is `false` or not present, the Agent MUST NOT attempt
        // to call any terminal methods."
        if let Some(g) = table::gate(table::CLIENT_GATES, &method)
            && !table::advertised(&self.client_capabilities, g.capability)
        {
            self.violate(
                g.requirement, Kind::Unexpected,
                format!(
                    "the agent called {method} although the client did not advertise clientCapabilities{}",
                    g.capability.replace('/', ".")
                ),
            );
        }
        // "All file paths in the protocol MUST be absolute."
        for field in ["path", "cwd"] {
            if let Some(p) = params.get(field).and_then(Value::as_str)
                && !p.starts_with('/')
            {
                self.violate(
                    rules::ABSOLUTE_PATHS,
                    Kind::Rule,
                    format!("{what} has `{field}` {p:?}, not an absolute path"),
                );
            }
        }
        let session = self.known_session(&params, &what);
        // "Line numbers are 1-based"
        if method == "fs/read_text_file" {
            self.check_line(params.get("line"), &what);
        }
        if let Some(session) = &session {
            self.tool_request(session, &method, &params, &what);
        }
        if self.asked.len() < TRACKED {
            self.asked
                .insert(id_key(&id), (method.clone(), params.clone()));
        }
        if let Some(kept) = self.kept.admit(params.clone()) {
            self.agent_requests.push(AgentRequest {
                id: id.clone(),
                method: method.clone(),
                params: kept,
                turn: self.turns_ended,
            });
        }
        Incoming::Request { id, method, params }
    }

    /// "Line numbers are 1-based": a line number below 1 is not one.
    fn check_line(&mut self, line: Option<&Value>, what: &str) {
        let Some(line) = line.filter(|l| !l.is_null()) else {
            return;
        };
        self.exercised.insert(rules::LINES_ONE_BASED);
        if line.as_f64().is_some_and(|n| n < 1.0) {
            self.violate(
                rules::LINES_ONE_BASED,
                Kind::Rule,
                format!("{what} has the line number {line}; line numbers are 1-based"),
            );
        }
    }

    /// The lines of a tool call's `locations`.
    fn check_locations(&mut self, tool: &Value, what: &str) {
        let lines: Vec<Value> = tool
            .get("locations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| l.get("line").cloned())
            .collect();
        for line in lines {
            self.check_line(Some(&line), what);
        }
    }

    /// A client request of the agent in `session`'s turn: a permission
    /// request may introduce its tool call; a request that carries out a
    /// tool must not follow a rejection, nor (a SHOULD) a cancel.
    fn tool_request(&mut self, session: &str, method: &str, params: &Value, what: &str) {
        let flow = self.flows.entry(session.to_owned()).or_default();
        if method == "session/request_permission" {
            let tool = params.get("toolCall").cloned().unwrap_or(Value::Null);
            if let Some(id) = tool.get("toolCallId").and_then(Value::as_str) {
                if flow.announced.len() < TRACKED {
                    flow.announced.entry(id.to_owned()).or_insert(flow.turns);
                }
                if flow.after_reject.as_deref() != Some(id) {
                    flow.after_reject = None;
                }
            }
            self.check_locations(&tool, what);
            return;
        }
        if !RUNS_A_TOOL.contains(&method) {
            return;
        }
        let after_reject = flow.after_reject.clone();
        let after_cancel = flow.cancel_read;
        if let Some(tool) = after_reject {
            // "`reject_once` - Reject this operation only this time"
            self.violate(
                rules::REJECTED_NOT_RUN,
                Kind::Unexpected,
                format!(
                    "{what} came after the client rejected tool call {tool:?} in session {session:?}, with no other tool call announced since: the rejected operation ran"
                ),
            );
        } else if after_cancel {
            // "When the Agent receives this notification, it SHOULD stop all
            // language model requests and all tool call invocations as soon
            // as possible."
            self.violate(
                rules::STOP_AFTER_CANCEL,
                Kind::Unexpected,
                format!(
                    "{what} came after the client cancelled the turn of session {session:?} (and answered a request since, so the agent had read the cancel)"
                ),
            );
        }
    }

    /// A `tool_call` or `tool_call_update` of `session`.
    fn tool_update(&mut self, session: &str, kind: &str, update: &Value) {
        let Some(id) = update.get("toolCallId").and_then(Value::as_str) else {
            return;
        };
        let id = id.to_owned();
        let status = update.get("status").and_then(Value::as_str);
        let what = format!("a {kind} update of tool call {id:?}");
        self.check_locations(update, &what);
        let flow = self.flows.entry(session.to_owned()).or_default();
        let turn = flow.turns;
        if kind == "tool_call" {
            let earlier = flow.announced.get(&id).copied();
            flow.turns_with_tools.insert(turn);
            if flow.announced.len() < TRACKED {
                flow.announced.entry(id.clone()).or_insert(turn);
            }
            if flow.after_reject.as_deref() != Some(id.as_str()) {
                flow.after_reject = None;
            }
            let several_turns = flow.turns_with_tools.len() > 1;
            if several_turns {
                self.exercised.insert(rules::TOOL_ID_UNIQUE);
            }
            // "A unique identifier for this tool call within the session"
            if let Some(t) = earlier
                && t != turn
            {
                self.violate(
                    rules::TOOL_ID_UNIQUE,
                    Kind::Rule,
                    format!(
                        "a tool_call announces the id {id:?} in turn {turn} of session {session:?}, which the agent announced in turn {t} already: tool call ids are unique within the session"
                    ),
                );
            }
            return;
        }
        let announced = flow.announced.contains_key(&id);
        let rejected = flow.rejected.contains(&id);
        let cancelled = flow.cancelled.contains(&id);
        self.exercised.insert(rules::TOOL_UPDATE_ANNOUNCED);
        // "The ID of the tool call being updated."
        if !announced {
            self.violate(
                rules::TOOL_UPDATE_ANNOUNCED,
                Kind::Rule,
                format!(
                    "{what} in session {session:?}: the agent never announced that tool call (no tool_call update, no permission request named it)"
                ),
            );
        }
        if status == Some("completed") && rejected {
            self.violate(
                rules::REJECTED_NOT_RUN,
                Kind::Unexpected,
                format!(
                    "{what} reports it completed, although the client rejected its permission request: the rejected operation ran"
                ),
            );
        } else if status == Some("completed") && cancelled {
            self.violate(
                rules::STOP_AFTER_CANCEL,
                Kind::Unexpected,
                format!(
                    "{what} reports it completed after the client answered its permission request `cancelled`"
                ),
            );
        }
    }

    fn notification(&mut self, method: String, o: Map<String, Value>) -> Incoming {
        let params = o.get("params").cloned().unwrap_or(Value::Null);
        if method == "session/update" {
            self.check_schema("SessionNotification", "a session/update", &params);
            let kind = params
                .pointer("/update/sessionUpdate")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if let Some(session) = self.known_session(&params, &format!("a {kind} update")) {
                self.check_update_timing(&session, &kind);
                let update = params.get("update").cloned().unwrap_or(Value::Null);
                if kind == "tool_call" || kind == "tool_call_update" {
                    self.tool_update(&session, &kind, &update);
                }
                if let Some(update) = self.kept.admit(update) {
                    self.updates.push((session, update, self.turns_ended));
                }
            }
        } else if let Some(m) = schema::schema().method(&method)
            && m.is_notification()
            && m.side != Side::Agent
        {
            let def = m.params.clone();
            self.check_schema(&def, &format!("the agent's {method}"), &params);
        }
        Incoming::Notification { method, params }
    }

    fn check_update_timing(&mut self, session: &str, kind: &str) {
        if !table::TURN_UPDATES.contains(&kind) {
            return;
        }
        let running: Vec<String> = self
            .sessions
            .iter()
            .filter(|(s, st)| s.as_str() != session && matches!(st, SessionState::Turn(_)))
            .map(|(s, _)| s.clone())
            .collect();
        match self.sessions.get(session) {
            // "The ID of the session this update pertains to.": with a turn
            // running in another session only, the update is that turn's.
            Some(SessionState::Idle | SessionState::Loaded) if running.len() == 1 => self.violate(
                rules::SESSION_BOUND, Kind::Rule,
                format!(
                    "a {kind} update names session {session:?}, which has no turn running, while the turn of session {:?} runs: the update names the wrong session",
                    running[0]
                ),
            ),
            // "The Agent MAY send session/update notifications ... after
            // receiving the session/cancel notification, but it MUST ensure
            // that it does so before responding to the session/prompt request."
            Some(SessionState::Idle) => self.violate(
                rules::UPDATES_BEFORE_RESPONSE, Kind::Unexpected,
                format!(
                    "a {kind} update for session {session:?} arrived after the response that ended its turn (or before any turn)"
                ),
            ),
            // "Unlike session/load, the Agent MUST NOT replay the conversation
            // history via session/update notifications before responding."
            // "When all the conversation entries have been streamed to the
            // Client, the Agent MUST respond to the original session/load request."
            Some(SessionState::Loaded) => self.violate(
                rules::LOAD_REPLAY_BEFORE_RESPONSE, Kind::Unexpected,
                format!("a {kind} update for session {session:?} arrived after the session/load response"),
            ),
            Some(SessionState::Resuming(_)) => self.violate(
                rules::RESUME_NO_REPLAY, Kind::Unexpected,
                format!("a {kind} update for session {session:?} arrived while session/resume was unanswered"),
            ),
            _ => {}
        }
    }

    fn response(&mut self, o: Map<String, Value>) -> Incoming {
        let id = o.get("id").cloned();
        let has_result = o.contains_key("result");
        let has_error = o.contains_key("error");
        if has_result == has_error {
            self.violate(
                rules::ENVELOPE,
                Kind::Envelope,
                format!(
                    "a response carries {} (exactly one is required): {}",
                    if has_result {
                        "both `result` and `error`"
                    } else {
                        "neither `result` nor `error`"
                    },
                    crate::matcher::truncate(&Value::Object(o.clone()).to_string(), 160)
                ),
            );
        }
        let id = match id {
            Some(id) => id,
            // "If there was an error in detecting the id in the Request
            // object (e.g. Parse error/Invalid Request), it MUST be Null."
            None if has_error => {
                self.violate(
                    rules::ENVELOPE, Kind::Envelope,
                    "an error response has no `id` (JSON-RPC 2.0: it is null when the request's id could not be read)".into(),
                );
                Value::Null
            }
            None => {
                self.violate(
                    rules::ENVELOPE,
                    Kind::Envelope,
                    "a message has neither `method` nor `id`".into(),
                );
                return Incoming::Unusable;
            }
        };
        let mut key = id_key(&id);
        // "It MUST be the same as the value of the id member": a number is
        // the same value however it is spelled (7.0 for 7, 0 for -0).
        if !self.outstanding.contains_key(&key) && !id.is_null() {
            let exact = Id::from_value(&id);
            if let Some((k, _)) = self.outstanding.iter().find(|(_, o)| o.exact == exact) {
                key = k.clone();
            }
        }
        // A null-id error may be about a line no reader could take (its id
        // "MUST be Null"), or answer a request conform sent with a null id.
        // The line comes first: an error read as a turn's end that was not
        // one would fail the turn's later updates; left unread, a request
        // conform sent with a null id only stays outstanding.
        if id.is_null() && has_error && !has_result && self.null_id_errors < self.malformed_sent {
            self.null_id_errors += 1;
            let error = o.get("error").cloned().unwrap_or(Value::Null);
            self.check_schema("Error", "an error response", &error);
            return Incoming::Response {
                key,
                method: String::new(),
                outcome: Err(error),
            };
        }
        // A request with a null id is a request ("MUST contain a String,
        // Number, or NULL value if included"): a null-id result answers it,
        // under the key its request was sent with.
        let Some(out) = self.take_outstanding(&key) else {
            // 2^53 + 1 answered as 2^53: a parser that reads numbers as
            // doubles (RFC 8259 section 6 allows it), not the schema's int64.
            if let Some(near) = self
                .outstanding
                .values()
                .find(|p| rounded_to_double(&p.id, &id))
                .cloned()
            {
                self.violate(
                    rules::ID_INT64,
                    Kind::Envelope,
                    format!(
                        "the response to {} has id {id}, the request's id was {}: the id came back rounded to the nearest double. The schema types a numeric id as int64 (RequestId), so it should come back exactly; RFC 8259 section 6 lets a JSON parser limit numbers to binary64, so this is graded SHOULD (ids within 2^53 must come back exactly)",
                        near.method, near.id
                    ),
                );
                self.take_outstanding(&id_key(&near.id));
                return self.answered(id_key(&near.id), near, o);
            }
            // Same id, other JSON type: 7 answered as "7", or the reverse.
            if let Some(near) = self
                .outstanding
                .values()
                .find(|p| loosely_same(&p.id, &id))
                .cloned()
            {
                self.violate(
                    rules::ID_ECHO,
                    Kind::Envelope,
                    format!(
                        "the response to {} has id {id}, the request's id was {}",
                        near.method, near.id
                    ),
                );
                self.take_outstanding(&id_key(&near.id));
                return self.answered(id_key(&near.id), near, o);
            }
            // An error that answers none of conform's requests while a line
            // it sent could not be read answers that line: "If there was an
            // error in detecting the id in the Request object (e.g. Parse
            // error/Invalid Request), it MUST be Null."
            if has_error && !has_result && self.idless_misanswered < self.idless_sent {
                self.idless_misanswered += 1;
                self.violate(
                    rules::ID_ECHO,
                    Kind::Envelope,
                    format!(
                        "an error with id {id} answers a line conform sent that had no readable id (it answers none of conform's requests): its id must be null"
                    ),
                );
                return Incoming::Unusable;
            }
            let text = crate::matcher::truncate(&Value::Object(o).to_string(), 160);
            // With requests of conform's outstanding, one of them may be
            // what it answers, under another id ("the Server MUST reply with
            // the same value"); settled when they are all answered.
            let mut waiting: Vec<(String, String)> = self
                .outstanding
                .iter()
                .map(|(k, p)| (k.clone(), format!("{} (id {})", p.method, p.id)))
                .collect();
            waiting.sort();
            let settled = format!(
                "a response with id {id} answers no request conform has outstanding (a notification answered, or a request answered twice): {text}"
            );
            if waiting.is_empty() {
                self.violate(rules::NOTIFICATION_UNANSWERED, Kind::Unexpected, settled);
            } else {
                let before = self.violations.len();
                let asked: Vec<&str> = waiting.iter().map(|(_, w)| w.as_str()).collect();
                self.violate(
                    rules::ID_ECHO,
                    Kind::Envelope,
                    format!(
                        "a response with id {id} answers none of conform's requests, while {} had no answer with its own id (nor did since): it reads as that answer, under another id: {text}",
                        asked.join(" and ")
                    ),
                );
                if self.violations.len() > before {
                    self.strays.push(Stray {
                        violation: before,
                        waiting: waiting.into_iter().map(|(k, _)| k).collect(),
                        settled,
                    });
                }
            }
            return Incoming::Unusable;
        };
        self.answered(key, out, o)
    }

    fn answered(&mut self, key: String, out: Outstanding, o: Map<String, Value>) -> Incoming {
        let error = o.get("error").filter(|e| !e.is_null()).cloned();
        let outcome = match error {
            Some(e) => {
                self.check_schema("Error", &format!("the error answering {}", out.method), &e);
                Err(e)
            }
            None => {
                let result = o.get("result").cloned().unwrap_or(Value::Null);
                if let Some(def) = schema::schema()
                    .method(&out.method)
                    .and_then(|m| m.result.clone())
                    && !(result.is_null() && schema::schema().requires_nothing(&def))
                {
                    if self.check_schema(&def, &format!("the result of {}", out.method), &result)
                        && self.broken_fields.len() < 64
                    {
                        let at = schema::schema().broken_at(&def, &result, "result");
                        self.broken_fields.extend(at);
                    }
                    self.note_root_fields(&out.method, &def, &result);
                }
                Ok(result)
            }
        };
        self.after_answer(&out, &outcome);
        Incoming::Response {
            key,
            method: out.method,
            outcome,
        }
    }

    /// Fields at the root of a result that the vendored schema does not
    /// define, kept for the case that reports them.
    fn note_root_fields(&mut self, method: &str, def: &str, result: &Value) {
        let (Some(known), Some(fields)) = (schema::schema().root_fields(def), result.as_object())
        else {
            return;
        };
        for field in fields.keys() {
            if !known.contains(&field.as_str()) && self.unknown_root_fields.len() < 64 {
                self.unknown_root_fields
                    .insert((method.to_owned(), field.clone()));
            }
        }
    }

    /// Session bookkeeping once a request of conform's is answered.
    fn after_answer(&mut self, out: &Outstanding, outcome: &Result<Value, Value>) {
        let session = out
            .params
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (out.method.as_str(), outcome) {
            ("initialize", Ok(result)) => {
                self.agent_capabilities = Some(
                    result
                        .get("agentCapabilities")
                        .cloned()
                        .unwrap_or(Value::Object(Map::new())),
                );
            }
            ("session/new", Ok(result)) => {
                if let Some(s) = result.get("sessionId").and_then(Value::as_str) {
                    self.new_session_ids.push(s.to_owned());
                    self.sessions.insert(s.to_owned(), SessionState::Idle);
                }
            }
            ("session/prompt", _) => {
                self.turns_ended += 1;
                if let Some(flow) = session.as_ref().and_then(|s| self.flows.get_mut(s)) {
                    flow.after_reject = None;
                    flow.cancel_sent = false;
                    flow.cancel_read = false;
                }
                if let Some(s) = session {
                    self.sessions.insert(s, SessionState::Idle);
                }
            }
            ("session/load", _) => {
                if let Some(s) = session {
                    self.sessions.insert(s, SessionState::Loaded);
                }
            }
            ("session/resume", _) => {
                if let Some(s) = session {
                    self.sessions.insert(s, SessionState::Idle);
                }
            }
            _ => {}
        }
    }

    /// Lets a session conform did not get from `session/new` here (one to
    /// load or resume) be named without a violation.
    pub fn expect_session(&mut self, session: &str) {
        self.sessions
            .entry(session.to_owned())
            .or_insert(SessionState::Idle);
    }

    /// Whether any prompt turn is unanswered.
    pub fn any_turn_running(&self) -> bool {
        self.sessions
            .values()
            .any(|s| matches!(s, SessionState::Turn(_)))
    }

    /// Whether a prompt turn of `session` is unanswered.
    pub fn turn_running(&self, session: &str) -> bool {
        matches!(self.sessions.get(session), Some(SessionState::Turn(_)))
    }

    /// The session whose running turn is the `session/prompt` with `key`.
    pub fn session_of_turn(&self, key: &str) -> Option<String> {
        self.sessions.iter().find_map(|(session, state)| {
            matches!(state, SessionState::Turn(k) if k == key).then(|| session.clone())
        })
    }

    /// The client capabilities conform advertised.
    pub fn client_capabilities(&self) -> &Value {
        &self.client_capabilities
    }
}

/// The editor's watch in the shared stdio session.
impl Watch for Monitor {
    /// A finding and a closed stdout: nothing more to learn from this agent.
    fn ends_steps(&self, found: &Evidence, closed: bool) -> bool {
        !found.findings.is_empty() && closed
    }

    fn sent(&mut self, message: &Value) -> Option<String> {
        Monitor::sent(self, message)
    }

    /// Raw bytes: each line may be answered with a null id, and the
    /// requests among them are expected to be answered like any other, with
    /// the id of any legal reading of the line (a byte-order mark ignored, a
    /// duplicated id's first or last value: `fuzz::readings`).
    fn sent_raw(&mut self, bytes: &[u8]) {
        for line in bytes.split(|b| *b == b'\n').take(64) {
            if line.is_empty() {
                continue;
            }
            self.sent_malformed();
            if line.len() > table::LINE_LIMIT {
                continue;
            }
            let Some(readings) = Readings::of(line) else {
                self.idless_sent += 1;
                continue;
            };
            if readings
                .objects
                .iter()
                .all(|o| matches!(o.id, None | Some(Id::Null)))
            {
                self.idless_sent += 1;
            }
            for o in &readings.objects {
                let method = o.members.get("method").and_then(Value::as_str);
                match (&o.id, method) {
                    // A request like any other: a null id is legal ("MUST
                    // contain a String, Number, or NULL value if included").
                    (Some(Id::Null), Some(_)) => {
                        let mut message = o.members.clone();
                        message.insert("id".into(), Value::Null);
                        Monitor::sent_exact(self, &Value::Object(message), Some(Id::Null));
                    }
                    // No request: an error about it has a null id, which
                    // every raw line may get already.
                    (Some(Id::Null), None) => {}
                    (Some(id), Some(_)) => {
                        let mut message = o.members.clone();
                        // An id no value holds (`1e400`) keeps a key of its own.
                        message
                            .entry("id")
                            .or_insert_with(|| Value::String(format!("\u{0}{id:?}")));
                        Monitor::sent_exact(self, &Value::Object(message), Some(id.clone()));
                    }
                    (Some(id), None) => self.sent_invalid_with_id(&id.to_value()),
                    (None, _) => {
                        if method.is_some() {
                            // A notification: what it changes, nothing to answer.
                            Monitor::sent(self, &o.value());
                        }
                    }
                }
            }
        }
    }

    fn received(&mut self, payload: &[u8]) -> stdio::Incoming {
        match Monitor::received(self, payload) {
            Incoming::Request { id, method, params } => {
                stdio::Incoming::Request { id, method, params }
            }
            Incoming::Response { key, outcome, .. } => stdio::Incoming::Response { key, outcome },
            Incoming::Notification { .. } | Incoming::Unusable => stdio::Incoming::Other,
        }
    }

    /// "Messages are delimited by newlines (\n)": a last line without its
    /// newline is not a whole message.
    fn ended_inside(&mut self, partial: &[u8]) -> Option<Finding> {
        Monitor::received(self, partial);
        Some(Finding::new(
            Some(rules::NEWLINE_DELIMITED),
            Kind::Framing,
            format!(
                "the agent's last {} bytes on stdout had no newline",
                partial.len()
            ),
        ))
    }

    fn findings(&self) -> Vec<Finding> {
        self.violations
            .iter()
            .map(|v| Finding::new(Some(&v.requirement), v.kind, v.message.clone()))
            .collect()
    }

    fn kept_note(&self) -> Option<String> {
        self.kept.note()
    }

    fn exercised(&self) -> Vec<String> {
        self.exercised.iter().map(|r| (*r).to_owned()).collect()
    }

    /// "When a rpc call is made, the Server MUST reply with a Response".
    fn unanswered_rule(&self) -> Option<&'static str> {
        Some(rules::REPLY)
    }

    fn answered_under_another_id(&self) -> bool {
        Monitor::answered_under_another_id(self)
    }

    fn broken_fields(&self) -> &[String] {
        &self.broken_fields
    }
}

/// An integer id beyond 2^53 and a number equal to it as a double: what a
/// parser that reads numbers as doubles answers.
fn rounded_to_double(sent: &Value, got: &Value) -> bool {
    const EXACT: u64 = 1 << 53;
    let beyond = sent
        .as_i64()
        .map(|n| n.unsigned_abs() > EXACT)
        .or_else(|| sent.as_u64().map(|n| n > EXACT))
        .unwrap_or(false);
    beyond
        && got.is_number()
        && sent != got
        && sent.as_f64().is_some()
        && sent.as_f64() == got.as_f64()
}

/// 7 and "7", or 7 and 7.0: the same id in another JSON type.
fn loosely_same(a: &Value, b: &Value) -> bool {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => n.as_f64().map(|f| {
            if f.fract() == 0.0 && f.abs() < 1e15 {
                format!("{}", f as i64)
            } else {
                f.to_string()
            }
        }),
        _ => None,
    };
    a != b && text(a).is_some() && text(a) == text(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    fn initialized(caps: Value) -> Monitor {
        let mut m = Monitor::new();
        m.sent(&json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":1,"clientCapabilities":caps}}));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}),
        ));
        m.sent(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}),
        ));
        m
    }

    fn requirements(m: &Monitor) -> Vec<&str> {
        m.violations
            .iter()
            .map(|v| v.requirement.as_str())
            .collect()
    }

    #[test]
    fn a_conformant_exchange_breaks_nothing() {
        let mut m = initialized(json!({"fs": {"readTextFile": true}}));
        m.sent(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}]}}));
        let got = m.received(&line(
            json!({"jsonrpc":"2.0","id":0,"method":"fs/read_text_file",
            "params":{"sessionId":"s1","path":"/w/a"}}),
        ));
        assert!(matches!(got, Incoming::Request { .. }));
        m.received(&line(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1",
            "update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"}}}})));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}),
        ));
        assert!(m.violations.is_empty(), "{:?}", m.violations);
        assert_eq!(m.turns_ended, 1);
    }

    #[test]
    fn an_fs_call_the_client_did_not_advertise_is_a_violation() {
        let mut m = initialized(json!({}));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":0,"method":"fs/read_text_file",
            "params":{"sessionId":"s1","path":"/w/a"}}),
        ));
        assert_eq!(requirements(&m), vec!["acp.fs.no-call-without-capability"]);
    }

    #[test]
    fn an_update_after_the_turn_response_is_a_violation() {
        let mut m = initialized(json!({}));
        m.sent(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":"s1","prompt":[]}}));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}),
        ));
        m.received(&line(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1",
            "update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"late"}}}})));
        assert_eq!(requirements(&m), vec![rules::UPDATES_BEFORE_RESPONSE]);
    }

    #[test]
    fn ids_must_come_back_in_their_own_type() {
        let mut m = Monitor::new();
        m.sent(
            &json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1}}),
        );
        let got = m.received(&line(
            json!({"jsonrpc":"2.0","id":"7","result":{"protocolVersion":1}}),
        ));
        assert!(matches!(got, Incoming::Response { .. }));
        assert_eq!(requirements(&m), vec![rules::ID_ECHO]);
    }

    #[test]
    fn noise_and_answers_to_nothing_are_violations() {
        let mut m = Monitor::new();
        m.received(b"starting up");
        m.received(&line(json!({"jsonrpc":"2.0","id":null,"result":null})));
        assert_eq!(
            requirements(&m),
            vec![rules::STDOUT_ONLY, rules::NOTIFICATION_UNANSWERED]
        );
    }

    #[test]
    fn an_answer_under_an_id_never_sent_is_read_by_what_stays_unanswered() {
        // The request never gets an answer with its own id: the stray was
        // its answer, under another id.
        let mut m = initialized(json!({}));
        m.sent(&json!({"jsonrpc":"2.0","id":-7,"method":"x/y","params":{}}));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}),
        ));
        assert_eq!(requirements(&m), vec![rules::ID_ECHO]);
        assert!(m.answered_under_another_id());
        // It does get one: the stray answered nothing of conform's.
        let mut m = initialized(json!({}));
        m.sent(&json!({"jsonrpc":"2.0","id":-7,"method":"x/y","params":{}}));
        m.received(&line(json!({"jsonrpc":"2.0","id":7,"result":{}})));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":-7,"error":{"code":-32601,"message":"no"}}),
        ));
        assert_eq!(requirements(&m), vec![rules::NOTIFICATION_UNANSWERED]);
        assert!(!m.answered_under_another_id());
    }

    #[test]
    fn a_parse_error_for_a_malformed_line_is_expected() {
        let mut m = Monitor::new();
        m.sent_malformed();
        let got = m.received(&line(
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}),
        ));
        assert!(matches!(got, Incoming::Response { .. }));
        assert!(m.violations.is_empty(), "{:?}", m.violations);
    }

    /// A parse error must carry a null id: one with an id answers the line
    /// conform could not have given one, and breaks the id rule, not the
    /// rule against answering notifications.
    #[test]
    fn a_parse_error_with_an_id_breaks_the_id_rule() {
        let mut m = Monitor::new();
        Watch::sent_raw(&mut m, b"{not json\n");
        m.received(&line(
            json!({"jsonrpc":"2.0","id":0,"error":{"code":-32700,"message":"Parse error"}}),
        ));
        assert_eq!(requirements(&m), vec![rules::ID_ECHO]);
        // With no malformed line unanswered, a stray error answers nothing.
        m.received(&line(
            json!({"jsonrpc":"2.0","id":0,"error":{"code":-32700,"message":"Parse error"}}),
        ));
        assert_eq!(
            requirements(&m),
            vec![rules::ID_ECHO, rules::NOTIFICATION_UNANSWERED]
        );
    }

    /// Each legal reading of a raw line is answered without a violation.
    #[test]
    fn a_raw_line_may_be_answered_under_any_legal_reading() {
        let answer = |id: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"no"}}}}"#)
        };
        let cases: &[(&[u8], &str)] = &[
            // RFC 8259 8.1: the byte-order mark ignored, or the line refused.
            (
                b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\"}",
                "5",
            ),
            (
                b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\"}",
                "null",
            ),
            // One number however spelled.
            (br#"{"jsonrpc":"2.0","id":-0,"method":"x"}"#, "0"),
            (br#"{"jsonrpc":"2.0","id":7.0,"method":"x"}"#, "7"),
            (br#"{"jsonrpc":"2.0","id":1e2,"method":"x"}"#, "100.0"),
            // A duplicated id: its first value or its last.
            (br#"{"jsonrpc":"2.0","id":5,"id":6,"method":"x"}"#, "5"),
            (br#"{"jsonrpc":"2.0","id":5,"id":6,"method":"x"}"#, "6"),
            // Bytes that are not UTF-8 inside a string: a lenient reader.
            (b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"x\xff\"}", "8"),
        ];
        for (line, id) in cases {
            let mut m = Monitor::new();
            Watch::sent_raw(&mut m, &[*line, b"\n"].concat());
            let got = Monitor::received(&mut m, answer(id).as_bytes());
            assert!(matches!(got, Incoming::Response { .. }), "{got:?}");
            assert!(
                m.violations.is_empty(),
                "{} answered with {id}: {:?}",
                String::from_utf8_lossy(line),
                m.violations
            );
        }
        // Another type is another id, and one request is answered once.
        let mut m = Monitor::new();
        Watch::sent_raw(&mut m, b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\"}\n");
        Monitor::received(&mut m, answer("\"5\"").as_bytes());
        assert_eq!(requirements(&m), vec![rules::ID_ECHO]);
        let mut m = Monitor::new();
        Watch::sent_raw(
            &mut m,
            b"{\"jsonrpc\":\"2.0\",\"id\":-0,\"method\":\"x\"}\n",
        );
        Monitor::received(&mut m, answer("0").as_bytes());
        Monitor::received(&mut m, answer("0").as_bytes());
        assert_eq!(requirements(&m), vec![rules::NOTIFICATION_UNANSWERED]);
    }

    fn mode_update(session: &str) -> Vec<u8> {
        line(
            json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,
            "update":{"sessionUpdate":"current_mode_update","currentModeId":"ask"}}}),
        )
    }

    /// Seed 11's input 28: `session/new` with a null id, answered with a
    /// null id. "MUST contain a String, Number, or NULL value if included":
    /// it is a request, and its reply gives the session.
    #[test]
    fn a_raw_request_with_a_null_id_is_answered_like_any_other() {
        let mut m = initialized(json!({}));
        Watch::sent_raw(
            &mut m,
            b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"session/new\",\"params\":{\"cwd\":\"/w\",\"mcpServers\":[]}}\n",
        );
        let got = m.received(&line(
            json!({"jsonrpc":"2.0","id":null,"result":{"sessionId":"s9"}}),
        ));
        assert!(
            matches!(&got, Incoming::Response { method, .. } if method == "session/new"),
            "{got:?}"
        );
        m.received(&mode_update("s9"));
        assert!(m.violations.is_empty(), "{:?}", m.violations);
        assert_eq!(m.new_session_ids, vec!["s1", "s9"]);
        // One request, one answer.
        m.received(&line(
            json!({"jsonrpc":"2.0","id":null,"result":{"sessionId":"s10"}}),
        ));
        assert_eq!(requirements(&m), vec![rules::NOTIFICATION_UNANSWERED]);
    }

    /// A null-id error beside a null-id request may be about either: it is
    /// read as the parse error, and the request's own answer still counts.
    #[test]
    fn a_null_id_error_and_a_null_id_request_are_both_expected() {
        let mut m = initialized(json!({}));
        Watch::sent_raw(
            &mut m,
            b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"session/new\",\"params\":{\"cwd\":\"/w\",\"mcpServers\":[]}}\n{oops\n",
        );
        m.received(&line(
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}),
        ));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":null,"result":{"sessionId":"s9"}}),
        ));
        m.received(&mode_update("s9"));
        assert!(m.violations.is_empty(), "{:?}", m.violations);
        // A request conform built with a null id, and no malformed line:
        // its error answers it.
        let mut m = initialized(json!({}));
        let key = m.sent(&json!({"jsonrpc":"2.0","id":null,"method":"session/new","params":{}}));
        let got = m.received(&line(
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Invalid params"}}),
        ));
        assert!(
            matches!(got, Incoming::Response { key: k, .. } if key.as_deref() == Some(k.as_str()))
        );
        assert!(m.violations.is_empty(), "{:?}", m.violations);
    }

    /// Every kind of id conform may send comes back as itself and is
    /// matched; another value is another id.
    #[test]
    fn every_id_reading_matches_its_own_answer_only() {
        // (the id sent, the same id as an agent may write it, another id)
        let cases: &[(&str, &str, &str)] = &[
            ("0", "0", "1"),
            ("0", "-0", "false"),
            ("-1", "-1", "1"),
            (
                "-9007199254740993",
                "-9007199254740993",
                "-9007199254740992.5",
            ),
            ("7.5", "7.5", "7"),
            ("7", "7.0", "7.5"),
            ("1e2", "100", "1e3"),
            ("9007199254740993", "9007199254740993", "9007199254740994"),
            (
                "18446744073709551615",
                "18446744073709551615",
                "18446744073709551614",
            ),
            ("\"\"", "\"\"", "null"),
            ("\"0\"", "\"0\"", "\"00\""),
            ("\"a\\u00e9\"", "\"a\u{e9}\"", "\"a\""),
            ("null", "null", "0"),
        ];
        for (sent, same, other) in cases {
            let request = format!(
                r#"{{"jsonrpc":"2.0","id":{sent},"method":"initialize","params":{{"protocolVersion":1,"clientCapabilities":{{}}}}}}"#
            );
            let answer = |id: &str| {
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":1}}}}"#)
            };
            let mut m = Monitor::new();
            Watch::sent_raw(&mut m, format!("{request}\n").as_bytes());
            let got = m.received(answer(same).as_bytes());
            assert!(
                matches!(&got, Incoming::Response { method, .. } if method == "initialize"),
                "{sent} answered as {same}: {got:?} {:?}",
                m.violations
            );
            assert!(
                m.violations.is_empty(),
                "{sent} answered as {same}: {:?}",
                m.violations
            );
            let mut m = Monitor::new();
            Watch::sent_raw(&mut m, format!("{request}\n").as_bytes());
            m.received(answer(other).as_bytes());
            assert!(
                !m.violations.is_empty(),
                "{sent} answered as {other} was taken for its answer"
            );
        }
    }

    /// The same request sent twice under one id: each answer is its
    /// method's, and a third is an answer to nothing.
    #[test]
    fn a_repeated_id_is_answered_once_per_request() {
        let mut m = initialized(json!({}));
        let new = br#"{"jsonrpc":"2.0","id":5,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}"#;
        Watch::sent_raw(&mut m, &[&new[..], b"\n", &new[..], b"\n"].concat());
        for s in ["s7", "s8"] {
            m.received(&line(
                json!({"jsonrpc":"2.0","id":5,"result":{"sessionId":s}}),
            ));
            m.received(&mode_update(s));
        }
        assert!(m.violations.is_empty(), "{:?}", m.violations);
        m.received(&line(
            json!({"jsonrpc":"2.0","id":5,"result":{"sessionId":"s9"}}),
        ));
        assert_eq!(requirements(&m), vec![rules::NOTIFICATION_UNANSWERED]);
        // Two different requests under one id: neither answer is read as
        // a method's, and neither is a violation.
        let mut m = initialized(json!({}));
        Watch::sent_raw(
            &mut m,
            b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"session/new\",\"params\":{\"cwd\":\"/w\",\"mcpServers\":[]}}\n{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"session/list\",\"params\":{}}\n",
        );
        m.received(&line(
            json!({"jsonrpc":"2.0","id":6,"result":{"sessions":[]}}),
        ));
        m.received(&line(
            json!({"jsonrpc":"2.0","id":6,"result":{"sessionId":"s7"}}),
        ));
        assert!(m.violations.is_empty(), "{:?}", m.violations);
    }
}
