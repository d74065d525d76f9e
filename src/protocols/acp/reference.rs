//! conform's reference ACP agent (the `builtin` target), with a
//! deterministic fake model that follows the prompt script of
//! `corpus/acp/SCRIPT.md`. The agent is sans-IO: [`Agent::handle`] takes one
//! line and returns the messages to write, [`Agent::tick`] ends `wait` turns
//! whose time ran out; [`serve`] is the stdio loop around it.

use super::schema;
use crate::transport::serve::{AfterRefusal, Out, Served};
use crate::wire::{Codec, Refused};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How long a `wait` turn (or an unanswered request) lasts at most.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Where a turn is.
#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// Waiting for `session/cancel` (the `wait` directive).
    Waiting,
    Read,
    Write,
    TerminalCreate,
    TerminalWait(String),
    TerminalOutput(String),
    TerminalRelease(String),
    /// Waiting for the answer to a permission request; then, when allowed,
    /// this write (path, text).
    Permission(Option<(String, String)>),
}

#[derive(Debug)]
struct Turn {
    prompt_id: Value,
    stage: Stage,
    /// The key of the request the turn waits on, if any.
    waiting_on: Option<String>,
    cancelled: bool,
    deadline: Instant,
    /// What the agent said in the turn, for the history.
    said: Vec<String>,
    /// The tool call the turn's work is reported under.
    tool: Option<String>,
}

#[derive(Debug, Clone)]
struct SessionData {
    cwd: String,
    /// (true for the user, text) in order.
    history: Vec<(bool, String)>,
    mode: String,
    model: String,
}

#[derive(Debug, Default)]
pub struct Agent {
    client_capabilities: Value,
    sessions: BTreeMap<String, SessionData>,
    turns: HashMap<String, Turn>,
    /// Request key -> session whose turn sent it.
    requests: HashMap<String, String>,
    next_session: u64,
    next_request: u64,
    next_tool_call: u64,
    /// Stdio MCP servers a session asked for, not yet connected to:
    /// (cwd, server). The stdio loop connects (`serve_on`).
    pub mcp_pending: Vec<(String, Value)>,
}

fn message(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: &Value, code: i64, text: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text.into()}})
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": session, "update": update}})
}

fn chunk(session: &str, user: bool, text: &str) -> Value {
    let kind = if user {
        "user_message_chunk"
    } else {
        "agent_message_chunk"
    };
    update(
        session,
        json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}}),
    )
}

fn modes(current: &str) -> Value {
    json!({"currentModeId": current, "availableModes": [
        {"id": "ask", "name": "Ask", "description": "Answers without changing files"},
        {"id": "code", "name": "Code", "description": "Edits files"}]})
}

fn config_options(model: &str) -> Value {
    json!([{"id": "model", "name": "Model", "category": "model", "type": "select",
        "currentValue": model, "options": [
            {"value": "fast", "name": "Fast"}, {"value": "careful", "name": "Careful"}]}])
}

impl Agent {
    pub fn new() -> Agent {
        Agent {
            client_capabilities: json!({}),
            ..Agent::default()
        }
    }

    fn can(&self, pointer: &str) -> bool {
        super::table::advertised(&self.client_capabilities, pointer)
    }

    /// Handles one line from the client; returns the messages to write.
    pub fn handle(&mut self, line: &[u8], now: Instant) -> Vec<Value> {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return vec![error(&Value::Null, -32700, "Parse error")];
        };
        let Value::Object(o) = value else {
            return vec![error(
                &Value::Null,
                -32600,
                "Invalid Request: not an object",
            )];
        };
        if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let id = o.get("id").cloned().unwrap_or(Value::Null);
            return vec![error(
                &id,
                -32600,
                "Invalid Request: jsonrpc is not \"2.0\"",
            )];
        }
        let params = o.get("params").cloned().unwrap_or(Value::Null);
        match (o.get("method"), o.get("id")) {
            (Some(Value::String(m)), Some(id)) => self.request(m, id, params, now),
            (Some(Value::String(m)), None) => self.notification(m, &params, now),
            (None, Some(id)) if o.contains_key("result") || o.contains_key("error") => {
                let outcome = match o.get("error").filter(|e| !e.is_null()) {
                    Some(e) => Err(e.clone()),
                    None => Ok(o.get("result").cloned().unwrap_or(Value::Null)),
                };
                self.response(id, outcome, now)
            }
            _ => {
                let id = o.get("id").cloned().unwrap_or(Value::Null);
                vec![error(&id, -32600, "Invalid Request")]
            }
        }
    }

    fn request(&mut self, method: &str, id: &Value, params: Value, now: Instant) -> Vec<Value> {
        // Params are checked against the schema first: -32602 for anything off.
        if let Some(m) = schema::schema().method(method)
            && m.side == schema::Side::Agent
            && !m.is_notification()
        {
            let errors = schema::schema().violations(&m.params, &params);
            if !errors.is_empty() {
                return vec![error(
                    id,
                    -32602,
                    format!("Invalid params: {}", errors.join("; ")),
                )];
            }
        } else {
            return vec![error(id, -32601, format!("Method not found: {method}"))];
        }
        let session = params
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let known = session
            .as_ref()
            .is_some_and(|s| self.sessions.contains_key(s));
        let needs_session = !matches!(
            method,
            "initialize"
                | "authenticate"
                | "logout"
                | "session/new"
                | "session/list"
                | "session/delete"
        );
        if needs_session && !known {
            return vec![error(
                id,
                -32602,
                format!("Invalid params: unknown session {session:?}"),
            )];
        }
        let s = session.unwrap_or_default();
        match method {
            "initialize" => {
                self.client_capabilities = params
                    .get("clientCapabilities")
                    .cloned()
                    .unwrap_or(json!({}));
                // "If the Agent supports the requested version, it MUST respond
                // with the same version. Otherwise, the Agent MUST respond with
                // the latest version it supports." It supports 1 only.
                vec![message(
                    id,
                    json!({
                        "protocolVersion": super::table::PROTOCOL_VERSION,
                        "agentCapabilities": {
                            "loadSession": true,
                            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                            "mcpCapabilities": {"http": false, "sse": false},
                            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
                        },
                        "authMethods": [],
                        "agentInfo": {"name": "conform-reference-agent", "version": env!("CARGO_PKG_VERSION")},
                    }),
                )]
            }
            "authenticate" | "logout" => vec![message(id, json!({}))],
            "session/new" => {
                let cwd = params["cwd"].as_str().unwrap_or_default().to_owned();
                if !cwd.starts_with('/') {
                    return vec![error(
                        id,
                        -32602,
                        "Invalid params: cwd must be an absolute path",
                    )];
                }
                // "All Agents MUST support connecting to MCP servers via stdio"
                for server in params["mcpServers"].as_array().into_iter().flatten() {
                    if server.get("command").is_some() {
                        self.mcp_pending.push((cwd.clone(), server.clone()));
                    }
                }
                self.next_session += 1;
                let sid = format!("ref-{}-{}", std::process::id(), self.next_session);
                self.sessions.insert(
                    sid.clone(),
                    SessionData {
                        cwd,
                        history: vec![],
                        mode: "ask".into(),
                        model: "fast".into(),
                    },
                );
                vec![message(
                    id,
                    json!({"sessionId": sid, "modes": modes("ask"),
                    "configOptions": config_options("fast")}),
                )]
            }
            "session/load" => {
                let data = self.sessions[&s].clone();
                // "The Agent MUST replay the entire conversation to the Client
                // in the form of session/update notifications" and respond
                // only when all of it has been streamed.
                let mut out: Vec<Value> = data
                    .history
                    .iter()
                    .map(|(user, text)| chunk(&s, *user, text))
                    .collect();
                out.push(message(
                    id,
                    json!({"modes": modes(&data.mode),
                    "configOptions": config_options(&data.model)}),
                ));
                out
            }
            "session/resume" => {
                let data = &self.sessions[&s];
                vec![message(
                    id,
                    json!({"modes": modes(&data.mode),
                    "configOptions": config_options(&data.model)}),
                )]
            }
            "session/close" => {
                // "The Agent MUST cancel any ongoing work for that session as
                // if session/cancel had been called."
                let mut out = self.cancel(&s, now);
                out.push(message(id, json!({})));
                out
            }
            "session/delete" => {
                let mut out = self.cancel(&s, now);
                self.sessions.remove(&s);
                out.push(message(id, json!({})));
                out
            }
            "session/list" => {
                let cwd = params.get("cwd").and_then(Value::as_str);
                let sessions: Vec<Value> = self
                    .sessions
                    .iter()
                    .filter(|(_, d)| cwd.is_none_or(|c| c == d.cwd))
                    .map(|(sid, d)| json!({"sessionId": sid, "cwd": d.cwd}))
                    .collect();
                vec![message(id, json!({"sessions": sessions}))]
            }
            "session/set_mode" => {
                let mode = params["modeId"].as_str().unwrap_or_default();
                if mode != "ask" && mode != "code" {
                    return vec![error(
                        id,
                        -32602,
                        format!("Invalid params: no mode {mode:?}"),
                    )];
                }
                if let Some(d) = self.sessions.get_mut(&s) {
                    d.mode = mode.to_owned();
                }
                vec![
                    message(id, json!({})),
                    update(
                        &s,
                        json!({"sessionUpdate": "current_mode_update", "currentModeId": mode}),
                    ),
                ]
            }
            "session/set_config_option" => {
                let value = params["value"].as_str().unwrap_or_default();
                if params["configId"] != "model" || !matches!(value, "fast" | "careful") {
                    return vec![error(id, -32602, "Invalid params: unknown option or value")];
                }
                if let Some(d) = self.sessions.get_mut(&s) {
                    d.model = value.to_owned();
                }
                vec![message(id, json!({"configOptions": config_options(value)}))]
            }
            "session/prompt" => self.prompt(id, &s, &params, now),
            _ => vec![error(id, -32601, format!("Method not found: {method}"))],
        }
    }

    fn notification(&mut self, method: &str, params: &Value, now: Instant) -> Vec<Value> {
        match method {
            "session/cancel" => match params.get("sessionId").and_then(Value::as_str) {
                Some(s) => self.cancel(&s.to_owned(), now),
                None => vec![],
            },
            // "MUST send one of these responses for the original request":
            // a cancelled turn answers with the `cancelled` stop reason.
            "$/cancel_request" => {
                let Some(target) = params.get("requestId") else {
                    return vec![];
                };
                let session = self
                    .turns
                    .iter()
                    .find(|(_, t)| &t.prompt_id == target)
                    .map(|(s, _)| s.clone());
                match session {
                    Some(s) => self.cancel(&s, now),
                    None => vec![],
                }
            }
            // Unknown notifications, extension ones included, are ignored.
            _ => vec![],
        }
    }

    /// Cancels the session's turn: at once when nothing is pending, else
    /// when the pending request is answered.
    fn cancel(&mut self, session: &String, now: Instant) -> Vec<Value> {
        let Some(turn) = self.turns.get_mut(session) else {
            return vec![];
        };
        turn.cancelled = true;
        if turn.stage == Stage::Waiting {
            return self.end(session, now);
        }
        vec![]
    }

    fn send_request(&mut self, session: &str, method: &str, params: Value) -> Value {
        self.next_request += 1;
        let id = json!(self.next_request);
        let key = super::monitor::id_key(&id);
        self.requests.insert(key.clone(), session.to_owned());
        if let Some(t) = self.turns.get_mut(session) {
            t.waiting_on = Some(key);
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    fn say(&mut self, session: &str, text: &str) -> Value {
        if let Some(t) = self.turns.get_mut(session) {
            t.said.push(text.to_owned());
        }
        chunk(session, false, text)
    }

    /// `path` as an absolute path: a relative one is the session cwd's.
    fn absolute(&self, session: &str, path: &str) -> String {
        match self.sessions.get(session) {
            Some(d) if !path.starts_with('/') => {
                format!("{}/{path}", d.cwd.trim_end_matches('/'))
            }
            _ => path.to_owned(),
        }
    }

    /// A tool call id unique within the agent (so within every session).
    fn new_tool_call(&mut self, session: &str) -> String {
        self.next_tool_call += 1;
        let call = format!("call-{}", self.next_tool_call);
        if let Some(t) = self.turns.get_mut(session) {
            t.tool = Some(call.clone());
        }
        call
    }

    /// "When the language model requests a tool invocation, the Agent
    /// SHOULD report it to the Client", then marks it in progress.
    fn start_tool(&mut self, session: &str, kind: &str, title: &str) -> Vec<Value> {
        let call = self.new_tool_call(session);
        vec![
            update(
                session,
                json!({"sessionUpdate": "tool_call", "toolCallId": call,
                "title": title, "kind": kind, "status": "pending"}),
            ),
            update(
                session,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                "status": "in_progress"}),
            ),
        ]
    }

    /// The final status of the turn's tool call, if it has one.
    fn finish_tool(&mut self, session: &str, status: &str) -> Vec<Value> {
        let Some(call) = self.turns.get_mut(session).and_then(|t| t.tool.take()) else {
            return vec![];
        };
        vec![update(
            session,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status}),
        )]
    }

    fn prompt(&mut self, id: &Value, s: &str, params: &Value, now: Instant) -> Vec<Value> {
        if self.turns.contains_key(s) {
            return vec![error(
                id,
                -32602,
                "Invalid params: a turn is already running on this session",
            )];
        }
        let blocks = params["prompt"].as_array().cloned().unwrap_or_default();
        for b in &blocks {
            let kind = b["type"].as_str().unwrap_or_default();
            if matches!(kind, "image" | "audio") {
                return vec![error(
                    id,
                    -32602,
                    format!("Invalid params: {kind} content is not supported"),
                )];
            }
        }
        let text: String = blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        if let Some(d) = self.sessions.get_mut(s) {
            d.history.push((true, text.clone()));
        }
        self.turns.insert(
            s.to_owned(),
            Turn {
                prompt_id: id.clone(),
                stage: Stage::Waiting,
                waiting_on: None,
                cancelled: false,
                deadline: now + WAIT_LIMIT,
                said: vec![],
                tool: None,
            },
        );
        let first = text.lines().next().unwrap_or_default();
        let (directive, rest) = match first.strip_prefix("conform: ") {
            Some(d) => d.split_once(' ').unwrap_or((d, "")),
            None => ("", ""),
        };
        let mut out = Vec::new();
        let mut words = rest.split(' ').filter(|w| !w.is_empty());
        let stage = match directive {
            "echo" => {
                out.push(self.say(s, rest));
                None
            }
            "read" | "read-from" if self.can("/fs/readTextFile") => {
                // "All file paths in the protocol MUST be absolute": a path
                // the prompt gives relative is the session cwd's.
                let path = self.absolute(s, words.next().unwrap_or_default());
                out.extend(self.start_tool(s, "read", &format!("Read {path}")));
                let mut params = json!({"sessionId": s, "path": path});
                if let Some(line) = words.next().and_then(|l| l.parse::<u64>().ok()) {
                    params["line"] = json!(line);
                }
                out.push(self.send_request(s, "fs/read_text_file", params));
                Some(Stage::Read)
            }
            "write" if self.can("/fs/writeTextFile") => {
                let (path, content) = rest.split_once(' ').unwrap_or((rest, ""));
                let path = self.absolute(s, path);
                out.extend(self.start_tool(s, "edit", &format!("Write {path}")));
                out.push(self.send_request(
                    s,
                    "fs/write_text_file",
                    json!({"sessionId": s, "path": path, "content": content}),
                ));
                Some(Stage::Write)
            }
            "terminal" if self.can("/terminal") => {
                let command = words.next().unwrap_or("true").to_owned();
                let args: Vec<&str> = words.collect();
                out.extend(self.start_tool(s, "execute", &format!("Run {command}")));
                out.push(self.send_request(
                    s,
                    "terminal/create",
                    json!({"sessionId": s, "command": command, "args": args}),
                ));
                Some(Stage::TerminalCreate)
            }
            "read" | "read-from" | "write" | "terminal" => {
                // The client offers no way: the tool is reported, and fails.
                let why = format!("the client does not offer what `{directive}` needs");
                out.extend(self.start_tool(s, "other", directive));
                out.extend(self.finish_tool(s, "failed"));
                out.push(self.say(s, &why));
                None
            }
            "permission" => {
                let write = rest
                    .split_once(' ')
                    .map(|(p, t)| (p.to_owned(), t.to_owned()));
                let call = self.new_tool_call(s);
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call", "toolCallId": call,
                    "title": "Edit a file", "kind": "edit", "status": "pending"}),
                ));
                out.push(self.send_request(
                    s,
                    "session/request_permission",
                    json!({
                    "sessionId": s, "toolCall": {"toolCallId": call},
                    "options": [
                        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]}),
                ));
                Some(Stage::Permission(write))
            }
            "tool" => {
                let call = self.new_tool_call(s);
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call", "toolCallId": call,
                    "title": "Look at the workspace", "kind": "read", "status": "pending"}),
                ));
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                    "status": "in_progress"}),
                ));
                out.push(update(
                    s,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                    "status": "completed", "content": [{"type": "content",
                        "content": {"type": "text", "text": "looked"}}]}),
                ));
                None
            }
            "plan" => {
                // "The Agent MUST send a complete list of all plan entries in
                // each update and their current status."
                for (first, second) in [("in_progress", "pending"), ("completed", "completed")] {
                    out.push(update(
                        s,
                        json!({"sessionUpdate": "plan", "entries": [
                        {"content": "Read the notes", "priority": "high", "status": first},
                        {"content": "Answer", "priority": "medium", "status": second}]}),
                    ));
                }
                None
            }
            "wait" => Some(Stage::Waiting),
            _ => {
                out.push(self.say(s, "conform reference agent: nothing to do"));
                None
            }
        };
        match stage {
            Some(st) => {
                if let Some(t) = self.turns.get_mut(s) {
                    t.stage = st;
                }
            }
            None => out.extend(self.end(s, now)),
        }
        out
    }

    /// Ends the session's turn with its stop reason.
    fn end(&mut self, session: &str, _now: Instant) -> Vec<Value> {
        let Some(turn) = self.turns.remove(session) else {
            return vec![];
        };
        if let Some(d) = self.sessions.get_mut(session) {
            for said in turn.said {
                d.history.push((false, said));
            }
        }
        let reason = if turn.cancelled {
            "cancelled"
        } else {
            "end_turn"
        };
        vec![message(&turn.prompt_id, json!({"stopReason": reason}))]
    }

    fn response(&mut self, id: &Value, outcome: Result<Value, Value>, now: Instant) -> Vec<Value> {
        let key = super::monitor::id_key(id);
        let Some(s) = self.requests.remove(&key) else {
            return vec![];
        };
        let Some(turn) = self.turns.get_mut(&s) else {
            return vec![];
        };
        if turn.waiting_on.as_deref() != Some(key.as_str()) {
            return vec![];
        }
        turn.waiting_on = None;
        let cancelled = turn.cancelled;
        let stage = turn.stage.clone();
        let text_of = |o: &Result<Value, Value>, field: &str| match o {
            Ok(r) => r
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            Err(e) => format!("the client answered an error: {e}"),
        };
        let mut out = Vec::new();
        match stage {
            Stage::Read => {
                let status = if cancelled || outcome.is_err() {
                    "failed"
                } else {
                    "completed"
                };
                out.extend(self.finish_tool(&s, status));
                if !cancelled {
                    let text = text_of(&outcome, "content");
                    out.push(self.say(&s, &text));
                }
            }
            Stage::Write => {
                let status = if cancelled || outcome.is_err() {
                    "failed"
                } else {
                    "completed"
                };
                out.extend(self.finish_tool(&s, status));
                if !cancelled {
                    out.push(self.say(&s, "written"));
                }
            }
            Stage::TerminalCreate => {
                if let Ok(r) = &outcome
                    && let Some(t) = r.get("terminalId").and_then(Value::as_str)
                {
                    let t = t.to_owned();
                    let (method, next) = if cancelled {
                        ("terminal/release", Stage::TerminalRelease(String::new()))
                    } else {
                        ("terminal/wait_for_exit", Stage::TerminalWait(t.clone()))
                    };
                    out.push(self.send_request(
                        &s,
                        method,
                        json!({"sessionId": s, "terminalId": t}),
                    ));
                    self.set_stage(&s, next, &t);
                    return out;
                }
                out.extend(self.finish_tool(&s, "failed"));
                out.push(self.say(&s, &text_of(&outcome, "terminalId")));
            }
            Stage::TerminalWait(t) => {
                let (method, next) = if cancelled {
                    ("terminal/release", Stage::TerminalRelease(String::new()))
                } else {
                    ("terminal/output", Stage::TerminalOutput(t.clone()))
                };
                out.push(self.send_request(&s, method, json!({"sessionId": s, "terminalId": t})));
                self.set_stage(&s, next, &t);
                return out;
            }
            Stage::TerminalOutput(t) => {
                let text = text_of(&outcome, "output");
                out.push(self.send_request(
                    &s,
                    "terminal/release",
                    json!({"sessionId": s, "terminalId": t}),
                ));
                self.set_stage(&s, Stage::TerminalRelease(text), &t);
                return out;
            }
            Stage::TerminalRelease(text) => {
                let status = if cancelled { "failed" } else { "completed" };
                out.extend(self.finish_tool(&s, status));
                if !cancelled {
                    out.push(self.say(&s, &text));
                }
            }
            Stage::Permission(write) => {
                let chosen = outcome
                    .as_ref()
                    .ok()
                    .and_then(|r| r.pointer("/outcome/optionId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match chosen.as_deref() {
                    // The client answers `cancelled` once it cancelled the
                    // turn: the tool does not run, and the client marks it.
                    _ if cancelled => {}
                    Some("allow") => {
                        let call = self.turns.get(&s).and_then(|t| t.tool.clone());
                        out.push(update(
                            &s,
                            json!({"sessionUpdate": "tool_call_update",
                            "toolCallId": call, "status": "in_progress"}),
                        ));
                        match write {
                            Some((path, content)) if self.can("/fs/writeTextFile") => {
                                out.push(self.send_request(
                                    &s,
                                    "fs/write_text_file",
                                    json!({"sessionId": s, "path": path, "content": content}),
                                ));
                                self.set_stage(&s, Stage::Write, "");
                                return out;
                            }
                            _ => out.extend(self.finish_tool(&s, "completed")),
                        }
                    }
                    // "`reject_once` - Reject this operation only this time"
                    _ => out.extend(self.finish_tool(&s, "failed")),
                }
            }
            Stage::Waiting => {}
        }
        out.extend(self.end(&s, now));
        out
    }

    fn set_stage(&mut self, session: &str, stage: Stage, _terminal: &str) {
        if let Some(t) = self.turns.get_mut(session) {
            t.stage = stage;
        }
    }

    /// Ends turns whose time ran out; returns the messages to write.
    pub fn tick(&mut self, now: Instant) -> Vec<Value> {
        let due: Vec<String> = self
            .turns
            .iter()
            .filter(|(_, t)| now >= t.deadline)
            .map(|(s, _)| s.clone())
            .collect();
        let mut out = Vec::new();
        for s in due {
            out.extend(self.end(&s, now));
        }
        out
    }

    /// The earliest turn deadline, for the loop's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.turns.values().map(|t| t.deadline).min()
    }
}

/// The most of one line the reference reads; a longer one is answered as a
/// parse error and skipped.
const LINE_LIMIT: usize = 64 * 1024 * 1024;

/// The reference agent as a served peer.
impl Served for Agent {
    fn codec(&self) -> Codec {
        Codec::Lines { limit: LINE_LIMIT }
    }

    fn handle(&mut self, line: &[u8], now: Instant) -> Vec<Out> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return vec![];
        }
        Agent::handle(self, line, now)
            .into_iter()
            .map(Out::Message)
            .collect()
    }

    fn refused(&mut self, _: &Refused, _: Instant) -> (Vec<Out>, AfterRefusal) {
        let parse_error = error(&Value::Null, -32700, "Parse error: line too long");
        (vec![Out::Message(parse_error)], AfterRefusal::Go)
    }

    fn next_deadline(&self) -> Option<Instant> {
        Agent::next_deadline(self)
    }

    fn tick(&mut self, now: Instant) -> Vec<Out> {
        Agent::tick(self, now)
            .into_iter()
            .map(Out::Message)
            .collect()
    }
}

/// The reference agent with its stdio: it connects to the MCP servers its
/// sessions name.
struct Connected {
    agent: Agent,
    /// The connections to MCP servers, ended with the agent.
    mcp: Vec<tokio::task::JoinHandle<()>>,
}

impl Served for Connected {
    fn codec(&self) -> Codec {
        self.agent.codec()
    }

    fn handle(&mut self, line: &[u8], now: Instant) -> Vec<Out> {
        let out = Served::handle(&mut self.agent, line, now);
        for (cwd, server) in std::mem::take(&mut self.agent.mcp_pending) {
            self.mcp.push(tokio::spawn(connect_mcp(cwd, server)));
        }
        out
    }

    fn refused(&mut self, why: &Refused, now: Instant) -> (Vec<Out>, AfterRefusal) {
        self.agent.refused(why, now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        Agent::next_deadline(&self.agent)
    }

    fn tick(&mut self, now: Instant) -> Vec<Out> {
        Served::tick(&mut self.agent, now)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        for task in &self.mcp {
            task.abort();
        }
    }
}

/// Starts the stdio MCP server `server` in `cwd` and shakes hands with it:
/// MCP's `initialize`, `notifications/initialized` and `tools/list`, each
/// answer awaited at most 5 s; then keeps it until the agent ends. A server
/// that fails is left alone: the session stands.
async fn connect_mcp(cwd: String, server: Value) {
    use crate::matcher::shell_quote;
    use crate::transport::stdio::{Launcher, StreamEvent};
    let command = server["command"].as_str().unwrap_or_default();
    let args: Vec<String> = server["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(shell_quote))
        .collect();
    let env: Vec<(String, String)> = server["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?.to_owned(),
                v["value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let env: Vec<(&str, &std::ffi::OsStr)> = env
        .iter()
        .map(|(k, v)| (k.as_str(), std::ffi::OsStr::new(v.as_str())))
        .collect();
    let line = format!(
        "cd {} && exec {} {}",
        shell_quote(&cwd),
        shell_quote(command),
        args.join(" ")
    );
    let Ok(mut stream) = Launcher::Command(line).start(&env, Codec::Lines { limit: LINE_LIMIT })
    else {
        return;
    };
    let within = Duration::from_secs(5);
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "conform-reference-agent", "version": env!("CARGO_PKG_VERSION")}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
    ];
    for m in messages {
        if stream
            .send(format!("{m}\n").as_bytes(), within)
            .await
            .is_err()
        {
            return;
        }
        let Some(id) = m.get("id") else { continue };
        let until = tokio::time::Instant::now() + within;
        loop {
            match stream.next(until).await {
                Some((_, StreamEvent::Line(l))) => {
                    if serde_json::from_slice::<Value>(&l).is_ok_and(|v| v.get("id") == Some(id)) {
                        break;
                    }
                }
                _ => return,
            }
        }
    }
    // Keep the server until the agent ends (its stdout read, so it never blocks).
    while let Some((_, ev)) = stream
        .next(tokio::time::Instant::now() + Duration::from_secs(3600))
        .await
    {
        if matches!(ev, StreamEvent::Closed { .. }) {
            break;
        }
    }
}

/// Serves the reference agent on `input` and `output` until the input ends.
pub async fn serve_on(
    input: impl tokio::io::AsyncRead + Unpin,
    output: impl tokio::io::AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut agent = Connected {
        agent: Agent::new(),
        mcp: Vec::new(),
    };
    crate::transport::serve::serve(&mut agent, input, output).await
}

/// Serves the reference agent on this process's stdin and stdout until
/// stdin ends.
pub async fn serve() -> std::io::Result<()> {
    serve_on(tokio::io::stdin(), tokio::io::stdout()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(agent: &mut Agent, v: Value) -> Vec<Value> {
        agent.handle(v.to_string().as_bytes(), Instant::now())
    }

    fn started(caps: Value) -> (Agent, String) {
        let mut a = Agent::new();
        send(
            &mut a,
            json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":1,"clientCapabilities":caps}}),
        );
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":1,"method":"session/new",
            "params":{"cwd":"/w","mcpServers":[]}}),
        );
        let s = out[0]["result"]["sessionId"].as_str().unwrap().to_owned();
        (a, s)
    }

    #[test]
    fn echo_answers_with_one_chunk_and_end_turn() {
        let (mut a, s) = started(json!({}));
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: echo hi"}]}}),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["params"]["update"]["content"]["text"], "hi");
        assert_eq!(out[1]["result"]["stopReason"], "end_turn");
    }

    #[test]
    fn read_without_the_capability_makes_no_request() {
        let (mut a, s) = started(json!({}));
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: read /w/notes.txt"}]}}),
        );
        assert!(
            out.iter()
                .all(|m| m.get("method") != Some(&json!("fs/read_text_file")))
        );
        assert_eq!(out.last().unwrap()["result"]["stopReason"], "end_turn");
    }

    #[test]
    fn cancel_during_a_pending_permission_ends_cancelled_after_the_answer() {
        let (mut a, s) = started(json!({}));
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: permission"}]}}),
        );
        let req = out
            .iter()
            .find(|m| m["method"] == "session/request_permission")
            .unwrap();
        assert!(
            send(
                &mut a,
                json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":s}})
            )
            .is_empty()
        );
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":req["id"],"result":{"outcome":{"outcome":"cancelled"}}}),
        );
        assert_eq!(
            out,
            vec![json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}})]
        );
    }

    #[test]
    fn load_replays_the_history_before_its_response() {
        let (mut a, s) = started(json!({}));
        send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: echo one"}]}}),
        );
        let out = send(
            &mut a,
            json!({"jsonrpc":"2.0","id":3,"method":"session/load",
            "params":{"sessionId":s,"cwd":"/w","mcpServers":[]}}),
        );
        let kinds: Vec<&str> = out
            .iter()
            .map(|m| {
                m.pointer("/params/update/sessionUpdate")
                    .and_then(Value::as_str)
                    .unwrap_or("response")
            })
            .collect();
        assert_eq!(
            kinds,
            vec!["user_message_chunk", "agent_message_chunk", "response"]
        );
    }

    #[test]
    fn malformed_input_gets_json_rpc_errors() {
        let mut a = Agent::new();
        assert_eq!(
            a.handle(b"{not json", Instant::now())[0]["error"]["code"],
            -32700
        );
        assert_eq!(
            send(&mut a, json!({"jsonrpc":"2.0","id":5,"method":"nope"}))[0]["error"]["code"],
            -32601
        );
        assert_eq!(
            send(
                &mut a,
                json!({"jsonrpc":"2.0","id":6,"method":"session/new","params":{}})
            )[0]["error"]["code"],
            -32602
        );
        assert!(send(&mut a, json!({"jsonrpc":"2.0","method":"_x/note"})).is_empty());
    }

    #[test]
    fn a_wait_turn_ends_when_its_time_runs_out() {
        let (mut a, s) = started(json!({}));
        send(
            &mut a,
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":s,"prompt":[{"type":"text","text":"conform: wait"}]}}),
        );
        assert!(a.tick(Instant::now()).is_empty());
        let out = a.tick(Instant::now() + WAIT_LIMIT);
        assert_eq!(out[0]["result"]["stopReason"], "end_turn");
    }
}
